"""Comparing runs with repeated runs (inference.num_runs > 1): cases are paired, not
runs. The comparison (transforms.compare's pairing folded into metrics.statistics.compare's
accumulators, as CompareRuns does, and CompareRuns itself on the DirectRunner) is
checked against a direct NumPy/SciPy computation over generated cases with missing
runs, failed runs, cases whose runs all failed on one side and cases in one run only;
and with one run per case, against the per-instance computation (nothing changes)."""
from __future__ import annotations

import datetime as dt
import random
import statistics

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that
from scipy import stats

from evalbeam.metrics.statistics.compare import Gate, PairedMoments, better_sign, finish
from evalbeam.metrics.statistics.summary import bootstrap_weights
from evalbeam.transforms.compare import CompareRuns, PairSpec, paired_values, result_entry
from evalbeam.metrics.rows.instance import case_id

DIRECTIONS = {"em": "higher", "quality": "higher", "verbosity": "closer_to_zero"}


def spec(base_num_runs, run_num_runs):
    return PairSpec("base", "cand", dt.date(2026, 11, 25), "eval", DIRECTIONS, Gate(), 0.05,
                    dt.datetime(2026, 11, 25, tzinfo=dt.timezone.utc), base_num_runs, run_num_runs)


def generate(seed, cases, num_runs, shift, drop_case=(), fail_all=()):
    """metric_results rows and instances' slices of one run: per case a latent quality
    (shared by its runs: runs of a case are correlated), scores of each run around it;
    some runs missing (no row), some failed (an error), `fail_all` cases failed in every
    run, `drop_case` cases absent."""
    rng = random.Random(seed)
    results, slices = [], []
    for c in range(cases):
        case = f"case{c}"
        if case in drop_case:
            continue
        latent = random.Random(c).random() + shift
        ids = [case] if num_runs == 1 else [f"{case}:run{k}" for k in range(1, num_runs + 1)]
        for instance_id in ids:
            slices.append((instance_id, [f"grp={'a' if c % 3 else 'b'}"]))
            for metric in DIRECTIONS:
                if num_runs > 1 and rng.random() < 0.08:
                    continue  # a missing run
                failed = case in fail_all or rng.random() < 0.07
                if metric == "em":
                    score = float(rng.random() < min(1.0, latent))
                elif metric == "quality":
                    score = round(min(1.0, max(0.0, latent / 1.3 + rng.gauss(0, 0.1))), 2)
                else:
                    score = float(rng.choice([-2, -1, 0, 0, 1, 2]))
                results.append({"instance_id": instance_id, "metric": metric,
                                "score": None if failed else score, "error": "judge failed" if failed else None})
    return results, slices


def fold(base, run, pair_spec, chunks=1):
    """CompareRuns without Beam: key each side (by case when it repeats its runs), group,
    pair, and fold into PairedMoments per (metric, slice) in `chunks` merged parts."""
    def key(side_repeats):
        return case_id if side_repeats else (lambda i: i)

    groups = {}
    for name, (rows, slices), repeats in (("base", base, pair_spec.base_num_runs > 1),
                                          ("run", run, pair_spec.run_num_runs > 1)):
        for instance_id, entry in map(result_entry, rows):
            groups.setdefault(key(repeats)(instance_id), {"base": [], "run": [], "base_slices": [], "run_slices": []}
                              )[name].append(entry)
        for instance_id, names in slices:
            groups.setdefault(key(repeats)(instance_id), {"base": [], "run": [], "base_slices": [], "run_slices": []}
                              )[f"{name}_slices"].append(names)
    parts = [{} for _ in range(chunks)]
    rng = random.Random(1)
    for element in sorted(groups.items()):
        part = rng.choice(parts)
        for (metric, slice_name), (kind, b, r, w, labelled, corrected) in paired_values(element, pair_spec):
            m = part.setdefault((metric, slice_name), PairedMoments(sign=better_sign(pair_spec.direction(metric))))
            m.add(kind, b, r, w)
            if labelled is not None:
                m.add_labelled(*labelled, w)
            if corrected is not None:
                m.add_corrected(*corrected)
    out = {}
    for part in parts:
        for k, m in part.items():
            out[k] = m if k not in out else out[k].merge(m)
    return {k: m.statistics() for k, m in out.items()}


