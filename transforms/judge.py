"""Model-based (LLM-judge) metrics in the pipeline.

    instances -> judge requests (one per metric, sample and, for pairwise, order),
                 keyed by the content hash of what is asked
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
                 into one metric_results row per instance and judge metric.

On a local run in one process (the DirectRunner, whose shuffles and Flattens
hold all their data in memory) the same answers come from StreamJudgeFn
instead: each row is judged as it streams by, a key asked again is answered
from the answers kept on disk, and the rows need no join.

Why shards: a quota belongs to the whole job, and workers share nothing. With
a fixed number of shards, each holding a fixed share, the job stays within its
quota however many workers Dataflow starts; one shard's asyncio loop keeps
hundreds of calls in flight, so a single shard already reaches quotas of
thousands of requests per minute.
"""
from __future__ import annotations

import collections
import dataclasses
import json
from typing import Any, Iterable

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from evalbeam.configs.schema import ConfigError
from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.judge.adk_judges import AdkJudge
from evalbeam.metrics.judge.agent_views import units_of
from evalbeam.metrics.judge.answers import AnswerStore
from evalbeam.metrics.judge.batch import judge_batch
from evalbeam.metrics.judge.client import FREE_TEXT, JudgeRequest, JudgeResponse, JudgeStreams, judge_stream, request_key
from evalbeam.metrics.judge.jury import JuryRule, jury_row
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.templates import (
    CHOICE_SCORE,
    PAIRWISE_CHOICES,
    JudgeTemplate,
    aggregate_pairwise,
    orders_agree,
    aggregate_pointwise,
    pairwise_verdict,
)
from evalbeam.metrics.registry import MetricError
from evalbeam.metrics.rows.trace import trace_of
from evalbeam.transforms import judge_checkpoint
from evalbeam.transforms.judge_checkpoint import shard_of
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.transforms.progress import CountFn, JudgeShardLog
from evalbeam.metrics.rows.tables import RunKey, blank_metric_row
from evalbeam.transforms.score import ScoredInstance
from evalbeam.transforms.tables import ReadTableRows


@dataclasses.dataclass(frozen=True)
class Juror:
    """One judge of a metric: its name (a jury's column and explanation label), the settings it
    calls with, the label its judgments carry (JudgeRequest.metric: judge_usage and judge_cache
    entries) and the stream that answers them (JudgeRequest.judge: "" the stage's own settings)."""
    name: str
    settings: JudgeSettings
    label: str
    judge: str = ""
    own_quota: tuple[str, ...] = ()  # the quotas its partial names (requests_per_minute, tokens_per_minute): kept (share_quotas)


@dataclasses.dataclass(frozen=True)
class JudgePlan:
    output_name: str
    kind: str  # pointwise | pairwise
    template: JudgeTemplate
    threshold: float | None
    # who judges: empty for the stage's settings (the run's judge:); else the metric's own judge, or a jury
    jurors: tuple[Juror, ...] = ()
    jury: JuryRule | None = None  # a jury's rule (judges: given); None for one judge

    def judges(self, settings: JudgeSettings) -> tuple[Juror, ...]:
        return self.jurors or (Juror(settings.model, settings, self.output_name),)


def plan_judges(specs, context: JudgeContext | None = None) -> list[JudgePlan]:
    """The plans of template judge metrics; with the stage's context, each metric's own judge or
    jurors resolved (MetricSpec.judge, .judges: partial settings laid over the stage's)."""
    plans = []
    for s in specs:
        jurors: tuple[Juror, ...] = ()
        if context is not None and (s.judge is not None or s.judges is not None):
            names = [name for name, _ in s.jurors(context.settings)]
            partials = [p for _, p in s.judge_partials()]
            jurors = tuple(
                Juror(name, settings, f"{s.output_name}:{name}" if s.judges is not None else s.output_name,
                      "" if settings == context.settings else settings.digest(), _names_quota(partial))
                for name, settings, partial in zip(names, (context.juror_settings(p) for p in partials), partials))
        plans.append(JudgePlan(s.output_name, s.judge_kind(), s.judge_template(), s.effective_threshold(), jurors,
                               (s.jury or JuryRule()) if s.judges is not None else None))
    return plans


