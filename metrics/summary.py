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
"""
from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np

BOOTSTRAP_REPLICATES = 200

# P(K <= k) for K ~ Poisson(1), k = 0, 1, ...: a uniform u in [0, 1) gives the
# draw k with CDF[k - 1] <= u < CDF[k]. Beyond k = 18 the CDF is 1 in float64.
_POISSON_CDF = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(20)])
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_REPLICATE_STEPS = np.arange(1, BOOTSTRAP_REPLICATES + 1, dtype=np.uint64) * _GOLDEN


def _id_seed(instance_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(instance_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def bootstrap_weight_matrix(instance_ids) -> np.ndarray:
    """(instances x BOOTSTRAP_REPLICATES) float64: each row the bootstrap weights of
    one instance id, a function of the id alone (whatever the batch it comes in).
    Replicate j of an id with 64-bit hash h is SplitMix64's output for the state
    h + j * golden gamma (its own stream of counters), as a uniform number in
    [0, 1) by its top 53 bits, through the inverse of Poisson(1)'s CDF."""
    seeds = np.fromiter(map(_id_seed, instance_ids), dtype=np.uint64)
    with np.errstate(over="ignore"):  # SplitMix64 is arithmetic modulo 2**64
        z = seeds[:, None] + _REPLICATE_STEPS[None, :]
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    uniform = (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    return np.searchsorted(_POISSON_CDF, uniform, side="right").astype(np.float64)


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
    thresholded: int = 0  # valid scores whose row carries its threshold (each row judged by its own)
    threshold_low: float | None = None  # the lowest and highest of those thresholds
    threshold_high: float | None = None

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

    def add_bootstrap(self, weighted_scores: np.ndarray, weights: np.ndarray) -> None:
        """Add sums over instances whose valid scores `add` counted: of w * score,
        and of w, per replicate."""
        if self.boot_sum is None:
            self.boot_sum = weighted_scores.copy()
            self.boot_weight = weights.copy()
        else:
            self.boot_sum += weighted_scores
            self.boot_weight += weights

    def merge(self, other: "ScoreMoments") -> "ScoreMoments":
        n = self.n + other.n
        if n == 0:
            mean, m2 = 0.0, 0.0
        else:
            delta = other.mean - self.mean
            mean = self.mean + delta * other.n / n
            m2 = self.m2 + other.m2 + delta * delta * self.n * other.n / n
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
            thresholded=self.thresholded + other.thresholded,
            threshold_low=_extreme(min, self.threshold_low, other.threshold_low),
            threshold_high=_extreme(max, self.threshold_high, other.threshold_high),
        )

    def row_threshold(self, default: float | None = None) -> float | None:
        """The threshold of the rows that carry one, when they all have the same; None when they
        differ; `default` (the metric's) when none carries one."""
        if not self.thresholded:
            return default
        return self.threshold_low if self.threshold_low == self.threshold_high else None

    def statistics(self, threshold: float | None = None) -> dict[str, float | int | None]:
        n = self.n
        ci_low = ci_high = None
        if n > 1 and self.boot_sum is not None:
            drawn = self.boot_weight > 0
            means = self.boot_sum[drawn] / self.boot_weight[drawn]
            ci_low, ci_high = (float(v) for v in np.percentile(means, [2.5, 97.5]))
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
        }


def _extreme(pick, a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else pick(a, b)


def _add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return None if b is None else b.copy()
    return a.copy() if b is None else a + b
