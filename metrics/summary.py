"""Summary statistics of one metric's scores, mergeable and in constant memory.

Mean and sample variance use Welford's update and Chan et al.'s pairwise merge,
so partial summaries computed on different workers combine exactly without
holding the scores. The 95% confidence interval of the mean is Student's t
interval, mean +/- t(0.975, n-1) * s / sqrt(n): it needs only (n, mean, s),
which is what a mergeable accumulator can keep.
"""
from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass
class ScoreMoments:
    rows: int = 0
    errors: int = 0
    n: int = 0  # valid (finite) scores
    mean: float = 0.0
    m2: float = 0.0
    passed: int = 0

    def add(self, score: float | None, error: bool = False, passed: bool | None = None) -> None:
        self.rows += 1
        if error:
            self.errors += 1
            return
        if score is None or not math.isfinite(score):
            return
        self.n += 1
        delta = score - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (score - self.mean)
        if passed:
            self.passed += 1

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
        )

    def statistics(self, threshold: float | None = None) -> dict[str, float | int | None]:
        n = self.n
        mean = self.mean if n else None
        std = math.sqrt(self.m2 / (n - 1)) if n > 1 else None
        ci_low = ci_high = None
        if n > 1:
            half = t_quantile_975(n - 1) * std / math.sqrt(n)
            ci_low, ci_high = mean - half, mean + half
        elif n == 1:
            ci_low = ci_high = None
        return {
            "row_count": self.rows,
            "valid_count": n,
            "error_count": self.errors,
            "mean": mean,
            "std": std,
            "ci_low": ci_low,
            "ci_high": ci_high,
            "pass_rate": (self.passed / n if n else None) if threshold is not None else None,
        }


def t_quantile_975(dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, dof))
