"""What a run's judging would cost, counted without calling the judge.

The same requests the run would make (metrics.judge.asks.judge_requests, and the
rubric metrics' generation requests after judge.rubrics_from), joined with
judge.cache by the same content key, so what is counted as "to call" is
exactly what the run would send. Rubric validations depend on the rubrics a
generation returns, so they are counted as an upper bound (one per instance,
metric, unit -- a turn or step for agent judges -- and sample) and not matched with the cache.
"""
from __future__ import annotations

import collections
import datetime as dt
from typing import Iterable

import apache_beam as beam

from evalbeam.metrics.judge.asks import Unasked, judge_requests, plan_judges
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.transforms.failure_modes import DISCOVERY, instance_asks, instance_failures, usage_name
from evalbeam.transforms.rubrics import READY, RubricNeedsFn, plan_rubric_metrics, plan_units, use_pinned
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.transforms.score import ScoreInstances

COUNTS = ("asked", "distinct", "cached", "to_call", "prompt_chars", "cached_output_tokens", "upper_bound")


def sum_counts(counts: Iterable[dict]) -> dict:
    total: collections.Counter = collections.Counter()
    for c in counts:
        total.update(c)
    return {k: total.get(k, 0) for k in COUNTS}


def plan_key(element) -> Iterable:
    """(request_key, {asks, cached}) -> (metric, counts) for one distinct request."""
    _, groups = element
    asks = list(groups["asks"])
    if not asks:  # a cached judgment this run does not need
        return
    request = asks[0][0]
    cached = next(iter(groups["cached"]), None)
    yield request.metric, {
        "asked": len(asks), "distinct": 1, "cached": int(cached is not None), "to_call": int(cached is None),
        "prompt_chars": 0 if cached is not None else len(request.prompt),
        "cached_output_tokens": cached.output_tokens if cached is not None else 0,
    }



def _asked(instance, plans, settings: JudgeSettings, sampling_count: int) -> list:
    """The judge requests an instance asks, as the run asks them; a unit with an input missing
    (Unasked) asks nothing, so costs nothing."""
    return [a for a in judge_requests(instance, plans, settings, sampling_count) if not isinstance(a, Unasked)]


def _validations(instance, plans, sampling_count: int):
    """Rubric validations an instance asks for, one per unit (the instance, or each
    turn or step of an agent judge) and sample: an upper bound (the units whose
    rubrics fail, or that are not evaluated, ask none)."""
    return [(f"{p.output_name}:validation",
             {"asked": len(plan_units(instance, p.template)) * p.template.samples(sampling_count), "upper_bound": 1})
            for p in plans if p.output_name not in instance.missing_inputs]

def _failure_bounds(instance, metrics: list[str]):
    """Failure classifications of judge metrics, before the run: at most one per instance
    and metric (whether it fails is the judge's to say). A rubric metric asks one per
    failed rubric, not known before its rubrics are judged: it is not counted."""
    return [(usage_name(m), {"asked": 1, "upper_bound": 1}) for m in metrics if m not in instance.missing_inputs]


class PlanFailureModes(beam.PTransform):
    """Instances -> (request_key, (request, link)) asks of the failure classifications of the
    computation metrics (scored here, offline: exactly the requests the run sends), and
    (metric, counts) upper bounds for the judge metrics' (see _failure_bounds)."""

    def __init__(self, failure_modes, taxonomy, computation_specs, judge_metrics, settings: JudgeSettings):
        super().__init__()
        self._metrics = frozenset(failure_modes.metrics)
        self._taxonomy = taxonomy
        self._specs = computation_specs
        self._judge_metrics = [m for m in failure_modes.metrics if m in judge_metrics]
        self._settings = settings

    def expand(self, instances):
        run = RunKey("plan", dt.date.today())
        scored = instances | "ScoreOffline" >> ScoreInstances(run, self._specs)
        bounds = instances | "FailureBounds" >> beam.FlatMap(_failure_bounds, self._judge_metrics)
        if self._taxonomy is None:
            # discover: the prompts hold a taxonomy not proposed yet, so neither their tokens nor the
            # cache are known: one discovery when anything fails, one classification per failure
            failures = scored | "Failures" >> beam.FlatMap(instance_failures, self._metrics, frozenset())
            per_failure = failures | "PerFailure" >> beam.Map(
                lambda item: (usage_name(item[0].metric), {"asked": 1, "upper_bound": 1}))
            discovery = (failures | "CountFailures" >> beam.combiners.Count.Globally()
                         | "Discovery" >> beam.FlatMap(lambda n: [(DISCOVERY, {"asked": 1, "upper_bound": 1})] if n else []))
            bounds = (bounds, per_failure, discovery) | "AllBounds" >> beam.Flatten()
            return instances.pipeline | "NoAsks" >> beam.Create([]), bounds
        taxonomy = instances.pipeline | "Taxonomy" >> beam.Create([self._taxonomy])
        asks = scored | "FailureAsks" >> beam.FlatMap(instance_asks, self._metrics, frozenset(), self._settings,
                                                      taxonomy=beam.pvalue.AsSingleton(taxonomy))
        return asks, bounds


class PlanJudging(beam.PTransform):
    """Instances -> one list of (metric or metric:stage, counts)."""

    def __init__(self, judge_specs, rubric_specs, settings: JudgeSettings, cached=None, pinned=None,
                 failure_modes: PlanFailureModes | None = None):
        super().__init__()
        self._judge_specs = judge_specs
        self._rubric_specs = rubric_specs
        self._settings = settings
        self._cached = cached
        self._pinned = pinned
        self._failure_modes = failure_modes

    def expand(self, instances):
        settings = self._settings
        pipeline = instances.pipeline
        asks = []
        if self._judge_specs:
            asks.append(instances | "JudgeRequests" >> beam.FlatMap(
                _asked, plan_judges(self._judge_specs, settings), settings, settings.sampling_count))
        validations = []
        if self._rubric_specs:
            plans = plan_rubric_metrics(self._rubric_specs)
            needs = instances | "RubricNeeds" >> beam.ParDo(RubricNeedsFn(plans, settings)).with_outputs(
                READY, main="asks")
            pinned = self._pinned if self._pinned is not None else pipeline | "NoPinned" >> beam.Create([])
            generation = (
                {"asks": needs.asks, "pinned": pinned}
                | "JoinPinned" >> beam.CoGroupByKey()
                | "UsePinned" >> beam.FlatMap(use_pinned).with_outputs(READY, main="requests")
            )
            asks.append(generation.requests)
            validations.append(instances | "Validations" >> beam.FlatMap(
                _validations, plans, settings.sampling_count))
        if self._failure_modes is not None:
            failure_asks, bounds = instances | "FailureModes" >> self._failure_modes
            asks.append(failure_asks)
            validations.append(bounds)
        if not asks and not validations:
            return pipeline | "NothingToJudge" >> beam.Create([[]])
        parts = list(validations)
        if asks:
            all_asks = tuple(asks) | "AllAsks" >> beam.Flatten() if len(asks) > 1 else asks[0]
            cached = self._cached if self._cached is not None else pipeline | "NoCache" >> beam.Create([])
            parts.append(
                {"asks": all_asks, "cached": cached}
                | "JoinCache" >> beam.CoGroupByKey()
                | "PerRequest" >> beam.FlatMap(plan_key)
            )
        merged = tuple(parts) | "AllCounts" >> beam.Flatten() if len(parts) > 1 else parts[0]
        return merged | "PerMetric" >> beam.CombinePerKey(sum_counts) | "Together" >> beam.combiners.ToList()
