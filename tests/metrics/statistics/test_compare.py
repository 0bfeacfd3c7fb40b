"""Paired run comparison: the statistics against SciPy and numpy computed
independently from the raw scores (`evalbeam compare` and `compare_with` through the
real command: tests/e2e/test_compare.py)."""
import random

import numpy as np
import pytest
from scipy import stats

from evalbeam.metrics.statistics.compare import Gate, PairedMoments, Tolerance, better_sign, explain, finish, holm, parse_tolerance
from evalbeam.metrics.statistics.summary import bootstrap_weights


def moments(pairs, direction="higher", chunks=1, seed=0):
    """PairedMoments over (instance_id, base, run) pairs, built in `chunks` parts and merged."""
    parts = [PairedMoments(sign=better_sign(direction)) for _ in range(chunks)]
    rng = random.Random(seed)
    for instance_id, base, run in pairs:
        rng.choice(parts).add("paired", base, run, bootstrap_weights(instance_id))
    out = parts[0]
    for p in parts[1:]:
        out = out.merge(p)
    return out


def independent(pairs):
    """The same statistics straight from the arrays."""
    base = np.array([b for _, b, _ in pairs])
    run = np.array([r for _, _, r in pairs])
    d = run - base
    w = np.stack([bootstrap_weights(i) for i, _, _ in pairs])  # instances x replicates
    drawn = w.sum(axis=0) > 0
    boot = (w * d[:, None]).sum(axis=0)[drawn] / w.sum(axis=0)[drawn]
    return d, np.percentile(boot, [2.5, 97.5])


@pytest.mark.parametrize("chunks", [1, 7])
def test_binary_scores_use_the_exact_mcnemar_test(chunks):
    rng = random.Random(3)
    pairs = [(f"i{k}", float(rng.random() < 0.8), float(rng.random() < 0.65)) for k in range(400)]
    s = moments(pairs, chunks=chunks).statistics()
    d, ci = independent(pairs)
    b, c = int((d == -1).sum()), int((d == 1).sum())
    assert s["test"] == "mcnemar"
    assert s["p_value"] == pytest.approx(stats.binomtest(c, b + c, 0.5).pvalue, rel=1e-12)
    assert s["p_value"] < 0.01  # 0.8 -> 0.65 on 400 pairs is real
    assert s["mean_difference"] == pytest.approx(d.mean(), abs=1e-12)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx(tuple(ci), abs=1e-12)
    assert (s["wins"], s["ties"], s["losses"]) == (c, int((d == 0).sum()), b)


@pytest.mark.parametrize("chunks", [1, 5])
def test_continuous_scores_use_wilcoxon(chunks):
    rng = random.Random(4)
    pairs = []
    for k in range(250):
        base = round(rng.random(), 2)
        pairs.append((f"i{k}", base, base if k % 5 == 0 else round(min(1.0, base + rng.gauss(0.03, 0.1)), 2)))
    s = moments(pairs, chunks=chunks).statistics()
    d, ci = independent(pairs)
    assert s["test"] == "wilcoxon"
    assert s["p_value"] == pytest.approx(stats.wilcoxon(d).pvalue, rel=1e-9)  # zeros dropped, as SciPy's default
    assert (s["ci_low"], s["ci_high"]) == pytest.approx(tuple(ci), abs=1e-12)
    assert s["win_rate"] == pytest.approx(((d > 0).sum() + (d == 0).sum() / 2) / len(d))


def test_direction_decides_wins_and_flags():
    pairs = [(f"i{k}", 1.0, 2.0 + (k % 3) / 10) for k in range(60)]  # run is larger everywhere
    higher = moments(pairs, "higher").statistics()
    lower = moments(pairs, "lower").statistics()
    assert (higher["wins"], higher["losses"]) == (60, 0)
    assert (lower["wins"], lower["losses"]) == (0, 60)
    rows = finish([{**higher, "metric": "m", "slice": "overall", "direction": "higher"},
                   {**lower, "metric": "latency", "slice": "overall", "direction": "lower"}], Gate(Tolerance(0.5)))
    by = {r["metric"]: r for r in rows}
    assert by["m"]["improvement"] and not by["m"]["regression"]
    assert by["latency"]["regression"] and not by["latency"]["improvement"]
    # a tolerance wider than the change: nothing flagged
    rows = finish([{**higher, "metric": "m", "slice": "overall", "direction": "higher"}], Gate(Tolerance(1.5)))
    assert not rows[0]["improvement"]


