"""Judging through Gemini Batch jobs, or Anthropic Message Batches (judge.mode: batch): the
same judgments as online mode, at half the price, answered within hours instead of seconds.
(Anthropic: AnthropicBatchJudge, the same steps through the `anthropic` client's
messages.batches; OpenAI: OpenAIBatchJudge, a JSONL file uploaded and a batch through the `openai`
client's files and batches; each request's custom_id is its key.)

    judgments -> jobs of at most batch_max_requests requests and batch_max_bytes
                 bytes (held to OpenAI's and Anthropic's own limits:
                 settings.BATCH_LIMITS). Gemini API: a job of at most batch_inline_max_bytes is
                 sent inline (the API takes 20 MB inline), a larger one as a
                 JSONL file uploaded with the Files API (2 GB). Vertex AI: a
                 batch prediction job reading a JSONL file written to Cloud
                 Storage (judge.batch_staging) and writing its results beside it
              -> client.batches.create, then client.batches.get with backoff
                 (batch_poll_seconds, x1.5 per poll, at most batch_poll_max_seconds)
              -> each result joined back to its judgment by key (inline: the
                 request's metadata, else its position; file: the line's "key";
                 Vertex AI: the request each result line echoes)
              -> what failed (an item's error, a job that failed, expired, was
                 cancelled or timed out, an answer outside the schema) is asked
                 again: online through judge_stream (the quota, retries and
                 timeouts of online mode), or in follow-up jobs (batch_retry:
                 batch), up to max_attempts in all.

Everything goes through google-genai's own `client.batches` and `client.files`
(with its HTTP retries for the API calls, configured from metrics.retry's policy; the
anthropic and openai clients' own retries are off, their API calls retried by the
policy through metrics.retry.call_retried); the same JudgeResponse comes out,
with the tokens of batch answers in batch_prompt_tokens/batch_output_tokens so
that the run's cost takes the batch price. (Vertex AI batch prediction from
and to BigQuery is not used: Cloud Storage only.)
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, Protocol, TypeVar

from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.client import (
    JudgeRequest,
    JudgeResponse,
    build_genai_client,
    check_credentials,
    judge_stream,
    scrub_secrets,
    structured_output,
)
from evalbeam.metrics.judge.providers import NO_KEY, Reply, anthropic_params, anthropic_reply, openai_params, openai_reply
from evalbeam.metrics.judge.templates import InvalidJudgment, parse_answer
from evalbeam.metrics.retry import RETRYABLE_STATUSES, RetryPolicy, Transient, call_retried, transient_for_status

T = TypeVar("T")
POLL_GROWTH = 1.5
DONE_STATES = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED",
               "JOB_STATE_PARTIALLY_SUCCEEDED", "JOB_STATE_GONE"}


def generation_config(settings: JudgeSettings, request: JudgeRequest) -> dict[str, Any]:
    """The REST generationConfig of a request, as generateContent takes it (the
    same fields JudgeClient.judge sets through the SDK)."""
    config: dict[str, Any] = {"temperature": settings.temperature}
    if request.schema_json:  # else a free-text answer
        config.update(responseMimeType="application/json", responseSchema=json.loads(request.schema_json))
    if request.seed is not None:
        config["seed"] = request.seed
    if settings.max_output_tokens is not None:
        config["maxOutputTokens"] = settings.max_output_tokens
    return config


def jsonl_line(settings: JudgeSettings, request: JudgeRequest) -> bytes:
    """One line of a batch input file: {"key", "request": GenerateContentRequest}."""
    body = {"contents": [{"role": "user", "parts": [{"text": request.prompt}]}],
            "generationConfig": generation_config(settings, request)}
    return (json.dumps({"key": request.key, "request": body}, ensure_ascii=False, sort_keys=True) + "\n").encode()


@dataclasses.dataclass
class _Pending:
    item: Any
    request: JudgeRequest
    line: bytes
    response: JudgeResponse
    last_error: str = "no attempt made"


@dataclasses.dataclass
class _Job:
    name: str
    items: list[_Pending]
    submitted: float
    next_poll: float
    delay: float


def api_policy(settings: JudgeSettings) -> RetryPolicy:
    """The retry policy of a batch job's API calls (create, get, upload, download): max_attempts, and at
    least one retry whatever max_attempts says, as one call carries a whole job's judgments."""
    return RetryPolicy(max_attempts=max(2, settings.max_attempts))


