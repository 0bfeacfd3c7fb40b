"""Summary statistics of one metric's scores, mergeable and in constant memory.

- Mean and sample variance: Welford's update and Chan et al.'s pairwise merge,
  so partial summaries from different workers combine exactly.
- 95% confidence interval of the mean: Poisson bootstrap (as in TensorFlow
  Model Analysis). Each instance gets BOOTSTRAP_REPLICATES weights drawn from
  Poisson(1), seeded by its instance id, and every replicate keeps only
  (sum of w * score, sum of w). The weights are counter-based random numbers
  (SplitMix64 of the id's hash and the replicate's number, turned into
  Poisson(1) draws by its inverse distribution function), so that the weights
  of a whole batch of instances are made by a few NumPy operations
  (`bootstrap_weight_matrix`) rather than a generator seeded per instance.
  Replicates are sums, so they merge exactly and never hold the scores; the
  interval is the 2.5th and 97.5th percentile of the replicate means. Unlike
  a normal/t interval it stays inside the range of the scores (a 0/1 metric
  never gets a bound below 0), and seeding by instance id makes it
  reproducible whatever the bundling, and the same resample of instances is
  used for every metric.
- Repeated runs (inference.num_runs > 1): the instances of a case (its runs) are
  one cluster. The bootstrap weights are drawn per case (seeded by the case's id,
  the same weight for each of its runs), so the interval resamples cases, not
  runs; with one run a case is its instance and nothing changes. The clustered
  standard error is the cluster-robust (CR1) one of a mean,
  sqrt(G/(G-1) * sum_g (S_g - n_g * mean)^2) / N over G cases, S_g the sum of
  case g's n_g valid scores and N = sum n_g: with one run per case, the usual
  s / sqrt(N). Its sum over cases is kept as n_g^2-weighted moments of the case
  means (West's weighted update, Chan's merge), so it merges exactly and never
  subtracts large sums.
- pass@k and pass^k: a case with c passes in n valid runs has the unbiased
  estimators pass@k = 1 - C(n-c, k)/C(n, k) and pass^k = C(c, k)/C(n, k)
  (Chen et al. 2021; tau-bench); the summary averages them over the cases with
  at least k valid runs, keeping per k only the two sums and the count.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from typing import Any

import numpy as np

from evalbeam.metrics.statistics.agreement import IntervalAlpha

# the slice value of a summary row over every instance
OVERALL = "overall"

BOOTSTRAP_REPLICATES = 200

# P(K <= k) for K ~ Poisson(1), k = 0, 1, ...: a uniform u in [0, 1) gives the
# draw k with CDF[k - 1] <= u < CDF[k]. Beyond k = 18 the CDF is 1 in float64.
_POISSON_CDF = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(20)])
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_REPLICATE_STEPS = np.arange(1, BOOTSTRAP_REPLICATES + 1, dtype=np.uint64) * _GOLDEN

# The most slices one column makes by default (input.max_slice_values): its values past that
# many largest slices are summarized together as <column>=(other) (transforms.summary.fold_slices).
MAX_SLICE_VALUES = 1000


def _id_seeds(instance_ids) -> np.ndarray:
    """Each id's 64-bit hash: its UTF-8 bytes' 8-byte BLAKE2b digest, read little-endian
    (joined and read as one array: a third less time than an int made of each)."""
    blake2b = hashlib.blake2b
    return np.frombuffer(b"".join([blake2b(i.encode("utf-8", "surrogatepass"), digest_size=8).digest()
                                   for i in instance_ids]), dtype="<u8")


def _poisson_draws(bits: np.ndarray) -> np.ndarray:
    """The Poisson(1) draws of 64-bit random numbers: the uniform number in [0, 1)
    of each one's top 53 bits through the inverse of Poisson(1)'s CDF."""
    uniform = (bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    return np.searchsorted(_POISSON_CDF, uniform, side="right")


# _poisson_draws by look-up, as the bootstrap weights are the summary's largest cost
# after the rows' own (its conversion and binary search were half of a batch's weights).
# A number's draw is a non-decreasing function of it, so it is the same for every number
# of a bucket of equal top _TOP_BITS bits whose first and last numbers have the same draw:
# the table holds that draw for each bucket, or -1 for the 8 buckets holding a step of the
# CDF, whose numbers (about 1 in 8,000) are drawn by _poisson_draws itself. The same
# draws, exactly.
_TOP_BITS = 16


@functools.cache
def _draw_table() -> np.ndarray:
    first = np.arange(2 ** _TOP_BITS, dtype=np.uint64) << np.uint64(64 - _TOP_BITS)
    low, high = _poisson_draws(first), _poisson_draws(first | np.uint64(2 ** (64 - _TOP_BITS) - 1))
    return np.where(low == high, low, -1).astype(np.float64)


def _poisson_weights(bits: np.ndarray) -> np.ndarray:
    """_poisson_draws(bits) as float64, by _draw_table."""
    weights = _draw_table()[bits >> np.uint64(64 - _TOP_BITS)]
    steps = np.flatnonzero(weights < 0)  # numbers in a bucket holding a step of the CDF
    if steps.size:
        weights.flat[steps] = _poisson_draws(bits.flat[steps])
    return weights


def bootstrap_weight_matrix(instance_ids) -> np.ndarray:
    """(instances x BOOTSTRAP_REPLICATES) float64: each row the bootstrap weights of
    one instance id, a function of the id alone (whatever the batch it comes in).
    Replicate j of an id with 64-bit hash h is SplitMix64's output for the state
    h + j * golden gamma (its own stream of counters), as a uniform number in
    [0, 1) by its top 53 bits, through the inverse of Poisson(1)'s CDF."""
    seeds = _id_seeds(instance_ids)
    with np.errstate(over="ignore"):  # SplitMix64 is arithmetic modulo 2**64
        z = seeds[:, None] + _REPLICATE_STEPS[None, :]
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return _poisson_weights(z)


