"""Rubric-based metrics in the pipeline: two judge stages, each a set of judge
requests answered like any other (deduplicated by content key, joined with
judge.cache, sharded within the quota, accounted per metric and stage).

    instances -> what each (instance, metric) is judged against:
                   static rubrics | the row's rubric_groups | a generation need,
                   keyed by the generation key (metric + generation inputs)
              -> generation needs joined with judge.rubrics_from: a pinned key
                 uses the earlier run's rubrics
              -> the rest as generation requests: every instance sharing the
                 generation's inputs shares one request (and one call)
              -> rubric sets back to the instances; one validation request per
                 instance, metric and sample
              -> answers back to the instances: one metric_results row per
                 instance and metric, and one rubrics row per rubric.

Nothing is dropped: a generation that fails leaves an error on every row that
needed it; an instance with no rubric judged is an error on its row.

ADK's hallucinations_v1 (metrics.judge.adk_judges.AdkHallucinations) runs the
same two stages with google-adk's own prompts and parsing: its steps are the
units, its segmentation the generation (sentences instead of rubrics, never
pinned), its validation one free-text request per step, scored as ADK scores it.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import re
from typing import Any, Iterable

import apache_beam as beam
from apache_beam.metrics import Metrics

from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.judge.adk_judges import AdkHallucinations
from evalbeam.metrics.judge.client import FREE_TEXT, JudgeRequest, JudgeResponse, request_key
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.agent_views import Unit, units_of
from evalbeam.metrics.judge.rubrics import (
    CLAIMS,
    GENERATE,
    LABEL,
    SEGMENT,
    VALIDATE,
    Rubric,
    RubricTemplate,
    RubricVerdict,
    UnitResult,
    aggregate_units,
    claim_verdicts,
    criterion_rubrics,
    given_rubrics,
    label_verdicts,
    majority_verdicts,
    rubrics_from_json,
    rubrics_to_json,
    score_verdicts,
)
from evalbeam.metrics.registry import MetricError
from evalbeam.metrics.judge.verdicts import cache_row
from evalbeam.transforms.judge import AnswerJudgeRequests, UsageFn
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.metrics.rows.tables import RunKey, blank_metric_row
from evalbeam.transforms.tables import ReadTableRows
from evalbeam.transforms.score import ScoredInstance, missing_input_error

READY = "ready"
RUBRIC_ROWS = "rubric_rows"


@dataclasses.dataclass(frozen=True)
class RubricPlan:
    output_name: str
    template: RubricTemplate
    threshold: float | None


def plan_rubric_metrics(specs) -> list[RubricPlan]:
    return [RubricPlan(s.output_name, s.judge_template(), s.effective_threshold()) for s in specs]


@dataclasses.dataclass(frozen=True)
class RubricSet:
    """What one instance's metric (one unit of it: a turn, a step) is judged against, or why it cannot be."""

    source: str  # generated | pinned | given | static | claims | criterion | segmented
    rubrics: tuple[Rubric, ...] = ()
    generation_key: str | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Asker:
    instance_id: str
    metric: str
    unit: int = 0  # the unit's index in units_of(...) (a turn, a step; 0 for a metric judged once)


@dataclasses.dataclass(frozen=True)
class Link:
    """Who asked a validation: an instance's metric and sample (order: always 0)."""

    instance_id: str
    metric: str
    sample: int
    order: int = 0
    unit: int = 0


# ---------------------------------------------------------------- stage 1: the rubrics each instance needs


