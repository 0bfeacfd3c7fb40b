"""Summary statistics per metric and slice, in one fused combine.

As in TensorFlow Model Analysis, each instance is keyed by each slice it falls
in ("overall" and "column=value") and one CombinePerKey accumulates every
metric of that slice together, so the summary is one pass whatever the number
of metrics. The accumulators are of bounded size (metrics.summary.ScoreMoments,
and the scores of at most BOOTSTRAP_BATCH instances waiting to be weighed), so no
worker ever holds a metric's scores.
"""
from __future__ import annotations

import logging
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


# The most slices one column makes: its values past the MAX_SLICE_VALUES largest
# slices are summarized together as <column>=(other) (fold_slices), with a warning.
MAX_SLICE_VALUES = 1000


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

    def instances(self) -> int:
        """The instances added (each has a row for each of its metrics)."""
        return max((m.rows for m in self.moments.values()), default=0)

    def absorb(self, other: "SliceAccumulator") -> "SliceAccumulator":
        """Add another accumulator's counts, sums and waiting instances. The waiting
        ones stay waiting (weighed when a batch is full, or at the end): a slice of a
        few instances never holds bootstrap sums until its summary is made."""
        for metric, moments in other.moments.items():
            mine = self.moments.get(metric)
            self.moments[metric] = moments if mine is None else mine.merge(moments)
        offset = len(self.ids)
        self.ids.extend(other.ids)
        for metric, (rows, scores) in other.pending.items():
            my_rows, my_scores = self.pending.get(metric) or self.pending.setdefault(metric, ([], []))
            my_rows.extend(r + offset for r in rows)
            my_scores.extend(scores)
        if len(self.ids) >= BOOTSTRAP_BATCH:
            self.flush()
        return self

    def flush(self) -> "SliceAccumulator":
        if self.ids:
            weights = bootstrap_weight_matrix(self.ids)
            for metric, (rows, scores) in self.pending.items():
                drawn = weights[rows]
                self.moments[metric].add_bootstrap(np.asarray(scores) @ drawn, drawn.sum(axis=0))
            self.ids, self.pending = [], {}
        return self


class SliceMomentsFn(beam.CombineFn):
    """Accumulator: a SliceAccumulator for one slice; output the same, its last
    instances still waiting to be weighed (fold_slices weighs them): so a slice of
    one instance costs a few hundred bytes, not the bootstrap sums of each metric
    (2 x 200 floats), through the combine and the shuffle after it."""

    def create_accumulator(self):
        return SliceAccumulator()

    def add_input(self, accumulator, values):
        accumulator.add(*values)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = SliceAccumulator()
        for acc in accumulators:
            merged.absorb(acc)
        return merged

    def extract_output(self, accumulator):
        return accumulator


def slice_column(slice_name: str) -> str:
    """The column a slice is of ('' for overall)."""
    return "" if slice_name == OVERALL else slice_name.split("=", 1)[0]


def fold_slices(column_slices, limit: int, accumulator=None):
    """(column, [(slice, SliceAccumulator)]) -> (slice, {metric: ScoreMoments}) for each
    slice kept: every slice of a column with at most `limit` of them; else the `limit`
    largest (most instances; then by name), the others merged (exactly: the
    accumulators are sums) into one <column>=(other) slice, with a warning."""
    column, slices = column_slices
    slices = sorted(slices, key=lambda s: (-s[1].instances(), s[0]))
    if column and len(slices) > limit:
        logging.getLogger(__name__).warning(
            "slice column %r has %d distinct values: the %d largest slices are summarized, the other %d values "
            "together as %s=(other)", column, len(slices), limit, len(slices) - limit, column)
        other = (accumulator or SliceAccumulator)()  # transforms.calibrate folds its own
        for _, acc in slices[limit:]:
            other.absorb(acc)
        slices = slices[:limit] + [(f"{column}=(other)", other)]
    for name, acc in slices:
        yield name, acc.flush().moments


def summary_rows(run: RunKey, thresholds: dict[str, float | None], keyed) -> Iterable[dict[str, Any]]:
    slice_name, per_metric = keyed
    for metric, moments in sorted(per_metric.items()):
        threshold = thresholds.get(metric)
        yield {**run.columns(), "metric": metric, "slice": slice_name, "threshold": threshold,
               **moments.statistics(threshold)}


class SummarizeScores(beam.PTransform):
    """ScoredInstances -> summary rows (one per metric and slice)."""

    def __init__(self, run: RunKey, thresholds: dict[str, float | None], max_slice_values: int = MAX_SLICE_VALUES):
        super().__init__()
        self._run = run
        self._thresholds = thresholds
        self._max_slice_values = max_slice_values

    def expand(self, scored):
        return (
            scored
            | "KeyBySlice" >> beam.FlatMap(slice_keys)
            | "CombineMetrics" >> beam.CombinePerKey(SliceMomentsFn())
            | "ByColumn" >> beam.Map(lambda kv: (slice_column(kv[0]), kv))
            | "SlicesOfColumn" >> beam.GroupByKey()
            | "FoldSlices" >> beam.FlatMap(fold_slices, self._max_slice_values)
            | "SummaryRows" >> beam.FlatMap(lambda kv, run, th: summary_rows(run, th, kv), self._run, self._thresholds)
        )
