"""Deployed agents: inferrers for an agent reached over the network (no Beam).

    A2AInferrer          inference.a2a: an agent served over A2A (agent card at
                         <url>/.well-known/agent-card.json), through the a2a-sdk client.
                         One case = one A2A conversation (one context), one user turn =
                         one message.
    AgentEngineInferrer  inference.agent_engine: an ADK app on Vertex AI Agent Engine
                         (projects/P/locations/L/reasoningEngines/ID), through
                         google-cloud-aiplatform's ReasoningEngineExecutionService REST
                         client with Application Default Credentials (google-auth), as the
                         agent_engines SDK calls it: `create_session` with the `query` API,
                         each turn with the `stream_query` class method of the streamQuery API.

Both send every request through `Calls`: the job's quota (the judge layer's one
rate limiter, metrics.judge.ratelimit.AdaptiveRateLimiter, with this worker's share),
a per-request timeout, and retries by the one policy (metrics.retry: on 429 after the
server's Retry-After, 408, 5xx, timeouts and connections refused). A retry re-sends only the request that failed: turns
already answered are kept, never sent again, and the conversation carries on in the same
context/session. A turn that timed out or whose stream broke off is not sent again (the agent
may have run it: its message would be in the conversation twice); it fails the case. Both turn the agent's ADK events into the case's turns as
`inference.agent` does (metrics.rows.trace.turns_from_agent_data), so the same agent run
in-process, over A2A or on Agent Engine gives the same trace.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
import uuid
from typing import Any

from evalbeam.metrics.agents.a2a_card import a2a_card, foreign_endpoint, security_schemes
from evalbeam.metrics.agents.a2a_events import events_from_a2a
from evalbeam.metrics.agents.auth import REFUSED_STATUS, A2AAuth, AuthUnavailable, refused_status
from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.inference import InferenceError, describe, user_turns
from evalbeam.metrics.judge.providers import remember_tokens
from evalbeam.metrics.retry import Transient, transient_for_status
from evalbeam.metrics.rows.trace import turn_from_events

AGENT_ENGINE_RE = r"^projects/[^/]+/locations/[^/]+/reasoningEngines/[^/]+$"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


class A2AInferrer:
    """inference.a2a: each case one A2A conversation with the agent at `url`."""

    def __init__(self, url: str, calls: Calls, max_concurrency: int = 8, auth: dict[str, Any] | None = None):
        self._target = url
        self._url, self._card_path = a2a_card(url)
        self._auth_config = auth  # inference.auth (plain data): A2AAuth is made on the loop, in _open
        self._auth: A2AAuth | None = None
        self._schemes = ""  # the securitySchemes the card declares, in words (for a refusal's error)
        self._connections = max(100, max_concurrency)  # httpx's default pool (100) must not cap the cases in flight
        self._calls = calls
        self._client = None
        self._http = None
        self._name = "agent"
        self._opening: asyncio.Lock | None = None
        self._unreadable: InferenceError | None = None  # the card could not be read: every case's error

    @staticmethod
    def classify(error: BaseException) -> Transient | None:
        import httpx
        from a2a.client import A2AClientError, A2AClientTimeoutError

        if isinstance(error, A2AClientTimeoutError) and isinstance(error.__cause__, httpx.TimeoutException):
            error = error.__cause__  # which timeout: connecting (never sent) or waiting for the answer
        if isinstance(error, (A2AClientTimeoutError, httpx.TimeoutException)):
            return Transient(f"timed out: {error}", maybe_ran=not isinstance(error, httpx.ConnectTimeout))
        if isinstance(error, httpx.TransportError):
            try:
                where = f" ({error.request.url})"  # the endpoint the agent card named
            except RuntimeError:  # no request attached
                where = ""
            return Transient(f"{type(error).__name__}: {error}{where}", maybe_ran=not isinstance(error, httpx.ConnectError))
        if isinstance(error, httpx.HTTPStatusError):
            return transient_for_status(error.response.status_code, error.response.reason_phrase, error.response.headers)
        cause = error.__cause__ or error.__context__
        if isinstance(error, A2AClientError) and cause is not None and cause is not error:
            return A2AInferrer.classify(cause)
        status = getattr(error, "status_code", None)
        return transient_for_status(status, str(error)) if status else None

    async def _open(self):
        """The agent card (read once, as a request: paced and retried), then a client for the
        transport it names."""
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._unreadable is not None:  # already retried max_attempts times: not again per case
                raise self._unreadable
            if self._client is None:
                import httpx
                from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
                from google.protobuf.json_format import MessageToDict

                if self._auth_config and self._auth is None:
                    try:
                        self._auth = A2AAuth(self._auth_config, self._target)
                    except AuthUnavailable as e:
                        self._unreadable = e
                        raise
                self._http = httpx.AsyncClient(timeout=self._calls.request_timeout,
                                               limits=httpx.Limits(max_connections=self._connections),
                                               auth=self._auth.for_httpx(self._calls) if self._auth else None)
                resolver = A2ACardResolver(self._http, self._url, self._card_path)
                where = f"reading the A2A agent card at {self._url}/{self._card_path}"
                try:
                    card = await self._calls.call(where, resolver.get_agent_card, self.classify)
                except Exception as e:  # noqa: BLE001 - kept, so the shard's other cases fail at once with it
                    refused = self.refusal(e)
                    self._unreadable = InferenceError(self.scrub(
                        f"{where}: {refused}" if refused else str(e) if isinstance(e, InferenceError)
                        else f"{where}: {type(e).__name__}: {str(e)[:300]}"))
                    raise self._unreadable from None
                self._name = card.name or "agent"
                card_json = MessageToDict(card)
                self._schemes = security_schemes(card_json)
                foreign = foreign_endpoint(card_json, self._target) if self._auth is not None else None
                if foreign:  # the credential would not be sent there: every case fails with it, none is sent
                    self._unreadable = InferenceError(f"inference.a2a: the agent card at {self._url}/"
                                                      f"{self._card_path} {foreign}")
                    raise self._unreadable
                self._client = ClientFactory(ClientConfig(streaming=True, httpx_client=self._http)).create(card)
        return self._client

    def scrub(self, text: str) -> str:
        """A text without the credential's values (the agent, or a gateway, may repeat them)."""
        return self._auth.scrub(text) if self._auth is not None else text

    def refusal(self, error: BaseException) -> str | None:
        """The agent refusing the credential (401, 403), in one line naming the credential tried and the
        securitySchemes its card declares; None for any other error."""
        status = refused_status(error)
        if status is None:
            return None
        tried = self._auth.describe() if self._auth is not None else "no credential (inference.auth is not set)"
        declared = f"; its agent card declares securitySchemes: {self._schemes}" if self._schemes else ""
        return f"the agent answered HTTP {status} to {tried}{declared}"

    async def infer(self, fields: dict[str, Any]) -> Any:
        conversation = await self.conversation(fields)
        return [(await conversation.send(prompt))[0] for prompt in user_turns(fields)]

    async def conversation(self, fields: dict[str, Any]) -> "A2AConversation":
        """The case's A2A conversation (one context, given by the agent's first answer). A2A has no way to
        give a conversation an initial state: a case with session_input.state fails, saying so."""
        case = fields.get("adk_case")
        state = ((case.get("session_input") or {}) if isinstance(case, dict) else {}).get("state")
        if state:
            raise InferenceError("session_input.state cannot be set over A2A (the protocol has no way to give a "
                                 "conversation an initial state), so this case would run against an agent in another "
                                 "state; drop the state from the case, or run it with inference.agent or "
                                 "inference.agent_engine")
        return A2AConversation(self, await self._open())

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._http is not None:
            await self._http.aclose()


