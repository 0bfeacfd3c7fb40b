"""Local stand-ins for the OpenAI Chat Completions and the Anthropic Messages APIs, for tests
only (these machines cannot reach either). They speak the real wire protocols, so the real
`openai` and `anthropic` clients drive them, and they decide everything as the Gemini stand-in
does (tests/servers/judge_server.py: the same quota with 429 + Retry-After, latency, 503s, timeouts,
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

    Message Batches (the `anthropic` client's messages.batches):
    POST /v1/messages/batches  {"requests": [{"custom_id", "params": a Messages body}]}
      -> a MessageBatch {"id", "processing_status": "in_progress", "request_counts", ...}
    GET  /v1/messages/batches/<id>  -> processing_status "ended" once behaviour.batch_seconds have
         passed, with "results_url"; GET <results_url> -> JSONL {"custom_id", "result": {"type":
         "succeeded", "message"} or {"type": "errored", "error"}} (#fail, #batchfail=K as the
         Gemini stand-in's batches); POST /v1/messages/batches/<id>/cancel

    OpenAI's Batch API (the `openai` client's files and batches):
    POST /v1/files  (multipart: file, purpose batch) -> a FileObject {"id": "file-...", ...}
    POST /v1/batches  {"input_file_id", "endpoint": "/v1/chat/completions", "completion_window"}
      -> a Batch {"id", "status": "validating", ...}; GET /v1/batches/<id> -> "completed" once
         behaviour.batch_seconds have passed, with "output_file_id" (lines {"custom_id", "response":
         {"status_code": 200, "body": a chat.completion}}) and "error_file_id" (#fail, #batchfail=K:
         {"custom_id", "response": {"status_code": 500, "body": {"error"}}}); GET
         /v1/files/<id>/content -> the file; POST /v1/batches/<id>/cancel

A malformed answer (#malformed=K) comes back as text where JSON was asked: OpenAI's content
is not JSON, Anthropic's model answers in a text block instead of calling the tool.

Failures of the batch APIs' own requests, to test their retries: `batch_faults` is a list of
(method, path pattern, fault), each used once by the first request it matches (re.fullmatch), in
order: fault (status, retry_after or None) answers that error; "drop" serves the request (a batch
is created) and closes the connection without an answer. `batch_calls` lists (method, path) of
every request to the batch and file routes.
"""
from __future__ import annotations

import collections
import json
import re
import secrets
import time
from typing import Any

from tests.servers.judge_server import Behaviour, JudgeServer  # noqa: F401 - Behaviour: for the tests' imports

