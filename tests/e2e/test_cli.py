"""The `evalbeam` command end to end: a real DirectRunner pipeline on a dataset
with bad rows, every output table read back and checked."""
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest
import yaml

from tests.helpers import EVALBEAM, ROOT, evalbeam, table
from evalbeam.metrics.rows.tables import arrow_schema

T = {"tool_name": "get", "tool_input": {"id": 1}}
U = {"tool_name": "set", "tool_input": {"id": 1, "on": True}}

GOOD = [
    {"case": "c1", "ds": "x", "answer": "the cat sat", "reference": "the cat sat", "predicted_trajectory": [T, U], "reference_trajectory": [T, U], "latency_in_seconds": 1.5},
    {"case": "c2", "ds": "x", "answer": "a dog ran", "reference": "the cat sat", "predicted_trajectory": [U], "reference_trajectory": [T, U], "latency_in_seconds": 2.5},
    {"case": "c3", "ds": "y", "answer": "boom", "reference": "boom", "predicted_trajectory": json.dumps([T]), "reference_trajectory": [T]},
    {"case": "c4", "ds": "y", "answer": "café ☕", "reference": "café ☕", "predicted_trajectory": [], "reference_trajectory": []},
]
BAD_LINES = [
    ('{"case": "c5", "answer": "x", "reference": "x"', "invalid JSON", None),
    ('["not", "an", "object"]', "a record must be a JSON object", None),
    # no metric can score it (a row lacking only some metrics' inputs is scored: tests/e2e/test_run_outcomes.py)
    (json.dumps({"case": "c6", "ds": "x", "reference": "r"}), "missing or null; needed by metric 'exact_match'", "response"),
    (json.dumps({"case": "c7", "ds": "x", "answer": "a", "reference": "r", "predicted_trajectory": {"tool_name": "get"}, "reference_trajectory": []}), "must be a list of tool calls", "predicted_trajectory"),
    (json.dumps({"case": "c8", "ds": "x", "answer": "a", "reference": "r", "predicted_trajectory": [], "reference_trajectory": [], "latency_in_seconds": "slow"}), "must be a number", "latency_in_seconds"),
]
METRICS = ["exact_match", "trajectory_exact_match", "trajectory_recall", "tool_trajectory_avg_score", "fragile_length"]


def config_text(data, out, run_id="r1"):
    return textwrap.dedent(f"""
        name: e2e
        run_id: {run_id}
        max_dead_letter_share: 1  # most of the lines of this file are bad on purpose
        input:
          uri: {data}
          column_mapping: {{response: answer}}
          id_column: case
          slice_columns: [ds]
        metrics:
          - exact_match
          - trajectory_exact_match
          - trajectory_recall
          - tool_trajectory_avg_score
          - {{name: fragile_length, function: "tests.custom_metrics:fragile_length", inputs: [response]}}
        output:
          parquet: {out}
        """)


@pytest.fixture
def dataset(tmp_path):
    data = tmp_path / "data.jsonl"
    lines = [json.dumps(r, ensure_ascii=False) for r in GOOD[:2]] + [b for b, _, _ in BAD_LINES] + [json.dumps(r, ensure_ascii=False) for r in GOOD[2:]]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "eval.yaml"
    config.write_text(config_text(data, tmp_path / "out"))
    return config, data, tmp_path / "out" / "r1"


