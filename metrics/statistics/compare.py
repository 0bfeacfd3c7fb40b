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
better side. Requiring both keeps a nightly gate over many metrics from flagging
noise: unadjusted 95% intervals over 20 metrics would flag one of them by chance
on a good share of nights.

The Gate says which metrics are flagged at all (the watched ones: by default every
metric but the automatic latency_in_seconds and failure, whose units, seconds and a
share, no common tolerance fits), each metric's T (absolute, or relative to the
base run's mean: 10% of a latency) and which slice columns gate. The rows that gate
(`gated`) are the watched metrics' overall rows and their rows of the slice columns
named (compare_gate_slices); Holm's family is those rows alone, so a gate of three
metrics at 20 paired instances can flag what it sees (over every metric x slice it
could not). The watched metrics' other slice rows are adjusted among themselves and
reported, never flagged; the rows not watched likewise. Every gated row says why it
is or is not flagged (`gate_reason`), and how large a change its n can detect
(`detectable_difference`: at 80% power and alpha over the family's size, by the
normal approximation to the paired test with the sd of the paired differences).

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

from evalbeam.metrics.rows.fields import PASSTHROUGH_FIELDS
from evalbeam.metrics.statistics.calibration import PairedAgreement
from evalbeam.metrics.statistics.ppi import PPIMoments, standard_error

DIRECTIONS = ("higher", "lower", "closer_to_zero")
ALPHA = 0.05


# The comparisons table's `estimate`: what base_mean, mean, the difference, its CI and p estimate.
SCORES = "scores"  # the means of the metric's own scores (a judge's, or any metric's), paired
CORRECTED = "corrected"  # human-corrected: PPI++ over the instances both runs label (the judge's in judge_*)
# Power of the gate: the change a gated row detects this often (detectable_difference).
POWER = 0.8


def compared_value(score: float, direction: str) -> float:
    """The value a comparison works on: the score, or its distance from 0."""
    return abs(score) if direction == "closer_to_zero" else score


def better_sign(direction: str) -> int:
    """+1 when a larger compared value is better, -1 when a smaller one is."""
    return 1 if direction == "higher" else -1