QUOTAS = ("requests_per_minute", "tokens_per_minute")


def _names_quota(partial: dict) -> tuple[str, ...]:
    return tuple(k for k in QUOTAS if partial.get(k) is not None)


def share_quotas(plans: list[JudgePlan], context: JudgeContext) -> tuple[list[JudgePlan], JudgeContext]:
    """The plans and the stage's context with one provider quota shared: the distinct settings
    this stage calls with (its own, when a metric uses it, and every metric's own judge and
    juror) that draw on one quota (JudgeSettings.quota_key: provider, backend, endpoint, model)
    split it, as they call at once. A metric's judge or juror that names its own
    requests_per_minute (or tokens_per_minute) keeps it, and it is taken out of the quota the
    others inherit; they split the rest equally. ConfigError when the quotas named on one
    quota leave the others none."""
    own_used = any(not p.jurors or any(j.judge == "" for j in p.jurors) for p in plans)
    distinct: dict[str, tuple[JudgeSettings, tuple[str, ...], str]] = (
        {"": (context.settings, (), "judge")} if own_used else {})
    for p in plans:
        for j in p.jurors:
            if j.judge:
                distinct.setdefault(j.judge, (j.settings, j.own_quota, j.label))
    share: dict[tuple, float | None] = {}  # (quota key, field) -> each inheriting settings' share
    for field in QUOTAS:
        for key in {s.quota_key() for s, _, _ in distinct.values()}:
            on_key = [(s, own, label) for s, own, label in distinct.values() if s.quota_key() == key]
            inheriting = [s for s, own, _ in on_key if field not in own]
            pool = getattr(inheriting[0], field) if inheriting else None
            if pool is None:  # no settings inherit it (or no such budget): nothing to split
                continue
            named = [(label, getattr(s, field)) for s, own, label in on_key if field in own]
            left = pool - sum(value for _, value in named)
            if left <= 0:
                raise ConfigError(
                    f"judge.{field}: the quotas named by {', '.join(label for label, _ in named)} "
                    f"({' + '.join(f'{v:g}' for _, v in named)}) leave none of the {pool:g} of model {key[-1]} "
                    f"({key[0]}) to the {len(inheriting)} other judge settings calling it: lower them, or raise "
                    f"judge.{field}")
            share[key, field] = left / len(inheriting)

    def shared(settings: JudgeSettings, own: tuple[str, ...] = ()) -> JudgeSettings:
        update = {field: share[settings.quota_key(), field] for field in QUOTAS
                  if field not in own and (settings.quota_key(), field) in share}
        return settings.model_copy(update=update) if update else settings

    context = dataclasses.replace(context, settings=shared(context.settings))
    plans = [dataclasses.replace(p, jurors=tuple(
        dataclasses.replace(j, settings=context.settings if not j.judge else shared(j.settings, j.own_quota))
        for j in p.jurors)) for p in plans]
    return plans, context


def plan_judge_settings(plans: list[JudgePlan]) -> tuple:
    """(digest, settings) of every metric's own judge and juror: JudgeContext.judges."""
    return tuple({j.judge: j.settings for p in plans for j in p.jurors}.items())


def usage_models(plans: list[JudgePlan]) -> dict[str, str]:
    """judge_usage entry (JudgeRequest.metric) -> model, for the judgments not made by the stage's model."""
    return {j.label: j.settings.model for p in plans for j in p.jurors}


@dataclasses.dataclass(frozen=True)
class Link:
    """Who asked a judgment: an instance's metric, sample and order."""

    instance_id: str
    metric: str
    sample: int
    order: int  # 0: as given (A = baseline); 1: swapped (pairwise only)
    unit: int = 0  # per-turn templates: the turn
    juror: int = 0  # a jury: the juror (JudgePlan.jurors) who judged