def sdk_transient(sdk) -> Callable[[BaseException], Transient | None]:
    """How a failure of the anthropic or openai client (`sdk`: the module) is retried: an HTTP status the
    policy retries (with its Retry-After), a timeout or a lost connection (maybe_ran: the request may have
    been run, unless no connection was made)."""
    import httpx

    def classify(error: BaseException) -> Transient | None:
        if isinstance(error, sdk.APIStatusError):
            return transient_for_status(error.status_code, str(error.message), error.response.headers)
        if isinstance(error, sdk.APIConnectionError):  # APITimeoutError included; the cause is httpx's
            never_sent = isinstance(error.__cause__, (httpx.ConnectError, httpx.ConnectTimeout))
            return Transient(f"{type(error).__name__}: {error}", maybe_ran=not never_sent)
        return None

    return classify


def _submitted(name: str, items: list["_Pending"], settings: JudgeSettings) -> "_Job":
    """The job just created for `items` (each one attempt more), first polled a poll interval from now:
    what every provider's submit returns."""
    for p in items:
        p.response.attempts += 1
    now = time.monotonic()
    return _Job(name, items, now, now + settings.batch_poll_seconds, settings.batch_poll_seconds)


class Staging(Protocol):
    """Cloud Storage for Vertex AI batch prediction's input and output files
    (transforms.judge_checkpoint.GcsStaging); `prefix` is a gs:// folder."""

    prefix: str

    def write(self, uri: str, data: bytes) -> None: ...

    def list(self, prefix: str) -> list[str]: ...

    def read(self, uri: str) -> bytes: ...


def vertex_line(settings: JudgeSettings, request: JudgeRequest) -> bytes:
    """One line of a Vertex AI batch prediction input file: {"request": GenerateContentRequest}.
    Its results are joined back by the request they echo (prompt and seed: in one
    run, these determine the judgment's key)."""
    body = {"contents": [{"role": "user", "parts": [{"text": request.prompt}]}],
            "generationConfig": generation_config(settings, request)}
    return (json.dumps({"request": body}, ensure_ascii=False, sort_keys=True) + "\n").encode()


def _echo_key(request: dict) -> tuple[str, Any]:
    prompt = request["contents"][0]["parts"][0]["text"]
    return prompt, (request.get("generationConfig") or {}).get("seed")