class RubricNeedsFn(beam.DoFn):
    """instance -> tagged ready: (instance_id, ((metric, unit), RubricSet)) for rubrics known
    without generating; main: (generation_key, (request, Asker)) for the rest (a
    segmented metric's sentences are generated the same way)."""

    def __init__(self, plans: list[RubricPlan], settings: JudgeSettings):
        self._plans = plans
        self._settings = settings

    def process(self, instance: Instance):
        for plan in self._plans:
            t = plan.template
            if plan.output_name in instance.missing_inputs:
                continue  # nothing to ask: its row carries the missing input (AssembleRubricsFn)
            for u, unit in enumerate(plan_units(instance, t)):
                ready = self._known(instance, t, unit)
                if ready is not None:
                    yield beam.pvalue.TaggedOutput(READY, (instance.instance_id, ((plan.output_name, u), ready)))
                    continue
                if isinstance(t, AdkHallucinations):  # ADK's segmenter prompt, free text
                    prompt = t.render_generation(unit.fields)
                    request = JudgeRequest(request_key(self._settings, prompt, "", 0),
                                           f"{plan.output_name}:segmentation", prompt, "", FREE_TEXT, ())
                    yield t.generation_key(prompt), (request, Asker(instance.instance_id, plan.output_name, u))
                    continue
                prompt = t.render_generation(unit.fields)
                schema_json = json.dumps(t.generation_schema(), sort_keys=True)
                request = JudgeRequest(request_key(self._settings, prompt, schema_json, 0),
                                       f"{plan.output_name}:{'segmentation' if t.kind == 'segmented' else 'generation'}",
                                       prompt, schema_json, SEGMENT if t.kind == "segmented" else GENERATE, ())
                yield t.generation_key(unit.fields), (request, Asker(instance.instance_id, plan.output_name, u))

    @staticmethod
    def _known(instance: Instance, t: RubricTemplate, unit: Unit) -> RubricSet | None:
        if unit.skip:
            return RubricSet(t.kind, error=unit.skip)
        if t.kind == "criterion":
            try:
                return RubricSet("criterion", criterion_rubrics(t, unit.rubrics))
            except ValueError as e:
                return RubricSet("criterion", error=str(e))
        if t.kind in ("segmented", "adk_segmented"):
            return None
        if t.kind == "static":
            return RubricSet("static", t.static_rubrics())
        if t.kind == "claims":
            return RubricSet("claims")
        try:
            given = given_rubrics(instance.fields.get("rubric_groups"), t.group)
        except ValueError as e:
            return RubricSet("given", error=f"bad rubric_groups: {e}")
        if given is not None:
            return RubricSet("given", given)
        if t.kind == "given":
            return RubricSet("given", error=f"needs the row's rubric_groups to give the group {t.group!r} "
                                            "(this metric does not generate rubrics)")
        return None


def use_pinned(element) -> Iterable:
    """(generation_key, {asks, pinned}) -> tagged ready for every asker when an earlier
    run's rubrics are pinned for the key; else the asks, keyed by request key."""
    key, groups = element
    pinned = next(iter(groups["pinned"]), None)
    for request, asker in groups["asks"]:
        if pinned is not None:
            yield beam.pvalue.TaggedOutput(READY, (asker.instance_id, ((asker.metric, asker.unit), RubricSet(
                "pinned", rubrics_from_json(pinned), key))))
        else:
            yield request.key, (request, (asker, key))


def generated_sets(answered, adk: dict | None = None) -> Iterable:
    """(generation response, [(Asker, generation_key)]) -> (instance_id, ((metric, unit), RubricSet));
    `adk`: ADK's hallucinations_v1 metrics (output name -> AdkHallucinations), whose sentences ADK reads."""
    response, links = answered
    segmented = response.metric.endswith(":segmentation")
    source, what = ("segmented", "segmentation") if segmented else ("generated", "rubric generation")
    for asker, key in links:
        if response.error:
            rubric_set = RubricSet(source, generation_key=key, error=f"{what} failed: {response.error}")
        elif asker.metric in (adk or {}):
            sentences = adk[asker.metric].sentences(response.verdict)
            rubric_set = RubricSet(source, tuple(Rubric(f"s{i + 1}", s, "sentence") for i, s in enumerate(sentences)),
                                   error=None if sentences else "ADK's segmenter gave no sentence")
        else:
            rubrics = rubrics_from_json(response.verdict)
            rubric_set = RubricSet(source, rubrics, key, None if rubrics else "the judge found no sentence to check")
        yield asker.instance_id, ((asker.metric, asker.unit), rubric_set)


