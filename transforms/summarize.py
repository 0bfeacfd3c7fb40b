"""Summary statistics per metric and slice, in one fused combine.

As in TensorFlow Model Analysis, each instance is keyed by each slice it falls
in ("overall" and "column=value") and one CombinePerKey accumulates every
metric of that slice together, so the summary is one pass whatever the number
of metrics. The accumulators are constant-size (metrics.summary.ScoreMoments),
so no worker ever holds a metric's scores.
"""
from __future__ import annotations

from typing import Any, Iterable

import apache_beam as beam

from metrics.summary import ScoreMoments, bootstrap_weights
from transforms.schema import RunKey
from transforms.score import ScoredInstance

OVERALL = "overall"


def slice_keys(scored: ScoredInstance):
    """(slice, (bootstrap weights, [(metric, score, is_error, passed, pairwise choice), ...])) for
    "overall" and each slice the instance falls in."""
    values = (
        bootstrap_weights(scored.instance.instance_id),
        [(r["metric"], r["score"], r["error"] is not None, r["passed"], r.get("pairwise_choice")) for r in scored.results],
    )
    yield OVERALL, values
    for column, value in scored.instance.slices.items():
        yield f"{column}={'(missing)' if value is None else value}", values


class SliceMomentsFn(beam.CombineFn):
    """Accumulator: {metric: ScoreMoments} for one slice."""

    def create_accumulator(self):
        return {}

    def add_input(self, accumulator, values):
        weights, results = values
        for metric, score, error, passed, choice in results:
            moments = accumulator.get(metric)
            if moments is None:
                moments = accumulator[metric] = ScoreMoments()
            moments.add(score, error, passed, weights, choice)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged: dict[str, ScoreMoments] = {}
        for acc in accumulators:
            for metric, moments in acc.items():
                merged[metric] = merged[metric].merge(moments) if metric in merged else moments
        return merged

    def extract_output(self, accumulator):
        return accumulator


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
