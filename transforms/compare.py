"""Paired comparison of two runs as a Beam pipeline (metrics.compare does the statistics).

    base results, run results, instances' slices
      -> one CoGroupByKey by instance_id: each instance's metrics paired
      -> ((metric, slice), paired value) for "overall" and the instance's slices
      -> one CombinePerKey of constant-size accumulators (plus a Counter of the
         distinct paired differences, for the Wilcoxon test)
      -> comparison rows, Holm-adjusted and flagged together (they are few: one
         per metric and slice).

Used by `evalbeam compare` (both runs read back from Parquet or BigQuery) and by
`evalbeam run` with `compare_with` (this run's scores straight from the pipeline).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Iterable

import apache_beam as beam

from evalbeam.metrics.compare import ERROR, ONLY_BASE, ONLY_RUN, PAIRED, PairedMoments, better_sign, compared_value, finish
from evalbeam.metrics.summary import bootstrap_weights
from evalbeam.transforms.summarize import OVERALL


def result_entry(row: dict[str, Any]) -> tuple[str, tuple[str, float | None, bool]]:
    """A metric_results row -> (instance_id, (metric, score, failed))."""
    score = row.get("score")
    failed = row.get("error") is not None or score is None
    return row["instance_id"], (row["metric"], None if failed else float(score), failed)


def slice_names(row: dict[str, Any], slice_columns: Iterable[str]) -> tuple[str, list[str]]:
    """An instances row -> (instance_id, its slices as in the summary: 'column=value')."""
    return row["instance_id"], [f"{c}={'(missing)' if row.get(c) is None else row.get(c)}" for c in slice_columns]


@dataclasses.dataclass(frozen=True)
class PairSpec:
    """What one comparison is: the two runs, and how each metric is read."""

    base_run_id: str
    run_id: str
    run_date: dt.date
    name: str | None
    directions: dict[str, str]
    tolerance: float
    alpha: float
    compared_at: dt.datetime

    def direction(self, metric: str) -> str:
        return self.directions.get(metric, "higher")


def paired_values(element, spec: PairSpec):
    """(instance_id, {base, run, run_slices, base_slices}) -> ((metric, slice), (kind, base, run, weights))."""
    instance_id, groups = element
    base = {m: s for m, s, _ in groups["base"]}
    run = {m: s for m, s, _ in groups["run"]}
    slices = next(iter(groups["run_slices"]), None)
    if slices is None:
        slices = next(iter(groups["base_slices"]), [])
    weights = None
    for metric in sorted(base.keys() | run.keys()):
        if metric not in run:
            value = (ONLY_BASE, None, None, None)
        elif metric not in base:
            value = (ONLY_RUN, None, None, None)
        elif base[metric] is None or run[metric] is None:
            value = (ERROR, None, None, None)
        else:
            if weights is None:
                weights = bootstrap_weights(instance_id)
            direction = spec.direction(metric)
            value = (PAIRED, compared_value(base[metric], direction), compared_value(run[metric], direction), weights)
        yield (metric, OVERALL), value
        for name in slices:
            yield (metric, name), value


class _MomentsFn(beam.CombineFn):
    """Paired values of one (metric, slice) -> PairedMoments. The direction's sign
    is applied in the accumulator; it is per metric, so it rides with the value."""

    def create_accumulator(self):
        return None

    def add_input(self, acc, value):
        sign, (kind, base, run, weights) = value
        if acc is None:
            acc = PairedMoments(sign=sign)
        acc.add(kind, base, run, weights)
        return acc

    def merge_accumulators(self, accumulators):
        merged = None
        for acc in accumulators:
            if acc is not None:
                merged = acc if merged is None else merged.merge(acc)
        return merged

    def extract_output(self, acc):
        return acc


def comparison_row(keyed, spec: PairSpec) -> dict[str, Any]:
    (metric, slice_name), moments = keyed
    return {
        "base_run_id": spec.base_run_id, "run_id": spec.run_id, "run_date": spec.run_date, "name": spec.name,
        "metric": metric, "slice": slice_name, "direction": spec.direction(metric),
        **moments.statistics(), "compared_at": spec.compared_at,
    }


class CompareRuns(beam.PTransform):
    """{base, run: (instance_id, (metric, score, failed)); run_slices, base_slices: (instance_id, [slice])}
    -> comparisons rows (transforms.schema TABLES["comparisons"])."""

    def __init__(self, spec: PairSpec):
        super().__init__()
        self._spec = spec

    def expand(self, inputs: dict):
        spec = self._spec
        return (
            inputs
            | "ByInstance" >> beam.CoGroupByKey()
            | "Pair" >> beam.FlatMap(paired_values, spec)
            | "Sign" >> beam.Map(lambda kv, s: (kv[0], (better_sign(s.direction(kv[0][0])), kv[1])), spec)
            | "PerMetricAndSlice" >> beam.CombinePerKey(_MomentsFn())
            | "Rows" >> beam.Map(comparison_row, spec)
            | "Together" >> beam.combiners.ToList()
            | "AdjustAndFlag" >> beam.FlatMap(lambda rows, s: finish(rows, s.tolerance, s.alpha), spec)
        )