@pytest.mark.slow
def test_run_writes_every_table_and_counts_reconcile(dataset):
    config, data, run_dir = dataset
    result = evalbeam("run", config)
    assert "read 9 = scored 4 + dead-lettered 5" in result.stdout

    # every table has exactly the schema derived from the one definition
    for name in ("instances", "metric_results", "summary", "runs", "dead_letter"):
        files = list((run_dir / name).glob("*.parquet"))
        assert files, name
        slices = ["ds"] if name == "instances" else []
        assert pq.read_schema(files[0]).remove_metadata() == arrow_schema(name, slices), name

    runs = table(run_dir, "runs")
    assert len(runs) == 1
    run = runs[0]
    assert (run["read_count"], run["scored_count"], run["dead_letter_count"], run["metric_error_count"]) == (9, 4, 5, 1)
    assert run["run_id"] == "r1" and run["name"] == "e2e"
    assert json.loads(run["config"])["input"]["id_column"] == "case"
    assert run["started_at"] <= run["finished_at"]

    dead = sorted(table(run_dir, "dead_letter"), key=lambda d: d["source"])
    assert [d["source"] for d in dead] == [f"{data}:{n}" for n in range(3, 8)]
    for d, (raw, reason, field) in zip(dead, BAD_LINES):
        assert reason in d["reason"] and d["field"] == field and d["raw_record"] == raw and d["run_id"] == "r1"
    assert "field 'response' (column 'answer')" in dead[2]["reason"]

    instances = {i["instance_id"]: i for i in table(run_dir, "instances")}
    assert sorted(instances) == ["c1", "c2", "c3", "c4"]
    assert instances["c4"]["response"] == "café ☕" and instances["c4"]["ds"] == "y"
    assert json.loads(instances["c3"]["predicted_trajectory"]) == [T]
    assert instances["c1"]["latency_in_seconds"] == 1.5 and instances["c3"]["latency_in_seconds"] is None
    assert instances["c2"]["source"] == f"{data}:2"

    results = {(r["instance_id"], r["metric"]): r for r in table(run_dir, "metric_results")}
    # one row per instance and metric, plus latency where present; none lost
    assert len(results) == 4 * len(METRICS) + 2
    assert results[("c1", "exact_match")]["score"] == 1.0 and results[("c2", "exact_match")]["score"] == 0.0
    assert results[("c2", "trajectory_recall")]["score"] == 0.5
    assert results[("c3", "trajectory_exact_match")]["score"] == 1.0
    assert results[("c4", "tool_trajectory_avg_score")]["passed"] is True
    assert results[("c2", "tool_trajectory_avg_score")]["passed"] is False
    assert results[("c1", "exact_match")]["passed"] is None  # no threshold
    boom = results[("c3", "fragile_length")]
    assert boom["score"] is None and boom["error"] == "ValueError: cannot score an explosion"
    assert json.loads(results[("c4", "fragile_length")]["extra"]) == {"upper": "CAFÉ ☕"}
    assert results[("c1", "latency_in_seconds")]["score"] == 1.5

    summary = {(s["metric"], s["slice"]): s for s in table(run_dir, "summary")}
    assert {k[1] for k in summary} == {"overall", "ds=x", "ds=y"}
    em = summary[("exact_match", "overall")]
    assert (em["row_count"], em["valid_count"], em["error_count"], em["mean"]) == (4, 4, 0, 0.75)
    assert em["std"] == pytest.approx(0.5) and 0 <= em["ci_low"] <= 0.75 <= em["ci_high"] <= 1
    assert summary[("exact_match", "ds=x")]["mean"] == 0.5
    frag = summary[("fragile_length", "overall")]
    assert (frag["row_count"], frag["valid_count"], frag["error_count"]) == (4, 3, 1)
    traj = summary[("tool_trajectory_avg_score", "overall")]
    assert traj["threshold"] == 1.0 and traj["pass_rate"] == 0.75
    assert summary[("latency_in_seconds", "overall")]["mean"] == 2.0
    # the summary agrees with the per-instance table
    for (metric, slice_name), s in summary.items():
        if slice_name == "overall":
            scores = [r["score"] for (i, m), r in results.items() if m == metric and r["score"] is not None]
            assert s["mean"] == pytest.approx(sum(scores) / len(scores)), metric


@pytest.mark.slow
def test_rerunning_a_run_id_replaces_its_output(dataset):
    config, data, run_dir = dataset
    evalbeam("run", config)
    # second attempt on a smaller dataset: nothing of the first may remain
    data.write_text(json.dumps(GOOD[0]) + "\n")
    evalbeam("run", config)
    assert [r["instance_id"] for r in table(run_dir, "instances")] == ["c1"]
    assert table(run_dir, "dead_letter") == []
    assert table(run_dir, "runs")[0]["read_count"] == 1
    assert len(table(run_dir, "metric_results")) == len(METRICS) + 1