class BatchJudge:
    """Submits, polls and reads batch jobs through google-genai: Gemini API Batch
    jobs (inline or Files API), or Vertex AI batch predictions (Cloud Storage)."""

    def __init__(self, settings: JudgeSettings, sleep: Callable[[float], None] = time.sleep,
                 staging: Staging | None = None):
        from google.genai import types  # start-up time: google-genai only when a judge runs

        check_credentials(settings)
        self.settings = settings
        self._types = types
        self._sleep = sleep
        policy = api_policy(settings)
        http = types.HttpOptions(
            base_url=settings.base_url, timeout=int(settings.timeout_seconds * 1000),
            # the API calls (create, get, upload, download) are retried by the SDK, with the policy's
            # attempts, statuses and delays; its jitter is tenacity's, added to the delay (up to `base`)
            retry_options=types.HttpRetryOptions(
                attempts=policy.max_attempts, initial_delay=policy.base, max_delay=policy.cap, exp_base=2,
                jitter=policy.base, http_status_codes=list(RETRYABLE_STATUSES)),
        )
        self._client, self._secret, self._credentials = build_genai_client(settings, http)
        self._vertex = settings.backend == "vertex_ai"
        if self._vertex and staging is None:
            raise ValueError("judge.mode batch on vertex_ai needs a Cloud Storage folder (judge.batch_staging)")
        self._staging = staging
        self.jobs_created = 0
        self.files_uploaded = 0

    def scrub(self, text: str) -> str:
        return scrub_secrets(text, self._secret, self._credentials)

    def submit(self, items: list[_Pending]) -> _Job:
        """Create one job for these judgments: inline, or as an uploaded JSONL file when large."""
        size = sum(len(p.line) for p in items)
        display = f"evalbeam-{items[0].request.key[:12]}-{len(items)}"
        if self._vertex:
            folder = f"{self._staging.prefix.rstrip('/')}/{display}-{uuid.uuid4().hex[:8]}"
            self._staging.write(f"{folder}/input.jsonl", b"".join(vertex_line(self.settings, p.request) for p in items))
            src: Any = f"{folder}/input.jsonl"
            config = self._types.CreateBatchJobConfig(display_name=display, dest=f"{folder}/output")
        elif size <= self.settings.batch_inline_max_bytes:
            src = [self._types.InlinedRequest(
                contents=p.request.prompt, metadata={"key": p.request.key},
                config=self._types.GenerateContentConfig(
                    temperature=self.settings.temperature, seed=p.request.seed,
                    max_output_tokens=self.settings.max_output_tokens, **structured_output(p.request)))
                for p in items]
        else:
            uploaded = self._client.files.upload(
                file=io.BytesIO(b"".join(p.line for p in items)),
                config=self._types.UploadFileConfig(display_name=display, mime_type="application/jsonl"))
            self.files_uploaded += 1
            src = uploaded.name
        if not self._vertex:
            config = self._types.CreateBatchJobConfig(display_name=display)
        job = self._client.batches.create(model=self.settings.model, src=src, config=config)
        self.jobs_created += 1
        return _submitted(job.name, items, self.settings)

    def poll(self, job: _Job) -> tuple[str, Any]:
        got = self._client.batches.get(name=job.name)
        state = got.state.value if hasattr(got.state, "value") else str(got.state)
        return state, got

    def cancel(self, job: _Job) -> None:
        try:
            self._client.batches.cancel(name=job.name)
        except Exception:  # noqa: BLE001 - the job is given up either way
            pass

    def results(self, job: _Job, got) -> dict[str, tuple[Any, str | None]]:
        """key -> (the answer (Reply), or None; the item's error, or None)."""
        dest = got.dest
        out: dict[str, tuple[Any, str | None]] = {}
        if self._vertex:
            # every predictions*.jsonl of the job's output folder: {"request", "response"} or {"request", "status"}
            folder = (got.output_info.gcs_output_directory if got.output_info else None) or dest.gcs_uri
            keys = {(p.request.prompt, p.request.seed): p.request.key for p in job.items}
            for uri in sorted(self._staging.list(folder.rstrip("/") + "/")):
                if not uri.endswith(".jsonl"):
                    continue
                for line in self._staging.read(uri).decode("utf-8").splitlines():
                    if not line.strip():
                        continue
                    entry = json.loads(line)
                    key = keys.get(_echo_key(entry.get("request") or {}))
                    if key is None:
                        continue
                    if entry.get("response") and not entry.get("status"):
                        out[key] = (_gemini_reply(self._types.GenerateContentResponse.model_validate(entry["response"])),
                                    None)
                    else:
                        out[key] = (None, f"batch item failed: {entry.get('status') or 'no response'}")
        elif dest is not None and dest.inlined_responses:
            for position, inlined in enumerate(dest.inlined_responses):
                # joined by the key sent in the request's metadata; the API also keeps the order
                key = (inlined.metadata or {}).get("key") or job.items[position].request.key
                if inlined.error is not None or inlined.response is None:
                    error = inlined.error.model_dump(exclude_none=True) if inlined.error else "no response"
                    out[key] = (None, _error_text(error))
                else:
                    out[key] = (_gemini_reply(inlined.response), None)
        elif dest is not None and dest.file_name:
            data = self._client.files.download(file=dest.file_name)
            for line in data.decode("utf-8").splitlines():
                if not line.strip():
                    continue
                entry = json.loads(line)
                key = entry.get("key")
                if "error" in entry or "status" in entry:
                    out[key] = (None, _error_text(entry.get("error") or entry.get("status")))
                else:
                    out[key] = (_gemini_reply(self._types.GenerateContentResponse.model_validate(
                        entry.get("response") or {})), None)
        return out

    def line(self, request: JudgeRequest) -> bytes:
        """The request as a line of a batch input file (its size counts against batch_max_bytes)."""
        return jsonl_line(self.settings, request)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message") or error.get("status") or "error"
        return f"batch item failed: {code}: {message}" if code else f"batch item failed: {message}"
    return f"batch item failed: {error}"


