import dataclasses
import itertools
import math
import random
import statistics

import numpy as np
import pytest

from evalbeam.metrics.statistics.summary import ScoreMoments, bootstrap_weights, pass_all_k, pass_at_k


def add_weighed(m, score, instance_id, error=False, passed=None, choice=None, threshold=None):
    """One instance's row, weighed by its own bootstrap weights when its score is valid."""
    if m.add(score, error, passed, choice, threshold):
        weights = bootstrap_weights(instance_id)
        m.add_bootstrap(weights * score, weights)



def result(metric, score, error=False, passed=None, choice=None, agreement=None, threshold=None, jurors=None):
    """A metric_results row as the summary's accumulator reads it (transforms.summary)."""
    return {"metric": metric, "score": score, "error": "failed" if error else None, "passed": passed,
            "pairwise_choice": choice, "position_agreement": agreement, "threshold": threshold, "jurors": jurors}

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


@pytest.mark.slow
def test_bootstrap_weights_are_poisson_draws_whatever_the_batch():
    """The weights of 20,000 ids, made as one matrix: Poisson(1) in mean, variance and
    the frequency of each count, no correlation between replicates or ids; an id's
    row is the same in any batch it comes in."""
    import math

    from evalbeam.metrics.statistics.summary import BOOTSTRAP_REPLICATES, bootstrap_weight_matrix

    ids = [f"instance-{i}" for i in range(20000)]
    w = bootstrap_weight_matrix(ids)
    assert w.shape == (20000, BOOTSTRAP_REPLICATES) and w.dtype == np.float64
    assert w.mean() == pytest.approx(1.0, abs=0.005) and w.var() == pytest.approx(1.0, abs=0.01)
    for k in range(5):
        assert (w == k).mean() == pytest.approx(math.exp(-1) / math.factorial(k), abs=0.002)
    assert abs(np.corrcoef(w[:, 0], w[:, 1])[0, 1]) < 0.03 and abs(np.corrcoef(w[0], w[1])[0, 1]) < 0.3
    assert np.array_equal(bootstrap_weight_matrix(ids[7:9] + ["other"])[:2], w[7:9])
    assert np.array_equal(bootstrap_weights("instance-3"), w[3])



def test_the_weights_looked_up_by_their_top_bits_are_the_inverse_cdf_draws():
    """bootstrap_weight_matrix draws by a table of the numbers' top bits: the same draws as
    the inverse of Poisson(1)'s CDF at each number's uniform (its top 53 bits), on random
    numbers, on the first and last number of every bucket, and on the numbers either side
    of each step of the CDF (where a bucket holds two draws)."""
    from evalbeam.metrics.statistics.summary import _POISSON_CDF, _poisson_weights

    def inverse_cdf(bits):  # the definition, written out
        return np.array([float(np.searchsorted(_POISSON_CDF, (int(b) >> 11) * 2.0 ** -53, side="right"))
                         for b in bits.ravel()]).reshape(bits.shape)

    random_bits = np.random.default_rng(0).integers(0, 2 ** 64, size=(400, 250), dtype=np.uint64)
    edges = np.arange(2 ** 16, dtype=np.uint64) << np.uint64(48)
    edges = np.concatenate([edges, edges | np.uint64(2 ** 48 - 1)])
    steps = [int(math.ceil(c * 2.0 ** 53)) + d for c in _POISSON_CDF for d in range(-3, 4)]
    steps = np.array([m << 11 | low for m in steps if 0 <= m < 2 ** 53 for low in (0, 2 ** 11 - 1)], dtype=np.uint64)
    for bits in (random_bits, edges, steps):
        assert np.array_equal(_poisson_weights(bits), inverse_cdf(bits))
    assert len(set(inverse_cdf(steps).tolist())) == 19  # the steps' numbers do straddle every step

