"""Summary statistics per metric and slice, in one fused combine.

As in TensorFlow Model Analysis, each instance is keyed by each slice it falls
in ("overall" and "column=value") and one CombinePerKey accumulates every
metric of that slice together, so the summary is one pass whatever the number
of metrics. The accumulators are of bounded size (metrics.summary.ScoreMoments,
and the scores of at most BOOTSTRAP_BATCH instances waiting to be weighed), so no
worker ever holds a metric's scores.
"""
from __future__ import annotations

from typing import Any, Iterable

import apache_beam as beam
import numpy as np

from evalbeam.metrics.summary import ScoreMoments, bootstrap_weight_matrix
from evalbeam.transforms.schema import RunKey
from evalbeam.transforms.score import ScoredInstance

OVERALL = "overall"


def slice_keys(scored: ScoredInstance):
    """(slice, (instance id, [(metric, score, is_error, passed, pairwise choice), ...])) for
    "overall" and each slice the instance falls in."""
    values = (
        scored.instance.instance_id,
        [(r["metric"], r["score"], r["error"] is not None, r["passed"], r.get("pairwise_choice")) for r in scored.results],
    )
    yield OVERALL, values
    for column, value in scored.instance.slices.items():
        yield f"{column}={'(missing)' if value is None else value}", values


# Instances whose bootstrap sums wait to be added together (one matrix product a
# metric): about 0.8 MB of weights, whatever the number of metrics.
BOOTSTRAP_BATCH = 512


class SliceAccumulator:
    """{metric: ScoreMoments} for one slice; the bootstrap part of the last few
    instances' scores is added a batch at a time (bootstrap_weight_matrix)."""

    __slots__ = ("moments", "ids", "pending")

    def __init__(self):
        self.moments: dict[str, ScoreMoments] = {}
        self.ids: list[str] = []  # the instances waiting
        self.pending: dict[str, tuple[list[int], list[float]]] = {}  # metric -> (their rows in ids, valid scores)

    def add(self, instance_id: str, results) -> None:
        row = len(self.ids)
        self.ids.append(instance_id)
        for metric, score, error, passed, choice in results:
            moments = self.moments.get(metric)
            if moments is None:
                moments = self.moments[metric] = ScoreMoments()
            if moments.add(score, error, passed, choice):  # a valid score: to be weighed
                rows, scores = self.pending.get(metric) or self.pending.setdefault(metric, ([], []))
                rows.append(row)
                scores.append(score)
        if len(self.ids) >= BOOTSTRAP_BATCH:
            self.flush()

    def flush(self) -> "SliceAccumulator":
        if self.ids:
            weights = bootstrap_weight_matrix(self.ids)
            for metric, (rows, scores) in self.pending.items():
                drawn = weights[rows]
                self.moments[metric].add_bootstrap(np.asarray(scores) @ drawn, drawn.sum(axis=0))
            self.ids, self.pending = [], {}
        return self


class SliceMomentsFn(beam.CombineFn):
    """Accumulator: a SliceAccumulator for one slice; output {metric: ScoreMoments}."""

    def create_accumulator(self):
        return SliceAccumulator()

    def add_input(self, accumulator, values):
        accumulator.add(*values)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = SliceAccumulator()
        for acc in accumulators:
            for metric, moments in acc.flush().moments.items():
                merged.moments[metric] = merged.moments[metric].merge(moments) if metric in merged.moments else moments
        return merged

    def compact(self, accumulator):
        return accumulator.flush()

    def extract_output(self, accumulator):
        return accumulator.flush().moments


def summary_rows(run: RunKey, thresholds: dict[str, float | None], keyed) -> Iterable[dict[str, Any]]:
    slice_name, per_metric = keyed
    for metric, moments in sorted(per_metric.items()):
        threshold = thresholds.get(metric)
        yield {**run.columns(), "metric": metric, "slice": slice_name, "threshold": threshold,
               **moments.statistics(threshold)}


class SummarizeScores(beam.PTransform):
    """ScoredInstances -> summary rows (one per metric and slice)."""

    def __init__(self, run: RunKey, thresholds: dict[str, float | None]):
        super().__init__()
        self._run = run
        self._thresholds = thresholds

    def expand(self, scored):
        return (
            scored
            | "KeyBySlice" >> beam.FlatMap(slice_keys)
            | "CombineMetrics" >> beam.CombinePerKey(SliceMomentsFn())
            | "SummaryRows" >> beam.FlatMap(lambda kv, run, th: summary_rows(run, th, kv), self._run, self._thresholds)
        )
