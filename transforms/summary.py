"""Summary statistics per metric and slice, in one fused combine.

As in TensorFlow Model Analysis, each instance is keyed by each slice it falls
in ("overall" and "column=value") and one CombinePerKey accumulates every
metric of that slice together, so the summary is one pass whatever the number
of metrics. With inference.num_runs > 1 the runs of a case are first grouped (a case is
the cluster of the interval and the unit of pass@k: metrics.statistics.summary). The accumulators are of bounded size (metrics.statistics.summary.ScoreMoments,
and the scores of at most BOOTSTRAP_BATCH instances waiting to be weighed), so no
worker ever holds a metric's scores.
"""
from __future__ import annotations

import logging
from math import isfinite
from typing import Any, Iterable

import apache_beam as beam
import numpy as np

from evalbeam.metrics.judge.jury import juror_scores
from evalbeam.metrics.statistics.summary import MAX_SLICE_VALUES, OVERALL, ScoreMoments, bootstrap_weight_matrix
from evalbeam.metrics.rows.instance import case_id
from evalbeam.metrics.rows.tables import RunKey, to_json_text
from evalbeam.transforms.score import ScoredInstance


def one_run_case(scored: ScoredInstance):
    """One run per case: the instance is its own case (cluster)."""
    return scored.instance.instance_id, scored.instance.slices, [scored.results]


def case_of_runs(element):
    """(case id, the ScoredInstances of its runs, one per run and scores part) ->
    (case id, slices, [results of run 1, run 2, ...]): the parts of a run joined."""
    case, parts = element
    runs: dict[str, list] = {}
    slices = {}
    for scored in parts:
        runs.setdefault(scored.instance.instance_id, []).extend(scored.results)
        slices = scored.instance.slices  # the runs of a case are copies of one instance
    return case, slices, [runs[i] for i in sorted(runs)]


def slice_keys(case):
    """(slice, (case id, [results of each run])) for "overall" and each slice the case
    falls in."""
    case_id, slices, runs = case
    values = (case_id, runs)
    yield OVERALL, values
    for column, value in slices.items():
        yield f"{column}={'(missing)' if value is None else value}", values




# Instances whose bootstrap sums wait to be added together (one matrix product a
# metric): about 0.8 MB of weights, whatever the number of metrics.
BOOTSTRAP_BATCH = 512


class _Waiting:
    """One metric's cases waiting to be weighed, as columns: their rows in the accumulator's
    ids (distinct, in order), the sum and count of each one's valid scores and of its
    agreements. While every case waiting has one valid score and no agreement (every case
    of a run without repeated runs or a pairwise judge), counts, agree_sums and agree_counts
    are None, standing for [1, ...], [0.0, ...] and [0, ...]: such a case then costs two
    appends, the summary's cost a row being that of its metrics' rows."""

    __slots__ = ("rows", "sums", "counts", "agree_sums", "agree_counts")

    def __init__(self):
        self.rows: list[int] = []
        self.sums: list[float] = []
        self.counts = self.agree_sums = self.agree_counts = None

    def columns(self) -> "_Waiting":
        """Every column a list."""
        if self.counts is None:
            n = len(self.rows)
            self.counts, self.agree_sums, self.agree_counts = [1] * n, [0.0] * n, [0] * n
        return self

    def append(self, row: int, score_sum: float, count: int, agreement_sum: float, agreements: int) -> None:
        self.columns()
        self.rows.append(row)
        self.sums.append(score_sum)
        self.counts.append(count)
        self.agree_sums.append(agreement_sum)
        self.agree_counts.append(agreements)

    def extend(self, other: "_Waiting", offset: int) -> None:
        """Add another accumulator's, its rows after this one's `offset` cases."""
        if self.counts is not None or other.counts is not None:
            self.columns()
            other.columns()
            self.counts.extend(other.counts)
            self.agree_sums.extend(other.agree_sums)
            self.agree_counts.extend(other.agree_counts)
        self.rows.extend(r + offset for r in other.rows)
        self.sums.extend(other.sums)

    def weigh(self, moments: ScoreMoments, weights: np.ndarray) -> None:
        """Add the bootstrap sums of these cases to moments, weights those of every case waiting."""
        # as many rows as cases waiting is every case (the rows are distinct): no copy of the weights
        drawn = weights if len(self.rows) == len(weights) else weights[self.rows]
        if self.counts is None:  # every row a valid score, no agreement: the lists it stands for
            moments.add_bootstrap(np.asarray(self.sums) @ drawn, np.ones(len(self.rows)) @ drawn)
            return
        if any(self.counts):
            moments.add_bootstrap(np.asarray(self.sums) @ drawn, np.asarray(self.counts, dtype=np.float64) @ drawn)
        if any(self.agree_counts):
            moments.add_agreement_bootstrap(np.asarray(self.agree_sums) @ drawn,
                                            np.asarray(self.agree_counts, dtype=np.float64) @ drawn)


