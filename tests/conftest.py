import random
from pathlib import Path

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


# The heavy tiers: a marker each, applied below. `make test` runs every tier; `make test-fast`
# (.venv only) runs what is in none of them: -m "not emulators and not browser and ...".
TIERS = {
    "emulators": "the Cloud Storage and BigQuery emulators (.emulators/: `make emulators-env`): tests using the `cloud` fixture",
    "browser": "headless Chromium (`make browser`): the report rendered",
    "airflow": "Apache Airflow in .airflow/ (`make airflow`)",
    "adk": "google-adk, the reference, in .adk/ (`make adk-env`)",
    "agent": "evalbeam[agent] in .agent/ (`make agent-env`)",
    "packaging": "builds the sdist and installs it into a fresh venv (needs only .venv)",
    "slow": "more than ~20 s on a 2-core machine, and in no other tier",
}

# What puts a test in a tier: (its module under tests/, or None for any module; the names it must
# use: fixtures, directly or through other fixtures, or functions of its module it calls; or None
# for every test of the module). A new test that uses or calls one of these is in the tier too.
TIER_RULES = [
    (None, {"cloud"}, "emulators"),
    ("pipelines/test_report.py", {"render", "chromium"}, "browser"),
    ("pipelines/test_nightly_dag.py", None, "airflow"),
    ("metrics/test_adk_fidelity.py", None, "adk"),
    ("transforms/test_adk_events.py", {"events_table", "recorded", "plugin_schema"}, "adk"),
    ("transforms/test_inference.py", {"agent_env"}, "agent"),
    ("pipelines/test_packaging.py", {"installed"}, "packaging"),
]

# Measured with --durations (2 cores): the tests of no other tier that take more than ~20 s.
SLOW = set()


def pytest_configure(config):
    # Beam's TestPipeline is named like a test class; it is not one.
    config.addinivalue_line("filterwarnings", "ignore:cannot collect test class 'TestPipeline':pytest.PytestCollectionWarning")
    for name, needs in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {needs}")


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).resolve().parent
    for item in items:
        module = item.path.relative_to(tests).as_posix()
        function = getattr(item, "function", None)
        used = set(getattr(item, "fixturenames", ())) | set(getattr(getattr(function, "__code__", None), "co_names", ()))
        tiers = {tier for where, names, tier in TIER_RULES
                 if where in (None, module) and (names is None or names & used)}
        if not tiers and f"{module}::{item.originalname}" in SLOW:
            tiers.add("slow")
        for tier in sorted(tiers):
            item.add_marker(tier)


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