def judge_requests(instance: Instance, plans: list[JudgePlan], settings: JudgeSettings,
                   sampling_count: int) -> Iterable[tuple[str, tuple[JudgeRequest, Link]]]:
    for plan in plans:
        for index, juror in enumerate(plan.judges(settings)):
            samples = juror.settings.sampling_count if plan.jurors else sampling_count
            yield from _requests(instance, plan, juror, index, samples)


def _requests(instance: Instance, plan: JudgePlan, juror: Juror, index: int, sampling_count: int):
    """One juror's requests for one metric (a metric judged by one judge: its one juror)."""
    settings = juror.settings
    t = plan.template
    if isinstance(t, AdkJudge):
        yield from _adk_requests(instance, plan, juror, index, sampling_count)
        return
    if plan.kind == "pointwise":
        schema, field, allowed = t.pointwise_schema(), "score", tuple(t.rating_rubric)
    else:
        schema, field, allowed = t.pairwise_schema(), t.choice_field, PAIRWISE_CHOICES
    schema_json = json.dumps(schema, sort_keys=True)
    orders = (0,) if plan.kind == "pointwise" else (0, 1)
    samples = t.samples(sampling_count)
    needed = ("response", *t.input_variables, *(("baseline_model_response",) if plan.kind == "pairwise" else ()))
    for unit, fields in _judged_units(instance, t):
        missing = [f for f in dict.fromkeys(needed) if fields.get(f) is None]
        if missing:
            # e.g. inference made a multi-turn case, which has no single response:
            # no question to ask; the row carries why (never a crash, never a lost row)
            error = (f"cannot be judged: the instance has no {', '.join(map(repr, missing))} "
                     f"(needed by {plan.output_name})")
            for sample in range(samples):
                for order in orders:
                    yield beam.pvalue.TaggedOutput(UNASKED, (instance.instance_id, (
                        Link(instance.instance_id, plan.output_name, sample, order, unit, index),
                        JudgeResponse("", juror.label, error=error))))
            continue
        for sample in range(samples):
            for order in orders:
                prompt = t.render_pointwise(fields) if plan.kind == "pointwise" else \
                    t.render_pairwise(fields, swapped=bool(order))
                key = request_key(settings, prompt, schema_json, sample)
                request = JudgeRequest(key, juror.label, prompt, schema_json, field, allowed,
                                       seed=sample if samples > 1 else None, judge=juror.judge)
                yield key, (request, Link(instance.instance_id, plan.output_name, sample, order, unit, index))


def _adk_requests(instance: Instance, plan: JudgePlan, juror: Juror, index: int, sampling_count: int):
    """An ADK judge criterion's requests: each turn's prompt as ADK's own evaluator renders it
    (metrics.judge.adk_judges), asked as free text, once per sample."""
    t, settings = plan.template, juror.settings
    try:
        prompts = t.prompts(instance.fields)
    except Exception as e:  # noqa: BLE001 - ADK's evaluator refuses the case (ADK: NOT_EVALUATED): the row says why
        yield beam.pvalue.TaggedOutput(UNASKED, (instance.instance_id, (
            Link(instance.instance_id, plan.output_name, 0, 0, 0, index),
            JudgeResponse("", juror.label, error=f"cannot be judged: {e}" if isinstance(e, ValueError)
                          else f"cannot be judged: {type(e).__name__}: {e}"))))
        return
    samples = t.samples(sampling_count)
    for unit, prompt in enumerate(prompts):
        for sample in range(samples):
            key = request_key(settings, prompt, "", sample)
            request = JudgeRequest(key, juror.label, prompt, "", FREE_TEXT, (),
                                   seed=sample if samples > 1 else None, judge=juror.judge)
            yield key, (request, Link(instance.instance_id, plan.output_name, sample, 0, unit, index))


