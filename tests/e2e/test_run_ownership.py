"""A run owns its run_id while it writes (issue 21, item 1): real `evalbeam run`
processes started at the same moment (they wait on a barrier file), the final
tables checked row by row, locally and on Cloud Storage (the emulator); and on Cloud Storage's
own preconditions (fake-gcs-server), racing runs and a holder killed mid-run."""
import pytest
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import yaml

from tests.helpers import EVALBEAM, ROOT, evalbeam, table

ROWS = 400


def data_file(path: Path, n=ROWS, tag="") -> Path:
    path.write_text("".join(json.dumps({"id": f"c{i}", "response": f"answer {i}{tag}", "reference": f"answer {i}"}) + "\n"
                            for i in range(n)))
    return path


def config_file(tmp_path: Path, data: Path, output: str, run_id: str | None = "x") -> Path:
    config = {"name": "own", "input": {"uri": str(data), "id_column": "id"},
              "metrics": ["exact_match", "rouge_1"], "output": {"parquet": output}}
    if run_id:
        config["run_id"] = run_id
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def together(tmp_path: Path, args_list) -> list[subprocess.CompletedProcess]:
    """Start one `evalbeam` process per argument list, each waiting on a barrier
    file, release them at once, and wait for all."""
    barrier = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    wait = f'while [ ! -e "{barrier}" ]; do sleep 0.005; done; exec "$0" "$@"'
    procs = [subprocess.Popen(["sh", "-c", wait, "timeout", "600", EVALBEAM, *map(str, args)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for args in args_list]
    barrier.touch()
    results = []
    for p, args in zip(procs, args_list):
        out, err = p.communicate()
        results.append(subprocess.CompletedProcess(args, p.returncode, out, err))
    return results


def check_complete(run_tables, n=ROWS, tag=""):
    """The tables of one whole run of data_file(n, tag), row by row."""
    instances = run_tables("instances")
    assert sorted(i["instance_id"] for i in instances) == sorted(f"c{i}" for i in range(n))
    assert {i["instance_id"]: i["response"] for i in instances} == {f"c{i}": f"answer {i}{tag}" for i in range(n)}
    results = run_tables("metric_results")
    assert sorted((r["instance_id"], r["metric"]) for r in results) == sorted(
        (f"c{i}", m) for i in range(n) for m in ("exact_match", "rouge_1"))
    assert {r["score"] for r in results if r["metric"] == "exact_match"} == {0.0 if tag else 1.0}
    [runs] = run_tables("runs")
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (n, n, 0)
    overall = {s["metric"]: s for s in run_tables("summary") if s["slice"] == "overall"}
    assert overall["exact_match"]["row_count"] == n and overall["exact_match"]["mean"] == (0.0 if tag else 1.0)


def check_outcomes(results, run_id="x"):
    """Each run finished (0) or was refused before any work (2, one line naming the holder)."""
    assert sorted({r.returncode for r in results}) in ([0], [0, 2]), [(r.returncode, r.stderr) for r in results]
    for r in results:
        if r.returncode == 2:
            [line] = r.stderr.splitlines()
            assert line.startswith(f"evalbeam: run_id '{run_id}' is being written by another run (host ")
            assert " pid " in line and "its lock is " in line


@pytest.mark.slow
def test_runs_of_one_run_id_started_together_leave_one_whole_output(tmp_path):
    out = tmp_path / "out"
    config = config_file(tmp_path, data_file(tmp_path / "d.jsonl", tag=" (earlier)"), str(out))
    evalbeam("run", config)
    check_complete(lambda name: table(out / "x", name), tag=" (earlier)")
    data_file(tmp_path / "d.jsonl")
    results = together(tmp_path, [["run", config]] * 3)
    check_outcomes(results)
    check_complete(lambda name: table(out / "x", name))
    assert sorted(os.listdir(out)) == ["x"]  # no attempt and no lock left behind


@pytest.mark.slow
def test_plain_runs_started_in_the_same_second_get_their_own_run_ids(tmp_path):
    out = tmp_path / "out"
    config = config_file(tmp_path, data_file(tmp_path / "d.jsonl", n=20), str(out), run_id=None)
    results = together(tmp_path, [["run", config]] * 2)
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    run_ids = sorted(os.listdir(out))
    assert len(run_ids) == 2 and all(r.startswith("own-20") for r in run_ids)
    for run_id in run_ids:
        check_complete(lambda name: table(out / run_id, name), n=20)
    from evalbeam.configs import load_config

    now = dt.datetime(2026, 11, 25, 13, 0, 0, tzinfo=dt.timezone.utc)
    first, second = (load_config(config).resolved_run_id(now) for _ in range(2))
    assert first != second and first[:-5] == second[:-5] == "own-20261125T130000Z"


@pytest.mark.slow
def test_a_held_run_id_is_refused_before_any_work_and_a_dead_holders_lock_is_taken(tmp_path):
    from evalbeam.transforms.run_lock import RunLock, lock_path

    out = tmp_path / "out"
    config = config_file(tmp_path, data_file(tmp_path / "d.jsonl", n=5), str(out))
    started = dt.datetime.now(dt.timezone.utc)
    with RunLock(str(out), "x", "heldbytest", started):  # this process holds it
        refused = evalbeam("run", config, check=False)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        f"evalbeam: run_id 'x' is being written by another run (host {socket.gethostname()}, pid {os.getpid()}, "
        f"started {started.isoformat()}, attempt heldbytest); its lock is {lock_path(str(out), 'x')}"]
    assert not (out / "x").exists()
    # a killed run's lock (its process gone, so nothing holds the file) and its partial attempt
    dead = out / "_evalbeam_attempts" / "x"
    (dead / "deadattempt" / "instances").mkdir(parents=True)
    (dead / "deadattempt" / "instances" / "part-1.parquet").write_bytes(b"partial")
    Path(lock_path(str(out), "x")).write_text(json.dumps(
        {"run_id": "x", "host": socket.gethostname(), "pid": 999999999, "attempt": "deadattempt"}))
    evalbeam("run", config)
    check_complete(lambda name: table(out / "x", name), n=5)
    assert sorted(os.listdir(out)) == ["x"]


# ------------------------------------------------ Cloud Storage (the emulator)


def gcs_bucket():
    from evalbeam.transforms.local_cloud import storage_client
    from tests.emulators.control import BUCKET, PROJECT

    return storage_client(PROJECT).bucket(BUCKET)


def gcs_tables(prefix):
    import io

    import pyarrow.parquet as pq

    def read(name):
        rows = []
        for blob in gcs_bucket().list_blobs(prefix=f"{prefix}/{name}/"):
            rows += pq.read_table(io.BytesIO(blob.download_as_bytes())).to_pylist()
        return rows
    return read


@pytest.mark.emulators
def test_gcs_runs_of_one_run_id_started_together_leave_one_whole_output(cloud, tmp_path):
    from tests.emulators.control import BUCKET

    output = f"gs://{BUCKET}/own1/out"
    config = config_file(tmp_path, data_file(tmp_path / "d.jsonl", n=50, tag=" (earlier)"), output)
    evalbeam("run", config)
    data_file(tmp_path / "d.jsonl", n=50)
    results = together(tmp_path, [["run", config]] * 2)
    check_outcomes(results)
    check_complete(gcs_tables("own1/out/x"), n=50)
    left = sorted(b.name for b in gcs_bucket().list_blobs(prefix="own1/out/") if not b.name.startswith("own1/out/x/"))
    assert left == []  # no attempt and no lock left behind


@pytest.mark.emulators
def test_gcs_a_live_lease_refuses_and_a_passed_one_is_taken_over(cloud, tmp_path):
    from tests.emulators.control import BUCKET

    output = f"gs://{BUCKET}/own2/out"
    config = config_file(tmp_path, data_file(tmp_path / "d.jsonl", n=5), output)
    lock = gcs_bucket().blob("own2/out/_evalbeam_attempts/x.lock")
    holder = {"run_id": "x", "host": "elsewhere", "pid": 7, "started_at": "2026-11-25T01:00:00+00:00",
              "attempt": "other"}
    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    lock.upload_from_string(json.dumps({**holder, "lease_until": future.isoformat()}))
    refused = evalbeam("run", config, check=False)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "evalbeam: run_id 'x' is being written by another run (host elsewhere, pid 7, started "
        f"2026-11-25T01:00:00+00:00, attempt other); its lock is {output}/_evalbeam_attempts/x.lock"]
    assert not list(gcs_bucket().list_blobs(prefix="own2/out/x/"))
    # the holder was killed: its lease passed, a retry takes the lock over
    past = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
    lock.upload_from_string(json.dumps({**holder, "lease_until": past.isoformat()}))
    evalbeam("run", config)
    check_complete(gcs_tables("own2/out/x"), n=5)
    assert not lock.exists()