class SliceAccumulator:
    """{metric: ScoreMoments} for one slice; the bootstrap part of the last few
    cases' scores is added a batch at a time (bootstrap_weight_matrix), each case
    (cluster: its runs) weighed by one weight drawn for its id."""

    __slots__ = ("moments", "ids", "pending")

    def __init__(self):
        self.moments: dict[str, ScoreMoments] = {}
        self.ids: list[str] = []  # the cases waiting
        self.pending: dict[str, _Waiting] = {}  # metric -> its cases waiting (those with a valid score or agreement)

    def add(self, case_id: str, runs) -> None:
        """One case: the results of each of its runs, metric_results rows (the accumulator reads
        their metric, score, error and passed; pairwise_choice, position_agreement, threshold
        and jurors where present)."""
        row = len(self.ids)
        self.ids.append(case_id)
        if len(runs) == 1:
            self._add_one_run(row, runs[0])
        else:
            self._add_runs(row, runs)
        if len(self.ids) >= BOOTSTRAP_BATCH:
            self.flush()

    def _waiting(self, metric: str) -> _Waiting:
        waiting = self.pending.get(metric)
        if waiting is None:
            waiting = self.pending[metric] = _Waiting()
        return waiting

    def _add_one_run(self, row: int, results) -> None:
        """A case of one run (every case without repeated runs): each metric has one row."""
        all_moments, pending = self.moments, self.pending
        for result in results:
            metric, score = result["metric"], result["score"]
            moments = all_moments.get(metric)
            if moments is None:
                moments = all_moments[metric] = ScoreMoments()
            choice, agreement, jurors = (result.get("pairwise_choice"), result.get("position_agreement"),
                                         result.get("jurors"))
            if (result["error"] is None and score is not None and isfinite(score) and choice is None
                    and agreement is None and not jurors):
                # the common row, a valid score alone: what the general path below does with it, by
                # one call and _Waiting.append written out (this loop is the summary's cost a row)
                moments.add_single(score, result["passed"], result.get("threshold"))
                waiting = pending.get(metric)
                if waiting is None:
                    waiting = pending[metric] = _Waiting()
                waiting.rows.append(row)
                waiting.sums.append(score)
                if waiting.counts is not None:
                    waiting.counts.append(1)
                    waiting.agree_sums.append(0.0)
                    waiting.agree_counts.append(0)
                continue
            if jurors:
                jury = juror_scores(result)
                if jury:
                    moments.add_jurors(jury)
            valid = moments.add(score, result["error"] is not None, result["passed"], choice,
                                result.get("threshold"))
            if valid:
                moments.add_single_case(score, result["passed"])
            if agreement is not None:
                moments.add_case([], [], [agreement])
            if valid or agreement is not None:
                self._waiting(metric).append(row, score if valid else 0.0, 1 if valid else 0, agreement or 0.0,
                                             0 if agreement is None else 1)

    def _add_runs(self, row: int, runs) -> None:
        per_metric: dict[str, tuple[list, list, list]] = {}
        for results in runs:
            for result in results:
                metric, score, passed = result["metric"], result["score"], result["passed"]
                moments = self.moments.get(metric)
                if moments is None:
                    moments = self.moments[metric] = ScoreMoments()
                # each run of a case is its own unit: the jurors judged each run's response
                jury = juror_scores(result)
                if jury:
                    moments.add_jurors(jury)
                scores, passes, agreements = per_metric.get(metric) or per_metric.setdefault(metric, ([], [], []))
                if moments.add(score, result["error"] is not None, passed, result.get("pairwise_choice"),
                               result.get("threshold")):  # a valid score: to be weighed
                    scores.append(score)
                    passes.append(passed)
                agreement = result.get("position_agreement")
                if agreement is not None:
                    agreements.append(agreement)
        for metric, (scores, passes, agreements) in per_metric.items():
            self.moments[metric].add_case(scores, passes, agreements)
            if scores or agreements:
                self._waiting(metric).append(row, sum(scores), len(scores), sum(agreements), len(agreements))

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
        for metric, waiting in other.pending.items():
            self._waiting(metric).extend(waiting, offset)
        if len(self.ids) >= BOOTSTRAP_BATCH:
            self.flush()
        return self

    def flush(self) -> "SliceAccumulator":
        if self.ids:
            weights = bootstrap_weight_matrix(self.ids)
            for metric, waiting in self.pending.items():
                waiting.weigh(self.moments[metric], weights)
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
            "slice column %r has %s values, more than input.max_slice_values (%s): the %s largest are summarized "
            "one slice each, the other %s as one slice, %s=(other)", column, f"{len(slices):,}", f"{limit:,}",
            f"{limit:,}", f"{len(slices) - limit:,}", column)
        other = (accumulator or SliceAccumulator)()  # transforms.calibration folds its own
        for _, acc in slices[limit:]:
            other.absorb(acc)
        slices = slices[:limit] + [(f"{column}=(other)", other)]
    for name, acc in slices:
        yield name, acc.flush().moments


