"""Failure modes in the pipeline (metrics.failure_modes): every failure of the
configured metrics classified into one mode of a taxonomy, through the one judge
layer, then counted per metric, slice and mode.

    scored instances, failed rubrics
              -> one classification request per failure (a metric that did not
                 pass, a rubric not met, an agent run that failed), keyed by the
                 content hash of what is asked: the same failure asked twice is
                 one call, and judge.cache answers a re-run
              -> judge.AnswerJudgeRequests (quota, retries, dedup, cache,
                 checkpoints, batch mode, accounting)
              -> one failure_assignments row per failure (a judge that failed
                 leaves its error on the row; a mode outside the taxonomy is
                 counted as other, the answer kept)
              -> CombinePerKey per (metric, slice): counts, shares, the share's
                 bootstrap CI, five examples per mode (metrics.failure_modes.ModeCounts,
                 bounded by the number of modes).

The taxonomy comes as a one-element PCollection (a side input): a built-in or a
user's file, or one the judge discovered in this run (transforms.taxonomy).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable

import apache_beam as beam

from evalbeam.metrics.failure_modes import (
    MODE_FIELD,
    Failure,
    ModeCounts,
    Taxonomy,
    assigned_mode,
    classification_prompt,
    classification_schema,
    instance_failure,
    rubric_failure,
)
from evalbeam.metrics.instance import Instance
from evalbeam.metrics.judge.client import JudgeRequest, request_key
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.transforms.judge import AnswerJudgeRequests, UsageFn, cache_row
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.transforms.schema import RunKey, to_json_text
from evalbeam.transforms.score import ScoredInstance
from evalbeam.transforms.summarize import OVERALL

STAGE = "failure_modes"


@dataclasses.dataclass(frozen=True)
class FailureLink:
    """Who asked a classification: an instance's failure, with the instance's slices."""

    instance_id: str
    metric: str
    rubric_id: str | None
    slices: tuple[tuple[str, Any], ...]


def usage_name(metric: str) -> str:
    """The judge_usage entry (and judge_cache metric) of a metric's classifications."""
    return f"{metric}:{STAGE}"


def classification_ask(failure: Failure, instance: Instance, taxonomy: Taxonomy, settings: JudgeSettings):
    prompt = classification_prompt(failure, instance.fields, taxonomy)
    schema_json = json.dumps(classification_schema(taxonomy), sort_keys=True)
    key = request_key(settings, prompt, schema_json, 0)
    request = JudgeRequest(key, usage_name(failure.metric), prompt, schema_json, MODE_FIELD, taxonomy.ids)
    return key, (request, FailureLink(failure.instance_id, failure.metric, failure.rubric_id,
                                      tuple(sorted(instance.slices.items()))))


def instance_asks(scored: ScoredInstance, metrics: frozenset, rubric_metrics: frozenset, settings: JudgeSettings,
                  taxonomy: Taxonomy) -> Iterable:
    """A ScoredInstance (one part of an instance's rows) -> the asks of its failed rows. A
    rubric metric's failures are its failed rubrics (instance_rubric_asks), unless its
    row failed because the agent's run did."""
    for row in scored.results:
        if row["metric"] not in metrics:
            continue
        failure = instance_failure(scored.instance.instance_id, scored.instance.fields, row)
        if failure is None or (row["metric"] in rubric_metrics and row.get("error") is None):
            continue
        yield classification_ask(failure, scored.instance, taxonomy, settings)


def instance_rubric_asks(element, settings: JudgeSettings, taxonomy: Taxonomy) -> Iterable:
    """(instance_id, {instance, rubrics}) -> the asks of the instance's failed rubrics."""
    _, groups = element
    for instance in groups["instance"]:
        for row in groups["rubrics"]:
            failure = rubric_failure(row)
            if failure is not None:
                yield classification_ask(failure, instance, taxonomy, settings)


def assignment_rows(answered, run: RunKey, taxonomy: Taxonomy) -> Iterable[dict[str, Any]]:
    """(response, [FailureLink]) -> one failure_assignments row per failure that asked."""
    response, links = answered
    for link in links:
        row = {**run.columns(), "instance_id": link.instance_id, "metric": link.metric, "rubric_id": link.rubric_id,
               "mode": None, "judge_mode": None, "rationale": None, "error": response.error,
               "taxonomy_digest": taxonomy.digest, "cache_hit": response.cache_hit, **dict(link.slices)}
        if response.error is None:
            row.update(mode=assigned_mode(response.verdict, taxonomy), judge_mode=response.verdict,
                       rationale=response.explanation)
        yield row