def evalbeam_pid(*args, env=None):
    """Runs `evalbeam` as helpers.evalbeam does, but started directly rather
    than under `timeout` (whose pid would not be the command's), and returns
    the command's pid."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([EVALBEAM, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its session: the command and any Beam workers it started
        proc.communicate()
        raise
    assert proc.returncode == 0, f"evalbeam {args} failed ({proc.returncode}):\n{out}\n{err}"
    return proc.pid


@pytest.mark.slow
def test_beam_flags_pass_through_and_results_do_not_depend_on_the_runner_mode(dataset, tmp_path):
    config, _, run_dir = dataset
    # the e2e config plus a metric that records which process scored each instance
    raw = yaml.safe_load(config.read_text())
    raw["metrics"].append({"name": "scoring_process", "function": "tests.custom_metrics:scoring_process", "inputs": ["response"]})
    config = tmp_path / "with_pids.yaml"
    config.write_text(yaml.safe_dump(raw))

    def scoring_processes(run):
        rows = [r for r in table(run_dir.parent / run, "metric_results") if r["metric"] == "scoring_process"]
        assert len(rows) == 4, rows  # the four valid instances
        return [json.loads(r["extra"]) for r in rows]

    # The default runner (DirectRunner: Beam's FnApiRunner, in memory; evalbeam never
    # tries Prism) runs pipeline code in the command's own process, which freezes
    # nothing (it ends without the interpreter's teardown) ...
    single = evalbeam_pid("run", config)
    assert {p["pid"] for p in scoring_processes("r1")} == {single}
    assert {p["frozen"] for p in scoring_processes("r1")} == {0}
    # ... and with these flags in worker processes that the command started:
    # proof that the flags reached Beam and took effect.
    multi = evalbeam_pid("run", config, "--set", "run_id=r2", "--direct_num_workers=2",
                         "--direct_running_mode=multi_processing")
    workers = scoring_processes("r2")
    assert all(p["pid"] != multi and multi in p["ancestors"] for p in workers), (multi, workers)
    assert len({p["pid"] for p in workers}) <= 2, workers  # no more workers than asked for
    assert all(p["frozen"] > 10000 for p in workers), workers  # their start-up objects (transforms.worker)

    key = lambda r: (r["metric"], r["slice"])  # noqa: E731
    one = sorted(({k: v for k, v in r.items() if k != "run_id"} for r in table(run_dir, "summary")), key=key)
    two = sorted(({k: v for k, v in r.items() if k != "run_id"} for r in table(run_dir.parent / "r2", "summary")), key=key)
    # the same up to the last bits of a float: workers combine the same values in another order
    assert one == [{k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in r.items()} for r in two]


@pytest.mark.slow
def test_validate_reports_metrics_whose_inputs_no_column_provides(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"case": "1", "ds": "x", "answer": "a", "reference": "a"}) + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(config_text(data, tmp_path / "out"))
    result = evalbeam("validate", config, check=False)
    assert result.returncode == 2
    assert "metrics.1 (trajectory_exact_match): needs (predicted_trajectory, reference_trajectory)" in result.stderr
    assert "metrics.3 (tool_trajectory_avg_score): needs (predicted_trajectory, reference_trajectory) or (invocations)" in result.stderr
    assert "metrics.0" not in result.stderr
    run = evalbeam("run", config, check=False)
    assert run.returncode == 2 and not (tmp_path / "out").exists()  # nothing ran


@pytest.mark.slow
def test_validate_ok_and_missing_input_files(dataset, tmp_path):
    config, _, _ = dataset
    ok = evalbeam("validate", config)
    assert "config ok: 5 metrics; input 1 file(s); columns checked on 7 row(s)" in ok.stdout  # 9 lines, 2 unparseable
    missing = evalbeam("validate", config, "--set", f"input.uri={tmp_path}/nothing*.jsonl", check=False)
    assert missing.returncode == 2 and "input.uri: no file matches" in missing.stderr
    folder = evalbeam("validate", config, "--set", f"input.uri={tmp_path}", "--set", "input.format=jsonl", check=False)
    assert folder.returncode == 2 and "Traceback" not in folder.stderr
    assert f"input.uri: '{tmp_path}' is a folder: name its files, e.g. '{tmp_path}/*.jsonl'" in folder.stderr
    bad = evalbeam("validate", config, "--set", "metrics.0.params.x=1", check=False)
    assert bad.returncode == 2 and "metrics.0: params: x: Extra inputs are not permitted" in bad.stderr


@pytest.mark.slow
def test_empty_dataset_is_an_empty_run(tmp_path):
    data = tmp_path / "empty.jsonl"
    data.write_text("\n")
    config = tmp_path / "c.yaml"
    config.write_text(config_text(data, tmp_path / "out"))
    result = evalbeam("run", config, "--set", "input.allow_empty=true")  # an empty input that is expected
    assert "read 0 = scored 0 + dead-lettered 0" in result.stdout
    assert table(tmp_path / "out" / "r1", "summary") == []


@pytest.mark.slow
def test_csv_demo_config_runs(demo_run):
    result, run_dir = demo_run("configs/demo_qa.yaml")
    assert "read 8 = scored 8 + dead-lettered 0" in result.stdout
    summary = {(s["metric"], s["slice"]): s for s in table(run_dir, "summary")}
    assert summary[("rouge_lsum_split", "overall")]["valid_count"] == 8
    assert summary[("exact_match", "task=question_answering")]["mean"] == 0.25


@pytest.mark.slow
def test_metrics_command_lists_every_computation_metric():
    out = evalbeam("metrics").stdout
    for name in ("trajectory_exact_match", "trajectory_in_order_match", "trajectory_any_order_match", "trajectory_precision",
                 "trajectory_recall", "trajectory_single_tool_use", "exact_match", "bleu", "rouge", "rouge_1", "rouge_2",
                 "rouge_l", "rouge_l_sum", "tool_call_valid", "tool_name_match", "tool_parameter_key_match",
                 "tool_parameter_kv_match", "latency_in_seconds", "failure", "tool_trajectory_avg_score", "response_match_score"):
        assert f"\n{name}\n" in "\n" + out, name


@pytest.mark.slow
def test_the_command_ends_after_its_exit_handlers_and_whole_output(dataset, tmp_path):
    """`evalbeam` ends its process without the interpreter's teardown
    (pipelines.cli.entry): the exit handlers registered by code the run imported
    (a custom metric's here) still run, and the output reaches a pipe whole, with
    the status of the run: 1 for a run with problems (a metric with no valid score)."""
    config, _, _ = dataset
    raw = yaml.safe_load(config.read_text())
    raw["metrics"].append({"name": "exit_marker", "function": "tests.custom_metrics:exit_marker", "inputs": ["response"]})
    config = tmp_path / "with_exit_handler.yaml"
    config.write_text(yaml.safe_dump(raw))
    marker = tmp_path / "at_exit.txt"
    result = evalbeam("run", config, "--direct_num_workers=1", check=False, env={"EVALBEAM_TEST_AT_EXIT": str(marker)})
    assert result.returncode == 1, result.stderr
    assert "finished with problems" in result.stderr and "metric exit_marker has no valid score" in result.stdout
    assert marker.read_text().startswith("exit handler of ")
    assert result.stdout.rstrip().endswith(f"results: {tmp_path / 'out'}")
    assert "read 9 = scored 4 + dead-lettered 5" in result.stdout
    # a long output through a pipe: all of it, as main() writes it in the test's own process
    from evalbeam.pipelines.commands.metrics import metrics_table as _metrics_table

    listed = evalbeam("metrics")
    assert listed.returncode == 0 and listed.stdout == _metrics_table() + "\n"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device whose writes fail")
@pytest.mark.parametrize("buffered", [True, False])
@pytest.mark.parametrize("command", [["validate", "configs/demo.yaml"], ["metrics"]])
def test_output_that_cannot_be_written_is_not_a_success(tmp_path, buffered, command):
    """An output the command could not write (a full disk: /dev/full) ends it
    with status 120 and one line saying so, as Python's own shutdown would,
    whatever main() returned: found when the buffer is flushed at the end, or
    when a write fails inside main() (unbuffered, or an output larger than the
    buffer: `metrics`). Written to a file, the same output ends it with 0."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"PYTHONPATH": str(ROOT)}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    command = [EVALBEAM, *command]
    with open("/dev/full", "w") as full:
        failed = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, timeout=600)
    assert failed.returncode == 120, failed.stderr
    assert failed.stderr.splitlines() == ["evalbeam: could not write the output: [Errno 28] No space left on device"]
    with open(tmp_path / "out.txt", "w") as out:
        written = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, timeout=600)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "out.txt").read_text()
    # started with no stdout at all (`>&-`): nothing to write to, nothing to fail on
    closed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                            timeout=600, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 0 and "Traceback" not in closed.stderr, closed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("buffered", [True, False])
