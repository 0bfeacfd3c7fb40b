"""Regenerates requirements.lock and requirements-agent.lock: one universal resolution each, valid on
every Python setup.py supports, with an environment marker where a Python needs its own pin.

    python -m tests.locks UV    # UV: uv 0.13.8's binary, e.g. from `pip install uv==0.13.8` in a throwaway venv

uv reads the lock it rewrites as preferences, so every pin that still resolves is kept: only what a
requirement of setup.py (or of one Python) changed moves. Not run by `make`: installing needs only pip.
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# setuptools 65.5.0 (the pin on 3.10 and 3.11, where the suite was validated) imports pkgutil.ImpImporter,
# removed in Python 3.12. Both said here: uv's preferences alone may unify a package pinned twice.
CONSTRAINTS = 'setuptools==65.5.0 ; python_version < "3.12"\nsetuptools>=70 ; python_version >= "3.12"\n'
BUILD = ["build", "setuptools", "wheel"]  # Beam's stager runs `python -m build --no-isolation`

HEADER = """\
# {what}, pinned for every Python setup.py supports ({pythons}): a line with a marker
# (`; python_full_version < '3.11'`) is installed on the Pythons it names only. Direct dependencies are in setup.py.
# Install: pip install -r {name}. Regenerate: python -m tests.locks UV (uv 0.13.8; see tests/locks.py).
{notes}"""

LOCKS = {
    "requirements.lock": dict(
        extras=["test", "report"], lowest="3.10", what="The whole environment",
        notes="""\
# On 3.11 it is the environment the whole suite runs on. 3.12 and 3.13 differ in setuptools (65.5.0's pkg_resources
# needs pkgutil.ImpImporter, gone in 3.12) and, on 3.13, google-apitools 0.5.35 (Beam's own marker: 0.5.31 fails to
# import there); 3.10 in what needs 3.11 (numpy, scipy, duckdb, google-genai, matplotlib and their dependencies).
"""),
    "requirements-agent.lock": dict(
        extras=["test", "report", "agent", "otel_test"], lowest="3.11", what="The environment of evalbeam with the `agent` extra (google-adk 2.13.0)",
        notes="""\
# google-adk 2.13.0 needs Python 3.11 or later: this lock is for 3.11 to 3.13. It requires google-genai<3,
# opentelemetry-api<=1.44 and websockets<16, so it differs from requirements.lock in exactly these: google-genai 2.34.0
# (3.3.0 there; evalbeam's judge client is tested on both), opentelemetry-api/-sdk 1.44.0,
# opentelemetry-semantic-conventions 0.65b0, websockets 15.0.1, and google-adk with its dependencies added (httpx2, the
# HTTP client of google-genai 3, is in both: openai and anthropic use it); every other pin is requirements.lock's on the same Python
# (tests/e2e/test_packaging.py checks it). Installed with --no-deps, then `pip check` (make agent-env).
"""),
}


def setup_arguments() -> dict:
    """The keyword arguments setup.py gives setuptools.setup (run without building anything)."""
    import setuptools

    captured = {}
    original = setuptools.setup
    setuptools.setup = lambda **kwargs: captured.update(kwargs)
    try:
        exec(compile((ROOT / "setup.py").read_text(), "setup.py", "exec"), {"__name__": "__main__"})
    finally:
        setuptools.setup = original
    return captured


def regenerate(uv: str, name: str, extras, lowest, what, notes):
    args = setup_arguments()
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        (work / "in.txt").write_text("\n".join(args["install_requires"] + [r for e in extras for r in args["extras_require"][e]] + BUILD) + "\n")
        (work / "constraints.txt").write_text(CONSTRAINTS)
        lock = ROOT / name
        (work / "out.txt").write_text(lock.read_text())  # the preferences
        subprocess.run([uv, "pip", "compile", "--universal", "--python-version", lowest, "--no-header", "--no-annotate",
                        "-c", work / "constraints.txt", work / "in.txt", "-o", work / "out.txt"],
                       check=True, env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
        lock.write_text(HEADER.format(what=what, pythons=f"{lowest} to 3.13", name=name, notes=notes) + (work / "out.txt").read_text())


if __name__ == "__main__":
    for lock_name, settings in LOCKS.items():
        regenerate(sys.argv[1], lock_name, **settings)