# ---------------------------------------------------------------- stage 2: validation


def plan_units(instance: Instance, t: RubricTemplate) -> list[Unit]:
    """The units an instance's metric is judged in (one, or one per turn or step; ADK's hallucinations_v1:
    the steps its own evaluator finds, or one unit saying why ADK refuses the case)."""
    if isinstance(t, AdkHallucinations):
        try:
            return t.units(instance.fields)
        except Exception as e:  # noqa: BLE001 - ADK's evaluator refuses the case: the row says why
            return [Unit(None, None, {}, skip=f"cannot be judged: {e}" if isinstance(e, ValueError)
                         else f"cannot be judged: {type(e).__name__}: {e}")]
    return units_of(instance.fields, t.unit, t.intermediate_steps)


def validation_requests(instance: Instance, sets: dict, plans: list[RubricPlan],
                        settings: JudgeSettings, sampling_count: int) -> Iterable:
    for plan in plans:
        t = plan.template
        if plan.output_name in instance.missing_inputs:
            continue
        for u, unit in enumerate(plan_units(instance, t)):
            rubric_set = sets.get((plan.output_name, u))
            if rubric_set is None or rubric_set.error:
                continue
            if isinstance(t, AdkHallucinations):  # ADK's validator prompt with ADK's sentences, free text, once
                prompt = t.render_validation(unit.fields, [r.text for r in rubric_set.rubrics])
                key = request_key(settings, prompt, "", 0)
                yield key, (JudgeRequest(key, f"{plan.output_name}:validation", prompt, "", FREE_TEXT, ()),
                            Link(instance.instance_id, plan.output_name, 0, unit=u))
                continue
            prompt = t.render_validation(unit.fields, rubric_set.rubrics)
            schema_json = json.dumps(t.validation_schema(rubric_set.rubrics), sort_keys=True)
            # Claims differ from sample to sample, so grounding is judged once; so is hallucination (as in ADK).
            samples = t.samples(sampling_count)
            kind = CLAIMS if t.kind == "claims" else LABEL if t.kind == "segmented" else VALIDATE
            for sample in range(samples):
                key = request_key(settings, prompt, schema_json, sample)
                request = JudgeRequest(key, f"{plan.output_name}:validation", prompt, schema_json, kind,
                                       tuple(r.rubric_id for r in rubric_set.rubrics),
                                       seed=sample if samples > 1 else None)
                yield key, (request, Link(instance.instance_id, plan.output_name, sample, unit=u))


class ValidationRequestsFn(beam.DoFn):
    """(instance_id, {instance, sets}) -> validation asks; tagged ready: the sets, passed on."""

    def __init__(self, plans: list[RubricPlan], settings: JudgeSettings, sampling_count: int):
        self._plans = plans
        self._settings = settings
        self._samples = sampling_count

    def process(self, element):
        instance_id, groups = element
        sets = dict(groups["sets"])
        for metric, rubric_set in sets.items():
            yield beam.pvalue.TaggedOutput(READY, (instance_id, (metric, rubric_set)))
        for instance in groups["instance"]:
            yield from validation_requests(instance, sets, self._plans, self._settings, self._samples)


# ---------------------------------------------------------------- rows


def rubric_rows(run: RunKey, instance_id: str, metric: str, rubric_set: RubricSet,
                verdicts: tuple[RubricVerdict, ...] | None, unit: Unit | None = None) -> list[dict[str, Any]]:
    if verdicts is None:
        verdicts = tuple(RubricVerdict(r, None, None) for r in rubric_set.rubrics)
    turn = unit.turn if unit is not None else None
    step = unit.step if unit is not None else None
    return [{**run.columns(), "instance_id": instance_id, "metric": metric, "rubric_id": v.rubric.rubric_id,
             "rubric": v.rubric.text, "type": v.rubric.type, "importance": v.rubric.importance,
             "verdict": v.verdict, "label": v.label, "reasoning": v.reasoning, "source": rubric_set.source,
             "generation_key": rubric_set.generation_key, "turn": turn, "step": step} for v in verdicts]


