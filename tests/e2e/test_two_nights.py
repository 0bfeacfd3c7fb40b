"""Two nights told apart (issue 42): the nightly loop as a user runs it. Recorded outputs of the same
prompts on two nights, without input.id_column, pair every case however the outputs changed; the gate
flags the regression the second night holds at the sizes teams start with, says why of every gated
row, fails when the base's cases vanish, and refuses runs whose ids were made differently."""
import json

import pyarrow.parquet as pq
import pytest
import yaml

from tests.helpers import evalbeam, table

pytestmark = pytest.mark.slow

PROMPTS = 20


def night(second: bool, drop: int = 0, add: int = 0):
    """20 recorded cases; the second night changes 3 trajectories and replaces 8 answers with a non-answer.
    `drop`: the last cases missing; `add`: new cases. The prompts repeat twice (two rows, same inputs)."""
    rows = []
    for i in range(PROMPTS - drop):
        want = [{"tool_name": "search", "tool_input": {"q": f"q{i}"}}]
        trajectory = [{"tool_name": "lookup", "tool_input": {"q": f"q{i}"}}] if second and i < 3 else want
        answer = f"The answer to question {i} is {i * 7}."
        response = "I am not sure, sorry." if second and 5 <= i < 13 else answer
        rows.append({"prompt": f"What is question {i}?", "reference": answer, "response": response,
                     "predicted_trajectory": trajectory, "reference_trajectory": want,
                     "latency_in_seconds": 1.0 + (0.5 if second else 0) + i / 100,
                     "logged_at": f"2026-12-0{7 if second else 6}T02:{i:02d}:00Z", "dataset": "abcd"[i % 4]})
    rows += [{"prompt": f"A new question {k}?", "reference": "x", "response": "x", "predicted_trajectory": [],
              "reference_trajectory": [], "dataset": "a"} for k in range(add)]
    return rows


def write(tmp_path, name, rows, **extra):
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"name": "nightly", "input": {"uri": str(data), "slice_columns": ["dataset"]},
              "metrics": ["tool_trajectory_avg_score", "trajectory_exact_match", "response_match_score"],
              "output": {"parquet": str(tmp_path / "out")}, **extra}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nights")
    evalbeam("run", write(tmp, "n1", night(False)), "--set", "run_id=n1", "--set", "run_date=2026-12-06")
    evalbeam("run", write(tmp, "n2", night(True)), "--set", "run_id=n2", "--set", "run_date=2026-12-07")
    return tmp