def test_the_batched_slice_accumulator_equals_adding_one_instance_at_a_time():
    """transforms.summary.SliceMomentsFn weighs instances a batch at a time (and
    merges partial accumulators): its statistics equal those of ScoreMoments given
    each instance's weights as it comes, with errors, NaN, missing scores, pass
    marks and pairwise choices, over several batches and merges in any order."""
    from evalbeam.transforms.summary import BOOTSTRAP_BATCH, SliceMomentsFn

    rng = random.Random(3)
    rows = []
    for i in range(3 * BOOTSTRAP_BATCH + 77):
        score = rng.choice([rng.random(), rng.random(), None, float("nan"), 1.0])
        error = score is None and rng.random() < 0.5
        threshold = rng.choice([0.5, 0.5, 0.7])  # each row's own (an ADK case's file's)
        rows.append((f"id-{i}", [[("a", score, error, score is not None and score >= threshold, None, None, threshold),
                                  ("b", rng.random(), False, None, rng.choice(["CANDIDATE", "BASELINE", "TIE"]), None,
                                   None)]]))
    as_rows = [(i, [[result(*r) for r in results]]) for i, [results] in rows]
    expected = {"a": ScoreMoments(), "b": ScoreMoments()}
    for instance_id, [results] in rows:
        for metric, score, error, passed, choice, _, threshold in results:
            add_weighed(expected[metric], score, instance_id, error, passed, choice, threshold)
            valid = not error and score is not None and math.isfinite(score)
            expected[metric].add_case([score] if valid else [], [passed] if valid else [], [])
    fn = SliceMomentsFn()
    parts = []
    for start in range(0, len(rows), 700):
        acc = fn.create_accumulator()
        for row in as_rows[start:start + 700]:
            acc = fn.add_input(acc, row)
        parts.append(acc)
    for order in (parts, parts[::-1]):
        got = fn.extract_output(fn.merge_accumulators([fn.compact(p) for p in order])).flush().moments
        for metric in ("a", "b"):
            want, have = expected[metric].statistics(0.5), got[metric].statistics(0.5)
            assert have.keys() == want.keys() and got[metric].row_threshold(0.5) == expected[metric].row_threshold(0.5)
            for key, value in want.items():
                assert have[key] == (value if value is None or isinstance(value, int) else pytest.approx(value, rel=1e-12)), key


# ---------------------------------------------------------------- repeated runs


def enumerated_pass(passes, k):
    """pass@k and pass^k of one case by direct enumeration: over every k-subset of its
    runs, the share in which some run passes, and in which every run passes."""
    subsets = list(itertools.combinations(passes, k))
    return (sum(any(s) for s in subsets) / len(subsets), sum(all(s) for s in subsets) / len(subsets))


def test_pass_at_k_and_pass_all_k_equal_the_enumeration_of_run_subsets():
    for n in range(1, 9):
        for c in range(n + 1):
            passes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                at, every = enumerated_pass(passes, k)
                assert pass_at_k(n, c, k) == pytest.approx(at, abs=1e-12), (n, c, k)
                assert pass_all_k(n, c, k) == pytest.approx(every, abs=1e-12), (n, c, k)
    assert pass_at_k(100, 1, 50) == pytest.approx(0.5) and pass_all_k(100, 99, 50) == pytest.approx(0.5)


def random_cases(rng, count, num_runs, missing=0.2):
    """count cases, each with num_runs runs: (case id, [(score or None, passed)])."""
    cases = []
    for i in range(count):
        skill = rng.random()
        runs = []
        for _ in range(num_runs):
            if rng.random() < missing:
                runs.append((None, None))
            else:
                score = min(1.0, max(0.0, rng.gauss(skill, 0.25)))
                runs.append((score, score >= 0.5))
        cases.append((f"case-{i}", runs))
    return cases


def direct_statistics(cases, num_runs):
    """The repeated-run statistics computed the long way: every valid score in one list."""
    valid = [[(s, p) for s, p in runs if s is not None] for _, runs in cases]
    scores = [s for case in valid for s, _ in case]
    mean = statistics.fmean(scores)
    clusters = [case for case in valid if case]
    g = len(clusters)
    se = math.sqrt(g / (g - 1) * sum((sum(s for s, _ in c) - len(c) * mean) ** 2 for c in clusters)) / len(scores)
    stds = [statistics.stdev([s for s, _ in c]) for c in clusters if len(c) > 1]
    curves = {"pass_at_k": [], "pass_all_k": []}
    for k in range(1, num_runs + 1):
        eligible = [[p for _, p in c] for c in clusters if len(c) >= k]
        values = [enumerated_pass(p, k) for p in eligible]
        for j, name in enumerate(("pass_at_k", "pass_all_k")):
            curves[name].append({"k": k, "value": statistics.fmean(v[j] for v in values) if values else None,
                                 "cases": len(values)})
    return {"mean": mean, "standard_error": se, "between_run_std": statistics.fmean(stds) if stds else None,
            "case_count": g, **curves}