def _unit_verdicts(t: RubricTemplate, rubric_set: RubricSet, answers: dict[int, JudgeResponse], strict: bool
                   ) -> tuple[tuple[RubricVerdict, ...] | None, float, list[str]]:
    """A unit's verdicts from its samples' answers (None when none answered, or
    when `strict`, ADK's rule, and a sample failed), the confidence, and the failures."""
    responses = list(answers.values())
    good = [r for _, r in sorted(answers.items()) if not r.error]
    failures = [r.error for r in responses if r.error] or (["no answer"] if not responses else [])
    if not good or (strict and failures):
        return None, 0.0, failures
    if t.kind == "claims":
        return claim_verdicts(json.loads(good[0].verdict)), 1.0, failures
    if t.kind == "segmented":
        labels = {k: (v["label"], v["reasoning"]) for k, v in json.loads(good[0].verdict).items()}
        return label_verdicts(rubric_set.rubrics, labels), 1.0, failures
    samples = [{k: (v["verdict"], v["reasoning"]) for k, v in json.loads(r.verdict).items()} for r in good]
    verdicts, confidence = majority_verdicts(rubric_set.rubrics, samples)
    return verdicts, confidence, failures


def rubric_metric_row(run: RunKey, plan: RubricPlan, instance_id: str, model: str,
                      units: list[tuple[Unit | None, RubricSet | None, dict[int, JudgeResponse]]], fields=None
                      ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One metric_results row, and the rubrics rows, of an instance's rubric metric,
    from its units (one, or one per turn or step), scored by the template's rule."""
    t = plan.template
    row = blank_metric_row(run, instance_id, plan.output_name, model)
    strict = t.aggregate != "single"  # ADK: a turn with a failed sample is not evaluated
    rows: list[dict[str, Any]] = []
    results: list[UnitResult] = []
    all_verdicts: list[RubricVerdict] = []
    all_failures: list[str] = []
    responses: list[JudgeResponse] = []
    sources, keys = [], []
    refused = [(unit, rs) for unit, rs, _ in units if rs is not None and rs.source == "criterion" and rs.error]
    if refused:
        # ADK raises for the whole criterion when a turn's effective rubrics are empty or repeat an id
        unit, rubric_set = refused[0]
        row["error"] = (f"turn {unit.turn + 1}: " if unit is not None and unit.turn is not None and len(units) > 1
                        else "") + str(rubric_set.error)
        return row, rows
    for unit, rubric_set, answers in units:
        turn, step = (unit.turn, unit.step) if unit is not None else (None, None)
        if rubric_set is None:
            rubric_set = RubricSet("generated", error="no rubrics reached this instance")  # not expected: said, not dropped
        sources.append(rubric_set.source)
        if rubric_set.generation_key:
            keys.append(rubric_set.generation_key)
        if rubric_set.error:
            results.append(UnitResult(turn, step, None, rubric_set.error))
            rows += rubric_rows(run, instance_id, plan.output_name, rubric_set, None, unit)
            continue
        responses += answers.values()
        verdicts, confidence, failures = _unit_verdicts(t, rubric_set, answers, strict)
        all_failures += failures
        rows += rubric_rows(run, instance_id, plan.output_name, rubric_set, verdicts, unit)
        if verdicts is None:
            results.append(UnitResult(turn, step, None, "; ".join(dict.fromkeys(failures))))
            continue
        all_verdicts += verdicts
        try:
            results.append(UnitResult(turn, step, score_verdicts(t, verdicts, confidence)))
        except MetricError as e:
            results.append(UnitResult(turn, step, None, str(e)))
    row["prompt_tokens"] = sum(r.prompt_tokens for r in responses if not r.cache_hit)
    row["output_tokens"] = sum(r.output_tokens for r in responses if not r.cache_hit)
    row["attempts"] = sum(r.attempts for r in responses if not r.cache_hit)
    row["cache_hit"] = bool(responses) and all(r.cache_hit for r in responses)
    try:
        scored = aggregate_units(t, results)
    except MetricError as e:
        row["error"] = str(e)
        return row, rows
    extra: dict[str, Any] = {"weighted_score": scored.weighted_score, "rubrics_met": scored.met,
                             "rubrics_judged": scored.judged, "rubric_count": len(all_verdicts),
                             "rubric_source": sources[0] if len(set(sources)) == 1 else sorted(set(sources))}
    if len(set(keys)) == 1 and len(units) == 1:
        extra["generation_key"] = keys[0]
    if t.score == "all":
        extra["violated"] = sorted({v.rubric.rubric_id for v in all_verdicts if v.verdict is False})
    if t.kind in ("claims", "segmented"):
        extra["labels"] = dict(collections.Counter(v.label for v in all_verdicts if v.label))
    if t.unit == "conversation" and units and units[0][0] is not None and units[0][0].turn:
        # judged once on the last turn; the turns before it are not evaluated (as ADK reports it)
        extra["per_invocation"] = [None] * units[0][0].turn + [scored.score]
    if scored.per_turn is not None:
        extra["per_invocation"] = scored.per_turn  # the turns' scores, as ADK's per-invocation results
        extra["units_evaluated"] = sum(r.score is not None for r in results)
        extra["units"] = len(results)
    if all_failures:
        extra.update(failed_samples=len(all_failures), errors=sorted(set(all_failures)))
    row.update(score=scored.score, explanation=scored.explanation, confidence=scored.confidence,
               extra=json.dumps(extra, sort_keys=True))
    if plan.threshold is not None:
        row["passed"] = scored.score >= plan.threshold
    return row, rows


def adk_hallucinations_row(run: RunKey, plan: RubricPlan, instance_id: str, model: str,
                           units: list[tuple[Unit, RubricSet | None, dict[int, JudgeResponse]]], fields
                           ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """ADK's hallucinations_v1 row, and a rubrics row per sentence block ADK read: each step's score as
    ADK reads its validator's answer (None when its segmentation or validation failed or gave nothing,
    as ADK leaves such a step out), then ADK's aggregation over steps and turns."""
    t = plan.template
    row = blank_metric_row(run, instance_id, plan.output_name, model)
    refused = [unit.skip for unit, _, _ in units if unit.turn is None]
    if refused:
        row["error"] = refused[0]
        return row, []
    rows: list[dict[str, Any]] = []
    steps: list[tuple[int, float | None]] = []
    reasons: list[str] = []
    responses: list[JudgeResponse] = []
    labels: collections.Counter = collections.Counter()
    for unit, rubric_set, answers in units:
        where = f"turn {unit.turn + 1}" + (f" step {unit.step + 1}" if unit.step is not None else "")
        if unit.skip:
            reasons.append(f"{where}: {unit.skip}")
            continue
        answer = answers.get(0)
        responses += answers.values()
        if rubric_set is None or rubric_set.error:
            why = rubric_set.error if rubric_set is not None else "no segmentation reached it"
            steps.append((unit.turn, None))
            reasons.append(f"{where}: {why}")
            continue
        if answer is None or answer.error:
            steps.append((unit.turn, None))
            reasons.append(f"{where}: validation failed: {answer.error if answer else 'no answer'}")
            continue
        score, results = t.read_validation(answer.verdict)
        steps.append((unit.turn, score))
        if score is None:
            reasons.append(f"{where}: ADK read no label from the validator's answer")
        for k, result in enumerate(results):
            label = (result.get("label") or "").strip().lower()
            labels[label] += 1
            verdict = {"supported": True, "not_applicable": True, "unsupported": False, "contradictory": False,
                       "disputed": False}.get(label)
            rows += rubric_rows(run, instance_id, plan.output_name, RubricSet("segmented"), (RubricVerdict(
                Rubric(f"s{k + 1}", result.get("sentence") or "", "sentence"), verdict, result.get("rationale"),
                label),), unit)
    row["prompt_tokens"] = sum(r.prompt_tokens for r in responses if not r.cache_hit)
    row["output_tokens"] = sum(r.output_tokens for r in responses if not r.cache_hit)
    row["attempts"] = sum(r.attempts for r in responses if not r.cache_hit)
    row["cache_hit"] = bool(responses) and all(r.cache_hit for r in responses)
    try:
        score, per_turn = t.aggregate(fields, steps)
    except Exception as e:  # noqa: BLE001 - ADK's aggregation raising: NOT_EVALUATED, as in ADK
        row["error"] = f"ADK's aggregation failed: {type(e).__name__}: {e}"
        return row, rows
    extra = {"per_invocation": per_turn, "step_scores": [s for _, s in steps], "labels": dict(labels)}
    if reasons:
        extra["not_scored"] = reasons
    row["extra"] = json.dumps(extra, sort_keys=True)
    if score is None:
        row["error"] = "no turn evaluated: " + "; ".join(reasons)
        return row, rows
    row.update(score=score, explanation=f"ADK {t.name}: " + "; ".join(
        f"turn {u + 1}: " + (f"{s:g}" if s is not None else "not evaluated") for u, s in enumerate(per_turn)))
    if plan.threshold is not None:
        row["passed"] = score >= plan.threshold
    return row, rows


class AssembleRubricsFn(beam.DoFn):
    """(instance_id, {instance, sets, judged}) -> ScoredInstance with its rubric metric
    rows; tagged rubric_rows: the rubrics table's rows."""

    def __init__(self, run: RunKey, plans: list[RubricPlan], model: str):
        self._run = run
        self._plans = plans
        self._model = model
        self._errors = Metrics.counter("evalbeam", "metric_errors")

    def process(self, element):
        instance_id, groups = element
        sets = dict(groups["sets"])
        answers: dict[tuple[str, int], dict[int, JudgeResponse]] = collections.defaultdict(dict)
        for link, response in groups["judged"]:
            answers[(link.metric, link.unit)][link.sample] = response
        for instance in groups["instance"]:
            rows = []
            for plan in self._plans:
                name = plan.output_name
                if name in instance.missing_inputs:
                    # as a computation metric's (transforms.score): this metric only, never the row
                    row = blank_metric_row(self._run, instance_id, name, self._model)
                    row["error"] = missing_input_error(instance.missing_inputs[name])
                    rows.append(row)
                    continue
                units = [(unit, sets.get((name, u)), answers.get((name, u), {}))
                         for u, unit in enumerate(plan_units(instance, plan.template))]
                make_row = adk_hallucinations_row if isinstance(plan.template, AdkHallucinations) else rubric_metric_row
                row, rubrics = make_row(self._run, plan, instance_id, self._model, units, instance.fields)
                rows.append(row)
                for r in rubrics:
                    yield beam.pvalue.TaggedOutput(RUBRIC_ROWS, r)
            self._errors.inc(sum(r["error"] is not None for r in rows))
            yield ScoredInstance(instance, rows)


# ---------------------------------------------------------------- composites


def _natural(rubric_id: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", rubric_id))


def pinned_rubrics(element) -> Iterable[tuple[str, str]]:
    """(generation_key, [rubrics rows]) -> (generation_key, rubrics JSON) of the
    earliest run that has the key (a table may hold many runs)."""
    key, rows = element
    rows = list(rows)
    first = min((str(r["run_date"]), r["run_id"]) for r in rows)
    chosen = {}
    for r in rows:
        if (str(r["run_date"]), r["run_id"]) == first:
            chosen[r["rubric_id"]] = Rubric(r["rubric_id"], r["rubric"], r.get("type"), r.get("importance"))
    yield key, rubrics_to_json(tuple(chosen[i] for i in sorted(chosen, key=_natural)))


class ReadPinnedRubrics(beam.PTransform):
    """Earlier rubrics tables (Parquet globs, planned BigQuery reads) -> (generation_key,
    rubrics JSON) for every generated (or pinned) rubric set in them."""

    def __init__(self, parquet_patterns: list[str], bigquery_plans: list):
        super().__init__()
        self._patterns = parquet_patterns
        self._plans = bigquery_plans

    def expand(self, pbegin):
        return (
            pbegin
            | "RubricRows" >> ReadTableRows(self._patterns, self._plans)
            | "WithGenerationKey" >> beam.FlatMap(lambda r: [(r["generation_key"], r)] if r.get("generation_key") else [])
            | "ByGenerationKey" >> beam.GroupByKey()
            | "EarliestRun" >> beam.FlatMap(pinned_rubrics)
        )


class RubricJudge(beam.PTransform):
    """Instances -> (ScoredInstances with the rubric metric rows, judge_cache rows,
    usage per metric and stage, rubrics rows), through the stage's JudgeContext;
    `pinned`: (generation_key, rubrics JSON) from judge.rubrics_from, or None."""

    def __init__(self, run: RunKey, specs, context: JudgeContext, pinned=None):
        super().__init__()
        # both stages answer through the one context: they checkpoint into the run's one
        # folder (their keys are content hashes)
        self._context = context
        self._run = run
        self._plans = plan_rubric_metrics(specs)
        self._settings = context.settings
        self._samples = context.settings.sampling_count
        self._pinned = pinned

    def expand(self, instances):
        plans, settings, run = self._plans, self._settings, self._run
        needs = instances | "RubricNeeds" >> beam.ParDo(RubricNeedsFn(plans, settings)).with_outputs(READY, main="asks")
        pinned = self._pinned if self._pinned is not None else instances.pipeline | "NoPinnedRubrics" >> beam.Create([])
        to_generate = (
            {"asks": needs.asks, "pinned": pinned}
            | "JoinPinned" >> beam.CoGroupByKey()
            | "UsePinned" >> beam.FlatMap(use_pinned).with_outputs(READY, main="requests")
        )
        generated = to_generate.requests | "Generate" >> AnswerJudgeRequests(self._context)
        adk = {p.output_name: p.template for p in plans if isinstance(p.template, AdkHallucinations)}
        sets = (
            (needs[READY], to_generate[READY], generated | "GeneratedSets" >> beam.FlatMap(generated_sets, adk))
            | "AllRubricSets" >> beam.Flatten()
        )
        by_id = instances | "ById" >> beam.Map(lambda i: (i.instance_id, i))
        asked = (
            {"instance": by_id, "sets": sets}
            | "JoinRubricSets" >> beam.CoGroupByKey()
            | "ValidationRequests" >> beam.ParDo(ValidationRequestsFn(plans, settings, self._samples)).with_outputs(
                READY, main="asks")
        )
        validated = asked.asks | "Validate" >> AnswerJudgeRequests(self._context)
        fanned = validated | "BackToInstances" >> beam.FlatMap(lambda a: [(link.instance_id, (link, a[0])) for link in a[1]])
        assembled = (
            {"instance": by_id, "sets": asked[READY], "judged": fanned}
            | "JoinAnswers" >> beam.CoGroupByKey()
            | "RubricRows" >> beam.ParDo(AssembleRubricsFn(run, plans, settings.model)).with_outputs(
                RUBRIC_ROWS, main="scored")
        )
        answered = (generated, validated) | "BothStages" >> beam.Flatten()
        cache_rows = answered | "CacheRows" >> beam.FlatMap(
            lambda a, r, m: [cache_row(r, m, a[0])] if a[0].error is None else [], run, settings.model)
        usage = answered | "Usage" >> beam.CombineGlobally(UsageFn())
        return assembled.scored, cache_rows, usage, assembled[RUBRIC_ROWS]
