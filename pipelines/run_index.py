"""Where `evalbeam run` wrote each run on this machine, so that `show`, `report` and `compare`
find a run by its id from any folder.

One JSON object a line in runs.jsonl under the state folder: $EVALBEAM_STATE_DIR, else
$XDG_STATE_HOME/evalbeam, else ~/.local/state/evalbeam (the XDG base directory spec's place
for state that outlives a command but is no user's document). Each line: the run_id, its
eval, where its tables are (a Parquet folder, absolute when local, and/or a BigQuery
dataset), the config file and when it was recorded.

A run adds its line when its pipeline starts. The file is rewritten whole, under an exclusive
flock of runs.jsonl.lock (two runs recording at once wait for each other, a few milliseconds),
into a temporary file renamed over it (os.replace): a reader never sees half a file, and needs
no lock. A rewrite drops the lines of local folders that no longer exist, a run_id's older
line for the same place, and all but the newest MAX_ENTRIES. A line that is not such an object
(a file cut short, edited, or garbage) is skipped; a missing file is an empty index. Recording
is best effort: a state folder that cannot be written is said in one line, and the run goes on.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
from typing import Any, Iterator

INDEX = "runs.jsonl"
MAX_ENTRIES = 10_000


def state_dir() -> str:
    """The folder of evalbeam's state on this machine (see the module's docstring)."""
    if os.environ.get("EVALBEAM_STATE_DIR"):
        return os.environ["EVALBEAM_STATE_DIR"]
    xdg = os.environ.get("XDG_STATE_HOME")
    base = xdg if xdg and os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "evalbeam")


def index_path() -> str:
    return os.path.join(state_dir(), INDEX)


def is_local(location: str | None) -> bool:
    return bool(location) and "://" not in location


def record(run_id: str, eval_name: str, parquet: str | None, bigquery: str | None, config_file: str | None) -> None:
    """Add where run `run_id` writes its tables; says so on stderr, and goes on, when it cannot."""
    entry = {"run_id": run_id, "eval": eval_name,
             "parquet": os.path.abspath(parquet) if is_local(parquet) else parquet, "bigquery": bigquery,
             "config": os.path.abspath(config_file) if is_local(config_file) else config_file,
             "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    try:
        os.makedirs(state_dir(), exist_ok=True)
        with _locked():
            kept = [e for e in _read() if _alive(e) and not _same_place(e, entry)]
            _write([*kept, entry][-MAX_ENTRIES:])
    except OSError as e:
        print(f"evalbeam: could not record where run {run_id} is written in {index_path()} ({e.strerror or e}); "
              "`evalbeam show` finds it with --parquet, --bigquery or --config", file=sys.stderr)


def places(run_id: str) -> list[dict[str, Any]]:
    """The places `run_id` was recorded as written to, the newest first, each once; a local
    folder that no longer exists is left out."""
    found, seen = [], set()
    for entry in reversed(_read()):
        place = (entry.get("parquet"), entry.get("bigquery"))
        if entry.get("run_id") == run_id and _alive(entry) and place not in seen:
            seen.add(place)
            found.append(entry)
    return found


def all_places() -> list[dict[str, Any]]:
    """Every place runs were recorded as written to, the most recently used first, each once."""
    found, seen = [], set()
    for entry in reversed(_read()):
        place = (entry.get("parquet"), entry.get("bigquery"))
        if _alive(entry) and place not in seen:
            seen.add(place)
            found.append(entry)
    return found


def _read() -> list[dict[str, Any]]:
    try:
        with open(index_path(), encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return []
    except OSError as e:
        print(f"evalbeam: cannot read {index_path()}: {e.strerror or e}", file=sys.stderr)
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("run_id"), str) and \
                (isinstance(entry.get("parquet"), str) or isinstance(entry.get("bigquery"), str)):
            entries.append(entry)
    return entries


def _write(entries: list[dict[str, Any]]) -> None:
    fd, temporary = tempfile.mkstemp(prefix=".runs-", suffix=".jsonl", dir=state_dir())
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e, sort_keys=True) + "\n" for e in entries)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, index_path())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """An exclusive flock of the index's lock file, held while it is read and rewritten."""
    try:
        import fcntl  # POSIX; where there is none, two runs recording at the same instant may lose a line
    except ImportError:
        yield
        return
    with open(index_path() + ".lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def _alive(entry: dict[str, Any]) -> bool:
    """False for a run recorded only in a local folder that no longer exists."""
    parquet = entry.get("parquet")
    return bool(entry.get("bigquery")) or not is_local(parquet) or os.path.isdir(parquet)


def _same_place(entry: dict[str, Any], other: dict[str, Any]) -> bool:
    return all(entry.get(k) == other.get(k) for k in ("run_id", "parquet", "bigquery"))
