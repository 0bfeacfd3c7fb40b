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
