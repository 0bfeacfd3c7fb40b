"""Scoring: every computation-based metric of the config on every instance.

All computation metrics run in one DoFn call per instance (a fused fan-out:
each metric is cheap CPU work, so a graph branch and a join per metric would
cost more in shuffling than the metrics themselves). Each metric's failure is
caught and recorded on its own result row; an instance is never dropped.
Model-based (judge) metrics, which are I/O bound, get their own transform and
produce rows of the same shape.
"""
from __future__ import annotations

import dataclasses
import json
import os
from math import isfinite
from typing import Any, Callable

import apache_beam as beam
from apache_beam.metrics import Metrics

from evalbeam.metrics.rows.fields import PASSTHROUGH_FIELDS
from evalbeam.metrics.custom import custom_scorer
from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.catalog import get_metric
from evalbeam.metrics.registry import as_metric_value
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.metrics import sentence_bleu
from evalbeam.transforms.worker import (
    collect_young_less_often,
    freeze_start_up_objects,
    in_worker_process,
    quiet_interrupts,
)


@dataclasses.dataclass(frozen=True)
class MetricPlan:
    """One metric as the scorer needs it: picklable, built from the config."""

    output_name: str
    name: str
    params: dict[str, Any]
    function: str | None
    threshold: float | None

    def build(self) -> Callable[[dict[str, Any]], Any]:
        if self.function:
            return custom_scorer(self.function)
        definition = get_metric(self.name)
        return definition.factory(definition.params.model_validate(self.params))


def plan_metrics(specs) -> list[MetricPlan]:
    """MetricPlans for the config's metric specs, plus the agent pass-through
    metrics (latency_in_seconds, failure) that are reported whenever an
    instance has them, requested or not."""
    plans = [
        MetricPlan(s.output_name, s.name, dict(s.params), s.function, s.effective_threshold())
        for s in specs
    ]
    requested = {p.name for p in plans if not p.function} | {p.output_name for p in plans}
    for field in PASSTHROUGH_FIELDS:
        if field not in requested:
            plans.append(MetricPlan(field, field, {}, None, None))
    return plans


JUDGE_COLUMNS_ABSENT = dict.fromkeys(
    ("confidence", "pairwise_choice", "judge_model", "prompt_tokens", "output_tokens", "attempts", "cache_hit"))


@dataclasses.dataclass
class ScoredInstance:
    instance: Instance
    results: list[dict[str, Any]]  # metric_results rows
    # which BLEU path scored it (metrics.sentence_bleu.path()), when a BLEU metric did: the runs row's bleu_path
    bleu_path: str | None = None


def score_instance(run: RunKey, instance: Instance, scorers, base: dict[str, Any] | None = None) -> ScoredInstance:
    """base: result_base(run), passed in by callers that score many instances."""
    if base is None:
        base = result_base(run)
    rows = []
    fields = instance.fields
    criteria = case_criteria(fields)
    inference_error = fields.get("inference_error")
    missing_inputs = instance.missing_inputs
    instance_id = instance.instance_id
    for plan, scorer, optional_field in scorers:
        if optional_field and optional_field not in fields:
            continue  # an automatic pass-through metric this instance has no value for
        threshold = plan.threshold
        if criteria is not None and plan.output_name == plan.name and _is_adk_criterion(plan.name):
            if plan.name not in criteria:
                continue  # not a criterion of this case's file: ADK does not compute it for the case
            threshold = criteria[plan.name]
        row = base.copy()
        row["instance_id"] = instance_id
        row["metric"] = plan.output_name
        row["threshold"] = threshold
        if inference_error is not None and plan.name not in PASSTHROUGH_FIELDS:
            # inference produced nothing to score: the case's error on each of its metrics
            row["error"] = inference_error
            rows.append(row)
            continue
        missing = missing_inputs.get(plan.output_name) if missing_inputs else None
        if missing:
            row["error"] = missing_input_error(missing)
            rows.append(row)
            continue
        try:
            result = scorer(fields)
        except Exception as e:  # noqa: BLE001 - any failure of one metric is recorded on its row
            row["error"] = f"{type(e).__name__}: {e}"
            rows.append(row)
            continue
        if type(result) is float and isfinite(result):
            # what as_metric_value makes of a finite float (every text and trajectory metric's
            # result), without building a MetricValue: its score, no explanation, no extra
            row["score"] = result
            if threshold is not None:
                row["passed"] = result >= threshold
            rows.append(row)
            continue
        try:
            value = as_metric_value(result)
        except Exception as e:  # noqa: BLE001 - any failure of one metric is recorded on its row
            row["error"] = f"{type(e).__name__}: {e}"
        else:
            row["score"] = value.score
            row["explanation"] = value.explanation
            if value.extra:
                row["extra"] = json.dumps(value.extra, ensure_ascii=False, sort_keys=True, default=str)
            if threshold is not None:
                row["passed"] = value.score >= threshold
        rows.append(row)
    return ScoredInstance(instance, rows)


