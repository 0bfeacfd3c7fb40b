"""Model-based (LLM-judge) metrics in the pipeline.

    instances -> judge requests (one per metric, sample and, for pairwise, order),
                 keyed by the content hash of what is asked (metrics.judge.asks)
              -> one CoGroupByKey with earlier judgments (judge.cache): a key
                 asked by many instances is answered once; a cached key is not
                 asked at all
              -> the rest, grouped into `judge.shards` shards; each shard is one
                 DoFn call that first reuses this run_id's checkpointed answers
                 (transforms.judge_checkpoint), then keeps its 1/shards of the
                 quotas with many calls in flight (metrics.judge.client), or
                 sends batch jobs (judge.mode batch: metrics.judge.batch),
                 checkpointing answers as they come
              -> answers fanned back to the instances that asked, and turned
                 into one metric_results row per instance and judge metric
                 (metrics.judge.verdicts).

On a local run in one process (the DirectRunner, whose shuffles and Flattens
hold all their data in memory) the same answers come from
transforms.judge_stream instead: each row is judged as it streams by, a key
asked again is answered from the answers kept on disk, and the rows need no join.

Why shards: a quota belongs to the whole job, and workers share nothing. With
a fixed number of shards, each holding a fixed share, the job stays within its
quota however many workers Dataflow starts; one shard's asyncio loop keeps
hundreds of calls in flight, so a single shard already reaches quotas of
thousands of requests per minute.
"""
from __future__ import annotations

import collections
import dataclasses

import apache_beam as beam
from apache_beam.metrics import Metrics

from evalbeam.metrics.judge.asks import (
    JudgePlan,
    Unasked,
    judge_requests,
    plan_judge_settings,
    plan_judges,
    share_quotas,
    usage_models,
)
from evalbeam.metrics.judge.batch import judge_batch
from evalbeam.metrics.judge.client import judge_stream
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.usage import add_answer, merge_accumulators, usage_of
from evalbeam.metrics.judge.verdicts import cache_row, judge_rows, response_from_cache_row
from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.transforms import judge_checkpoint
from evalbeam.transforms.judge_checkpoint import shard_of
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.transforms.judge_stream import StreamJudge
from evalbeam.transforms.progress import CallCounters, CountFn, JudgeShardLog, reused
from evalbeam.transforms.score import ScoredInstance
from evalbeam.transforms.tables import ReadTableRows

TO_CALL = "to_call"
UNASKED = "unasked"  # judge_requests' (instance_id, (link, error response)) for a unit with an input missing


def tagged_requests(instance: Instance, plans: list[JudgePlan], settings: JudgeSettings, sampling_count: int):
    """judge_requests for a FlatMap: the asks as they are, each Unasked tagged UNASKED."""
    for asked in judge_requests(instance, plans, settings, sampling_count):
        if isinstance(asked, Unasked):
            yield beam.pvalue.TaggedOutput(UNASKED, (asked.instance_id, (asked.link, asked.response)))
        else:
            yield asked


class ResolveFn(beam.DoFn):
    """(key, {asks, cached}) -> (cached answer, links), or tagged to_call: (shard, (request, links))."""

    def __init__(self, shards: int):
        self._shards = shards
        self._hits = Metrics.counter("evalbeam", "judge_cache_hits")
        self._deduplicated = Metrics.counter("evalbeam", "judge_requests_deduplicated")
        self._to_call = Metrics.counter("evalbeam", "judge_requests_to_call")

    def process(self, element):
        key, groups = element
        asks = list(groups["asks"])
        if asks:  # else a cached judgment this run does not need
            request, links = asks[0][0], [link for _, link in asks]
            self._deduplicated.inc(len(asks) - 1)
            cached = next(iter(groups["cached"]), None)
            if cached is not None:
                self._hits.inc()
                yield dataclasses.replace(cached, metric=request.metric), links
            else:
                self._to_call.inc()
                yield beam.pvalue.TaggedOutput(TO_CALL, (shard_of(key, self._shards), (request, links)))


