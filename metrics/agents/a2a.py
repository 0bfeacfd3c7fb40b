"""inference.a2a (no Beam): an agent served over A2A (its agent card at <url>/.well-known/agent-card.json),
through the a2a-sdk client, with inference.auth's credential (metrics.agents.auth) where one is set. One case
= one A2A conversation (one context), one user turn = one message.

Every request (the agent card, once per shard; each turn) goes through metrics.agents.calls.Calls (the
quota, timeouts, metrics.retry's policy). A retry re-sends only the request that failed: the turns already
answered are never sent again, and the conversation carries on in the same context; a turn that timed out
or whose stream broke off is not sent again (the agent may have run it: its message would be in the
conversation twice). The stream of each turn becomes ADK events (metrics.agents.a2a_events) and those the
case's turns as `inference.agent` makes them (metrics.rows.trace.turn_from_events), so the same agent gives
the same trace in-process or over A2A.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from evalbeam.metrics.agents.a2a_card import a2a_card, foreign_endpoint, security_schemes
from evalbeam.metrics.agents.a2a_events import events_from_a2a
from evalbeam.metrics.agents.auth import A2AAuth, AuthUnavailable, refused_status
from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.inference import InferenceError, user_turns
from evalbeam.metrics.retry import Transient, transient_for_status
from evalbeam.metrics.rows.trace import turn_from_events


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
