"""A local stand-in for the Gemini API's generateContent, for tests and the
judge benchmark only (these machines cannot reach Gemini). It speaks the real
protocol, so the real `google-genai` client drives it:

    POST /v1/models/<model>:generateContent (or /v1beta/...; x-goog-api-key header)
    POST /v1beta1/projects/<p>/locations/<l>/publishers/google/models/<model>:generateContent
         (Vertex AI, as google-genai sends it with vertexai=True and a base_url; or /v1/...;
         `Authorization: Bearer <token>` with a token this server issued, else 401)
    -> {"candidates": [{"content": {"parts": [{"text": ...}]}}], "usageMetadata": {...}}
    POST /token  (an OAuth 2.0 token endpoint, for Application Default Credentials: a
         service account file whose token_uri points here; its JWT-bearer grant's RS256
         signature is checked against the key registered with `trust`)
    -> {"access_token": ..., "expires_in": 3600, "token_type": "Bearer"}

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
    #echo_key=N     answer HTTP status N with an error message that repeats the
                    credential the request carried (the API key from the
                    x-goog-api-key header or `key` parameter, else the bearer
                    token), as a careless proxy might: the client must scrub it
  Without a marker, the answer is chosen from the allowed values by a hash of
  the prompt.
  Rubric metrics (told apart by the response schema they ask for):
    generation (a "rubrics" list):
    #rubrics=N       generate N rubrics (default 3), numbered by the client r1..rN
    #importance=HML  the importance of rubric 1, 2, 3, ... (H, M or L; the last letter
                     repeats; default M)
    validation (one property per rubric id):
    #verdicts=yny    the verdict of each rubric asked, in order (the last letter repeats);
                     samples separated by "/" (#verdicts=yy/nn/yn: seed 0, 1, 2); the last
                     marker in the prompt wins (the response comes last)
    claims (grounding, a "claims" list):
    #claims=supported,no_rad,unsupported   the claims' labels, in order (default: one supported)
    #invalid=K       the first K attempts answer against the schema: a generation with an
                     importance outside HIGH/MEDIUM/LOW, a validation that skips the last
                     rubric and answers one not asked, a claim with an unknown label
  `stats.stages` counts the answers given per stage (generation, validation, claims,
  score, choice): a test counts generation calls with it.
"""
from __future__ import annotations

import base64
import collections
import dataclasses
import hashlib
import json
import math
import random
import re
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GEMINI_ROUTE = re.compile(r"/v1(?:beta)?/models/(?P<model>[^/:]+):generateContent")
VERTEX_ROUTE = re.compile(r"/v1(?:beta1)?/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
                          r"/publishers/google/models/(?P<model>[^/:]+):generateContent")
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 500: "INTERNAL",
                503: "UNAVAILABLE"}


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
    echoed: int = 0  # error answers that repeated the request's credential
    in_flight: int = 0  # admitted requests not yet answered
    peak_in_flight: int = 0
    # Vertex AI: (project, location, model) per request, the bearer tokens presented, refusals
    vertex_resources: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    bearer_tokens: set = dataclasses.field(default_factory=set)
    unauthorized: int = 0
    # the token endpoint: every grant asked for (the JWT's claims; {"invalid": True} for a
    # refused one), and the access tokens issued
    token_requests: list = dataclasses.field(default_factory=list)
    issued_tokens: set = dataclasses.field(default_factory=set)
    # answers given (malformed and invalid ones included), per stage
    stages: collections.Counter = dataclasses.field(default_factory=collections.Counter)


