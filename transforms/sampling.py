"""input.sample: a seeded, stable sample of the cases, the same for every input kind.

A case is in or out by its identity alone: `case_hash(seed, id)` reads the first 8 bytes of
SHA-256 of the seed and the case's instance id (metrics.rows.instance.instance_id_of: its id
column, its ADK or trace id, or the hash of its case_identity) as a number in [0, 1). So a case
that recurs (a dataset's row, a conversation id seen again) is in every night or in none, whatever
else the input holds, and two runs of one sample pair their cases.

- `rate: r`: a case is in when its hash is below r. Decided record by record: nothing is held.
- `per_slice: N`: the N cases of smallest hash of each slice (the combination of the input's
  slice columns' values; the whole input without any).
- judge.max_calls B (with `{seed}` alone): the cases of smallest hash whose judgments, counted as
  the run would ask them (metric, juror, sample: metrics.judge.asks.judge_requests; a rubric metric's
  generation and its validations per unit), fit in B. The rate is the hash below which they lie.

The last two need every case's hash before any case is let through: the cases wait, on a
distributed runner in its shuffle (a side input), on the local runner on disk (transforms.spill,
since the local runner would hold them in memory), while a combine finds the threshold.

Records are sampled before they become instances, so a run's counts still reconcile: records
read are those sampled (and those that are no case: a record with no id is never left out, so its
dead letter is not lost); the lines of those left out are skipped lines; the runs row's `sample`
says how many cases there were and how many were evaluated, and the summary's rows their slice's
population beside the sample's estimates.
"""
from __future__ import annotations

import bisect
import hashlib
import heapq
import json
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from evalbeam.metrics.rows.instance import RowSpec, build_instance, slice_value
from evalbeam.metrics.statistics.summary import OVERALL
from evalbeam.transforms.records import Record, SourceLines
from evalbeam.transforms.spill import SpillGroupByKey, spill_folder
from evalbeam.transforms.validate import record_id


