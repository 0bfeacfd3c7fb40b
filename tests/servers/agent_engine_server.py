"""A local stand-in for Vertex AI Agent Engine's ReasoningEngineExecutionService, for tests and the
agent benchmark only (these machines cannot reach Vertex AI). It speaks the REST protocol as
google-cloud-aiplatform 1.91.0's client sends it (aiplatform_v1 ReasoningEngineExecutionService,
transports/rest_base.py; the agent_engines SDK, vertexai/agent_engines/_agent_engines.py, calls it):

    POST /v1/projects/<p>/locations/<l>/reasoningEngines/<id>:query
         {"classMethod": "create_session", "input": {"user_id", "state"}}
         -> {"output": <the ADK Session, as the ADK app template's create_session returns it>}
    POST /v1/projects/<p>/locations/<l>/reasoningEngines/<id>:streamQuery
         {"classMethod": "stream_query", "input": {"message", "user_id", "session_id"}}
         -> a JSON array of google.api.HttpBody ({"contentType": "application/json", "data":
            base64 of newline-delimited JSON}), one per ADK event, each event as the template's
            stream_query yields it (Event.model_dump(exclude_none=True))
    `Authorization: Bearer <token>`: a token the `tokens` JudgeServer issued (its /token endpoint is
    the service account's token_uri, so google.auth.default() gets one) or a JWT self-signed by a
    service account it trusts (what google-auth sends for the aiplatform clients), else 401.

The ADK app behind it is either a real one (`backend`: the URL of tests/agent_env/adk_app.py, ADK's
Runner in the .agent venv, as Vertex AI's ADK app template runs it) or, by default, a replay of what
an LlmAgent with tests/inference_app.py's tools does, turn by turn, driven by markers in the user's
message as tests/servers/judge_server.py's agent answers are:
`#call=NAME{JSON}` one function call event per marker (all in one event), then one function
response event (the real tool's result; an unknown tool: ADK's error response), then the final
text "Done: " + the responses' JSON; without a marker "No tool needed: <text>".

Failures, to test retries: `fail[(turn_number, attempt)] = (status, retry_after[, "echo"])` answers the
attempt-th request of the turn_number-th turn (1-based, per session) with that status (503, 429
with Retry-After, ...) instead of running it; "echo" repeats the request's bearer token in the error. `latency` delays every stream_query; with `hold_after` N, the turns started after the first N
wait for `release` (a run that cannot finish, to be killed). `raw_stream(turn)` replaces a turn's
streamQuery body with the bytes it returns (a malformed stream); `session_fail = (status[, "echo"])`
refuses create_session. Counts:
`stats.turn_requests[(session_id, turn)]`, `stats.sessions`, `stats.messages` (per message text).
"""
from __future__ import annotations

import base64
import collections
import dataclasses
import json
import re
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler

from tests.servers.local import LocalHTTPServer

from tests.inference_app import convert, get_weather

ROUTE = re.compile(r"/v1(?:beta1)?/(?P<name>projects/[^/]+/locations/[^/]+/reasoningEngines/[^/:]+):(?P<method>query|streamQuery)")
TOOLS = {"get_weather": get_weather, "convert": convert}


DROP, TRICKLE = object(), object()


@dataclasses.dataclass
class RawBody:
    data: bytes


@dataclasses.dataclass
class Stats:
    sessions: list = dataclasses.field(default_factory=list)  # (user_id, state) per session created
    turn_requests: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    messages: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # answered, per text
    resources: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    unauthorized: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0