class JudgeServer:
    def __init__(self, behaviour: Behaviour | None = None):
        self.behaviour = behaviour or Behaviour()
        self.stats = Stats()
        self._lock = threading.Lock()
        self._window: collections.deque = collections.deque()
        self._rng = random.Random(self.behaviour.seed)
        self._trusted: dict = {}  # service account email -> RSA public key
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

    def trust(self, client_email: str, public_key) -> None:
        """Accept JWT-bearer grants signed by this service account's key (a `cryptography` RSA public key)."""
        self._trusted[client_email] = public_key

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
        stage = "generation" if "rubrics" in props else "claims" if "claims" in props else \
            field if field in props else "validation"
        with self._lock:
            self.stats.prompts[prompt] += 1
            self.stats.stages[stage] += 1
            attempt = self.stats.prompts[prompt]
        malformed = re.search(r"#malformed=(\d+)", prompt)
        if malformed and attempt <= int(malformed.group(1)):
            return "I think this response is pretty good, maybe a 4?"
        invalid = re.search(r"#invalid=(\d+)", prompt)
        invalid = bool(invalid and attempt <= int(invalid.group(1)))
        if stage == "generation":
            return self._rubrics(prompt, invalid)
        if stage == "validation":
            return self._verdicts(prompt, schema.get("required", list(props)), seed, invalid)
        if stage == "claims":
            return self._claims(prompt, invalid)
        if invalid:
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
    def _rubrics(prompt: str, invalid: bool) -> str:
        count = re.findall(r"#rubrics=(\d+)", prompt)
        letters = (re.findall(r"#importance=([HML]+)", prompt) or ["M"])[-1]
        names = {"H": "HIGH", "M": "MEDIUM", "L": "LOW"}
        digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
        rubrics = [{"text": f"The response has property {i + 1} asked for by prompt {digest}.", "type": "content",
                    "importance": "URGENT" if invalid else names[letters[min(i, len(letters) - 1)]]}
                   for i in range(int(count[-1]) if count else 3)]
        return json.dumps({"rubrics": rubrics})

    @staticmethod
    def _verdicts(prompt: str, ids: list[str], seed: int | None, invalid: bool) -> str:
        marker = re.findall(r"#verdicts=([yn/]+)", prompt)
        if marker:
            samples = marker[-1].split("/")
            letters = samples[min(int(seed or 0), len(samples) - 1)]
        else:
            letters = "yn"[int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 2]
        answer = {i: {"reasoning": f"Rubric {i} judged from the response.",
                      "verdict": "yes" if letters[min(n, len(letters) - 1)] == "y" else "no"}
                  for n, i in enumerate(ids)}
        if invalid:
            answer.pop(ids[-1], None)
            answer["not_asked"] = {"reasoning": "an invented rubric", "verdict": "yes"}
        return json.dumps(answer)

    @staticmethod
    def _claims(prompt: str, invalid: bool) -> str:
        labels = (re.findall(r"#claims=([a-z_,]+)", prompt) or ["supported"])[-1].split(",")
        claims = [{"claim": f"Claim {n + 1} of the response.", "label": "maybe" if invalid else label,
                   "reasoning": f"Labelled {label} against the context.", "excerpt": ""}
                  for n, label in enumerate(labels)]
        return json.dumps({"claims": claims})

    def grant(self, form: dict[str, str]) -> tuple[int, dict]:
        """The token endpoint's answer (status, body) to a form-encoded grant."""
        grant_type = form.get("grant_type", "")
        claims = self._verified_claims(form.get("assertion", "")) if grant_type == JWT_BEARER else None
        with self._lock:
            self.stats.token_requests.append(claims or {"grant_type": grant_type, "invalid": True})
        if grant_type != JWT_BEARER:
            return 400, {"error": "unsupported_grant_type"}
        if claims is None:
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        token = f"ya29.local-{secrets.token_urlsafe(24)}"
        with self._lock:
            self.stats.issued_tokens.add(token)
        return 200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}

    def _verified_claims(self, assertion: str) -> dict | None:
        """The claims of an RS256 JWT signed by a trusted service account and not expired, else None."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        def decode(part: str) -> bytes:
            return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

        try:
            header_b64, claims_b64, signature_b64 = assertion.split(".")
            header, claims = json.loads(decode(header_b64)), json.loads(decode(claims_b64))
            key = self._trusted[claims["iss"]]
            if header.get("alg") != "RS256" or claims["exp"] < time.time():
                return None
            key.verify(decode(signature_b64), f"{header_b64}.{claims_b64}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except (ValueError, KeyError, TypeError, InvalidSignature):
            return None
        return claims

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
                url = urllib.parse.urlsplit(self.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if url.path == "/token":
                    form = dict(urllib.parse.parse_qsl(raw.decode()))
                    return self._send(*server.grant(form))
                gemini, vertex = GEMINI_ROUTE.fullmatch(url.path), VERTEX_ROUTE.fullmatch(url.path)
                if not (gemini or vertex):
                    return self._send(404, {"error": {"code": 404, "message": f"no route {url.path}", "status": "NOT_FOUND"}})
                body = json.loads(raw or b"{}")
                api_key = self.headers.get("x-goog-api-key") or dict(urllib.parse.parse_qsl(url.query)).get("key")
                authorization = self.headers.get("Authorization", "")
                bearer = authorization[len("Bearer "):] if authorization.startswith("Bearer ") else None
                refused = False
                with server._lock:
                    server.stats.api_keys.add(api_key)
                    if vertex:
                        server.stats.vertex_resources[vertex.group("project", "location", "model")] += 1
                        server.stats.bearer_tokens.add(bearer)
                        refused = bearer not in server.stats.issued_tokens
                        server.stats.unauthorized += refused
                if refused:
                    return self._send(401, {"error": {
                        "code": 401, "status": "UNAUTHENTICATED",
                        "message": "Request is missing required authentication credential. Expected OAuth 2 access token."}})
                self._generate(body, (gemini or vertex).group("model"), api_key or bearer)

            def _generate(self, body: dict, model: str, credential: str | None):
                retry_after = server._admit()
                if retry_after is not None:
                    return self._send(429, {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                                                      "status": "RESOURCE_EXHAUSTED"}}, {"Retry-After": str(int(retry_after))})
                with server._lock:
                    server.stats.in_flight += 1
                    server.stats.peak_in_flight = max(server.stats.peak_in_flight, server.stats.in_flight)
                try:
                    self._answer_admitted(body, model, credential)
                finally:
                    with server._lock:
                        server.stats.in_flight -= 1

            def _answer_admitted(self, body: dict, model: str, credential: str | None):
                prompt = body["contents"][0]["parts"][0]["text"]
                latency, error, timeout = server._draw()
                if timeout:
                    with server._lock:
                        server.stats.timeouts += 1
                    time.sleep(server.behaviour.timeout_delay)
                elif latency:
                    time.sleep(latency)
                echo = re.search(r"#echo_key=(\d{3})", prompt)
                if echo:
                    code = int(echo.group(1))
                    with server._lock:
                        server.stats.echoed += 1
                        server.stats.errors += code >= 500
                    return self._send(code, {"error": {"code": code, "status": STATUS_NAMES.get(code, "UNKNOWN"),
                                                       "message": f"The credential {credential} was refused."}})
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
                    "modelVersion": model,
                })

        return Handler