def case_hash(seed: int, case: str) -> float:
    """The case's place in [0, 1) for this seed."""
    digest = hashlib.sha256(f"{seed}\x00{case}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def summary_slices(record: Record, spec: RowSpec) -> list[str]:
    """The summary's slices a record's case falls in: overall and column=value (transforms.summary.slice_keys)."""
    out = [OVERALL]
    for column in spec.slice_columns:
        value = slice_value(record.data.get(column))
        out.append(f"{column}={'(missing)' if value is None else value}")
    return out


def _stratum(record: Record, spec: RowSpec) -> str:
    """per_slice's slice: the combination of the slice columns' values."""
    return json.dumps([slice_value(record.data.get(c)) for c in spec.slice_columns])


class Judgments:
    """A case's judgments, as the run would ask them (for a judge budget)."""

    def __init__(self, judge_specs, rubric_specs, settings):
        self._judge_specs, self._rubric_specs, self._settings = judge_specs, rubric_specs, settings
        self._ready = False

    def _setup(self):
        # what plans the judging, imported where a budget is counted
        from evalbeam.metrics.judge.asks import Unasked, judge_requests, plan_judges
        from evalbeam.transforms.rubrics import plan_rubric_metrics, plan_units

        self._requests, self._units, self._unasked = judge_requests, plan_units, Unasked
        self._plans = plan_judges(self._judge_specs, self._settings)
        self._rubrics = plan_rubric_metrics(self._rubric_specs)
        self._ready = True

    def of(self, record: Record, spec: RowSpec) -> int:
        if not self._ready:
            self._setup()
        try:
            instance = build_instance(record.data, spec, record.source, record.from_csv, record.line_count)
        except Exception:  # noqa: BLE001 - a record that is no instance asks nothing (it is dead-lettered later)
            return 0
        count = sum(1 for asked in self._requests(instance, self._plans, self._settings, self._settings.sampling_count)
                    if not isinstance(asked, self._unasked))  # what cannot be asked is no call
        for plan in self._rubrics:
            if plan.output_name not in instance.missing_inputs:
                count += 1 + len(self._units(instance, plan.template)) * plan.template.samples(self._settings.sampling_count)
        return count


def _with_case(record: Record, spec: RowSpec) -> tuple[str | None, Record]:
    """(the id of the record's case, None where it is no case, the record)."""
    return record_id(record, spec), record


class _KeyFn(beam.DoFn):
    """(case, record) -> (per_slice's slice, (its case's hash, its judgments)) for a record that is a case."""

    def __init__(self, spec: RowSpec, seed: int, judgments: Judgments | None):
        self._spec, self._seed, self._judgments = spec, seed, judgments

    def process(self, item):
        case, record = item
        if case is None:
            return
        n = self._judgments.of(record, self._spec) if self._judgments is not None else 0
        yield _stratum(record, self._spec), (case_hash(self._seed, case), n)


class BudgetFn(beam.CombineFn):
    """(hash, judgments) of every case -> the hash threshold: the cases of smallest hash whose judgments
    fit in the budget are at or below it (1.0: all fit).

    The accumulator is [kept, total, cut]: the cases seen that fit, sorted (the longest run of the
    smallest hashes seen whose judgments sum to at most the budget), their judgments, and the hash of
    the first case seen that does not fit (None: none yet). A case at or past `cut` can never be in
    (a smaller one already does not fit), whichever worker sees it: merging keeps the smallest cut."""

    def __init__(self, budget: int):
        self._budget = budget

    def create_accumulator(self):
        return [[], 0, None]

    def _shrink(self, accumulator):
        kept, total, cut = accumulator
        while total > self._budget:
            u, n = kept.pop()
            total -= n
            cut = u if cut is None else min(cut, u)
        return [kept, total, cut]

    def add_input(self, accumulator, item):
        kept, total, cut = accumulator
        if cut is not None and item[0] >= cut:
            return accumulator
        bisect.insort(kept, tuple(item))
        return self._shrink([kept, total + item[1], cut])

    def merge_accumulators(self, accumulators):
        accumulators = list(accumulators)
        cuts = [a[2] for a in accumulators if a[2] is not None]
        cut = min(cuts) if cuts else None
        kept, total = [], 0
        for u, n in heapq.merge(*(a[0] for a in accumulators)):
            if cut is not None and u >= cut:
                break
            if total + n > self._budget:
                cut = u
                break
            kept.append((u, n))
            total += n
        return [kept, total, cut]

    def extract_output(self, accumulator):
        kept, _, cut = accumulator
        return 1.0 if cut is None else (kept[-1][0] if kept else 0.0)


def _per_slice_threshold(kv):
    """(slice, its n smallest hashes) -> (slice, the largest of them): per_slice's threshold."""
    stratum, smallest = kv
    return stratum, max(smallest)


class _DecideFn(beam.DoFn):
    """(case, record) -> the record when its case is in the sample (or it is no case); a SourceLines
    of its lines, skipped (tag 'lines'), when left out."""

    def __init__(self, spec: RowSpec, sample):
        self._spec, self._sample = spec, sample
        self._in = Metrics.counter("evalbeam", "sample_cases_in")
        self._out = Metrics.counter("evalbeam", "sample_cases_out")

    def process(self, item, thresholds=None):
        case, record = item
        if case is None:
            yield record
            return
        u = case_hash(self._sample.seed, case)
        if self._sample.rate is not None:
            keep = u < self._sample.rate
        elif self._sample.per_slice is not None:
            keep = u <= thresholds[_stratum(record, self._spec)]
        else:
            keep = u <= thresholds["budget"]
        if keep:
            self._in.inc()
            yield beam.pvalue.TaggedOutput("cases", 1)
            yield record
        else:
            self._out.inc()
            yield beam.pvalue.TaggedOutput("lines", SourceLines(record.origin, 0, record.line_count))


def _account(_, sample, population: int, sampled: int, thresholds: dict, budget: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"seed": sample.seed, "population": population, "sampled": sampled}
    if sample.rate is not None:
        out["rate"] = sample.rate
    elif sample.per_slice is not None:
        out["per_slice"] = sample.per_slice
    else:
        out["max_calls"] = budget
        out["rate"] = thresholds.get("budget", 1.0)
    return out


class SampleRecords(beam.PTransform):
    """Records -> (the records of the sampled cases and those that are no case, SourceLines of the
    lines left out, the sample's account {seed, rate | per_slice | max_calls and the rate it picked,
    population, sampled} (one element), and (summary slice, cases in it) of the population).

    spill: a local run's scratch folder: the records wait for a threshold on disk there (per_slice,
    a budget); None: in the runner's shuffle."""

    def __init__(self, sample, spec: RowSpec, judgments: Judgments | None = None, budget: int | None = None,
                 spill: str | None = None):
        super().__init__()
        self._sample, self._spec, self._judgments, self._budget, self._spill = sample, spec, judgments, budget, spill

    def expand(self, records):
        sample, spec = self._sample, self._spec
        pipeline = records.pipeline
        ided = records | "CaseIds" >> beam.Map(_with_case, spec)
        population = (ided
                      | "PopulationSlices" >> beam.FlatMap(
                          lambda item, s: summary_slices(item[1], s) if item[0] is not None else [], spec)
                      | "OneEach" >> beam.Map(lambda name: (name, 1))
                      | "PopulationCounts" >> beam.CombinePerKey(sum))
        if sample.rate is not None:
            thresholds = pipeline | "NoThresholds" >> beam.Create([])
            decided = ided | "Decide" >> beam.ParDo(_DecideFn(spec, sample)).with_outputs("lines", "cases",
                                                                                         main="records")
        else:
            cases = ided | "Cases" >> beam.ParDo(_KeyFn(spec, sample.seed, self._judgments if self._budget else None))
            if sample.per_slice is not None:
                thresholds = (cases
                              | "Hashes" >> beam.Map(lambda kv: (kv[0], kv[1][0]))
                              | "PerSlice" >> beam.combiners.Top.SmallestPerKey(sample.per_slice)
                              | "Threshold" >> beam.Map(_per_slice_threshold))
            else:
                thresholds = (cases
                              | "Costs" >> beam.Values()
                              | "Budget" >> beam.CombineGlobally(BudgetFn(self._budget))
                              | "Keyed" >> beam.Map(lambda t: ("budget", t)))
            waiting = ided
            if self._spill is not None:  # the records wait on disk, not in the local runner's memory
                waiting = (ided
                           | "ByPlace" >> beam.Map(lambda item: ((item[1].origin, item[1].line), item))
                           | "Wait" >> SpillGroupByKey(spill_folder(self._spill, "sample"))
                           | "Waited" >> beam.FlatMap(lambda kv: kv[1]))
            decided = waiting | "Decide" >> beam.ParDo(
                _DecideFn(spec, sample), beam.pvalue.AsDict(thresholds)).with_outputs("lines", "cases", main="records")
        total = population | "Total" >> beam.Filter(lambda kv: kv[0] == OVERALL) | "TotalCount" >> beam.Values()
        sampled = decided.cases | "SampledCount" >> beam.CombineGlobally(sum)
        side = beam.pvalue.AsSingleton
        account = pipeline | "Once" >> beam.Create([None]) | "Account" >> beam.Map(
            _account, sample, side(total, default_value=0), side(sampled), beam.pvalue.AsDict(thresholds),
            self._budget)
        return decided.records, decided.lines, account, population
