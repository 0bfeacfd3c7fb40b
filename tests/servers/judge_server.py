"""A local stand-in for the Gemini API's generateContent, for tests and the
judge benchmark only (these machines cannot reach Gemini). It speaks the real
protocol, so the real `google-genai` client drives it:

    POST /v1/models/<model>:generateContent (or /v1beta/...; x-goog-api-key header)
    POST /v1beta1/projects/<p>/locations/<l>/publishers/google/models/<model>:generateContent
         (Vertex AI, as google-genai sends it with vertexai=True and a base_url; or /v1/...;
         `Authorization: Bearer <token>` with a token this server issued, else 401)
    -> {"candidates": [{"content": {"parts": [{"text": ...}]}}], "usageMetadata": {...}}
    Batch mode (the Gemini API's, as google-genai's client.batches and client.files send it):
    POST /v1beta/models/<model>:batchGenerateContent  {"batch": {"displayName", "inputConfig":
         {"requests": {"requests": [{"request": GenerateContentRequest, "metadata": {...}}]}}
         or {"fileName": "files/<id>"}}}  -> the batch (an Operation: name batches/<id>, metadata)
    GET  /v1beta/batches/<id>  -> {"name", "metadata": {"state": BATCH_STATE_PENDING | _RUNNING |
         _SUCCEEDED | _FAILED | _CANCELLED, "output": {"inlinedResponses": {"inlinedResponses":
         [{"response" | "error", "metadata"}]}} or {"responsesFile": "files/<id>"}, ...}, "done"}
    POST /v1beta/batches/<id>:cancel
    POST /upload/v1beta/files  (resumable upload: X-Goog-Upload-Command start, then upload,
         finalize at the X-Goog-Upload-URL it gave) -> {"file": {"name": "files/<id>", ...}}
    GET  /v1beta/files/<id>:download?alt=media  -> a result file: JSONL lines {"key", "response"}
         or {"key", "error"}
    Vertex AI batch prediction (client.batches with vertexai=True; Bearer token as above), with
    its files in Cloud Storage (the storage emulator, through google-cloud-storage):
    POST /v1beta1/projects/<p>/locations/<l>/batchPredictionJobs  {"displayName", "model":
         "publishers/google/models/<m>", "inputConfig": {"instancesFormat": "jsonl", "gcsSource":
         {"uris": [gs://...jsonl]}}, "outputConfig": {"predictionsFormat": "jsonl",
         "gcsDestination": {"outputUriPrefix": gs://...}}}  -> the job (state JOB_STATE_PENDING)
    GET  .../batchPredictionJobs/<id>  -> state JOB_STATE_RUNNING | _SUCCEEDED | _FAILED, and when
         done "outputInfo": {"gcsOutputDirectory": <prefix>/prediction-model-<time>}, where
         predictions.jsonl holds {"request", "response", "status": ""} or {"request", "status": <error>}
    POST /token  (an OAuth 2.0 token endpoint, for Application Default Credentials: a
         service account file whose token_uri points here; its JWT-bearer grant's RS256
         signature is checked against the key registered with `trust`)
    -> {"access_token": ..., "expires_in": 3600, "token_type": "Bearer"}; a grant whose JWT carries
         `target_audience` (google-auth's service_account.IDTokenCredentials) -> {"id_token": ...}: an
         RS256 JWT (aud, email, iat, exp: `id_token_lifetime` seconds) signed with this server's own
         key, as Google's token endpoint answers it
    GET  /oauth2/v1/certs  -> {kid: PEM certificate}: the key the ID tokens are signed with, in the
         format of https://www.googleapis.com/oauth2/v1/certs (google.oauth2.id_token.verify_token)

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
    #bias_samples=101  pairwise: sample (seed) s answers "A" when character s is 1, else
                    as without the marker (the last character repeats)
    #malformed=K    the first K attempts at this prompt answer non-JSON text
    #invalid=K      the first K attempts answer a score outside the rubric
    #fail           always 503 (in a batch: an item error)
    #score@MODEL=N, #quality@MODEL=N   as #score=N and #quality=N, for calls to MODEL only (a jury's
                    jurors answering differently); markers of other models are ignored
    #down@MODEL     always 503 for calls to MODEL only (a juror failing after its retries)
    #slow=S         the first request with this prompt is answered S seconds late (later
                    ones as usual): a call in the latency tail
    #unavailable_at=2,3  the 2nd and 3rd requests with this prompt answer 503 (counted as
                    they arrive)
    #batchfail=K    the first K batch attempts at this prompt fail as an item error (a
                    batch job's per-request failure); online calls are unaffected
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
    segmentation (a "sentences" list; hallucination):
    #sentences=N     N sentences (default 2; 0: none)
    labels (one property per sentence id, each with a "label"):
    #labels=supported,unsupported   each sentence's label, in order (the last repeats;
                     default: supported); the last marker in the prompt wins
    claims (grounding, a "claims" list):
    #claims=supported,no_rad,unsupported   the claims' labels, in order (default: one supported)
    #invalid=K       the first K attempts answer against the schema: a generation with an
                     importance outside HIGH/MEDIUM/LOW, a validation that skips the last
                     rubric and answers one not asked, a claim with an unknown label
  Conversation scenarios (a schema with a "scenarios" list, of at most maxItems): that many scenarios
  of random words (seeded by the prompt and the seed), tools [], unless:
    #fewer=K         K fewer scenarios than asked
    #dup=K           the last K are copies of the first (exact duplicates)
    #near=K          the last K are the first with one word of its plan changed (near-duplicates)
    #empty           the first has an empty conversation_plan
    #badplan         the first's conversation_plan is a list (ADK's ConversationScenario refuses it)
    #tool=NAME       the first names the tool NAME
    #malformed=K and #fail as above
  Red-team attacks (a schema with an "attacks" list): one attack per distinct #attack=FAMILY marker in the
    agent's description (default: one, family stand_in), its template "As FAMILY asks: #say={canary}",
    its goal the canary.
  Failure modes (a schema with "mode" and "rationale"; a taxonomy: a "modes" list):
    #mode=ID         classify as ID (the last marker in the prompt wins; ID need not be in the
                     taxonomy); without one, a mode of the schema's enum by the prompt's hash;
                     #malformed=K and #fail as above
    a taxonomy:      one mode per distinct #mode= marker in the sampled failures, in order
  `stats.stages` counts the answers given per stage (generation, validation, claims,
  score, choice, text, agent): a test counts generation calls with it.
  Free text (a request with no response schema: inference.model):
    #reply=TEXT      answer TEXT (to the end of its line; the last marker wins); without
                     one, "Answer <first 8 hex digits of the prompt's sha256>" (a prompt asking for
                     "is_the_agent_response_valid", ADK's final_response_match_v2: a JSON answer
                     valid or invalid by that hash)
                     (a prompt ending with ADK's rubric <properties>: "ID/Property/Rationale/Verdict"
                     per rubric, yes or no by that hash)
    ADK's hallucinations_v1 (a prompt whose last section is its "**Sentences Begin**" list: the
    validator) answers each <sentence> in ADK's sentence/label/rationale/excerpt blocks, its label the
    last "#label=L" in the sentence (default supported; "#label=skip": no block for it). Its segmenter
    (a prompt whose last section is "**Response Begin**"), with no marker: the response as one sentence.
    #replies=A ;; B ;; C   the n-th request with this prompt (counted as they arrive, any seed)
                     answers the n-th text, cycling: samples that differ, for a client that sends
                     no seed (ADK's judges) as for one that does; "\\n" in a text is a new line
  An agent's model calls (a request declaring tools, as ADK's LlmAgent sends them), driven
  by markers in the latest user text of the conversation:
    #call=NAME{JSON}  a function call NAME with those args, one per marker, all in the
                      first answer after the user's text; once every call has its function
                      response, the final text "Done: " + the responses' JSON, in call
                      order, joined with "; "
    without a marker: the final text "No tool needed: <the user's text>"
  and it falls for what its tools answer (red teaming: tests/transforms/test_red_team_agent.py):
    #call=NAME{JSON}  in a text of a function response: the call, made next, once (unless the turn
                      made it already)
    #say=TEXT         in the user's text or a function response's text: the final text ends with TEXT
                      (up to the next space)
  anything else a tool answers (a polite request, a fake notice) it ignores.
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
from http.server import BaseHTTPRequestHandler

from tests.servers.local import LocalHTTPServer

# the words of generated scenarios (#dup / #near aside, two scenarios share few word triples)
_VOCABULARY = tuple(f"{a}{b}" for a in ("sun", "rain", "wind", "snow", "fog", "storm", "cloud", "frost", "heat", "hail",
                                           "mist", "gale", "dew", "ice", "thaw", "dusk")
                    for b in ("", "y", "ier", "iest", "fall", "front", "line", "cap", "watch", "shift", "break",
                          "spell", "burst", "drift", "tide", "mark"))
BATCH_CREATE_ROUTE = re.compile(r"/v1(?:beta)?/models/(?P<model>[^/:]+):batchGenerateContent")
BATCH_ROUTE = re.compile(r"/v1(?:beta)?/batches/(?P<id>[^/:]+)(?P<cancel>:cancel)?")
UPLOAD_ROUTE = re.compile(r"/upload/v1(?:beta)?/files")
DOWNLOAD_ROUTE = re.compile(r"/(?:download/)?v1(?:beta)?/files/(?P<id>[^/:]+):download")
VERTEX_BATCH_ROUTE = re.compile(r"/v1(?:beta1)?/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
                                r"/batchPredictionJobs(?:/(?P<id>[^/:]+)(?P<cancel>:cancel)?)?")
GEMINI_ROUTE = re.compile(r"/v1(?:beta)?/models/(?P<model>[^/:]+):generateContent")
VERTEX_ROUTE = re.compile(r"/v1(?:beta1)?/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
                          r"/publishers/google/models/(?P<model>[^/:]+):generateContent")
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                500: "INTERNAL", 503: "UNAVAILABLE"}


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
    batch_seconds: float = 0.3  # how long a batch job takes (pending for the first half, then running)
    batch_fail_jobs: int = 0  # the first N batch jobs fail as a whole (state BATCH_STATE_FAILED)


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
    duplicates: int = 0  # admitted requests asking what another one in flight asks
    # (a client's hedged copy, or its retry after a timeout)
    # Vertex AI: (project, location, model) per request, the bearer tokens presented, refusals
    vertex_resources: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    bearer_tokens: set = dataclasses.field(default_factory=set)
    unauthorized: int = 0
    # the token endpoint: every grant asked for (the JWT's claims; {"invalid": True} for a
    # refused one), and the access tokens issued
    token_requests: list = dataclasses.field(default_factory=list)
    issued_tokens: set = dataclasses.field(default_factory=set)
    id_tokens: list = dataclasses.field(default_factory=list)  # the claims of every ID token issued
    issued_id_tokens: set = dataclasses.field(default_factory=set)  # the tokens (to look for where they must not be)
    # answers given (malformed and invalid ones included), per stage
    stages: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # the answer field each scored request's schema asked for (score, choice, pairwise_choice)
    answer_fields: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # batch mode: every job created ({"id", "model", "source": inline | file, "requests"}), the
    # items answered in batches, polls of a job's state, files uploaded (sizes) and downloaded
    batch_jobs: list = dataclasses.field(default_factory=list)
    batch_items: int = 0
    batch_item_errors: int = 0
    batch_polls: int = 0
    uploads: list = dataclasses.field(default_factory=list)
    downloads: int = 0
    cancelled: int = 0
    batch_prompts: collections.Counter = dataclasses.field(default_factory=collections.Counter)


@dataclasses.dataclass
class _BatchJob:
    id: str
    model: str
    display_name: str
    items: list  # (key or None, GenerateContentRequest, metadata or None)
    source: str  # inline | file | gcs (Vertex AI)
    created: float
    fail: bool = False
    state: str = "BATCH_STATE_PENDING"
    output: dict | None = None
    vertex: dict | None = None  # Vertex AI: {"project", "location", "body", "output_prefix"}


def _call_markers(text: str) -> list[tuple[str, dict]]:
    return [(m.group(1), json.loads(m.group(2))) for m in re.finditer(r"#call=(\w+)(\{[^}]*\})", text)]


def _strings(value) -> list[str]:
    """Every text in a JSON value (a function response)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _strings(v)]
    if isinstance(value, list):
        return [t for v in value for t in _strings(v)]
    return []