# ------------------------------------------------ BigQuery-only output (the emulator)


@pytest.mark.emulators
def test_bigquery_only_a_held_run_id_is_refused_and_a_passed_lease_taken_over(cloud, tmp_path):
    from evalbeam.transforms.local_cloud import bigquery_client
    from tests.emulators.control import BUCKET, PROJECT

    dataset = f"{PROJECT}.own_bq"
    config = tmp_path / "bq.yaml"
    config.write_text(yaml.safe_dump({"name": "own", "run_id": "x", "input": {"uri": str(data_file(tmp_path / "d.jsonl", 5)),
                                      "id_column": "id"}, "metrics": ["exact_match"], "output": {"bigquery": dataset}}))
    flags = [f"--temp_location=gs://{BUCKET}/tmp"]
    evalbeam("run", config, *flags)  # creates the dataset and its lock table, and gives the lock back
    bq = bigquery_client(PROJECT)
    locks = f"`{dataset}._evalbeam_run_locks`"
    assert list(bq.query(f"SELECT * FROM {locks}").result()) == []
    bq.query(f"INSERT INTO {locks} (run_id, attempt, host, pid, started_at, lease_until) VALUES ('x', 'other', "
             "'elsewhere', 7, 'then', TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 1 HOUR))").result()
    bq.query(f"DELETE FROM `{dataset}.instances` WHERE TRUE").result()
    refused = evalbeam("run", config, *flags, check=False)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "evalbeam: run_id 'x' is being written by another run (host elsewhere, pid 7, started then, attempt other); "
        f"its lock is bq://{dataset}._evalbeam_run_locks (run_id 'x')"]
    assert list(bq.query(f"SELECT * FROM `{dataset}.instances`").result()) == []
    # the holder was killed: once its lease has passed, a retry takes the lock over
    bq.query(f"UPDATE {locks} SET lease_until = TIMESTAMP_SUB(CURRENT_TIMESTAMP(), INTERVAL 1 SECOND) "
             "WHERE run_id = 'x'").result()
    evalbeam("run", config, *flags)
    ids = sorted(r["instance_id"] for r in bq.query(f"SELECT instance_id FROM `{dataset}.instances`").result())
    assert ids == sorted(f"c{i}" for i in range(5))
    assert list(bq.query(f"SELECT * FROM {locks}").result()) == []