def bootstrap_weights(instance_id: str) -> np.ndarray:
    """One instance's row of bootstrap_weight_matrix."""
    return bootstrap_weight_matrix([instance_id])[0]


@dataclasses.dataclass
class ScoreMoments:
    rows: int = 0
    errors: int = 0
    n: int = 0  # valid (finite) scores
    mean: float = 0.0
    m2: float = 0.0
    passed: int = 0
    candidate_wins: int = 0  # pairwise choices, among valid scores
    baseline_wins: int = 0
    choices: int = 0
    boot_sum: np.ndarray | None = None  # per replicate: sum of w * score
    boot_weight: np.ndarray | None = None  # per replicate: sum of w
    # per case (cluster): see the module doc
    cases: int = 0  # cases with a valid score
    case_weight: float = 0.0  # sum of n_g^2
    case_mean: float = 0.0  # n_g^2-weighted mean of the case means
    case_m2: float = 0.0  # sum of n_g^2 (case mean - case_mean)^2
    repeated_cases: int = 0  # cases with two valid scores or more
    run_std_sum: float = 0.0  # sum over them of the sample std of the case's scores
    pass_at: list[float] = dataclasses.field(default_factory=list)  # [k-1]: sum of pass@k over cases with >= k runs
    pass_all: list[float] = dataclasses.field(default_factory=list)  # [k-1]: sum of pass^k
    pass_cases: list[int] = dataclasses.field(default_factory=list)  # [k-1]: cases with >= k valid runs
    # pairwise: the share of a row's samples whose two orders agreed (position consistency)
    agreement_n: int = 0
    agreement_sum: float = 0.0
    boot_agree_sum: np.ndarray | None = None  # per replicate: sum of w * agreement
    boot_agree_weight: np.ndarray | None = None
    thresholded: int = 0  # valid scores whose row carries its threshold (each row judged by its own)
    threshold_low: float | None = None  # the lowest and highest of those thresholds
    threshold_high: float | None = None
    jury: IntervalAlpha | None = None  # a jury: Krippendorff's alpha among its jurors' scores

    def add_jurors(self, scores: list[float]) -> None:
        """A jury's row: its answered jurors' scores, one unit of the jurors' alpha."""
        if self.jury is None:
            self.jury = IntervalAlpha()
        self.jury.add(scores)

    def add(self, score: float | None, error: bool = False, passed: bool | None = None,
            choice: str | None = None, threshold: float | None = None) -> bool:
        """Count one row; whether its score is valid (finite), and so is to be
        weighed in the bootstrap sums (add_bootstrap)."""
        self.rows += 1
        if error:
            self.errors += 1
            return False
        if score is None or not math.isfinite(score):
            return False
        self.n += 1
        delta = score - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (score - self.mean)
        if passed:
            self.passed += 1
        if threshold is not None:
            self.thresholded += 1
            self.threshold_low = threshold if self.threshold_low is None else min(self.threshold_low, threshold)
            self.threshold_high = threshold if self.threshold_high is None else max(self.threshold_high, threshold)
        if choice is not None:
            self.choices += 1
            self.candidate_wins += choice == "CANDIDATE"
            self.baseline_wins += choice == "BASELINE"
        return True

    def add_single(self, score: float, passed: bool | None, threshold: float | None) -> None:
        """add(score, False, passed, None, threshold) of a finite score, then
        add_single_case(score, passed): a row with a valid score and no pairwise choice, its
        case of one run (every row of a run without repeated runs or a pairwise judge). The
        same operations in the same order, add's written out (one call fewer a row, this being
        the summary's cost a row)."""
        self.rows += 1
        self.n += 1
        delta = score - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (score - self.mean)
        if passed:
            self.passed += 1
        if threshold is not None:
            self.thresholded += 1
            self.threshold_low = threshold if self.threshold_low is None else min(self.threshold_low, threshold)
            self.threshold_high = threshold if self.threshold_high is None else max(self.threshold_high, threshold)
        self.add_single_case(score, passed)

    def add_bootstrap(self, weighted_scores: np.ndarray, weights: np.ndarray) -> None:
        """Add sums over instances whose valid scores `add` counted: of w * score,
        and of w, per replicate."""
        if self.boot_sum is None:
            self.boot_sum = weighted_scores.copy()
            self.boot_weight = weights.copy()
        else:
            self.boot_sum += weighted_scores
            self.boot_weight += weights

    def add_case(self, scores: list[float], passes: list[bool | None], agreements: list[float]) -> None:
        """Count one case (cluster): its valid scores over its runs (whatever `add`
        counted valid), whether each passed (None: the metric has no threshold) and
        the position agreement of its pairwise rows."""
        for a in agreements:
            self.agreement_n += 1
            self.agreement_sum += a
        n = len(scores)
        if n == 0:
            return
        self.cases += 1
        weight = float(n * n)
        case_mean = math.fsum(scores) / n
        self.case_weight += weight
        delta = case_mean - self.case_mean
        self.case_mean += delta * weight / self.case_weight
        self.case_m2 += weight * delta * (case_mean - self.case_mean)
        if n > 1:
            self.repeated_cases += 1
            self.run_std_sum += math.sqrt(math.fsum((x - case_mean) ** 2 for x in scores) / (n - 1))
        if any(p is None for p in passes):
            return
        c = sum(bool(p) for p in passes)
        if len(self.pass_at) < n:
            grow = n - len(self.pass_at)
            self.pass_at += [0.0] * grow
            self.pass_all += [0.0] * grow
            self.pass_cases += [0] * grow
        for k in range(1, n + 1):
            self.pass_at[k - 1] += pass_at_k(n, c, k)
            self.pass_all[k - 1] += pass_all_k(n, c, k)
            self.pass_cases[k - 1] += 1

    def add_single_case(self, score: float, passed: bool | None) -> None:
        """add_case of a case with one valid score (every case, with one run): the same
        sums without the general case's work, this being the summary's inner loop."""
        self.cases += 1
        self.case_weight += 1.0
        delta = score - self.case_mean
        self.case_mean += delta / self.case_weight
        self.case_m2 += delta * (score - self.case_mean)
        if passed is None:
            return
        if not self.pass_cases:
            self.pass_at, self.pass_all, self.pass_cases = [0.0], [0.0], [0]
        if passed:  # pass@1 = pass^1 = c for one run
            self.pass_at[0] += 1.0
            self.pass_all[0] += 1.0
        self.pass_cases[0] += 1

    def add_agreement_bootstrap(self, weighted: np.ndarray, weights: np.ndarray) -> None:
        """add_bootstrap's sums for the position agreements."""
        if self.boot_agree_sum is None:
            self.boot_agree_sum = weighted.copy()
            self.boot_agree_weight = weights.copy()
        else:
            self.boot_agree_sum += weighted
            self.boot_agree_weight += weights

    def merge(self, other: "ScoreMoments") -> "ScoreMoments":
        n = self.n + other.n
        if n == 0:
            mean, m2 = 0.0, 0.0
        else:
            delta = other.mean - self.mean
            mean = self.mean + delta * other.n / n
            m2 = self.m2 + other.m2 + delta * delta * self.n * other.n / n
        case_weight = self.case_weight + other.case_weight
        if case_weight == 0:
            case_mean, case_m2 = 0.0, 0.0
        else:
            delta = other.case_mean - self.case_mean
            case_mean = self.case_mean + delta * other.case_weight / case_weight
            case_m2 = self.case_m2 + other.case_m2 + delta * delta * self.case_weight * other.case_weight / case_weight
        return ScoreMoments(
            rows=self.rows + other.rows,
            errors=self.errors + other.errors,
            n=n,
            mean=mean,
            m2=m2,
            passed=self.passed + other.passed,
            candidate_wins=self.candidate_wins + other.candidate_wins,
            baseline_wins=self.baseline_wins + other.baseline_wins,
            choices=self.choices + other.choices,
            boot_sum=_add(self.boot_sum, other.boot_sum),
            boot_weight=_add(self.boot_weight, other.boot_weight),
            cases=self.cases + other.cases,
            case_weight=self.case_weight + other.case_weight,
            case_mean=case_mean,
            case_m2=case_m2,
            repeated_cases=self.repeated_cases + other.repeated_cases,
            run_std_sum=self.run_std_sum + other.run_std_sum,
            pass_at=_add_lists(self.pass_at, other.pass_at),
            pass_all=_add_lists(self.pass_all, other.pass_all),
            pass_cases=_add_lists(self.pass_cases, other.pass_cases),
            agreement_n=self.agreement_n + other.agreement_n,
            agreement_sum=self.agreement_sum + other.agreement_sum,
            boot_agree_sum=_add(self.boot_agree_sum, other.boot_agree_sum),
            boot_agree_weight=_add(self.boot_agree_weight, other.boot_agree_weight),
            thresholded=self.thresholded + other.thresholded,
            threshold_low=_extreme(min, self.threshold_low, other.threshold_low),
            threshold_high=_extreme(max, self.threshold_high, other.threshold_high),
            jury=other.jury if self.jury is None else self.jury if other.jury is None else self.jury.merge(other.jury),
        )

    def row_threshold(self, default: float | None = None) -> float | None:
        """The threshold of the rows that carry one, when they all have the same; None when they
        differ; `default` (the metric's) when none carries one."""
        if not self.thresholded:
            return default
        return self.threshold_low if self.threshold_low == self.threshold_high else None

    def clustered_se(self) -> float | None:
        """The cluster-robust (CR1) standard error of the mean, cluster = case (module doc)."""
        if self.cases < 2:
            return None
        about_mean = self.case_m2 + self.case_weight * (self.case_mean - self.mean) ** 2
        return math.sqrt(max(about_mean, 0.0) * self.cases / (self.cases - 1)) / self.n

    def pass_curves(self, num_runs: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | tuple[None, None]:
        """([{k, value, cases}], same for pass^k) for k = 1..num_runs; value None for a k
        no case has that many valid runs of."""
        if num_runs < 2:
            return None, None
        at, every = [], []
        for k in range(1, num_runs + 1):
            cases = self.pass_cases[k - 1] if k <= len(self.pass_cases) else 0
            at.append({"k": k, "value": self.pass_at[k - 1] / cases if cases else None, "cases": cases})
            every.append({"k": k, "value": self.pass_all[k - 1] / cases if cases else None, "cases": cases})
        return at, every

    def statistics(self, threshold: float | None = None, num_runs: int = 1) -> dict[str, Any]:
        n = self.n
        ci_low = ci_high = None
        if n > 1 and self.boot_sum is not None:
            drawn = self.boot_weight > 0
            means = self.boot_sum[drawn] / self.boot_weight[drawn]
            ci_low, ci_high = (float(v) for v in np.percentile(means, [2.5, 97.5]))
        consistency = consistency_low = consistency_high = None
        if self.agreement_n:
            consistency = self.agreement_sum / self.agreement_n
            if self.agreement_n > 1 and self.boot_agree_sum is not None:
                drawn = self.boot_agree_weight > 0
                rates = self.boot_agree_sum[drawn] / self.boot_agree_weight[drawn]
                consistency_low, consistency_high = (float(v) for v in np.percentile(rates, [2.5, 97.5]))
        pass_at, pass_all = self.pass_curves(num_runs) if threshold is not None else (None, None)
        return {
            "row_count": self.rows,
            "valid_count": n,
            "error_count": self.errors,
            "mean": self.mean if n else None,
            "std": math.sqrt(self.m2 / (n - 1)) if n > 1 else None,
            "ci_low": ci_low,
            "ci_high": ci_high,
            # each row passed or failed by its own threshold, where the rows carry theirs
            "pass_rate": (self.passed / self.thresholded if self.thresholded else
                          (self.passed / n if n else None) if threshold is not None else None),
            "candidate_model_win_rate": self.candidate_wins / self.choices if self.choices else None,
            "baseline_model_win_rate": self.baseline_wins / self.choices if self.choices else None,
            "case_count": self.cases,
            "standard_error": self.clustered_se(),
            "between_run_std": self.run_std_sum / self.repeated_cases if self.repeated_cases else None,
            "pass_at_k": pass_at,
            "pass_all_k": pass_all,
            "position_consistency": consistency,
            "position_consistency_ci_low": consistency_low,
            "position_consistency_ci_high": consistency_high,
            "jury_alpha": self.jury.value()[0] if self.jury is not None else None,
            "jury_alpha_units": self.jury.units if self.jury is not None else None,
        }


def _extreme(pick, a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else pick(a, b)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k runs drawn without replacement from a case's
    n runs (c of them passing) passes: 1 - C(n-c, k)/C(n, k). Integers to the end:
    Python's int / int is correctly rounded, however large the binomials."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_all_k(n: int, c: int, k: int) -> float:
    """The chance that all k runs drawn without replacement pass: C(c, k)/C(n, k)."""
    return math.comb(c, k) / math.comb(n, k)


def _add_lists(a: list, b: list) -> list:
    longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
    return [x + (shorter[i] if i < len(shorter) else 0) for i, x in enumerate(longer)]


def _add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return None if b is None else b.copy()
    return a.copy() if b is None else a + b
