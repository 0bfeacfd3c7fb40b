"""A local stand-in for the Gemini API's generateContent, for tests and the
judge benchmark only (these machines cannot reach Gemini). It speaks the real
protocol, so the real `google-genai` client drives it:

    POST /v1/models/<model>:generateContent (or /v1beta/...; x-goog-api-key header)
    -> {"candidates": [{"content": {"parts": [{"text": ...}]}}], "usageMetadata": {...}}

Behaviour:
- a quota of `quota` requests per `window_seconds` (sliding), answered beyond
  it with 429 and Retry-After;
- latency drawn from a log-normal distribution (median, sigma), a share of 503s
  (`error_rate`), and a share of answers slower than the client's timeout
  (`timeout_rate`, `timeout_delay`);
- judgments derived from the request content, so tests can assert exact
  scores. Markers in the instance texts, which the prompt shows:
    #score=N        the pointwise score (the last marker whose N is in the
                    rubric wins: the response comes last in the prompt)
    #samples=a,b,c  the pointwise score of sample (seed) 0, 1, 2, ...
    #quality=N      pairwise: the response with the higher quality wins
    #bias           pairwise: always answer "A" (position bias)
    #malformed=K    the first K attempts at this prompt answer non-JSON text
    #invalid=K      the first K attempts answer a score outside the rubric
    #fail           always 503
  Without a marker, the answer is chosen from the allowed values by a hash of
  the prompt.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
import random
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclasses.dataclass
class Behaviour:
    quota: int | None = None
    window_seconds: float = 60.0
    latency_median: float = 0.0
    latency_sigma: float = 0.0
    error_rate: float = 0.0
    timeout_rate: float = 0.0
    timeout_delay: float = 5.0
    seed: int = 0


@dataclasses.dataclass
class Stats:
    requests: int = 0  # every request received
    accepted: int = 0  # requests not refused with 429
    rate_limited: int = 0
    errors: int = 0
    timeouts: int = 0
    accepted_times: list = dataclasses.field(default_factory=list)
    api_keys: set = dataclasses.field(default_factory=set)
    prompts: collections.Counter = dataclasses.field(default_factory=collections.Counter)


class JudgeServer:
    def __init__(self, behaviour: Behaviour | None = None):
        self.behaviour = behaviour or Behaviour()
        self.stats = Stats()
        self._lock = threading.Lock()
        self._window: collections.deque = collections.deque()
        self._rng = random.Random(self.behaviour.seed)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()

    # ---------------------------------------------------------------- decisions

    def _admit(self) -> float | None:
        """None when admitted, else the seconds to Retry-After."""
        b = self.behaviour
        with self._lock:
            self.stats.requests += 1
            now = time.monotonic()
            if b.quota is not None:
                while self._window and now - self._window[0] >= b.window_seconds:
                    self._window.popleft()
                if len(self._window) >= b.quota:
                    self.stats.rate_limited += 1
                    return max(1.0, math.ceil(self._window[0] + b.window_seconds - now))
                self._window.append(now)
            self.stats.accepted += 1
            self.stats.accepted_times.append(now)
            return None

    def _draw(self):
        b = self.behaviour
        with self._lock:
            latency = b.latency_median * math.exp(self._rng.gauss(0, b.latency_sigma)) if b.latency_median else 0.0
            error = self._rng.random() < b.error_rate
            timeout = self._rng.random() < b.timeout_rate
        return latency, error, timeout

    def answer(self, prompt: str, schema: dict, seed: int | None = None) -> str:
        props = schema.get("properties", {})
        field = "choice" if "choice" in props else "score"
        allowed = props.get(field, {}).get("enum", [])
        with self._lock:
            self.stats.prompts[prompt] += 1
            attempt = self.stats.prompts[prompt]
        malformed = re.search(r"#malformed=(\d+)", prompt)
        if malformed and attempt <= int(malformed.group(1)):
            return "I think this response is pretty good, maybe a 4?"
        invalid = re.search(r"#invalid=(\d+)", prompt)
        if invalid and attempt <= int(invalid.group(1)):
            return json.dumps({"explanation": "out of range", field: "99"})
        if field == "choice":
            value = self._pairwise_choice(prompt, allowed)
        else:
            by_seed = re.search(r"#samples=([-\d,]+)", prompt)
            scores = [s for s in re.findall(r"#score=(-?\d+)", prompt) if s in allowed]
            if by_seed:
                value = by_seed.group(1).split(",")[int(seed or 0)]
            elif scores:
                value = scores[-1]
            else:
                value = allowed[int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % len(allowed)]
        return json.dumps({"explanation": f"Judged {field} {value} from the inputs.", field: value})

    @staticmethod
    def _pairwise_choice(prompt: str, allowed: list[str]) -> str:
        if "#bias" in prompt:
            return "A"
        a_part, _, b_part = prompt.partition("## Response B")
        a = re.findall(r"#quality=(\d+)", a_part.split("## Response A")[-1])
        b = re.findall(r"#quality=(\d+)", b_part)
        if a and b:
            return "A" if int(a[0]) > int(b[0]) else "B" if int(b[0]) > int(a[0]) else "SAME"
        return allowed[int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % len(allowed)]

    # ---------------------------------------------------------------- HTTP

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict, headers: dict | None = None):
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout)

            def do_POST(self):
                match = re.fullmatch(r"/v1(?:beta)?/models/([^/:]+):generateContent", self.path.split("?")[0])
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not match:
                    return self._send(404, {"error": {"code": 404, "message": f"no route {self.path}", "status": "NOT_FOUND"}})
                with server._lock:
                    server.stats.api_keys.add(self.headers.get("x-goog-api-key"))
                retry_after = server._admit()
                if retry_after is not None:
                    return self._send(429, {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                                                      "status": "RESOURCE_EXHAUSTED"}}, {"Retry-After": str(int(retry_after))})
                prompt = body["contents"][0]["parts"][0]["text"]
                latency, error, timeout = server._draw()
                if timeout:
                    with server._lock:
                        server.stats.timeouts += 1
                    time.sleep(server.behaviour.timeout_delay)
                elif latency:
                    time.sleep(latency)
                if error or "#fail" in prompt:
                    with server._lock:
                        server.stats.errors += 1
                    return self._send(503, {"error": {"code": 503, "message": "The service is currently unavailable.", "status": "UNAVAILABLE"}})
                generation = body.get("generationConfig", {})
                text = server.answer(prompt, generation.get("responseSchema", {}), generation.get("seed"))
                prompt_tokens, output_tokens = len(prompt) // 4, len(text) // 4
                self._send(200, {
                    "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": output_tokens,
                                      "totalTokenCount": prompt_tokens + output_tokens},
                    "modelVersion": match.group(1),
                })

        return Handler
