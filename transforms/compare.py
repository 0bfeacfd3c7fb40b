"""Paired comparison of two runs as a Beam pipeline (metrics.statistics.compare does the statistics).

    base results, run results, instances' slices
      -> one CoGroupByKey by instance_id (by case when either run repeated its
         cases, inference.num_runs > 1: see below): each instance's metrics paired
      -> ((metric, slice), paired value) for "overall" and the instance's slices
      -> one CombinePerKey of constant-size accumulators (plus a Counter of the
         distinct paired differences, for the Wilcoxon test)
      -> comparison rows, Holm-adjusted and flagged together (they are few: one
         per metric and slice).

Used by `evalbeam compare` (both runs read back from Parquet or BigQuery) and by
`evalbeam run` with `compare_with` (this run's scores straight from the pipeline).

Repeated runs: when either run ran its cases several times (num_runs > 1, instance
ids `<case>:run<k>`), the unit of the comparison is the case, as in the summary.
The instances of a run with num_runs > 1 are keyed by their case (transforms.inference
case_id; a run with one run per case keeps its ids, so a case of a num_runs 3 run
pairs with the same case of a num_runs 1 run). Per metric, a case's value on each
side is the mean of the compared values (metrics.statistics.compare.compared_value) of its
valid runs (for a 0/1 metric: the share of its runs that passed); a case with no
valid run on a side, all its runs failed, counts in error_in_either. The paired
difference, its bootstrap (weights seeded by the case id: cases are resampled, not
runs), the wins and the test are then over cases, and n_paired counts cases. With
one run per case on both sides nothing differs from pairing instances.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
from typing import Any, Iterable

import apache_beam as beam

from evalbeam.metrics.statistics.compare import (ERROR, ONLY_BASE, ONLY_RUN, PAIRED, RUN_ERROR, Gate, PairedMoments,
                                                 better_sign, compared_value, finish)
from evalbeam.metrics.statistics.summary import bootstrap_weights
from evalbeam.metrics.rows.instance import case_id
from evalbeam.transforms.summary import OVERALL


def result_entry(row: dict[str, Any]) -> tuple[str, tuple[str, float | None, bool, float | None]]:
    """A metric_results row -> (instance_id, (metric, score, failed, human label or None))."""
    score = row.get("score")
    failed = row.get("error") is not None or score is None
    return row["instance_id"], (row["metric"], None if failed else float(score), failed, row.get("human_label"))


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
    gate: Gate
    alpha: float
    compared_at: dt.datetime
    base_num_runs: int = 1  # inference.num_runs of each run: > 1 on either side pairs cases
    run_num_runs: int = 1
    # input.labels: the metrics both runs label, compared on human-corrected estimates (metrics.statistics.compare)
    labelled_metrics: frozenset[str] = frozenset()

    @property
    def corrected_metrics(self) -> frozenset[str]:
        """The metrics compared on corrected estimates: both runs label them, one run per case
        (with repeated runs a case's runs are not independent draws, as PPI++'s CI assumes)."""
        return frozenset() if self.by_case else self.labelled_metrics

    def direction(self, metric: str) -> str:
        return self.directions.get(metric, "higher")

    @property
    def by_case(self) -> bool:
        return self.base_num_runs > 1 or self.run_num_runs > 1

    @property
    def paired_by(self) -> str:
        return "case" if self.by_case else "instance"


def _side(entries) -> dict[str, list[float | None]]:
    """One side's entries of an instance (or of a case's runs) -> {metric: [score or None per row]}."""
    out: dict[str, list[float | None]] = {}
    for metric, score, _, _ in entries:
        out.setdefault(metric, []).append(score)
    return out


def _case_value(scores: list[float | None], direction: str) -> float | None:
    """A case's value on one side: the mean of its valid runs' compared values (None: none valid).
    One run: that run's value itself (fsum of one float over 1 is the float)."""
    valid = [compared_value(s, direction) for s in scores if s is not None]
    return math.fsum(valid) / len(valid) if valid else None


