"""The set-up on every Python evalbeam supports (setup.py's PYTHONS) that this machine has.

The whole suite runs on one interpreter. For each supported Python found here, these tests do what
a user's `make demo` and a Dataflow job launched from that Python do: a fresh venv from
requirements.lock, evalbeam's sdist built in it by that Python (`python -m build --no-isolation
--sdist`, as Beam's stager builds it for --setup_file) and installed into it (not editable, with
that venv's setuptools, as a worker installs it), `pip check`, then configs/demo_qa.yaml run from
outside the repository. Its summary must be the one this interpreter's own run prints. A version
not found is a skip whose reason names where it was looked for (`make test` prints the reasons).

The installs take minutes: they start when collection ends (tests/conftest.py calls
start_installs when a selected test uses `pythons_installed`), two at a time in threads, so
that they run beside the tests before these rather than add their time to the session's.
"""
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from glob import glob
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from tests.helpers import ROOT
from tests.locks import setup_arguments
from tests.e2e.test_packaging import build_sdist, outside_env, pip_for, run

SETUP = setup_arguments()
PYTHONS = [c.rsplit(" :: ", 1)[1] for c in SETUP["classifiers"] if c.startswith("Programming Language :: Python :: 3.")]
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
DEMO = ROOT / "configs" / "demo_qa.yaml"
# The installs run two at a time: on 2 cores a third only queues behind them.
AT_ONCE = 2
INSTALLS = {}  # version: the Future of its venv, or None where the version is not here


def version_of(python) -> str:
    try:
        result = subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                capture_output=True, text=True, timeout=60)
    except OSError:
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def find_python(version: str):
    """`python3.X` on PATH if it runs (a pyenv shim of a version pyenv has not selected does not),
    else the newest 3.X under the pyenv root; None if neither is there."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob(str(PYENV_ROOT / "versions" / f"{version}.*" / "bin" / f"python{version}")), reverse=True)
    return next((c for c in candidates if c and version_of(c) == version), None)


def summary(stdout: str) -> list:
    """The summary table `evalbeam run` prints: its lines from the header to the first blank one."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("metric "))
    return lines[start:lines.index("", start)]


def install(python: str, work: Path) -> Path:
    """A fresh venv of `python` with requirements.lock, and evalbeam's sdist built and installed in it."""
    work.mkdir()
    venv = work / "venv"
    run([python, "-m", "venv", "--without-pip", venv], cwd=work)
    target = venv / "bin" / "python"
    # the project's pinned pip (.venv's) installs into it; --no-compile: the imports compile what they use
    run([*pip_for(target), "install", "--quiet", "--no-compile", "-r", ROOT / "requirements.lock"], cwd=work, timeout=1800)
    archive = build_sdist(work, python=target)
    run([*pip_for(target), "install", "--quiet", "--no-compile", "--no-deps", "--no-build-isolation", archive], cwd=work)
    run([*pip_for(target), "check"], cwd=work)
    return venv


def start_installs(versions=PYTHONS) -> dict:
    """Starts the install of each of `versions` found here (once), AT_ONCE at a time."""
    if not INSTALLS:
        work = Path(tempfile.mkdtemp(prefix="evalbeam-pythons-"))
        atexit.register(shutil.rmtree, work, ignore_errors=True)  # ~700 MB a venv
        pool = ThreadPoolExecutor(max_workers=AT_ONCE, thread_name_prefix="install")
        for version in versions:
            python = find_python(version)
            INSTALLS[version] = python and pool.submit(install, python, work / f"python{version}")
        pool.shutdown(wait=False)
    return INSTALLS


@pytest.fixture(scope="module")
def pythons_installed(request):
    """{version: a future of its venv (None where the version is not here)}; each test waits for its own.
    Started here where collection did not start them (a pytest-xdist worker: tests/conftest.py), for the
    versions of the selected tests only."""
    return start_installs(selected_versions(request.session.items))


def selected_versions(items) -> list:
    """The versions of the collected tests that use `pythons_installed` (tests/conftest.py starts their installs)."""
    return [item.callspec.params["version"] for item in items if "pythons_installed" in getattr(item, "fixturenames", ())]


@pytest.fixture(scope="module")
def demo_summary(demo_run):
    """The summary this interpreter's evalbeam (the repository's, editable) prints for the demo config."""
    return summary(demo_run("configs/demo_qa.yaml")[0].stdout)


@pytest.mark.pythons
@pytest.mark.parametrize("version", PYTHONS)
def test_the_demo_runs_from_a_fresh_install_on_each_python(version, pythons_installed, request, tmp_path):
    if pythons_installed[version] is None:
        pytest.skip(f"Python {version} not found here (python{version} on PATH, {PYENV_ROOT}/versions/{version}.*): "
                    f"not checked")
    venv = pythons_installed[version].result()
    try:
        check_the_demo(version, venv, request.getfixturevalue("demo_summary"), tmp_path)
    finally:
        shutil.rmtree(venv.parent, ignore_errors=True)  # while the other installs still run


def check_the_demo(version: str, venv: Path, demo_summary: list, tmp_path: Path):
    env = outside_env(venv)
    assert version_of(venv / "bin" / "python") == version
    result = run([venv / "bin" / "evalbeam", "run", DEMO, "--set", f"output.parquet={tmp_path / 'out'}"], cwd=tmp_path, env=env)
    assert "read 8 = scored 8 + dead-lettered 0; metric errors 0" in result.stdout, result.stdout
    assert summary(result.stdout) == demo_summary
    # the run used the installed copy, not the repository's files
    where = run([venv / "bin" / "python", "-c", "import evalbeam.pipelines.cli as m; print(m.__file__)"], cwd=tmp_path, env=env)
    assert Path(where.stdout.strip()).is_relative_to(venv)
    # BLEU's and ROUGE's C extensions compiled on this Python (setup.py builds them where a C compiler is found)
    for probe in ("from evalbeam.metrics import sentence_bleu as s; print(s._native.__file__)",
                  "from evalbeam.metrics import text as t; print(t._rouge_native.__file__)"):
        native = run([venv / "bin" / "python", "-c", probe], cwd=tmp_path, env=env)
        assert Path(native.stdout.strip()).is_relative_to(venv) and f"cpython-{version.replace('.', '')}" in native.stdout


def test_setup_py_the_makefile_and_the_readme_name_the_same_pythons():
    """python_requires admits exactly the tested versions; `make` looks for the same ones; the
    README and docs/development.md name them."""
    assert PYTHONS == ["3.10", "3.11", "3.12", "3.13"]
    allowed = SpecifierSet(SETUP["python_requires"])
    assert [v for v in ("3.9", *PYTHONS, "3.14") if f"{v}.0" in allowed] == PYTHONS
    assert re.search(r"^PYTHONS := (.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split() == PYTHONS
    said = f"Python {PYTHONS[0]} to {PYTHONS[-1]}"
    assert said in (ROOT / "README.md").read_text() and said in (ROOT / "docs" / "development.md").read_text()
    assert sys.version_info[:2] in {tuple(map(int, v.split("."))) for v in PYTHONS}