def _gemini_reply(answer) -> Reply:
    usage = answer.usage_metadata
    return Reply(answer.text, (usage.prompt_token_count or 0) if usage else 0,
                 (usage.candidates_token_count or 0) if usage else 0)


class AnthropicBatchJudge:
    """Submits, polls and reads Anthropic Message Batches through the `anthropic` client
    (messages.batches: create, retrieve, results, cancel; the client's own retries off, each call
    retried by the policy: `_call`).
    Each request's custom_id is its request key (64 hex digits: the API's limit), its params
    those of an online call (providers.anthropic_params)."""

    def __init__(self, settings: JudgeSettings, sleep: Callable[[float], None] = time.sleep):
        import anthropic  # start-up time: anthropic only when such a judge runs

        check_credentials(settings)
        self.settings, self._sleep = settings, sleep
        self._secret = os.environ[settings.api_key_env]
        self._client = anthropic.Anthropic(api_key=self._secret, base_url=settings.base_url,
                                           timeout=settings.timeout_seconds, max_retries=0)
        self._policy, self._classify = api_policy(settings), sdk_transient(anthropic)
        self.jobs_created = 0

    def _call(self, fn: Callable[[], T], resend: bool = True) -> T:
        """An API call, retried by the policy; resend=False (a create) is not sent again after a failure
        that may have created the batch: a batch created twice is paid for twice."""
        return call_retried(fn, self._classify, self._policy, self._sleep, resend)

    def scrub(self, text: str) -> str:
        return scrub_secrets(text, self._secret, None)

    def line(self, request: JudgeRequest) -> bytes:
        return (json.dumps({"custom_id": request.key, "params": anthropic_params(self.settings, request)},
                           ensure_ascii=False, sort_keys=True) + "\n").encode()

    def submit(self, items: list[_Pending]) -> _Job:
        requests = [{"custom_id": p.request.key, "params": anthropic_params(self.settings, p.request)} for p in items]
        batch = self._call(lambda: self._client.messages.batches.create(requests=requests), resend=False)
        self.jobs_created += 1
        return _submitted(batch.id, items, self.settings)

    def poll(self, job: _Job) -> tuple[str, Any]:
        got = self._call(lambda: self._client.messages.batches.retrieve(job.name))
        # ended: every request succeeded, errored, was canceled or expired (each result says which)
        return ("JOB_STATE_SUCCEEDED" if got.processing_status == "ended" else "JOB_STATE_RUNNING"), got

    def cancel(self, job: _Job) -> None:
        try:
            self._client.messages.batches.cancel(job.name)
        except Exception:  # noqa: BLE001 - the job is given up either way
            pass

    def results(self, job: _Job, got) -> dict[str, tuple[Any, str | None]]:
        requests = {p.request.key: p.request for p in job.items}

        def read() -> dict[str, tuple[Any, str | None]]:  # the whole stream again, should it break off
            out: dict[str, tuple[Any, str | None]] = {}
            for entry in self._client.messages.batches.results(job.name):
                request = requests.get(entry.custom_id)
                if request is None:
                    continue
                result = entry.result
                if result.type == "succeeded":
                    out[entry.custom_id] = (anthropic_reply(result.message, request), None)
                else:
                    error = getattr(getattr(result, "error", None), "error", None)
                    detail = f": {getattr(error, 'type', '')}: {getattr(error, 'message', '')}" if error else ""
                    out[entry.custom_id] = (None, f"batch item {result.type}{detail}")
            return out

        return self._call(read)


