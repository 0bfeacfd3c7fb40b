import random

import pytest

WORDS = (
    "the a of cat cats running runs ran quickly quick brown fox jumped jumps over lazy dog dogs "
    "model models evaluation evaluating agent agents tool tools called calling 2024 42 3.14 "
    "Paris café naïve über résumé data pipeline pipelines beam beams stem stemming stemmed "
    "generously generous generation generated Mr. Dr. U.S. e.g. etc. it's don't well-known"
).split()
PUNCT = [".", ",", "!", "?", ";", ":", " -", "\n"]


def random_text(rng: random.Random, min_words=0, max_words=40) -> str:
    n = rng.randint(min_words, max_words)
    out = []
    for i in range(n):
        w = rng.choice(WORDS)
        if rng.random() < 0.1:
            w = w.capitalize()
        out.append(w)
        if rng.random() < 0.15:
            out[-1] += rng.choice(PUNCT)
    return " ".join(out)


def text_pairs(seed: int, count: int):
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        ref = random_text(rng)
        if rng.random() < 0.5:  # a related candidate: edited copy of the reference
            words = ref.split(" ")
            words = [w for w in words if rng.random() > 0.2] + [rng.choice(WORDS) for _ in range(rng.randint(0, 5))]
            hyp = " ".join(words)
        else:
            hyp = random_text(rng)
        pairs.append((ref, hyp))
    pairs += [("", ""), ("", "something"), ("something", ""), ("Same text.", "Same text."), ("!!!", "???")]
    return pairs


@pytest.fixture
def rng():
    return random.Random(1234)


# The heavy tiers: a marker each, written on the tests (`pytestmark = pytest.mark.X` for a whole module,
# `@pytest.mark.X` for one test). `make test` runs every tier; `make test-fast` (.venv only) runs what is in
# none of them: -m "not emulators and not browser and ...". pytest.ini's --strict-markers fails a misspelt one.
TIERS = {
    "emulators": "the Cloud Storage and BigQuery emulators (.emulators/: `make emulators-env`): tests using the `cloud` fixture",
    "browser": "headless Chromium (`make browser`): the report rendered",
    "airflow": "Apache Airflow in .airflow/ (`make airflow`)",
    "adk": "google-adk, the reference, in .adk/ (`make adk-env`)",
    "agent": "evalbeam[agent] in .agent/ (`make agent-env`)",
    "packaging": "builds the sdist and installs it into a fresh venv (needs only .venv)",
    "pythons": "a fresh venv from the lock and the demo on each supported Python found here (setup.py's PYTHONS)",
    "slow": "more than ~1 s on a loaded 2-core machine, and in no other tier (kept out of `make test-fast`)",
}

# Not a tier: a test that asserts what a clock or the scheduler decides (a quota's window, a hedged copy
# of a slow call, a kill at a given moment, a token expiring mid-run). `make test` runs these alone, in one
# process after the parallel run of the others, so that the other workers' load does not decide them.
TIMING = "timing: asserts what a clock or the scheduler decides: run alone after the parallel tests (`make test`)"

# Not a tier either: a test that calls tests/helpers.py's in_agent_env (it imports google-adk, which the main venv
# has not), so that it runs again in .agent/: one nested pytest per test module runs all of that module's.
AGENT_RERUN = "agent_rerun: run again, whole, in .agent/ by tests/helpers.py's in_agent_env, with the module's others"

# Fixtures that need a tier's environment: a test using one (directly or through another fixture) without
# that tier's marker is a collection error, so a marker cannot be forgotten. This checks the markers; it
# does not set them.
NEEDS = {
    "cloud": "emulators",
    "fake_gcs": "emulators",
    "adk_reference": "adk",        # tests/transforms/test_adk_files.py
    "adk_names": "adk",            # tests/metrics/test_borrowed_names.py
    "adk_simulator": "adk",        # tests/metrics/agents/test_simulator.py
    "agent_evalbeam": "agent",     # tests/metrics/judge/test_agent_judges.py
    "pythons_installed": "pythons",
    "installed": "packaging",      # tests/e2e/test_packaging.py
    "sdist": "packaging",          # tests/e2e/test_packaging.py
}

# pytest.ini's timeout (900 s) is per test; the tiers that install whole environments (their pip installs
# time out at up to 1800 s: tests/e2e/test_pythons.py) get this many seconds instead.
LONG_TIMEOUT = {"packaging": 2400, "pythons": 2400}


def pytest_configure(config):
    # `evalbeam run` records where it writes in the state folder (pipelines/run_index.py): the tests' runs
    # in a folder of this session's (of each pytest-xdist worker's), never the user's ~/.local/state
    import os
    import tempfile

    config.evalbeam_state = tempfile.mkdtemp(prefix="evalbeam-test-state-")
    os.environ["EVALBEAM_STATE_DIR"] = config.evalbeam_state
    # Beam's TestPipeline is named like a test class; it is not one.
    config.addinivalue_line("filterwarnings", "ignore:cannot collect test class 'TestPipeline':pytest.PytestCollectionWarning")
    for name, needs in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {needs}")
    config.addinivalue_line("markers", TIMING)
    config.addinivalue_line("markers", AGENT_RERUN)


