"""The installed package, as Dataflow runs it: an sdist built the way Beam's
stager builds it for --setup_file, installed (not editable) into a fresh
virtual environment with the pinned requirements, and run from outside the
repository with the pipeline code in worker processes.

Every other test imports the repository's own files (the editable install,
PYTHONPATH), so a module or data file missing from the package shows only here.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import ROOT, table
from tests.servers.judge_server import JudgeServer
from tests.locks import setup_arguments

KEY_ENV = "EVALBEAM_PACKAGING_JUDGE_KEY"
KEY = "AIzaSy-packaging-test-key-0123456789"

# Copied to the build tree from the top of the repository: never these (not sources, and large).
TOP_LEVEL_SKIP = {".git", ".venv", ".emulators", ".adk", ".agent", ".airflow", ".browser", ".pytest_cache", ".ci", "output",
                  "build", "dist", "bench"}

T = {"tool_name": "get", "tool_input": {"id": 1}}
U = {"tool_name": "set", "tool_input": {"id": 1, "on": True}}
ROWS = [
    {"id": "p1", "prompt": "Greet", "response": "hello there #score=5", "reference": "hello there",
     "predicted_trajectory": [T, U], "reference_trajectory": [T, U]},
    {"id": "p2", "prompt": "Greet", "response": "hi #score=2", "reference": "hello there",
     "predicted_trajectory": [U], "reference_trajectory": [T, U]},
    {"id": "p3", "prompt": "Greet", "response": "good morning", "reference": "good morning",
     "predicted_trajectory": [], "reference_trajectory": []},
    {"id": "p4", "prompt": "Greet", "response": "hey #score=1", "reference": "hello",
     "predicted_trajectory": [T], "reference_trajectory": [U]},
]
METRICS = ["exact_match", "rouge_1", "bleu", "trajectory_exact_match", "fluency"]
FLUENCY = {"p1": 5.0, "p2": 2.0, "p4": 1.0}  # p3 has no #score marker: the server picks a valid score


def run(cmd, cwd, env=None, timeout=600):
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def pip_for(python: Path) -> list:
    """The project's pinned pip (see the Makefile), installing into the environment of `python`."""
    return [sys.executable, "-m", "pip", "--python", python]


