"""`evalbeam compare` and a run's `compare_with` through the real command: the regressed slice flagged
against SciPy's tests on the runs' own Parquet scores, the gate's exit codes, and BigQuery's views."""
import json
import random

import pytest
import yaml
from scipy import stats

from tests.helpers import evalbeam, table
from tests.metrics.statistics.test_compare import independent


N = 300


def cases(candidate: bool):
    """Group a is unchanged in the candidate; in group b, 45 of the right answers
    turn wrong, the responses lose words and the latency doubles."""
    rng = random.Random(11)
    rows = []
    for k in range(N):
        group = "a" if k % 2 else "b"
        reference = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "eps"]) for _ in range(8))
        right = rng.random() < 0.85
        response = reference if right else "something else entirely"
        latency = round(1 + rng.random(), 3)
        if candidate and group == "b":
            if right and k % 10 in (0, 4, 6):
                response = "wrong now"
            elif right:
                response = " ".join(reference.split()[:5])
            latency *= 2
        rows.append({"id": f"c{k}", "grp": group, "response": response, "reference": reference,
                     "latency_in_seconds": latency})
    if candidate:
        rows += [{"id": f"new{k}", "grp": "a", "response": "x", "reference": "x", "latency_in_seconds": 1.0}
                 for k in range(3)]
    else:
        rows += [{"id": f"old{k}", "grp": "b", "response": "x", "reference": "y", "latency_in_seconds": 1.0}
                 for k in range(4)]
    return rows


def write_run(tmp_path, name, rows, out, extra=None):
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the gate watches the automatic latency_in_seconds too (by default it would not)
    config = {"name": "cmp-eval", "input": {"uri": str(data), "id_column": "id", "slice_columns": ["grp"]},
              "metrics": ["exact_match", "rouge_1"], "output": {"parquet": str(out)},
              "compare_watch": ["exact_match", "rouge_1", "latency_in_seconds"], "compare_gate_slices": ["grp"],
              **(extra or {})}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def expected(out, base_id, run_id, metric, group=None):
    """Pairs of one metric (and group) straight from the two runs' Parquet tables."""
    def scores(run):
        instances = {r["instance_id"]: r["grp"] for r in table(out / run, "instances")}
        return {r["instance_id"]: (r["score"], instances[r["instance_id"]])
                for r in table(out / run, "metric_results") if r["metric"] == metric}

    base, run = scores(base_id), scores(run_id)
    return [(i, base[i][0], run[i][0]) for i in sorted(base.keys() & run.keys()) if group in (None, run[i][1])]