def accumulate(cases, chunk=None, metric="m"):
    """The summary's accumulator over the cases, in chunks merged as the combine does."""
    from evalbeam.transforms.summary import SliceMomentsFn

    fn = SliceMomentsFn()
    chunk = chunk or len(cases)
    parts = []
    for start in range(0, len(cases), chunk):
        acc = fn.create_accumulator()
        for case_id, runs in cases[start:start + chunk]:
            acc = fn.add_input(acc, (case_id, [[result(metric, s, s is None, p)] for s, p in runs]))
        parts.append(acc)
    return fn.merge_accumulators(parts[::-1]).flush().moments[metric]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12))
def test_repeated_run_statistics_equal_a_direct_computation(seed):
    rng = random.Random(seed)
    num_runs = rng.randint(2, 6)
    cases = random_cases(rng, rng.randint(3, 300), num_runs, missing=rng.choice([0.0, 0.15, 0.5]))
    if not any(s is not None for _, runs in cases for s, _ in runs):
        return
    want = direct_statistics(cases, num_runs)
    for chunk in (None, 7):
        got = accumulate(cases, chunk).statistics(threshold=0.5, num_runs=num_runs)
        assert got["mean"] == pytest.approx(want["mean"], rel=1e-12)
        assert got["case_count"] == want["case_count"]
        assert got["standard_error"] == pytest.approx(want["standard_error"], rel=1e-9)
        if want["between_run_std"] is None:
            assert got["between_run_std"] is None
        else:
            assert got["between_run_std"] == pytest.approx(want["between_run_std"], rel=1e-9)
        for curve in ("pass_at_k", "pass_all_k"):
            assert [(p["k"], p["cases"]) for p in got[curve]] == [(p["k"], p["cases"]) for p in want[curve]]
            for have, expect in zip(got[curve], want[curve]):
                assert have["value"] == (None if expect["value"] is None else pytest.approx(expect["value"], abs=1e-12))
    # no threshold: no pass curves; one run: none either
    assert accumulate(cases).statistics(threshold=None, num_runs=num_runs)["pass_at_k"] is None
    assert accumulate(cases).statistics(threshold=0.5, num_runs=1)["pass_all_k"] is None


def test_the_interval_resamples_cases_not_runs():
    """Every run of a case gets its case's bootstrap weight: each replicate mean is
    sum_g w_g S_g / sum_g w_g n_g, and the interval their 2.5 and 97.5 percentiles."""
    from evalbeam.metrics.statistics.summary import bootstrap_weight_matrix

    rng = random.Random(8)
    cases = random_cases(rng, 150, 4, missing=0.1)
    got = accumulate(cases, chunk=40).statistics(threshold=0.5, num_runs=4)
    w = bootstrap_weight_matrix([c for c, _ in cases])
    sums = np.array([sum(s for s, _ in runs if s is not None) for _, runs in cases])
    counts = np.array([sum(s is not None for s, _ in runs) for _, runs in cases], dtype=float)
    means = (sums @ w) / (counts @ w)
    assert (got["ci_low"], got["ci_high"]) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])), rel=1e-12)
    # runs of a case are alike here (one skill a case): resampling cases gives a wider
    # interval than pretending the 600 runs were independent
    independent = moments_of([s for _, runs in cases for s, _ in runs if s is not None]).statistics()
    assert got["ci_high"] - got["ci_low"] > independent["ci_high"] - independent["ci_low"]


def test_one_run_per_case_gives_the_usual_standard_error():
    rng = random.Random(2)
    scores = [rng.random() for _ in range(500)]
    got = accumulate([(f"i{i}", [(s, s > 0.5)]) for i, s in enumerate(scores)]).statistics(threshold=0.5)
    assert got["standard_error"] == pytest.approx(statistics.stdev(scores) / math.sqrt(len(scores)), rel=1e-9)
    assert got["between_run_std"] is None and got["pass_at_k"] is None and got["case_count"] == 500
    assert accumulate([("only", [(0.3, False)])]).statistics()["standard_error"] is None


def test_position_consistency_is_the_mean_agreement_with_a_case_bootstrap_interval():
    from evalbeam.metrics.statistics.summary import bootstrap_weight_matrix
    from evalbeam.transforms.summary import SliceMomentsFn

    rng = random.Random(4)
    fn = SliceMomentsFn()
    cases = []
    for i in range(200):
        agreement = rng.choice([0.0, 1.0, 1.0, 2 / 3])
        error = rng.random() < 0.1  # a row whose every sample failed has no agreement
        cases.append((f"p{i}", None if error else agreement))
    acc = fn.create_accumulator()
    for case_id, agreement in cases:
        acc = fn.add_input(acc, (case_id, [[result("pw", None if agreement is None else 1.0, agreement is None, None,
                                                  "CANDIDATE", agreement)]]))
    got = acc.flush().moments["pw"].statistics()
    kept = [(c, a) for c, a in cases if a is not None]
    assert got["position_consistency"] == pytest.approx(statistics.fmean(a for _, a in kept), rel=1e-12)
    w = bootstrap_weight_matrix([c for c, _ in kept])
    rates = (np.array([a for _, a in kept]) @ w) / w.sum(axis=0)
    assert (got["position_consistency_ci_low"], got["position_consistency_ci_high"]) == pytest.approx(
        tuple(np.percentile(rates, [2.5, 97.5])), rel=1e-12)
    plain = accumulate([("x", [(1.0, True)])]).statistics(threshold=0.5)
    assert plain["position_consistency"] is None and plain["position_consistency_ci_low"] is None


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


