"""Comparing runs made with inference.num_runs > 1 (transforms.compare.CompareRuns): the runs of a case
are one pair, its mean over its valid runs, so a repeated run pairs with a single run case by case, and
two repeated runs pair n cases, not n x num_runs rows treated as independent (which would understate
the p-value and the CI). Checked against scipy's Wilcoxon on the per-case means."""
from __future__ import annotations

import datetime as dt
import random
import statistics

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from evalbeam.transforms.compare import CompareRuns, PairSpec


COLLECTED: list = []  # rows out of the pipeline (the DirectRunner runs in this process)


def collect(row):
    COLLECTED.append(row)


def compare(base_scores, run_scores, base_runs, run_runs):
    spec = PairSpec("base", "new", dt.date(2026, 11, 25), "e", {}, 0.0, 0.05, dt.datetime(2026, 11, 25),
                    base_num_runs=base_runs, run_num_runs=run_runs)
    COLLECTED.clear()
    with TestPipeline() as p:
        inputs = {
            "base": p | "B" >> beam.Create([(i, ("m", s, s is None)) for i, s in base_scores]),
            "run": p | "R" >> beam.Create([(i, ("m", s, s is None)) for i, s in run_scores]),
            "base_slices": p | "BS" >> beam.Create([]),
            "run_slices": p | "RS" >> beam.Create([]),
        }
        _ = inputs | CompareRuns(spec) | beam.Map(collect)
    return {r["slice"]: r for r in COLLECTED}


def runs_of(case, scores):
    return [(f"{case}:run{k}", s) for k, s in enumerate(scores, 1)]


def test_a_repeated_run_pairs_with_a_single_run_case_by_case():
    from scipy.stats import wilcoxon

    rng = random.Random(7)
    cases = [f"c{i}" for i in range(12)]
    base = {c: round(rng.random(), 3) for c in cases}
    runs = {c: [round(rng.random(), 3) for _ in range(3)] for c in cases}
    runs["c0"][1] = None  # an errored run: the case's mean is over its two valid runs
    row = compare(list(base.items()), [x for c in cases for x in runs_of(c, runs[c])], 1, 3)["overall"]
    means = {c: statistics.fmean(s for s in runs[c] if s is not None) for c in cases}
    diffs = [means[c] - base[c] for c in cases]
    assert row["n_paired"] == len(cases) and row["only_in_base"] == row["only_in_run"] == 0
    assert row["mean_difference"] == pytest.approx(statistics.fmean(diffs), rel=1e-9)
    assert row["p_value"] == pytest.approx(wilcoxon([means[c] for c in cases], [base[c] for c in cases]).pvalue,
                                           rel=1e-6)


def test_two_repeated_runs_pair_cases_not_rows():
    rng = random.Random(3)
    cases = [f"c{i}" for i in range(10)]
    base = {c: [round(rng.random(), 3) for _ in range(4)] for c in cases}
    new = {c: [round(rng.random(), 3) for _ in range(4)] for c in cases}
    new["c1"] = [None] * 4  # every run errored: the case is an error, not a pair
    row = compare([x for c in cases for x in runs_of(c, base[c])], [x for c in cases for x in runs_of(c, new[c])],
                  4, 4)["overall"]
    assert row["n_paired"] == 9 and row["error_in_either"] == 1
    paired = [c for c in cases if c != "c1"]
    assert row["mean_difference"] == pytest.approx(
        statistics.fmean(statistics.fmean(new[c]) - statistics.fmean(base[c]) for c in paired), rel=1e-9)


def test_single_runs_are_paired_by_id_as_before_even_when_ids_end_in_run_k():
    row = compare([("q:run1", 0.5), ("q:run2", 0.25)], [("q:run1", 1.0), ("q:run2", 0.5)], 1, 1)["overall"]
    assert row["n_paired"] == 2
