import math
import random
import statistics

import numpy as np
import pytest

from evalbeam.metrics.summary import ScoreMoments, bootstrap_weights


def add_weighed(m, score, instance_id, error=False, passed=None, choice=None, threshold=None):
    """One instance's row, weighed by its own bootstrap weights when its score is valid."""
    if m.add(score, error, passed, choice, threshold):
        weights = bootstrap_weights(instance_id)
        m.add_bootstrap(weights * score, weights)


def moments_of(scores, ids=None):
    m = ScoreMoments()
    for i, s in enumerate(scores):
        add_weighed(m, s, ids[i] if ids else f"id-{i}")
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


def test_bootstrap_weights_are_poisson_draws_whatever_the_batch():
    """The weights of 20,000 ids, made as one matrix: Poisson(1) in mean, variance and
    the frequency of each count, no correlation between replicates or ids; an id's
    row is the same in any batch it comes in."""
    import math

    from evalbeam.metrics.summary import BOOTSTRAP_REPLICATES, bootstrap_weight_matrix

    ids = [f"instance-{i}" for i in range(20000)]
    w = bootstrap_weight_matrix(ids)
    assert w.shape == (20000, BOOTSTRAP_REPLICATES) and w.dtype == np.float64
    assert w.mean() == pytest.approx(1.0, abs=0.005) and w.var() == pytest.approx(1.0, abs=0.01)
    for k in range(5):
        assert (w == k).mean() == pytest.approx(math.exp(-1) / math.factorial(k), abs=0.002)
    assert abs(np.corrcoef(w[:, 0], w[:, 1])[0, 1]) < 0.03 and abs(np.corrcoef(w[0], w[1])[0, 1]) < 0.3
    assert np.array_equal(bootstrap_weight_matrix(ids[7:9] + ["other"])[:2], w[7:9])
    assert np.array_equal(bootstrap_weights("instance-3"), w[3])


def test_the_batched_slice_accumulator_equals_adding_one_instance_at_a_time():
    """transforms.summarize.SliceMomentsFn weighs instances a batch at a time (and
    merges partial accumulators): its statistics equal those of ScoreMoments given
    each instance's weights as it comes, with errors, NaN, missing scores, pass
    marks and pairwise choices, over several batches and merges in any order."""
    from evalbeam.transforms.summarize import BOOTSTRAP_BATCH, SliceMomentsFn

    rng = random.Random(3)
    rows = []
    for i in range(3 * BOOTSTRAP_BATCH + 77):
        score = rng.choice([rng.random(), rng.random(), None, float("nan"), 1.0])
        error = score is None and rng.random() < 0.5
        threshold = rng.choice([0.5, 0.5, 0.7])  # each row's own (an ADK case's file's)
        rows.append((f"id-{i}", [("a", score, error, score is not None and score >= threshold, None, threshold),
                                 ("b", rng.random(), False, None, rng.choice(["CANDIDATE", "BASELINE", "TIE"]), None)]))
    expected = {"a": ScoreMoments(), "b": ScoreMoments()}
    for instance_id, results in rows:
        for metric, score, error, passed, choice, threshold in results:
            add_weighed(expected[metric], score, instance_id, error, passed, choice, threshold)
    fn = SliceMomentsFn()
    parts = []
    for start in range(0, len(rows), 700):
        acc = fn.create_accumulator()
        for row in rows[start:start + 700]:
            acc = fn.add_input(acc, row)
        parts.append(acc)
    for order in (parts, parts[::-1]):
        got = fn.extract_output(fn.merge_accumulators([fn.compact(p) for p in order])).flush().moments
        for metric in ("a", "b"):
            want, have = expected[metric].statistics(0.5), got[metric].statistics(0.5)
            assert have.keys() == want.keys() and got[metric].row_threshold(0.5) == expected[metric].row_threshold(0.5)
            for key, value in want.items():
                assert have[key] == (value if value is None or isinstance(value, int) else pytest.approx(value, rel=1e-12)), key


def test_rows_with_their_own_thresholds_pass_by_them():
    """Rows carrying their own threshold (an ADK case's file's test_config.json) pass or fail by it:
    the pass rate is the share of them that passed, and the summary's threshold is theirs when
    they all have the same, null when they differ."""
    m = ScoreMoments()
    for score, threshold in [(0.5, 0.4), (0.5, 0.6), (0.9, 0.6), (0.2, None)]:
        m.add(score, passed=None if threshold is None else score >= threshold, threshold=threshold)
    assert m.statistics(1.0)["pass_rate"] == pytest.approx(2 / 3)
    assert m.row_threshold(1.0) is None
    same = ScoreMoments()
    for score in (0.3, 0.8):
        same.add(score, passed=score >= 0.5, threshold=0.5)
    assert same.row_threshold(1.0) == 0.5 and same.statistics(1.0)["pass_rate"] == 0.5
    assert ScoreMoments().row_threshold(0.8) == 0.8