# an OpenAI batch's status -> the states judge_batch reads (expired and cancelled batches keep
# the answers they had: read, the rest asked again)
OPENAI_STATES = {"completed": "JOB_STATE_SUCCEEDED", "expired": "JOB_STATE_PARTIALLY_SUCCEEDED",
                 "cancelled": "JOB_STATE_PARTIALLY_SUCCEEDED", "failed": "JOB_STATE_FAILED"}


class OpenAIBatchJudge:
    """Submits, polls and reads OpenAI Batch API jobs through the `openai` client: the requests
    as a JSONL file uploaded with files.create (purpose batch), a batch on /v1/chat/completions
    (completion_window 24h), its output and error files read with files.content; each line's
    custom_id is its request key, its body that of an online call (providers.openai_params)."""

    def __init__(self, settings: JudgeSettings, sleep: Callable[[float], None] = time.sleep):
        import openai  # start-up time: openai only when such a judge runs

        check_credentials(settings)
        self.settings, self._sleep, self._openai = settings, sleep, openai
        self._secret = os.environ.get(settings.api_key_env) or None
        self._client = openai.OpenAI(api_key=self._secret or NO_KEY, base_url=settings.base_url,
                                     timeout=settings.timeout_seconds, max_retries=0)
        self._policy, self._classify = api_policy(settings), sdk_transient(openai)
        self.jobs_created = 0
        self.files_uploaded = 0

    def _call(self, fn: Callable[[], T], resend: bool = True) -> T:
        """An API call, retried by the policy; resend=False (a batch's create) is not sent again after a
        failure that may have created the batch: a batch created twice is paid for twice."""
        return call_retried(fn, self._classify, self._policy, self._sleep, resend)

    def scrub(self, text: str) -> str:
        return scrub_secrets(text, self._secret, None)

    def line(self, request: JudgeRequest) -> bytes:
        return (json.dumps({"custom_id": request.key, "method": "POST", "url": "/v1/chat/completions",
                            "body": openai_params(self.settings, request)}, ensure_ascii=False, sort_keys=True)
                + "\n").encode()

    def submit(self, items: list[_Pending]) -> _Job:
        display = f"evalbeam-{items[0].request.key[:12]}-{len(items)}.jsonl"
        data = b"".join(p.line for p in items)
        # an upload sent twice leaves one unused file behind, not a job: sent again like any call
        uploaded = self._call(lambda: self._client.files.create(file=(display, data), purpose="batch"))
        self.files_uploaded += 1
        batch = self._call(lambda: self._client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"), resend=False)
        self.jobs_created += 1
        return _submitted(batch.id, items, self.settings)

    def poll(self, job: _Job) -> tuple[str, Any]:
        got = self._call(lambda: self._client.batches.retrieve(job.name))
        return OPENAI_STATES.get(got.status, "JOB_STATE_RUNNING"), got

    def cancel(self, job: _Job) -> None:
        try:
            self._client.batches.cancel(job.name)
        except Exception:  # noqa: BLE001 - the job is given up either way
            pass

    def results(self, job: _Job, got) -> dict[str, tuple[Any, str | None]]:
        from openai.types.chat import ChatCompletion

        keys = {p.request.key for p in job.items}
        out: dict[str, tuple[Any, str | None]] = {}
        for file_id in (got.output_file_id, got.error_file_id):
            if not file_id:
                continue
            text = self._call(lambda: self._client.files.content(file_id).text)
            for line in text.splitlines():
                if not line.strip():
                    continue
                entry = json.loads(line)
                key, response = entry.get("custom_id"), entry.get("response") or {}
                if key not in keys:
                    continue
                if response.get("status_code") == 200 and not entry.get("error"):
                    out[key] = (openai_reply(ChatCompletion.model_validate(response.get("body") or {})), None)
                else:
                    error = entry.get("error") or (response.get("body") or {}).get("error") or {}
                    status = response.get("status_code")
                    out[key] = (None, f"batch item failed: {f'HTTP {status}: ' if status else ''}"
                                      f"{error.get('message') or error.get('code') or 'no answer'}")
        return out


def batch_judge_for(settings: JudgeSettings, sleep: Callable[[float], None] = time.sleep,
                    staging: Staging | None = None):
    """The batch API of the judge's provider."""
    if settings.provider == "anthropic":
        return AnthropicBatchJudge(settings, sleep)
    if settings.provider == "openai_compatible":
        return OpenAIBatchJudge(settings, sleep)
    return BatchJudge(settings, sleep, staging)


def _answer(p: _Pending, answer: Reply) -> None:
    """Fill p.response from a batch answer; raises InvalidJudgment."""
    r = p.response
    r.prompt_tokens += answer.prompt_tokens
    r.output_tokens += answer.output_tokens
    r.batch_prompt_tokens += answer.prompt_tokens
    r.batch_output_tokens += answer.output_tokens
    r.verdict, r.explanation = parse_answer(answer.text, p.request.answer_field, p.request.allowed)


class Journal(Protocol):
    """Where the jobs a shard submitted are recorded, to resume them after a crash
    (transforms.judge_checkpoint.BatchJournal)."""

    def resumable(self) -> dict[str, str]: ...  # request_key -> job name

    def submitted(self, name: str, keys: list[str]) -> None: ...


def judge_batch(settings: JudgeSettings, items: Iterable[T], request_of: Callable[[T], JudgeRequest],
                journal: Journal | None = None,
                sleep: Callable[[float], None] = time.sleep,
                staging: Staging | None = None) -> Iterator[tuple[T, JudgeResponse]]:
    """Judge every item through Batch jobs, yielding (item, response) as each
    job's results are read. The settings' quotas (this shard's share) pace the
    online retries. With a journal, every job is recorded once created, and
    judgments already sent in a recorded job are not sent again: that job is
    polled (or its results read) instead."""
    judge = batch_judge_for(settings, sleep, staging)
    max_requests, max_bytes = settings.batch_limits()  # the provider's batch API limits included
    pending: list[_Job] = []
    chunk: list[_Pending] = []
    size = 0
    earlier = journal.resumable() if journal else {}
    resumed: dict[str, list[_Pending]] = {}

    def submit(items: list[_Pending]) -> None:
        job = judge.submit(items)
        if journal:
            journal.submitted(job.name, [p.request.key for p in items])
        pending.append(job)

    def flush():
        nonlocal chunk, size
        if chunk:
            submit(chunk)
        chunk, size = [], 0

    for item in items:
        request = request_of(item)
        p = _Pending(item, request, b"", JudgeResponse(key=request.key, metric=request.metric, model=settings.model))
        if request.key in earlier:
            resumed.setdefault(earlier[request.key], []).append(p)
            continue
        p.line = judge.line(request)
        if chunk and (len(chunk) >= max_requests or size + len(p.line) > max_bytes):
            flush()
        chunk.append(p)
        size += len(p.line)
    flush()
    now = time.monotonic()
    for name, waiting in resumed.items():
        for p in waiting:
            p.response.attempts += 1
            p.line = judge.line(p.request)  # for a resubmission, should the job be gone
        pending.append(_Job(name, waiting, now, now, settings.batch_poll_seconds))

    failed: list[_Pending] = []  # to be asked online at the end

    def retry(items: list[_Pending]):
        """Failed judgments: into follow-up jobs (batch_retry: batch, within max_attempts), else online."""
        if settings.batch_retry != "batch":
            failed.extend(items)
            return
        again = [p for p in items if p.response.attempts < settings.max_attempts]
        for p in items:
            if p.response.attempts >= settings.max_attempts:
                p.response.error = f"judge failed after {p.response.attempts} attempts; last: {p.last_error}"
                yield p.item, p.response
        for start in range(0, len(again), max_requests):
            submit(again[start:start + max_requests])

    while pending:
        job = min(pending, key=lambda j: j.next_poll)
        wait = job.next_poll - time.monotonic()
        if wait > 0:
            sleep(wait)
        try:
            state, got = judge.poll(job)
        except Exception as e:  # noqa: BLE001 - after the policy's retries: poll again later
            state, got = "POLL_FAILED", None
            if 404 in (getattr(e, "code", None), getattr(e, "status_code", None)):  # a recorded job the API no longer knows
                state = "JOB_STATE_GONE"
            for p in job.items:
                p.last_error = judge.scrub(f"polling batch job {job.name}: {type(e).__name__}: {e}")
        now = time.monotonic()
        if state not in DONE_STATES:
            if now - job.submitted > settings.batch_timeout_seconds:
                judge.cancel(job)
                pending.remove(job)
                for p in job.items:
                    p.last_error = f"batch job {job.name} not done after {settings.batch_timeout_seconds / 3600:g} h"
                yield from retry(job.items)
            else:
                job.delay = min(settings.batch_poll_max_seconds, job.delay * POLL_GROWTH)
                job.next_poll = now + job.delay
            continue
        pending.remove(job)
        results = judge.results(job, got) if state in ("JOB_STATE_SUCCEEDED", "JOB_STATE_PARTIALLY_SUCCEEDED") else {}
        retrying: list[_Pending] = []
        for p in job.items:
            body, error = results.get(p.request.key, (None, None))
            if body is None:
                p.last_error = judge.scrub(error or f"batch job {job.name} ended {state.removeprefix('JOB_STATE_')}"
                                           " without an answer")
                retrying.append(p)
                continue
            try:
                _answer(p, body)
            except InvalidJudgment as e:
                p.last_error = f"invalid judge output: {e}"
                retrying.append(p)
                continue
            yield p.item, p.response
        yield from retry(retrying)

    if failed and settings.max_attempts <= 1:
        for p in failed:
            p.response.error = f"judge failed after {p.response.attempts} attempts; last: {p.last_error}"
            yield p.item, p.response
    elif failed:
        # Online, through the one client layer: its quota share, retries and timeouts.
        # The batch attempt counts against max_attempts; the tokens of both are kept.
        by_key = {p.request.key: p for p in failed}
        online = settings.model_copy(update={"max_attempts": settings.max_attempts - 1})
        for p, answer in judge_stream(online, failed, lambda p: p.request):
            kept = by_key[p.request.key].response
            answer.attempts += kept.attempts
            answer.prompt_tokens += kept.prompt_tokens
            answer.output_tokens += kept.output_tokens
            answer.batch_prompt_tokens, answer.batch_output_tokens = kept.batch_prompt_tokens, kept.batch_output_tokens
            if answer.error and answer.error.startswith("judge failed after "):
                answer.error = f"judge failed after {answer.attempts} attempts (the first in a batch job, " \
                               f"{by_key[p.request.key].last_error}); last: {answer.error.partition('; last: ')[2]}"
            yield p.item, answer