def test_a_reader_gone_before_the_output_ends_the_command_with_status_141(buffered):
    """A pipe whose reader is gone (its end closed before anything is read):
    status 141, as a shell reports a command SIGPIPE ended, and no traceback,
    whether the output is still buffered when main() returns or written as it
    is printed (PYTHONUNBUFFERED)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"PYTHONPATH": str(ROOT)}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([EVALBEAM, "validate", "configs/demo.yaml"], stdout=write_end, stderr=subprocess.PIPE,
                                text=True, cwd=ROOT, env=env, timeout=600)
    finally:
        os.close(write_end)
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


@contextlib.contextmanager
def slow_run(tmp_path, metric: str, flags: list[str], processes: int):
    """A 600-row run whose metric (tests.custom_metrics) takes 50 ms a row, started
    in its own session like a command in a terminal; yields the process once
    `processes` processes are scoring, and kills the session if the test fails."""
    import time

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "response": "x", "reference": "x"}) + "\n" for i in range(600)))
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "name": "slow", "run_id": "slow", "input": {"uri": str(data), "id_column": "id"},
        "metrics": ["exact_match", {"name": metric, "function": f"tests.custom_metrics:{metric}", "inputs": ["response"]}],
        "output": {"parquet": str(tmp_path / "out")}}))
    scoring = tmp_path / "scoring"
    scoring.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALBEAM_TEST_SCORING": str(scoring)}
    # SIGINT at its default, as a shell starts a command in a terminal: a suite run in the
    # background (`nohup make test &`) hands its children SIGINT ignored, and a command started
    # with it ignored rightly keeps ignoring it
    proc = subprocess.Popen([EVALBEAM, "run", str(config), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while len(list(scoring.iterdir())) < processes and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(list(scoring.iterdir())) == processes and proc.poll() is None, "the run did not start scoring"
        yield proc
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_ends_a_run_in_one_line_with_status_130(tmp_path, workers):
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it)
    while every process is scoring: status 130, the last progress line and
    `evalbeam: interrupted`, no traceback from the command or its worker
    processes, and nothing of the run installed."""
    flags = [f"--direct_num_workers={workers}"] + (["--direct_running_mode=multi_processing"] if workers > 1 else [])
    with slow_run(tmp_path, "slow_scoring", flags, workers) as proc:
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert lines[-1] == "evalbeam: interrupted" and lines[-2].endswith("(interrupted)"), err
    assert not (tmp_path / "out" / "slow" / "runs").exists()


