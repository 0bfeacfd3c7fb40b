"""The one judge client layer: any judge.provider (metrics.judge.providers: Gemini through
`google-genai`, OpenAI-compatible servers through `openai`, Claude through `anthropic`), with
structured JSON output, rate limiting, retries, timeouts and accounting. Metrics and
transforms hand it JudgeRequests and get JudgeResponses; they never see HTTP.

Everything here is built from the JudgeSettings it is handed (one judge, its provider
included): a client, a limiter and a request key per settings, so that stages judging with
different providers each keep their own quota.

Secrets: the API key is read from the environment (JudgeSettings holds only
the variable's name) where the client is built, on the worker, and is scrubbed
from every error text this layer returns; on Vertex AI, so is the access token
of the Application Default Credentials the client holds.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import queue
import threading
import time
from typing import Any, Callable, Iterable, Iterator, TypeVar

from evalbeam.metrics.judge.providers import (  # noqa: F401 - re-exported: the layer's one entry point
    JudgeCredentialsError,
    ProviderError,
    build_genai_client,
    check_credentials,
    provider_for,
    scrub_secrets,
    structured_output,
)
from evalbeam.metrics.judge.ratelimit import AdaptiveRateLimiter, InFlightWindow, TailHedge
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.templates import InvalidJudgment, parse_answer
from evalbeam.metrics.retry import RetryPolicy

T = TypeVar("T")
CHARS_PER_TOKEN = 4  # for reserving tokens before a call; settled with the real count after


@dataclasses.dataclass(frozen=True)
class JudgeRequest:
    key: str
    metric: str
    prompt: str
    schema_json: str  # the response schema, as JSON text; "" for a free-text answer
    answer_field: str  # "score" | "choice" | rubric stages | FREE_TEXT
    allowed: tuple[str, ...]
    seed: int | None = None
    # which settings answer it (JudgeSettings.digest), when a stage judges with several (a metric's own
    # judge, a jury's jurors: JudgeStreams); "" for the stage's own settings
    judge: str = ""


# A free-text answer (inference.model): no response schema; the verdict is the text.
FREE_TEXT = "text"


@dataclasses.dataclass
class JudgeResponse:
    key: str
    metric: str
    verdict: str | None = None  # the allowed value the judge answered
    explanation: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    attempts: int = 0  # calls made, retries and copies (hedged) included
    rate_limited: int = 0
    hedged: int = 0  # calls sent as a copy of a slow call at the end of a run (ratelimit.TailHedge)
    error: str | None = None
    cache_hit: bool = False  # from judge.cache: paid for by an earlier run
    checkpointed: bool = False  # reused from this run_id's checkpoints (paid for by an attempt that died)
    # the part of prompt_tokens and output_tokens billed at batch prices (judge.mode: batch)
    batch_prompt_tokens: int = 0
    batch_output_tokens: int = 0
    model: str | None = None  # the model that answered (judge.prices is per model); None: the stage's


def request_key(settings: JudgeSettings, prompt: str, schema_json: str, sample_index: int) -> str:
    """The content hash that identifies a judgment (and keys the cache)."""
    material = json.dumps(
        {"generation": settings.generation(), "schema": schema_json, "prompt": prompt, "sample": sample_index},
        sort_keys=True, ensure_ascii=False,
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


class JudgeClient:
    """One judge's calls (settings.provider's API, metrics.judge.providers) within its
    limiter: retries, timeouts, hedged copies and accounting, the same for every provider.
    Its retries follow metrics.retry's policy with the settings' max_attempts."""

    def __init__(self, settings: JudgeSettings, limiter: AdaptiveRateLimiter,
                 observe_latency: Callable[[float], None] | None = None, hedge: TailHedge | None = None):
        self.settings = settings
        self.policy = RetryPolicy(max_attempts=settings.max_attempts)
        self.limiter = limiter
        self.hedge = hedge
        self._observe = observe_latency or (lambda seconds: None)
        self._provider = provider_for(settings)

    def scrub(self, text: str) -> str:
        return self._provider.scrub(text)

    async def judge(self, request: JudgeRequest) -> JudgeResponse:
        response = JudgeResponse(key=request.key, metric=request.metric, model=self.settings.model)
        estimated = len(request.prompt) // CHARS_PER_TOKEN + (self.settings.max_output_tokens or 1024)
        last_error = "no attempt made"
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            await self.limiter.acquire(estimated)
            answer, error, retry_after = await self._attempt(request, estimated, response)
            if answer is not None:
                try:
                    response.verdict, response.explanation = parse_answer(
                        answer.text, request.answer_field, request.allowed)
                    return response
                except InvalidJudgment as e:
                    last_error = f"invalid judge output: {e}"
            elif isinstance(error, ProviderError):
                last_error = str(error)
                if not self.policy.retryable(error.code):
                    response.error = self.scrub(f"{last_error} (not retried)")
                    return response
            elif isinstance(error, (asyncio.TimeoutError, TimeoutError)):
                last_error = f"timed out after {self.settings.timeout_seconds:g}s ({type(error).__name__})"
            else:  # transport errors (httpx) are retried like 5xx
                last_error = f"{type(error).__name__}: {error}"
            wait = self.policy.wait(attempt, retry_after)
            if not self.policy.attempts_left(attempt, started, wait):
                break
            await asyncio.sleep(wait)
        hedged = f" ({response.attempts} calls, {response.hedged} of them copies of a slow call)" \
            if response.hedged else ""
        response.error = self.scrub(f"judge failed after {attempt} attempts{hedged}; last: {last_error}")
        return response

    async def _attempt(self, request: JudgeRequest, estimated: int, response: JudgeResponse):
        """One attempt, its place with the limiter already taken: a call and, when
        the tail hedge allows, a copy once the call alone in flight has run past
        the hedge's delay (and one more if a copy failed first: the call left may
        be slow too); the first answer wins. (answer, None, None) or, when every call
        failed, the last one's (None, error, Retry-After)."""
        first = asyncio.ensure_future(self._call(request, estimated, response))
        if self.hedge is None:
            return await first
        sent = {first: time.monotonic()}
        pending, turn, outcome = {first}, None, None
        try:
            while pending:
                if turn is None and len(pending) == 1 and len(sent) <= TailHedge.COPIES:
                    [alone] = pending
                    delay = max(0.0, sent[alone] + self.hedge.delay() - time.monotonic())
                    turn = asyncio.ensure_future(self.hedge.turn(delay, estimated, lambda: not alone.done()))
                done, _ = await asyncio.wait(pending | {turn} if turn else pending,
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done - {turn}:
                    pending.discard(task)
                    outcome = task.result()
                    if outcome[0] is not None:
                        return outcome
                if turn in done and pending:
                    if turn.result():
                        response.hedged += 1
                        copy = asyncio.ensure_future(self._call(request, estimated, response))
                        sent[copy] = time.monotonic()
                        pending.add(copy)
                        turn = None
                    else:  # the budget is spent: no copy, and no other turn
                        turn = asyncio.get_running_loop().create_future()
            return outcome
        finally:
            if turn is not None and turn.done() and not turn.cancelled() and turn.result():
                self.hedge.hedges -= 1  # its place came as the last call ended: no copy was sent
            for task in (*sent, turn):
                if task is not None:
                    task.cancel()

    async def _call(self, request: JudgeRequest, estimated: int, response: JudgeResponse):
        """One call to the provider, counted in the response's attempts, with its
        tokens settled and its duration observed: (Reply, None, None) or (None,
        error, Retry-After). A call cancelled in flight (the losing copy) counts,
        with no tokens: like a timed-out call, what it used is not known."""
        response.attempts += 1
        if self.hedge is not None:
            self.hedge.calls += 1
        started = time.monotonic()
        try:
            answer = await asyncio.wait_for(self._provider.generate(request), timeout=self.settings.timeout_seconds)
        except asyncio.CancelledError:
            self.limiter.correct_tokens(estimated, 0)
            raise
        except ProviderError as e:
            self._observe(time.monotonic() - started)
            self.limiter.correct_tokens(estimated, 0)
            retry_after = None
            if e.code == 429:
                response.rate_limited += 1
                retry_after = e.retry_after
                self.limiter.on_rate_limited(retry_after)
            return None, e, retry_after
        except (asyncio.TimeoutError, TimeoutError) as e:
            self._observe(time.monotonic() - started)
            self.limiter.correct_tokens(estimated, 0)
            return None, e, None
        except Exception as e:  # noqa: BLE001 - transport errors (httpx) are retried like 5xx
            self.limiter.correct_tokens(estimated, 0)
            return None, e, None
        self._observe(time.monotonic() - started)
        response.prompt_tokens += answer.prompt_tokens
        response.output_tokens += answer.output_tokens
        self.limiter.correct_tokens(estimated, answer.prompt_tokens + answer.output_tokens)
        self.limiter.on_success()
        return answer, None, None

    async def close(self) -> None:
        try:
            await self._provider.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


_DONE = object()


class JudgeStream:
    """Judges items handed to it one at a time, on one asyncio loop (in a helper
    thread), within the settings' quotas (already this shard's share), with as many calls in
    flight as the rate and the observed latency need (ratelimit.InFlightWindow),
    at most settings.max_concurrency, and copies of slow calls once the items
    have ended (ratelimit.TailHedge, at most settings.hedge_share of the calls).

    `put` hands over an item, waiting while settings.max_concurrency are
    queued, and yields the results finished meanwhile; `close` ends the input
    and yields the rest. Results are (item, JudgeResponse) as they complete, so
    memory stays bounded by what is in flight. Items come from the calling
    thread (a Beam iterable or DoFn must be read there)."""

    def __init__(self, settings: JudgeSettings, request_of: Callable[[T], JudgeRequest]):
        self._inbox: queue.Queue = queue.Queue(maxsize=settings.max_concurrency)
        self._outbox: queue.Queue = queue.Queue()
        self._settings, self._request_of = settings, request_of
        self._worker = threading.Thread(target=self._run, name="evalbeam-judge", daemon=True)
        self._worker.start()

    async def _main(self) -> None:
        settings, outbox = self._settings, self._outbox
        limiter = AdaptiveRateLimiter(settings.requests_per_minute, settings.tokens_per_minute)
        window = InFlightWindow(settings.max_concurrency, initial_latency=min(2.0, settings.timeout_seconds))
        hedge = TailHedge(window, limiter, settings.hedge_share) if settings.hedge_share > 0 else None
        client = JudgeClient(settings, limiter, window.observe, hedge)
        loop = asyncio.get_running_loop()
        tasks = set()

        async def one(item):
            try:
                outbox.put((item, await client.judge(self._request_of(item))))
            finally:
                await window.release()

        while True:
            await window.acquire(lambda: limiter.rate)
            item = await loop.run_in_executor(None, self._inbox.get)
            if item is _DONE:
                await window.release()
                if hedge:
                    hedge.end_of_input()
                break
            task = asyncio.create_task(one(item))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
        await client.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            self._outbox.put(e)
        self._outbox.put(_DONE)

    def ready(self) -> list:
        """The results finished so far (never waits)."""
        out = []
        while True:
            try:
                got = self._outbox.get_nowait()
            except queue.Empty:
                return out
            if got is _DONE:
                raise RuntimeError("the judge loop stopped before its input ended")
            if isinstance(got, BaseException):
                raise got
            out.append(got)

    def _hand(self, item) -> Iterator[tuple[Any, JudgeResponse]]:
        while True:
            try:
                self._inbox.put(item, timeout=0.05)
                return
            except queue.Full:
                yield from self.ready()

    def put(self, item) -> Iterator[tuple[Any, JudgeResponse]]:
        """Hand the loop an item, yielding finished results while it is busy."""
        yield from self._hand(item)
        yield from self.ready()

    def close(self) -> Iterator[tuple[Any, JudgeResponse]]:
        """End the input; yield every result still to come."""
        yield from self._hand(_DONE)
        while (got := self._outbox.get()) is not _DONE:
            if isinstance(got, BaseException):
                raise got
            yield got
        self._worker.join()


class JudgeStreams:
    """JudgeStream's interface over several settings: each request goes to the stream of the
    settings its `judge` names (JudgeSettings.digest; "" the first given), started when first
    needed. Each settings keeps its own client, quota (already this shard's share), retries
    and hedging: a jury's jurors, or a metric's own judge, each call their model at its own
    pace, as any stage's judge does."""

    def __init__(self, settings: dict[str, JudgeSettings], request_of: Callable[[T], JudgeRequest]):
        self._settings, self._request_of = settings, request_of
        self._default = next(iter(settings.values()))
        self._streams: dict[str, JudgeStream] = {}

    def _stream_of(self, item) -> JudgeStream:
        judge = self._request_of(item).judge
        stream = self._streams.get(judge)
        if stream is None:
            settings = self._settings[judge] if judge else self._default
            stream = self._streams[judge] = JudgeStream(settings, self._request_of)
        return stream

    def ready(self) -> list:
        return [got for stream in list(self._streams.values()) for got in stream.ready()]

    def put(self, item) -> Iterator[tuple[Any, JudgeResponse]]:
        target = self._stream_of(item)
        for got in target.put(item):
            yield got
        for stream in list(self._streams.values()):
            if stream is not target:
                yield from stream.ready()

    def close(self) -> Iterator[tuple[Any, JudgeResponse]]:
        for stream in self._streams.values():
            yield from stream.close()
        self._streams = {}


def judge_stream(settings: JudgeSettings | dict[str, JudgeSettings], items: Iterable[T],
                 request_of: Callable[[T], JudgeRequest]) -> Iterator[tuple[T, JudgeResponse]]:
    """Judge every item (JudgeStream; several settings: JudgeStreams), yielding (item, response)
    as each completes."""
    stream = JudgeStreams(settings, request_of) if isinstance(settings, dict) else JudgeStream(settings, request_of)
    for item in items:
        yield from stream.put(item)
    yield from stream.close()
