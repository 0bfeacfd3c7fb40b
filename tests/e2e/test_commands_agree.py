"""`validate`, `plan`, `run`, `show`, `runs`, `compare` and `report` agreeing with each other
(issue 42, items 3, 5 and 6), through the real `evalbeam` command as a user meets them."""
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, evalbeam

NO_KEY = "judge metrics with backend gemini_api need an API key: set the environment variable GOOGLE_API_KEY"


def jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config_file(tmp_path, data, metrics, name="agree", **extra) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "input": {"uri": str(data), "id_column": "id"}, "metrics": metrics,
                                    "output": {"parquet": str(tmp_path / "out")}, **extra}))
    return path


# ------------------------------------------------ 3. every judge a run calls, checked before anything runs


def test_every_caller_of_the_runs_judge_needs_its_key_and_is_named(tmp_path, monkeypatch):
    """A config whose only model calls are failure classification, model inference, the user
    simulator or rubric generation needs the judge's key as a judge metric does; the one line
    names what calls it. A config that calls no model needs none."""
    from evalbeam.configs import EvalConfig
    from evalbeam.pipelines.preflight import judge_credentials_problem

    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    base = {"name": "c", "input": {"uri": "d.jsonl"}, "output": {"parquet": "out"}}
    cases = {
        "failure_modes": {"metrics": [{"name": "exact_match", "threshold": 1}],
                          "failure_modes": {"metrics": ["exact_match"]}},
        "inference.model": {"metrics": ["exact_match"], "inference": {"model": "gemini-2.5-flash"}},
        "inference.user_simulator": {"metrics": ["exact_match"],
                                     "inference": {"function": "tests.inference_app:echo", "user_simulator": {}}},
        "metric evalbeam_general_quality": {"metrics": ["evalbeam_general_quality"]},
    }
    for caller, fields in cases.items():
        problem = judge_credentials_problem(EvalConfig.model_validate({**base, **fields}))
        assert problem == f"judge (called by {caller}): {NO_KEY} (or set judge.backend: vertex_ai to use " \
                          "Application Default Credentials)", caller
    assert judge_credentials_problem(EvalConfig.model_validate({**base, "metrics": ["exact_match"]})) is None
    # an agent over an ADK eval set gets ADK's default user simulator, which only conversation_scenario
    # cases call: an eval set without any needs no key, one with them does
    from evalbeam.configs import load_config

    assert load_config(ROOT / "configs" / "agent_a2a.yaml").simulates_users()
    assert judge_credentials_problem(load_config(ROOT / "configs" / "agent_a2a.yaml")) is None
    scenarios = load_config(ROOT / "configs" / "example_scenarios.yaml", ["metrics=[tool_trajectory_avg_score]"])
    assert judge_credentials_problem(scenarios).startswith("judge (called by inference.user_simulator): ")
    monkeypatch.setenv("GOOGLE_API_KEY", "AIzaSy-a-key")
    assert judge_credentials_problem(EvalConfig.model_validate({**base, **cases["failure_modes"]})) is None


@pytest.mark.slow
def test_a_failure_modes_config_without_a_key_is_refused_by_validate_plan_and_run_alike(tmp_path, monkeypatch):
    """validate said `config ok` and plan exited 0; run scored every row, then died in a 160-line
    Beam traceback (JudgeCredentialsError while running FailureModes/ClassifyFailures), status 1.
    Now all three exit 2 with the same line naming failure_modes and the variable, and run writes
    nothing."""
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    out = tmp_path / "out"
    args = ["configs/failure_modes.yaml", "--set", f"output.parquet={out}"]
    line = (f"evalbeam: judge (called by failure_modes): {NO_KEY} (or set judge.backend: vertex_ai to use Application "
            "Default Credentials)")
    validated = evalbeam("validate", *args, check=False)
    assert validated.returncode == 2 and validated.stdout.startswith("config ok: 2 metrics")
    assert validated.stderr.strip() == line.replace("evalbeam: ", "evalbeam: everything else checked; left: ")
    planned = evalbeam("plan", *args, "--json", check=False)
    assert planned.returncode == 2 and json.loads(planned.stdout)["instances"] == 15  # the plan, then the key
    assert planned.stderr.strip() == validated.stderr.strip()
    ran = evalbeam("run", *args, check=False)
    assert ran.returncode == 2 and ran.stderr.strip() == line, ran.stderr
    assert not out.exists()


# ------------------------------------------------ validate reaches run's verdict