def paired_values(element, spec: PairSpec):
    """(instance_id or case id, {base, run, run_slices, base_slices}) -> ((metric, slice), (kind, base, run,
    weights, (base score, run score, human value) of a labelled metric, else None, (base, run, base's human
    value, run's) of a metric compared on corrected estimates, else None)). With repeated runs
    the key is a case and each side holds the entries of its runs: see the module doc."""
    key, groups = element
    base = _side(groups["base"])
    run = _side(groups["run"])
    # input.labels: the human value of a labelled metric, from either run (the same data's labels)
    human = {entry[0]: entry[3] for entry in [*groups["base"], *groups["run"]] if entry[3] is not None}
    # each run's own (for the corrected estimates: two runs' outputs, each labelled)
    base_human = {entry[0]: entry[3] for entry in groups["base"] if entry[3] is not None}
    run_human = {entry[0]: entry[3] for entry in groups["run"] if entry[3] is not None}
    corrected_metrics = spec.corrected_metrics
    slices = next(iter(groups["run_slices"]), None)
    if slices is None:
        slices = next(iter(groups["base_slices"]), [])
    weights = None
    for metric in sorted(base.keys() | run.keys()):
        direction = spec.direction(metric)
        if metric not in run:
            value = (ONLY_BASE, None, None, None, None, None)
        elif metric not in base:
            value = (ONLY_RUN, None, None, None, None, None)
        else:
            base_value, run_value = _case_value(base[metric], direction), _case_value(run[metric], direction)
            if run_value is None:  # lost tonight, whatever the base had
                value = (RUN_ERROR, None, None, None, None, None)
            elif base_value is None:
                value = (ERROR, None, None, None, None, None)
            else:
                if weights is None:
                    weights = bootstrap_weights(key)
                labelled = None
                if metric in human:
                    # agreement on raw scores: a case's mean raw score on each side
                    labelled = (_case_value(base[metric], "higher"), _case_value(run[metric], "higher"), human[metric])
                corrected = None
                if metric in corrected_metrics:
                    hb, hr = base_human.get(metric), run_human.get(metric)
                    corrected = (base_value, run_value, None if hb is None else compared_value(hb, direction),
                                 None if hr is None else compared_value(hr, direction))
                value = (PAIRED, base_value, run_value, weights, labelled, corrected)
        yield (metric, OVERALL), value
        for name in slices:
            yield (metric, name), value


def _by_case(pcoll, label: str):
    """(instance_id, v) -> (its case's id, v)."""
    return pcoll | label >> beam.Map(lambda kv: (case_id(kv[0]), kv[1]))


class _MomentsFn(beam.CombineFn):
    """Paired values of one (metric, slice) -> PairedMoments. The direction's sign
    is applied in the accumulator; it is per metric, so it rides with the value."""

    def create_accumulator(self):
        return None

    def add_input(self, acc, value):
        sign, (kind, base, run, weights, labelled, corrected) = value
        if acc is None:
            acc = PairedMoments(sign=sign)
        acc.add(kind, base, run, weights)
        if labelled is not None:
            acc.add_labelled(*labelled, weights)
        if corrected is not None:
            acc.add_corrected(*corrected)
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
        **moments.statistics(), "compared_at": spec.compared_at, "paired_by": spec.paired_by,
    }


class CompareRuns(beam.PTransform):
    """{base, run: (instance_id, (metric, score, failed)); run_slices, base_slices: (instance_id, [slice])}
    -> comparisons rows (metrics.rows.tables TABLES["comparisons"])."""

    def __init__(self, spec: PairSpec):
        super().__init__()
        self._spec = spec

    def expand(self, inputs: dict):
        spec = self._spec
        if spec.by_case:
            # the side(s) with repeated runs keyed by case (a side with one run per case keeps
            # its ids, even one that happens to end in `:run<k>`)
            repeated = {"base": spec.base_num_runs > 1, "base_slices": spec.base_num_runs > 1,
                        "run": spec.run_num_runs > 1, "run_slices": spec.run_num_runs > 1}
            inputs = {name: _by_case(pcoll, f"ByCase_{name}") if repeated[name] else pcoll
                      for name, pcoll in inputs.items()}
        return (
            inputs
            | "ByInstance" >> beam.CoGroupByKey()
            | "Pair" >> beam.FlatMap(paired_values, spec)
            | "Sign" >> beam.Map(lambda kv, s: (kv[0], (better_sign(s.direction(kv[0][0])), kv[1])), spec)
            | "PerMetricAndSlice" >> beam.CombinePerKey(_MomentsFn())
            | "Rows" >> beam.Map(comparison_row, spec)
            | "Together" >> beam.combiners.ToList()
            | "AdjustAndFlag" >> beam.FlatMap(lambda rows, s: finish(rows, s.gate, s.alpha), spec)
        )