def case_criteria(fields: dict[str, Any]) -> dict[str, float | None] | None:
    """An ADK case's own criteria (criterion -> threshold), from the test_config.json of its
    file (transforms.read_adk, when the config names no criteria); None for any other instance."""
    case = fields.get("adk_case")
    criteria = case.get("criteria") if isinstance(case, dict) else None
    return criteria if isinstance(criteria, dict) else None


def _is_adk_criterion(name: str) -> bool:
    try:
        return get_metric(name).kind == "adk"
    except KeyError:
        return False


def with_thresholds(scored: ScoredInstance, thresholds: dict[str, float | None]) -> ScoredInstance:
    """Each row with the threshold in force (metric_results.threshold): its own where scoring
    set one (an ADK case's own criteria), else its metric's."""
    for row in scored.results:
        if row.get("threshold") is None:  # judge rows start with every column None (schema.blank_metric_row)
            row["threshold"] = thresholds.get(row["metric"])
    return scored


def missing_input_error(missing) -> str:
    """The error of a metric whose inputs the instance lacks (metrics.rows.instance.build_instance)."""
    return f"missing input {', '.join(missing)}"


def result_base(run: RunKey) -> dict[str, Any]:
    """A metric_results row before its instance, metric and outcome are filled in
    (the keys in the order of the table's columns)."""
    return {
        **run.columns(),
        "instance_id": None,
        "metric": None,
        "score": None,
        "passed": None,
        "explanation": None,
        "error": None,
        "extra": None,
        **JUDGE_COLUMNS_ABSENT,
    }


def bleu_planned(plans: list[MetricPlan]) -> bool:
    return any(p.name == "bleu" and not p.function for p in plans)


class SlowBleuRefused(RuntimeError):
    """require_native_bleu, on a worker where BLEU's C extension is not built."""


class ScoreFn(beam.DoFn):
    def __init__(self, run: RunKey, plans: list[MetricPlan], automatic: frozenset[str],
                 require_native_bleu: bool = False):
        self._run = run
        self._plans = plans
        self._automatic = automatic
        self._require_native_bleu = require_native_bleu
        self._errors = Metrics.counter("evalbeam", "metric_errors")
        self._scored = Metrics.counter("evalbeam", "instances_scored")

    def setup(self):
        freeze_start_up_objects()
        if in_worker_process():
            collect_young_less_often()
        quiet_interrupts()
        self._base = result_base(self._run)
        self._scorers = [
            (plan, plan.build(), plan.name if plan.output_name in self._automatic else None)
            for plan in self._plans
        ]
        # BLEU's path on this worker, said where it is the slow one: counted per instance (evalbeam/bleu_c_path,
        # evalbeam/bleu_python_path), carried to the runs row (bleu_path), and logged once per worker
        self._bleu_path = sentence_bleu.path() if bleu_planned(self._plans) else None
        self._bleu_counter = self._bleu_path and Metrics.counter("evalbeam", f"bleu_{self._bleu_path}_path")
        if self._bleu_path == sentence_bleu.PYTHON_PATH:
            import logging
            import socket

            slow = (f"BLEU runs on its Python path on this worker ({socket.gethostname()}, pid {os.getpid()}): "
                    "the C extension metrics/_bleu13a.c was not built where evalbeam was installed (no C compiler); "
                    "the same scores, about 6x slower")
            if self._require_native_bleu:
                raise SlowBleuRefused(f"require_native_bleu: {slow}")
            logging.getLogger(__name__).warning(slow)

    def process(self, instance: Instance):
        scored = score_instance(self._run, instance, self._scorers, self._base)
        self._scored.inc()
        if self._bleu_path:
            scored.bleu_path = self._bleu_path
            self._bleu_counter.inc()
        errors = sum(r["error"] is not None for r in scored.results)
        if errors:
            self._errors.inc(errors)
        yield scored


class ScoreInstances(beam.PTransform):
    """Instances -> ScoredInstances, one per instance, carrying a result row per metric."""

    def __init__(self, run: RunKey, specs, require_native_bleu: bool = False):
        super().__init__()
        self._run = run
        self._plans = plan_metrics(specs)
        self._automatic = frozenset(p.output_name for p in self._plans[len(specs):])
        self._require_native_bleu = require_native_bleu

    def expand(self, instances):
        return instances | "ScoreMetrics" >> beam.ParDo(ScoreFn(self._run, self._plans, self._automatic,
                                                                self._require_native_bleu))