# ------------------------------------------------ Cloud Storage's preconditions (fake-gcs-server)


def start_runs(tmp_path: Path, config: Path, count: int, scoring: Path) -> list[subprocess.Popen]:
    """`evalbeam run CONFIG` in `count` processes released at once (a barrier file), each the leader of
    its own process group (to be killed whole, with its DirectRunner workers)."""
    barrier = tmp_path / f"go{len(list(tmp_path.glob('go*')))}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALBEAM_TEST_SCORING": str(scoring)}
    wait = f'while [ ! -e "{barrier}" ]; do sleep 0.005; done; exec "$0" "$@"'
    procs = [subprocess.Popen(["sh", "-c", wait, EVALBEAM, "run", str(config)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for _ in range(count)]
    barrier.touch()
    return procs


def wait_for(what, seconds=300):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if what():
            return
        time.sleep(0.1)
    raise AssertionError(f"not seen in {seconds} s: {what.__doc__}")


@pytest.mark.emulators
def test_gcs_preconditions_one_of_racing_runs_holds_the_run_id_and_a_killed_holders_lock_is_taken_over(
        fake_gcs, tmp_path):
    """On Cloud Storage's preconditions (fake-gcs-server), three `evalbeam run`s of one gs:// run id
    started together: exactly one goes on (its rows are being scored), the two others exit 2 before any
    work with the one line naming it (its pid). It is killed mid-run (SIGKILL, its workers with it): a
    new run takes its lock over at once, as locally (this host, the holder's process gone), and goes on.
    (fake-gcs-server answers no batch requests, which a run sends to put its folder in place, so no run
    finishes here: each is killed while it scores.)"""
    from evalbeam.transforms.run_lock import lock_path, read_holder
    from tests.emulators.control import BUCKET

    output = f"gs://{BUCKET}/held/out"
    data = data_file(tmp_path / "d.jsonl", n=3000)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "name": "own", "run_id": "x", "input": {"uri": str(data), "id_column": "id"},
        "metrics": [{"name": "slow_scoring", "function": "tests.custom_metrics:slow_scoring", "inputs": ["response"]}],
        "output": {"parquet": output}}))
    running = []
    try:
        scoring = tmp_path / "scoring1"
        scoring.mkdir()
        running = start_runs(tmp_path, config, 3, scoring)
        wait_for(lambda: sum(p.poll() is not None for p in running) >= 2 and any(scoring.iterdir()))
        [winner] = [p for p in running if p.poll() is None]
        holder = read_holder(output, "x")
        assert holder["pid"] == winner.pid and holder["host"] == socket.gethostname()
        for p in running:
            if p is not winner:
                out, err = p.communicate()
                assert p.returncode == 2, err
                assert err.splitlines() == [
                    f"evalbeam: run_id 'x' is being written by another run (host {socket.gethostname()}, pid "
                    f"{winner.pid}, started {holder['started_at']}, attempt {holder['attempt']}); its lock is "
                    f"{lock_path(output, 'x')}"]
        os.killpg(winner.pid, signal.SIGKILL)  # killed mid-run: its lock stays, its process is gone
        winner.communicate()
        assert read_holder(output, "x")["pid"] == winner.pid
        scoring = tmp_path / "scoring2"
        scoring.mkdir()
        [retry] = running = start_runs(tmp_path, config, 1, scoring)
        wait_for(lambda: any(scoring.iterdir()) or retry.poll() is not None)
        assert retry.poll() is None, retry.communicate()
        taken = read_holder(output, "x")
        assert taken["pid"] == retry.pid and taken["attempt"] != holder["attempt"]
    finally:
        for p in running:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()


