"""Local stand-ins for the OpenAI Chat Completions and the Anthropic Messages APIs, for tests
only (these machines cannot reach either). They speak the real wire protocols, so the real
`openai` and `anthropic` clients drive them, and they decide everything as the Gemini stand-in
does (tests/judge_server.py: the same quota with 429 + Retry-After, latency, 503s, timeouts,
and the same markers in the prompt: #score=, #malformed=, #invalid=, #fail, #slow=,
#unavailable_at=, #echo_key=, ...), so one test reads the same on every provider.

    POST /v1/chat/completions   (OpenAI, vLLM, TGI, Ollama; `Authorization: Bearer <key>`)
         {"model", "messages": [{"role": "user", "content"}], "temperature", "max_tokens", "seed",
          "response_format": {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}}
      -> {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content"}}],
          "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}
         errors: {"error": {"message", "type", "code"}}, 429 with Retry-After
    POST /v1/messages           (Anthropic; the key as `x-api-key` or a Bearer token, `anthropic-version`)
         {"model", "max_tokens", "messages", "temperature", "tools": [{"name", "input_schema"}],
          "tool_choice": {"type": "tool", "name"}}
      -> {"type": "message", "content": [{"type": "tool_use", "name", "input"}] or
          [{"type": "text", "text"}], "usage": {"input_tokens", "output_tokens"}}
         errors: {"type": "error", "error": {"type", "message"}}, 429 with Retry-After
    POST /v1/projects/<p>/locations/<l>/publishers/anthropic/models/<model>:rawPredict
         (Claude on Vertex AI, as AnthropicVertex sends it: the Messages body without "model",
         with "anthropic_version"; a Bearer token this server issued, as the Gemini stand-in's)

A malformed answer (#malformed=K) comes back as text where JSON was asked: OpenAI's content
is not JSON, Anthropic's model answers in a text block instead of calling the tool.
"""
from __future__ import annotations

import collections
import json
import re
import secrets
import time

from tests.judge_server import Behaviour, JudgeServer  # noqa: F401 - Behaviour: for the tests' imports

OPENAI_ROUTE = re.compile(r"/(?:v1/)?chat/completions")
ANTHROPIC_ROUTE = re.compile(r"/v1/messages")
ANTHROPIC_VERTEX_ROUTE = re.compile(r"/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
                                    r"/publishers/anthropic/models/(?P<model>[^/:]+):rawPredict")
OPENAI_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_exceeded",
                      500: "server_error", 503: "server_error"}
ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
                         500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}


