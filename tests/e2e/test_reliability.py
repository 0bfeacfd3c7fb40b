"""Nothing lost, nothing destroyed: each defect of the reliability issue fed
through the real `evalbeam` command, with the outcome asserted."""
import json
import os
from pathlib import Path

import pytest
import yaml

from tests.helpers import evalbeam, table
from tests.servers.judge_server import JudgeServer

KEY = "AIzaSy-reliability-key-0123456789"


def write_config(tmp_path, data, run_id="r1", metrics=("exact_match",), name="rel", **extra):
    config = {"name": name, "run_id": run_id, "input": {"uri": str(data)}, "metrics": list(metrics),
              "output": {"parquet": str(tmp_path / "out")}}
    for key, value in extra.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------ 1. duplicate ids never merge results


@pytest.mark.slow
def test_duplicate_ids_never_share_a_judge_verdict(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    data = jsonl(tmp_path / "d.jsonl", [
        {"id": "a", "response": "first #score=5", "reference": "r"},
        {"id": "a", "response": "second, same id #score=1", "reference": "r"},
        {"id": "b", "response": "other #score=3", "reference": "r"},
    ])
    with JudgeServer() as server:
        config = write_config(tmp_path, data, metrics=["evalbeam_fluency"], input={"id_column": "id"},
                              judge={"base_url": server.url, "max_attempts": 2})
        result = evalbeam("run", config)
    run_dir = tmp_path / "out" / "r1"
    scores = {r["instance_id"]: r["score"] for r in table(run_dir, "metric_results")}
    assert scores == {"a": 5.0, "b": 3.0}  # a's own verdict, not the last row's
    [dead] = table(run_dir, "dead_letter")
    assert (dead["line"], dead["field"]) == (2, "instance_id")
    assert dead["reason"] == f"duplicate id 'a' in column 'id': first seen at {data}:1"
    assert "read 3 = scored 2 + dead-lettered 1" in result.stdout


@pytest.mark.slow
def test_identical_rows_without_an_id_column_each_get_their_own_row(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    row = {"response": "same #score=4", "reference": "r"}
    data = jsonl(tmp_path / "d.jsonl", [row, {"response": "other #score=2", "reference": "r"}, row])
    with JudgeServer() as server:
        config = write_config(tmp_path, data, metrics=["evalbeam_fluency"], judge={"base_url": server.url})
        evalbeam("run", config)
        calls = server.stats.requests
    results = table(tmp_path / "out" / "r1", "metric_results")
    ids = sorted(r["instance_id"] for r in results)
    assert len(ids) == 3 and ids[0] + "-2" in ids or ids[1] + "-2" in ids
    assert sorted(r["score"] for r in results) == [2.0, 4.0, 4.0]
    assert calls == 2  # the identical prompt is still judged once


# ------------------------------------------------ 2. re-running never destroys what evalbeam did not write


@pytest.mark.slow
def test_a_folder_evalbeam_did_not_write_is_never_replaced(tmp_path):
    notes = tmp_path / "out" / "r1" / "notes.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text("my notes")
    data = jsonl(tmp_path / "d.jsonl", [{"response": "x", "reference": "x"}])
    result = evalbeam("run", write_config(tmp_path, data), check=False)
    assert result.returncode == 2 and "was not written by evalbeam" in result.stderr
    assert notes.read_text() == "my notes" and sorted(os.listdir(notes.parent)) == ["notes.txt"]


@pytest.mark.slow
def test_run_id_naming_the_input_folder_cannot_delete_the_input(tmp_path):
    data = jsonl((tmp_path / "out" / "data").mkdir(parents=True) or tmp_path / "out" / "data" / "d.jsonl",
                 [{"response": "x", "reference": "x"}])
    result = evalbeam("run", write_config(tmp_path, data, run_id="data"), check=False)
    assert result.returncode == 2 and "was not written by evalbeam" in result.stderr
    assert data.exists()


@pytest.mark.slow
def test_a_run_that_dies_leaves_the_previous_output_of_its_run_id(tmp_path):
    rows = [{"response": f"r{i}", "reference": f"r{i}"} for i in range(5)]
    data = jsonl(tmp_path / "d.jsonl", rows)
    metrics = ["exact_match", {"name": "die_on_marker", "function": "tests.custom_metrics:die_on_marker",
                               "inputs": ["response"]}]
    config = write_config(tmp_path, data, metrics=metrics)
    evalbeam("run", config)
    run_dir = tmp_path / "out" / "r1"
    before = sorted(i["response"] for i in table(run_dir, "instances"))
    # the second attempt dies half way (the process exits while scoring)
    jsonl(data, rows[:2] + [{"response": "die now", "reference": "x"}] + rows[2:])
    died = evalbeam("run", config, check=False, process=True)  # the process dies
    assert died.returncode == 17
    assert sorted(i["response"] for i in table(run_dir, "instances")) == before
    assert table(run_dir, "runs")[0]["read_count"] == 5
    # and a later attempt that finishes replaces it, leaving no attempt folders behind
    jsonl(data, rows[:3])
    evalbeam("run", config)
    assert sorted(i["response"] for i in table(run_dir, "instances")) == ["r0", "r1", "r2"]
    assert sorted(os.listdir(tmp_path / "out")) == ["r1"]


# ------------------------------------------------ 6. unwritable outputs are found before any work


@pytest.mark.slow
@pytest.mark.parametrize("where", ["a_file", "/proc/evalbeam-out"])
def test_an_unwritable_output_is_refused_before_any_work(tmp_path, where):
    target = tmp_path / "a_file" if where == "a_file" else Path(where)
    if where == "a_file":
        target.write_text("not a folder")
    data = jsonl(tmp_path / "d.jsonl", [{"response": "x", "reference": "x"}])
    config = write_config(tmp_path, data, output={"parquet": str(target)})
    result = evalbeam("run", config, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith(f"evalbeam: output.parquet: cannot write under '{target}'")
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


# ------------------------------------------------ 8. --set takes what was typed


@pytest.mark.slow
def test_set_values_that_are_not_yaml_or_not_strings(tmp_path):
    data = jsonl(tmp_path / "d.jsonl", [{"response": "x", "reference": "x"}])
    config = write_config(tmp_path, tmp_path / "nothing.jsonl")
    result = evalbeam("run", config, "--set", "run_id=20261122", "--set", f"input.uri={tmp_path}/*.jsonl")
    assert "run 20261122 (rel" in result.stdout and "read 1 = scored 1" in result.stdout
    assert (tmp_path / "out" / "20261122").is_dir()
    percent = evalbeam("validate", config, "--set", "input.uri=%x.jsonl", check=False)
    assert percent.returncode == 2 and "input.uri: no file matches '%x.jsonl'" in percent.stderr
    assert data.exists()


# ------------------------------------------------ papercuts


@pytest.mark.slow
def test_mistyped_flags_and_unknown_runners_are_errors(tmp_path):
    data = jsonl(tmp_path / "d.jsonl", [{"response": "x", "reference": "x"}])
    config = write_config(tmp_path, data)
    for args in (["--sett", "run_id=x"], ["--run_id=x"], ["--run_id", "x"]):
        result = evalbeam("run", config, *args, check=False)
        assert result.returncode == 2, args
        assert f"unrecognized arguments (neither evalbeam's nor Beam's): {' '.join(args)}" in result.stderr
        assert "Discarding" not in result.stderr
        # issue 32, item 7: the --set meant
        assert "(a config value is set with --set: --set run_id=x)" in result.stderr, result.stderr
    result = evalbeam("validate", config, "--input.uri=other.jsonl", check=False)
    assert result.returncode == 2
    assert "unrecognized arguments: --input.uri=other.jsonl (a config value is set with --set: " \
           "--set input.uri=other.jsonl)" in result.stderr
    assert "--set" not in evalbeam("run", config, "--nosuch=1", check=False).stderr.split("unrecognized")[1]
    runner = evalbeam("run", config, "--runner=Nope", check=False)
    assert runner.returncode == 2 and runner.stderr.startswith("evalbeam: --runner=Nope: Unexpected pipeline runner")
    assert "Traceback" not in runner.stderr
    negative = evalbeam("run", config, "--direct_num_workers=-3", check=False)
    assert negative.returncode == 2 and "Traceback" not in negative.stderr
    assert "evalbeam: error: argument --direct_num_workers: must be 0 (one per core) or more, got -3" in negative.stderr
    # a bad value of a Beam flag: one usage error, not the usage of every Beam option
    bad = evalbeam("run", config, "--direct_num_workers=abc", check=False)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 2, bad.stderr
    assert "evalbeam: error: argument --direct_num_workers: invalid int value: 'abc'" in bad.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_show_and_runs_on_missing_or_broken_results(tmp_path):
    data = jsonl(tmp_path / "d.jsonl", [{"response": "x", "reference": "x"}])
    evalbeam("run", write_config(tmp_path, data))
    out = tmp_path / "out"
    unknown = evalbeam("show", "nope", "--parquet", out, check=False)
    assert unknown.returncode == 1 and "no run 'nope'" in unknown.stderr
    missing = evalbeam("runs", "--parquet", tmp_path / "missing", check=False)
    assert missing.returncode == 2 and "no results folder" in missing.stderr
    # one empty and one corrupt Parquet file of another run: the good run is still listed
    broken = out / "broken" / "runs"
    broken.mkdir(parents=True)
    (broken / "part-0.parquet").write_bytes(b"")
    (broken / "part-1.parquet").write_bytes(b"PAR1 not really")
    listed = evalbeam("runs", "--parquet", out)
    assert listed.stdout.splitlines()[2].startswith("r1 ")
    assert listed.stderr.count("skipped unreadable file") == 2


@pytest.mark.slow
def test_validate_says_when_no_row_can_be_read(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("{broken\nnot json either\n")
    result = evalbeam("validate", write_config(tmp_path, data), check=False)
    assert result.returncode == 2
    assert "no row of the dataset (1 file(s)) could be read; the first reasons:" in result.stderr
    assert f"{data}:1: invalid JSON" in result.stderr and f"{data}:2: invalid JSON" in result.stderr


@pytest.mark.slow
def test_a_metric_with_no_valid_score_fails_the_run_with_its_reasons(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    data = jsonl(tmp_path / "d.jsonl", [{"response": f"r{i} #fail", "reference": "r"} for i in range(3)])
    with JudgeServer() as server:
        config = write_config(tmp_path, data, metrics=["exact_match", "evalbeam_fluency"],
                              judge={"base_url": server.url, "max_attempts": 2})
        result = evalbeam("run", config, check=False)
    assert result.returncode == 1
    assert "evalbeam_fluency: 3 x judge failed after 2 attempts; last: HTTP 503" in result.stdout
    assert "metric evalbeam_fluency has no valid score: all 3 rows failed" in result.stdout
    assert "finished with problems" in result.stderr
    shown = evalbeam("show", "r1", "--parquet", tmp_path / "out")
    assert "evalbeam_fluency: 3 x judge failed" in shown.stdout


@pytest.mark.slow
def test_a_non_finite_custom_score_is_an_error_on_its_row(tmp_path):
    data = jsonl(tmp_path / "d.jsonl", [{"response": "nan", "reference": "r"}, {"response": "ok", "reference": "r"}])
    metrics = [{"name": "maybe_nan", "function": "tests.e2e.test_reliability:maybe_nan", "inputs": ["response"]}]
    evalbeam("run", write_config(tmp_path, data, metrics=metrics), check=False)
    rows = {r["score"] if r["score"] is not None else r["error"] for r in table(tmp_path / "out" / "r1", "metric_results")}
    assert rows == {1.0, "MetricError: score is not a finite number (nan)"}
    [summary] = [s for s in table(tmp_path / "out" / "r1", "summary") if s["slice"] == "overall"]
    assert (summary["row_count"], summary["valid_count"], summary["error_count"]) == (2, 1, 1)


def maybe_nan(instance):
    return {"maybe_nan": float("nan") if instance["response"] == "nan" else 1.0}
