"""inference.agent_engine (no Beam): an ADK app on Vertex AI Agent Engine
(projects/P/locations/L/reasoningEngines/ID), through google-cloud-aiplatform's
ReasoningEngineExecutionService REST client with Application Default Credentials (google-auth), as the
agent_engines SDK calls it: `create_session` with the `query` API, each turn with the `stream_query` class
method of the streamQuery API. One case = one session, created from the case's session_input.

Every request goes through metrics.agents.calls.Calls (the quota, timeouts, metrics.retry's policy). A
retry re-sends only the request that failed: the turns already answered are never sent again, and the
conversation carries on in the same session; a turn that timed out or whose stream broke off is not sent
again (the agent may have run it). The streamed ADK events become the case's turns as `inference.agent`
makes them (metrics.rows.trace.turn_from_events), so the same agent gives the same trace in-process or here.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.inference import InferenceError, describe, user_turns
from evalbeam.metrics.judge.providers import CLOUD_PLATFORM_SCOPE, remember_tokens, scrub_secrets
from evalbeam.metrics.retry import Transient, transient_for_status
from evalbeam.metrics.rows.trace import turn_from_events


class AgentEngineInferrer:
    """inference.agent_engine: each case one session of the ADK app on Agent Engine,
    created from the case's session_input (user_id, state); its turns sent with
    stream_query, the ADK events streamed back made into its turns."""

    def __init__(self, resource: str, calls: Calls, base_url: str | None = None, max_concurrency: int = 8):
        import concurrent.futures

        self._resource = resource
        self._calls = calls
        self._base_url = base_url
        self._client = None
        self._opening: asyncio.Lock | None = None
        # the REST client is synchronous: its calls run in a pool of threads. A call whose case timed out
        # (timeout_seconds) goes on in its thread until the client's own timeout, so the pool has room for
        # one such call per case in flight: the next case's requests do not queue behind it (and time out)
        self._pool = concurrent.futures.ThreadPoolExecutor(2 * max_concurrency, thread_name_prefix="evalbeam-engine")

    def client(self):
        if self._client is None:
            self._client, self._credentials = engine_client(self._resource, self._base_url)
        return self._client

    async def _open(self) -> None:
        """The REST client, made once (in the pool) before the first request: its imports and the loading
        of the credentials are no request to the agent, so request_timeout_seconds does not count them
        (a first create_session would otherwise time out, and its retries with it, on a slow import)."""
        if self._client is not None:
            return
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._client is None:
                await self._run(self.client)

    def scrub(self, text: str) -> str:
        """An error's text without the access token, should the endpoint repeat it (as the judge's are)."""
        return scrub_secrets(text, None, getattr(self, "_credentials", None))

    def classify(self, error: BaseException) -> Transient | None:
        from google.api_core import exceptions

        if isinstance(error, exceptions.GoogleAPICallError):
            response = getattr(error, "response", None)
            headers = getattr(response, "headers", None)
            return transient_for_status(error.code, self.scrub(str(error.message)), headers)
        import requests

        if isinstance(error, (requests.ConnectionError, requests.Timeout)):
            return Transient(f"{type(error).__name__}: {str(error)[:300]}", maybe_ran=not _never_sent(error))
        return None

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _turn(self, user_id: str, session_id: str, message: str) -> list[dict[str, Any]]:
        """One stream_query in the pool. Given up (request_timeout_seconds, timeout_seconds), its stream
        is closed: the client's own timeout is per read, so a stream that sends a byte now and then
        would keep its thread reading for ever (and the process from exiting)."""
        opened: list = []
        try:
            return await self._run(self._stream_query, user_id, session_id, message, opened)
        except asyncio.CancelledError:
            for stream in opened:
                stream.cancel()  # google.api_core's ResponseIterator: closes the HTTP response
            raise

    def _create_session(self, user_id: str, state: dict) -> str:
        from google.cloud.aiplatform_v1 import types

        response = self.client().query_reasoning_engine(request=types.QueryReasoningEngineRequest(
            name=self._resource, class_method="create_session", input={"user_id": user_id, "state": state},
        ), timeout=self._calls.request_timeout)
        output = _message_dict(response).get("output", {})
        session = output.get("output", output) if isinstance(output, dict) else output
        if not isinstance(session, dict) or not session.get("id"):
            raise InferenceError(f"Agent Engine's create_session answered without a session id: {str(session)[:200]}")
        return session["id"]

    def _stream_query(self, user_id: str, session_id: str, message: str, opened: list | None = None) -> list[dict[str, Any]]:
        from google.cloud.aiplatform_v1 import types
        from google.protobuf import json_format

        stream = self.client().stream_query_reasoning_engine(request=types.StreamQueryReasoningEngineRequest(
            name=self._resource, class_method="stream_query",
            input={"message": message, "user_id": user_id, "session_id": session_id},
        ), timeout=self._calls.request_timeout)
        if opened is not None:
            opened.append(stream)  # for _turn to close, should the turn be given up
        events = []
        try:
            for chunk in stream:  # HttpBody chunks, each one or more JSON lines (the SDK's yield_parsed_json)
                if "application/json" not in (chunk.content_type or ""):
                    continue
                for line in chunk.data.decode("utf-8").split("\n"):
                    if line.strip():
                        events.append(json.loads(line))
        except (ValueError, UnicodeDecodeError, json_format.ParseError) as e:
            # a malformed line, bytes that are not UTF-8, an element that is no HttpBody (an error object),
            # a stream cut short (the client's "Unfinished stream: <the rest>"): the case's error, in short,
            # not sent again (the turn may have run); the client's message can quote the stream, cut here
            text = str(e).splitlines()[0] if str(e) else ""
            text = text.split(":", 1)[0] if text.startswith("Unfinished stream") else text[:200]
            raise InferenceError(f"Agent Engine's stream could not be read ({type(e).__name__}: {text}) "
                                 f"after {len(events)} event(s)") from None
        return events

    async def infer(self, fields: dict[str, Any]) -> Any:
        try:
            return await self._infer(fields)
        except Exception as e:  # noqa: BLE001 - not transient: the case's error (describe), without the token
            raise InferenceError(self.scrub(describe(e))) from None

    async def _infer(self, fields: dict[str, Any]) -> Any:
        conversation = await self._conversation(fields)
        return [(await conversation.send(prompt))[0] for prompt in user_turns(fields)]

    async def conversation(self, fields: dict[str, Any]) -> "EngineConversation":
        """The case's session, created with its session_input (user_id, state): for the user simulator."""
        try:
            return await self._conversation(fields)
        except Exception as e:  # noqa: BLE001 - not transient: the case's error (describe), without the token
            raise InferenceError(self.scrub(describe(e))) from None

    async def _conversation(self, fields: dict[str, Any]) -> "EngineConversation":
        case = fields.get("adk_case")
        session_input = (case.get("session_input") or {}) if isinstance(case, dict) else {}
        user_id = session_input.get("user_id") or "evalbeam_user"
        state = dict(session_input.get("state") or {})
        await self._open()
        session_id = await self._calls.call(
            "create_session", lambda: self._run(self._create_session, user_id, state), self.classify)
        return EngineConversation(self, user_id, session_id)

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class EngineConversation:
    """One case's Agent Engine session: `send(prompt)` is one stream_query -> (the turn, its events as
    ADK's Event JSON, the user's first), as metrics.agents.inference.AgentConversation gives them."""

    def __init__(self, inferrer: AgentEngineInferrer, user_id: str, session_id: str):
        self._inferrer, self._user_id, self._session_id = inferrer, user_id, session_id
        self._sent = 0

    async def send(self, prompt: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        inferrer = self._inferrer
        self._sent += 1
        number = self._sent
        started = time.monotonic()
        try:
            events = await inferrer._calls.call(f"turn {number}",
                                                lambda: inferrer._turn(self._user_id, self._session_id, prompt),
                                                inferrer.classify, resend=False)
        except InferenceError as e:
            text = inferrer.scrub(str(e))
            raise InferenceError(text if text.startswith("turn ") else f"turn {number}: {text}") from None
        except Exception as e:  # noqa: BLE001 - not transient: the case's error, without the token
            text = str(e).splitlines()[0][:500] if str(e) else ""
            raise InferenceError(inferrer.scrub(f"turn {number}: {type(e).__name__}: {text}")) from None
        errors = [e for e in events if isinstance(e, dict) and e.get("error_code") and not e.get("content")]
        if errors:
            raise InferenceError(inferrer.scrub(f"the agent's turn {number} ended with {errors[-1]['error_code']}: "
                                                f"{errors[-1].get('error_message', '')}"[:500]))
        events = [e for e in events if isinstance(e, dict) and "author" in e]
        turn = turn_from_events(prompt, events, time.monotonic() - started)
        user = {"author": "user", "content": {"role": "user", "parts": [{"text": prompt}]}}
        return turn, [user, *events] if events else []


def _never_sent(error: BaseException) -> bool:
    """Whether a requests failure happened before the request reached the endpoint (no connection
    made), as opposed to after (a read timeout, the connection closed without an answer)."""
    import requests
    from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError

    if isinstance(error, requests.ConnectTimeout):
        return True
    reason = error.args[0] if error.args else None
    if isinstance(reason, MaxRetryError):
        reason = reason.reason
    return isinstance(reason, (NewConnectionError, ConnectTimeoutError))


def _message_dict(message: Any) -> dict[str, Any]:
    """A proto-plus response as JSON values (what the agent_engines SDK's _utils.to_dict does)."""
    from google.protobuf import json_format

    return json_format.MessageToDict(type(message).pb(message))


def engine_client(resource: str, base_url: str | None = None):
    """(google-cloud-aiplatform's ReasoningEngineExecutionService client (REST) for the
    engine's region, on Application Default Credentials; the credentials it uses).
    `base_url` (tests: a local stand-in) replaces the regional endpoint."""
    import google.auth
    from google.api_core.client_options import ClientOptions
    from google.cloud.aiplatform_v1.services.reasoning_engine_execution_service import (
        ReasoningEngineExecutionServiceClient,
    )

    credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    client = ReasoningEngineExecutionServiceClient(
        credentials=credentials, transport="rest",
        client_options=ClientOptions(api_endpoint=engine_endpoint(resource, base_url)))
    # the credentials it signs with: every token they hold is scrubbed from errors
    return client, remember_tokens(client._transport._credentials)


def engine_endpoint(resource: str, base_url: str | None = None) -> str:
    """The REST endpoint of the engine's region (projects/P/locations/L/...), or `base_url` (tests: a
    local stand-in) in its place."""
    location = resource.split("/")[3]
    return base_url.rstrip("/") if base_url else f"https://{location}-aiplatform.googleapis.com"
