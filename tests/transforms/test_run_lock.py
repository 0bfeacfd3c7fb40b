"""transforms/run_lock.py on Cloud Storage's own rules: fake-gcs-server (the `fake_gcs` fixture), which
enforces generation preconditions on uploads as Cloud Storage does. The lock's takers race in processes
of their own; whole `evalbeam run`s racing on it are in tests/e2e/test_run_ownership.py."""
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.emulators


def bucket():
    from evalbeam.transforms.local_cloud import storage_client
    from tests.emulators.control import BUCKET, PROJECT

    return storage_client(PROJECT).bucket(BUCKET)


def output(name: str) -> str:
    from tests.emulators.control import BUCKET

    return f"gs://{BUCKET}/{name}/out"


def test_fake_gcs_enforces_preconditions_on_uploads_and_not_on_deletes(fake_gcs):
    """What the other tests rest on, and the one limit they work around: a second create
    (if_generation_match=0) and a write on a stale generation are refused (412); a delete on a stale
    generation is not (so a lock's release reads back before it deletes: release_gcs_lock)."""
    from google.api_core import exceptions

    blob = bucket().blob("probe/x.lock")
    blob.upload_from_string("one", if_generation_match=0)
    first = blob.generation
    with pytest.raises(exceptions.PreconditionFailed):
        bucket().blob("probe/x.lock").upload_from_string("two", if_generation_match=0)
    with pytest.raises(exceptions.PreconditionFailed):
        bucket().blob("probe/x.lock").upload_from_string("two", if_generation_match=first + 1)
    newer = bucket().blob("probe/x.lock")
    newer.upload_from_string("three", if_generation_match=first)
    assert newer.generation != first
    bucket().blob("probe/x.lock").delete(if_generation_match=first)  # Cloud Storage would answer 412
    assert not bucket().blob("probe/x.lock").exists()


TAKER = """
import datetime as dt, json, os, sys, time
from evalbeam.transforms.run_lock import RunIdHeld, RunLock
out, run_id, attempt, barrier, done = sys.argv[1:6]
while not os.path.exists(barrier):
    time.sleep(0.002)
try:
    lock = RunLock(out, run_id, attempt, dt.datetime.now(dt.timezone.utc)).acquire()
except RunIdHeld as e:
    print(json.dumps({"won": False, "message": str(e)}), flush=True)
    sys.exit(2)
print(json.dumps({"won": True, "pid": os.getpid()}), flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(done) and time.monotonic() < deadline:
    time.sleep(0.01)
lock.release()
"""


@pytest.mark.parametrize("round", range(3))
def test_racing_takers_of_one_gs_run_id_exactly_one_wins(fake_gcs, tmp_path, round):
    """Four processes take one gs:// run id's lock at the same moment (a barrier file): exactly one
    holds it, each of the others is refused with the one line naming the holder (host, pid, attempt);
    the holder gives it back and the lock object is gone."""
    from evalbeam.transforms.run_lock import lock_path

    out, barrier, done = output(f"race{round}"), tmp_path / "go", tmp_path / "done"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    takers = [subprocess.Popen([sys.executable, "-c", TAKER, out, "x", f"taker{i}", str(barrier), str(done)],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i in range(4)]
    time.sleep(1.5)  # let each import before the barrier opens (a late one would only lose later)
    barrier.touch()
    try:
        firsts = [json.loads(p.stdout.readline() or "{}") for p in takers]
        winners = [(i, f) for i, f in enumerate(firsts) if f.get("won")]
        assert len(winners) == 1, (firsts, [p.stderr.read() for p in takers if p.poll() is not None])
        [(index, won)] = winners
        holder = json.loads(bucket().blob(lock_path(out, "x").split("/", 3)[3]).download_as_text())
        assert (holder["attempt"], holder["pid"]) == (f"taker{index}", won["pid"])
        for i, first in enumerate(firsts):
            if i != index:
                assert takers[i].wait(60) == 2
                assert first["message"].startswith(
                    f"run_id 'x' is being written by another run (host {socket.gethostname()}, pid {won['pid']}, ")
                assert first["message"].endswith(f"attempt taker{index}); its lock is {lock_path(out, 'x')}")
    finally:
        done.touch()
        for p in takers:
            p.wait(60)
    assert takers[index].returncode == 0
    assert list(bucket().list_blobs(prefix=f"race{round}/")) == []


def test_a_release_keeps_another_runs_newer_lock(fake_gcs, monkeypatch):
    """A holder that stalled past its lease (its lease written an hour ago) has its lock taken over by
    another run (a write conditional on the stale generation); when the stalled one comes back and gives
    its lock back, the newer lock stays. fake-gcs-server deletes whatever the precondition says, so what
    keeps it here is the read-back before the delete (on Cloud Storage the precondition keeps it too)."""
    from evalbeam.transforms import run_lock
    from evalbeam.transforms.run_lock import RunIdHeld, RunLock, lock_path, read_holder

    out = output("stalled")
    real_now = run_lock._now
    monkeypatch.setattr(run_lock, "_now", lambda: real_now() - dt.timedelta(hours=1))
    stalled = RunLock(out, "x", "stalled", real_now()).acquire()  # its lease ran out an hour ago
    monkeypatch.setattr(run_lock, "_now", real_now)
    try:
        newer = RunLock(out, "x", "newer", real_now()).acquire()  # this host, a live pid: the lease decides
        assert read_holder(out, "x")["attempt"] == "newer"
        with pytest.raises(RunIdHeld, match="attempt newer"):
            RunLock(out, "x", "third", real_now()).acquire()
    finally:
        stalled.release()
    assert read_holder(out, "x")["attempt"] == "newer"  # not deleted by the stalled holder's release
    newer.release()
    assert read_holder(out, "x") is None
    assert not bucket().blob(lock_path(out, "x").split("/", 3)[3]).exists()


def test_a_jobs_last_step_gives_back_its_own_lock_and_no_other(fake_gcs):
    """ReleaseRunLock, the last step of a Dataflow job holding its run_id (here on DirectRunner, in a real
    pipeline): the lock naming the job's attempt is deleted; one naming another attempt (a run that took
    it over after the job was seen to end) is kept."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline

    from evalbeam.transforms.run_lock import ReleaseRunLock, lock_path, read_holder

    out = output("joblock")
    path = lock_path(out, "x")
    blob = bucket().blob(path.split("/", 3)[3])
    for attempt, kept in (("jobattempt", False), ("another", True)):
        blob.upload_from_string(json.dumps({"run_id": "x", "attempt": attempt, "job_id": "j-1"}))
        with TestPipeline(runner="DirectRunner") as p:
            _ = p | beam.Create(["x"]) | ReleaseRunLock(path, "jobattempt")
        assert (read_holder(out, "x") is not None) == kept
        assert not kept or read_holder(out, "x")["attempt"] == "another"
