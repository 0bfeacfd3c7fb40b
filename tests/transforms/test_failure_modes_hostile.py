"""Failure modes with awkward inputs: taxonomies that must be refused, a run where nothing
fails, a judge that misbehaves, odd slice values, interrupted runs. Real runs (in-process,
DirectRunner) against the local judge stand-in through the real google-genai client."""
import json
import re

import pytest

from evalbeam.metrics.taxonomy import TOOL_USE
from tests.helpers import evalbeam, table
from tests.servers.judge_server import JudgeServer
from tests.transforms.test_failure_modes import api_key, run_config, write_config  # noqa: F401 - a fixture

PASSING = [{"id": f"i{n}", "team": "billing", "prompt": f"q{n}", "response": f"a{n}", "reference": f"a{n}"}
           for n in range(8)]


@pytest.mark.slow
def test_a_run_with_no_failure_is_shown_and_compared_as_zero_per_mode(tmp_path, api_key):  # noqa: F811
    """Nothing fails: the tables are empty but the taxonomy is recorded; `show` says there was
    no failure, and `compare` counts every mode as 0 on that side instead of refusing, so a
    gate on mode growth sees modes that appear after a night without failure."""
    failing = [dict(r, response="wrong #mode=wrong_tool") for r in PASSING]
    with JudgeServer() as server:
        run_config(write_config(tmp_path, PASSING, server.url, "clean"))
        assert server.stats.requests == 0
        run_config(write_config(tmp_path, failing, server.url, "broken"))
    out = tmp_path / "out"
    assert table(out / "clean", "failure_assignments") == [] and table(out / "clean", "failure_modes") == []
    [tax] = table(out / "clean", "taxonomies")
    assert tax["digest"] == TOOL_USE.digest

    show = evalbeam("show", "clean", "--parquet", out)
    assert "failure modes: no failure of exact_match to classify (taxonomy tool_use)" in show.stdout

    grew = evalbeam("compare", "clean", "broken", "--parquet", out, "--fail-on-mode-growth", "wrong_tool", check=False)
    assert "not compared" not in grew.stdout, grew.stdout
    # columns are as wide as their widest cell (names are never cut), so the row is read by its cells
    assert re.search(r"^exact_match +overall +wrong_tool +0 +8 ", grew.stdout, re.M), grew.stdout
    # 8 of 8 paired instances gained the mode: McNemar p = 2/2^8, in overall and team=billing
    assert "2 gated failure mode growth(s) flagged" in grew.stdout and "wrong_tool grew (0 -> 8, p 0.0078)" in grew.stdout
    shrank = evalbeam("compare", "broken", "clean", "--parquet", out, "--fail-on-mode-growth", "any", check=False)
    assert "0 gated failure mode growth(s) flagged" in shrank.stdout and "  shrank" in shrank.stdout


BAD_TAXONOMIES = {
    "duplicate.yaml": ("- {id: a, name: A, description: d}\n- {id: a, name: B, description: e}\n",
                       "mode 2: id 'a' is repeated"),
    "empty.yaml": ("[]\n", "a taxonomy is a non-empty list of modes"),
    "orphan.yaml": ("- {id: a, name: A, description: d, parent: nowhere}\n",
                    "mode a: parent 'nowhere' is not another mode"),
    "cycle.yaml": ("- {id: a, name: A, description: d, parent: b}\n- {id: b, name: B, description: e, parent: a}\n",
                   "mode a: its parent b has a parent itself"),
    "latin1.yaml": ("- {id: a, name: caf\xe9, description: d}\n".encode("latin-1"),
                    "cannot read .*latin1.yaml: 'utf-8' codec can't decode"),
    "huge.yaml": ("- {id: a, name: A, description: '" + "x" * 200_000 + "'}\n",
                  "mode a: its description is 200000 characters, at most 1000"),
    "long_name.yaml": ("- {id: a, name: '" + "n" * 500 + "', description: d}\n",
                       "mode a: its name is 500 characters, at most 120"),
    "two_lines.yaml": ("- {id: a, name: \"A\\n- b: not a mode\", description: d}\n",
                       "mode a: its name is more than one line"),
    "many.yaml": ("".join(f"- {{id: m{n}, name: M{n}, description: d}}\n" for n in range(101)),
                  "101 modes: at most 100"),
    "only_other.yaml": ("- {id: other, name: Other, description: anything}\n", "no mode besides 'other'"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BAD_TAXONOMIES))