def direct(base, run, base_num_runs, run_num_runs, metric, group=None):
    """The comparison of one metric the long way: each case's mean of its valid runs per
    side (|score| for verbosity), the paired differences over cases, the bootstrap over
    cases (weights seeded by the case id), the counts."""
    def per_case(rows, slices, repeats):
        key = case_id if repeats else (lambda i: i)
        groups = {key(i): names[0].split("=")[1] for i, names in slices}
        scores = {}
        for r in rows:
            if r["metric"] == metric:
                value = None if r["score"] is None else (abs(r["score"]) if metric == "verbosity" else r["score"])
                scores.setdefault(key(r["instance_id"]), []).append(value)
        return {c: v for c, v in scores.items() if group is None or groups[c] == group}

    b, r = per_case(*base, base_num_runs > 1), per_case(*run, run_num_runs > 1)
    both = sorted(b.keys() & r.keys())
    paired = [c for c in both if any(v is not None for v in b[c]) and any(v is not None for v in r[c])]
    # fmean: the correctly rounded mean (equal means must be equal floats: Wilcoxon's ties)
    base_means = np.array([statistics.fmean([v for v in b[c] if v is not None]) for c in paired])
    run_means = np.array([statistics.fmean([v for v in r[c] if v is not None]) for c in paired])
    d = run_means - base_means
    w = np.stack([bootstrap_weights(c) for c in paired])  # cases x replicates
    drawn = w.sum(axis=0) > 0
    boot = (w * d[:, None]).sum(axis=0)[drawn] / w.sum(axis=0)[drawn]
    sign = -1 if metric == "verbosity" else 1
    wins = np.where(sign * d > 0, 1.0, np.where(d == 0, 0.5, 0.0))
    boot_win = (w * wins[:, None]).sum(axis=0)[drawn] / w.sum(axis=0)[drawn]
    binary = set(base_means) | set(run_means) <= {0.0, 1.0}
    if binary:
        n01, n10 = int((d == 1).sum()), int((d == -1).sum())
        test, p = "mcnemar", stats.binomtest(n01, n01 + n10, 0.5).pvalue if n01 + n10 else 1.0
    else:
        test, p = "wilcoxon", stats.wilcoxon(d[d != 0]).pvalue if (d != 0).any() else 1.0  # zeros dropped
    return {
        "n_paired": len(paired), "only_in_base": len(b.keys() - r.keys()), "only_in_run": len(r.keys() - b.keys()),
        "error_in_either": len(both) - len(paired),
        "base_mean": pytest.approx(base_means.mean(), abs=1e-12), "mean": pytest.approx(run_means.mean(), abs=1e-12),
        "mean_difference": pytest.approx(d.mean(), abs=1e-12),
        "ci_low": pytest.approx(np.percentile(boot, 2.5), abs=1e-12),
        "ci_high": pytest.approx(np.percentile(boot, 97.5), abs=1e-12),
        "test": test, "p_value": pytest.approx(p, rel=1e-9),
        "wins": int((sign * d > 0).sum()), "ties": int((d == 0).sum()), "losses": int((sign * d < 0).sum()),
        "win_rate_ci_low": pytest.approx(np.percentile(boot_win, 2.5), abs=1e-12),
        "win_rate_ci_high": pytest.approx(np.percentile(boot_win, 97.5), abs=1e-12),
    }