def test_changed_cases_pair_and_the_regression_they_hold_fails_the_gate(nights):
    out = nights / "out"
    ids = [{r["instance_id"] for r in table(out / run, "instances")} for run in ("n1", "n2")]
    assert ids[0] == ids[1] and len(ids[0]) == PROMPTS
    assert {r["id_scheme"] for r in table(out / "n2", "runs")} == {"inputs"}

    result = evalbeam("compare", "n1", "n2", "--parquet", out, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {(r["metric"], r["slice"]): r for r in table(out / "n2", "comparisons")}
    for metric in ("tool_trajectory_avg_score", "trajectory_exact_match", "response_match_score"):
        overall = rows[(metric, "overall")]
        assert (overall["n_paired"], overall["only_in_base"], overall["only_in_run"]) == (PROMPTS, 0, 0)
        assert overall["gated"] and overall["family_size"] == 3
        assert overall["estimate"] == "scores"
    # the three changed trajectories are paired, and lost
    assert rows[("trajectory_exact_match", "overall")]["losses"] == 3
    # 8 of 20 answers gone wrong: flagged with Holm over the 3 gated metrics, not over 15 metric x slice rows
    assert rows[("response_match_score", "overall")]["regression"]
    assert rows[("response_match_score", "overall")]["losses"] == 8
    assert not any(r["regression"] or r["gated"] for (m, s), r in rows.items() if s != "overall")
    assert "REGRESSION" in result.stdout and "1 regression(s) flagged" in result.stdout
    # every gated row says why, in one line
    gate = result.stdout.split("the gate:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert gate[0] == "3 gated test(s) (Holm over them, alpha 0.05):"
    assert gate[1].startswith("response_match_score: REGRESSION: mean 1 -> ")
    assert "p (Holm over 3 tests)" in gate[1]
    for line in gate[2:4]:
        assert line.split(":")[0] in ("tool_trajectory_avg_score", "trajectory_exact_match")
        assert "not flagged: 95% CI [" in line and "spans 0" in line and "p (Holm over 3 tests)" in line
        assert "20 paired detect a change of" in line
    # the latency agent runs report by themselves: not watched, so it says what it would be
    assert gate[4].startswith("latency_in_seconds: not flagged: the gate does not watch it (would be a REGRESSION")
    assert gate[-1].startswith("12 slice row(s) of watched metrics are reported")

    # the same in JSON, and the same status
    as_json = evalbeam("compare", "n1", "n2", "--parquet", out, "--json", "--detect", "0.1", check=False)
    assert as_json.returncode == 1
    data = json.loads(as_json.stdout)
    assert data["status"] == 1 and data["regressions"] == 1 and data["problems"] == []
    assert {(r["metric"], r["slice"]) for r in data["comparisons"]} == set(rows)
    assert [r["metric"] for r in data["comparisons"] if r["regression"]] == ["response_match_score"]
    assert any("a change of 0.1 needs" in line for line in data["gate"])


def test_slices_gate_when_named(nights):
    out = nights / "out"
    result = evalbeam("compare", "n1", "n2", "--parquet", out, "--gate-slices", "dataset", check=False)
    rows = {(r["metric"], r["slice"]): r for r in table(out / "n2", "comparisons")}
    watched = [r for r in rows.values() if r["metric"] != "latency_in_seconds"]
    assert len(watched) == 15 and all(r["gated"] and r["family_size"] == 15 for r in watched)
    # over 15 tests the 8 lost answers no longer clear Holm: not flagged, and it says so
    assert result.returncode == 0, result.stdout + result.stderr
    assert "p (Holm over 15 tests)" in rows[("response_match_score", "overall")]["gate_reason"]
    misspelt = evalbeam("compare", "n1", "n2", "--parquet", out, "--gate-slices", "datset", check=False)
    assert misspelt.returncode == 2
    assert "run n2 has no slice column 'datset' (did you mean 'dataset'?)" in misspelt.stderr


def test_the_nightly_run_compares_itself_and_fails_on_the_regression(nights, tmp_path):
    config = write(nights, "n3", night(True), compare_with="n1")
    result = evalbeam("run", config, "--set", "run_id=n3", "--set", "run_date=2026-12-08", "--fail-on-regression",
                      check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "regressed against n1" in result.stderr


def test_cases_of_the_base_that_vanish_or_error_fail_the_gate(nights):
    out = nights / "out"
    # 2 of the base's 20 cases gone (10% > 5%), 5 new ones (normal)
    evalbeam("run", write(nights, "n4", night(False, drop=2, add=5)), "--set", "run_id=n4")
    result = evalbeam("compare", "n1", "n4", "--parquet", out, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("n4 vs n1: metric response_match_score: 2 of the base's 20 instance(s) (10%) are missing from the run "
            "(2) or have no valid score in it (0), more than --max-missing 0.05 allows") in result.stderr
    assert ("n4 response_match_score: instance(s) not paired: 2 of the base missing from the run, 0 with no valid "
            "score in the run, 0 with none in the base, 5 new in the run") in result.stdout
    assert evalbeam("compare", "n1", "n4", "--parquet", out, "--max-missing", "10%", check=False).returncode == 0


def test_runs_that_identify_cases_differently_are_refused_in_one_line(nights):
    out = nights / "out"
    rows = night(False)
    for k, r in enumerate(rows):
        r["case"] = f"c{k}"
    evalbeam("run", write(nights, "n5", rows, input={"uri": str(nights / "n5.jsonl"), "id_column": "case"}),
             "--set", "run_id=n5")
    result = evalbeam("compare", "n1", "n5", "--parquet", out, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "evalbeam: runs n1 and n5 identify their cases differently (n1: a hash of each case's inputs; n5: the column "
        "'case'), so their instances cannot pair: give both runs one input.id_column, or re-run the base run's config "
        "with this evalbeam"]
    # a run from before the runs table recorded its scheme hashed the whole row
    runs = next((out / "n1" / "runs").glob("*.parquet"))
    old = pq.read_table(runs)
    pq.write_table(old.drop_columns(["id_scheme"]), runs)
    try:
        result = evalbeam("compare", "n1", "n2", "--parquet", out, check=False)
    finally:
        pq.write_table(old, runs)
    assert result.returncode == 2
    assert "n1: a hash of the whole row, outputs included (evalbeam before case identity)" in result.stderr