def test_tolerances_per_metric_absolute_or_relative_and_the_watched_metrics():
    """Issue 32, item 1: a 0.2 ms latency change flagged a REGRESSION under one absolute
    tolerance for every metric. Each metric has its own T (absolute, or relative to the base
    mean); the automatic latency_in_seconds and failure are flagged only when watched; each
    decision is explained in one line."""
    slower = [(f"i{k}", 2.0, 2.0002 + (k % 3) / 1e5) for k in range(60)]  # +0.0002 s everywhere
    worse = [(f"i{k}", 0.8, 0.7 - (k % 3) / 100) for k in range(60)]  # a score 0.1 lower
    latency = {**moments(slower, "lower").statistics(), "metric": "latency_in_seconds", "slice": "overall",
               "direction": "lower"}
    score = {**moments(worse).statistics(), "metric": "rouge_1", "slice": "overall", "direction": "higher"}

    rows = {r["metric"]: r for r in finish([dict(latency), dict(score)], Gate())}
    assert rows["rouge_1"]["regression"] and rows["rouge_1"]["watched"]
    assert not rows["latency_in_seconds"]["regression"] and not rows["latency_in_seconds"]["watched"]
    # Holm's family is the watched rows: rouge_1's p-value is adjusted over one test, not two
    assert rows["rouge_1"]["p_value_adjusted"] == pytest.approx(rows["rouge_1"]["p_value"])
    r = rows["rouge_1"]
    assert explain(r) == (
        f"rouge_1: REGRESSION: mean 0.8 -> 0.69 (-0.11, higher is better); 95% CI [{r['ci_low']:.4g}, "
        f"{r['ci_high']:.4g}] lies below 0 (no tolerance) and p (Holm) {r['p_value_adjusted']:.4g} < alpha 0.05")
    assert explain(rows["latency_in_seconds"]).startswith(
        "latency_in_seconds: not flagged, the gate does not watch it (would be a REGRESSION: mean 2 -> 2.00021 (+0.00021, "
        "lower is better); 95% CI [")
    assert explain(rows["latency_in_seconds"]).endswith("name it in compare_watch or --watch to gate on it")

    # watched, with a tolerance of 1% of the base mean (0.02 s): the 0.2 ms is within it
    gate = Gate(Tolerance(0.01), (("latency_in_seconds", parse_tolerance("1%")),), frozenset({"latency_in_seconds",
                                                                                              "rouge_1"}))
    rows = {r["metric"]: r for r in finish([dict(latency), dict(score)], gate)}
    assert rows["latency_in_seconds"]["watched"] and not rows["latency_in_seconds"]["regression"]
    assert rows["latency_in_seconds"]["tolerance"] == pytest.approx(0.02)
    assert rows["latency_in_seconds"]["tolerance_relative"] == pytest.approx(0.01)
    assert explain(rows["latency_in_seconds"]) is None
    assert rows["rouge_1"]["regression"] and rows["rouge_1"]["tolerance"] == 0.01
    # a relative tolerance below the change flags it, and says what T it used
    gate = Gate(per_metric=(("latency_in_seconds", parse_tolerance("0.001%")),), watched=frozenset({"latency_in_seconds"}))
    rows = {r["metric"]: r for r in finish([dict(latency), dict(score)], gate)}
    assert rows["latency_in_seconds"]["regression"] and not rows["rouge_1"]["regression"]
    assert "lies above +2e-05 (the tolerance, 0.001% of the base mean 2)" in explain(rows["latency_in_seconds"])


@pytest.mark.parametrize("given, want", [(0.01, Tolerance(0.01)), ("0.5", Tolerance(0.5)), ("10%", Tolerance(0.1, True)),
                                         (0, Tolerance(0.0)), (" 2.5 % ", Tolerance(0.025, True))])
def test_parse_tolerance(given, want):
    assert parse_tolerance(given) == want


@pytest.mark.parametrize("given", [-0.1, "ten%", "-5%", True, None, "nan", float("inf")])
def test_parse_tolerance_refuses_what_is_not_one(given):
    with pytest.raises(ValueError, match="is not a tolerance: give a number >= 0 .absolute, in the metric's units. or "
                                         "'N%' .relative to the base run's mean."):
        parse_tolerance(given)


def test_holm_adjustment():
    adjusted = holm([0.01, 0.04, 0.03, 0.005, None])
    assert adjusted[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02]) and adjusted[4] is None
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