class CallJudgeFn(beam.DoFn):
    """(shard, [(request, links)]) -> (response, links), within the shard's share of the quotas.

    With a checkpoint folder, the shard first answers what this run_id's
    checkpoints hold (transforms.judge_checkpoint), and checkpoints every new
    answer as it completes. judge.mode online calls generateContent
    (metrics.judge.client.judge_stream); batch sends the rest as Gemini Batch
    jobs (metrics.judge.batch.judge_batch)."""

    def __init__(self, context: JudgeContext):
        self._settings = context.shard_settings()
        self._judges = context.shard_judges() if context.judges else None
        self._staging = context.staging
        self._shards = context.settings.shards
        self._checkpoint = context.checkpoint
        self._checkpoint_seconds = context.settings.checkpoint_seconds
        self._counted = CallCounters()
        self._reused = Metrics.counter("evalbeam", "judge_checkpoint_reused")

    def process(self, element):
        shard, items = element
        log = JudgeShardLog(shard, self._shards, self._settings.requests_per_minute)
        saved = judge_checkpoint.read_checkpoints(self._checkpoint, shard, self._shards) if self._checkpoint else {}
        reused: list = []

        def fresh():
            for request, links in items:
                hit = saved.get(request.key)
                if hit is not None:
                    # checkpoints keep no model: the one of the settings that asked (judge.prices is per model)
                    model = (self._judges[request.judge] if self._judges else self._settings).model
                    reused.append((dataclasses.replace(hit, metric=request.metric, model=model), links))
                else:
                    yield request, links

        if self._settings.mode == "batch":
            journal = judge_checkpoint.BatchJournal(self._checkpoint, shard, self._shards) if self._checkpoint else None
            staging = judge_checkpoint.GcsStaging(self._staging) if self._staging else None
            answers = self._batches(fresh(), journal, staging)
        else:
            answers = judge_stream(self._judges or self._settings, fresh(), lambda item: item[0])
        writer = judge_checkpoint.CheckpointWriter(self._checkpoint, shard, self._checkpoint_seconds) \
            if self._checkpoint else None
        try:
            for (request, links), response in answers:
                self._counted.add(response, log, writer)
                yield response, links
                while reused:
                    self._reused.inc()
                    yield reused.pop()
            while reused:
                self._reused.inc()
                yield reused.pop()
            log.finish()
        finally:
            if writer:
                writer.close()


    def _batches(self, items, journal, staging):
        """Batch mode: each settings' requests in its own batch jobs (a jury's jurors one after
        the other: a model's batch job holds one model's requests)."""
        if not self._judges:
            yield from judge_batch(self._settings, items, lambda item: item[0], journal, staging=staging)
            return
        by_judge: dict[str, list] = collections.defaultdict(list)
        for item in items:
            by_judge[item[0].judge].append(item)
        for judge, group in by_judge.items():
            yield from judge_batch(self._judges[judge], group, lambda item: item[0], journal, staging=staging)


class AssembleFn(beam.DoFn):
    """(instance_id, {instance, judged}) -> ScoredInstance with the instance's judge rows."""

    def __init__(self, run: RunKey, plans: list[JudgePlan], model: str, sampling_count: int):
        self._run = run
        self._plans = plans
        self._model = model
        self._samples = sampling_count
        self._errors = Metrics.counter("evalbeam", "metric_errors")

    def process(self, element):
        instance_id, groups = element
        judged = list(groups["judged"])
        for instance in groups["instance"]:
            rows = judge_rows(self._run, self._plans, instance, self._model, judged, self._samples)
            self._errors.inc(sum(r["error"] is not None for r in rows))
            yield ScoredInstance(instance, rows)