# ERROR: no valid score in the base (the run's may be valid); RUN_ERROR: none in the run
PAIRED, ONLY_BASE, ONLY_RUN, ERROR, RUN_ERROR = "paired", "only_base", "only_run", "error", "run_error"


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
    run_errors: int = 0  # of `errors`, those with no valid score in the run (the base's instance lost tonight)
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
        if kind in (ERROR, RUN_ERROR):
            self.errors += 1
            self.run_errors += kind == RUN_ERROR
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
        for f in ("paired", "only_base", "only_run", "errors", "run_errors", "base_sum", "run_sum", "wins", "ties",
                  "losses"):
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
            return "mcnemar", mcnemar_p(run_only, base_only) if run_only + base_only else 1.0
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
        mean_difference = math.fsum(d * c for d, c in self.differences.items()) / n if n else None
        out = {
            "n_paired": n,
            "only_in_base": self.only_base,
            "only_in_run": self.only_run,
            "error_in_either": self.errors,
            "error_in_run": self.run_errors,
            "base_mean": self.base_sum / n if n else None,
            "mean": self.run_sum / n if n else None,
            # the mean of the differences, from the Counter (exact, order-independent)
            "mean_difference": mean_difference,
            "difference_std": math.sqrt(math.fsum(c * (d - mean_difference) ** 2 for d, c in self.differences.items())
                                        / (n - 1)) if n > 1 else None,
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
        out.update({"estimate": SCORES, "corrected_labelled": None, "corrected_lambda": None, "corrected_note": None,
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
        out.update({"estimate": CORRECTED, "base_mean": base["corrected_mean"], "mean": run["corrected_mean"],
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
    """What a comparison flags: each metric's tolerance (`per_metric`, else `tolerance`), the
    metrics watched (`watched`; None: every metric but `automatic`, the values passed through
    for agent runs, unless the config names them as metrics) and the slice columns whose rows
    gate beside the overall ones (`slices`: compare_gate_slices, --gate-slices)."""

    tolerance: Tolerance = Tolerance()
    per_metric: tuple[tuple[str, Tolerance], ...] = ()
    watched: frozenset[str] | None = None
    automatic: frozenset[str] = frozenset(PASSTHROUGH_FIELDS)
    slices: frozenset[str] = frozenset()

    def tolerance_for(self, metric: str) -> Tolerance:
        return dict(self.per_metric).get(metric, self.tolerance)

    def watches(self, metric: str) -> bool:
        return metric in self.watched if self.watched is not None else metric not in self.automatic

    def gates(self, metric: str, slice_name: str) -> bool:
        """Whether a row is in the gate's family: a watched metric's overall row, or its row of a gating slice column."""
        return self.watches(metric) and (slice_name == OVERALL or slice_column(slice_name) in self.slices)

    def overridden(self, tolerance: Tolerance | None = None, per_metric: dict[str, Tolerance] | None = None,
                   watched: Iterable[str] | None = None, slices: Iterable[str] | None = None) -> "Gate":
        """This gate with the command line's settings over it (per metric: merged, the command line's winning)."""
        return Gate(tolerance if tolerance is not None else self.tolerance,
                    tuple({**dict(self.per_metric), **(per_metric or {})}.items()),
                    frozenset(watched) if watched is not None else self.watched, self.automatic,
                    frozenset(slices) if slices is not None else self.slices)


OVERALL = "overall"


def slice_column(slice_name: str) -> str | None:
    """'column=value' -> column; None for 'overall'."""
    return None if slice_name == OVERALL else slice_name.partition("=")[0]


def flag(row: dict[str, Any], direction: str, tolerance: float, alpha: float = ALPHA) -> tuple[bool, bool]:
    """(regression, improvement) of one comparison row with its adjusted p-value."""
    low, high, p = row["ci_low"], row["ci_high"], row["p_value_adjusted"]
    if low is None or high is None or p is None or p >= alpha:
        return False, False
    if better_sign(direction) > 0:
        return high < -tolerance, low > tolerance
    return low > tolerance, high < -tolerance


# The three families Holm adjusts apart: the rows that gate, the watched metrics' other slice rows
# (reported, never flagged), the metrics not watched (likewise).
GATED, SLICES_REPORTED, UNWATCHED = "gated", "slices", "unwatched"


def family_of(row: dict[str, Any], gate: Gate) -> str:
    if gate.gates(row["metric"], row["slice"]):
        return GATED
    return SLICES_REPORTED if gate.watches(row["metric"]) else UNWATCHED


def finish(rows: Iterable[dict[str, Any]], gate: Gate, alpha: float = ALPHA) -> list[dict[str, Any]]:
    """Rows of one (base, run) pair -> the same rows with p_value_adjusted (Holm within the row's
    family: family_of), the tolerance each used, the flags (gated rows only), the change each
    gated row could detect, and why each row is or is not flagged (gate_reason)."""
    rows = sorted(rows, key=lambda r: (r["metric"], r["slice"] != OVERALL, r["slice"]))
    for family in (GATED, SLICES_REPORTED, UNWATCHED):
        members = [r for r in rows if family_of(r, gate) == family]
        size = sum(r["p_value"] is not None for r in members)
        for row, adjusted in zip(members, holm([r["p_value"] for r in members])):
            tolerance = gate.tolerance_for(row["metric"])
            row["p_value_adjusted"] = adjusted
            row["tolerance"] = tolerance.absolute(row.get("base_mean"))
            row["tolerance_relative"] = tolerance.value if tolerance.relative else None
            row["watched"] = family != UNWATCHED
            row["gated"] = family == GATED
            row["family_size"] = size
            row["alpha"] = alpha
            flags = flag(row, row["direction"], row["tolerance"], alpha)
            row["regression"], row["improvement"] = flags if family == GATED else (False, False)
            row["detectable_difference"] = detectable_difference(
                row.get("difference_std"), row["n_paired"], alpha, size, row["tolerance"]) if family == GATED else None
            row["gate_reason"] = gate_reason(row)
    return rows


def _z(alpha: float, family_size: int) -> float:
    """z of a two-sided test at alpha over the family (Bonferroni: Holm's first, strictest step) plus z of POWER."""
    from scipy import stats  # start-up time: SciPy only where a comparison is made

    return float(stats.norm.isf(alpha / (2 * max(family_size, 1))) + stats.norm.ppf(POWER))


def detectable_difference(std: float | None, n: int, alpha: float, family_size: int,
                          tolerance: float = 0.0) -> float | None:
    """The smallest change (beyond the tolerance) a gated row of n paired instances flags with
    probability POWER, at alpha over its family: T + (z_a + z_b) sd / sqrt(n), the normal
    approximation to the paired test. None where the paired differences give no sd (n < 2, or every
    difference the same: then no n says anything)."""
    if std is None or not std > 0 or n < 2:
        return None
    return tolerance + _z(alpha, family_size) * std / math.sqrt(n)


def paired_needed(difference: float, std: float | None, alpha: float, family_size: int,
                  tolerance: float = 0.0) -> int | None:
    """How many paired instances a change of `difference` needs to be flagged with probability POWER (the
    inverse of detectable_difference); None without an sd, or for a change within the tolerance."""
    if std is None or not std > 0 or abs(difference) <= tolerance:
        return None
    return max(2, math.ceil((_z(alpha, family_size) * std / (abs(difference) - tolerance)) ** 2))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _holm(row: dict[str, Any]) -> str:
    size = row.get("family_size")
    return f"p (Holm over {size} {'test' if size == 1 else 'tests'})" if size is not None else "p (Holm)"


def mcnemar_p(one_way: int, other_way: int) -> float | None:
    """McNemar's exact two-sided p-value on the discordant pairs (ONE_WAY changed one way, OTHER_WAY the
    other): the binomial test of one_way of their sum at 1/2. None with no discordant pair. The one
    McNemar of the package: the metrics', the failure modes' and the attacks' comparisons use it."""
    from scipy import stats  # start-up time: SciPy only when a p-value is asked for

    n = one_way + other_way
    return float(stats.binomtest(one_way, n, 0.5).pvalue) if n else None


def gate_reason(row: dict[str, Any]) -> str:
    """One line: why the gate flagged a row, or why it did not (within tolerance; the CI spans 0; the
    adjusted p is not below alpha, with the family's size; too few paired; a row that does not gate)."""
    alpha = row.get("alpha") or ALPHA
    would = flag(row, row["direction"], row["tolerance"], alpha)
    family = GATED if row.get("gated", True) else (SLICES_REPORTED if row.get("watched", True) else UNWATCHED)
    if row["regression"] or row["improvement"]:
        return _flagged(row, alpha)
    if family == UNWATCHED:
        return ("not flagged: the gate does not watch it" + (f" (would be a {_flagged(row, alpha)})" if any(would)
                                                             else "") + "; name it in compare_watch or --watch to gate on it")
    if family == SLICES_REPORTED:
        return ("not flagged: slice rows gate only when their column is named (compare_gate_slices, --gate-slices)"
                + (f"; would be a {_flagged(row, alpha)}" if any(would) else ""))
    n = row["n_paired"]
    if n == 0:
        return "not flagged: no instance is paired (" + unpaired_counts(row) + ")"
    low, high, p = row["ci_low"], row["ci_high"], row["p_value_adjusted"]
    if low is None or high is None:
        return f"not flagged: {n} paired {'instance' if n == 1 else 'instances'} give no CI"
    t = row["tolerance"]
    why = []
    if low <= 0 <= high:
        why.append(f"95% CI [{_num(low)}, {_num(high)}] spans 0")
    elif t > 0 and low >= -t and high <= t:
        why.append(f"within tolerance: 95% CI [{_num(low)}, {_num(high)}] lies within +-{_num(t)}")
    elif t > 0:
        why.append(f"95% CI [{_num(low)}, {_num(high)}] reaches within the tolerance +-{_num(t)}")
    if p is None or p >= alpha:
        why.append(f"{_holm(row)} {_num(p)} >= alpha {alpha:g}")
    return "not flagged: " + "; ".join(why or ["no change"])


def base_count(row: dict[str, Any]) -> int:
    """The base run's instances of a comparison row's metric and slice: paired, only in base, or errored."""
    return row["n_paired"] + row["only_in_base"] + row["error_in_either"]


def lost_count(row: dict[str, Any]) -> int:
    """The base's instances missing from the run or with no valid score in it (a row from before
    error_in_run counts every error)."""
    errors = row.get("error_in_run")
    return row["only_in_base"] + (row["error_in_either"] if errors is None else errors)


def unpaired_counts(row: dict[str, Any]) -> str:
    return (f"{row['only_in_base']} only in base, {row['only_in_run']} only in run, "
            f"{row['error_in_either']} with an error in either")


def _flagged(row: dict[str, Any], alpha: float) -> str:
    """Why a row is (or would be) flagged: its change, its CI beyond the tolerance and its adjusted p."""
    would = flag(row, row["direction"], row["tolerance"], alpha)
    verdict = "REGRESSION" if would[0] else "improvement"
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
    if row.get("estimate") == CORRECTED:
        # each run's mean is its own PPI++ estimate (its own lambda) and the difference a third, paired one
        # over the instances both label: mean - base_mean need not equal it, so the two are said apart
        change = (f"human-corrected means {means} (each run's own PPI++); paired corrected difference "
                  f"{row['mean_difference']:+.4g} ({better})")
    else:
        change = f"mean {means} ({row['mean_difference']:+.4g}, {better})"
    return (f"{verdict}: {change}; 95% CI [{_num(row['ci_low'])}, {_num(row['ci_high'])}] lies {side} ({how}) "
            f"and {_holm(row)} {_num(row['p_value_adjusted'])} < alpha {alpha:g}")


def explain(row: dict[str, Any]) -> str:
    """The row's gate_reason, led by where it is (metric, and slice but for overall)."""
    where = f"{row['metric']} ({row['slice']})" if row["slice"] != OVERALL else row["metric"]
    return f"{where}: {row.get('gate_reason') or gate_reason(row)}"
