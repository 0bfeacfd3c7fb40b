"""The Beam side of deployed agents (transforms/deployed.py, transforms/inference.py's DeployedInferFn): whole
`evalbeam run`s with inference.agent_engine against the stand-in (tests/servers/agent_engine_server.py), killed
and run again, or on a disk that fills: the finished cases are checkpointed (CheckpointedInferrer), reused by a
re-run, and never lost or half written."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.agent_cases import ENGINE, engine_stand_in
from tests.helpers import ROOT, fill_disk, small_disk


@pytest.fixture
def engine_env(tmp_path, monkeypatch):
    with engine_stand_in(tmp_path, monkeypatch) as engine:
        yield engine


def engine_config(tmp_path, engine, n_cases, run_id="r1", judge=None, **inference):
    import yaml

    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps({"id": f"c{i:03d}", "prompt": f"case {i} #call=get_weather{{\"city\": \"Oslo\"}}",
                                        "reference": 'Done: {"celsius": -3, "city": "Oslo"}'}) + "\n"
                            for i in range(n_cases)))
    config = {"name": "engine", "run_id": run_id, "input": {"uri": str(data), "id_column": "id"},
              "inference": {"agent_engine": ENGINE, "base_url": engine.url, **inference},
              "metrics": ["exact_match"], "output": {"parquet": str(tmp_path / "out")}, **({"judge": judge} if judge else {})}
    path = tmp_path / f"engine-{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_a_whole_run_on_agent_engine_killed_and_rerun_repeats_only_unsaved_cases(tmp_path, engine_env):
    """`evalbeam run` with inference.agent_engine, killed once some finished cases are checkpointed, then run
    again with the same run_id: the checkpointed cases are not sent again (counted at the stand-in), every
    case is scored once, and the counts reconcile."""
    import os
    import signal
    import time as clock

    from evalbeam.metrics.agents.deployed import case_key
    from evalbeam.transforms.judge_checkpoint import read_checkpoints
    from tests.helpers import EVALBEAM, evalbeam, table

    engine = engine_env
    engine.latency = 0.05
    engine.hold_after = 8  # the first run cannot finish: the 9th turn on waits until it is killed
    n = 30
    # checkpoints every second (judge.checkpoint_seconds, at most 30: what a killed run may repeat)
    config = engine_config(tmp_path, engine, n, judge={"checkpoint_seconds": 1}, max_concurrency=2)
    checkpoints = tmp_path / "out" / "_evalbeam_attempts" / "r1" / "judge_checkpoints" / "inference"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([EVALBEAM, "run", str(config)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    saved: dict = {}
    try:
        while first.poll() is None and len(saved) < 8:  # wait for the answered cases to be on disk
            clock.sleep(0.2)
            saved = read_checkpoints(str(checkpoints))
        assert first.poll() is None, first.communicate()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    engine.hold_after = None
    engine.release.set()  # the killed run's held requests are answered into the void
    while engine.stats.in_flight:
        clock.sleep(0.1)
    asked_first = sum(engine.stats.messages.values())
    saved = read_checkpoints(str(checkpoints))
    assert len(saved) == 8 and asked_first < n
    run = evalbeam("run", config)
    assert f"read {n} = scored {n} + dead-lettered 0" in run.stdout
    # the re-run asked every case but the checkpointed ones, once each
    keys = {case_key("agent_engine", ENGINE, f"c{i:03d}", {"prompt": f"case {i} #call=get_weather{{\"city\": \"Oslo\"}}"})
            for i in range(n)}
    assert set(saved) <= keys
    assert sum(engine.stats.messages.values()) - asked_first == n - len(saved)
    # so only the cases the killed run finished after its last checkpoint (or left in flight) were asked twice
    assert sum(engine.stats.messages.values()) == n + asked_first - len(saved)
    rows = [r for r in table(tmp_path / "out" / "r1", "metric_results") if r["metric"] == "exact_match"]
    assert len(rows) == n and all(r["score"] == 1.0 for r in rows)
    assert not checkpoints.exists()  # gone with the run's attempts


@pytest.mark.slow
def test_a_full_disk_while_inference_checkpoints_ends_the_run_with_120_in_one_line(tmp_path, engine_env):
    """Issue 32: a full disk was not tried against the inference checkpoints. A run on Agent Engine whose
    output (and so its checkpoint folder) is on a real small filesystem (a tmpfs: CI runs as root), filled
    once the first cases are checkpointed: the next chunk cannot be written, so the run ends (the agent is
    asked no more) with status 120 and one line, no traceback; no run is installed, no partial chunk is
    left, and what is left is the checkpoints written before, whole (a re-run reuses them)."""
    import os
    import re
    import time as clock

    from evalbeam.transforms.judge_checkpoint import read_checkpoints
    from tests.helpers import EVALBEAM, table

    with small_disk(tmp_path, "1m") as disk:
        engine = engine_env
        engine.latency = 0.3
        engine.hold_after = 8  # the 9th turn on waits: the disk is filled meanwhile
        n = 30
        config = engine_config(tmp_path, engine, n, judge={"checkpoint_seconds": 1}, max_concurrency=2)
        out = disk / "out"
        config.write_text(config.read_text().replace(str(tmp_path / "out"), str(out)))
        checkpoints = out / "_evalbeam_attempts" / "r1" / "judge_checkpoints" / "inference"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        run = subprocess.Popen([EVALBEAM, "run", str(config)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            saved: dict = {}
            deadline = clock.monotonic() + 300
            while run.poll() is None and len(saved) < 8 and clock.monotonic() < deadline:
                clock.sleep(0.2)
                saved = read_checkpoints(str(checkpoints))
            assert run.poll() is None and len(saved) == 8, run.communicate()
            fill_disk(disk)  # the disk, full
            engine.hold_after = None
            engine.release.set()
            stdout, stderr = run.communicate(timeout=300)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        assert run.returncode == 120, stdout + stderr
        assert "Traceback" not in stderr and "ERROR" not in stderr, stderr
        assert re.fullmatch(rf"evalbeam: could not write the output under {re.escape(str(out))}\S*: \[Errno 28\] No space "
                            r"left on device \(in step [\w/]*InferDeployed\w*\); this run's partial files were removed and "
                            r"the previous output of run_id r1, if any, is as it was", stderr.splitlines()[-1]), stderr
        assert stdout == ""  # no summary, no "results:": nothing claimed as written
        # the agent was asked no more once the chunk failed: not every case
        assert sum(engine.stats.messages.values()) < n
        # no run installed; left: the whole chunks written before the disk filled, no partial file
        assert not (out / "r1").exists()
        left = sorted(p.name for p in checkpoints.iterdir())
        assert left and not [name for name in left if name.endswith(".tmp") or name.startswith(".")], left
        assert read_checkpoints(str(checkpoints)) == saved
        # room again: the re-run reuses them and asks the agent only the other cases
        (disk / "filler").unlink()
        asked = sum(engine.stats.messages.values())
        again = subprocess.run([EVALBEAM, "run", str(config)], env=env, cwd=ROOT, capture_output=True, text=True,
                               timeout=600)
        assert again.returncode == 0, again.stdout + again.stderr
        assert sum(engine.stats.messages.values()) - asked == n - len(saved)
        assert len([r for r in table(out / "r1", "metric_results") if r["metric"] == "exact_match"]) == n
