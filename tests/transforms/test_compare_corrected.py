"""`evalbeam compare` on human-corrected estimates: CompareRuns on the DirectRunner, two runs that
label a random share of their instances, checked against ppi-python's PPI++ mean on the arrays
(each run's mean, and the paired difference); a slice with too few labels stays the judge's."""
from __future__ import annotations

import datetime as dt

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from scipy import stats

from evalbeam.metrics.statistics.compare import Gate
from evalbeam.pipelines.reports.compare import format_comparison
from evalbeam.transforms.compare import CompareRuns, PairSpec, result_entry

ppi_py = pytest.importorskip("ppi_py")

N = 600


def spec(labelled=frozenset({"quality"}), num_runs=1):
    return PairSpec("base", "cand", dt.date(2026, 11, 27), "eval", {"quality": "higher"}, Gate(), 0.05,
                    dt.datetime(2026, 11, 27, tzinfo=dt.timezone.utc), 1, num_runs, labelled)


def generate(seed: int, shift: float, judge_bias: float):
    """One run: per instance a human value on 1..5 (people's quality of this run's output), the
    judge's score (biased, noisy), labelled on a random half; instances in slice b (every tenth)
    are labelled in neither run past the first few, so b has too few labels."""
    rng = np.random.default_rng(seed)
    human = np.clip(np.round(rng.normal(3 + shift, 1, N)), 1, 5)
    judge = np.clip(np.round(human + judge_bias + rng.normal(0, 0.6, N)), 1, 5)
    labelled = rng.random(N) < 0.5
    labelled[np.arange(N) % 10 == 0] = False
    labelled[[0, 10, 20]] = True
    rows = [{"instance_id": f"i{i}", "metric": "quality", "score": float(judge[i]), "error": None,
             "human_label": float(human[i]) if labelled[i] else None} for i in range(N)]
    return rows, human, judge, labelled


def slices():
    return [(f"i{i}", [f"grp={'b' if i % 10 == 0 else 'a'}"]) for i in range(N)]


def ppi(y, f, fu):
    point = float(ppi_py.ppi_mean_pointestimate(y, f, fu, lam=None)[0])
    low, high = (float(v[0]) for v in ppi_py.ppi_mean_ci(y, f, fu, alpha=0.05, lam=None))
    return point, low, high


def run_compare(base_rows, run_rows, pair_spec, check):
    """CompareRuns in a pipeline; check({slice: row}) asserts on its rows (in the matcher: the
    runner may run it on a copy of this process's objects)."""
    with TestPipeline() as p:
        inputs = {
            "base": p | "B" >> beam.Create([result_entry(r) for r in base_rows]),
            "run": p | "R" >> beam.Create([result_entry(r) for r in run_rows]),
            "base_slices": p | "BS" >> beam.Create(slices()),
            "run_slices": p | "RS" >> beam.Create(slices()),
        }
        assert_that(inputs | CompareRuns(pair_spec), lambda rows: check({r["slice"]: r for r in rows}))


@pytest.mark.slow
def test_corrected_means_and_difference_equal_ppi_pythons():
    base_rows, hb, fb, lb = generate(1, 0.0, 0.8)  # a judge a point kind to the base run
    run_rows, hr, fr, lr = generate(2, 0.3, 0.2)  # people like the new run 0.3 more; the judge less biased
    run_compare(base_rows, run_rows, spec(), lambda rows: check(rows, hb, fb, lb, hr, fr, lr))


def check(rows, hb, fb, lb, hr, fr, lr):
    overall = rows["overall"]
    assert overall["estimate"] == "corrected" and overall["test"] == "ppi++"

    assert (overall["base_mean"], overall["mean"]) == pytest.approx(
        (ppi(hb[lb], fb[lb], fb[~lb])[0], ppi(hr[lr], fr[lr], fr[~lr])[0]), abs=1e-9)
    both = lb & lr
    point, low, high = ppi(hr[both] - hb[both], fr[both] - fb[both], (fr - fb)[~both])
    assert overall["mean_difference"] == pytest.approx(point, abs=1e-9)
    assert (overall["ci_low"], overall["ci_high"]) == pytest.approx((low, high), abs=1e-9)
    z = point / ((high - low) / (2 * stats.norm.ppf(0.975)))
    assert overall["p_value"] == pytest.approx(2 * stats.norm.sf(abs(z)), abs=1e-9)
    assert overall["corrected_labelled"] == int(both.sum())

    # the judge alone sees the run as worse (its bias fell by more than the people's gain); corrected,
    # the difference is the people's +0.3 or so, and its CI says so
    assert overall["judge_mean_difference"] == pytest.approx((fr - fb).mean(), abs=1e-12)
    assert overall["judge_mean_difference"] < 0 < overall["ci_low"]
    assert overall["improvement"] and not overall["regression"]

    # the printed comparison says the rows are corrected, and the gate's line says what it flagged on
    printed = format_comparison(list(rows.values()))
    assert "estimate corrected: both runs have human labels of the metric" in printed
    assert "quality: improvement: human-corrected means " in printed and "(each run's own PPI++); paired corrected " \
        f"difference {overall['mean_difference']:+.4g}" in printed

    b = rows["grp=b"]  # 3 labelled in both runs: too few
    assert b["estimate"] == "scores" and b["test"] in ("wilcoxon", "mcnemar")
    assert b["mean_difference"] == b["judge_mean_difference"] and "fewer than 10" in b["corrected_note"]


@pytest.mark.slow
def test_metrics_one_run_does_not_label_and_repeated_runs_stay_the_judges():
    base_rows, *_ = generate(1, 0.0, 0.8)
    run_rows, *_ = generate(2, 0.3, 0.2)

    def judge_only(rows):
        unlabelled = rows["overall"]
        assert unlabelled["estimate"] == "scores" and unlabelled["corrected_note"] is None
        assert unlabelled["mean_difference"] == unlabelled["judge_mean_difference"]

    run_compare(base_rows, run_rows, spec(labelled=frozenset()), judge_only)
    assert spec(num_runs=3).corrected_metrics == frozenset()
