"""Two runs with repeated runs (inference.num_runs 3) compared through the whole
pipeline: a real inference function that learns its run number is right in the first
`#right` runs of a case, so each case's pass share is known from the script. The
in-run comparison (compare_with) and `evalbeam compare` both pair cases, and every
number matches a direct computation over the cases (NumPy/SciPy)."""
from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
import yaml
from scipy import stats

from evalbeam.metrics.statistics.summary import bootstrap_weights
from tests.helpers import evalbeam, table

NUM_RUNS = 3
# case -> (group, base: runs right (of 3), candidate: runs right, candidate's run that raises or None)
CASES = {f"c{k}": ("g1" if k % 2 else "g2", right, cand, boom) for k, (right, cand, boom) in enumerate([
    (3, 3, None), (3, 1, None), (2, 0, None), (3, 3, 2), (1, 1, None), (3, 0, None), (2, 2, None),
    (3, 2, 3), (0, 0, None), (3, 1, None), (2, 1, 1), (3, 3, None), (1, 0, None), (3, 0, None)])}


def write(tmp, name, candidate, extra):
    data = tmp / f"{name}.jsonl"
    rows = []
    for case, (group, right, cand, boom) in CASES.items():
        prompt = f"question {case} #right={cand if candidate else right}"
        if candidate and boom:
            prompt += f" #boom={boom}"
        rows.append({"id": case, "group": group, "reference": f"answer {case}", "prompt": prompt})
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump({
        "name": "repeats-compare", "run_id": name,
        "input": {"uri": str(data), "id_column": "id", "slice_columns": ["group"]},
        "inference": {"function": "tests.inference_app:right_in_early_runs", "num_runs": NUM_RUNS},
        "metrics": [{"name": "exact_match", "threshold": 1.0}],
        "output": {"parquet": str(tmp / "out")}, **extra}))
    return config


def case_shares(candidate):
    """Each case's pass share over its valid runs, as the script makes them (None: no valid run)."""
    shares = {}
    for case, (group, right, cand, boom) in CASES.items():
        r = cand if candidate else right
        valid = [float(k <= r) for k in range(1, NUM_RUNS + 1) if not (candidate and k == boom)]
        shares[case] = (group, statistics.fmean(valid) if valid else None)
    return shares


def expected(group=None):
    base, cand = case_shares(False), case_shares(True)
    paired = [c for c in CASES if (group is None or CASES[c][0] == group)
              and base[c][1] is not None and cand[c][1] is not None]
    d = np.array([cand[c][1] - base[c][1] for c in paired])
    w = np.stack([bootstrap_weights(c) for c in paired])
    drawn = w.sum(axis=0) > 0
    boot = (w * d[:, None]).sum(axis=0)[drawn] / w.sum(axis=0)[drawn]
    return {"n_paired": len(paired), "mean_difference": pytest.approx(d.mean(), abs=1e-12),
            "ci_low": pytest.approx(np.percentile(boot, 2.5), abs=1e-12),
            "ci_high": pytest.approx(np.percentile(boot, 97.5), abs=1e-12),
            # Wilcoxon on the nonzero differences (Wilcox's zero handling; with so few, SciPy's exact
            # distribution, where SciPy given the zeros too would take its normal approximation)
            "p_value": pytest.approx(stats.wilcoxon(d[d != 0]).pvalue, rel=1e-9), "test": "wilcoxon",
            "wins": int((d > 0).sum()), "ties": int((d == 0).sum()), "losses": int((d < 0).sum()),
            "only_in_base": 0, "only_in_run": 0, "paired_by": "case"}


@pytest.mark.slow
def test_repeated_runs_are_compared_case_with_case(tmp_path):
    out = tmp_path / "out"
    evalbeam("run", write(tmp_path, "base", False, {}))
    result = evalbeam("run", write(tmp_path, "cand", True, {"compare_with": "base"}), check=False)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    results = {(r["instance_id"], r["metric"]): r for r in table(out / "cand", "metric_results")}
    assert results[("c1:run2", "exact_match")]["score"] == 0.0  # the candidate is right in run 1 only
    assert results[("c3:run2", "exact_match")]["error"] is not None
    in_run = {r["slice"]: r for r in table(out / "cand", "comparisons") if r["metric"] == "exact_match"}

    cli = evalbeam("compare", "base", "cand", "--parquet", out, check=False)
    assert cli.returncode in (0, 1), cli.stdout + cli.stderr
    assert "paired by case" in cli.stdout
    everything = table(out / "cand", "comparisons")
    rows = {r["slice"]: r for r in everything if r["metric"] == "exact_match"}
    assert rows.keys() == in_run.keys() == {"overall", "group=g1", "group=g2"}
    for slice_name, row in rows.items():
        want = expected(None if slice_name == "overall" else slice_name.split("=")[1])
        assert {k: row[k] for k in want} == want, slice_name
        assert {k: in_run[slice_name][k] for k in want} == want, slice_name
    # 14 cases, not 42 runs; a case with a failed run is paired on its valid runs: c7 (right in
    # runs 1-3, then in 1-2 with run 3 raising) is a tie, where pairing runs made it a loss
    assert (rows["overall"]["n_paired"], rows["overall"]["error_in_either"]) == (14, 0)
    assert (rows["overall"]["wins"], rows["overall"]["losses"]) == (0, 7)
    # inference's failure metric (lower is better): a case's share of failed runs, 1/3 in c3, c7 and c10
    [failure] = [r for r in everything if r["metric"] == "failure" and r["slice"] == "overall"]
    assert (failure["n_paired"], failure["losses"], failure["direction"]) == (14, 3, "lower")
    assert failure["mean_difference"] == pytest.approx(1 / 14, abs=1e-12)
