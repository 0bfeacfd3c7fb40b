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


def pytest_configure(config):
    # Beam's TestPipeline is named like a test class; it is not one.
    config.addinivalue_line("filterwarnings", "ignore:cannot collect test class 'TestPipeline':pytest.PytestCollectionWarning")


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
        pytest.fail("the emulators are not installed: run `make test` (or `make emulators`)")
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