@pytest.mark.slow
def test_a_second_ctrl_c_ends_the_command_at_once(tmp_path):
    """A first Ctrl-C that code in the run swallows (a metric here; Beam at some
    moments of starting its workers): the run goes on, and a second one ends the
    command at once, with status 130 and `evalbeam: interrupted`."""
    import time

    with slow_run(tmp_path, "swallows_interrupts", ["--direct_num_workers=1"], 1) as proc:
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(1)
        assert proc.poll() is None  # swallowed: the run goes on
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "evalbeam: interrupted" and "Traceback" not in err, err
    assert not (tmp_path / "out" / "slow" / "runs").exists()


@pytest.mark.slow
def test_a_local_run_goes_to_beams_fnapirunner_and_fetches_nothing(dataset, tmp_path):
    """Beam's DirectRunner first tries Prism, whose binary it downloads from GitHub
    into ~/.apache_beam/cache/prism (and, where it cannot, falls back to the
    FnApiRunner): a local evalbeam run goes to the FnApiRunner directly, so it
    neither fetches nor caches anything, whatever the machine's network."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

    from evalbeam.pipelines.local import new_pipeline

    config, _, _ = dataset
    home = tmp_path / "home"
    home.mkdir()
    result = evalbeam("run", config, env={"HOME": str(home)})
    assert "read 9 = scored 4 + dead-lettered 5" in result.stdout
    assert list(home.iterdir()) == []  # no ~/.apache_beam: Prism was not tried
    for flags in ([], ["--runner=DirectRunner"], ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]):
        assert isinstance(new_pipeline(PipelineOptions(flags)).runner, FnApiRunner), flags
    assert not isinstance(new_pipeline(PipelineOptions(["--runner=PrismRunner"])).runner, FnApiRunner)


def test_version_is_the_installed_distributions():
    import importlib.metadata

    result = evalbeam("--version")
    assert result.stdout == f"evalbeam {importlib.metadata.version('evalbeam')}\n"
    assert importlib.metadata.version("evalbeam") in (ROOT / "setup.py").read_text()  # setup.py's, as pip recorded it


@pytest.mark.slow
@pytest.mark.parametrize("flags,message", [
    (["--num_workers=-3"], "argument --num_workers: must be at least 1, got -3"),
    (["--num_workers=0"], "argument --num_workers: must be at least 1, got 0"),
    (["--max_num_workers=-1"], "argument --max_num_workers: must be at least 1, got -1"),
    (["--num_workers=5", "--max_num_workers=2"], "argument --max_num_workers: must be at least --num_workers (5), got 2"),
    (["--number_of_worker_harness_threads=0"], "argument --number_of_worker_harness_threads: must be at least 1, got 0"),
    (["--disk_size_gb=-10"], "argument --disk_size_gb: must be 0 or more, got -10"),
    (["--direct_num_workers=-2"], "argument --direct_num_workers: must be 0 (one per core) or more, got -2"),
    (["--parallelism=-5"], "argument --parallelism: must be -1 (the runner's default) or at least 1, got -5"),
])
def test_beams_numeric_flags_out_of_range_are_usage_errors(tmp_path, flags, message):
    """Beam passes a count like --num_workers=-3 on to the runner unchecked: refused before
    anything is read (the config here does not even exist), for every command taking Beam flags."""
    commands = [["run", tmp_path / "none.yaml"]]
    if flags == ["--num_workers=-3"]:
        commands += [["compare", "a", "b", "--parquet", tmp_path], ["report", "a", "--compare", "b", "--parquet", tmp_path]]
    for command in commands:
        result = evalbeam(*command, *flags, check=False)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert result.stderr.splitlines()[-1] == f"evalbeam: error: {message}"


@pytest.mark.slow
def test_runs_with_a_config_lists_that_configs_eval_only(dataset, tmp_path):
    config, data, _ = dataset
    other = tmp_path / "other.yaml"
    other.write_text(config.read_text().replace("name: e2e", "name: other-eval").replace("run_id: r1", "run_id: o1"))
    evalbeam("run", config, check=False)  # exits 1: the dataset has bad rows
    evalbeam("run", other, check=False)
    every = evalbeam("runs", "--parquet", tmp_path / "out").stdout
    assert " e2e " in every and " other-eval " in every
    listed = evalbeam("runs", "--config", other).stdout.splitlines()[2:]
    assert [line.split()[:2] for line in listed] == [["o1", "other-eval"]]
    named = evalbeam("runs", "--config", other, "--eval", "e2e").stdout.splitlines()[2:]  # --eval still chooses
    assert [line.split()[:2] for line in named] == [["r1", "e2e"]]



def traced(*args):
    """`evalbeam ARGS` run under `python -X importtime`: the process, and the modules it
    imported (every import it made, logged as made, however it ended)."""
    # without the emulators' variables (the `cloud` fixture sets them for the session): with them,
    # importing evalbeam.transforms routes Beam's clients to the emulators, which imports Beam
    env = {**{k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-X", "importtime", EVALBEAM, *map(str, args)], capture_output=True,
                            text=True, cwd=ROOT, env=env, timeout=600)
    modules = {line.rpartition("|")[2].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "evalbeam.pipelines.cli" in modules, result.stderr  # the trace holds the command's imports
    return result, modules


@pytest.mark.slow
def test_commands_that_run_no_pipeline_do_not_import_beam(tmp_path):
    """A command's module is imported only when it is chosen (pipelines/commands/): the help,
    the metrics and reading a local results folder need no Beam, whose import is most of
    the start-up of a command that does (bench/cli_startup.py)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, status in ([["--help"], 0], [["metrics"], 0], [["runs", "--parquet", empty], 0],
                         [["show", "r1", "--parquet", empty], 1]):
        result, modules = traced(*args)
        assert result.returncode == status, result.stderr
        assert "apache_beam" not in modules, args
    result, modules = traced("run", "--help")  # the trace does see Beam where a command imports it
    assert result.returncode == 0 and "apache_beam" in modules