def test_add_single_is_add_then_add_single_case():
    """ScoreMoments.add_single (the summary's common row) leaves every sum exactly as add and
    add_single_case one after the other do."""
    rng = random.Random(11)
    fast, slow = ScoreMoments(), ScoreMoments()
    for _ in range(2000):
        score = rng.choice([rng.random(), rng.gauss(0, 1e6), 1, 0, True])
        threshold = rng.choice([None, 0.5, 0.7])
        passed = rng.choice([None, True, False]) if threshold is None else score >= threshold
        fast.add_single(score, passed, threshold)
        assert slow.add(score, False, passed, None, threshold)
        slow.add_single_case(score, passed)
        assert fast == slow


def same_moments(a: ScoreMoments, b: ScoreMoments) -> bool:
    """Every field equal, bit for bit (arrays element by element)."""
    for field in dataclasses.fields(ScoreMoments):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None or not np.array_equal(x, y):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


def reference_rows(cases, moments=None):
    """The one-run summary's rows of cases accumulated one by one as its definition has it:
    ScoreMoments.add, add_single_case and the agreements for each row; and per metric the
    columns to weigh (row, valid score, count, agreement, count) of its rows with a valid
    score or an agreement."""
    from evalbeam.metrics.judge.jury import juror_scores

    moments = {} if moments is None else moments
    columns: dict[str, tuple] = {}
    for row, (_, [results]) in enumerate(cases):
        for r in results:
            m = moments.setdefault(r["metric"], ScoreMoments())
            if juror_scores(r):
                m.add_jurors(juror_scores(r))
            valid = m.add(r["score"], r["error"] is not None, r["passed"], r["pairwise_choice"], r["threshold"])
            if valid:
                m.add_single_case(r["score"], r["passed"])
            agreement = r["position_agreement"]
            if agreement is not None:
                m.add_case([], [], [agreement])
            if valid or agreement is not None:
                for column, value in zip(columns.setdefault(r["metric"], ([], [], [], [], [])),
                                         (row, r["score"] if valid else 0.0, 1 if valid else 0, agreement or 0.0,
                                          0 if agreement is None else 1)):
                    column.append(value)
    return moments, columns


def reference_weigh(moments, columns, case_ids):
    """Add the bootstrap sums of the columns of these cases' rows, over their weights."""
    from evalbeam.metrics.statistics.summary import bootstrap_weight_matrix

    weights = bootstrap_weight_matrix(case_ids)
    for metric, (rows, sums, counts, agree_sums, agree_counts) in columns.items():
        drawn = weights[rows]
        if any(counts):
            moments[metric].add_bootstrap(np.asarray(sums) @ drawn, np.asarray(counts, dtype=np.float64) @ drawn)
        if any(agree_counts):
            moments[metric].add_agreement_bootstrap(np.asarray(agree_sums) @ drawn,
                                                    np.asarray(agree_counts, dtype=np.float64) @ drawn)
    return moments


def reference_one_run_moments(cases):
    """reference_rows and reference_weigh a batch of BOOTSTRAP_BATCH cases at a time."""
    from evalbeam.transforms.summary import BOOTSTRAP_BATCH

    moments: dict[str, ScoreMoments] = {}
    for start in range(0, len(cases), BOOTSTRAP_BATCH):
        batch = cases[start:start + BOOTSTRAP_BATCH]
        moments, columns = reference_rows(batch, moments)
        reference_weigh(moments, columns, [case_id for case_id, _ in batch])
    return moments


