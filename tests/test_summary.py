import math
import random
import statistics

import numpy as np
import pytest

from metrics.summary import ScoreMoments, bootstrap_weights


def moments_of(scores, ids=None):
    m = ScoreMoments()
    for i, s in enumerate(scores):
        m.add(s, weights=bootstrap_weights(ids[i] if ids else f"id-{i}"))
    return m


def merged(parts):
    out = parts[0]
    for p in parts[1:]:
        out = out.merge(p)
    return out


def test_mean_std_match_direct_computation_and_merge_in_any_order():
    rng = random.Random(5)
    scores = [rng.random() * 10 for _ in range(1000)]
    ids = [f"i{i}" for i in range(1000)]
    whole = moments_of(scores, ids).statistics()
    chunks = [moments_of(scores[i:i + 97], ids[i:i + 97]) for i in range(0, 1000, 97)]
    for parts in (chunks, chunks[::-1]):
        result = merged(parts).statistics()
        assert result["mean"] == pytest.approx(statistics.fmean(scores), rel=1e-12)
        assert result["std"] == pytest.approx(statistics.stdev(scores), rel=1e-9)
        assert result["ci_low"] == pytest.approx(whole["ci_low"], rel=1e-9)
        assert result["ci_high"] == pytest.approx(whole["ci_high"], rel=1e-9)
        assert result["valid_count"] == 1000


def test_bootstrap_interval_agrees_with_the_normal_interval_on_large_samples():
    rng = random.Random(9)
    scores = [rng.gauss(3.0, 2.0) for _ in range(5000)]
    result = moments_of(scores).statistics()
    half = 1.96 * statistics.stdev(scores) / math.sqrt(len(scores))
    mean = statistics.fmean(scores)
    assert result["ci_low"] < mean < result["ci_high"]
    assert (result["ci_high"] - result["ci_low"]) / 2 == pytest.approx(half, rel=0.15)


def test_bootstrap_interval_stays_inside_the_score_range():
    scores = [1.0] * 9 + [0.0]
    result = moments_of(scores).statistics()
    assert 0.0 <= result["ci_low"] < result["mean"] <= result["ci_high"] <= 1.0
    constant = moments_of([1.0] * 20).statistics()
    assert constant["ci_low"] == constant["ci_high"] == 1.0


def test_weights_are_deterministic_per_instance_id():
    a, b = bootstrap_weights("case-1"), bootstrap_weights("case-1")
    assert np.array_equal(a, b) and not np.array_equal(a, bootstrap_weights("case-2"))
    assert abs(a.mean() - 1.0) < 0.3  # Poisson(1)


def test_errors_nan_and_pass_rate():
    m = ScoreMoments()
    m.add(1.0, passed=True)
    m.add(0.5, passed=False)
    m.add(None, error=True)
    m.add(float("nan"))
    out = m.statistics(threshold=0.8)
    assert (out["row_count"], out["valid_count"], out["error_count"]) == (4, 2, 1)
    assert out["mean"] == 0.75 and out["pass_rate"] == 0.5
    assert moments_of([]).statistics()["mean"] is None
    single = moments_of([3.0]).statistics()
    assert single["mean"] == 3.0 and single["std"] is None and single["ci_low"] is None
    assert ScoreMoments().merge(moments_of([1.0, 3.0])).statistics()["mean"] == 2.0
