"""Running the real `evalbeam` command from tests, and reading Parquet back."""
import os
import subprocess
import sys
from pathlib import Path

import duckdb

EVALBEAM = str(Path(sys.executable).with_name("evalbeam"))
ROOT = Path(__file__).resolve().parent.parent


def evalbeam(*args, check=True, path_first=(), env=None, command=EVALBEAM):
    # Custom metric modules must be importable, as for any user: tests/ is put on the path
    # (after `path_first`, folders to import from first). The environment (emulator
    # variables included) is inherited, with `env` added. `command`: another venv's
    # evalbeam (e.g. .agent's).
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([*map(str, path_first), str(ROOT)])}
    result = subprocess.run(["timeout", "600", str(command), *map(str, args)], capture_output=True, text=True,
                            cwd=ROOT, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"evalbeam {args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def table(run_dir, name):
    with duckdb.connect() as con:
        rel = con.sql(f"SELECT * FROM read_parquet('{run_dir / name}/*.parquet')")
        return [dict(zip(rel.columns, row)) for row in rel.fetchall()]


def fill_disk(folder) -> None:
    """Write zeros into folder/filler until its file system is full (ENOSPC)."""
    import errno

    with open(Path(folder) / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