class A2AConversation:
    """One case's A2A conversation: `send(prompt)` sends one user message in its context -> (the turn, its
    events as ADK's Event JSON, the user's first), as metrics.agents.inference.AgentConversation gives them."""

    def __init__(self, inferrer: A2AInferrer, client):
        self._inferrer, self._client = inferrer, client
        self._context: str | None = None
        self._sent = 0

    async def send(self, prompt: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        from a2a.types import Message, Part, Role, SendMessageRequest
        from google.protobuf.json_format import MessageToDict

        inferrer, client = self._inferrer, self._client
        self._sent += 1
        number = self._sent
        message_id = uuid.uuid4().hex  # the same id on a retry: the same message

        async def send():
            message = Message(role=Role.ROLE_USER, parts=[Part(text=prompt)], message_id=message_id,
                              context_id=self._context or "")
            out = []
            async for response in client.send_message(SendMessageRequest(message=message)):
                response = response[0] if isinstance(response, tuple) else response
                out.append(MessageToDict(response))
            return out

        started = time.monotonic()
        try:
            responses = await inferrer._calls.call(f"turn {number}", send, inferrer.classify, resend=False)
            events, self._context = events_from_a2a(responses, inferrer._name)
        except InferenceError as e:
            text = str(e)
            raise InferenceError(inferrer.scrub(text if text.startswith("turn ") else f"turn {number}: {text}")) from None
        except Exception as e:  # noqa: BLE001 - not transient: the case's error, without the credential
            refused = inferrer.refusal(e)
            text = refused or (f"{type(e).__name__}: {str(e).splitlines()[0][:500]}" if str(e) else type(e).__name__)
            raise InferenceError(inferrer.scrub(f"turn {number}: {text}")) from None
        turn = turn_from_events(prompt, events, time.monotonic() - started)
        user = {"author": "user", "content": {"role": "user", "parts": [{"text": prompt}]}}
        return turn, [user, *events] if events else []


# ----------------------------------------------------------------------------------- Agent Engine

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
        from evalbeam.metrics.judge.client import scrub_secrets

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

    location = resource.split("/")[3]
    credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
    endpoint = base_url.rstrip("/") if base_url else f"https://{location}-aiplatform.googleapis.com"
    client = ReasoningEngineExecutionServiceClient(
        credentials=credentials, transport="rest", client_options=ClientOptions(api_endpoint=endpoint))
    # the credentials it signs with: every token they hold is scrubbed from errors
    return client, remember_tokens(client._transport._credentials)


# ------------------------------------------------------------------------------ shared by both

def case_key(kind: str, target: str, instance_id: str, fields: dict[str, Any]) -> str:
    """The content key of a case's deployed inference (its checkpoint key): the agent, the
    case and what is sent (its user turns and session_input). Hex, as the judge's keys."""
    case = fields.get("adk_case")
    session_input = (case.get("session_input") or {}) if isinstance(case, dict) else {}
    try:
        turns = user_turns(fields)
    except InferenceError:
        turns = []
    material = {"kind": kind, "target": target, "id": instance_id, "turns": turns, "session_input": session_input}
    scenario = case.get("conversation_scenario") if isinstance(case, dict) else None
    if scenario is not None:  # a simulated conversation: what its user is told to do (cases without one keep their keys)
        material["conversation_scenario"] = scenario
    material = json.dumps(material, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(material.encode()).hexdigest()


def encode_result(turns: Any) -> str:
    return base64.b64encode(json.dumps(turns, ensure_ascii=False).encode()).decode()


def decode_result(text: str) -> Any:
    return json.loads(base64.b64decode(text).decode())


def make_deployed_inferrer(kind: str, target: str, calls: Calls, base_url: str | None, max_concurrency: int,
                           auth: dict[str, Any] | None = None):
    """auth: inference.auth as plain data (A2AAuthConfig.plain), for a2a."""
    if kind == "a2a":
        return A2AInferrer(target, calls, max_concurrency, auth)
    if kind == "agent_engine":
        return AgentEngineInferrer(target, calls, base_url, max_concurrency)
    raise ValueError(f"no deployed inferrer for {kind!r}")


def reachable(kind: str, target: str, base_url: str | None = None, timeout: float = 10.0,
              auth: dict[str, Any] | None = None) -> str | None:
    """None when the endpoint answers, else one line saying why not (preflight). a2a: with inference.auth's
    credential (auth: its plain data), whose refusal (401, 403) is a line naming the credential tried."""
    import httpx

    if kind == "a2a":
        try:
            credential = A2AAuth(auth, target) if auth else None
            if credential is not None:
                credential.headers()  # a token can be had (not sent: httpx asks for it per request)
        except AuthUnavailable as e:
            return str(e)
        tried = credential.describe() if credential is not None else "no credential (inference.auth is not set)"
        scrub = credential.scrub if credential is not None else (lambda text: text)
        client = httpx.Client(timeout=timeout, auth=credential.for_httpx() if credential is not None else None)
        with client:
            return scrub(_a2a_reachable(client, target, tried, credential is not None) or "") or None
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    location = target.split("/")[3]
    endpoint = base_url.rstrip("/") if base_url else f"https://{location}-aiplatform.googleapis.com"
    try:
        httpx.get(endpoint, timeout=timeout)  # any HTTP answer: the host is there (the calls need credentials)
    except httpx.HTTPError as e:
        return f"inference.agent_engine: {endpoint} is unreachable ({type(e).__name__}: {str(e)[:200]})"
    try:
        google.auth.default(scopes=[CLOUD_PLATFORM])
    except DefaultCredentialsError as e:
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        return f"inference.agent_engine: no Application Default Credentials ({first}); see docs/agents.md"
    return None


def _a2a_reachable(client, target: str, tried: str, authenticated: bool = False) -> str | None:
    import httpx

    url = "/".join(a2a_card(target))
    try:
        response = client.get(url)
    except httpx.HTTPError as e:
        return f"inference.a2a: the agent card at {url} is unreachable ({type(e).__name__}: {str(e)[:200]})"
    if response.status_code in REFUSED_STATUS:
        return f"inference.a2a: the agent card at {url} answered HTTP {response.status_code} to {tried}"
    if response.status_code != 200:
        return f"inference.a2a: the agent card at {url} answered HTTP {response.status_code}"
    # the card names the agent's endpoint, which the client then calls: often the address the agent
    # was started with (0.0.0.0, localhost in a container), not the one it is reached at
    try:
        card = response.json()
        named = [i.get("url") for i in card.get("supportedInterfaces") or [] if isinstance(i, dict)] or [card.get("url")]
    except (ValueError, AttributeError):
        return f"inference.a2a: the agent card at {url} is not a JSON agent card"
    foreign = foreign_endpoint(card, target) if authenticated else None
    if foreign:  # checked before the endpoint is called: it would be called without the credential
        return f"inference.a2a: the agent card at {url} {foreign}"
    endpoint = next((u for u in named if isinstance(u, str) and u.startswith(("http://", "https://"))), None)
    if endpoint is not None:
        try:
            answer = client.get(endpoint)  # any HTTP answer but a refusal: it is there, and takes the credential
        except httpx.ReadTimeout:
            return None  # connected: an endpoint may leave a GET unanswered (its messages are POSTs)
        except httpx.HTTPError as e:
            return (f"inference.a2a: the agent card at {url} names {endpoint} as the agent's endpoint, which is "
                    f"unreachable ({type(e).__name__}: {str(e)[:200]}); serve the agent with the URL it is "
                    "reached at in its card")
        if answer.status_code in REFUSED_STATUS:
            schemes = security_schemes(card)
            return (f"inference.a2a: the agent's endpoint {endpoint} answered HTTP {answer.status_code} to {tried}"
                    + (f"; its agent card declares securitySchemes: {schemes}" if schemes else ""))
    return None