@pytest.mark.slow
def test_show_and_runs_read_a_run_without_beam(dataset):
    config, _, run_dir = dataset
    evalbeam("run", config, "--direct_num_workers=1", check=False)  # exits 1: the dataset has bad rows
    out = run_dir.parent
    for args in (["show", "r1", "--parquet", out], ["show", "r1", "--json", "--parquet", out], ["runs", "--parquet", out]):
        result, modules = traced(*args)
        assert result.returncode == 0 and "r1" in result.stdout, result.stderr
        assert "apache_beam" not in modules, args

@pytest.mark.slow
def test_a_latin1_csv_is_read_with_input_encoding(tmp_path):
    data = tmp_path / "latin.csv"
    data.write_bytes("id,response,reference\n1,café,café\n2,naïve,naive\n".encode("latin-1"))
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"name": "latin", "run_id": "l1", "input": {"uri": str(data), "id_column": "id"},
                                      "metrics": ["exact_match"], "output": {"parquet": str(tmp_path / "out")}}))
    # as UTF-8 (the default): no row can be read, and the reason says what to set
    refused = evalbeam("validate", config, check=False)
    assert refused.returncode == 2 and "set input.encoding (e.g. latin-1, cp1252, utf-16)" in refused.stderr
    result = evalbeam("run", config, "--set", "input.encoding=latin-1")
    assert "read 2 = scored 2 + dead-lettered 0" in result.stdout
    assert {i["response"] for i in table(tmp_path / "out" / "l1", "instances")} == {"café", "naïve"}
    unknown = evalbeam("validate", config, "--set", "input.encoding=klingon", check=False)
    assert unknown.returncode == 2
    assert "input.encoding: unknown encoding 'klingon': give a codec Python knows" in unknown.stderr


