"""Paired comparison of two runs' scores, mergeable and in bounded memory.

An instance is *paired* for a metric when both runs scored it validly. Over the
paired instances of one metric and slice:

- the mean difference (run minus base) and its 95% CI from a paired Poisson
  bootstrap: each instance gets the same weights as in the summary (seeded by
  its instance id, metrics.statistics.summary.bootstrap_weights), and each replicate keeps
  sums of w * difference and of w, so partial results from any workers merge
  exactly and the interval is the same on every runner;
- wins, ties and losses, in the metric's better direction, and the win rate
  (wins + ties / 2) / n with its bootstrap CI;
- a p-value: the exact McNemar test when every score is 0 or 1 (a binomial test
  on the discordant pairs), else the Wilcoxon signed-rank test, both from SciPy;
- across the rows compared, the Holm-adjusted p-value.

A row is flagged `regression` when its CI lies entirely on the worse side of
the tolerance (below -T where higher is better, above +T where lower is better)
*and* its Holm-adjusted p-value is below alpha; `improvement` likewise on the
better side. Requiring both keeps a nightly gate over many metrics and slices
from flagging noise: unadjusted 95% intervals over 20 metric-slices would flag
one of them by chance on a good share of nights.

The Gate says which metrics are flagged at all (the watched ones: by default every
metric but the automatic latency_in_seconds and failure, whose units, seconds and a
share, no common tolerance fits) and each metric's T: absolute, or relative to the
base run's mean (10% of a latency). Holm's family is the watched rows; the rows not
watched are adjusted among themselves and never flagged.

Human-corrected estimates: when both runs have input.labels for a metric, each paired
instance is also added to three PPI++ accumulators (metrics.statistics.ppi): the base run's score
against its label, the run's against its, and the difference (run minus base) of the
scores against the difference of the labels, labelled where both runs' labels are given.
With at least MIN_LABELS such instances in a slice, the row's base_mean, mean,
mean_difference, ci_low, ci_high and p_value are the corrected ones (`estimate` says
`corrected`; test `ppi++`: the normal test of the corrected difference), so the gate
flags on them; the judge-only values stay in the judge_* columns. Wins, ties, losses and
the win rate are the judge's. The difference is estimated paired, as one mean (PPI++ of
the per-instance difference), so what the two runs share cancels in its CI.

With repeated runs (inference.num_runs > 1 on either side) the paired unit is the
case, not the instance: each value added is a case's mean over its valid runs and the
weights are the case's (transforms.compare pairs them); everything here is unchanged.

Directions: `higher` (most metrics), `lower` (latency, failure), and
`closer_to_zero` (verbosity, -2..2 with 0 best), which is compared on the
distance from zero, |score|, as a lower-is-better value.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Iterable

import numpy as np

from evalbeam.metrics.agent import PASSTHROUGH_FIELDS
from evalbeam.metrics.statistics.calibration import PairedAgreement
from evalbeam.metrics.statistics.ppi import PPIMoments, standard_error

DIRECTIONS = ("higher", "lower", "closer_to_zero")
ALPHA = 0.05


def compared_value(score: float, direction: str) -> float:
    """The value a comparison works on: the score, or its distance from 0."""
    return abs(score) if direction == "closer_to_zero" else score


def better_sign(direction: str) -> int:
    """+1 when a larger compared value is better, -1 when a smaller one is."""
    return 1 if direction == "higher" else -1


PAIRED, ONLY_BASE, ONLY_RUN, ERROR = "paired", "only_base", "only_run", "error"


@dataclasses.dataclass
class PairedMoments:
    """One metric and slice: counts, sums, the paired differences (as a Counter
    of values: exact for Wilcoxon, and small for the discrete scores most metrics
    have) and the bootstrap replicate sums."""

    sign: int = 1
    paired: int = 0
    only_base: int = 0
    only_run: int = 0
    errors: int = 0
    base_sum: float = 0.0
    run_sum: float = 0.0
    wins: int = 0
    ties: int = 0
    losses: int = 0
    binary: bool = True  # every compared value so far is 0 or 1
    differences: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    boot_difference: np.ndarray | None = None  # per replicate: sum of w * (run - base)
    boot_win: np.ndarray | None = None  # per replicate: sum of w * (1 win, 0.5 tie, 0 loss)
    boot_weight: np.ndarray | None = None  # per replicate: sum of w
    # input.labels: each run's agreement with the people, over the labelled paired instances
    agreement: PairedAgreement | None = None
    # human-corrected estimates (both runs labelled): base, run, run minus base
    corrected: tuple[PPIMoments, PPIMoments, PPIMoments] | None = None

    def add_corrected(self, base: float, run: float, base_human: float | None, run_human: float | None) -> None:
        """A paired instance of a metric both runs label: its compared values, and each run's human
        value (its compared value; None: not labelled in that run)."""
        if self.corrected is None:
            self.corrected = (PPIMoments(), PPIMoments(), PPIMoments())
        for moments, score, human in ((self.corrected[0], base, base_human), (self.corrected[1], run, run_human)):
            if human is None:
                moments.add_unlabelled(score)
            else:
                moments.add_labelled(score, human)
        if base_human is None or run_human is None:
            self.corrected[2].add_unlabelled(run - base)
        else:
            self.corrected[2].add_labelled(run - base, run_human - base_human)

    def add_labelled(self, base: float, run: float, human: float, weights: np.ndarray | None) -> None:
        """A paired instance with a human label: its raw scores (not compared_value's) against it."""
        if self.agreement is None:
            self.agreement = PairedAgreement()
        self.agreement.add(base, run, human, weights)

    def add(self, kind: str, base: float | None = None, run: float | None = None,
            weights: np.ndarray | None = None) -> None:
        if kind == ONLY_BASE:
            self.only_base += 1
            return
        if kind == ONLY_RUN:
            self.only_run += 1
            return
        if kind == ERROR:
            self.errors += 1
            return
        self.paired += 1
        self.base_sum += base
        self.run_sum += run
        self.binary = self.binary and base in (0.0, 1.0) and run in (0.0, 1.0)
        difference = run - base
        self.differences[difference] += 1
        oriented = self.sign * difference
        win = 1.0 if oriented > 0 else 0.5 if oriented == 0 else 0.0
        self.wins += oriented > 0
        self.ties += oriented == 0
        self.losses += oriented < 0
        if weights is not None:
            if self.boot_weight is None:
                self.boot_difference = weights * difference
                self.boot_win = weights * win
                self.boot_weight = weights.copy()
            else:
                self.boot_difference += weights * difference
                self.boot_win += weights * win
                self.boot_weight += weights

    def merge(self, other: "PairedMoments") -> "PairedMoments":
        out = PairedMoments(sign=self.sign)
        for f in ("paired", "only_base", "only_run", "errors", "base_sum", "run_sum", "wins", "ties", "losses"):
            setattr(out, f, getattr(self, f) + getattr(other, f))
        out.binary = self.binary and other.binary
        out.differences = self.differences + other.differences
        # Counter addition drops zero and negative counts; counts here are positive
        for f in ("boot_difference", "boot_win", "boot_weight"):
            a, b = getattr(self, f), getattr(other, f)
            setattr(out, f, (None if b is None else b.copy()) if a is None else (a.copy() if b is None else a + b))
        if self.agreement is not None or other.agreement is not None:
            out.agreement = (self.agreement or PairedAgreement()).merge(other.agreement or PairedAgreement())
        if self.corrected is not None or other.corrected is not None:
            empty = (PPIMoments(), PPIMoments(), PPIMoments())
            out.corrected = tuple(a.merge(b) for a, b in zip(self.corrected or empty, other.corrected or empty))
        return out

    def p_value(self) -> tuple[str | None, float | None]:
        """(test name, two-sided p-value); (None, None) with nothing paired."""
        from scipy import stats  # start-up time: SciPy only when a p-value is asked for

        if self.paired == 0:
            return None, None
        if self.binary:
            run_only = self.differences.get(1.0, 0)  # base 0, run 1
            base_only = self.differences.get(-1.0, 0)  # base 1, run 0
            discordant = run_only + base_only
            if discordant == 0:
                return "mcnemar", 1.0
            return "mcnemar", float(stats.binomtest(run_only, discordant, 0.5).pvalue)
        nonzero = {d: c for d, c in self.differences.items() if d != 0}
        if not nonzero:
            return "wilcoxon", 1.0
        values = np.repeat(np.fromiter(nonzero.keys(), float), np.fromiter(nonzero.values(), int))
        return "wilcoxon", float(stats.wilcoxon(values).pvalue)

    def statistics(self) -> dict[str, Any]:
        n = self.paired
        ci_low = ci_high = win_low = win_high = None
        if n > 1 and self.boot_weight is not None:
            drawn = self.boot_weight > 0
            means = self.boot_difference[drawn] / self.boot_weight[drawn]
            ci_low, ci_high = (float(v) for v in np.percentile(means, [2.5, 97.5]))
            rates = self.boot_win[drawn] / self.boot_weight[drawn]
            win_low, win_high = (float(v) for v in np.percentile(rates, [2.5, 97.5]))
        test, p = self.p_value()
        out = {
            "n_paired": n,
            "only_in_base": self.only_base,
            "only_in_run": self.only_run,
            "error_in_either": self.errors,
            "base_mean": self.base_sum / n if n else None,
            "mean": self.run_sum / n if n else None,
            # the mean of the differences, from the Counter (exact, order-independent)
            "mean_difference": math.fsum(d * c for d, c in self.differences.items()) / n if n else None,
            "ci_low": ci_low,
            "ci_high": ci_high,
            "test": test,
            "p_value": p,
            "wins": self.wins,
            "ties": self.ties,
            "losses": self.losses,
            "win_rate": (self.wins + self.ties / 2) / n if n else None,
            "win_rate_ci_low": win_low,
            "win_rate_ci_high": win_high,
            **(self.agreement or PairedAgreement()).statistics(),
        }
        return self._corrected(out)

    def _corrected(self, out: dict[str, Any]) -> dict[str, Any]:
        """The row with the corrected estimates in place of the judge's where there are some (see the
        module doc); the judge's kept in judge_*."""
        from scipy import stats  # start-up time: SciPy only when a p-value is asked for

        judged = ("base_mean", "mean", "mean_difference", "ci_low", "ci_high", "test", "p_value")
        out.update({"estimate": "judge", "corrected_labelled": None, "corrected_lambda": None, "corrected_note": None,
                    **{f"judge_{k}": out[k] for k in judged}})
        if self.corrected is None:
            return out
        base, run, difference = (m.estimate() for m in self.corrected)
        out["corrected_labelled"] = difference["n_labelled"]
        if difference["corrected_ci_low"] is None or base["corrected_mean"] is None or run["corrected_mean"] is None:
            why = difference["note"] or base["note"] or run["note"]
            out["corrected_note"] = f"judge-only estimates: {why}" if why else "judge-only estimates"
            return out
        point, low, high = difference["corrected_mean"], difference["corrected_ci_low"], difference["corrected_ci_high"]
        z = point / standard_error(low, high)
        out.update({"estimate": "corrected", "base_mean": base["corrected_mean"], "mean": run["corrected_mean"],
                    "mean_difference": point, "ci_low": low, "ci_high": high, "test": "ppi++",
                    "p_value": float(2 * stats.norm.sf(abs(z))), "corrected_lambda": difference["corrected_lambda"],
                    "corrected_note": difference["note"]})
        return out


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment (family-wise error), None kept as None.
    SciPy has no Holm (only Benjamini-Hochberg); statsmodels would be a large
    dependency for these few lines."""
    indexed = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(indexed)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """T of the flags: `value` itself (absolute), or `value` times |the base run's mean| (relative)."""

    value: float = 0.0
    relative: bool = False

    def absolute(self, base_mean: float | None) -> float:
        if not self.relative:
            return self.value
        return self.value * abs(base_mean) if base_mean is not None else 0.0

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


TOLERANCE_FORM = "a number >= 0 (absolute, in the metric's units) or 'N%' (relative to the base run's mean)"


def parse_tolerance(value: Any) -> Tolerance:
    """0.01 or '0.01' -> absolute; '10%' -> relative (0.1). ValueError naming the form otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a tolerance: give {TOLERANCE_FORM}")
    relative = isinstance(value, str) and value.strip().endswith("%")
    text = value.strip().removesuffix("%") if isinstance(value, str) else value
    try:
        number = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a tolerance: give {TOLERANCE_FORM}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{value!r} is not a tolerance: give {TOLERANCE_FORM}")
    return Tolerance(number / 100, True) if relative else Tolerance(number)


@dataclasses.dataclass(frozen=True)
class Gate:
    """What a comparison flags: each metric's tolerance (`per_metric`, else `tolerance`) and the
    metrics watched (`watched`; None: every metric but `automatic`, the values passed through
    for agent runs, unless the config names them as metrics)."""

    tolerance: Tolerance = Tolerance()
    per_metric: tuple[tuple[str, Tolerance], ...] = ()
    watched: frozenset[str] | None = None
    automatic: frozenset[str] = frozenset(PASSTHROUGH_FIELDS)

    def tolerance_for(self, metric: str) -> Tolerance:
        return dict(self.per_metric).get(metric, self.tolerance)

    def watches(self, metric: str) -> bool:
        return metric in self.watched if self.watched is not None else metric not in self.automatic

    def overridden(self, tolerance: Tolerance | None = None, per_metric: dict[str, Tolerance] | None = None,
                   watched: Iterable[str] | None = None) -> "Gate":
        """This gate with the command line's settings over it (per metric: merged, the command line's winning)."""
        return Gate(tolerance if tolerance is not None else self.tolerance,
                    tuple({**dict(self.per_metric), **(per_metric or {})}.items()),
                    frozenset(watched) if watched is not None else self.watched, self.automatic)


def flag(row: dict[str, Any], direction: str, tolerance: float, alpha: float = ALPHA) -> tuple[bool, bool]:
    """(regression, improvement) of one comparison row with its adjusted p-value."""
    low, high, p = row["ci_low"], row["ci_high"], row["p_value_adjusted"]
    if low is None or high is None or p is None or p >= alpha:
        return False, False
    if better_sign(direction) > 0:
        return high < -tolerance, low > tolerance
    return low > tolerance, high < -tolerance


def finish(rows: Iterable[dict[str, Any]], gate: Gate, alpha: float = ALPHA) -> list[dict[str, Any]]:
    """Rows of one (base, run) pair -> the same rows with p_value_adjusted, the tolerance each
    used and the flags (only on the metrics the gate watches)."""
    rows = sorted(rows, key=lambda r: (r["metric"], r["slice"] != "overall", r["slice"]))
    for family in (True, False):
        members = [r for r in rows if gate.watches(r["metric"]) == family]
        for row, adjusted in zip(members, holm([r["p_value"] for r in members])):
            tolerance = gate.tolerance_for(row["metric"])
            row["p_value_adjusted"] = adjusted
            row["tolerance"] = tolerance.absolute(row.get("base_mean"))
            row["tolerance_relative"] = tolerance.value if tolerance.relative else None
            row["watched"] = family
            row["alpha"] = alpha
            flags = flag(row, row["direction"], row["tolerance"], alpha)
            row["regression"], row["improvement"] = flags if family else (False, False)
    return rows


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def explain(row: dict[str, Any]) -> str | None:
    """One line saying why the gate flagged a row, or why a row that would be flagged is not
    (a metric the gate does not watch); None for the other rows."""
    alpha = row.get("alpha") or ALPHA
    would = flag(row, row["direction"], row["tolerance"], alpha)
    watched = row.get("watched", True)
    if not (row["regression"] or row["improvement"] or any(would)):
        return None
    worse = would[0]
    verdict = "REGRESSION" if worse else "improvement"
    t = row["tolerance"]
    # the side the CI lies beyond: -T below, +T above
    below = row["ci_high"] < -t
    relative = row.get("tolerance_relative")
    if t == 0 and relative is None:
        side, how = ("below 0" if below else "above 0"), "no tolerance"
    else:
        side = f"below -{_num(t)}" if below else f"above +{_num(t)}"
        how = (f"the tolerance, {relative * 100:g}% of the base mean {_num(row['base_mean'])}" if relative is not None
               else "the tolerance, absolute")
    better = {"higher": "higher is better", "lower": "lower is better",
              "closer_to_zero": "closer to 0 is better"}.get(row["direction"], row["direction"])
    means = f"{row['base_mean']:.6g} -> {row['mean']:.6g}"  # six digits: a change of 0.0002 in 2 s shows
    if row.get("estimate") == "corrected":
        # each run's mean is its own PPI++ estimate (its own lambda) and the difference a third, paired one
        # over the instances both label: mean - base_mean need not equal it, so the two are said apart
        change = (f"human-corrected means {means} (each run's own PPI++); paired corrected difference "
                  f"{row['mean_difference']:+.4g} ({better})")
    else:
        change = f"mean {means} ({row['mean_difference']:+.4g}, {better})"
    because = (f"{change}; "
               f"95% CI [{_num(row['ci_low'])}, {_num(row['ci_high'])}] lies {side} ({how}) "
               f"and p (Holm) {_num(row['p_value_adjusted'])} < alpha {alpha:g}")
    where = f"{row['metric']} ({row['slice']})" if row["slice"] != "overall" else row["metric"]
    if watched:
        return f"{where}: {verdict}: {because}"
    return (f"{where}: not flagged, the gate does not watch it (would be a {verdict}: {because}); "
            "name it in compare_watch or --watch to gate on it")