def check(got, base, run, base_num_runs, run_num_runs):
    for (metric, slice_name), row in got.items():
        want = direct(base, run, base_num_runs, run_num_runs, metric,
                      None if slice_name == "overall" else slice_name.split("=")[1])
        assert {k: row[k] for k in want} == want, (metric, slice_name)


@pytest.mark.parametrize("runs,chunks", [((3, 3), 1), ((3, 3), 4), ((3, 1), 1), ((1, 4), 3)])
def test_repeated_runs_pair_cases_as_the_direct_computation(runs, chunks):
    base_num_runs, run_num_runs = runs
    base = generate(1, 90, base_num_runs, 0.0, drop_case={"case5", "case6"}, fail_all={"case7"})
    run = generate(2, 90, run_num_runs, -0.15, drop_case={"case8"}, fail_all={"case9", "case10"})
    got = fold(base, run, spec(base_num_runs, run_num_runs), chunks)
    assert set(got) == {(m, s) for m in DIRECTIONS for s in ("overall", "grp=a", "grp=b")}
    check(got, base, run, base_num_runs, run_num_runs)
    overall = got[("em", "overall")]
    # cases are counted, not runs: 90 cases, 2 only in base, 1 only in run, 3 all failed on a side
    assert overall["only_in_base"] == 1 and overall["only_in_run"] == 2
    assert overall["n_paired"] + overall["error_in_either"] == 87 and overall["error_in_either"] >= 3
    # the worse run is seen as worse on the pass share
    assert overall["mean_difference"] < 0


def test_one_run_per_case_is_paired_by_instance_as_before():
    """One run on both sides: the statistics of pairing instances, ids kept as they are
    (an id that looks like a run's, `x:run2`, is its own instance when runs are not repeated)."""
    base = generate(3, 120, 1, 0.0, drop_case={"case1"})
    run = generate(4, 120, 1, -0.1, drop_case={"case2"})
    for side in (base, run):
        for rows in side:
            for i, r in enumerate(rows):
                if isinstance(r, dict) and r["instance_id"] in ("case3", "case4"):
                    r["instance_id"] = "x:run" + r["instance_id"][-1]
                elif isinstance(r, tuple) and r[0] in ("case3", "case4"):
                    rows[i] = ("x:run" + r[0][-1], r[1])
    got = fold(base, run, spec(1, 1), chunks=3)
    check(got, base, run, 1, 1)
    # the instances as they are: x:run3 and x:run4 are two instances, each paired
    assert got[("em", "overall")]["n_paired"] + got[("em", "overall")]["error_in_either"] == 118
    # and each instance's values are its own: the per-instance pairing of before, row by row
    b = {(r["instance_id"], r["metric"]): r["score"] for r in base[0]}
    r = {(x["instance_id"], x["metric"]): x["score"] for x in run[0]}
    keys = [k for k in b.keys() & r.keys() if k[1] == "quality" and b[k] is not None and r[k] is not None]
    assert got[("quality", "overall")]["n_paired"] == len(keys)
    assert got[("quality", "overall")]["mean_difference"] == pytest.approx(
        np.mean([r[k] - b[k] for k in keys]), abs=1e-12)


def test_pairing_cases_widens_the_interval_that_pairing_runs_understates():
    """The change differs from case to case and its runs share it: pairing run k with
    run k takes 4 x 60 pairs as independent and gives an interval about half as wide
    as resampling the 60 cases (the runs' correlation ignored)."""
    rng = random.Random(9)
    base_rows, run_rows, slices = [], [], []
    for c in range(60):
        latent, effect = rng.random(), rng.gauss(-0.05, 0.2)
        for k in range(1, 5):
            instance_id = f"case{c}:run{k}"
            slices.append((instance_id, ["grp=a"]))
            base_rows.append({"instance_id": instance_id, "metric": "quality", "score": latent + rng.gauss(0, 0.02),
                              "error": None})
            run_rows.append({"instance_id": instance_id, "metric": "quality",
                             "score": latent + effect + rng.gauss(0, 0.02), "error": None})
    base, run = (base_rows, slices), (run_rows, slices)
    by_case = fold(base, run, spec(4, 4))[("quality", "overall")]
    check(fold(base, run, spec(4, 4)), base, run, 4, 4)
    # the same rows taken as independent instances (what compare did before)
    by_run = fold(base, run, spec(1, 1))[("quality", "overall")]
    assert (by_run["n_paired"], by_case["n_paired"]) == (240, 60)
    assert by_case["ci_high"] - by_case["ci_low"] > 1.5 * (by_run["ci_high"] - by_run["ci_low"])


