"""Human-corrected estimates of a metric's mean: prediction-powered inference (PPI++).

A judge scores every instance of a run; people label a subset. The judge's mean over
all instances is precise but biased by however far the judge is from the people; the
labels' mean is unbiased but, over few labels, wide. PPI++ (Angelopoulos, Duchi and
Zrnic, "PPI++: Efficient Prediction-Powered Inference", 2023) combines them:

    theta = lambda * mean(f over the unlabelled) + mean(y - lambda * f over the labelled)

with f the judge's score and y the human value. The second term corrects the judge's
bias with the labels; lambda (the power-tuning parameter, in [0, 1]) is chosen from the
data to make the variance smallest: lambda 0 is the labels' mean alone (a judge that
tells nothing), lambda 1 is plain PPI. Its 95% CI is normal:

    theta +- z * sqrt(Var(lambda f)_unlabelled / N + Var(y - lambda f)_labelled / n)

The CI is valid when the labelled instances are a uniform random sample of the
instances (which ones get labels must not depend on the outputs or the scores).

Everything here is exactly what `ppi-python`'s `ppi_mean_pointestimate` and
`ppi_mean_ci` (lam=None, one dimension, no weights) compute, checked against them in
tests/metrics/statistics/test_ppi.py within 1e-9, including their choices: lambda from the
labelled covariance (over n) against the variance of every score (labelled and not,
over n + N - 1), clipped to [0, 1]; standard deviations over n and N. It is written
here rather than imported because ppi-python pulls in numba, statsmodels and
scikit-learn (hundreds of MB) for these few sums, and because its functions take
the arrays of every score, where a Beam combine needs sums that merge: `PPIMoments`
keeps counts, means and co-moments (Chan et al.'s pairwise update, stable where sums
of squares lose digits), so workers' partial results merge exactly in any order.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

import numpy as np

CONFIDENCE = 0.95
# the normal quantile, as statsmodels' _zconfint_generic (which ppi-python calls) takes it from SciPy; the
# standard library's agrees to the last digits, and keeps SciPy's import out of `evalbeam --help`
Z = statistics.NormalDist().inv_cdf(1 - (1 - CONFIDENCE) / 2)
# Fewer labels than this: no corrected estimate. The interval is a normal approximation
# (the central limit theorem over the labelled instances); below about ten its coverage is
# far from 95% for the 0/1 and 1-5 scores judges give.
MIN_LABELS = 10


@dataclasses.dataclass
class Moments:
    """Count, mean and sum of squared deviations of one variable (or, with `y`, of two and
    their co-moment), mergeable in any order."""

    n: int = 0
    mean_f: float = 0.0
    m2_f: float = 0.0
    mean_y: float = 0.0
    m2_y: float = 0.0
    c_fy: float = 0.0  # sum of (f - mean_f) (y - mean_y)

    @classmethod
    def of(cls, f, y=None) -> "Moments":
        """The moments of arrays at once (y None: one variable)."""
        f = np.asarray(f, dtype=np.float64)
        y = np.zeros_like(f) if y is None else np.asarray(y, dtype=np.float64)
        if not len(f):
            return cls()
        mf, my = float(f.mean()), float(y.mean())
        return cls(len(f), mf, float(((f - mf) ** 2).sum()), my, float(((y - my) ** 2).sum()),
                   float(((f - mf) * (y - my)).sum()))

    def add(self, f: float, y: float = 0.0) -> None:
        self.n += 1
        df, dy = f - self.mean_f, y - self.mean_y
        self.mean_f += df / self.n
        self.mean_y += dy / self.n
        self.m2_f += df * (f - self.mean_f)
        self.m2_y += dy * (y - self.mean_y)
        self.c_fy += df * (y - self.mean_y)

    def merge(self, other: "Moments") -> "Moments":
        if not other.n:
            return dataclasses.replace(self)
        if not self.n:
            return dataclasses.replace(other)
        n = self.n + other.n
        df, dy = other.mean_f - self.mean_f, other.mean_y - self.mean_y
        share = self.n * other.n / n
        return Moments(n, self.mean_f + df * other.n / n, self.m2_f + other.m2_f + df * df * share,
                       self.mean_y + dy * other.n / n, self.m2_y + other.m2_y + dy * dy * share,
                       self.c_fy + other.c_fy + df * dy * share)


@dataclasses.dataclass
class PPIMoments:
    """One metric and slice: the (score, human value) of the labelled instances and the
    scores of the unlabelled ones."""

    labelled: Moments = dataclasses.field(default_factory=Moments)
    unlabelled: Moments = dataclasses.field(default_factory=Moments)

    def add_labelled(self, score: float, human: float) -> None:
        self.labelled.add(score, human)

    def add_unlabelled(self, score: float) -> None:
        self.unlabelled.add(score)

    def merge(self, other: "PPIMoments") -> "PPIMoments":
        return PPIMoments(self.labelled.merge(other.labelled), self.unlabelled.merge(other.unlabelled))

    def scores(self) -> Moments:
        """The moments of every score, labelled and not."""
        lab, unl = self.labelled, self.unlabelled
        return Moments(lab.n, lab.mean_f, lab.m2_f).merge(Moments(unl.n, unl.mean_f, unl.m2_f))

    def estimate(self) -> dict[str, Any]:
        """The corrected estimate and, beside it, the judge-only and labels-only means with
        their 95% CIs (normal, standard deviation over the count, as ppi-python's classical
        intervals). Keys: see ESTIMATE_KEYS; `note` says why any is null."""
        lab, unl = self.labelled, self.unlabelled
        n, big_n = lab.n, unl.n
        out: dict[str, Any] = dict.fromkeys(ESTIMATE_KEYS)
        out.update(n_labelled=n, n_unlabelled=big_n)
        notes: list[str] = []
        every = self.scores()
        if every.n:
            out["judge_only_mean"] = every.mean_f
            if every.n >= 2:
                out["judge_only_ci_low"], out["judge_only_ci_high"] = _interval(every.mean_f, every.m2_f / every.n ** 2)
        if n:
            out["labels_only_mean"] = lab.mean_y
            if n >= 2:
                out["labels_only_ci_low"], out["labels_only_ci_high"] = _interval(lab.mean_y, lab.m2_y / n ** 2)
        if n < MIN_LABELS:
            out["note"] = (f"{n} labelled instance{'s' if n != 1 else ''} with a score: fewer than {MIN_LABELS}, "
                           "no corrected estimate")
            return out
        variance_all = every.m2_f / (every.n - 1)  # of every score, over n + N - 1 (as ppi-python's np.cov)
        if big_n == 0:
            lam = 0.0
            notes.append("every scored instance is labelled: the corrected estimate is the labels' mean")
        elif variance_all <= 0.0:
            lam = 0.0
            notes.append("the judge's scores are all the same: lambda 0, the labels' mean")
        else:
            lam = (lab.c_fy / n) / ((1.0 + n / big_n) * variance_all)
            lam = min(1.0, max(0.0, lam))
        point = lam * unl.mean_f + lab.mean_y - lam * lab.mean_f if big_n else lab.mean_y
        rectifier = max(0.0, lab.m2_y - 2.0 * lam * lab.c_fy + lam * lam * lab.m2_f) / n  # Var(y - lambda f), over n
        imputed = lam * lam * unl.m2_f / big_n if big_n else 0.0  # Var(lambda f) over the unlabelled, over N
        variance = imputed / big_n if big_n else 0.0
        variance += rectifier / n
        out.update(corrected_mean=point, corrected_lambda=lam)
        if variance > 0.0:
            out["corrected_ci_low"], out["corrected_ci_high"] = _interval(point, variance)
        else:
            notes.append("the labels and the correction have no spread (every label the same): no corrected CI")
        out["note"] = "; ".join(notes) or None
        return out


ESTIMATE_KEYS = ("n_labelled", "n_unlabelled", "corrected_mean", "corrected_ci_low", "corrected_ci_high",
                 "corrected_lambda", "judge_only_mean", "judge_only_ci_low", "judge_only_ci_high",
                 "labels_only_mean", "labels_only_ci_low", "labels_only_ci_high", "note")


def _interval(center: float, variance: float) -> tuple[float, float]:
    half = Z * math.sqrt(max(0.0, variance))
    return center - half, center + half


def standard_error(ci_low: float, ci_high: float) -> float:
    """The standard error a normal 95% CI was made from."""
    return (ci_high - ci_low) / (2.0 * Z)


# ------------------------------------------------------------------ planning labels


@dataclasses.dataclass(frozen=True)
class PilotVariances:
    """What a pilot run tells about a metric: the variance of the human values, of the judge's
    scores, and their covariance (over the labelled instances; the scores' over all)."""

    human_variance: float
    judge_variance: float
    covariance: float


def corrected_variance(pilot: PilotVariances, n, big_n):
    """(lambda, the variance of the corrected estimate) with n labelled and N unlabelled
    instances (NumPy arrays of n and N, or numbers), lambda tuned as PPI++ tunes it."""
    n, big_n = np.asarray(n, dtype=np.float64), np.asarray(big_n, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if pilot.judge_variance > 0:
            lam = np.clip(pilot.covariance / ((1.0 + n / big_n) * pilot.judge_variance), 0.0, 1.0)
        else:
            lam = np.zeros_like(n)
        lam = np.where(big_n > 0, lam, 0.0)
        rectifier = np.maximum(0.0, pilot.human_variance - 2 * lam * pilot.covariance
                               + lam * lam * pilot.judge_variance)
        imputed = np.where(big_n > 0, lam * lam * pilot.judge_variance / np.where(big_n > 0, big_n, 1.0), 0.0)
    return lam, rectifier / n + imputed


def labels_for_width(pilot: PilotVariances, width: float, instances: int) -> dict[str, Any]:
    """How many of `instances` must be labelled (the judge scoring them all) for the corrected 95%
    CI to be at most `width` wide (high - low), at the pilot's variances; and, to compare, how many
    the labels' mean alone needs. None where even labelling every instance is not enough. Every n
    from MIN_LABELS to `instances` is tried (lambda re-tuned at each): with lambda clipped to [0, 1]
    the width need not fall steadily with n."""
    needed = lam = None
    if instances >= MIN_LABELS:
        n = np.arange(MIN_LABELS, instances + 1, dtype=np.float64)
        lams, variance = corrected_variance(pilot, n, instances - n)
        fits = np.flatnonzero(2.0 * Z * np.sqrt(variance) <= width)
        if len(fits):
            needed, lam = int(n[fits[0]]), float(lams[fits[0]])
    alone = max(MIN_LABELS, math.ceil((2.0 * Z) ** 2 * pilot.human_variance / width ** 2))
    return {"labels_needed": needed, "lambda_at_needed": lam,
            "labels_only_needed": alone if alone <= instances else None}