def test_the_one_run_accumulator_equals_its_definition_bit_for_bit():
    """The accumulator's common-row path (a valid score alone: one call, its waiting columns
    kept short until a row needs them all, every case's weights used as they are) leaves
    every metric's sums as the row-by-row definition does, bit for bit: metrics of plain rows
    only, of rows missing from some cases, of errors, NaN, None, jurors, pairwise choices and
    agreements, each arriving first or later in a batch."""
    import json

    from evalbeam.transforms.summary import BOOTSTRAP_BATCH, SliceMomentsFn

    rng = random.Random(12)
    cases = []
    for i in range(3 * BOOTSTRAP_BATCH + 41):
        results = [result("plain", rng.random(), threshold=0.5), result("gappy", rng.random()),
                   result("ints", rng.choice([0, 1]))]
        results[0]["passed"] = results[0]["score"] >= 0.5
        if rng.random() < 0.3:
            results.pop(1)  # a metric some cases lack: its rows are not all the cases waiting
        # invalid, or with an agreement (a row of the waiting columns other than a valid score alone),
        # late in a batch only, plain before
        late = i % BOOTSTRAP_BATCH > 300 and rng.random() < 0.1
        score = rng.choice([None, float("nan"), float("inf"), rng.random()]) if late else rng.random()
        results.append(result("late", score, error=late and score is None, agreement=rng.random() if late else None))
        jurors = json.dumps([{"score": rng.random(), "error": None}, {"score": rng.random(), "error": None}])
        results.append(result("mixed", rng.random(), jurors=jurors if rng.random() < 0.1 else None,
                              choice=rng.choice([None] * 8 + ["CANDIDATE", "BASELINE"]),
                              agreement=rng.choice([None] * 8 + [0.5, 1.0])))
        results.append(result("pairwise", rng.random(), choice="TIE", agreement=rng.choice([None, 0.0, 2 / 3])))
        results.append(result("early", rng.random(), agreement=1.0 if i in (7, 57) else None))  # in cases < 100 only
        cases.append((f"case-{i}", [results]))
    want = reference_one_run_moments(cases)
    fn = SliceMomentsFn()
    acc = fn.create_accumulator()
    for case in cases:
        acc = fn.add_input(acc, case)
    got = acc.flush().moments
    assert got.keys() == want.keys()
    for metric in want:
        assert same_moments(got[metric], want[metric]), metric
    assert not same_moments(got["plain"], want["gappy"])  # the comparison can fail
    # merged: parts of less than a batch, some of their metrics' columns short and others
    # not ("late" short in the first part only, "early" in the second), weighed once
    first, columns = reference_rows(cases[:200])
    second, their_columns = reference_rows(cases[200:500])
    merged = {metric: first[metric].merge(second[metric]) for metric in first}
    for metric, theirs in their_columns.items():
        mine = columns.setdefault(metric, ([], [], [], [], []))
        mine[0].extend(row + 200 for row in theirs[0])
        for column, values in zip(mine[1:], theirs[1:]):
            column.extend(values)
    want = reference_weigh(merged, columns, [case_id for case_id, _ in cases[:500]])
    parts = []
    for start, end in ((0, 200), (200, 500)):
        part = fn.create_accumulator()
        for case in cases[start:end]:
            part = fn.add_input(part, case)
        parts.append(part)
    assert parts[0].pending["late"].counts is None is not parts[1].pending["late"].counts
    assert parts[1].pending["early"].counts is None is not parts[0].pending["early"].counts
    got = fn.merge_accumulators(parts).flush().moments
    for metric in want:
        assert same_moments(got[metric], want[metric]), metric


def test_the_weight_matrix_is_its_definition_in_python_integers():
    """bootstrap_weight_matrix (its ids hashed as one array, mixed in NumPy, drawn by look-up)
    equals the definition written out in Python integers: replicate j of an id is SplitMix64's
    output for its BLAKE2b hash + j * golden gamma, its top 53 bits a uniform number through
    the inverse of Poisson(1)'s CDF."""
    import bisect
    import hashlib

    from evalbeam.metrics.statistics.summary import BOOTSTRAP_REPLICATES, bootstrap_weight_matrix

    cdf, mask = list(np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(20)])), 2 ** 64 - 1

    def weight(instance_id, j):
        z = (int.from_bytes(hashlib.blake2b(instance_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                            "little") + j * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        return float(bisect.bisect_right(cdf, (z >> 11) * 2.0 ** -53))

    ids = [f"case-{i}" for i in range(40)] + ["", "é", "lone \ud800 surrogate", "x" * 300]
    want = np.array([[weight(i, j) for j in range(1, BOOTSTRAP_REPLICATES + 1)] for i in ids])
    assert np.array_equal(bootstrap_weight_matrix(ids), want)
    assert bootstrap_weight_matrix([]).shape == (0, BOOTSTRAP_REPLICATES)