def outside_env(venv: Path) -> dict:
    """The environment of a user of the installed package: nothing points at the repository."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSAFEPATH")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def build_sdist(work: Path, python=sys.executable) -> Path:
    """What Beam's stager runs for --setup_file (`python -m build --no-isolation
    --sdist`, with the launching `python` and its setuptools), on a copy of the working
    tree so that the build writes nothing into the repository (and two runs at once do
    not collide)."""
    def skip(directory, names):
        top = TOP_LEVEL_SKIP if Path(directory) == ROOT else set()
        return [n for n in names if n in top or n == "__pycache__" or n.endswith((".egg-info", ".pyc"))]

    source = work / "source"
    shutil.copytree(ROOT, source, ignore=skip)
    dist = work / "dist"
    run([python, "-m", "build", "--no-isolation", "--sdist", "--outdir", dist, source], cwd=work)
    [archive] = dist.glob("evalbeam-*.tar.gz")
    return archive


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    """evalbeam's sdist, built once for this module's tests by build_sdist: (the archive, the folder it was built
    in, whose source/ is the copy of the working tree it was built from)."""
    work = tmp_path_factory.mktemp("packaging")
    return build_sdist(work), work


@pytest.mark.packaging
def test_the_sdist_and_its_wheel_carry_the_apache_licence_and_notice(sdist, tmp_path):
    """LICENSE is the Apache License 2.0 word for word (as the Vertex SDK, an Apache-2.0 package,
    ships it); it and NOTICE are in the sdist Dataflow stages and in the wheel pip builds from it,
    whose metadata names the licence."""
    import tarfile
    import zipfile
    from importlib.metadata import distribution

    apache = distribution("google-cloud-aiplatform").read_text("LICENSE")
    assert apache and "Apache License" in apache and "Version 2.0, January 2004" in apache
    assert (ROOT / "LICENSE").read_text(encoding="utf-8") == apache
    notice = (ROOT / "NOTICE").read_text(encoding="utf-8")
    assert notice.startswith("evalbeam\n") and "Apache License, Version 2.0" in notice

    archive, _ = sdist
    with tarfile.open(archive) as built:
        top = archive.name.removesuffix(".tar.gz")
        read = lambda name: built.extractfile(f"{top}/{name}").read().decode()  # noqa: E731
        assert read("LICENSE") == apache and read("NOTICE") == notice
        pkg_info = read("PKG-INFO").splitlines()
    assert "License: Apache-2.0" in pkg_info
    assert "Classifier: License :: OSI Approved :: Apache Software License" in pkg_info

    wheels = tmp_path / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", wheels, archive],
        cwd=tmp_path)
    # a wheel for this Python and platform: it holds the compiled C extensions (metrics/_bleu13a.c and
    # metrics/_rouge.c, in the sdist)
    [wheel] = wheels.glob("evalbeam-0.1.0-cp3*-cp3*-linux_*.whl")
    with tarfile.open(archive) as built:
        assert {f"{top}/metrics/_bleu13a.c", f"{top}/metrics/_rouge.c"} <= set(built.getnames())
    with zipfile.ZipFile(wheel) as built:
        for module in ("_bleu13a", "_rouge"):
            assert any(n.startswith(f"evalbeam/metrics/{module}.") and n.endswith(".so") for n in built.namelist())
        info = "evalbeam-0.1.0.dist-info"
        assert built.read(f"{info}/LICENSE").decode() == apache and built.read(f"{info}/NOTICE").decode() == notice
        metadata = built.read(f"{info}/METADATA").decode().splitlines()
    assert "License: Apache-2.0" in metadata and {"License-File: LICENSE", "License-File: NOTICE"} <= set(metadata)


@pytest.fixture(scope="module")
def installed(sdist):
    """A fresh venv (no system site-packages) with requirements.lock and the
    sdist installed as Dataflow workers and the Flex Template image do."""
    archive, work = sdist
    venv = work / "venv"
    # --without-pip: the project's pinned pip installs into it (`pip --python`),
    # rather than the interpreter's bundled pip that would then need upgrading.
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=work)
    python = venv / "bin" / "python"
    # --no-compile: byte-compiling ~150 packages is a large share of the install's time, and
    # the imports compile what they use.
    run([*pip_for(python), "install", "--quiet", "--no-compile", "-r", ROOT / "requirements.lock"], cwd=work, timeout=900)
    # Not editable, no dependencies (the lock has them), built with the pinned setuptools just installed.
    run([*pip_for(python), "install", "--quiet", "--no-compile", "--no-deps", "--no-build-isolation", archive], cwd=work)
    yield venv, python, work
    shutil.rmtree(venv, ignore_errors=True)  # ~700 MB; pytest keeps its last three temporary folders


@pytest.mark.packaging
def test_the_installed_package_is_what_gets_imported(installed):
    venv, python, work = installed
    site_packages = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             cwd=work, env=outside_env(venv)).stdout.strip())
    assert site_packages.is_relative_to(venv) and not site_packages.is_relative_to(ROOT)
    probe = textwrap.dedent("""
        import json
        from importlib import import_module
        from importlib.metadata import files
        from evalbeam.metrics.judge.rubrics import BUILTIN_RUBRIC_METRICS
        from evalbeam.metrics.judge.templates import BUILTIN_TEMPLATES, builtin_templates
        from evalbeam.metrics import sentence_bleu, text
        from evalbeam.metrics.catalog import all_metrics
        names = ("configs", "metrics", "metrics.judge", "metrics.judge.client", "pipelines", "pipelines.cli", "transforms")
        print(json.dumps({
            "installed": sorted(str(f) for f in files("evalbeam")),
            "modules": {n: import_module(f"evalbeam.{n}").__file__ for n in names},
            "templates_file": str(BUILTIN_TEMPLATES),
            "rubrics_file": str(BUILTIN_RUBRIC_METRICS),
            "templates": sorted(builtin_templates()),
            "metrics": sorted(d.name for d in all_metrics()),
            "native_bleu": sentence_bleu.NATIVE and sentence_bleu._native.__file__,
            "native_rouge": text.NATIVE_ROUGE and text._rouge_native.__file__,
        }))
        """)
    got = json.loads(run([python, "-c", probe], cwd=work, env=outside_env(venv)).stdout)
    for name, file in got["modules"].items():
        assert Path(file).is_relative_to(site_packages), (name, file)
    # the prompts are package data beside their readers, opened where the package was installed
    for data in ("templates_file", "rubrics_file"):
        assert Path(got[data]).is_relative_to(site_packages / "evalbeam" / "metrics" / "judge" / "data"), got[data]
        assert Path(got[data]).is_file()
    # the sdist's C extensions (BLEU's tokenizer and n-gram matches, ROUGE) were compiled where it was installed
    for native in ("native_bleu", "native_rouge"):
        assert got[native] and Path(got[native]).is_relative_to(site_packages / "evalbeam" / "metrics"), native
    assert {"fluency", "safety", "coherence"} <= set(got["templates"])
    assert {"fluency", "pairwise_fluency", "exact_match", "rouge_1", "trajectory_exact_match",
            "evalbeam_general_quality", "evalbeam_safety_v1", "evalbeam_grounding"} <= set(got["metrics"])
    # what the distribution installed: one top-level package, evalbeam, holding the four with their
    # data files, not the tests
    installed_files = set(got["installed"])
    top_level = {f.split("/")[0] for f in installed_files if not f.startswith("..")}  # "../../../bin/evalbeam"
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"evalbeam"}
    assert {f.split("/")[1] for f in installed_files if f.startswith("evalbeam/")} == {
        "configs", "metrics", "pipelines", "transforms"}
    assert {f"evalbeam/{f}" for f in ("metrics/judge/__init__.py", "metrics/judge/templates.py",
                                      "metrics/judge/data/judge_metrics.yaml", "metrics/judge/rubrics.py",
                                      "metrics/judge/data/rubric_metrics.yaml", "transforms/rubrics.py",
                                      "configs/data/agents.jsonl", "configs/demo.yaml")} <= installed_files
    assert not {"evalbeam/configs/judge_metrics.yaml", "evalbeam/configs/rubric_metrics.yaml"} & installed_files


def user_packages(root: Path) -> Path:
    """A user's own code, as a repository often has it: packages named `metrics` (holding a
    custom metric) and `configs`, the names of evalbeam's folders in its repository."""
    (root / "metrics").mkdir(parents=True)
    (root / "metrics" / "__init__.py").write_text('"""the user\'s own metrics package"""\n')
    (root / "metrics" / "mine.py").write_text(textwrap.dedent("""
        def length_ratio(instance):
            return {"length_ratio": len(instance["response"]) / len(instance["reference"])}
        """))
    (root / "configs").mkdir()
    (root / "configs" / "__init__.py").write_text("raise ImportError('the user\\'s configs: evalbeam must not import it')\n")
    return root


@pytest.mark.packaging
def test_run_from_the_installed_package_in_worker_processes(installed, tmp_path):
    """With a user's packages named `metrics` and `configs` on the path, evalbeam (one top-level
    package, `evalbeam`) imports none of them, and runs the user's `metrics.mine:length_ratio`
    in its two worker processes."""
    venv, python, _ = installed
    data = tmp_path / "cases.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    config = tmp_path / "eval.yaml"
    env = {**outside_env(venv), KEY_ENV: KEY, "PYTHONPATH": str(user_packages(tmp_path / "user"))}
    with JudgeServer() as server:
        config.write_text(textwrap.dedent(f"""
            name: packaged
            run_id: pkg1
            input: {{uri: {data}, id_column: id}}
            metrics: {json.dumps(METRICS + [{"name": "words", "function": "evalbeam.metrics.examples:word_count", "inputs": ["response"]},
                                            {"name": "length_ratio", "function": "metrics.mine:length_ratio",
                                             "inputs": ["response", "reference"]}])}
            judge: {{base_url: "{server.url}", api_key_env: {KEY_ENV}, requests_per_minute: 6000, max_attempts: 3, timeout_seconds: 10}}
            output: {{parquet: {tmp_path / 'out'}}}
            """))
        result = run([venv / "bin" / "evalbeam", "run", config, "--direct_num_workers=2", "--direct_running_mode=multi_processing"],
                     cwd=tmp_path, env=env)
        assert server.stats.requests >= len(ROWS) and server.stats.api_keys == {KEY}
    assert "read 4 = scored 4 + dead-lettered 0; metric errors 0" in result.stdout, result.stdout

    results = {(r["instance_id"], r["metric"]): r for r in table(tmp_path / "out" / "pkg1", "metric_results")}
    metrics = METRICS + ["words", "length_ratio"]
    assert set(results) == {(r["id"], m) for r in ROWS for m in metrics}
    for (instance, metric), r in results.items():
        assert r["error"] is None and r["score"] is not None, (instance, metric, r)
        low, high = {"fluency": (1, 5), "words": (1, 10), "length_ratio": (0, 10)}.get(metric, (0, 1))
        assert low - 1e-9 <= r["score"] <= high + 1e-9, (instance, metric, r)  # bleu's 1.0 may be 1.0000000000000004
    assert {i: results[(i, "fluency")]["score"] for i in FLUENCY} == FLUENCY
    assert results[("p1", "fluency")]["judge_model"] and results[("p1", "fluency")]["prompt_tokens"] > 0
    assert [results[(r["id"], "trajectory_exact_match")]["score"] for r in ROWS] == [1.0, 0.0, 1.0, 0.0]
    assert [results[(r["id"], "exact_match")]["score"] for r in ROWS] == [0.0, 0.0, 1.0, 0.0]
    assert [results[(r["id"], "length_ratio")]["score"] for r in ROWS] == [len(r["response"]) / len(r["reference"]) for r in ROWS]
    assert results[("p1", "rouge_1")]["score"] > results[("p2", "rouge_1")]["score"]


@pytest.mark.packaging
def test_the_flex_template_entry_point_runs_as_the_launcher_runs_it(installed, tmp_path):
    """The Flex Template image installs evalbeam (not editable) and its launcher runs
    FLEX_TEMPLATE_PYTHON_PY_FILE, pipelines/flex_main.py, as a script: it imports evalbeam
    from the installed package, and with no --config it says so and exits 2."""
    venv, python, work = installed
    dockerfile = (ROOT / "pipelines/flex_template/Dockerfile").read_text()
    assert "ENV FLEX_TEMPLATE_PYTHON_PY_FILE=/template/pipelines/flex_main.py" in dockerfile
    script = work / "source" / "pipelines" / "flex_main.py"  # the file the image copies to /template
    result = subprocess.run([str(python), str(script)], cwd=tmp_path, env=outside_env(venv), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "the template parameter --config is required" in result.stderr


@pytest.mark.packaging
def test_an_installed_copy_does_not_submit_workers_that_lack_evalbeam(installed, tmp_path):
    """A non-editable install has no setup.py to stage: a remote run must say
    how to give the workers evalbeam, not submit a job whose workers cannot import it."""
    venv, _, _ = installed
    data = tmp_path / "cases.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    config = tmp_path / "eval.yaml"
    config.write_text(f"name: packaged\ninput: {{uri: {data}}}\nmetrics: [exact_match]\noutput: {{parquet: {tmp_path / 'out'}}}\n")
    result = subprocess.run([str(venv / "bin" / "evalbeam"), "run", str(config), "--runner=DataflowRunner", "--dry_run=True",
                             "--project=p", "--region=us-central1", "--temp_location=gs://b/tmp"],
                            cwd=tmp_path, env=outside_env(venv), capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "remote workers need evalbeam installed" in result.stderr and "--setup_file" in result.stderr


def marker_environment(python: str) -> dict:
    """The values a lock's environment markers are evaluated on, for CPython `python` (3.X) on Linux."""
    from packaging.markers import default_environment

    return {**default_environment(), "python_version": python, "python_full_version": f"{python}.0",
            "sys_platform": "linux", "platform_system": "Linux", "implementation_name": "cpython",
            "platform_python_implementation": "CPython"}


def read_lock(path: Path, python: str) -> dict:
    """{name: version} of what `pip install -r path` installs on CPython `python` (3.X) on Linux."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(marker_environment(python)):
                [specifier] = requirement.specifier
                assert specifier.operator == "==" and canonicalize_name(requirement.name) not in pins, line
                pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def test_both_locks_satisfy_setup_py_and_differ_only_where_google_adk_needs_it():
    """requirements.lock (the default environment) and requirements-agent.lock (with the `agent` extra)
    each pin every requirement of setup.py to a version it allows, on every Python each is for
    (google-adk 2.13.0 needs 3.11); the agent lock differs from the default one only in what
    google-adk 2.13.0 requires (google-genai < 3, opentelemetry <= 1.44, websockets < 16), what
    google-genai 3 alone needs, and google-adk's own dependencies."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    args = setup_arguments()
    for python in ("3.10", "3.11", "3.12", "3.13"):
        default = read_lock(ROOT / "requirements.lock", python)
        for lock, extras in ((default, ("test", "report")),) + (
                ((read_lock(ROOT / "requirements-agent.lock", python), ("test", "report", "agent")),) if python != "3.10" else ()):
            wanted = args["install_requires"] + [r for e in extras for r in args["extras_require"][e]]
            for requirement in map(Requirement, wanted):
                if requirement.marker is None or requirement.marker.evaluate(marker_environment(python)):
                    name = canonicalize_name(requirement.name)
                    assert name in lock and lock[name] in requirement.specifier, (python, requirement, lock.get(name))
    for python in ("3.11", "3.12", "3.13"):
        default, agent = read_lock(ROOT / "requirements.lock", python), read_lock(ROOT / "requirements-agent.lock", python)
        check_agent_lock(default, agent)
    # the environment the whole suite runs on (3.11) is the one the locks held before they covered other Pythons
    assert read_lock(ROOT / "requirements.lock", "3.11")["setuptools"] == "65.5.0"
    assert read_lock(ROOT / "requirements.lock", "3.13")["google-apitools"] == "0.5.35"


def check_agent_lock(default: dict, agent: dict):
    assert agent["google-adk"] == "2.13.0" and agent["google-genai"] == "2.34.0" and default["google-genai"] == "3.3.0"
    changed = {n for n in set(default) & set(agent) if default[n] != agent[n]}
    assert changed == {"google-genai", "opentelemetry-api", "opentelemetry-sdk", "opentelemetry-semantic-conventions",
                       "websockets"}
    # google-genai 3's HTTP stack (httpx2, httpcore2, truststore), which 2.34 does not use, is in both: openai and
    # anthropic use it too
    assert set(default) - set(agent) == set()
    assert {"google-adk", "fastapi", "uvicorn", "sse-starlette"} <= set(agent) - set(default)
    # the A2A client (inference.a2a) is in both; the agent lock adds its server side (ADK's to_a2a)
    assert default["a2a-sdk"] == agent["a2a-sdk"] == "1.3.0"


@pytest.mark.slow
def test_building_evalbeam_from_a_clone_leaves_the_clone_clean(tmp_path):
    """Issue 32, item 7: `pip install .` from a clone left an untracked build/ (setuptools'
    bdist_wheel builds in the tree). The clone's git status stays empty."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    # the working tree as it is (committed or not), over the clone's checkout
    for name in subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split("\0"):
        if not name:
            continue
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "tree", "--allow-empty"],
                   cwd=clone, check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", ".",
                    "-w", str(tmp_path / "wheels")], cwd=clone, check=True, capture_output=True, timeout=600)
    assert (clone / "build").is_dir()  # what setuptools leaves: ignored, not untracked
    assert subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True,
                          check=True).stdout == ""