@pytest.mark.slow
def test_compare_flags_the_regressed_slice_and_is_a_ci_gate(tmp_path):
    out = tmp_path / "out"
    base_cfg = write_run(tmp_path, "base", cases(False), out)
    evalbeam("run", base_cfg, "--set", "run_id=base", "--set", "run_date=2026-11-20")
    cand_cfg = write_run(tmp_path, "cand", cases(True), out, {"compare_with": "previous"})

    # the nightly form: compare with the previous run inside the run, and fail on a regression
    result = evalbeam("run", cand_cfg, "--set", "run_id=cand", "--set", "run_date=2026-11-21",
                      "--fail-on-regression", check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "compared with base" in result.stdout and "regressed against base" in result.stderr
    in_run = {(r["metric"], r["slice"]): r for r in table(out / "cand", "comparisons")}

    # the standalone command gives the same rows, replaces the run's own, and exits 1
    result = evalbeam("compare", "base", "cand", "--parquet", out, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "REGRESSION" in result.stdout
    rows = {(r["metric"], r["slice"]): r for r in table(out / "cand", "comparisons")}
    assert len(list((out / "cand" / "comparisons").glob("*.parquet"))) == 1
    assert rows.keys() == in_run.keys() == {(m, s) for m in ("exact_match", "rouge_1", "latency_in_seconds")
                                            for s in ("overall", "grp=a", "grp=b")}
    for key, row in rows.items():
        for column in ("n_paired", "mean_difference", "ci_low", "ci_high", "p_value", "p_value_adjusted",
                       "wins", "losses", "regression", "improvement"):
            assert row[column] == pytest.approx(in_run[key][column], abs=1e-12), (key, column)

    # every number against an independent computation from the two runs' scores
    for (metric, slice_name), row in rows.items():
        group = None if slice_name == "overall" else slice_name.split("=")[1]
        pairs = expected(out, "base", "cand", metric, group)
        d, ci = independent(pairs)
        assert row["n_paired"] == len(pairs)
        assert row["mean_difference"] == pytest.approx(d.mean(), abs=1e-12)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(tuple(ci), abs=1e-12)
        sign = -1 if metric == "latency_in_seconds" else 1
        assert (row["wins"], row["ties"], row["losses"]) == (
            int((sign * d > 0).sum()), int((d == 0).sum()), int((sign * d < 0).sum()))
        if metric == "exact_match":
            b, c = int((d == -1).sum()), int((d == 1).sum())
            want = stats.binomtest(c, b + c, 0.5).pvalue if b + c else 1.0
        else:
            want = stats.wilcoxon(d).pvalue if (d != 0).any() else 1.0
        assert row["p_value"] == pytest.approx(want, rel=1e-9), (metric, slice_name)
    assert rows[("exact_match", "overall")]["only_in_base"] == 4
    assert rows[("exact_match", "overall")]["only_in_run"] == 3

    flagged = {k for k, r in rows.items() if r["regression"]}
    assert flagged == {("exact_match", "overall"), ("exact_match", "grp=b"), ("rouge_1", "overall"),
                       ("rouge_1", "grp=b"), ("latency_in_seconds", "overall"), ("latency_in_seconds", "grp=b")}
    assert not any(r["improvement"] for r in rows.values())
    assert rows[("latency_in_seconds", "grp=b")]["direction"] == "lower"
    assert rows[("exact_match", "grp=a")]["ties"] == rows[("exact_match", "grp=a")]["n_paired"]

    # the command line over the config's gate: latency not watched, so not flagged, and said so
    result = evalbeam("compare", "base", "cand", "--parquet", out, "--watch", "exact_match,rouge_1", check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {(r["metric"], r["slice"]): r for r in table(out / "cand", "comparisons")}
    assert {k for k, r in rows.items() if r["regression"]} == flagged - {("latency_in_seconds", "overall"),
                                                                        ("latency_in_seconds", "grp=b")}
    assert not rows[("latency_in_seconds", "overall")]["watched"] and rows[("rouge_1", "overall")]["watched"]
    gate = result.stdout.split("the gate:\n")[1].splitlines()
    assert gate[0] == "6 gated test(s) (Holm over them, alpha 0.05):"  # exact_match, rouge_1: overall, grp=a, grp=b
    assert gate[1].startswith("exact_match: REGRESSION: mean ") and "lies below 0 (no tolerance)" in gate[1]
    assert any(line.startswith("latency_in_seconds: not flagged: the gate does not watch it (would be a REGRESSION")
               for line in gate), gate
    # tolerances wider than the changes, relative for latency (each T the share of its base mean): nothing flagged
    result = evalbeam("compare", "base", "cand", "--parquet", out, "--tolerance", "latency_in_seconds=150%",
                      "--tolerance", "1", check=False)
    assert result.returncode == 0 and "0 regression(s) flagged" in result.stdout, result.stdout + result.stderr
    rows = {(r["metric"], r["slice"]): r for r in table(out / "cand", "comparisons")}
    latency = rows[("latency_in_seconds", "grp=b")]
    assert latency["tolerance"] == pytest.approx(1.5 * latency["base_mean"]) and latency["tolerance_relative"] == 1.5
    assert rows[("rouge_1", "overall")]["tolerance"] == 1 and rows[("rouge_1", "overall")]["tolerance_relative"] is None
    # a metric the run does not have: refused by name (a typo would leave the metric ungated)
    result = evalbeam("compare", "base", "cand", "--parquet", out, "--watch", "rouge_x", check=False)
    assert result.returncode == 2 and "--watch rouge_x: run cand has no metric 'rouge_x'" in result.stderr
    result = evalbeam("compare", "base", "cand", "--parquet", out, "--tolerance", "rouge_1=ten%", check=False)
    assert result.returncode == 2 and "--tolerance rouge_1=ten%: 'ten%' is not a tolerance" in result.stderr

    # the same run against itself: refused, it could flag nothing (issue 32, item 8)
    again = evalbeam("compare", "cand", "cand", "--parquet", out, check=False)
    assert again.returncode == 2 and "run cand is the base run itself" in again.stderr, again.stderr


@pytest.mark.slow
def test_compare_refuses_unknown_runs(tmp_path):
    out = tmp_path / "out"
    cfg = write_run(tmp_path, "base", cases(False)[:20], out)
    evalbeam("run", cfg, "--set", "run_id=only")
    evalbeam("run", cfg, "--set", "run_id=other")
    result = evalbeam("compare", "only", "nosuch", "--parquet", out, check=False)
    assert result.returncode == 2 and "no run 'nosuch'" in result.stderr
    result = evalbeam("compare", "only", "other", "--parquet", out, "--tolerance=-1", check=False)
    assert result.returncode == 2
    # a run whose table holds a file that is not Parquet: named, status 2, no traceback
    broken = out / "only" / "metric_results" / "part-zzz.parquet"
    broken.write_text("garbage")
    result = evalbeam("compare", "other", "only", "--parquet", out, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"run only: metric_results file {broken} is not readable Parquet" in result.stderr


@pytest.mark.emulators
def test_compare_in_bigquery_with_views(cloud, tmp_path):
    """Both forms against the BigQuery emulator: compare_with inside the run, and
    `evalbeam compare --bigquery` replacing that pair's rows; the views carry it."""
    from tests.emulators.control import BUCKET, PROJECT
    from evalbeam.transforms.local_cloud import bigquery_client

    def rows(sql):
        return [dict(r.items()) for r in bigquery_client(PROJECT).query(sql).result()]

    dataset = f"{PROJECT}.evals_compare"
    flags = [f"--temp_location=gs://{BUCKET}/tmp"]
    out = {"bigquery": dataset}
    base_cfg = write_run(tmp_path, "base", cases(False), None, {"output": out})
    evalbeam("run", base_cfg, "--set", "run_id=base", "--set", "run_date=2026-11-20", *flags)
    cand_cfg = write_run(tmp_path, "cand", cases(True), None, {"output": out, "compare_with": "previous"})
    result = evalbeam("run", cand_cfg, "--set", "run_id=cand", "--set", "run_date=2026-11-21", *flags, check=False)
    assert result.returncode == 0, result.stderr  # flagged, but no --fail-on-regression
    assert "regression(s) flagged" in result.stdout

    count = f"SELECT COUNT(*) AS n FROM `{dataset}.comparisons` WHERE run_id = 'cand' AND base_run_id = 'base'"
    assert rows(count) == [{"n": 9}]
    regressions = rows(f"SELECT metric, slice FROM `{dataset}.regressions` WHERE name = 'cmp-eval' AND run_date = '2026-11-21'")
    assert {(r["metric"], r["slice"]) for r in regressions} == {
        (m, s) for m in ("exact_match", "rouge_1", "latency_in_seconds") for s in ("overall", "grp=b")}
    view = rows(f"SELECT previous_run_id, paired_mean_difference, ci_low, ci_high, regression FROM `{dataset}.run_comparison` "
                "WHERE run_id = 'cand' AND metric = 'exact_match' AND slice = 'grp=a'")
    assert view == [{"previous_run_id": "base", "paired_mean_difference": 0.0, "ci_low": 0.0, "ci_high": 0.0,
                     "regression": False}]

    result = evalbeam("compare", "base", "cand", "--bigquery", dataset, *flags, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert rows(count) == [{"n": 9}]  # replaced, not added to
    # each run read alone (the Storage Read API's row restriction): 300 paired, 4 and 3 unpaired
    assert rows(f"SELECT n_paired, only_in_base, only_in_run FROM `{dataset}.comparisons` "
                "WHERE metric = 'exact_match' AND slice = 'overall'") == [{"n_paired": N, "only_in_base": 4, "only_in_run": 3}]
    assert not [t.table_id for t in bigquery_client(PROJECT).list_tables(dataset) if t.table_id.startswith("_evalbeam_staging_")]