@pytest.mark.emulators
def test_a_dataflow_job_holds_its_run_id_after_its_launcher_is_gone_until_it_ends(fake_gcs, tmp_path):
    """A Dataflow run (submitted to a local stand-in for the Dataflow service, tests/servers/dataflow_server.py,
    through Beam's own client; its lock on Cloud Storage's preconditions, fake-gcs-server): the launcher
    takes the lock, submits, hands the lock to the job and exits 0. While the service says the job has not
    ended, a second Dataflow launcher and a local run of the same run_id are refused (2), each with one line
    naming the job and its state; once it has failed, the next launcher takes the lock over and its own job
    holds it."""
    from evalbeam.transforms.run_lock import lock_path, read_holder
    from tests.emulators.control import BUCKET, PROJECT
    from tests.servers.dataflow_server import DataflowServer

    output = f"gs://{BUCKET}/df/out"
    config = config_file(tmp_path, data_file(tmp_path / "d.jsonl", n=5), output)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*flags):
        return subprocess.run([EVALBEAM, "run", str(config), *flags], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600)

    with DataflowServer() as service:
        dataflow = ["--runner=DataflowRunner", f"--project={PROJECT}", "--region=us-central1",
                    f"--temp_location=gs://{BUCKET}/tmp", f"--dataflow_endpoint={service.endpoint}"]
        first = run(*dataflow)
        assert first.returncode == 0, first.stderr
        [job_id] = service.jobs
        assert first.stdout.splitlines() == [f"submitted run x (run date {dt.date.today().isoformat()}) as job {job_id}"]
        holder = read_holder(output, "x")  # the launcher has exited: the job holds it, with no lease
        assert (holder["job_id"], holder["project"], holder["region"]) == (job_id, PROJECT, "us-central1")
        assert "lease_until" not in holder
        for state in ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING"):
            service.state(job_id, state)
            for flags in (dataflow, [f"--dataflow_endpoint={service.endpoint}"]):  # another launcher; a local run
                refused = run(*flags)
                assert refused.returncode == 2, refused.stderr
                assert refused.stderr.splitlines()[-1] == (
                    f"evalbeam: run_id 'x' is being written by Dataflow job {job_id} (project {PROJECT}, region "
                    f"us-central1, {state}; submitted from host {holder['host']}, pid {holder['pid']}, started "
                    f"{holder['started_at']}, attempt {holder['attempt']}); its lock is {lock_path(output, 'x')}")
        assert len(service.jobs) == 1
        service.state(job_id, "JOB_STATE_FAILED")  # its last step never ran: the lock is still there
        retried = run(*dataflow)
        assert retried.returncode == 0, retried.stderr
        [second] = set(service.jobs) - {job_id}
        taken = read_holder(output, "x")
        assert taken["job_id"] == second and taken["attempt"] != holder["attempt"]