def adk_row(run: RunKey, plan: JudgePlan, instance: Instance, model: str, by_metric: dict,
            sampling_count: int) -> dict[str, Any]:
    """An ADK judge criterion's row: each sample's answer scored by ADK's own parsing, a turn with a
    sample whose judgment failed NOT_EVALUATED (as ADK treats a sample that raised), then ADK's own
    aggregation over samples and turns (metrics.judge.adk_judges)."""
    t = plan.template
    row = blank_metric_row(run, instance.instance_id, plan.output_name, model)
    try:  # rendered again here: a rubric evaluator reads the answers against what it rendered last, as in ADK
        turns = len(t.prompts(instance.fields))
    except Exception as e:  # noqa: BLE001 - as _adk_requests
        row["error"] = f"cannot be judged: {e}" if isinstance(e, ValueError) else \
            f"cannot be judged: {type(e).__name__}: {e}"
        return row
    samples = t.samples(sampling_count)
    responses = [r for u in range(turns) for r in by_metric.get((plan.output_name, u), {}).values()]
    row["prompt_tokens"] = sum(r.prompt_tokens for r in responses if not r.cache_hit)
    row["output_tokens"] = sum(r.output_tokens for r in responses if not r.cache_hit)
    row["attempts"] = sum(r.attempts for r in responses if not r.cache_hit)
    row["cache_hit"] = bool(responses) and all(r.cache_hit for r in responses)
    per_turn_samples: list[list | None] = []  # each sample's AutoRaterScore, as ADK's evaluator read it
    reasons = []
    first = len(trace_of(instance.fields)) - turns  # a conversation criterion judges its last turn only
    for u in range(turns):
        answers = by_metric.get((plan.output_name, u), {})
        got = [answers.get((sample, 0)) for sample in range(samples)]
        failed = [r.error if r else "no answer" for r in got if r is None or r.error]
        if failed:
            per_turn_samples.append(None)
            reasons.append(f"turn {first + u + 1}: not evaluated ({failed[0]})")
            continue
        try:
            per_turn_samples.append([t.score_answer(r.verdict) for r in got])
        except Exception as e:  # noqa: BLE001 - ADK: a sample whose reading raises leaves its turn NOT_EVALUATED
            per_turn_samples.append(None)
            reasons.append(f"turn {first + u + 1}: not evaluated (ADK could not read an answer: "
                           f"{type(e).__name__}: {e})")
    try:
        score, per_turn = t.aggregate(instance.fields, per_turn_samples, plan.threshold)
    except Exception as e:  # noqa: BLE001 - ADK's aggregation raising: the criterion is NOT_EVALUATED, as in ADK
        row["error"] = f"ADK's aggregation failed: {type(e).__name__}: {e}"
        return row
    sample_scores = [None if xs is None else [x.score for x in xs] for xs in per_turn_samples]
    extra = {"per_invocation": per_turn, "sample_scores": sample_scores}
    judged = per_turn[first:]
    if score is None:
        reasons += [f"turn {first + u + 1}: ADK read no score from the judge's answers" for u, s in enumerate(judged)
                    if s is None and per_turn_samples[u] is not None]
        row["error"] = "no turn evaluated: " + "; ".join(reasons)
        row["extra"] = json.dumps(extra, sort_keys=True)
        return row
    agreeing = [sum(x == s for x in xs) / len(xs) for xs, s in zip(sample_scores, judged) if xs and s is not None]
    explanation = "; ".join(f"turn {u + 1}: " + (f"{s:g}" if s is not None else "not evaluated")
                            for u, s in enumerate(per_turn))
    row.update(score=score, confidence=sum(agreeing) / len(agreeing) if agreeing else None,
               explanation=f"ADK {t.name}: {explanation}", extra=json.dumps(extra, sort_keys=True))
    if plan.threshold is not None:
        row["passed"] = score >= plan.threshold
    return row


