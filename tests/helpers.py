"""Running the real `evalbeam` command from tests, and reading Parquet back."""
import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
import warnings
from pathlib import Path

import duckdb

EVALBEAM = str(Path(sys.executable).with_name("evalbeam"))
ROOT = Path(__file__).resolve().parent.parent


def evalbeam(*args, check=True, path_first=(), env=None, command=EVALBEAM, process=False, cwd=ROOT):
    # Custom metric modules must be importable, as for any user: tests/ is put on the path
    # (after `path_first`, folders to import from first). The environment (emulator
    # variables included) is inherited, with `env` added. `command`: another venv's
    # evalbeam (e.g. .agent's).
    # The command runs in this process (pipelines.cli.main, as the console script runs it: about 2 s less a
    # call than a new interpreter importing Beam again) unless the call needs a process of its own: `process`
    # (the test is about the process: it dies, is killed, or its exit is the point), another venv's command,
    # an environment or import path of its own, or a call from another thread than the main one.
    # `cwd`: the folder it runs in (default the repository's).
    if process or env or path_first or str(command) != EVALBEAM or threading.current_thread() is not threading.main_thread():
        env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([*map(str, path_first), str(ROOT)])}
        result = subprocess.run(["timeout", "600", str(command), *map(str, args)], capture_output=True, text=True,
                                cwd=cwd, env=env)
    else:
        result = _in_process([str(a) for a in args], cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"evalbeam {args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def _in_process(argv: list, cwd=ROOT) -> subprocess.CompletedProcess:
    """`evalbeam ARGV` run by pipelines.cli.main in this process, ending as pipelines.cli.entry ends the console
    script (an exception's traceback and status 1; missing Google credentials in one line and status 2), its
    output captured; what a run changes in the process (environment, current folder, import path, signal
    handlers, logging, the interrupt flag, metrics registered by custom modules, the tests' modules it imported)
    put back after."""
    import evalbeam.metrics.catalog  # noqa: F401 - the built-in metrics registered before the snapshot
    from evalbeam.metrics import registry
    from evalbeam.pipelines import cli
    from evalbeam.transforms import interrupt

    saved = {
        "environ": dict(os.environ), "cwd": os.getcwd(), "path": list(sys.path),
        "signals": {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)},
        "registry": dict(registry._REGISTRY), "refused": dict(registry._REFUSED), "modules": set(sys.modules),
        "excepthook": threading.excepthook, "disable": logging.root.manager.disable, "argv": list(sys.argv),
    }
    root = logging.getLogger()
    loggers = {name: logger.level for name, logger in logging.root.manager.loggerDict.items()
               if isinstance(logger, logging.Logger)}
    handlers, level = root.handlers[:], root.level
    out, err = io.StringIO(), io.StringIO()
    # as in the command's process: no handler on the root logger (logging's last resort prints warnings on
    # stderr), tests/ importable, here and in DirectRunner worker processes, from the repository's folder (or cwd)
    root.handlers = []
    os.environ["PYTHONPATH"] = str(ROOT)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.chdir(cwd)
    sys.argv[:] = [EVALBEAM, *argv]  # as the console script has it (Beam reads it where no flags are given)
    interrupt.INTERRUPTED.clear()
    interrupt.RESUME_HINT.clear()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            # warnings as a new interpreter shows them (its default filters, printed on stderr), not pytest's record
            warnings.resetwarnings()
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            warnings.showwarning = warnings._showwarning_orig
            try:
                status = cli.main(argv)
            except SystemExit as e:  # argparse's usage errors, and any sys.exit
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: BLE001 - as the console script ends on any exception (cli.entry)
                missing = cli._missing_credentials(e)
                if missing is None:
                    traceback.print_exc()
                    status = 1
                else:
                    from evalbeam.transforms.local_cloud import no_credentials

                    print(f"evalbeam: {no_credentials(missing)}", file=sys.stderr)
                    status = 2
            sys.stdout.flush()
    finally:
        os.chdir(saved["cwd"])
        os.environ.clear()
        os.environ.update(saved["environ"])
        sys.path[:] = saved["path"]
        sys.argv[:] = saved["argv"]
        for s, handler in saved["signals"].items():
            if signal.getsignal(s) is not handler:
                signal.signal(s, handler)
        threading.excepthook = saved["excepthook"]
        logging.disable(saved["disable"])
        root.handlers, root.level = handlers, level
        for name, was in loggers.items():  # those the run made keep what their modules set
            logging.getLogger(name).setLevel(was)
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved["registry"])
        registry._REFUSED.clear()
        registry._REFUSED.update(saved["refused"])
        for name in set(sys.modules) - saved["modules"]:
            if name == "tests" or name.startswith("tests."):  # a custom module is imported afresh by the next run
                del sys.modules[name]
        interrupt.INTERRUPTED.clear()
        interrupt.RESUME_HINT.clear()
    return subprocess.CompletedProcess(["evalbeam", *argv], status, out.getvalue(), err.getvalue())