def slice_keys(row: dict[str, Any], slice_columns: tuple[str, ...]) -> Iterable:
    """An assignment row -> ((metric, slice), (instance_id, mode)) for overall and each slice."""
    value = (row["instance_id"], row["mode"])
    yield (row["metric"], OVERALL), value
    for column in slice_columns:
        v = row.get(column)
        yield (row["metric"], f"{column}={'(missing)' if v is None else v}"), value


class ModeCountsFn(beam.CombineFn):
    def create_accumulator(self):
        return ModeCounts()

    def add_input(self, acc: ModeCounts, element):
        return acc.add(*element)

    def merge_accumulators(self, accs):
        accs = iter(accs)
        first = next(accs)
        for acc in accs:
            first.merge(acc)
        return first

    def compact(self, acc: ModeCounts):
        acc.flush()
        return acc

    def extract_output(self, acc: ModeCounts):
        return acc


def mode_rows(element, run: RunKey, taxonomy: Taxonomy) -> Iterable[dict[str, Any]]:
    (metric, slice_name), counts = element
    for r in counts.rows(taxonomy):
        yield {**run.columns(), "metric": metric, "slice": slice_name, **r, "examples": to_json_text(r["examples"]),
               "taxonomy_digest": taxonomy.digest}


class CountFailureModes(beam.PTransform):
    """failure_assignments rows -> failure_modes rows (one per metric, slice and mode)."""

    def __init__(self, run: RunKey, slice_columns, taxonomy):
        super().__init__()
        self._run = run
        self._slices = tuple(slice_columns)
        self._taxonomy = taxonomy  # a one-element PCollection

    def expand(self, assignments):
        return (
            assignments
            | "BySlice" >> beam.FlatMap(slice_keys, self._slices)
            | "CountModes" >> beam.CombinePerKey(ModeCountsFn())
            | "ModeRows" >> beam.FlatMap(mode_rows, self._run, taxonomy=beam.pvalue.AsSingleton(self._taxonomy))
        )


class ClassifyFailures(beam.PTransform):
    """(scored ScoredInstances, instances) -> (failure_assignments rows, failure_modes rows,
    judge_cache rows, usage), through the stage's JudgeContext; `taxonomy` a one-element
    PCollection of the Taxonomy; `rubrics` the rubrics table's rows, or None."""

    def __init__(self, run: RunKey, metrics, rubric_metrics, slice_columns, context: JudgeContext, taxonomy,
                 rubrics=None):
        super().__init__()
        self._run = run
        self._metrics = frozenset(metrics)
        self._rubric_metrics = frozenset(rubric_metrics) & self._metrics
        self._slices = tuple(slice_columns)
        self._context = context
        self._taxonomy = taxonomy
        self._rubrics = rubrics

    def expand(self, inputs):
        scored, instances = inputs
        rubrics = self._rubrics
        settings, run = self._context.settings, self._run
        taxonomy = beam.pvalue.AsSingleton(self._taxonomy)
        asks = [scored | "InstanceFailures" >> beam.FlatMap(
            instance_asks, self._metrics, self._rubric_metrics, settings, taxonomy=taxonomy)]
        if self._rubric_metrics and rubrics is not None:
            failed = (rubrics
                      | "FailedRubrics" >> beam.Filter(
                          lambda r, ms: r["metric"] in ms and r.get("verdict") is False, self._rubric_metrics)
                      | "RubricById" >> beam.Map(lambda r: (r["instance_id"], r)))
            by_id = instances | "InstanceById" >> beam.Map(lambda i: (i.instance_id, i))
            asks.append({"instance": by_id, "rubrics": failed}
                        | "JoinRubrics" >> beam.CoGroupByKey()
                        | "RubricFailures" >> beam.FlatMap(instance_rubric_asks, settings, taxonomy=taxonomy))
        all_asks = tuple(asks) | "AllFailures" >> beam.Flatten() if len(asks) > 1 else asks[0]
        answered = all_asks | "Classify" >> AnswerJudgeRequests(self._context)
        assignments = answered | "AssignmentRows" >> beam.FlatMap(assignment_rows, run, taxonomy=taxonomy)
        modes = assignments | "Count" >> CountFailureModes(run, self._slices, self._taxonomy)
        cache_rows = answered | "CacheRows" >> beam.FlatMap(
            lambda a, r, m: [cache_row(r, m, a[0])] if a[0].error is None else [], run, settings.model)
        usage = answered | "Usage" >> beam.CombineGlobally(UsageFn())
        return assignments, modes, cache_rows, usage