def _judged_units(instance: Instance, t) -> list[tuple[int, dict]]:
    """(unit, fields) judged: the instance, or each turn with a final response (per-turn templates)."""
    if not getattr(t, "per_turn", False):
        return [(0, instance.fields)]

    return [(u, unit.fields) for u, unit in enumerate(units_of(instance.fields, "turn")) if not unit.skip]


TO_CALL = "to_call"
UNASKED = "unasked"  # judge_requests' (instance_id, (link, error response)) for a unit with an input missing


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


class CallCounters:
    """The counters of answers from calls (Beam metrics), and their logging and
    checkpointing: one place for both judge paths (CallJudgeFn, StreamJudgeFn)."""

    def __init__(self):
        self._counters = {name: Metrics.counter("evalbeam", f"judge_{name}") for name in (
            "calls", "rate_limited", "hedged", "failures", "prompt_tokens", "output_tokens")}

    def add(self, response: JudgeResponse, log: JudgeShardLog, writer=None) -> None:
        if writer:
            writer.add(response)
        log.add(bool(response.error), response.rate_limited)
        c = self._counters
        c["calls"].inc(response.attempts)
        c["rate_limited"].inc(response.rate_limited)
        c["hedged"].inc(response.hedged)
        c["prompt_tokens"].inc(response.prompt_tokens)
        c["output_tokens"].inc(response.output_tokens)
        if response.error:
            c["failures"].inc()


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


def judge_row(run: RunKey, plan: JudgePlan, instance_id: str, model: str,
              answers: dict[tuple[int, int], JudgeResponse], sampling_count: int) -> dict[str, Any]:
    """One metric_results row from the answers to an instance's judgments of one metric."""
    sampling_count = plan.template.samples(sampling_count)
    row = blank_metric_row(run, instance_id, plan.output_name, model)
    responses = list(answers.values())
    row["prompt_tokens"] = sum(r.prompt_tokens for r in responses if not r.cache_hit)
    row["output_tokens"] = sum(r.output_tokens for r in responses if not r.cache_hit)
    row["attempts"] = sum(r.attempts for r in responses if not r.cache_hit)
    row["cache_hit"] = bool(responses) and all(r.cache_hit for r in responses)
    failures = []
    samples = []
    agreements = []  # pairwise: per sample answered in both orders, whether the two orders agreed
    for sample in range(sampling_count):
        if plan.kind == "pointwise":
            r = answers.get((sample, 0))
            if r is None or r.error:
                failures.append(r.error if r else "no answer")
            else:
                samples.append((plan.template.scores()[r.verdict], r.explanation))
        else:
            normal, swapped = answers.get((sample, 0)), answers.get((sample, 1))
            bad = [x.error if x else "no answer" for x in (normal, swapped) if x is None or x.error]
            if bad:
                failures.extend(bad)
            else:
                verdict = pairwise_verdict(normal.verdict, swapped.verdict)
                agreements.append(orders_agree(normal.verdict, swapped.verdict))
                samples.append((verdict, f"[A=baseline] {normal.explanation}\n[A=candidate] {swapped.explanation}"))
    try:
        if plan.kind == "pointwise":
            score, explanation, confidence = aggregate_pointwise(plan.template, samples)
        else:
            choice, explanation, confidence = aggregate_pairwise(samples)
            row["pairwise_choice"], score = choice, CHOICE_SCORE[choice]
            row["position_agreement"] = sum(agreements) / len(agreements)
    except MetricError:
        row["error"] = failures[0] if len(set(failures)) == 1 else "; ".join(dict.fromkeys(failures))
        return row
    row.update(score=score, explanation=explanation, confidence=confidence)
    if plan.threshold is not None:
        row["passed"] = score >= plan.threshold
    if failures:
        row["extra"] = json.dumps({"failed_samples": len(failures), "errors": sorted(set(failures))}, sort_keys=True)
    return row