AGENT_RERUN = "agent_rerun"
_AGENT_RUNS = {}  # a test module's path: {node id: (outcome, text)} from its one nested run in .agent


def in_agent_env(request) -> bool:
    """For a test that imports google-adk in its own process, marked `agent_rerun`: where this interpreter has
    no google-adk (the main venv, as `make test` runs the suite), the test is run again, whole, by .agent's
    interpreter, and must pass there. True when it was (the caller then returns). One nested pytest per test
    module and session (per pytest-xdist worker): the first such test of a module to get here runs, in .agent,
    every test of that module marked `agent_rerun` that this session selected (one start-up of Python, pytest,
    Beam and google-adk, the module's fixtures built once); each test then asserts that its own node passed
    there, so each still fails on its own."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("google.adk") is not None:
        return False
    node = request.node
    if node.get_closest_marker(AGENT_RERUN) is None:
        pytest.fail(f"{node.nodeid} calls in_agent_env but is not marked @pytest.mark.{AGENT_RERUN}")
    if not (ROOT / ".agent" / ".installed").exists():
        pytest.fail("the agent environment is missing: run `make agent-env`: evalbeam[agent] in .agent/")
    module = node.nodeid.split("::")[0]
    if module not in _AGENT_RUNS:
        _AGENT_RUNS[module] = agent_rerun([item.nodeid for item in request.session.items
                                           if item.nodeid.split("::")[0] == module
                                           and item.get_closest_marker(AGENT_RERUN) is not None])
    outcome, text = _AGENT_RUNS[module][node.nodeid]
    assert outcome == "passed", f"{node.nodeid} in .agent: {outcome}\n{text}"
    return True


def agent_rerun(nodeids: list, python=ROOT / ".agent" / "bin" / "python", cwd=ROOT) -> dict:
    """`PYTHON -m pytest NODEIDS` (.agent's) in one process from CWD: {node id: (outcome, text)}, the outcome
    "passed", "failed", "error" (in set-up or teardown) or "skipped" read from its JUnit report ("not run" if it
    is not there, "failed" for all when pytest itself failed: usage, collection, an internal error), the text the
    failure's and the tail of the run's output; "" maps to the output alone."""
    import tempfile
    import xml.etree.ElementTree as ET

    with tempfile.TemporaryDirectory(prefix="agent-rerun-") as folder:
        report = Path(folder) / "junit.xml"
        result = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                                 *nodeids], cwd=cwd, capture_output=True, text=True, timeout=900)
        output = f"(exit status {result.returncode})\n{result.stdout[-6000:]}{result.stderr[-2000:]}"
        cases = ET.parse(report).getroot().iter("testcase") if report.exists() else ()
        outcomes = {"": output, **{nodeid: ("not run", output) for nodeid in nodeids}}
        for case in cases:
            children = [c for c in case if c.tag in ("failure", "error", "skipped")]
            tags = {c.tag for c in children}
            outcome = ("failed" if "failure" in tags else "error" if "error" in tags else "skipped" if tags
                       else "passed")
            text = "\n".join(f"{c.get('message', '')}\n{c.text or ''}" for c in children)
            nodeid = junit_nodeid(case.get("classname"), case.get("name"), nodeids)
            if nodeid:
                outcomes[nodeid] = (outcome, f"{text}\n{output}")
    if result.returncode not in (0, 1):  # not a test's failure: pytest itself
        outcomes = {"": output, **{nodeid: ("failed", output) for nodeid in nodeids}}
    return outcomes


def junit_nodeid(classname: str, name: str, nodeids: list) -> str:
    """The node id of NODEIDS that a JUnit report's testcase (`tests.a.test_b` or `tests.a.test_b.Class`, and
    `test_c[param]`) stands for; "" if none."""
    for nodeid in nodeids:
        *scopes, function = nodeid.split("::")
        if function == name and ".".join([scopes[0].removesuffix(".py").replace("/", "."), *scopes[1:]]) == classname:
            return nodeid
    return ""


def table(run_dir, name):
    with duckdb.connect() as con:
        rel = con.sql(f"SELECT * FROM read_parquet('{run_dir / name}/*.parquet')")
        return [dict(zip(rel.columns, row)) for row in rel.fetchall()]


@contextlib.contextmanager
def small_disk(tmp_path, size: str):
    """A real filesystem of `size` (a tmpfs, e.g. "1m": CI runs as root) at tmp_path/disk, unmounted
    after; the test is skipped where no tmpfs can be mounted."""
    import pytest

    disk = Path(tmp_path) / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


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