@pytest.mark.slow
def test_validate_fails_the_inputs_run_would_fail(tmp_path):
    """validate said `config ok` (and plan exited 0) of an empty input, and of one most of whose rows
    are dead letters, that run then read, scored and failed (status 1, under PROBLEMS); validate said
    it of a compare_with naming no run, which run refuses before any work. validate and plan now say
    run's reason and exit 2; what run accepts (input.allow_empty, a share within
    max_dead_letter_share) they accept."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    config = config_file(tmp_path, empty, ["exact_match"])
    reason = (f"no record was read from input.uri {empty}: an empty input fails the run (set input.allow_empty: true "
              "when it is expected)")
    ran = evalbeam("run", config, check=False)
    assert ran.returncode == 1 and f"PROBLEMS:\n  {reason}" in ran.stdout
    validated = evalbeam("validate", config, check=False)
    assert validated.returncode == 2 and validated.stdout == ""
    assert validated.stderr.strip() == f"evalbeam: `run` would fail on this input (1 file(s)): {reason}"
    assert evalbeam("validate", config, "--set", "input.allow_empty=true").stdout.startswith("config ok")
    planned = evalbeam("plan", config, check=False)  # plan reads the whole input as run does, and says the same
    assert planned.returncode == 2 and planned.stdout.startswith("plan for agree: input 1 file(s)\nread 0 = ")
    assert planned.stderr.strip() == f"evalbeam: `run` would fail on this input (1 file(s)): {reason}"

    # 3 of 5 records dead-lettered (a row no metric can score, two repeated ids), over the default share 0.5
    rows = [{"id": "a", "response": "x", "reference": "x"}, {"id": "a", "response": "y", "reference": "y"},
            {"id": "b", "response": "x", "reference": "x"}, {"id": "b", "response": "z", "reference": "z"},
            {"id": "c", "prompt": "no response"}]
    data = jsonl(tmp_path / "mostly_bad.jsonl", rows)
    config = config_file(tmp_path, data, ["exact_match"], name="mostly_bad")
    ran = evalbeam("run", config, check=False)
    assert ran.returncode == 1 and "3 of 5 records read were dead-lettered (60%), more than max_dead_letter_share 0.5 " \
                                   "allows" in ran.stdout
    validated = evalbeam("validate", config, check=False)
    assert validated.returncode == 2, validated.stdout
    assert validated.stderr.startswith("evalbeam: `run` would fail on this input (1 file(s)): 3 of 5 records read were "
                                       "dead-lettered (60%), more than max_dead_letter_share 0.5 allows; the first "
                                       f"reasons:\n  {data}:2: duplicate id 'a' in column 'id': first seen at {data}:1")
    assert evalbeam("validate", config, "--set", "max_dead_letter_share=0.6").returncode == 0
    planned = evalbeam("plan", config, check=False)
    assert planned.returncode == 2 and planned.stderr.strip() == (
        "evalbeam: `run` would fail on this input (1 file(s)): 3 of 5 records read were dead-lettered (60%), more than "
        "max_dead_letter_share 0.5 allows")

    good = config_file(tmp_path, jsonl(tmp_path / "good.jsonl", rows[:1]), ["exact_match"], name="good")
    for command in ("run", "validate"):
        refused = evalbeam(command, good, "--set", "compare_with=no-such-run", check=False)
        assert refused.returncode == 2 and f"compare_with: no run 'no-such-run' in {tmp_path / 'out'}" in refused.stderr
        assert "config ok" not in refused.stdout


# ------------------------------------------------ 6. a misspelt name gets the nearest valid one


@pytest.mark.slow
def test_a_misspelt_metric_key_flag_or_command_gets_the_nearest_valid_name(tmp_path):
    data = jsonl(tmp_path / "d.jsonl", [{"id": "a", "response": "x", "reference": "x"}])
    config = config_file(tmp_path, data, ["tool_trajectory_avg_scor"])
    result = evalbeam("validate", config, check=False)
    assert result.returncode == 2
    assert "metrics.0: unknown metric 'tool_trajectory_avg_scor' (did you mean tool_trajectory_avg_score?)" \
        in result.stderr
    config = config_file(tmp_path, data, [{"name": "rouge", "params": {"rouge_type": "rouge1"}, "threshhold": 0.5}],
                         name="keys")
    result = evalbeam("validate", config, "--set", "input.colum_mapping={response: answer}", check=False)
    assert result.returncode == 2
    assert "input.colum_mapping: Extra inputs are not permitted (did you mean column_mapping?)" in result.stderr
    assert "metrics.0.threshhold: Extra inputs are not permitted (did you mean threshold?)" in result.stderr
    config = config_file(tmp_path, data, [{"name": "rouge", "params": {"rouge_typ": "rouge1"}}], name="params")
    result = evalbeam("validate", config, check=False)
    assert result.returncode == 2
    assert "metrics.0: params: rouge_type: Field required; rouge_typ: Extra inputs are not permitted (did you mean " \
           "rouge_type?)" in result.stderr
    config = config_file(tmp_path, data, ["exact_match"], name="watch", compare_watch=["exact_matches"])
    result = evalbeam("validate", config, check=False)
    assert result.returncode == 2
    assert "compare_watch.0: 'exact_matches' is not a metric of this config (did you mean exact_match?)" in result.stderr

    for argv, said in ((["shwo", "r1"], "argument COMMAND: invalid choice: 'shwo' (did you mean show?)"),
                       (["show", "r1", "--jsn"], "unrecognized arguments: --jsn (did you mean --json?)"),
                       (["runs", "--lats", "3"], "unrecognized arguments: --lats 3 (did you mean --last?)"),
                       (["run", str(config), "--fail-on-regresion", "--direct_num_worker=2"],
                        "unrecognized arguments (neither evalbeam's nor Beam's): --fail-on-regresion "
                        "--direct_num_worker=2 (--fail-on-regresion: did you mean --fail-on-regression?; "
                        "--direct_num_worker: did you mean --direct_num_workers?)")):
        result = evalbeam(*argv, check=False)
        assert result.returncode == 2 and result.stderr.splitlines()[-1] == f"evalbeam: error: {said}", result.stderr




# ------------------------------------------------ 5. a run found by its id from any folder


@pytest.mark.slow
def test_show_report_and_compare_find_a_run_by_its_id_from_any_folder(tmp_path):
    """run wrote relative to the config's folder, and `show RUN_ID` looked in ./output/ ("no results
    folder 'output/'", no hint). Now every command finds a run where run wrote it on this machine
    (the state folder's index, tests/conftest.py's for the tests), from any folder; a flag still wins;
    a run not found is said with the flags that look elsewhere; a folder removed is forgotten."""
    data = jsonl(tmp_path / "d.jsonl", [{"id": "a", "response": "x", "reference": "x"},
                                         {"id": "b", "response": "y", "reference": "x"}])
    for folder in ("proj", "other"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "c.yaml").write_text(yaml.safe_dump({
            "name": "found", "input": {"uri": str(data), "id_column": "id"}, "metrics": ["exact_match"],
            "output": {"parquet": "out"}}))  # relative: to the config's folder
    for folder, run_id in (("proj", "f1"), ("proj", "f2"), ("other", "f3")):
        evalbeam("run", f"{folder}/c.yaml", "--set", f"run_id={run_id}", cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shown = evalbeam("show", "f1", cwd=elsewhere)
    assert shown.stdout.startswith("run f1 (found, ") and f"results: {tmp_path / 'proj' / 'out'}" in shown.stdout
    as_json = json.loads(evalbeam("show", "f3", "--json", cwd=elsewhere).stdout)
    assert as_json["run_id"] == "f3"
    assert evalbeam("report", "f2", "-o", "r.html", cwd=elsewhere).stdout.startswith("wrote r.html")
    assert (elsewhere / "r.html").exists()
    compared = evalbeam("compare", "f1", "f2", cwd=elsewhere)
    assert f"comparisons written to {tmp_path / 'proj' / 'out'}" in compared.stdout
    apart = evalbeam("compare", "f1", "f3", cwd=elsewhere, check=False)
    assert apart.returncode == 2 and "the runs were written to different places (f1 in " in apart.stderr

    flags = "--parquet DIR, --bigquery PROJECT.DATASET or --config CONFIG reads elsewhere"
    missing = evalbeam("show", "nope", cwd=elsewhere, check=False)
    assert missing.returncode == 1 and missing.stderr.strip() == (
        f"evalbeam: no run 'nope' recorded on this machine ({os.environ['EVALBEAM_STATE_DIR']}/runs.jsonl) and no "
        f"results folder 'output/' here: {flags}")
    # an explicit flag wins over what was recorded
    wrong = evalbeam("show", "f1", "--parquet", tmp_path / "other" / "out", cwd=elsewhere, check=False)
    assert wrong.returncode == 1 and wrong.stderr.strip() == (
        f"evalbeam: no run 'f1' in {tmp_path / 'other' / 'out'} ({flags})")
    listed = evalbeam("runs", cwd=elsewhere, check=False)
    assert listed.returncode == 2 and f"runs on this machine were written to {tmp_path / 'other' / 'out'}, " \
                                      f"{tmp_path / 'proj' / 'out'}" in listed.stderr
    shutil.rmtree(tmp_path / "other" / "out")  # a removed output is forgotten
    gone = evalbeam("show", "f3", cwd=elsewhere, check=False)
    assert gone.returncode == 1 and "no run 'f3' recorded on this machine" in gone.stderr


# ------------------------------------------------ 6. commands print the same, and cut no name


@pytest.mark.slow
def test_run_prints_what_show_prints_and_no_table_cuts_a_metric_name(tmp_path, monkeypatch):
    """run never printed the failure-modes block show prints; show cut `tool_trajectory_avg_score`
    to 24 characters there, plan a juror's `evalbeam_fluency:gemini_2_5_flash_lite` to 36. Now run
    and show print one text, and every table is as wide as its longest name. `runs --json` is the
    list `runs` prints."""
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", "AIzaSy-agree-key-0123456789")
    out = tmp_path / "out"
    with JudgeServer() as server:
        ran = evalbeam("run", "configs/failure_modes.yaml", "--set", f"output.parquet={out}", "--set", "run_id=m1",
                       "--set", f"judge.base_url={server.url}")
        data = jsonl(tmp_path / "d.jsonl", [{"id": f"c{i}", "prompt": "Greet", "response": f"Hello {i}"}
                                            for i in range(3)])
        jury = config_file(tmp_path, data, [{"name": "evalbeam_fluency", "judges": [
            {"model": "gemini-2.5-flash-lite"}, {"model": "gemini-2.5-pro"}]}], name="jury",
            judge={"base_url": server.url})
        planned = evalbeam("plan", jury)
        evalbeam("run", "configs/failure_modes.yaml", "--set", f"output.parquet={out}", "--set", "run_id=m2",
                 "--set", f"judge.base_url={server.url}", "--set", "compare_with=m1")
    shown = evalbeam("show", "m1", "--parquet", out)
    assert ran.stdout == shown.stdout
    assert "\nfailure modes (top 3 per metric and slice; failure_modes table):\nmetric  " in ran.stdout
    modes = [line for line in ran.stdout.splitlines() if line.startswith("tool_trajectory_avg_scor")]
    assert modes and all(line.startswith("tool_trajectory_avg_score ") for line in modes), ran.stdout
    assert [line.split()[0] for line in planned.stdout.splitlines() if line.startswith("evalbeam_fluency:")] == [
        "evalbeam_fluency:gemini_2_5_flash_lite", "evalbeam_fluency:gemini_2_5_pro"], planned.stdout

    listed = evalbeam("runs", "--parquet", out).stdout.splitlines()
    as_json = json.loads(evalbeam("runs", "--parquet", out, "--json").stdout)
    assert [r["run_id"] for r in as_json] == [line.split()[0] for line in listed[2:]] == ["m2", "m1"]
    m2 = as_json[0]
    assert (m2["eval"], m2["read_count"], m2["scored_count"], m2["dead_letter_count"]) == ("demo-failure-modes", 15, 15, 0)
    # the config's metrics in its order, then the agent values every agent run has
    assert list(m2["means"]) == ["tool_trajectory_avg_score", "response_match_score", "failure", "latency_in_seconds"]
    assert f"tool_trajectory_avg_score {m2['means']['tool_trajectory_avg_score']['mean']:.3f}" in listed[2]
    assert m2["compared"] == [{"base_run_id": "m1", "regressions": [], "improvements": [], "unpaired": []}]
    assert as_json[1]["compared"] == [] and listed[3].endswith("  -")


def test_the_failure_mode_comparison_cuts_no_name():
    from evalbeam.pipelines.reports.text import format_mode_comparison

    long = "a_metric_named_at_length_by_its_author_v2"
    table = format_mode_comparison([{
        "metric": long, "slice": "dataset=a_slice_with_a_long_name_too", "mode": "a_mode_named_in_full_by_a_taxonomy",
        "base_count": 1, "count": 9, "base_share": 0.1, "share": 0.9, "share_change": 0.8, "grew_in": 8, "shrank_in": 0,
        "p_value": 0.0078125, "grew": True, "shrank": False}])
    row = table.splitlines()[-1].split()
    assert row[:3] == [long, "dataset=a_slice_with_a_long_name_too", "a_mode_named_in_full_by_a_taxonomy"]
    assert row[3:] == ["1", "9", "0.10->0.90", "8", "0", "0.0078", "GREW"]