def per_turn_row(run: RunKey, plan: JudgePlan, instance: Instance, model: str, by_metric: dict,
                 sampling_count: int) -> dict[str, Any]:
    """A per-turn template's row: each turn judged as judge_row does, then the mean of
    the turns' scores; a turn with no response or whose judgment failed is not evaluated
    (ADK's response_evaluation_score: the mean of the non-None per-invocation scores)."""
    units = units_of(instance.fields, "turn")
    turn_rows = [None if unit.skip else judge_row(run, plan, instance.instance_id, model,
                                                  by_metric.get((plan.output_name, u), {}), sampling_count)
                 for u, unit in enumerate(units)]
    row = blank_metric_row(run, instance.instance_id, plan.output_name, model)
    done = [r for r in turn_rows if r is not None]
    for key in ("prompt_tokens", "output_tokens", "attempts"):
        row[key] = sum(r[key] for r in done)
    row["cache_hit"] = bool(done) and all(r["cache_hit"] for r in done)
    scores = [r["score"] if r is not None and r["error"] is None else None for r in turn_rows]
    present = [s for s in scores if s is not None]
    if not present:
        reasons = [r["error"] for r in done if r["error"]] or [units[0].skip or "nothing to judge"]
        row["error"] = "; ".join(dict.fromkeys(reasons))
        return row
    score = sum(present) / len(present)
    row.update(score=score, confidence=sum(r["confidence"] for r in done if r["error"] is None) / len(present),
               explanation=" | ".join(f"turn {i + 1}: " + (r["explanation"] if r is not None and r["error"] is None
                                                           else f"not evaluated ({units[i].skip or r['error']})")
                                      for i, r in enumerate(turn_rows)) if len(units) > 1 else done[0]["explanation"],
               extra=json.dumps({"per_invocation": scores}, sort_keys=True) if len(units) > 1 else None)
    if plan.threshold is not None:
        row["passed"] = score >= plan.threshold
    return row


def judge_rows(run: RunKey, plans: list[JudgePlan], instance: Instance, model: str,
               judged: Iterable[tuple[Link, JudgeResponse]], sampling_count: int) -> list[dict[str, Any]]:
    """An instance's judge rows (one per plan) from the answers to its judgments."""
    by_juror: dict[int, dict[tuple[str, int], dict[tuple[int, int], JudgeResponse]]] = \
        collections.defaultdict(lambda: collections.defaultdict(dict))
    for link, response in judged:
        by_juror[link.juror][(link.metric, link.unit)][(link.sample, link.order)] = response
    rows = []
    for plan in plans:
        if not plan.jurors:
            rows.append(_one_judge_row(run, plan, instance, model, by_juror[0], sampling_count))
            continue
        own = [(j.name, j.settings.model, _one_judge_row(run, plan, instance, j.settings.model, by_juror[i],
                                                         j.settings.sampling_count))
               for i, j in enumerate(plan.jurors)]
        if plan.jury is None:  # the metric's own judge
            rows.append(own[0][2])
        else:
            rows.append(jury_row(blank_metric_row(run, instance.instance_id, plan.output_name,
                                                  ",".join(j.settings.model for j in plan.jurors)),
                                 plan.kind, plan.jury, plan.threshold, own))
    return rows


def _one_judge_row(run: RunKey, plan: JudgePlan, instance: Instance, model: str, by_metric: dict,
                   sampling_count: int) -> dict[str, Any]:
    """A metric's row from one judge's answers (a jury: one juror's, as if it judged alone)."""
    if isinstance(plan.template, AdkJudge):
        return adk_row(run, plan, instance, model, by_metric, sampling_count)
    if getattr(plan.template, "per_turn", False):
        return per_turn_row(run, plan, instance, model, by_metric, sampling_count)
    return judge_row(run, plan, instance.instance_id, model, by_metric.get((plan.output_name, 0), {}), sampling_count)


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