OPENAI_ROUTE = re.compile(r"/(?:v1/)?chat/completions")
ANTHROPIC_ROUTE = re.compile(r"/v1/messages")
OPENAI_FILES_ROUTE = re.compile(r"/v1/files(?:/(?P<id>[^/]+)/content)?")
OPENAI_BATCHES_ROUTE = re.compile(r"/v1/batches(?:/(?P<id>[^/]+)(?P<cancel>/cancel)?)?")
ANTHROPIC_BATCHES_ROUTE = re.compile(r"/v1/messages/batches(?:/(?P<id>[^/]+)(?:/(?P<action>results|cancel))?)?")
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
        self._message_batches: dict = {}  # id -> {"created", "requests", "cancelled", "results"}
        self._openai_files: dict = {}  # id -> bytes
        self._openai_batches: dict = {}  # id -> {"created", "input_file_id", "lines", "cancelled", "output"}
        self.batch_faults: list = []  # (method, path pattern, (status, retry_after) or "drop"), each used once
        self.batch_calls: list = []  # (method, path) of every batch API request

    def _batch_fault(self, method: str, path: str):
        """Record a batch API request; the first scripted fault it matches (taken off the list), or None."""
        with self._lock:
            self.batch_calls.append((method, path))
            for i, (m, pattern, fault) in enumerate(self.batch_faults):
                if m == method and re.fullmatch(pattern, path):
                    del self.batch_faults[i]
                    return fault
        return None

    def _handler(self):
        server = self
        base = super()._handler()

        class Handler(base):
            dropping = False  # serve the request, then close the connection without the answer

            def _scripted(self, method: str, path: str) -> bool:
                """A scripted fault of a batch API request: True when answered (an error) here."""
                if not (OPENAI_FILES_ROUTE.fullmatch(path) or OPENAI_BATCHES_ROUTE.fullmatch(path)
                        or ANTHROPIC_BATCHES_ROUTE.fullmatch(path)):
                    return False
                fault = server._batch_fault(method, path)
                if fault == "drop":
                    self.dropping = True
                elif fault is not None:
                    status, retry_after = fault
                    self.rfile.read(int(self.headers.get("Content-Length", 0)))
                    protocol = "anthropic" if ANTHROPIC_BATCHES_ROUTE.fullmatch(path) else "openai"
                    self._fail(protocol, status, "scripted failure",
                               {"Retry-After": str(retry_after)} if retry_after is not None else None)
                    return True
                return False

            def _send(self, status: int, body: dict, headers: dict | None = None):
                if self.dropping:
                    self.close_connection = True
                    return
                super()._send(status, body, headers)

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                if self._scripted("GET", path):
                    return None
                files, openai_batches = OPENAI_FILES_ROUTE.fullmatch(path), OPENAI_BATCHES_ROUTE.fullmatch(path)
                if files and files.group("id"):
                    self._batch_credential()
                    data = server._openai_files.get(files.group("id"))
                    if data is None:
                        return self._fail("openai", 404, "No such File object")
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return None
                if openai_batches and openai_batches.group("id"):
                    self._batch_credential()
                    batch = server.openai_batch(openai_batches.group("id"))
                    return self._send(200, batch) if batch else self._fail("openai", 404, "No such batch")
                batches = ANTHROPIC_BATCHES_ROUTE.fullmatch(path)
                if not batches or not batches.group("id"):
                    return super().do_GET()
                self._batch_credential()
                if batches.group("action") == "results":
                    lines = server.message_batch_results(batches.group("id"))
                    if lines is None:
                        return self._fail("anthropic", 404, "no results for this batch")
                    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/binary")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return None
                batch = server.message_batch(batches.group("id"))
                return self._send(200, batch) if batch else self._fail("anthropic", 404, "no such batch")

            def _batch_credential(self):
                authorization = self.headers.get("Authorization", "")
                with server._lock:
                    server.credentials.add(self.headers.get("x-api-key") or authorization[len("Bearer "):])

            def do_POST(self):
                path = self.path.split("?", 1)[0]
                if self._scripted("POST", path):
                    return None
                if OPENAI_FILES_ROUTE.fullmatch(path) or OPENAI_BATCHES_ROUTE.fullmatch(path):
                    self._batch_credential()
                    raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                    if OPENAI_FILES_ROUTE.fullmatch(path):
                        form = _multipart(self.headers.get("Content-Type", ""), raw)
                        if "file" not in form or form.get("purpose", (None, b""))[1] != b"batch":
                            return self._fail("openai", 400, "file and purpose batch are required")
                        return self._send(200, server.openai_file(form["file"][0], form["file"][1]))
                    found = OPENAI_BATCHES_ROUTE.fullmatch(path)
                    if found.group("id"):
                        batch = server.openai_batch(found.group("id"), cancel=bool(found.group("cancel")))
                        return self._send(200, batch) if batch else self._fail("openai", 404, "No such batch")
                    code, body = server.create_openai_batch(json.loads(raw or b"{}"))
                    return self._send(code, body) if code == 200 else self._fail("openai", code, body)
                batches = ANTHROPIC_BATCHES_ROUTE.fullmatch(path)
                if batches:
                    self._batch_credential()
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    if batches.group("action") == "cancel":
                        batch = server.message_batch(batches.group("id"), cancel=True)
                        return self._send(200, batch) if batch else self._fail("anthropic", 404, "no such batch")
                    for entry in body.get("requests") or [None]:
                        problem = "requests: each needs custom_id and params" if not entry or not entry.get(
                            "custom_id") else _malformed_request("anthropic", entry.get("params") or {}, self.headers)
                        if problem:
                            return self._fail("anthropic", 400, problem)
                    return self._send(200, server.create_message_batch(body["requests"]))
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
                fault = server.fault(prompt, model)
                if fault == "echo":
                    code = int(re.search(r"#echo_key=(\d{3})", prompt).group(1))
                    return self._fail(protocol, code, f"The credential {credential} was refused.")
                if fault == "unavailable":
                    return self._fail(protocol, 503, "The service is overloaded.")
                schema = _schema_of(protocol, body)
                text = server.answer(prompt, schema, body.get("seed"), model)
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

    # ---------------------------------------------------------------- OpenAI's Batch API

    def openai_file(self, filename: str | None, data: bytes) -> dict:
        file_id = f"file-{secrets.token_hex(8)}"
        with self._lock:
            self._openai_files[file_id] = data
            self.stats.uploads.append(len(data))
        return {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": filename or "input.jsonl", "purpose": "batch", "status": "processed"}

    def create_openai_batch(self, body: dict) -> tuple[int, Any]:
        data = self._openai_files.get(body.get("input_file_id"))
        if data is None or body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h":
            return 400, "input_file_id of an uploaded file, endpoint /v1/chat/completions and completion_window 24h"
        lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        for line in lines:
            problem = _malformed_request("openai", line.get("body") or {}, {}) if line.get("custom_id") and \
                line.get("url") == "/v1/chat/completions" and line.get("method") == "POST" else \
                "each line needs custom_id, method POST, url /v1/chat/completions"
            if problem:
                return 400, problem
        batch_id = f"batch_{secrets.token_hex(8)}"
        with self._lock:
            self._openai_batches[batch_id] = {"created": time.monotonic(), "input_file_id": body["input_file_id"],
                                              "lines": lines, "cancelled": False, "output": None}
            self.stats.batch_jobs.append({"id": batch_id, "model": lines[0]["body"].get("model"), "source": "openai",
                                          "requests": len(lines)})
        return 200, self.openai_batch(batch_id, count_poll=False)

    def _polled(self, batches: dict, batch_id: str, cancel: bool, count_poll: bool) -> tuple[dict | None, bool]:
        """A batch job of `batches` (None if unknown) and whether its time is up; counts the poll (one the
        client made, not a cancel), and marks and counts a cancel."""
        with self._lock:
            batch = batches.get(batch_id)
            if batch is None:
                return None, False
            self.stats.batch_polls += count_poll and not cancel
            if cancel:
                batch["cancelled"] = True
                self.stats.cancelled += 1
            return batch, time.monotonic() - batch["created"] >= self.behaviour.batch_seconds

    def openai_batch(self, batch_id: str, cancel: bool = False, count_poll: bool = True) -> dict | None:
        batch, due = self._polled(self._openai_batches, batch_id, cancel, count_poll)
        if batch is None:
            return None
        if due and batch["output"] is None and not batch["cancelled"]:
            answered, failed = [], []
            for line in batch["lines"]:
                result = self._openai_batch_item(line)
                (answered if result["response"]["status_code"] == 200 else failed).append(result)
            output = {}
            for name, results in (("output_file_id", answered), ("error_file_id", failed)):
                if results:
                    file_id = f"file-{secrets.token_hex(8)}"
                    with self._lock:
                        self._openai_files[file_id] = "".join(json.dumps(r) + "\n" for r in results).encode()
                    output[name] = file_id
            with self._lock:
                batch["output"] = output
        status = "cancelled" if batch["cancelled"] and batch["output"] is None else \
            "completed" if batch["output"] is not None else "in_progress"
        return {"id": batch_id, "object": "batch", "endpoint": "/v1/chat/completions",
                "input_file_id": batch["input_file_id"], "completion_window": "24h", "status": status,
                "created_at": int(time.time()), "output_file_id": (batch["output"] or {}).get("output_file_id"),
                "error_file_id": (batch["output"] or {}).get("error_file_id"),
                "request_counts": {"total": len(batch["lines"]), "completed": 0, "failed": 0}}

    def _openai_batch_item(self, line: dict) -> dict:
        body = line["body"]
        prompt = body["messages"][0]["content"]
        with self._lock:
            self.stats.batch_prompts[prompt] += 1
            attempt = self.stats.batch_prompts[prompt]
            self.stats.batch_items += 1
        failing = re.search(r"#batchfail=(\d+)", prompt)
        if "#fail" in prompt or (failing and attempt <= int(failing.group(1))):
            with self._lock:
                self.stats.batch_item_errors += 1
            return {"id": f"batch_req_{secrets.token_hex(6)}", "custom_id": line["custom_id"], "error": None,
                    "response": {"status_code": 500, "request_id": "req", "body": {"error": {
                        "message": "The server had an error while processing your request.", "type": "server_error"}}}}
        text = self.answer(prompt, _schema_of("openai", body), body.get("seed"), body.get("model"))
        prompt_tokens, output_tokens = len(prompt) // 4, len(text) // 4
        completion = {"id": f"chatcmpl-{secrets.token_hex(6)}", "object": "chat.completion",
                      "created": int(time.time()), "model": body["model"],
                      "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                   "message": {"role": "assistant", "content": text, "refusal": None}}],
                      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens,
                                "total_tokens": prompt_tokens + output_tokens}}
        return {"id": f"batch_req_{secrets.token_hex(6)}", "custom_id": line["custom_id"], "error": None,
                "response": {"status_code": 200, "request_id": "req", "body": completion}}

    # ---------------------------------------------------------------- Anthropic Message Batches

    def create_message_batch(self, requests: list) -> dict:
        batch_id = f"msgbatch_{secrets.token_hex(8)}"
        with self._lock:
            self._message_batches[batch_id] = {"created": time.monotonic(), "requests": requests,
                                               "cancelled": False, "results": None}
            self.stats.batch_jobs.append({"id": batch_id, "model": requests[0]["params"].get("model"),
                                          "source": "anthropic", "requests": len(requests)})
        return self.message_batch(batch_id, count_poll=False)

    def message_batch(self, batch_id: str, cancel: bool = False, count_poll: bool = True) -> dict | None:
        batch, due = self._polled(self._message_batches, batch_id, cancel, count_poll)
        if batch is None:
            return None
        if (due or batch["cancelled"]) and batch["results"] is None:
            results = [self._message_batch_item(entry, batch["cancelled"]) for entry in batch["requests"]]
            with self._lock:
                batch["results"] = results
        ended = batch["results"] is not None
        counts = collections.Counter(r["result"]["type"] for r in batch["results"] or [])
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {"id": batch_id, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                "request_counts": {"processing": 0 if ended else len(batch["requests"]),
                                   **{k: counts[k] for k in ("succeeded", "errored", "canceled", "expired")}},
                "created_at": now, "expires_at": now, "ended_at": now if ended else None, "archived_at": None,
                "cancel_initiated_at": now if batch["cancelled"] else None,
                "results_url": f"{self.url}/v1/messages/batches/{batch_id}/results" if ended else None}

    def message_batch_results(self, batch_id: str) -> list | None:
        with self._lock:
            batch = self._message_batches.get(batch_id)
        return batch["results"] if batch else None

    def _message_batch_item(self, entry: dict, cancelled: bool) -> dict:
        params, custom_id = entry["params"], entry["custom_id"]
        if cancelled:
            return {"custom_id": custom_id, "result": {"type": "canceled"}}
        prompt = params["messages"][0]["content"]
        with self._lock:
            self.stats.batch_prompts[prompt] += 1
            attempt = self.stats.batch_prompts[prompt]
            self.stats.batch_items += 1
        failing = re.search(r"#batchfail=(\d+)", prompt)
        if "#fail" in prompt or (failing and attempt <= int(failing.group(1))):
            with self._lock:
                self.stats.batch_item_errors += 1
            return {"custom_id": custom_id, "result": {"type": "errored", "error": {
                "type": "error", "error": {"type": "api_error", "message": "Internal server error"}}}}
        schema = _schema_of("anthropic", params)
        text = self.answer(prompt, schema, None, params.get("model"))
        content = [{"type": "text", "text": text}]
        if schema:
            try:
                content = [{"type": "tool_use", "id": f"toolu_{secrets.token_hex(6)}",
                            "name": params["tool_choice"]["name"], "input": json.loads(text)}]
            except json.JSONDecodeError:
                pass
        message = {"id": f"msg_{secrets.token_hex(6)}", "type": "message", "role": "assistant",
                   "model": params["model"], "content": content, "stop_reason": "end_turn", "stop_sequence": None,
                   "usage": {"input_tokens": len(prompt) // 4, "output_tokens": len(text) // 4}}
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}


def _multipart(content_type: str, raw: bytes) -> dict:
    """A multipart/form-data body -> {field: (filename, bytes)} (the standard library's email parser)."""
    from email.parser import BytesParser
    from email.policy import HTTP

    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    if not message.is_multipart():
        return {}
    return {part.get_param("name", header="content-disposition"): (part.get_filename(), part.get_payload(decode=True))
            for part in message.iter_parts()}


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