@pytest.mark.slow
def test_a_configs_relative_paths_are_found_from_any_current_folder(tmp_path):
    """The command runs in the repository (tests.helpers); the config, its data and its output
    are in a folder of their own, named relatively in the config."""
    evals = tmp_path / "evals"
    (evals / "data").mkdir(parents=True)
    (evals / "data" / "d.jsonl").write_text(json.dumps({"response": "a", "reference": "a"}) + "\n")
    config = evals / "c.yaml"
    config.write_text("name: rel\nrun_id: r1\ninput: {uri: data/*.jsonl}\nmetrics: [exact_match]\noutput: {parquet: ../out/}\n")
    result = evalbeam("run", config)
    assert "read 1 = scored 1 + dead-lettered 0" in result.stdout
    assert [r["score"] for r in table(tmp_path / "out" / "r1", "metric_results")] == [1.0]
    assert evalbeam("runs", "--config", config).stdout.splitlines()[2].startswith("r1 ")
    config.write_text(config.read_text().replace("data/*.jsonl", "dat/*.jsonl"))
    missing = evalbeam("validate", config, check=False)
    assert missing.returncode == 2
    assert missing.stderr == (f"evalbeam: input.uri: no file matches '{evals}/dat/*.jsonl' ('dat/*.jsonl' in the config "
                              f"file: a relative path there is relative to the config file's folder, '{evals}')\n")


@pytest.mark.slow
def test_make_demo_judge_runs_a_judge_config_against_the_stand_in_and_says_its_scores_mean_nothing(tmp_path):
    """`make demo-judge`: the stand-in started, configs/demo_judge.yaml run against it with no key of the
    user's, the stand-in stopped; the output says twice (first and last) that the scores mean nothing."""
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_API_KEY"}
    result = subprocess.run(["make", "-s", "-o", ".venv/.installed", "demo-judge",
                             f"DEMO_JUDGE_ARGS=--set output.parquet={tmp_path} --set run_id=standin"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    notice = "Its scores are drawn from a hash of each prompt: they mean NOTHING about the responses."
    assert result.stdout.count(notice) == 2 and result.stdout.rstrip().endswith("evalbeam run configs/demo_judge.yaml")
    [run] = table(tmp_path / "standin", "runs")
    assert run["name"] == "demo-judge-agents-stand-in" and run["judge_failures"] == 0
    overall = {s["metric"]: s["valid_count"] for s in table(tmp_path / "standin", "summary") if s["slice"] == "overall"}
    assert {k: overall[k] for k in ("fluency", "safety", "instruction_following", "response_follows_trajectory")} == {
        "fluency": 15, "safety": 15, "instruction_following": 15, "response_follows_trajectory": 15}


@pytest.mark.slow
def test_no_google_credentials_is_a_message_not_a_traceback(tmp_path):
    """`run` with output.bigquery (its run lock), `show --bigquery`: without Google credentials
    google-auth's DefaultCredentialsError was a traceback. It is one line saying what to do,
    status 2, and no path to a key file is needed to read it."""
    data = tmp_path / "d.jsonl"
    data.write_text('{"response": "a", "reference": "a"}\n')
    config = tmp_path / "c.yaml"
    config.write_text(f"name: q\nrun_id: q1\ninput: {{uri: {data}}}\nmetrics: [exact_match]\n"
                      "output: {bigquery: my-project.evals}\n")
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "no-such-key.json"), "BIGQUERY_EMULATOR_HOST": "",
           "STORAGE_EMULATOR_HOST": "", "BIGQUERY_STORAGE_EMULATOR_HOST": ""}
    for args in (("run", config), ("show", "q1", "--bigquery", "my-project.evals")):
        result = evalbeam(*args, check=False, env=env)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("evalbeam: no Google Cloud credentials")
        assert "gcloud auth application-default login" in result.stderr