def cache_row(run: RunKey, model: str, response: JudgeResponse) -> dict[str, Any]:
    return {**run.columns(), "request_key": response.key, "metric": response.metric, "model": model,
            "verdict": response.verdict, "explanation": response.explanation,
            "prompt_tokens": response.prompt_tokens, "output_tokens": response.output_tokens,
            "attempts": response.attempts}


def response_from_cache_row(row: dict[str, Any]) -> tuple[str, JudgeResponse]:
    return row["request_key"], JudgeResponse(
        key=row["request_key"], metric=row["metric"], verdict=row["verdict"], explanation=row["explanation"],
        prompt_tokens=row.get("prompt_tokens") or 0, output_tokens=row.get("output_tokens") or 0,
        attempts=0, cache_hit=True)


class UsageFn(beam.CombineFn):
    """Answers -> per judge metric: requests, cache hits, calls, 429s, failures, tokens, and the
    model that answered (`model`; `models`, each with its tokens, when several did: judge.prices
    is per model). An answer that names no model (reused from checkpoints) is the stage's."""

    TOKENS = ("prompt_tokens", "output_tokens", "batch_prompt_tokens", "batch_output_tokens")

    FIELDS = ("requests", "cache_hits", "calls", "rate_limited", "failures", "prompt_tokens", "output_tokens",
              "batch_prompt_tokens", "batch_output_tokens", "checkpoint_reused")

    def create_accumulator(self):
        return {}

    def add_input(self, acc, answered):
        response, _ = answered
        m = acc.setdefault(response.metric, dict.fromkeys(self.FIELDS, 0))
        m["requests"] += 1
        if response.cache_hit:
            m["cache_hits"] += 1
            return acc
        m["calls"] += response.attempts
        m["rate_limited"] += response.rate_limited
        m["failures"] += response.error is not None
        m["prompt_tokens"] += response.prompt_tokens
        m["output_tokens"] += response.output_tokens
        m["batch_prompt_tokens"] += response.batch_prompt_tokens
        m["batch_output_tokens"] += response.batch_output_tokens
        m["checkpoint_reused"] += response.checkpointed
        if response.prompt_tokens or response.output_tokens:
            tokens = m.setdefault("models", {}).setdefault(response.model or "", dict.fromkeys(self.TOKENS, 0))
            for k in self.TOKENS:
                tokens[k] += getattr(response, k)
        return acc

    def merge_accumulators(self, accs):
        out: dict[str, dict] = {}
        for acc in accs:
            for metric, m in acc.items():
                t = out.setdefault(metric, dict.fromkeys(self.FIELDS, 0))
                for k, v in m.items():
                    if k == "models":
                        for model, tokens in v.items():
                            into = t.setdefault("models", {}).setdefault(model, dict.fromkeys(self.TOKENS, 0))
                            for name, n in tokens.items():
                                into[name] += n
                    else:
                        t[k] = t.get(k, 0) + v
        return out

    def extract_output(self, acc):
        out = {}
        for metric, m in acc.items():
            m = dict(m)
            models = m.pop("models", {})
            if len(models) == 1 and next(iter(models)):
                m["model"] = next(iter(models))
            elif len(models) > 1:
                m["models"] = models
            out[metric] = m
        return out


def merge_usage(usages: Iterable[dict]) -> dict:
    """Usages as UsageFn gives them (several stages', or partial merges of them) -> one, in
    the same form: counts summed per metric, and the models with their tokens."""
    acc: dict[str, dict] = {}
    for usage in usages:
        for metric, m in usage.items():
            m = dict(m)
            if "model" in m:
                models = {m.pop("model"): {k: m.get(k, 0) for k in UsageFn.TOKENS}}
            else:
                models = m.pop("models", {})
            t = acc.setdefault(metric, dict.fromkeys(UsageFn.FIELDS, 0))
            for k, v in m.items():
                t[k] = t.get(k, 0) + v
            for model, tokens in models.items():
                into = t.setdefault("models", {}).setdefault(model, dict.fromkeys(UsageFn.TOKENS, 0))
                for name, n in tokens.items():
                    into[name] += n
    return UsageFn().extract_output(acc)


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
            called | "ProgressJudgeReused" >> beam.ParDo(CountFn(context.progress, "judge_reused", weight=_reused))
        return (resolved.cached, called) | "AllAnswers" >> beam.Flatten()