@pytest.mark.slow
def test_compare_runs_on_beam_matches_the_fold():
    """CompareRuns itself (its keying by case inside Beam) against the fold, a num_runs 3
    run compared with a num_runs 1 base."""
    base = generate(7, 40, 1, 0.0, drop_case={"case3"})
    run = generate(8, 40, 3, -0.1, fail_all={"case4"})
    pair_spec = spec(1, 3)
    want = finish([{"metric": m, "slice": s, "direction": DIRECTIONS[m], **stat}
                   for (m, s), stat in fold(base, run, pair_spec).items()], Gate())
    want = {(w["metric"], w["slice"]): w for w in want}

    def matches(rows):
        assert {(r["metric"], r["slice"]) for r in rows} == set(want)
        for row in rows:
            expected = want[(row["metric"], row["slice"])]
            for column in ("n_paired", "only_in_base", "only_in_run", "error_in_either", "wins", "ties", "losses",
                           "test", "regression", "improvement"):
                assert row[column] == expected[column], column
            for column in ("mean_difference", "ci_low", "ci_high", "p_value", "p_value_adjusted", "win_rate"):
                assert row[column] == pytest.approx(expected[column], abs=1e-12), column
            assert row["paired_by"] == "case"

    with TestPipeline() as p:
        inputs = {
            "base": p | "B" >> beam.Create([result_entry(r) for r in base[0]]),
            "run": p | "R" >> beam.Create([result_entry(r) for r in run[0]]),
            "base_slices": p | "BS" >> beam.Create(base[1]),
            "run_slices": p | "RS" >> beam.Create(run[1]),
        }
        assert_that(inputs | CompareRuns(pair_spec), matches)


def test_agreement_with_labels_is_over_cases_with_their_mean_scores():
    """input.labels with repeated runs: a case's label is its data's, so each run's agreement
    with the people is over the paired labelled cases, a case's score its mean raw score."""
    base = generate(10, 70, 3, 0.0, fail_all={"case2"})
    run = generate(11, 70, 3, 0.1)
    labels = {f"case{c}": float(random.Random(100 + c).randint(0, 4)) / 4 for c in range(70) if c % 7}
    for rows, _ in (base, run):
        for r in rows:
            r["human_label"] = labels.get(case_id(r["instance_id"])) if r["metric"] == "quality" else None
    row = fold(base, run, spec(3, 3))[("quality", "overall")]

    def means(rows):
        scores = {}
        for r in rows:
            if r["metric"] == "quality" and r["score"] is not None:
                scores.setdefault(case_id(r["instance_id"]), []).append(r["score"])
        return {c: statistics.fmean(v) for c, v in scores.items()}

    b, r = means(base[0]), means(run[0])
    labelled = sorted(c for c in b.keys() & r.keys() if c in labels)
    assert row["labelled_paired"] == len(labelled) < row["n_paired"]
    assert row["agreement_statistic"] == "spearman"  # case means are not on a categorical scale
    human = [labels[c] for c in labelled]
    assert row["base_agreement"] == pytest.approx(stats.spearmanr([b[c] for c in labelled], human)[0], abs=1e-9)
    assert row["run_agreement"] == pytest.approx(stats.spearmanr([r[c] for c in labelled], human)[0], abs=1e-9)
