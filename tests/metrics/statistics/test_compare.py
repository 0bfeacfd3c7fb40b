"""Paired run comparison: the statistics against SciPy and numpy computed
independently from the raw scores (`evalbeam compare` and `compare_with` through the
real command: tests/e2e/test_compare.py)."""
import random

import numpy as np
import pytest
from scipy import stats

from evalbeam.metrics.statistics.compare import (Gate, PairedMoments, Tolerance, better_sign, detectable_difference,
                                                 mcnemar_p,
                                                 explain, finish, holm, paired_needed, parse_tolerance)
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
        f"{r['ci_high']:.4g}] lies below 0 (no tolerance) and p (Holm over 1 test) {r['p_value_adjusted']:.4g} < "
        "alpha 0.05")
    assert explain(rows["latency_in_seconds"]).startswith(
        "latency_in_seconds: not flagged: the gate does not watch it (would be a REGRESSION: mean 2 -> 2.00021 "
        "(+0.00021, lower is better); 95% CI [")
    assert explain(rows["latency_in_seconds"]).endswith("name it in compare_watch or --watch to gate on it")

    # watched, with a tolerance of 1% of the base mean (0.02 s): the 0.2 ms is within it
    gate = Gate(Tolerance(0.01), (("latency_in_seconds", parse_tolerance("1%")),), frozenset({"latency_in_seconds",
                                                                                              "rouge_1"}))
    rows = {r["metric"]: r for r in finish([dict(latency), dict(score)], gate)}
    assert rows["latency_in_seconds"]["watched"] and not rows["latency_in_seconds"]["regression"]
    assert rows["latency_in_seconds"]["tolerance"] == pytest.approx(0.02)
    assert rows["latency_in_seconds"]["tolerance_relative"] == pytest.approx(0.01)
    low, high = rows["latency_in_seconds"]["ci_low"], rows["latency_in_seconds"]["ci_high"]
    assert explain(rows["latency_in_seconds"]) == (
        f"latency_in_seconds: not flagged: within tolerance: 95% CI [{low:.4g}, {high:.4g}] lies within +-0.02")
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


def row_of(pairs, metric, slice_name="overall", direction="higher"):
    return {**moments(pairs, direction).statistics(), "metric": metric, "slice": slice_name, "direction": direction}


def test_the_gate_is_the_watched_metrics_overall_rows_and_slices_gate_only_when_named():
    """Issue 42: Holm over every metric x slice (20 tests) could flag nothing at n = 20. The gate's family
    is the watched metrics' overall rows; slice rows are adjusted among themselves and never flagged, unless
    their column is named (Gate.slices), when they join the family."""
    rng = random.Random(5)
    worse = [(f"i{k}", 1.0, 0.3 if k < 8 else 1.0) for k in range(20)]  # 8 of 20 answers gone wrong
    same = [(f"i{k}", s, s) for k in range(20) for s in [round(rng.random(), 2)]]
    rows = [row_of(worse, "response_match_score"), row_of(same, "rouge_1"), row_of(same, "bleu")]
    for metric, pairs in (("response_match_score", worse), ("rouge_1", same), ("bleu", same)):
        for g in "abcd":
            rows.append(row_of([p for k, p in enumerate(pairs) if "abcd"[k % 4] == g], metric, f"dataset={g}"))
    p = rows[0]["p_value"]
    assert p == pytest.approx(stats.wilcoxon([-0.7] * 8).pvalue)

    out = {(r["metric"], r["slice"]): r for r in finish([dict(r) for r in rows], Gate())}
    gated = [k for k, r in out.items() if r["gated"]]
    assert sorted(gated) == [("bleu", "overall"), ("response_match_score", "overall"), ("rouge_1", "overall")]
    top = out[("response_match_score", "overall")]
    assert top["family_size"] == 3 and top["p_value_adjusted"] == pytest.approx(3 * p) and top["regression"]
    # over all 15 rows it would be 15 * p > 0.05: no flag
    assert 15 * p > 0.05
    assert out[("response_match_score", "dataset=a")]["family_size"] == 12
    assert not any(r["regression"] for k, r in out.items() if k[1] != "overall")
    assert out[("response_match_score", "dataset=a")]["gate_reason"].startswith(
        "not flagged: slice rows gate only when their column is named")

    named = {(r["metric"], r["slice"]): r for r in finish([dict(r) for r in rows], Gate(slices=frozenset({"dataset"})))}
    assert all(r["gated"] and r["family_size"] == 15 for r in named.values())
    assert named[("response_match_score", "overall")]["p_value_adjusted"] == pytest.approx(15 * p)
    assert not named[("response_match_score", "overall")]["regression"]
    assert "p (Holm over 15 tests)" in named[("response_match_score", "overall")]["gate_reason"]