def _reused(answer) -> int:
    """1 for an answer reused from this run_id's checkpoints (paid for by an attempt that died)."""
    return int(answer[0].checkpointed)


ANSWERED = "answered"  # StreamJudgeFn: (response, ()) once per distinct key answered, as AnswerJudgeRequests gives
NEEDED = "needed"  # StreamJudgeFn: a mark per key not in judge.cache (progress: judgments needed)


class StreamJudgeFn(beam.DoFn):
    """ScoredInstance -> the same with its judge rows added, judged as the rows
    stream by: the judge path of a local run in one process, whose shuffles and
    Flattens would each hold every row in memory (see JudgeInstances).

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
            if isinstance(asked, beam.pvalue.TaggedOutput):  # a unit with an input missing: its error
                entry[2].append(asked.value[1])
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


def _keyed_for_join(instance: Instance, per_turn: bool):
    """(id, what the judge rows need of an instance): its id, slices and lines, not
    its fields (a shuffle's data stays small), unless a per-turn metric reads its turns."""
    return instance.instance_id, instance if per_turn else dataclasses.replace(instance, fields={})


class JudgeInstances(beam.PTransform):
    """Instances -> (ScoredInstances with the judge rows, judge_cache rows, usage per metric),
    through the stage's JudgeContext (settings, judge.cache, checkpoints, progress).

    With `stream` (a local run in one process: pipelines.local.stream_judge),
    the input is the ScoredInstances of the computation metrics, judged as they
    come by StreamJudgeFn, and the output carries their rows and the judge rows:
    the same answers and rows without a shuffle, which the local runner would
    hold whole in memory. Otherwise requests are answered by AnswerJudgeRequests
    (shards, for a quota shared by many workers) and joined back by id."""

    def __init__(self, run: RunKey, specs, context: JudgeContext, stream: bool = False):
        super().__init__()
        self._stream = stream
        self._run = run
        self._plans, context = share_quotas(plan_judges(specs, context), context)
        self._context = dataclasses.replace(context, judges=plan_judge_settings(self._plans))
        self._settings = context.settings
        self._models = usage_models(self._plans)

    def expand(self, instances):
        if self._stream:
            return self._expand_stream(instances)
        settings, run, plans = self._settings, self._run, self._plans
        requests = instances | "JudgeRequests" >> beam.FlatMap(
            judge_requests, plans, settings, settings.sampling_count).with_outputs(UNASKED, main="asks")
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

    def _expand_stream(self, scored):
        """stream: ScoredInstances in, judged as they come (StreamJudgeFn), with no shuffle."""
        context = self._context
        cached = [beam.pvalue.AsIter(context.cached)] if context.cached is not None else []
        judged = scored | "JudgeAsTheyCome" >> beam.ParDo(StreamJudgeFn(
            self._run, self._plans, context.settings, context.checkpoint, context.judges), *cached).with_outputs(
            ANSWERED, NEEDED, main="scored")
        if context.progress:
            judged[NEEDED] | "ProgressJudgeNeeded" >> beam.ParDo(CountFn(context.progress, "judge_needed"))
            called = judged[ANSWERED] | "Called" >> beam.Filter(lambda a: not a[0].cache_hit)
            called | "ProgressJudgeDone" >> beam.ParDo(CountFn(context.progress, "judge_done"))
            called | "ProgressJudgeReused" >> beam.ParDo(CountFn(context.progress, "judge_reused", weight=_reused))
        return (judged.scored, *self._cache_rows_and_usage(judged[ANSWERED]))


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