def _error(code: int, message: str) -> dict:
    return {"error": {"code": code, "message": message, "status": STATUS_NAMES.get(code, "UNKNOWN")}}


def _sentence_labels(sentences: str) -> str:
    """ADK's hallucinations_v1 validator's answer: a block per <sentence>, labelled by its last #label=."""
    blocks = []
    for text in re.findall(r"<sentence>(.*?)</sentence>", sentences, re.S):
        label = (re.findall(r"#label=(\w+)", text) or ["supported"])[-1]
        if label != "skip":
            blocks.append(f"sentence: {text}\nlabel: {label}\nrationale: stand-in\n"
                          "supporting_excerpt: null\ncontradicting_excerpt: null")
    return "\n".join(blocks) or "Nothing to label."  # (an empty answer is a failed call to the client)


def _generate_response(prompt: str, text: str, model: str) -> dict:
    prompt_tokens, output_tokens = len(prompt) // 4, len(text) // 4
    return {
        "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": output_tokens,
                          "totalTokenCount": prompt_tokens + output_tokens},
        "modelVersion": model,
    }


class JudgeServer(LocalHTTPServer):
    def __init__(self, behaviour: Behaviour | None = None):
        self.behaviour = behaviour or Behaviour()
        self.stats = Stats()
        self._lock = threading.Lock()
        self._window: collections.deque = collections.deque()
        self._open: collections.Counter = collections.Counter()  # the contents of the requests in flight
        self._asked: collections.Counter = collections.Counter()  # generateContent requests per prompt
        self._rng = random.Random(self.behaviour.seed)
        self._trusted: dict = {}  # service account email -> RSA public key
        self.id_token_lifetime = 3600  # seconds an ID token lives (tests: shorter, to expire mid-run)
        self._signer = None  # (kid, private key, PEM certificate): made at the first ID token or certs request
        self._batches: dict = {}  # id -> _BatchJob
        self._files: dict = {}  # id -> bytes (uploaded inputs and result files)
        self._result_files: set = set()
        self._uploads: dict = {}  # upload session id -> {"size", "data", "mime_type", "display_name"}
        self._listen(self._handler())

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

    def fault(self, prompt: str, model: str | None = None) -> str | None:
        """What goes wrong with one request, whatever protocol it came in (this server's, or
        tests.servers.provider_servers'): draws the Behaviour's latency, timeout and error, counts the prompt, and
        reads its markers (#slow=S on its first ask, #unavailable_at=N,.. on those asks, #echo_key=CODE,
        #fail, #down@MODEL). -> None (answer it), "echo" (fail with #echo_key's status, echoing the
        credential) or "unavailable" (503); the stats are counted here."""
        latency, error, timeout = self._draw()
        if timeout:
            with self._lock:
                self.stats.timeouts += 1
            time.sleep(self.behaviour.timeout_delay)
        elif latency:
            time.sleep(latency)
        with self._lock:
            self._asked[prompt] += 1
            nth = self._asked[prompt]
        slow = re.search(r"#slow=(\d+(?:\.\d+)?)", prompt)
        if slow and nth == 1:
            time.sleep(float(slow.group(1)))
        unavailable_at = re.search(r"#unavailable_at=([\d,]+)", prompt)
        error = error or bool(unavailable_at and str(nth) in unavailable_at.group(1).split(","))
        echo = re.search(r"#echo_key=(\d{3})", prompt)
        if echo:
            with self._lock:
                self.stats.echoed += 1
                self.stats.errors += int(echo.group(1)) >= 500
            return "echo"
        if error or "#fail" in prompt or (model and f"#down@{model}" in prompt):
            with self._lock:
                self.stats.errors += 1
            return "unavailable"
        return None

    def _draw(self):
        b = self.behaviour
        with self._lock:
            latency = b.latency_median * math.exp(self._rng.gauss(0, b.latency_sigma)) if b.latency_median else 0.0
            error = self._rng.random() < b.error_rate
            timeout = self._rng.random() < b.timeout_rate
        return latency, error, timeout

    def answer(self, prompt: str, schema: dict, seed: int | None = None, model: str | None = None) -> str:
        if model and "@" in prompt:  # this model's own markers (#score@MODEL=N) as plain ones
            prompt = re.sub(rf"#(score|quality)@{re.escape(model)}=", r"#\1=", prompt)
        if not schema:  # free text
            with self._lock:
                self.stats.prompts[prompt] += 1
                self.stats.stages["text"] += 1
                arrival = self.stats.prompts[prompt]
            _, validator, sentences = prompt.rpartition("**Sentences Begin**")
            if validator and "**Sentences End**" in sentences:
                return _sentence_labels(sentences.split("**Sentences End**")[0])
            sequence = re.findall(r"#replies=([^\n]*)", prompt)
            if sequence:  # the n-th request with this prompt gets the n-th reply (cycling)
                options = sequence[-1].split(" ;; ")
                return options[(arrival - 1) % len(options)].replace("\\n", "\n")
            replies = re.findall(r"#reply=([^\n]*)", prompt)
            digest = hashlib.sha256(prompt.encode()).hexdigest()
            _, found, properties = prompt.rpartition("<properties>\n")
            if not replies and found and properties.endswith("</properties>\n\n## Output\n"):
                # ADK's rubric-based criteria: a verdict per rubric, by the hash
                return "\n\n".join(
                    f"ID: {m.group(1)}\nProperty: {m.group(2)}\nRationale: stand-in\nVerdict: "
                    + ("yes" if int(hashlib.sha256((digest + m.group(1)).encode()).hexdigest()[:2], 16) % 2 else "no")
                    for m in re.finditer(r"^\*  \[id: ([^\]]*)\] (.*)$", properties, re.M))
            _, segmenter, response = prompt.rpartition("**Response Begin**")
            if not replies and segmenter and "**Response End**" in response:  # ADK's hallucinations_v1 segmenter
                return f"<sentence>{response.split('**Response End**')[0].strip()}</sentence>"
            if not replies and '"is_the_agent_response_valid"' in prompt:  # ADK's final_response_match_v2
                label = "valid" if int(digest[:2], 16) % 2 else "invalid"
                return json.dumps({"reasoning": "stand-in", "is_the_agent_response_valid": label})
            return replies[-1] if replies else f"Answer {digest[:8]}"
        props = schema.get("properties", {})
        # pairwise: evalbeam's prompts ask for "choice", Vertex's for "pairwise_choice"
        field = next((f for f in ("choice", "pairwise_choice") if f in props), "score")
        allowed = props.get(field, {}).get("enum", [])
        if "mode" in props and "rationale" in props:  # a failure's classification
            return self._failure_mode(prompt, props["mode"].get("enum", []))
        if "modes" in props:  # a taxonomy discovered from a sample of failures
            return self._taxonomy(prompt)
        if "scenarios" in props:  # conversation scenarios generated (metrics.scenarios)
            items = props["scenarios"]  # google-genai sends snake_case (max_items), the REST API camelCase
            return self._scenarios(prompt, int(items.get("maxItems", items.get("max_items", 1))), seed)
        if "attacks" in props:  # red-team attacks written from an agent's description
            return self._attacks(prompt)
        stage = "generation" if "rubrics" in props else "claims" if "claims" in props else \
            "segmentation" if "sentences" in props else ("choice" if "choice" in field else field) if field in props else \
            "labels" if any("label" in (p.get("properties") or {}) for p in props.values()) else "validation"
        with self._lock:
            self.stats.prompts[prompt] += 1
            self.stats.stages[stage] += 1
            self.stats.answer_fields[field] += field in props
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
        if stage == "segmentation":
            count = int((re.findall(r"#sentences=(\d+)", prompt) or ["2"])[-1])
            digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
            return json.dumps({"sentences": [f"Sentence {n + 1} of text {digest}." for n in range(count)]})
        if stage == "labels":
            ids = schema.get("required", list(props))
            labels = (re.findall(r"#labels=([a-z_,]+)", prompt) or ["supported"])[-1].split(",")
            answer = {i: {"reasoning": f"Sentence {i} checked against the context.",
                          "label": "maybe" if invalid else labels[min(n, len(labels) - 1)]} for n, i in enumerate(ids)}
            return json.dumps(answer)
        if invalid:
            return json.dumps({"explanation": "out of range", field: "99"})
        if field in ("choice", "pairwise_choice"):
            value = self._pairwise_choice(prompt, allowed, seed)
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

    def _failure_mode(self, prompt: str, allowed: list[str]) -> str:
        with self._lock:
            self.stats.prompts[prompt] += 1
            self.stats.stages["failure_mode"] += 1
            attempt = self.stats.prompts[prompt]
        malformed = re.search(r"#malformed=(\d+)", prompt)
        if malformed and attempt <= int(malformed.group(1)):
            return "Probably a tool problem, I would say."
        named = re.findall(r"#mode=([A-Za-z0-9_]+)", prompt)
        value = named[-1] if named else allowed[int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % len(allowed)]
        return json.dumps({"mode": value, "rationale": f"The case shows {value}."})

    def _attacks(self, prompt: str) -> str:
        with self._lock:
            self.stats.prompts[prompt] += 1
            self.stats.stages["attack_generation"] += 1
        families = list(dict.fromkeys(re.findall(r"#attack=([a-z][a-z0-9_]*)", prompt))) or ["stand_in"]
        return json.dumps({"attacks": [{"family": f, "template": f"As {f} asks: #say={{canary}}", "goal": "canary"}
                                       for f in families]})

    def _taxonomy(self, prompt: str) -> str:
        with self._lock:
            self.stats.prompts[prompt] += 1
            self.stats.stages["taxonomy"] += 1
        seen = list(dict.fromkeys(re.findall(r"#mode=([a-z][a-z0-9_]*)", prompt)))
        return json.dumps({"modes": [{"id": m, "name": m.replace("_", " ").capitalize(),
                                      "description": f"Failures the sample shows as {m}."} for m in seen]})

    def _scenarios(self, prompt: str, count: int, seed: int | None) -> str:
        with self._lock:
            self.stats.prompts[prompt] += 1
            self.stats.stages["scenarios"] += 1
            attempt = self.stats.prompts[prompt]
        malformed = re.search(r"#malformed=(\d+)", prompt)
        if malformed and attempt <= int(malformed.group(1)):
            return "Here are some scenarios: 1. a user asks about the weather"
        count -= int((re.findall(r"#fewer=(\d+)", prompt) or ["0"])[-1])
        rng = random.Random(f"{hashlib.sha256(prompt.encode()).hexdigest()}:{seed}")
        items = []
        for i in range(max(count, 0)):
            words = " ".join(rng.choice(_VOCABULARY) for _ in range(24))
            items.append({"starting_prompt": f"Hello, I need help: {' '.join(rng.choice(_VOCABULARY) for _ in range(6))}",
                          "conversation_plan": f"You want {words}.", "tools": []})
        for k in range(min(int((re.findall(r"#dup=(\d+)", prompt) or ["0"])[-1]), len(items) - 1)):
            items[-1 - k] = dict(items[0])  # the same scenario again
        for k in range(min(int((re.findall(r"#near=(\d+)", prompt) or ["0"])[-1]), len(items) - 1)):
            near = dict(items[0])  # the first with one word of its plan changed
            near["conversation_plan"] = near["conversation_plan"].replace("You want", "You would like", 1)
            items[-1 - k] = near
        if items and "#empty" in prompt:
            items[0] = {**items[0], "conversation_plan": "  "}
        if items and "#badplan" in prompt:  # not text: ADK's ConversationScenario refuses it
            items[0] = {**items[0], "conversation_plan": ["step one", "step two"]}
        tool = re.findall(r"#tool=([A-Za-z0-9_]+)", prompt)
        if items and tool:
            items[0] = {**items[0], "tools": [tool[-1]]}
        return json.dumps({"scenarios": items})

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

    def agent_answer(self, contents: list[dict]) -> list[dict]:
        """The parts of a model turn answering an agent's conversation (see the markers above)."""
        with self._lock:
            self.stats.stages["agent"] += 1
        # the latest user text, and what came after it
        start = max((i for i, c in enumerate(contents) if c.get("role", "user") == "user"
                     and any("text" in p for p in c.get("parts", []))), default=0)
        text = "\n".join(p["text"] for p in contents[start].get("parts", []) if "text" in p)
        after = contents[start + 1:]
        calls = _call_markers(text)
        says = re.findall(r"#say=(\S+)", text)
        if not calls:
            return [{"text": " ".join([f"No tool needed: {text}", *says])}]
        responses = [p["functionResponse"] for c in after for p in c.get("parts", []) if "functionResponse" in p]
        made = [(p["functionCall"]["name"], json.dumps(p["functionCall"].get("args") or {}, sort_keys=True))
                for c in after for p in c.get("parts", []) if "functionCall" in p]
        if not made:
            return [{"functionCall": {"name": name, "args": args}} for name, args in calls]
        read = [t for r in responses for t in _strings(r.get("response"))]
        planted = []
        for name, args in (call for t in read for call in _call_markers(t)):
            key = (name, json.dumps(args, sort_keys=True))
            if key not in made and key not in planted:
                planted.append(key)
        if planted:  # it falls for a call its tools' answers ask for
            return [{"functionCall": {"name": name, "args": json.loads(args)}} for name, args in planted]
        says += [m for t in read for m in re.findall(r"#say=(\S+)", t)]
        return [{"text": " ".join(["Done: " + "; ".join(json.dumps(r.get("response"), sort_keys=True)
                                                        for r in responses), *says])}]

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
        if claims.get("target_audience"):
            return 200, {"id_token": self.id_token(claims)}
        token = f"ya29.local-{secrets.token_urlsafe(24)}"
        with self._lock:
            self.stats.issued_tokens.add(token)
        return 200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}

    def signer(self):
        """(kid, RSA private key, its self-signed PEM certificate): this server's ID-token key."""
        with self._lock:
            if self._signer is None:
                import datetime

                from cryptography import x509
                from cryptography.hazmat.primitives import hashes, serialization
                from cryptography.hazmat.primitives.asymmetric import rsa
                from cryptography.x509.oid import NameOID

                key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
                name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "evalbeam-test-token-endpoint")])
                now = datetime.datetime.now(datetime.timezone.utc)
                cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                        .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
                self._signer = (secrets.token_hex(8), key, cert.public_bytes(serialization.Encoding.PEM).decode())
            return self._signer

    def id_token(self, grant: dict) -> str:
        """An ID token for the grant's service account and target_audience, signed RS256 with `signer`."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        def encode(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        kid, key, _ = self.signer()
        now = int(time.time())
        claims = {"iss": "https://accounts.google.com", "aud": grant["target_audience"], "azp": grant["iss"],
                  "email": grant["iss"], "email_verified": True, "sub": str(abs(hash(grant["iss"]))),
                  "iat": now, "exp": now + int(self.id_token_lifetime)}
        signing_input = f"{encode(json.dumps({'alg': 'RS256', 'kid': kid, 'typ': 'JWT'}).encode())}." \
                        f"{encode(json.dumps(claims).encode())}"
        signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        token = f"{signing_input}.{encode(signature)}"
        with self._lock:
            self.stats.id_tokens.append(claims)
            self.stats.issued_id_tokens.add(token)
        return token

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
    def _pairwise_choice(prompt: str, allowed: list[str], seed: int | None = None) -> str:
        by_sample = re.search(r"#bias_samples=([01]+)", prompt)
        if by_sample:
            flags = by_sample.group(1)
            if flags[min(int(seed or 0), len(flags) - 1)] == "1":
                return "A"
        elif "#bias" in prompt:
            return "A"
        a_part, _, b_part = prompt.partition("## Response B")
        a = re.findall(r"#quality=(\d+)", a_part.split("## Response A")[-1])
        b = re.findall(r"#quality=(\d+)", b_part)
        if a and b:
            return "A" if int(a[0]) > int(b[0]) else "B" if int(b[0]) > int(a[0]) else "SAME"
        return allowed[int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % len(allowed)]

    # ---------------------------------------------------------------- batch mode

    def create_batch(self, model: str, body: dict) -> tuple[int, dict]:
        batch = body.get("batch") or {}
        source = batch.get("inputConfig") or {}
        if "fileName" in source:
            file_id = source["fileName"].removeprefix("files/")
            data = self._files.get(file_id)
            if data is None:
                return 400, _error(400, f"file {source['fileName']} does not exist")
            items = []
            for line in data.decode("utf-8").splitlines():
                if line.strip():
                    entry = json.loads(line)
                    items.append((entry.get("key"), entry["request"], None))
            kind = "file"
        else:
            requests = (source.get("requests") or {}).get("requests") or []
            items = [(None, r["request"], r.get("metadata")) for r in requests]
            kind = "inline"
        if not items:
            return 400, _error(400, "a batch needs at least one request")
        with self._lock:
            job = _BatchJob(id=secrets.token_hex(8), model=model, display_name=batch.get("displayName", ""),
                            items=items, source=kind, created=time.monotonic(),
                            fail=len(self.stats.batch_jobs) < self.behaviour.batch_fail_jobs)
            self._batches[job.id] = job
            self.stats.batch_jobs.append({"id": job.id, "model": model, "source": kind, "requests": len(items)})
        return 200, self._batch_json(job)

    def get_batch(self, batch_id: str, cancel: bool = False) -> tuple[int, dict]:
        with self._lock:
            job = self._batches.get(batch_id)
            if job is None:
                return 404, _error(404, f"batch batches/{batch_id} not found")
            if cancel:
                self.stats.cancelled += 1
                if job.state not in ("BATCH_STATE_SUCCEEDED", "BATCH_STATE_FAILED"):
                    job.state = "BATCH_STATE_CANCELLED"
                return 200, {}
            self.stats.batch_polls += 1
        if job.state in ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING"):
            age = time.monotonic() - job.created
            if age >= self.behaviour.batch_seconds:
                self._finish(job)
            elif age >= self.behaviour.batch_seconds / 2:
                job.state = "BATCH_STATE_RUNNING"
        return 200, self._batch_json(job)

    def _finish(self, job: "_BatchJob") -> None:
        if job.fail:
            job.state = "BATCH_STATE_FAILED"
            return
        results = []
        for key, request, metadata in job.items:
            result = self._batch_item(request, job.model)
            if job.source == "file":
                results.append({"key": key, **result})
            else:
                results.append({**result, **({"metadata": metadata} if metadata else {})})
        if job.source == "file":
            file_id = f"batch-{job.id}"
            with self._lock:
                self._files[file_id] = "".join(json.dumps(r) + "\n" for r in results).encode()
                self._result_files.add(file_id)
            job.output = {"responsesFile": f"files/{file_id}"}
        else:
            job.output = {"inlinedResponses": {"inlinedResponses": results}}
        job.state = "BATCH_STATE_SUCCEEDED"

    def _batch_item(self, request: dict, model: str) -> dict:
        """{"response": ...} or {"error": ...} for one request of a batch."""
        prompt = request["contents"][0]["parts"][0]["text"]
        with self._lock:
            self.stats.batch_prompts[prompt] += 1
            attempt = self.stats.batch_prompts[prompt]
            self.stats.batch_items += 1
        failing = re.search(r"#batchfail=(\d+)", prompt)
        if "#fail" in prompt or f"#down@{model}" in prompt or (failing and attempt <= int(failing.group(1))):
            with self._lock:
                self.stats.batch_item_errors += 1
            return {"error": {"code": 13, "message": "Internal error encountered.", "status": "INTERNAL"}}
        generation = request.get("generationConfig", {})
        text = self.answer(prompt, generation.get("responseSchema", {}), generation.get("seed"), model)
        return {"response": _generate_response(prompt, text, model)}

    # Vertex AI batch prediction: files in Cloud Storage

    @staticmethod
    def _gcs(uri: str):
        from evalbeam.transforms.local_cloud import storage_client

        bucket, _, path = uri.removeprefix("gs://").partition("/")
        return storage_client().bucket(bucket).blob(path)

    def create_vertex_batch(self, project: str, location: str, body: dict) -> tuple[int, dict]:
        try:
            [uri] = body["inputConfig"]["gcsSource"]["uris"]
            prefix = body["outputConfig"]["gcsDestination"]["outputUriPrefix"]
            model = body["model"].rsplit("/", 1)[-1]
            lines = self._gcs(uri).download_as_bytes().decode("utf-8").splitlines()
        except Exception as e:  # noqa: BLE001 - the API answers 400 to a job it cannot read
            return 400, _error(400, f"cannot read the batch input: {type(e).__name__}: {e}")
        items = [(None, json.loads(line)["request"], None) for line in lines if line.strip()]
        with self._lock:
            job = _BatchJob(id=str(secrets.randbelow(10 ** 18)), model=model, display_name=body.get("displayName", ""),
                            items=items, source="gcs", created=time.monotonic(),
                            fail=len(self.stats.batch_jobs) < self.behaviour.batch_fail_jobs,
                            state="JOB_STATE_PENDING",
                            vertex={"project": project, "location": location, "body": body, "output_prefix": prefix})
            self._batches[job.id] = job
            self.stats.batch_jobs.append({"id": job.id, "model": model, "source": "gcs", "requests": len(items)})
        return 200, self._vertex_json(job)

    def get_vertex_batch(self, batch_id: str, cancel: bool = False) -> tuple[int, dict]:
        with self._lock:
            job = self._batches.get(batch_id)
            if job is None or job.vertex is None:
                return 404, _error(404, f"batchPredictionJobs/{batch_id} not found")
            if cancel:
                self.stats.cancelled += 1
                if job.state in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"):
                    job.state = "JOB_STATE_CANCELLED"
                return 200, {}
            self.stats.batch_polls += 1
        if job.state in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"):
            age = time.monotonic() - job.created
            if age >= self.behaviour.batch_seconds:
                self._finish_vertex(job)
            elif age >= self.behaviour.batch_seconds / 2:
                job.state = "JOB_STATE_RUNNING"
        return 200, self._vertex_json(job)

    def _finish_vertex(self, job: "_BatchJob") -> None:
        if job.fail:
            job.state = "JOB_STATE_FAILED"
            return
        lines, failed = [], 0
        for _, request, _ in job.items:
            result = self._batch_item(request, job.model)
            if "error" in result:
                failed += 1
                lines.append({"status": f"Internal error encountered: {result['error']['message']}", "request": request})
            else:
                lines.append({"status": "", "processed_time": "2026-01-01T00:00:00.000+00:00", "request": request,
                              "response": result["response"]})
        directory = f"{job.vertex['output_prefix'].rstrip('/')}/prediction-model-{job.id}"
        self._gcs(f"{directory}/predictions.jsonl").upload_from_string("".join(json.dumps(x) + "\n" for x in lines))
        job.output = {"gcsOutputDirectory": directory}
        job.vertex["stats"] = {"successfulCount": str(len(lines) - failed), "failedCount": str(failed)}
        job.state = "JOB_STATE_SUCCEEDED"

    @staticmethod
    def _vertex_json(job: "_BatchJob") -> dict:
        v = job.vertex
        body = {"name": f"projects/{v['project']}/locations/{v['location']}/batchPredictionJobs/{job.id}",
                "displayName": job.display_name, "model": v["body"]["model"],
                "inputConfig": v["body"]["inputConfig"], "outputConfig": v["body"]["outputConfig"],
                "state": job.state, "createTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if job.output:
            body["outputInfo"] = job.output
            body["completionStats"] = v.get("stats", {})
        if job.state == "JOB_STATE_FAILED":
            body["error"] = {"code": 13, "message": "The batch prediction job failed."}
        return body

    @staticmethod
    def _batch_json(job: "_BatchJob") -> dict:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        metadata = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatch",
            "name": f"batches/{job.id}", "model": f"models/{job.model}", "displayName": job.display_name,
            "createTime": now, "updateTime": now, "state": job.state,
            "batchStats": {"requestCount": str(len(job.items))},
        }
        body: dict = {"name": f"batches/{job.id}", "metadata": metadata}
        if job.output is not None:
            metadata["output"] = job.output
        if job.state not in ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING"):
            body["done"] = True
            if job.state == "BATCH_STATE_FAILED":
                body["error"] = {"code": 13, "message": "The batch failed."}
            elif job.output is not None:
                body["response"] = {
                    "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatchOutput",
                    **job.output}
        return body

    def start_upload(self, headers, body: dict) -> tuple[int, dict, dict]:
        if headers.get("X-Goog-Upload-Protocol") != "resumable" or headers.get("X-Goog-Upload-Command") != "start":
            return 400, _error(400, "expected a resumable upload start"), {}
        session = secrets.token_hex(8)
        file = body.get("file") or {}
        with self._lock:
            self._uploads[session] = {"size": int(headers.get("X-Goog-Upload-Header-Content-Length", "0")),
                                      "data": b"", "mime_type": headers.get("X-Goog-Upload-Header-Content-Type"),
                                      "display_name": file.get("displayName")}
        return 200, {}, {"X-Goog-Upload-URL": f"{self.url}/upload/v1beta/files?upload_id={session}",
                         "X-Goog-Upload-Status": "active"}

    def continue_upload(self, session: str, headers, data: bytes) -> tuple[int, dict, dict]:
        with self._lock:
            upload = self._uploads.get(session)
            if upload is None:
                return 404, _error(404, "no such upload"), {}
            if int(headers.get("X-Goog-Upload-Offset", "-1")) != len(upload["data"]):
                return 400, _error(400, "wrong upload offset"), {"X-Goog-Upload-Status": "active"}
            upload["data"] += data
            if "finalize" not in headers.get("X-Goog-Upload-Command", ""):
                return 200, {}, {"X-Goog-Upload-Status": "active"}
            del self._uploads[session]
            if len(upload["data"]) != upload["size"]:
                return 400, _error(400, "upload size differs from the size announced"), {"X-Goog-Upload-Status": "final"}
            file_id = secrets.token_hex(6)
            self._files[file_id] = upload["data"]
            self.stats.uploads.append(len(upload["data"]))
        return 200, {"file": {"name": f"files/{file_id}", "displayName": upload["display_name"],
                              "mimeType": upload["mime_type"], "sizeBytes": str(upload["size"]),
                              "state": "ACTIVE", "source": "UPLOADED", "uri": f"{self.url}/v1beta/files/{file_id}"}}, \
            {"X-Goog-Upload-Status": "final"}

    def download(self, file_id: str) -> bytes | None:
        with self._lock:
            if file_id not in self._result_files:
                return None  # as the API: only generated files can be downloaded
            self.stats.downloads += 1
            return self._files[file_id]

    # ---------------------------------------------------------------- HTTP

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            # keep-alive, as Google's endpoints: a connection per call would cost the
            # client a TCP connect each time (every answer carries its Content-Length)
            protocol_version = "HTTP/1.1"

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

            def _key(self, url):
                api_key = self.headers.get("x-goog-api-key") or dict(urllib.parse.parse_qsl(url.query)).get("key")
                with server._lock:
                    server.stats.api_keys.add(api_key)

            def _vertex_authorised(self) -> bool:
                """A Bearer token this server issued, else a 401 answer and False."""
                authorization = self.headers.get("Authorization", "")
                bearer = authorization[len("Bearer "):] if authorization.startswith("Bearer ") else None
                with server._lock:
                    server.stats.bearer_tokens.add(bearer)
                    refused = bearer not in server.stats.issued_tokens
                    server.stats.unauthorized += refused
                if refused:
                    self._send(401, _error(401, "Request is missing required authentication credential."))
                return not refused

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/oauth2/v1/certs":
                    kid, _, pem = server.signer()
                    return self._send(200, {kid: pem})
                self._key(url)
                vertex_batch = VERTEX_BATCH_ROUTE.fullmatch(url.path)
                if vertex_batch and vertex_batch.group("id") and not vertex_batch.group("cancel"):
                    if self._vertex_authorised():
                        self._send(*server.get_vertex_batch(vertex_batch.group("id")))
                    return
                batch, download = BATCH_ROUTE.fullmatch(url.path), DOWNLOAD_ROUTE.fullmatch(url.path)
                if batch and not batch.group("cancel"):
                    return self._send(*server.get_batch(batch.group("id")))
                if download:
                    data = server.download(download.group("id"))
                    if data is None:
                        return self._send(400, _error(400, "Only generated files can be downloaded."))
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                return self._send(404, _error(404, f"no route {url.path}"))

            def do_POST(self):
                url = urllib.parse.urlsplit(self.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if url.path == "/token":
                    form = dict(urllib.parse.parse_qsl(raw.decode()))
                    return self._send(*server.grant(form))
                vertex_batch = VERTEX_BATCH_ROUTE.fullmatch(url.path)
                if vertex_batch:
                    if not self._vertex_authorised():
                        return
                    if vertex_batch.group("id"):
                        return self._send(*server.get_vertex_batch(vertex_batch.group("id"), cancel=True))
                    return self._send(*server.create_vertex_batch(
                        vertex_batch.group("project"), vertex_batch.group("location"), json.loads(raw or b"{}")))
                create, batch = BATCH_CREATE_ROUTE.fullmatch(url.path), BATCH_ROUTE.fullmatch(url.path)
                upload_session = dict(urllib.parse.parse_qsl(url.query)).get("upload_id")
                if create or batch or (UPLOAD_ROUTE.fullmatch(url.path) and upload_session is None):
                    self._key(url)  # (an upload's later requests are authorised by its session id, as at Google)
                if create:
                    return self._send(*server.create_batch(create.group("model"), json.loads(raw or b"{}")))
                if batch and batch.group("cancel"):
                    return self._send(*server.get_batch(batch.group("id"), cancel=True))
                if UPLOAD_ROUTE.fullmatch(url.path):
                    if upload_session is None:
                        return self._send(*server.start_upload(self.headers, json.loads(raw or b"{}")))
                    return self._send(*server.continue_upload(upload_session, self.headers, raw))
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
                asked = json.dumps(body.get("contents"), sort_keys=True)
                with server._lock:
                    server.stats.in_flight += 1
                    server.stats.peak_in_flight = max(server.stats.peak_in_flight, server.stats.in_flight)
                    server.stats.duplicates += server._open[asked] > 0
                    server._open[asked] += 1
                try:
                    self._answer_admitted(body, model, credential)
                finally:
                    with server._lock:
                        server.stats.in_flight -= 1
                        server._open[asked] -= 1

            def _answer_admitted(self, body: dict, model: str, credential: str | None):
                if body.get("tools"):  # an agent's model call (after the drawn latency, as any call)
                    latency = server._draw()[0]
                    if latency:
                        time.sleep(latency)
                    parts = server.agent_answer(body.get("contents", []))
                    answer = _generate_response(json.dumps(body.get("contents")), "", model)
                    answer["candidates"][0]["content"]["parts"] = parts
                    return self._send(200, answer)
                prompt = body["contents"][0]["parts"][0]["text"]
                fault = server.fault(prompt, model)
                if fault == "echo":
                    code = int(re.search(r"#echo_key=(\d{3})", prompt).group(1))
                    return self._send(code, {"error": {"code": code, "status": STATUS_NAMES.get(code, "UNKNOWN"),
                                                       "message": f"The credential {credential} was refused."}})
                if fault == "unavailable":
                    return self._send(503, {"error": {"code": 503, "message": "The service is currently unavailable.", "status": "UNAVAILABLE"}})
                generation = body.get("generationConfig", {})
                text = server.answer(prompt, generation.get("responseSchema", {}), generation.get("seed"), model)
                self._send(200, _generate_response(prompt, text, model))

        return Handler