@pytest.fixture(autouse=True)
def own_state_folder(tmp_path_factory, monkeypatch):
    """Each test its own run index: two tests on one worker that both name a run `f1` must not find
    each other's (run ids are the user's to pick, and tests pick short ones)."""
    monkeypatch.setenv("EVALBEAM_STATE_DIR", str(tmp_path_factory.mktemp("state")))


def pytest_unconfigure(config):
    import shutil

    if getattr(config, "evalbeam_state", None):
        shutil.rmtree(config.evalbeam_state, ignore_errors=True)


def tiers_of(item) -> set:
    """The tiers a collected test's markers give it."""
    return {m.name for m in item.iter_markers() if m.name in TIERS}


def tiers_missing(fixtures, tiers) -> set:
    """The tiers a test's fixtures need (NEEDS) that its markers do not give."""
    return {NEEDS[f] for f in fixtures if f in NEEDS} - set(tiers)


def pytest_collection_modifyitems(config, items):
    unmarked = []
    for item in items:
        tiers = tiers_of(item)
        missing = tiers_missing(getattr(item, "fixturenames", ()), tiers)
        if missing:
            unmarked.append(f"{item.nodeid} (needs {', '.join(sorted(missing))})")
        longest = max((LONG_TIMEOUT[t] for t in tiers if t in LONG_TIMEOUT), default=None)
        if longest and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(longest))
    if unmarked:
        pytest.exit("tests without the tier marker their fixtures need (tests/conftest.py's NEEDS): "
                    + "; ".join(unmarked), returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_collection_finish(session):
    # The `pythons` tier's installs (minutes each) start now, beside the tests before them. Not in a worker
    # process of pytest-xdist (`make test`: -n): each collects every test, and which one runs these is known
    # only when it gets them (one worker: --dist loadscope gives a module's tests to one worker); there
    # `pythons_installed` starts them, while the other workers go on with the other tests.
    if session.config.option.collectonly or hasattr(session.config, "workerinput"):
        return
    if any("pythons_installed" in getattr(item, "fixturenames", ()) for item in session.items):
        from tests.e2e.test_pythons import selected_versions, start_installs

        start_installs(selected_versions(session.items))


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """run(CONFIG): `evalbeam run CONFIG` of one of configs/ (run_id `demo`, its output in a folder of this
    session), run once per session (per pytest-xdist worker) and shared by the tests that only read what it
    printed and wrote: (the completed command, the run's folder)."""
    from tests.helpers import evalbeam

    runs = {}

    def run(config: str):
        if config not in runs:
            out = tmp_path_factory.mktemp("demo")
            runs[config] = (evalbeam("run", config, "--set", f"output.parquet={out}", "--set", "run_id=demo"), out / "demo")
        return runs[config]

    return run


@pytest.fixture(scope="session")
def cloud(tmp_path_factory):
    """The Cloud Storage and BigQuery emulators (installed by `make test`),
    started on free loopback ports for this test session, with the variables
    that route the real clients to them set in this process (and so in every
    `evalbeam` subprocess and DirectRunner worker)."""
    import os
    from pathlib import Path

    from tests.emulators import control

    root = Path(__file__).resolve().parent.parent / ".emulators"
    if not (root / ".installed").exists():
        pytest.fail("the emulators are not installed: run `make emulators-env` (or `make test`)")
    ports = {"storage": control.free_port(), "bigquery": control.free_port(), "bigquery_grpc": control.free_port()}
    running = control.start(root, tmp_path_factory.mktemp("emulators"), ports)
    saved = {k: os.environ.get(k) for k in running.env}
    os.environ.update(running.env)
    try:
        yield running
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for p in running.processes:
            p.terminate()
        for p in running.processes:
            p.wait(timeout=30)


@pytest.fixture
def fake_gcs(tmp_path_factory):
    """fake-gcs-server (installed by `make test` beside the other emulators), started on a free loopback
    port for one test (it starts in well under a second), with STORAGE_EMULATOR_HOST pointing at it in
    this process (and so in every `evalbeam` subprocess) while the test runs: Cloud Storage with its
    generation preconditions on uploads, which the `cloud` fixture's storage emulator ignores. Its bucket
    has the same name (tests.emulators.control.BUCKET). Put back as it was after the test, so the `cloud`
    fixture's emulator serves the tests after it. Run `evalbeam` in a subprocess under it: a Beam
    pipeline run in this process may keep the Cloud Storage client it made."""
    import os
    from pathlib import Path

    from tests.emulators import control

    root = Path(__file__).resolve().parent.parent / ".emulators"
    if not (root / ".installed").exists() or not (root / "fakegcs").exists():
        pytest.fail("fake-gcs-server is not installed: run `make emulators-env` (or `make test`)")
    running = control.start_fake_gcs(root, tmp_path_factory.mktemp("fake-gcs"), control.free_port())
    saved = {k: os.environ.get(k) for k in running.env}
    os.environ.update(running.env)
    try:
        yield running
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for p in running.processes:
            p.terminate()
        for p in running.processes:
            p.wait(timeout=30)
