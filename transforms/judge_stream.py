"""The judge path of a local run in one process: each row judged as it streams by.

On the DirectRunner with one worker (pipelines.local.stream_judge) the shuffles and
Flattens of the judge stage's other path (transforms.judge: requests keyed, joined with
judge.cache, answered in shards, joined back by id) would each hold every row in memory.
StreamJudgeFn gives the same answers and rows without them: a key asked again is
answered from the answers kept on disk (metrics.judge.answers), and the rows need no
join. JudgeInstances(stream=True) applies it.
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from evalbeam.metrics.judge.answers import AnswerStore
from evalbeam.metrics.judge.asks import JudgePlan, Unasked, judge_requests
from evalbeam.metrics.judge.client import JudgeRequest, JudgeResponse, JudgeStreams
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.verdicts import judge_rows
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.transforms import judge_checkpoint
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.transforms.progress import CallCounters, CountFn, JudgeShardLog, reused
from evalbeam.transforms.score import ScoredInstance


ANSWERED = "answered"  # StreamJudgeFn: (response, ()) once per distinct key answered, as AnswerJudgeRequests gives
NEEDED = "needed"  # StreamJudgeFn: a mark per key not in judge.cache (progress: judgments needed)


class StreamJudgeFn(beam.DoFn):
    """ScoredInstance -> the same with its judge rows added, judged as the rows
    stream by: the judge path of a local run in one process, whose shuffles and
    Flattens would each hold every row in memory (see transforms.judge.JudgeInstances).

    Each request key is answered once: by an answer this run already has (kept
    on disk: metrics.judge.answers), by judge.cache (the side input), by this
    run_id's checkpoints, else by a call on one judge stream (the one judge
    layer: quotas, retries, hedging), checkpointed as it completes. An instance
    is held in memory only while its calls are in flight."""

    def __init__(self, run: RunKey, plans: list[JudgePlan], settings: JudgeSettings, checkpoint: str | None = None,
                 judges: tuple = ()):
        self._run = run
        self._plans = plans
        self._settings = settings
        self._judges = {"": settings, **dict(judges)}
        self._samples = settings.sampling_count
        self._checkpoint = checkpoint
        self._checkpoint_seconds = settings.checkpoint_seconds

    def setup(self):
        self._counters = {name: Metrics.counter("evalbeam", name) for name in (
            "judge_cache_hits", "judge_requests_deduplicated", "judge_requests_to_call", "judge_checkpoint_reused",
            "metric_errors")}
        self._counted = CallCounters()
        self._given = self._known = None
        self._stream = None

    def _load(self, cached) -> None:
        """The answers this run may reuse, on disk: this run_id's checkpoints, and
        judge.cache over them (the cache is looked up first, as ResolveFn does)."""
        self._given, self._known = AnswerStore(), AnswerStore()  # answers given out; answers to reuse
        if self._checkpoint:
            self._known.put_all(judge_checkpoint.read_checkpoints(self._checkpoint).values())
        self._known.put_all(response for _, response in cached)

    def _start(self) -> None:
        self._stream = JudgeStreams(self._judges, lambda request: request)
        self._writer = judge_checkpoint.CheckpointWriter(self._checkpoint, 0, self._checkpoint_seconds) \
            if self._checkpoint else None
        self._log = JudgeShardLog(0, 1, self._settings.requests_per_minute)
        self._waiting: dict[str, list] = {}  # key in flight -> [(entry, link)]

    def process(self, scored: ScoredInstance, cached=()):
        if self._given is None:
            self._load(cached)
        count = self._counters
        entry = [scored, 1, []]  # the instance, its answers still to come (+1 until all are asked), [(link, response)]
        for asked in judge_requests(scored.instance, self._plans, self._settings, self._samples):
            if isinstance(asked, Unasked):  # a unit with an input missing: its error
                entry[2].append((asked.link, asked.response))
                continue
            key, (request, link) = asked
            if self._stream is not None and key in self._waiting:
                count["judge_requests_deduplicated"].inc()
                self._waiting[key].append((entry, link))
                entry[1] += 1
                continue
            response = self._given.get(key)
            if response is not None:
                count["judge_requests_deduplicated"].inc()
                entry[2].append((link, response))
                continue
            response = self._known.get(key)
            if response is not None:
                response = dataclasses.replace(response, metric=request.metric,
                                               model=self._judges.get(request.judge, self._settings).model)
                self._given.put(response)
                if response.cache_hit:
                    count["judge_cache_hits"].inc()
                else:
                    count["judge_checkpoint_reused"].inc()
                    count["judge_requests_to_call"].inc()
                    yield beam.pvalue.TaggedOutput(NEEDED, 1)
                entry[2].append((link, response))
                yield beam.pvalue.TaggedOutput(ANSWERED, (response, ()))
                continue
            count["judge_requests_to_call"].inc()
            yield beam.pvalue.TaggedOutput(NEEDED, 1)
            if self._stream is None:
                self._start()
            self._waiting[key] = [(entry, link)]
            entry[1] += 1
            for done in self._stream.put(request):
                yield from self._answered(*done)
        yield from self._release(entry)
        if self._stream is not None:
            for done in self._stream.ready():
                yield from self._answered(*done)

    def _answered(self, request: JudgeRequest, response: JudgeResponse):
        self._given.put(response)
        self._counted.add(response, self._log, self._writer)
        yield beam.pvalue.TaggedOutput(ANSWERED, (response, ()))
        for entry, link in self._waiting.pop(request.key):
            entry[2].append((link, response))
            yield from self._release(entry)

    def _release(self, entry):
        entry[1] -= 1
        if entry[1] == 0:
            scored = entry[0]
            rows = judge_rows(self._run, self._plans, scored.instance, self._settings.model, entry[2], self._samples)
            self._counters["metric_errors"].inc(sum(r["error"] is not None for r in rows))
            yield ScoredInstance(scored.instance, scored.results + rows)

    def finish_bundle(self):
        if self._stream is None:
            return
        try:
            for done in self._stream.close():
                for out in self._answered(*done):
                    if isinstance(out, beam.pvalue.TaggedOutput):
                        yield beam.pvalue.TaggedOutput(out.tag, GlobalWindows.windowed_value(out.value))
                    else:
                        yield GlobalWindows.windowed_value(out)
            self._log.finish()
        finally:
            self._stream = None
            if self._writer:
                self._writer.close()
        if self._waiting:  # every key put on the stream is answered by close(): a broken promise, not a lost row
            raise RuntimeError(f"{len(self._waiting)} judge requests got no answer")

    def teardown(self):
        for store in (self._given, self._known):
            if store is not None:
                store.close()


class StreamJudge(beam.PTransform):
    """ScoredInstances -> (the same with their judge rows, (response, ()) once per distinct key
    answered), judged as they come by StreamJudgeFn through the stage's JudgeContext, with no
    shuffle; with a progress folder, the judgments needed, done and reused counted."""

    def __init__(self, run: RunKey, plans: list[JudgePlan], context: JudgeContext):
        super().__init__()
        self._run = run
        self._plans = plans
        self._context = context

    def expand(self, scored):
        context = self._context
        cached = [beam.pvalue.AsIter(context.cached)] if context.cached is not None else []
        judged = scored | "Judge" >> beam.ParDo(StreamJudgeFn(
            self._run, self._plans, context.settings, context.checkpoint, context.judges), *cached).with_outputs(
            ANSWERED, NEEDED, main="scored")
        if context.progress:
            judged[NEEDED] | "ProgressJudgeNeeded" >> beam.ParDo(CountFn(context.progress, "judge_needed"))
            called = judged[ANSWERED] | "Called" >> beam.Filter(lambda a: not a[0].cache_hit)
            called | "ProgressJudgeDone" >> beam.ParDo(CountFn(context.progress, "judge_done"))
            called | "ProgressJudgeReused" >> beam.ParDo(CountFn(context.progress, "judge_reused", weight=reused))
        return judged.scored, judged[ANSWERED]