class UsageFn(beam.CombineFn):
    """Answers -> per judge metric: requests, cache hits, calls, 429s, failures, tokens, and the
    model that answered (metrics.judge.usage)."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, answered):
        return add_answer(acc, answered[0])

    def merge_accumulators(self, accs):
        return merge_accumulators(accs)

    def extract_output(self, acc):
        return usage_of(acc)


class AnswerJudgeRequests(beam.PTransform):
    """(request_key, (request, link)) asks -> (response, [links]): each key asked once,
    from judge.cache when there, else from this run's checkpoints, else called in
    shards (online or in batch jobs). Every judge stage (template metrics, both
    rubric stages) answers through this one composite."""

    def __init__(self, context: JudgeContext):
        super().__init__()
        self._context = context

    def expand(self, asks):
        context = self._context
        cached = context.cached if context.cached is not None else asks.pipeline | "NoCache" >> beam.Create([])
        resolved = (
            {"asks": asks, "cached": cached}
            | "JoinCache" >> beam.CoGroupByKey()
            | "ResolveOnce" >> beam.ParDo(ResolveFn(context.settings.shards)).with_outputs(TO_CALL, main="cached")
        )
        called = (
            resolved[TO_CALL]
            | "IntoShards" >> beam.GroupByKey()
            | "CallJudge" >> beam.ParDo(CallJudgeFn(context))
        )
        if context.progress:
            resolved[TO_CALL] | "ProgressJudgeNeeded" >> beam.ParDo(CountFn(context.progress, "judge_needed"))
            called | "ProgressJudgeDone" >> beam.ParDo(CountFn(context.progress, "judge_done"))
            called | "ProgressJudgeReused" >> beam.ParDo(CountFn(context.progress, "judge_reused", weight=reused))
        return (resolved.cached, called) | "AllAnswers" >> beam.Flatten()


def _keyed_for_join(instance: Instance, per_turn: bool):
    """(id, what the judge rows need of an instance): its id, slices and lines, not
    its fields (a shuffle's data stays small), unless a per-turn metric reads its turns."""
    return instance.instance_id, instance if per_turn else dataclasses.replace(instance, fields={})


class JudgeInstances(beam.PTransform):
    """Instances -> (ScoredInstances with the judge rows, judge_cache rows, usage per metric),
    through the stage's JudgeContext (settings, judge.cache, checkpoints, progress).

    With `stream` (a local run in one process: pipelines.local.stream_judge),
    the input is the ScoredInstances of the computation metrics, judged as they
    come (transforms.judge_stream), and the output carries their rows and the
    judge rows: the same answers and rows without a shuffle, which the local
    runner would hold whole in memory. Otherwise requests are answered by AnswerJudgeRequests
    (shards, for a quota shared by many workers) and joined back by id."""

    def __init__(self, run: RunKey, specs, context: JudgeContext, stream: bool = False):
        super().__init__()
        self._stream = stream
        self._run = run
        self._plans, settings = share_quotas(plan_judges(specs, context.settings, context.juror_settings),
                                             context.settings)
        context = dataclasses.replace(context, settings=settings)
        self._context = dataclasses.replace(context, judges=plan_judge_settings(self._plans))
        self._settings = context.settings
        self._models = usage_models(self._plans)

    def expand(self, instances):
        if self._stream:
            scored, answered = instances | "JudgeAsTheyCome" >> StreamJudge(self._run, self._plans, self._context)
            return (scored, *self._cache_rows_and_usage(answered))
        settings, run, plans = self._settings, self._run, self._plans
        requests = instances | "JudgeRequests" >> beam.FlatMap(
            tagged_requests, plans, settings, settings.sampling_count).with_outputs(UNASKED, main="asks")
        asks = requests.asks
        answered = asks | "Answer" >> AnswerJudgeRequests(self._context)
        fanned = (answered | "BackToInstances" >> beam.FlatMap(
            lambda a: [(link.instance_id, (link, a[0])) for link in a[1]]), requests[UNASKED]) | "AndUnasked" >> beam.Flatten()
        scored = (
            {"instance": instances | "ById" >> beam.Map(_keyed_for_join, any(
                getattr(p.template, "per_turn", False) for p in plans)), "judged": fanned}
            | "JoinInstances" >> beam.CoGroupByKey()
            | "JudgeRows" >> beam.ParDo(AssembleFn(run, plans, settings.model, settings.sampling_count))
        )
        return (scored, *self._cache_rows_and_usage(answered))

    def _cache_rows_and_usage(self, answered):
        cache_rows = answered | "CacheRows" >> beam.FlatMap(
            lambda a, r, m, models: [cache_row(r, models.get(a[0].metric, m), a[0])] if a[0].error is None else [],
            self._run, self._settings.model, self._models)
        return cache_rows, answered | "Usage" >> beam.CombineGlobally(UsageFn())


class ReadJudgeCache(beam.PTransform):
    """Earlier judge_cache tables -> (request_key, JudgeResponse). Each location
    is a Parquet folder or glob, or (already planned) a BigQuery read."""

    def __init__(self, parquet_patterns: list[str], bigquery_plans: list):
        super().__init__()
        self._patterns = parquet_patterns
        self._plans = bigquery_plans

    def expand(self, pbegin):
        return (pbegin | "CacheRows" >> ReadTableRows(self._patterns, self._plans)
                | "CacheEntries" >> beam.Map(response_from_cache_row))