def summary_rows(run: RunKey, thresholds: dict[str, float | None], keyed, num_runs: int = 1) -> Iterable[dict[str, Any]]:
    slice_name, per_metric = keyed
    for metric, moments in sorted(per_metric.items()):
        threshold = thresholds.get(metric)
        stats = moments.statistics(threshold, num_runs)
        for curve in ("pass_at_k", "pass_all_k"):
            stats[curve] = to_json_text(stats[curve])
        # the rows' own threshold where they carry one (an ADK case's file's), all alike; null when they differ
        yield {**run.columns(), "metric": metric, "slice": slice_name, "threshold": moments.row_threshold(threshold),
               **stats}


class SummarizeScores(beam.PTransform):
    """ScoredInstances -> summary rows (one per metric and slice)."""

    def __init__(self, run: RunKey, thresholds: dict[str, float | None], max_slice_values: int = MAX_SLICE_VALUES,
                 num_runs: int = 1):
        super().__init__()
        self._run = run
        self._thresholds = thresholds
        self._max_slice_values = max_slice_values
        self._num_runs = num_runs

    def expand(self, scored):
        if self._num_runs > 1:
            # the runs of a case together (at most num_runs instances, each with its parts):
            # the case is the cluster of the interval and the unit of pass@k
            keyed = (scored
                     | "ByCase" >> beam.Map(lambda s: (case_id(s.instance.instance_id), s))
                     | "RunsOfCase" >> beam.GroupByKey()
                     | "CaseResults" >> beam.Map(case_of_runs)
                     | "KeyBySlice" >> beam.FlatMap(slice_keys))
        else:
            # each instance its own case, keyed by its slices in one step (a step costs some 0.44 us
            # an element: docs/performance.md)
            keyed = scored | "KeyBySlice" >> beam.FlatMap(lambda s: slice_keys(one_run_case(s)))
        return (
            keyed
            | "CombineMetrics" >> beam.CombinePerKey(SliceMomentsFn())
            | "ByColumn" >> beam.Map(lambda kv: (slice_column(kv[0]), kv))
            | "SlicesOfColumn" >> beam.GroupByKey()
            | "FoldSlices" >> beam.FlatMap(fold_slices, self._max_slice_values)
            | "SummaryRows" >> beam.FlatMap(lambda kv, run, th, n: summary_rows(run, th, kv, n), self._run,
                                                   self._thresholds, self._num_runs)
        )