def _events(app_name: str, message: str, invocation_id: str) -> list[dict]:
    """The ADK events an LlmAgent with the test tools yields for one user message (model_dump(exclude_none))."""
    calls = [(m.group(1), json.loads(m.group(2))) for m in re.finditer(r"#call=(\w+)(\{[^}]*\})", message)]

    def event(parts, **more):
        return {"content": {"parts": parts, "role": "model"}, "invocation_id": invocation_id, "author": app_name,
                "actions": {"state_delta": {}, "artifact_delta": {}, "requested_auth_configs": {}},
                "id": str(uuid.uuid4()), "timestamp": time.time(), **more}

    usage = {"prompt_token_count": len(message) // 4 + 10, "candidates_token_count": 0, "total_token_count": len(message) // 4 + 10}
    if not calls:
        return [event([{"text": f"No tool needed: {message}"}], usage_metadata=usage)]
    ids = [f"adk-{uuid.uuid4()}" for _ in calls]
    responses = []
    for (name, args), call_id in zip(calls, ids):
        tool = TOOLS.get(name)
        result = tool(**args) if tool else {"error": f"Tool '{name}' not found."}
        responses.append((name, call_id, result))
    done = "Done: " + "; ".join(json.dumps(r, sort_keys=True) for _, _, r in responses)
    return [
        event([{"function_call": {"id": i, "args": a, "name": n}} for (n, a), i in zip(calls, ids)], usage_metadata=usage),
        event([{"function_response": {"id": i, "name": n, "response": r}} for n, i, r in responses]),
        event([{"text": done}], usage_metadata=usage),
    ]


class AgentEngineServer(LocalHTTPServer):
    def __init__(self, tokens, app_name: str = "weather_agent", latency: float = 0.0, backend: str | None = None):
        self.tokens = tokens  # a tests.servers.judge_server.JudgeServer: the tokens it issued are accepted
        self.backend = backend  # a real ADK app (tests/agent_env/adk_app.py), else the replay
        self.app_name = app_name
        self.latency = latency
        self.fail: dict = {}
        self.hold_after: int | None = None  # turns beyond this many answered wait for `release`
        self.hold_text: str | None = None  # a turn whose message contains it waits for `release` too
        self.drop_text: str | None = None  # a turn whose message contains it runs, then its connection drops
        # a turn whose message contains it is answered "[" then a space every 50 ms, never ending, until the
        # client closes the connection (then `client_gone` is set) or `release`
        self.trickle_text: str | None = None
        self.client_gone = threading.Event()
        self.release = threading.Event()
        self._started_turns = 0
        self.stats = Stats()
        # raw_stream(turn) -> bytes: the streamQuery response body sent as is (a malformed stream)
        self.raw_stream = None
        # session_fail = (status, "echo"?): create_session answers that status (echo: with the request's bearer)
        self.session_fail: tuple | None = None
        self._sessions: dict = {}  # id -> {"user_id", "state", "turns"}
        self._attempts: collections.Counter = collections.Counter()  # (session, turn) -> requests
        self._lock = threading.Lock()
        self._listen(self._handler())

    def _backend(self, method: str, body: dict):
        import urllib.request

        request = urllib.request.Request(f"{self.backend}/{method}", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())

    def create_session(self, user_id: str, state: dict) -> dict:
        if self.backend:
            session = self._backend("create_session", {"user_id": user_id, "state": state or {}})
            session_id = session["id"]
            with self._lock:
                self._sessions[session_id] = {"user_id": user_id, "state": dict(state or {}), "turns": 0}
                self.stats.sessions.append((user_id, dict(state or {})))
            return session
        session_id = str(uuid.uuid4())
        with self._lock:
            self._sessions[session_id] = {"user_id": user_id, "state": dict(state or {}), "turns": 0}
            self.stats.sessions.append((user_id, dict(state or {})))
        return {"id": session_id, "app_name": self.app_name, "user_id": user_id, "state": dict(state or {}),
                "events": [], "last_update_time": time.time()}

    def stream_query(self, body: dict, bearer: str | None = None) -> tuple[int, object, dict]:
        given = body.get("input") or {}
        session_id, message = given.get("session_id"), given.get("message", "")
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session["user_id"] != given.get("user_id"):
                return 404, {"error": {"code": 404, "message": f"session {session_id} not found", "status": "NOT_FOUND"}}, {}
            turn = session["turns"] + 1
            self._attempts[(session_id, turn)] += 1
            self.stats.turn_requests[(session_id, turn)] += 1
            failure = self.fail.get((turn, self._attempts[(session_id, turn)]))
        if failure:
            status, retry_after, *echo = failure
            message = f"scripted failure; you sent {bearer}" if echo else "scripted failure"  # echo: a careless proxy
            return status, {"error": {"code": status, "message": message, "status": "UNAVAILABLE"}}, (
                {"Retry-After": str(retry_after)} if retry_after else {})
        with self._lock:
            self._started_turns += 1
            held = (self.hold_after is not None and self._started_turns > self.hold_after) or (
                self.hold_text is not None and self.hold_text in message)
        if held:
            self.release.wait(120)
        if self.latency:
            time.sleep(self.latency)
        if self.backend:
            import urllib.error

            try:
                events = self._backend("stream_query", {"message": message, "user_id": given.get("user_id"),
                                                        "session_id": session_id})
            except urllib.error.HTTPError as e:  # the app raised: its error, as Agent Engine answers it
                return e.code, json.loads(e.read()), {}
        else:
            events = _events(self.app_name, message, f"e-{uuid.uuid4()}")
        with self._lock:
            session["turns"] = turn
            self.stats.messages[message] += 1
        chunks = [{"contentType": "application/json", "data": base64.b64encode(json.dumps(e).encode()).decode()}
                  for e in events]
        if self.raw_stream is not None:
            return 200, RawBody(self.raw_stream(turn)), {}
        if self.drop_text is not None and self.drop_text in message:
            return 200, DROP, {}
        if self.trickle_text is not None and self.trickle_text in message:
            return 200, TRICKLE, {}
        return 200, chunks, {}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, body, headers: dict | None = None):
                data = body.data if isinstance(body, RawBody) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _trickle(self):
                self.close_connection = True
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()  # no length: the body ends when the connection does
                try:
                    self.wfile.write(b"[")
                    while not server.release.wait(0.05):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                except OSError:
                    server.client_gone.set()

            def do_GET(self):
                self._send(404, {"error": {"code": 404, "message": "no route", "status": "NOT_FOUND"}})

            def do_POST(self):
                url = urllib.parse.urlsplit(self.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                route = ROUTE.fullmatch(url.path)
                if not route:
                    return self._send(404, {"error": {"code": 404, "message": f"no route {url.path}", "status": "NOT_FOUND"}})
                authorization = self.headers.get("Authorization", "")
                bearer = authorization[len("Bearer "):] if authorization.startswith("Bearer ") else None
                # an access token the token endpoint issued, or a self-signed JWT of a trusted service
                # account (google-auth sends one for service account credentials when the client asks for
                # JWT access, as the aiplatform clients do), its RS256 signature checked
                if bearer not in server.tokens.stats.issued_tokens and not (
                        bearer and server.tokens._verified_claims(bearer)):
                    with server._lock:
                        server.stats.unauthorized += 1
                    return self._send(401, {"error": {"code": 401, "status": "UNAUTHENTICATED",
                                                      "message": "Request is missing required authentication credential."}})
                body = json.loads(raw or b"{}")
                with server._lock:
                    server.stats.resources[route.group("name")] += 1
                    server.stats.in_flight += 1
                    server.stats.peak_in_flight = max(server.stats.peak_in_flight, server.stats.in_flight)
                try:
                    if route.group("method") == "query":
                        if body.get("classMethod") != "create_session":
                            return self._send(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                                              "message": f"no class method {body.get('classMethod')}"}})
                        given = body.get("input") or {}
                        if server.session_fail:
                            status, *echo = server.session_fail
                            message = f"session refused; you sent {bearer}" if echo else "session refused"
                            return self._send(status, {"error": {"code": status, "message": message,
                                                                 "status": "PERMISSION_DENIED"}})
                        return self._send(200, {"output": server.create_session(given.get("user_id"), given.get("state"))})
                    if body.get("classMethod") != "stream_query":
                        return self._send(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                                          "message": f"no stream method {body.get('classMethod')}"}})
                    answer = server.stream_query(body, bearer)
                    if answer[1] is DROP:  # the turn ran; the connection closes without an answer
                        self.close_connection = True
                        return None
                    if answer[1] is TRICKLE:
                        return self._trickle()
                    return self._send(*answer)
                finally:
                    with server._lock:
                        server.stats.in_flight -= 1

        return Handler