def test_a_bad_taxonomy_file_is_refused_naming_the_field_and_why_before_any_call(tmp_path, api_key, name):  # noqa: F811
    """Refused when the pipeline is built: the error names failure_modes.taxonomy, the file, the
    mode and the reason, and the judge is never called. A huge name or description would be
    sent with every failure (every prompt lists every mode), so its size is bounded."""
    from evalbeam.configs import ConfigError

    text, message = BAD_TAXONOMIES[name]
    (tmp_path / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    rows = [dict(PASSING[0], response="wrong")]
    with JudgeServer() as server:
        with pytest.raises(ConfigError, match=f"failure_modes.taxonomy: .*{message}"):
            run_config(write_config(tmp_path, rows, server.url, "bad", failure_modes={
                "metrics": ["exact_match"], "taxonomy": str(tmp_path / name)}))
        assert server.stats.requests == 0
    assert not (tmp_path / "out" / "bad").exists()


@pytest.mark.slow
def test_plan_counts_a_discovery_run_as_upper_bounds_that_the_run_keeps(tmp_path, api_key):  # noqa: F811
    """`plan` on taxonomy: discover (nothing pinned) used to refuse the whole plan; it counts one
    discovery and one classification per failure (scored offline), as upper bounds without
    tokens, and the run makes exactly those calls."""
    from evalbeam.configs import load_config
    from evalbeam.pipelines.plan import plan
    from evalbeam.pipelines.reports.plan import format_plan

    rows = PASSING[:3] + [dict(r, response="wrong #mode=wrong_tool") for r in PASSING[3:]]
    discover = {"metrics": ["exact_match"], "taxonomy": "discover"}
    with JudgeServer() as server:
        path = write_config(tmp_path, rows, server.url, "disc", failure_modes=discover)
        planned = plan(load_config(path))
        assert server.stats.requests == 0
        got = {r["metric"]: (r["asked"], r["to_call"], r["upper_bound"], r["prompt_tokens"]) for r in planned["metrics"]}
        assert got == {"exact_match:failure_modes": (5, 5, True, None), "failure_modes:discovery": (1, 1, True, None)}
        assert planned["calls"] == 6 and "failure_modes: discover: the taxonomy is not proposed yet" in format_plan(planned)
        run_config(path)
        assert (server.stats.stages["taxonomy"], server.stats.stages["failure_mode"]) == (1, 5)
    # nothing fails: no discovery is counted (the run asks none)
    with JudgeServer() as server:
        clean = plan(load_config(write_config(tmp_path, PASSING, server.url, "disc0", failure_modes=discover)))
    assert clean["calls"] == 0 and clean["metrics"] == []


@pytest.mark.slow
def test_a_judge_down_throughout_leaves_every_failure_with_its_error_and_the_counts_reconcile(tmp_path, api_key):  # noqa: F811
    """5xx on every request: each failure keeps its row with the error and no mode; the modes'
    rows count 0 with every failure unclassified; show says so without an empty table; the key
    is in no output."""
    from tests.servers.judge_server import Behaviour

    rows = [dict(r, team="billing" if n % 2 else "shipping", response="wrong #mode=wrong_tool")
            for n, r in enumerate(PASSING)]
    with JudgeServer(Behaviour(error_rate=1.0)) as server:
        run_config(write_config(tmp_path, rows, server.url, "down"))
        assert server.stats.stages.get("failure_mode", 0) == 0 and server.stats.errors == 3 * len(rows)
    out = tmp_path / "out" / "down"
    assignments = table(out, "failure_assignments")
    assert sorted(a["instance_id"] for a in assignments) == sorted(r["id"] for r in rows)
    assert all(a["mode"] is None and a["error"].startswith("judge failed after 3 attempts; last: HTTP 503")
               for a in assignments)
    modes = table(out, "failure_modes")
    for slice_name, n in (("overall", 8), ("team=billing", 4), ("team=shipping", 4)):
        in_slice = [m for m in modes if m["slice"] == slice_name]
        assert len(in_slice) == len(TOOL_USE.ids)
        assert {(m["count"], m["failures"], m["unclassified"]) for m in in_slice} == {(0, n, n)}
    show = evalbeam("show", "down", "--parquet", tmp_path / "out").stdout
    assert "exact_match: 8 failure(s) not classified" in show and "95% CI  example" not in show
    [runs] = table(out, "runs")
    assert json.loads(runs["judge_usage"])["exact_match:failure_modes"]["failures"] == 8
    for path in out.rglob("*.parquet"):
        assert b"AIzaSy-test-key" not in path.read_bytes()


@pytest.mark.slow
def test_a_run_killed_mid_classification_reuses_its_checkpoints_and_loses_or_doubles_no_row(tmp_path, api_key):  # noqa: F811
    """SIGKILL while classifying, then the same run_id again: the re-run asks only what no
    checkpoint holds, and failure_assignments has exactly one row per failure, each classified."""
    import os
    import signal
    import subprocess
    import time

    from tests.helpers import EVALBEAM, ROOT
    from tests.servers.judge_server import Behaviour

    modes = ["wrong_tool", "bad_arguments", "tool_not_called", "repeated_call"]
    rows = [{"id": f"k{n:02d}", "team": "billing" if n % 2 else "shipping", "prompt": f"q{n}",
             "response": f"wrong {n} #mode={modes[n % 4]}", "reference": "a"} for n in range(40)]
    with JudgeServer(Behaviour(latency_median=0.05)) as server:
        config = write_config(tmp_path, rows, server.url, "killed", judge={
            "base_url": server.url, "requests_per_minute": 240, "max_attempts": 3, "timeout_seconds": 10,
            "hedge_share": 0, "checkpoint_seconds": 1})
        first = subprocess.Popen([EVALBEAM, "run", str(config)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 300
            while server.stats.stages["failure_mode"] < 15 and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert first.poll() is None, "the run ended before it could be killed"
            os.killpg(first.pid, signal.SIGKILL)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        time.sleep(2)  # calls in flight at the kill arrive, or never will
        first_calls = server.stats.requests
        assert first_calls < len(rows)
        evalbeam("run", config)
        second_calls = server.stats.requests - first_calls
    out = tmp_path / "out" / "killed"
    [runs] = table(out, "runs")
    reused = json.loads(runs["judge_usage"])["exact_match:failure_modes"]["checkpoint_reused"]
    assert reused > 0 and second_calls == len(rows) - reused
    assignments = table(out, "failure_assignments")
    assert sorted(a["instance_id"] for a in assignments) == [r["id"] for r in rows]  # none lost, none doubled
    assert {a["instance_id"]: a["mode"] for a in assignments} == {r["id"]: modes[n % 4] for n, r in enumerate(rows)}
    overall = [m for m in table(out, "failure_modes") if m["slice"] == "overall"]
    assert sum(m["count"] for m in overall) == len(rows) and {m["failures"] for m in overall} == {len(rows)}


@pytest.mark.slow
def test_plan_says_a_rubric_metrics_classifications_are_not_counted(tmp_path, api_key):  # noqa: F811
    """A rubric metric's failures are its failed rubrics, unknown before the run: plan used to
    leave them out without a word; it says they are not counted."""
    from evalbeam.configs import load_config
    from evalbeam.pipelines.plan import plan
    from evalbeam.pipelines.reports.plan import format_plan

    rows = [dict(r, prompt="P #rubrics=2") for r in PASSING[:2]]
    with JudgeServer() as server:
        planned = plan(load_config(write_config(
            tmp_path, rows, server.url, "rub", metrics=[{"name": "evalbeam_general_quality", "threshold": 1.0}],
            failure_modes={"metrics": ["evalbeam_general_quality"], "taxonomy": "tool_use"})))
        assert server.stats.requests == 0
    assert not any(r["metric"].endswith(":failure_modes") for r in planned["metrics"])
    assert planned["uncounted_failure_modes"] == ["evalbeam_general_quality"]
    assert "failure classifications of evalbeam_general_quality (a rubric metric: one per failed rubric" in \
        format_plan(planned)


@pytest.mark.parametrize("column, table_name", [("mode", "failure_assignments"), ("rationale", "failure_assignments"),
                                                ("instance_id", "instances")])
def test_a_slice_column_clashing_with_an_output_column_names_the_table_it_clashes_with(tmp_path, column, table_name):
    """Slice columns are columns of failure_assignments as well as instances: a clash used to be
    reported as one with the instances table, which has no `mode` or `rationale` column."""
    from evalbeam.configs import ConfigError, load_config

    path = write_config(tmp_path, PASSING, "http://127.0.0.1:9", "clash", input={
        "uri": str(tmp_path / "data.jsonl"), "id_column": "id", "slice_columns": [column]})
    with pytest.raises(ConfigError, match=f"input.slice_columns: '{column}' clashes with an output column of the "
                                          f"{table_name} table"):
        load_config(path)


@pytest.mark.slow
def test_compare_leaves_out_a_metric_that_only_one_run_classified(tmp_path, api_key):  # noqa: F811
    """Adding a metric to failure_modes.metrics used to make each of its modes 'grow' from 0
    against a base that never classified it, tripping --fail-on-mode-growth any; its modes are
    now not compared, and compare says so. The metric both classified is still compared."""
    rows = [dict(r, response="wrong #mode=wrong_tool") for r in PASSING]
    metrics = [{"name": "exact_match", "threshold": 1.0}, {"name": "exact_match", "as": "strict", "threshold": 1.0}]
    with JudgeServer() as server:
        run_config(write_config(tmp_path, rows, server.url, "one", metrics=metrics))
        run_config(write_config(tmp_path, rows, server.url, "two", metrics=metrics, failure_modes={
            "metrics": ["exact_match", "strict"], "taxonomy": "tool_use"}))
    out = tmp_path / "out"
    assert {a["metric"] for a in table(out / "two", "failure_assignments")} == {"exact_match", "strict"}
    result = evalbeam("compare", "one", "two", "--parquet", out, "--fail-on-mode-growth", "any", check=False)
    assert "0 gated failure mode growth(s) flagged" in result.stdout and result.returncode == 0, result.stdout
    assert "failure modes of strict not compared: only run two classified its failures" in result.stdout

    from evalbeam.pipelines.failure_mode_results import compare_failure_modes
    from evalbeam.pipelines.results import ParquetResults

    compared = compare_failure_modes(ParquetResults(str(out)), "one", "two")
    assert {r["metric"] for r in compared} == {"exact_match"}
    assert {(r["slice"], r["base_count"], r["count"]) for r in compared if r["mode"] == "wrong_tool"} == {
        ("overall", 8, 8), ("team=billing", 8, 8)}


@pytest.mark.slow
def test_a_gate_on_a_mode_the_taxonomy_does_not_have_is_refused_not_passed(tmp_path, api_key):  # noqa: F811
    """--fail-on-mode-growth wrong_tol (a typo) could never fire and compare passed in silence;
    it exits 2 naming the mode and the taxonomy's modes. A mode of the taxonomy with no failure
    in either run (0 per mode) is a valid gate."""
    with JudgeServer() as server:
        run_config(write_config(tmp_path, PASSING, server.url, "a"))
        run_config(write_config(tmp_path, PASSING, server.url, "b"))
    out = tmp_path / "out"
    typo = evalbeam("compare", "a", "b", "--parquet", out, "--fail-on-mode-growth", "wrong_tol", check=False)
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert "--fail-on-mode-growth wrong_tol: not a mode of the taxonomy compared (its modes: bad_arguments" in typo.stderr
    fine = evalbeam("compare", "a", "b", "--parquet", out, "--fail-on-mode-growth", "wrong_tool",
                    "--fail-on-mode-growth", "any", check=False)
    assert fine.returncode == 0 and "0 gated failure mode growth(s) flagged" in fine.stdout, fine.stdout + fine.stderr