@pytest.mark.slow
def test_a_cloud_config_without_credentials_fails_in_one_line(tmp_path):
    # no Application Default Credentials anywhere: no key file, no gcloud config, no emulator
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "BIGQUERY_EMULATOR_HOST", "STORAGE_EMULATOR_HOST")}
    env.update(HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), GCE_METADATA_HOST="127.0.0.1:9",
               GCE_METADATA_IP="127.0.0.1:9")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "name": "recorded", "input": {"format": "adk_agent_events", "project": "my-project",
                                      "query": "SELECT * FROM `logs.agent_events`"},
        "metrics": ["tool_call_count_v1"], "output": {"parquet": str(tmp_path / "out")}}))
    result = subprocess.run([EVALBEAM, "validate", str(config)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "no Google Cloud credentials" in result.stderr and "input query in project my-project" in result.stderr


@pytest.mark.slow
def test_an_interrupted_demo_judge_ends_its_run_and_says_how_to_resume_it(tmp_path):
    """Issue 32, item 3: `make demo-judge` interrupted printed a KeyboardInterrupt traceback and
    could leave its evalbeam run going; an interrupted run left its checkpoints in
    _evalbeam_attempts without a word. Ctrl-C (to the process group, as a terminal sends it) ends
    both with status 130 and no traceback; the run says how to resume; `runs` lists what it left
    and --remove-leftovers removes it."""
    import pathlib
    import time

    out = tmp_path / "out"
    # a slow quota (60 calls at 30/min) and a checkpoint every second: interrupted mid-judging
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "python"), "-m", "tests.demo_judge", "configs/demo_judge.yaml",
                             "--set", f"output.parquet={out}", "--set", "judge.requests_per_minute=30",
                             "--set", "judge.checkpoint_seconds=1"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={k: v for k, v in os.environ.items() if k != "GOOGLE_API_KEY"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        checkpoints = out / "_evalbeam_attempts"
        while not any(p.is_file() and "judge_checkpoints" in str(p) for p in checkpoints.rglob("*")) \
                and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert proc.poll() is None, "the demo ended before it was interrupted"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.rstrip().endswith("demo-judge: interrupted; the run it started has ended"), err
    [hint] = [line for line in err.splitlines() if "checkpoint file(s)" in line]
    run_id = hint.split("evalbeam: run ")[1].split()[0]
    assert f"--set run_id={run_id}` resumes it, reusing them; `evalbeam runs --remove-leftovers {run_id}` removes them" \
        in hint
    # nothing of the run is still going: no process names the output folder
    alive = [p for p in pathlib.Path("/proc").glob("[0-9]*") if str(out).encode() in _cmdline(p)]
    assert alive == [], alive
    listed = evalbeam("runs", "--parquet", out).stdout
    assert f"  {run_id}: " in listed and "left by runs that ended early" in listed, listed
    removed = evalbeam("runs", "--parquet", out, "--remove-leftovers", run_id)
    assert removed.stdout.startswith("removed ") and f"left by run_id {run_id}" in removed.stdout
    assert not (out / "_evalbeam_attempts" / run_id).exists()
    assert "left by runs" not in evalbeam("runs", "--parquet", out).stdout
    assert evalbeam("runs", "--parquet", out, "--remove-leftovers", run_id, check=False).returncode == 2


def _cmdline(proc_dir) -> bytes:
    try:
        return (proc_dir / "cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow
def test_make_demo_labels_shows_agreement_with_human_labels_without_a_key(tmp_path):
    """Issue 32, item 7: a try of input.labels without a key existed only through tests/demo_judge.py;
    `make demo-labels` runs configs/demo_labels.yaml against the stand-in, with its calibration table."""
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_API_KEY"}
    result = subprocess.run(["make", "-s", "-o", ".venv/.installed", "demo-labels",
                             f"DEMO_JUDGE_ARGS=--set output.parquet={tmp_path} --set run_id=labels"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "agreement with human labels (input.labels; calibration table):" in result.stdout
    overall = {r["metric"]: r for r in table(tmp_path / "labels", "calibration") if r["slice"] == "overall"}
    # four summaries rated by two annotators, four answers judged by one person; the rest unlabelled
    assert {m: (r["n"], r["unlabelled_count"], r["annotators"]) for m, r in overall.items()} == {
        "evalbeam_summarization_quality": (4, 4, 2), "evalbeam_question_answering_correctness": (4, 4, 1)}
