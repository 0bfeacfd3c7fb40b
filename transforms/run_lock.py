"""A run owns its run_id while it writes: a lock beside the run's attempts.

    <output.parquet>/_evalbeam_attempts/<run_id>.lock

holds, as JSON, who took it: host, pid, the run's start time and its attempt.
A second run of the same run_id finds it held and is refused before any work
(RunIdHeld, which the command says as one line naming the holder, status 2).

Local files: the lock is created under a temporary name, locked with flock and
only then linked to its name (link fails when the name exists): so a lock that
exists is always flock-ed by a live holder, and the operating system drops
that flock when the holder dies, however it dies (SIGKILL, out of memory).
A run that finds a lock it can flock took it from a dead run on this host and
writes itself into it. A lock written on another host (a shared filesystem,
where flock may not reach) counts as held while its holder refreshes it: its
modification time is touched every LEASE_SECONDS / 4; one not touched for
LEASE_SECONDS is stale.

Cloud Storage: the lock object is created with if_generation_match=0 (it fails
when the object exists), its `lease_until` rewritten every LEASE_SECONDS / 4
with if_generation_match=<the generation it wrote>; one whose lease has passed
is stale and taken over by a write conditional on that generation, so two
retries cannot both take it. After writing, the run reads the lock back and
proceeds only if it is its own: on a store that ignores preconditions
(gcp-storage-emulator, which `make emulators` runs) that narrows, without
closing, the window in which two runs started in the same milliseconds could
both pass. Given back, the lock is read back and deleted only if it is still
the generation its holder wrote (release_gcs_lock), with that generation as the
delete's precondition. tests/transforms/test_run_lock.py runs these rules on
fake-gcs-server, which enforces preconditions on uploads (not on deletes).

input.since: last_run (transforms.since): a run that reads "what arrived since the eval's last
completed run" also takes its eval's window lock, <output.parquet>/_evalbeam_attempts/<name>@since.lock
(a row keyed <name>@since for BigQuery-only outputs), by the same rules, before it plans its window,
and gives it back once its runs row (the window's end, which the next run starts from) is written:
two runs of one eval at once would read the same window twice, so the second is refused, naming the
first. ('@' is in no run_id: the two kinds of lock never meet.)

A killed run's retry: locally the flock went with the dead process, so the retry
takes the lock at once. On Cloud Storage (and BigQuery) a retry on the same host
takes it at once too when the holder's process is gone (its pid no longer runs, or
runs a process started at another time); a retry elsewhere (another Airflow
worker, a CI machine) is refused until the dead run's lease passes (LEASE_SECONDS
after its last refresh), then takes it.

Dataflow (Parquet on gs://): the job owns the run_id. Its launcher takes the lock
as above, recording the job's project and region, and holds it (its lease
refreshed) while it submits; once the service has the job, it rewrites the lock
with the job's id and no lease, and leaves it (hand_to_job): the job keeps it
after its launcher is gone. The job's last step gives it back (ReleaseRunLock,
after its folder is put in place), deleting it only if it still names the job's
attempt. A lock naming a job is held while Dataflow says the job has not ended
(its state read through google-cloud-dataflow-client, which Beam's runner uses,
from the endpoint the run's --dataflow_endpoint names); a job that failed or was
cancelled never reaches its last step, and its lock is taken over by the next run
(a write conditional on the lock's generation, as for a passed lease). A state
that cannot be read (no permission, no network) counts as held, saying so. Other
remote runners are not locked: nothing would hold the lock while their job runs.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import socket
import tempfile
import threading

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from evalbeam.transforms.local_cloud import bigquery_client, dataflow_jobs_client, storage_client

LOCK_SUFFIX = ".lock"
ATTEMPTS = "_evalbeam_attempts"
# How long a lock stays held without its holder refreshing it (another host's
# local lock; a Cloud Storage lease). A retry of a killed run waits at most this.
LEASE_SECONDS = float(os.environ.get("EVALBEAM_LOCK_LEASE_SECONDS") or 120)


class RunIdHeld(RuntimeError):
    """The run_id is being written by another run; the message names it."""


WINDOW_SUFFIX = "@since"


def lock_path(output: str, run_id: str) -> str:
    return FileSystems.join(output, ATTEMPTS, run_id + LOCK_SUFFIX)


def window_lock_path(output: str, name: str) -> str:
    """The lock of an eval's input.since window (see the module's docstring)."""
    return lock_path(output, name + WINDOW_SUFFIX)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _process_start(pid: int) -> str | None:
    """When a process started (Linux: /proc/<pid>/stat's starttime), to tell it from a
    later process given the same pid; None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def holder_gone(holder: dict) -> bool:
    """Whether a lock's holder is known to be dead: it ran on this host and its process
    is gone (or the pid is now another process's). Another host's holder is never
    known gone: its lease says."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    pid = holder["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    started = holder.get("pid_start")
    return bool(started) and _process_start(pid) not in (None, started)


def _holder_text(holder: dict, path: str) -> str:
    who = (f"host {holder.get('host')}, pid {holder.get('pid')}, started {holder.get('started_at')}, "
           f"attempt {holder.get('attempt')}")
    if holder.get("window_of"):
        reader = f"run {holder['reader']!r}" if holder.get("reader") else "another run"
        return (f"the window of eval {holder['window_of']!r} (input.since: last_run) is being read by {reader} "
                f"({who}): a second run at once would read it again; its lock is {path}")
    return f"run_id {holder.get('run_id')!r} is being written by another run ({who}); its lock is {path}"


# The states of a Dataflow job that has ended: its lock is taken over. Any other state (queued,
# pending, running, cancelling, draining, cleaning up its resources) holds the run_id.
JOB_ENDED = frozenset({"JOB_STATE_DONE", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_DRAINED"})
JOB_NOT_FOUND = "JOB_STATE_NOT_FOUND"  # not a state of Dataflow's: the service knows no such job there


def dataflow_job_state(endpoint: str | None = None):
    """holder -> the state of the Dataflow job a lock names (JOB_STATE_RUNNING, ...; JOB_NOT_FOUND when the
    service has no such job in its project and region), asked of the service at `endpoint` (a run's
    --dataflow_endpoint; Dataflow's own when None). Raises what the client raises otherwise."""
    def state(holder: dict) -> str:
        from google.api_core import exceptions  # start-up time: Google Cloud clients only where used
        from google.cloud import dataflow_v1beta3  # start-up time: Google Cloud clients only where used

        request = dataflow_v1beta3.GetJobRequest(project_id=holder["project"], location=holder["region"],
                                                 job_id=holder["job_id"], view=dataflow_v1beta3.JobView.JOB_VIEW_SUMMARY)
        try:
            job = dataflow_jobs_client(endpoint).get_job(request=request, timeout=60)
        except exceptions.NotFound:
            return JOB_NOT_FOUND
        return dataflow_v1beta3.JobState(job.current_state).name
    return state


def _job_holder_text(holder: dict, state: str, path: str) -> str:
    return (f"run_id {holder.get('run_id')!r} is being written by Dataflow job {holder.get('job_id')} (project "
            f"{holder.get('project')}, region {holder.get('region')}, {state}; submitted from host "
            f"{holder.get('host')}, pid {holder.get('pid')}, started {holder.get('started_at')}, attempt "
            f"{holder.get('attempt')}); its lock is {path}")


def read_holder(output: str, run_id: str) -> dict | None:
    """Who holds the run_id's lock (its JSON), or None when there is none."""
    path = lock_path(output, run_id)
    try:
        if FileSystems.get_scheme(path) is None:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        else:
            blob = _blob(path)
            if not blob.exists():
                return None
            text = blob.download_as_text()
        return json.loads(text) if text.strip() else {}
    except FileNotFoundError:
        return None
    except ValueError:
        return {}


class RunLock:
    """The lock of one run_id, taken by acquire() and given back by release()."""

    def __init__(self, output: str, run_id: str, attempt: str, started_at: dt.datetime,
                 job: dict | None = None, job_state=None, window_of: str | None = None):
        """job: for a launcher whose job will hold the lock (Dataflow), {"runner", "project", "region"},
        recorded in the lock; job_state: holder -> the state of the job a lock names
        (dataflow_job_state), for a lock found naming one; window_of: an eval's name: the lock of its
        input.since window (window_lock_path), taken by run `run_id`, instead of the run_id's."""
        self.path = window_lock_path(output, window_of) if window_of else lock_path(output, run_id)
        self.run_id = window_of + WINDOW_SUFFIX if window_of else run_id
        self.holder = {"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
                       "pid_start": _process_start(os.getpid()), "started_at": started_at.isoformat(),
                       "attempt": attempt, **(job or {}),
                       **({"window_of": window_of, "reader": run_id} if window_of else {})}
        self._job_state = job_state
        self._local = FileSystems.get_scheme(self.path) is None
        self._fd = None
        self._generation = None
        self._stop = threading.Event()
        self._refresher = None
        self.lost = False

    # ------------------------------------------------------------------ local

    def _acquire_local(self) -> None:
        import fcntl  # POSIX only: the local run lock

        folder = os.path.dirname(self.path)
        os.makedirs(folder, exist_ok=True)
        for _ in range(5):
            try:
                fd, temp = tempfile.mkstemp(prefix=".lock-", dir=folder)
            except FileNotFoundError:  # the folder was removed by a run giving its lock back
                os.makedirs(folder, exist_ok=True)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                _write_fd(fd, self.holder)
                try:
                    os.link(temp, self.path)  # fails when a lock exists: only one run links its own
                    self._fd = fd
                    return
                except FileExistsError:
                    os.close(fd)
            finally:
                os.unlink(temp)
            if self._take_stale_local():
                return
        raise RunIdHeld(f"{self.run_id!r}: cannot take its lock {self.path}")

    def _take_stale_local(self) -> bool:
        """The lock exists: take it if its holder is gone; raise RunIdHeld if not.
        False: it went away meanwhile (try creating it again)."""
        import fcntl  # POSIX only: the local run lock

        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunIdHeld(_holder_text(_read_fd(fd) or {"run_id": self.run_id}, self.path)) from None
            try:
                if os.fstat(fd).st_ino != os.stat(self.path).st_ino:
                    os.close(fd)  # released and gone meanwhile: try again
                    return False
            except FileNotFoundError:
                os.close(fd)
                return False
            old = _read_fd(fd) or {}
            lease_left = LEASE_SECONDS - (_now().timestamp() - os.fstat(fd).st_mtime)
            if old.get("host") not in (None, self.holder["host"]) and lease_left > 0:
                # another host's lock: flock may not reach across a shared filesystem,
                # so its refreshes (the modification time) say whether it lives
                os.close(fd)
                raise RunIdHeld(_holder_text(old, self.path))
            _write_fd(fd, self.holder)  # the holder is gone: the lock is this run's
            self._fd = fd
            return True
        except BaseException:
            if self._fd != fd:
                try:
                    os.close(fd)
                except OSError:
                    pass
            raise

    def _refresh_local(self) -> None:
        os.utime(self.path)

    def _release_local(self) -> None:
        try:
            if os.path.exists(self.path) and os.fstat(self._fd).st_ino == os.stat(self.path).st_ino:
                os.unlink(self.path)
        finally:
            os.close(self._fd)
            self._fd = None
        try:
            os.rmdir(os.path.dirname(self.path))  # the attempts folder, when nothing else is in it
        except OSError:
            pass

    # ------------------------------------------------------------------ Cloud Storage

    def _gcs_body(self) -> str:
        lease = _now() + dt.timedelta(seconds=LEASE_SECONDS)
        return json.dumps({**self.holder, "lease_until": lease.isoformat()})

    def _acquire_gcs(self) -> None:
        from google.api_core import exceptions  # start-up time: Google Cloud clients only where used

        blob = _blob(self.path)
        for _ in range(5):
            if blob.exists():
                blob.reload()
                try:
                    old = json.loads(blob.download_as_text(if_generation_match=blob.generation))
                except (ValueError, exceptions.PreconditionFailed, exceptions.NotFound):
                    continue
                if old.get("job_id"):  # held by a Dataflow job: the service says whether it has ended
                    self._check_job(old)
                else:
                    lease = old.get("lease_until")
                    if lease and dt.datetime.fromisoformat(lease) > _now() and not holder_gone(old):
                        raise RunIdHeld(_holder_text(old, self.path))
                precondition = blob.generation  # a stale lease: taken over only if still that one
            else:
                precondition = 0
            try:
                blob.upload_from_string(self._gcs_body(), content_type="application/json",
                                        if_generation_match=precondition)
            except exceptions.PreconditionFailed:
                continue  # another run took it first: look again
            self._generation = blob.generation
            # read back: a store that ignored the precondition (the emulator) shows the last writer
            check = _blob(self.path)
            check.reload()
            generation = check.generation
            now_held = read_holder_from_blob(check) or {}
            if now_held.get("attempt") != self.holder["attempt"]:
                self._generation = None  # not this run's to give back
                raise RunIdHeld(_holder_text(now_held or {"run_id": self.run_id}, self.path))
            self._generation = generation
            return
        raise RunIdHeld(f"{self.run_id!r}: cannot take its lock {self.path}")

    def _check_job(self, holder: dict) -> None:
        """Raise RunIdHeld unless the Dataflow job holding the lock has ended."""
        try:
            state = self._job_state(holder) if self._job_state else "its state not asked"
        except Exception as e:  # noqa: BLE001 - any failure to learn the state leaves the lock held, said so
            state = f"its state could not be read: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        if state not in JOB_ENDED and state != JOB_NOT_FOUND:
            raise RunIdHeld(_job_holder_text(holder, state, self.path))

    def hand_to_job(self, job_id: str) -> bool:
        """The launcher's lock becomes the submitted job's: rewritten with its id and no lease (conditional on
        the launcher's generation), no longer refreshed nor given back by this process. False when the lock
        was no longer the launcher's (taken over after its lease passed): the job holds nothing."""
        from google.api_core import exceptions  # start-up time: Google Cloud clients only where used

        self._stop.set()
        if self._refresher is not None:
            self._refresher.join(timeout=30)
        self.holder = {**self.holder, "job_id": job_id}
        try:
            _blob(self.path).upload_from_string(json.dumps(self.holder), content_type="application/json",
                                                if_generation_match=self._generation)
        except exceptions.PreconditionFailed:
            self.lost = True
            return False
        finally:
            self._generation = None  # the job's now, or another run's: not this process's to give back
        return True

    def _refresh_gcs(self) -> None:
        from google.api_core import exceptions  # start-up time: Google Cloud clients only where used

        blob = _blob(self.path)
        try:
            blob.upload_from_string(self._gcs_body(), content_type="application/json",
                                    if_generation_match=self._generation)
            self._generation = blob.generation
        except exceptions.PreconditionFailed:
            self.lost = True  # another run took it over (this one stalled past its lease)

    def _release_gcs(self) -> None:
        if not self.lost:
            release_gcs_lock(self.path, self._generation)

    # ------------------------------------------------------------------ both

    def acquire(self) -> "RunLock":
        if self._local:
            self._acquire_local()
        else:
            self._acquire_gcs()
        self._refresher = threading.Thread(target=self._keep, name="evalbeam-run-lock", daemon=True)
        self._refresher.start()
        return self

    def _keep(self) -> None:
        while not self._stop.wait(LEASE_SECONDS / 4):
            try:
                self._refresh_local() if self._local else self._refresh_gcs()
            except Exception:  # noqa: BLE001 - a failed refresh is tried again; the lease is 4 refreshes long
                pass

    def release(self) -> None:
        self._stop.set()
        if self._refresher is not None:
            self._refresher.join(timeout=30)
        if self._local and self._fd is not None:
            self._release_local()
        elif not self._local and self._generation is not None:
            self._release_gcs()

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class _ReleaseRunLockFn(beam.DoFn):
    def __init__(self, paths: tuple[str, ...], attempt: str):
        self._paths, self._attempt = paths, attempt
        self._released = beam.metrics.Metrics.counter("evalbeam", "run_lock_released")

    def process(self, _):
        for path in self._paths:
            if release_gcs_lock(path, None, attempt=self._attempt):
                self._released.inc()
            yield path


class ReleaseRunLock(beam.PTransform):
    """A job's last step: once `done` (a PCollection: the run's folder put in place) has an element,
    give back the locks the job holds (RunLock.hand_to_job: its run_id's, and its eval's input.since
    window's), each if it still names the job's attempt."""

    def __init__(self, paths: str | tuple[str, ...], attempt: str):
        super().__init__()
        self._fn = _ReleaseRunLockFn((paths,) if isinstance(paths, str) else tuple(paths), attempt)

    def expand(self, done):
        return done | "Release" >> beam.ParDo(self._fn)


def release_gcs_lock(path: str, generation: int | None, attempt: str | None = None) -> bool:
    """Delete a Cloud Storage lock if it is still the one its holder wrote: its generation (the
    holder's last write) or, given `attempt`, the attempt it names. Read back first, then deleted
    with if_generation_match on what was read: on Cloud Storage the precondition alone would keep a
    newer lock (another run's, taken over after this holder's lease passed); the read-back is what
    keeps it where deletes are not conditional (fake-gcs-server, which the tests run on, ignores
    preconditions on delete), leaving only the moment between the read and the delete there.
    True when this call deleted it."""
    from google.api_core import exceptions  # start-up time: Google Cloud clients only where used

    blob = _blob(path)
    try:
        blob.reload()
    except exceptions.NotFound:
        return False
    if attempt is not None:
        holder = read_holder_from_blob(blob, blob.generation) or {}
        if holder.get("attempt") != attempt:
            return False
    elif blob.generation != generation:
        return False
    try:
        blob.delete(if_generation_match=blob.generation)
    except (exceptions.PreconditionFailed, exceptions.NotFound):
        return False
    return True


def read_holder_from_blob(blob, generation: int | None = None) -> dict | None:
    try:
        return json.loads(blob.download_as_text(if_generation_match=generation))
    except Exception:  # noqa: BLE001 - only for the message
        return None


def _blob(path: str):
    bucket, _, name = path[len("gs://"):].partition("/")
    return storage_client().bucket(bucket).blob(name)


def _write_fd(fd: int, holder: dict) -> None:
    data = json.dumps(holder).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)


def _read_fd(fd: int) -> dict | None:
    try:
        size = os.fstat(fd).st_size
        return json.loads(os.pread(fd, size, 0).decode()) if size else None
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- BigQuery-only outputs

LOCK_TABLE = "_evalbeam_run_locks"


class BigQueryRunLock(RunLock):
    """The lock of a run_id whose only output is a BigQuery dataset: a row of
    <dataset>._evalbeam_run_locks, taken by one MERGE that inserts it when the
    run_id has none and takes it over when its lease has passed, then read back:
    the run holds the run_id when the row names its attempt. BigQuery runs
    mutating statements (MERGE, UPDATE, DELETE) on one table one at a time, failing
    the later of two that conflict, so two runs cannot both take the row. (The
    BigQuery emulator the tests use, DuckDB, runs the same statements; that it
    serialises concurrent ones as BigQuery does is not shown there.) The lease is
    refreshed by an UPDATE conditional on the attempt, the lock given back by a
    DELETE conditional on it."""

    def __init__(self, dataset: str, run_id: str, attempt: str, started_at: dt.datetime, location: str | None = None,
                 window_of: str | None = None):
        """window_of: an eval's name: the lock of its input.since window (the row keyed <name>@since)."""
        self.dataset = dataset
        self.location = location
        self._window_of = window_of
        run_id = window_of + WINDOW_SUFFIX if window_of else run_id
        self.path = f"bq://{dataset}.{LOCK_TABLE} (run_id {run_id!r})"
        self.run_id = run_id
        self.holder = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
                       "pid_start": _process_start(os.getpid()) or "", "started_at": started_at.isoformat(),
                       "attempt": attempt}
        self._local = False
        self._fd = None
        self._generation = None
        self._stop = threading.Event()
        self._refresher = None
        self.lost = False
        self._held = False

    def _client(self):
        return bigquery_client(self.dataset.rpartition(".")[0], self.location)

    def _query(self, sql: str, **params):
        from google.cloud import bigquery  # start-up time: Google Cloud clients only where used

        types = {str: "STRING", int: "INT64", float: "FLOAT64"}
        config = bigquery.QueryJobConfig(query_parameters=[
            bigquery.ScalarQueryParameter(k, types[type(v)], v) for k, v in params.items()])
        job = self._client().query(sql.replace("{table}", f"`{self.dataset}.{LOCK_TABLE}`"), job_config=config)
        return job, list(job.result())

    def _acquire_gcs(self) -> None:  # the remote store of this lock is BigQuery
        from google.api_core import exceptions  # start-up time: Google Cloud clients only where used
        from google.cloud import bigquery  # start-up time: Google Cloud clients only where used

        client = self._client()
        project, _, dataset_id = self.dataset.rpartition(".")
        ds = bigquery.Dataset(f"{project}.{dataset_id}")
        ds.location = self.location or "US"
        client.create_dataset(ds, exists_ok=True)
        client.create_table(bigquery.Table(f"{self.dataset}.{LOCK_TABLE}", schema=[
            bigquery.SchemaField(name, kind) for name, kind in (
                ("run_id", "STRING"), ("attempt", "STRING"), ("host", "STRING"), ("pid", "INT64"),
                ("pid_start", "STRING"), ("started_at", "STRING"), ("lease_until", "TIMESTAMP"))]), exists_ok=True)
        h = self.holder
        # a holder known dead (this host, its process gone) is taken over at once; another's lease must pass
        _, rows = self._query("SELECT host, pid, pid_start, attempt FROM {table} WHERE run_id = @run_id",
                              run_id=self.run_id)
        dead = next((r["attempt"] for r in rows if holder_gone(dict(r.items()))), "")
        try:
            self._query(
                "MERGE {table} t USING (SELECT @run_id AS run_id) s ON t.run_id = s.run_id "
                "WHEN MATCHED AND (t.lease_until < CURRENT_TIMESTAMP() OR t.attempt = @dead) THEN UPDATE SET "
                "attempt = @attempt, host = @host, pid = @pid, pid_start = @pid_start, started_at = @started_at, "
                "lease_until = TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL @lease SECOND) "
                "WHEN NOT MATCHED THEN INSERT (run_id, attempt, host, pid, pid_start, started_at, lease_until) VALUES "
                "(@run_id, @attempt, @host, @pid, @pid_start, @started_at, "
                "TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL @lease SECOND))",
                run_id=self.run_id, attempt=h["attempt"], host=h["host"], pid=h["pid"], pid_start=h["pid_start"],
                started_at=h["started_at"], lease=int(LEASE_SECONDS), dead=dead)
        except exceptions.BadRequest as e:
            if "concurrent" not in str(e).lower():
                raise
            # another run's statement won the race: the row says whose the run_id is
        _, rows = self._query("SELECT run_id, attempt, host, pid, started_at FROM {table} WHERE run_id = @run_id",
                              run_id=self.run_id)
        holder = dict(rows[0].items()) if rows else {"run_id": self.run_id}
        if holder.get("attempt") != h["attempt"]:
            raise RunIdHeld(_holder_text({**holder, "window_of": self._window_of}, self.path))
        self._held = True
        self._generation = 0  # release() gives it back

    def _refresh_gcs(self) -> None:
        job, _ = self._query(
            "UPDATE {table} SET lease_until = TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL @lease SECOND) "
            "WHERE run_id = @run_id AND attempt = @attempt",
            run_id=self.run_id, attempt=self.holder["attempt"], lease=int(LEASE_SECONDS))
        if job.num_dml_affected_rows == 0:
            self.lost = True

    def _release_gcs(self) -> None:
        if self._held:
            self._query("DELETE FROM {table} WHERE run_id = @run_id AND attempt = @attempt",
                        run_id=self.run_id, attempt=self.holder["attempt"])
            self._held = False