class ProviderServer(JudgeServer):
    """The Gemini stand-in's decisions behind the OpenAI and Anthropic protocols (and Gemini's
    own routes still, so one server can answer judges of several providers in one run)."""

    def __init__(self, behaviour: Behaviour | None = None):
        super().__init__(behaviour)
        self.protocols: collections.Counter = collections.Counter()  # answered requests per protocol
        self.bodies: list = []  # every request body received, as (protocol, body)
        self.credentials: set = set()  # every API key or bearer token presented

    def _handler(self):
        server = self
        base = super()._handler()

        class Handler(base):
            def do_POST(self):
                path = self.path.split("?", 1)[0]
                if OPENAI_ROUTE.fullmatch(path):
                    return self._provider("openai")
                if ANTHROPIC_ROUTE.fullmatch(path):
                    return self._provider("anthropic")
                vertex = ANTHROPIC_VERTEX_ROUTE.fullmatch(path)
                if vertex:
                    if not self._vertex_authorised():
                        return None
                    return self._provider("anthropic_vertex", vertex.group("model"))
                return super().do_POST()

            def _fail(self, protocol: str, code: int, message: str, headers: dict | None = None):
                if protocol == "openai":
                    body = {"error": {"message": message, "type": OPENAI_ERROR_TYPES.get(code, "error"),
                                      "param": None, "code": None}}
                else:
                    body = {"type": "error", "error": {"type": ANTHROPIC_ERROR_TYPES.get(code, "api_error"),
                                                       "message": message}}
                self._send(code, body, headers)

            def _provider(self, protocol: str, path_model: str | None = None):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw or b"{}")
                if protocol == "openai":
                    authorization = self.headers.get("Authorization", "")
                    credential = authorization[len("Bearer "):] if authorization.startswith("Bearer ") else None
                elif protocol == "anthropic":  # (anthropic 2.x sends its key as a Bearer token)
                    authorization = self.headers.get("Authorization", "")
                    credential = self.headers.get("x-api-key") or (
                        authorization[len("Bearer "):] if authorization.startswith("Bearer ") else None)
                else:
                    credential = self.headers.get("Authorization", "")[len("Bearer "):]
                with server._lock:
                    server.credentials.add(credential)
                    server.bodies.append((protocol, body))
                problem = _malformed_request(protocol, body, self.headers)
                if problem:
                    return self._fail(protocol, 400, problem)
                retry_after = server._admit()
                if retry_after is not None:
                    message = "Rate limit reached for requests" if protocol == "openai" else \
                        "Number of requests has exceeded your rate limit"
                    return self._fail(protocol, 429, message, {"Retry-After": str(int(retry_after))})
                with server._lock:
                    server.stats.in_flight += 1
                    server.stats.peak_in_flight = max(server.stats.peak_in_flight, server.stats.in_flight)
                try:
                    self._admitted(protocol, body, path_model or body.get("model"), credential)
                finally:
                    with server._lock:
                        server.stats.in_flight -= 1

            def _admitted(self, protocol: str, body: dict, model: str, credential: str | None):
                prompt = body["messages"][0]["content"]
                if isinstance(prompt, list):  # content blocks
                    prompt = "".join(b.get("text", "") for b in prompt)
                latency, error, timeout = server._draw()
                if timeout:
                    with server._lock:
                        server.stats.timeouts += 1
                    time.sleep(server.behaviour.timeout_delay)
                elif latency:
                    time.sleep(latency)
                with server._lock:
                    server._asked[prompt] += 1
                    nth = server._asked[prompt]
                slow = re.search(r"#slow=(\d+(?:\.\d+)?)", prompt)
                if slow and nth == 1:
                    time.sleep(float(slow.group(1)))
                unavailable_at = re.search(r"#unavailable_at=([\d,]+)", prompt)
                error = error or bool(unavailable_at and str(nth) in unavailable_at.group(1).split(","))
                echo = re.search(r"#echo_key=(\d{3})", prompt)
                if echo:
                    with server._lock:
                        server.stats.echoed += 1
                    return self._fail(protocol, int(echo.group(1)), f"The credential {credential} was refused.")
                if error or "#fail" in prompt:
                    with server._lock:
                        server.stats.errors += 1
                    return self._fail(protocol, 503, "The service is overloaded.")
                schema = _schema_of(protocol, body)
                text = server.answer(prompt, schema, body.get("seed"))
                prompt_tokens, output_tokens = len(prompt) // 4, len(text) // 4
                with server._lock:
                    server.protocols[protocol] += 1
                if protocol == "openai":
                    return self._send(200, {
                        "id": f"chatcmpl-{secrets.token_hex(6)}", "object": "chat.completion",
                        "created": int(time.time()), "model": model,
                        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                     "message": {"role": "assistant", "content": text, "refusal": None}}],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens,
                                  "total_tokens": prompt_tokens + output_tokens}})
                content, stop = [{"type": "text", "text": text}], "end_turn"
                if schema:
                    try:
                        content = [{"type": "tool_use", "id": f"toolu_{secrets.token_hex(6)}",
                                    "name": body["tool_choice"]["name"], "input": json.loads(text)}]
                        stop = "tool_use"
                    except json.JSONDecodeError:
                        pass  # a malformed answer: the model wrote text instead of calling the tool
                return self._send(200, {
                    "id": f"msg_{secrets.token_hex(6)}", "type": "message", "role": "assistant", "model": model,
                    "content": content, "stop_reason": stop, "stop_sequence": None,
                    "usage": {"input_tokens": prompt_tokens, "output_tokens": output_tokens}})

        return Handler


def _schema_of(protocol: str, body: dict) -> dict:
    """The JSON schema the request asks its answer in ({} for free text)."""
    if protocol == "openai":
        fmt = body.get("response_format") or {}
        return (fmt.get("json_schema") or {}).get("schema") or {} if fmt.get("type") == "json_schema" else {}
    choice = (body.get("tool_choice") or {}).get("name")
    tools = {t["name"]: t for t in body.get("tools") or []}
    return tools[choice]["input_schema"] if choice in tools else {}


def _malformed_request(protocol: str, body: dict, headers) -> str | None:
    """What the real API would refuse with a 400 (a check that the client speaks the protocol)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: required"
    if protocol == "openai":
        if not body.get("model"):
            return "model: required"
        fmt = body.get("response_format")
        if fmt is not None and (fmt.get("type") != "json_schema" or "schema" not in (fmt.get("json_schema") or {})):
            return "response_format: expected a json_schema"
        return None
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    if protocol == "anthropic":
        if not body.get("model"):
            return "model: Field required"
        if not headers.get("anthropic-version"):
            return "anthropic-version: header is required"
    elif not body.get("anthropic_version") or "model" in body:
        return "Vertex AI: anthropic_version in the body, and no model (it is in the path)"
    if not 0 <= body.get("temperature", 1) <= 1:
        return "temperature: must be between 0 and 1"
    choice = body.get("tool_choice")
    if choice and choice.get("name") not in {t.get("name") for t in body.get("tools") or []}:
        return "tool_choice: names no tool given"
    return None