def test_every_gated_row_says_why_it_is_not_flagged():
    gate = Gate(per_metric=(("tol", Tolerance(0.5)),))
    spans = [(f"i{k}", 0.5, 0.5 + (0.1 if k % 2 else -0.1)) for k in range(40)]
    inside = [(f"i{k}", 0.5, 0.6 + (k % 3) / 100) for k in range(40)]  # +0.1, well within T 0.5
    weak = [(f"i{k}", 0.5, 0.5 + (0.1 if k % 4 else -0.02)) for k in range(6)]  # a CI off 0 on 6 pairs, p large
    rows = {r["metric"]: r for r in finish([row_of(spans, "spans"), row_of(inside, "tol"), row_of(weak, "weak"),
                                            row_of([("i0", 0.5, 0.7)], "one"),
                                            {**row_of([], "none"), "only_in_base": 3}], gate)}
    assert rows["spans"]["gate_reason"].startswith(f"not flagged: 95% CI [{rows['spans']['ci_low']:.4g}, ")
    assert "spans 0" in rows["spans"]["gate_reason"]
    assert rows["tol"]["gate_reason"].startswith("not flagged: within tolerance: 95% CI [")
    assert rows["tol"]["gate_reason"].endswith("lies within +-0.5")
    weak_row = rows["weak"]
    assert weak_row["ci_low"] > 0 and weak_row["p_value_adjusted"] >= 0.05
    assert weak_row["gate_reason"] == (f"not flagged: p (Holm over 4 tests) {weak_row['p_value_adjusted']:.4g} "
                                       ">= alpha 0.05")
    assert rows["one"]["gate_reason"] == "not flagged: 1 paired instance give no CI"
    assert rows["none"]["gate_reason"] == ("not flagged: no instance is paired (3 only in base, 0 only in run, 0 with "
                                           "an error in either)")
    assert all(r["gated"] for r in rows.values())


def test_detectable_difference_is_the_change_a_z_test_finds_80_percent_of_the_time():
    """The power line against its definition: at the detectable difference d, a two-sided z-test at
    alpha / family (Bonferroni, Holm's strictest step) rejects with probability 0.8; paired_needed is its
    inverse (the smallest n whose detectable difference is at most the change)."""
    for sd, n, family, t in ((0.4, 20, 3, 0.0), (1.3, 500, 12, 0.1), (0.05, 7, 1, 0.0)):
        d = detectable_difference(sd, n, 0.05, family, t)
        z = (d - t) * n ** 0.5 / sd
        assert stats.norm.sf(stats.norm.isf(0.05 / (2 * family)) - z) == pytest.approx(0.8, abs=1e-9)
        needed = paired_needed(d, sd, 0.05, family, t)
        assert needed in (n, n + 1)  # ceil of the same float
        assert detectable_difference(sd, needed, 0.05, family, t) <= d + 1e-12
        assert detectable_difference(sd, needed - 1, 0.05, family, t) > d - 1e-12
    assert detectable_difference(0.0, 20, 0.05, 3) is None and detectable_difference(None, 20, 0.05, 3) is None
    assert paired_needed(0.05, 0.4, 0.05, 3, tolerance=0.1) is None


def test_the_lost_instances_are_counted_apart_from_the_bases_own_errors():
    m = PairedMoments()
    for kind in ("paired", "error", "run_error", "run_error", "only_base", "only_run"):
        m.add(kind, 1.0, 1.0, None) if kind == "paired" else m.add(kind)
    s = m.statistics()
    assert (s["error_in_either"], s["error_in_run"], s["only_in_base"], s["only_in_run"]) == (3, 2, 1, 1)
    merged = m.merge(m).statistics()
    assert (merged["error_in_either"], merged["error_in_run"]) == (6, 4)


def test_the_one_mcnemar_is_the_exact_two_sided_binomial_sum_either_way_round():
    """The metrics', failure modes' and attacks' comparisons share mcnemar_p: against the exact sum of
    binomial terms no more likely than the observed split (at 1/2, twice the smaller tail, at most 1)."""
    import math

    assert mcnemar_p(0, 0) is None
    for one_way in range(0, 30):
        for other_way in range(0, 30):
            n = one_way + other_way
            if not n:
                continue
            tail = sum(math.comb(n, i) for i in range(min(one_way, other_way) + 1)) / 2 ** n
            assert mcnemar_p(one_way, other_way) == pytest.approx(min(1.0, 2 * tail), rel=1e-9, abs=1e-15)
            assert mcnemar_p(one_way, other_way) == mcnemar_p(other_way, one_way)
    assert mcnemar_p(8, 0) == pytest.approx(2 / 2 ** 8)
