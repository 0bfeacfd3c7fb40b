"""Agreement of metrics with human labels (input.labels) per metric and slice, in one
fused combine, as the summary is (transforms.summary): each scored instance is keyed
by each slice it falls in, and one CombinePerKey accumulates every labelled metric of
that slice (metrics.statistics.calibration.CalibrationMoments, bounded: see its docstring), the
bootstrap weights of at most BOOTSTRAP_BATCH instances waiting to be added a batch at a
time. Slices past MAX_SLICE_VALUES of a column are folded into <column>=(other)."""
from __future__ import annotations

from typing import Any, Iterable

import apache_beam as beam

from evalbeam.metrics.statistics.calibration import CalibrationMoments, human_value
from evalbeam.metrics.statistics.summary import bootstrap_weight_matrix
from evalbeam.metrics.rows.instance import case_id
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.transforms.score import ScoredInstance
from evalbeam.metrics.statistics.summary import MAX_SLICE_VALUES
from evalbeam.transforms.summary import BOOTSTRAP_BATCH, OVERALL, fold_slices, slice_column


def labelled_results(scored: ScoredInstance) -> list[dict[str, Any]]:
    """An instance's metric_results rows, each labelled metric's with its human_label."""
    labels = scored.instance.labels
    if not labels:
        return scored.results
    return [{**r, "human_label": human_value(labels[r["metric"]])} if r["metric"] in labels else r
            for r in scored.results]


def label_keys(scored: ScoredInstance, num_runs: int = 1):
    """(slice, (instance id, [(metric, score or None, labels, refused labels' reasons), ...])) for
    "overall" and each slice the instance falls in, for the labelled metrics among this
    ScoredInstance's results. An instance comes in several parts (scores/computed, scores/judge,
    scores/rubric: pipelines.stages), each with its own metrics' rows: each metric is counted
    from the part holding its row, once. With repeated runs (num_runs > 1) each run is an
    instance, weighed in the bootstrap by its case's id, as the summary weighs it: the interval
    resamples cases, not runs."""
    instance = scored.instance
    if not instance.labels:
        return
    entries = [(r["metric"], None if r["error"] is not None else r["score"], instance.labels[r["metric"]],
                instance.label_errors.get(r["metric"], ())) for r in scored.results if r["metric"] in instance.labels]
    if not entries:
        return
    values = (case_id(instance.instance_id) if num_runs > 1 else instance.instance_id, entries)
    yield OVERALL, values
    for column, value in instance.slices.items():
        yield f"{column}={'(missing)' if value is None else value}", values


class SliceCalibration:
    """{metric: CalibrationMoments} for one slice; the bootstrap weights of the last few
    paired instances are added a batch at a time (bootstrap_weight_matrix). The same
    interface as transforms.summary.SliceAccumulator, so fold_slices folds either."""

    __slots__ = ("moments", "ids", "pending", "thresholds")

    def __init__(self, thresholds: dict[str, float | None] | None = None):
        self.moments: dict[str, CalibrationMoments] = {}
        self.thresholds = thresholds or {}
        self.ids: list[str] = []
        self.pending: dict[str, list[tuple[int, tuple[float, float]]]] = {}  # metric -> (row in ids, cell)

    def add(self, instance_id: str, entries) -> None:
        row = len(self.ids)
        self.ids.append(instance_id)
        for metric, score, labels, refused in entries:
            moments = self.moments.get(metric)
            if moments is None:
                moments = self.moments[metric] = CalibrationMoments()
            if moments.add(score, labels, refused, self.thresholds.get(metric)):
                self.pending.setdefault(metric, []).append((row, (score, human_value(labels))))
        if len(self.ids) >= BOOTSTRAP_BATCH:
            self.flush()

    def instances(self) -> int:
        return max((m.n + m.unlabelled + m.unscored for m in self.moments.values()), default=0)

    def absorb(self, other: "SliceCalibration") -> "SliceCalibration":
        for metric, moments in other.moments.items():
            mine = self.moments.get(metric)
            self.moments[metric] = moments if mine is None else mine.merge(moments)
        offset = len(self.ids)
        self.ids.extend(other.ids)
        for metric, cells in other.pending.items():
            self.pending.setdefault(metric, []).extend((row + offset, cell) for row, cell in cells)
        self.thresholds = self.thresholds or other.thresholds
        if len(self.ids) >= BOOTSTRAP_BATCH:
            self.flush()
        return self

    def flush(self) -> "SliceCalibration":
        if self.ids:
            weights = bootstrap_weight_matrix(self.ids)
            for metric, cells in self.pending.items():
                rows_of: dict[tuple[float, float], list[int]] = {}
                for row, cell in cells:
                    rows_of.setdefault(cell, []).append(row)
                agreement = self.moments[metric].agreement
                for cell, rows in rows_of.items():
                    agreement.add_weights(cell, weights[rows].sum(axis=0))
            self.ids, self.pending = [], {}
        return self


class SliceCalibrationFn(beam.CombineFn):
    def __init__(self, thresholds: dict[str, float | None]):
        self._thresholds = thresholds

    def create_accumulator(self):
        return SliceCalibration(self._thresholds)

    def add_input(self, accumulator, values):
        accumulator.add(*values)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = SliceCalibration(self._thresholds)
        for acc in accumulators:
            merged.absorb(acc)
        return merged

    def extract_output(self, accumulator):
        return accumulator


def calibration_rows(run: RunKey, thresholds: dict[str, float | None], keyed,
                     repeated: bool = False) -> Iterable[dict[str, Any]]:
    slice_name, per_metric = keyed
    for metric, moments in sorted(per_metric.items()):
        yield {**run.columns(), "metric": metric, "slice": slice_name,
               **moments.statistics(thresholds.get(metric), repeated)}


class CalibrateScores(beam.PTransform):
    """ScoredInstances (with input.labels) -> calibration rows (one per labelled metric and slice):
    agreement with the labels and the human-corrected estimate of the metric's mean."""

    def __init__(self, run: RunKey, thresholds: dict[str, float | None], max_slice_values: int = MAX_SLICE_VALUES,
                 num_runs: int = 1):
        super().__init__()
        self._run = run
        self._thresholds = thresholds
        self._max_slice_values = max_slice_values
        self._num_runs = num_runs

    def expand(self, scored):
        return (
            scored
            | "KeyBySlice" >> beam.FlatMap(label_keys, self._num_runs)
            | "CombineMetrics" >> beam.CombinePerKey(SliceCalibrationFn(self._thresholds))
            | "ByColumn" >> beam.Map(lambda kv: (slice_column(kv[0]), kv))
            | "SlicesOfColumn" >> beam.GroupByKey()
            | "FoldSlices" >> beam.FlatMap(fold_slices, self._max_slice_values, SliceCalibration)
            | "CalibrationRows" >> beam.FlatMap(lambda kv, run, th, rep: calibration_rows(run, th, kv, rep),
                                                self._run, self._thresholds, self._num_runs > 1)
        )
