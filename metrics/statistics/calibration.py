"""Agreement of a metric (usually a judge) with human labels, mergeable and in bounded memory.

One metric and slice is summarized by a `CalibrationMoments`:

- the joint distribution of (judge score, human label) as a count per distinct
  pair (`Agreement.cells`): every rank and category statistic (Spearman, Kendall's
  tau-b, Cohen's kappa, the confusion matrix) is an exact function of it, ties
  included, so partial results from any workers merge exactly. A judge on a
  scale of K values against labels on one of L values holds at most K * L cells,
  whatever the number of instances; a continuous score against continuous labels
  holds one cell per distinct pair, up to MAX_CELLS, past which the rank and
  category statistics are null with a note (the means, MAE and pass/fail counts,
  which are sums, are still given);
- per cell, the sum of each instance's Poisson bootstrap weights (the summary's,
  seeded by instance id: metrics.statistics.summary.bootstrap_weight_matrix), so a
  replicate is the same table with the weighted counts: the 95% CI of the
  quadratic weighted kappa (categorical scales) or of Spearman's rho (continuous)
  is the 2.5th and 97.5th percentile of its value over the replicates;
- sums for the means, the mean absolute error and the pass/fail confusion (human
  label the truth, the judge the prediction, positive = score >= threshold);
- the moments of the human-corrected estimate of the metric's mean (metrics.statistics.ppi.PPIMoments:
  the labelled pairs, and the scores of the unlabelled instances);
- with several annotators, the sums of Krippendorff's alpha at the interval level
  (constant size: the observed disagreement is a sum over instances, the
  expected one a function of the count, sum and sum of squares of the labels).

The human value an instance's score is compared with is the mean of its
annotators' valid labels (one annotator: that label).

A slice's scale is *categorical* when every score and human value in it is a
whole number and there are at most MAX_CATEGORIES distinct ones (a 1..5 rating,
pass/fail as 0/1): the categories are the sorted distinct values seen, as
scikit-learn's `cohen_kappa_score` takes them, and the quadratic weights are on
their positions, as scikit-learn's are. Otherwise it is *continuous*: kappa is
null and the CI is Spearman's.

Statistics are computed here (NumPy, SciPy) rather than with scikit-learn, which
is not a dependency of evalbeam; the tests compare every one with
scikit-learn's and SciPy's on generated labels.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np

from evalbeam.metrics.statistics.agreement import IntervalAlpha
from evalbeam.metrics.statistics.ppi import PPIMoments
from evalbeam.metrics.statistics.summary import BOOTSTRAP_REPLICATES

MAX_CATEGORIES = 20
# The largest label magnitude taken: far past any metric's scale, and small enough that the
# annotator sums (of squares, over any number of rows) stay finite; a larger one is refused.
MAX_LABEL_MAGNITUDE = 1e15
# Distinct (score, label) pairs kept per metric and slice: each holds a count and
# BOOTSTRAP_REPLICATES weight sums (1.6 KB), so at most about 8 MB.
MAX_CELLS = 5000

CATEGORICAL, CONTINUOUS = "categorical", "continuous"


# ------------------------------------------------------------------ labels


_BOOL_TEXT = {"true": 1.0, "false": 0.0, "pass": 1.0, "fail": 0.0, "yes": 1.0, "no": 0.0}


def parse_label(value: Any) -> float | None:
    """A human label cell -> its value on the metric's scale, None when the cell is
    empty (an unlabelled instance). Numbers as they are; booleans (and the texts
    true/false, yes/no, pass/fail) as 1 and 0; a text holding a number as that
    number. Raises ValueError saying why for anything else (a text that is no
    number, a non-finite number, a list, an object)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an integer past the float range (a JSON number of 400 digits)
            raise ValueError(f"{_short(value)} is beyond {MAX_LABEL_MAGNITUDE:g}, the largest label taken") from None
    elif isinstance(value, str):
        text = value.strip()
        if text.lower() in _BOOL_TEXT:
            return _BOOL_TEXT[text.lower()]
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{_short(value)} is not a number (nor true/false)") from None
    else:
        raise ValueError(f"must be a number or true/false, got {type(value).__name__}")
    if not math.isfinite(number):
        raise ValueError(f"{_short(value)} is not a finite number")
    if abs(number) > MAX_LABEL_MAGNITUDE:
        raise ValueError(f"{_short(value)} is beyond {MAX_LABEL_MAGNITUDE:g}, the largest label taken")
    return number


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def human_value(labels) -> float | None:
    """The value a score is compared with: the mean of the valid labels, None when none is."""
    valid = [v for v in labels if v is not None]
    return math.fsum(valid) / len(valid) if valid else None


# ------------------------------------------------------------------ agreement


@dataclasses.dataclass
class Agreement:
    """The joint distribution of (judge, human) as counts per distinct pair, and per
    pair the sums of its instances' bootstrap weights."""

    cells: dict = dataclasses.field(default_factory=dict)  # (judge, human) -> count
    boot: dict = dataclasses.field(default_factory=dict)  # (judge, human) -> per replicate: sum of weights
    overflow: bool = False  # more than MAX_CELLS distinct pairs: dropped

    def add(self, judge: float, human: float, weights: np.ndarray | None = None) -> None:
        if self.overflow:
            return
        key = (judge, human)
        self.cells[key] = self.cells.get(key, 0) + 1
        if weights is not None:
            self.add_weights(key, weights)
        if len(self.cells) > MAX_CELLS:
            self._overflow()

    def add_weights(self, key, weights: np.ndarray) -> None:
        if self.overflow:
            return
        mine = self.boot.get(key)
        if mine is None:
            self.boot[key] = np.array(weights, dtype=np.float64)
        else:
            mine += weights

    def _overflow(self) -> None:
        self.overflow, self.cells, self.boot = True, {}, {}

    def merge(self, other: "Agreement") -> "Agreement":
        if self.overflow or other.overflow:
            return Agreement(overflow=True)
        merged = Agreement(dict(self.cells), {k: v.copy() for k, v in self.boot.items()})
        for key, count in other.cells.items():
            merged.cells[key] = merged.cells.get(key, 0) + count
        for key, weights in other.boot.items():
            merged.add_weights(key, weights)
        if len(merged.cells) > MAX_CELLS:
            merged._overflow()
        return merged

    def arrays(self):
        """(judge values, human values, counts, bootstrap weights or None): one entry a cell."""
        keys = sorted(self.cells)
        x = np.array([k[0] for k in keys], dtype=np.float64)
        y = np.array([k[1] for k in keys], dtype=np.float64)
        w = np.array([self.cells[k] for k in keys], dtype=np.float64)
        boot = None
        if keys and all(k in self.boot for k in keys):
            boot = np.stack([self.boot[k] for k in keys])
        return x, y, w, boot

    def scale(self) -> str:
        values = {v for key in self.cells for v in key}
        if len(values) <= MAX_CATEGORIES and all(float(v).is_integer() for v in values):
            return CATEGORICAL
        return CONTINUOUS


def _midranks(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Midranks of cells' values in the data the weights make (w copies of each cell):
    cells x replicates (weights 2-D) or cells (1-D)."""
    distinct, index = np.unique(values, return_inverse=True)
    shape = (len(distinct),) + weights.shape[1:]
    per_value = np.zeros(shape)
    np.add.at(per_value, index, weights)
    before = np.cumsum(per_value, axis=0) - per_value
    return (before + (per_value + 1.0) / 2.0)[index]


def weighted_spearman(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray | float:
    """Spearman's rho of the data where cell i occurs w[i] times (w: cells, or cells x
    replicates for one rho a replicate): Pearson's r of the midranks, as SciPy's
    spearmanr. NaN where a side is constant (the caller turns it into a null)."""
    rx, ry = _midranks(x, w), _midranks(y, w)
    n = w.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx, my = (w * rx).sum(axis=0) / n, (w * ry).sum(axis=0) / n
        dx, dy = rx - mx, ry - my
        cov = (w * dx * dy).sum(axis=0)
        vx, vy = (w * dx * dx).sum(axis=0), (w * dy * dy).sum(axis=0)
        # a constant side: its deviations are rounding noise around 0
        degenerate = (vx <= 1e-12 * np.maximum(n, 1) ** 3) | (vy <= 1e-12 * np.maximum(n, 1) ** 3)
        rho = np.clip(cov / np.sqrt(vx * vy), -1.0, 1.0)
    return np.where(degenerate, np.nan, rho)


def weighted_kendall_tau_b(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Kendall's tau-b of the data where cell i occurs w[i] times, as SciPy's kendalltau:
    (concordant - discordant) / sqrt((n0 - ties in x) (n0 - ties in y)). Pairwise over
    the cells (at most MAX_CELLS), in blocks. NaN where undefined."""
    n = w.sum()
    difference = 0.0
    for start in range(0, len(x), 512):
        sx = np.sign(x[start:start + 512, None] - x[None, :])
        sy = np.sign(y[start:start + 512, None] - y[None, :])
        difference += float((w[start:start + 512, None] * w[None, :] * sx * sy).sum())
    difference /= 2.0  # each unordered pair of cells counted twice
    n0 = n * (n - 1) / 2.0

    def ties(values):
        _, index = np.unique(values, return_inverse=True)
        t = np.bincount(index, weights=w)
        return float((t * (t - 1) / 2.0).sum())

    denominator = (n0 - ties(x)) * (n0 - ties(y))
    if denominator <= 0:
        return math.nan
    return min(1.0, max(-1.0, difference / math.sqrt(denominator)))


def contingency(x: np.ndarray, y: np.ndarray, w: np.ndarray, categories: np.ndarray) -> np.ndarray:
    """categories x categories (x replicates when w is 2-D): rows the human value, columns the judge's."""
    rows, cols = np.searchsorted(categories, y), np.searchsorted(categories, x)
    table = np.zeros((len(categories), len(categories)) + w.shape[1:])
    np.add.at(table, (rows, cols), w)
    return table


def kappa(table: np.ndarray, weights: str | None) -> np.ndarray | float:
    """Cohen's kappa of a contingency table (or one a replicate: K x K x R), as
    scikit-learn's cohen_kappa_score: weights None or 'quadratic' (on the categories'
    positions). NaN where the expected disagreement is 0."""
    k = table.shape[0]
    total = table.sum(axis=(0, 1))
    expected = np.einsum("i...,j...->ij...", table.sum(axis=1), table.sum(axis=0)) / np.where(total > 0, total, 1)
    positions = np.arange(k)
    if weights == "quadratic":
        w = (positions[:, None] - positions[None, :]) ** 2.0
    else:
        w = 1.0 - np.eye(k)
    w = w.reshape((k, k) + (1,) * (table.ndim - 2))
    observed_d, expected_d = (w * table).sum(axis=(0, 1)), (w * expected).sum(axis=(0, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(expected_d > 0, 1.0 - observed_d / np.where(expected_d > 0, expected_d, 1), np.nan)


def _finite(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _interval(replicates: np.ndarray, drawn: np.ndarray) -> tuple[float | None, float | None]:
    values = replicates[drawn & np.isfinite(replicates)]
    if len(values) < BOOTSTRAP_REPLICATES // 2:  # most replicates undefined: no interval worth giving
        return None, None
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def agreement_statistics(agreement: Agreement) -> tuple[dict[str, Any], list[str]]:
    """The rank and category statistics of one Agreement, and the notes saying why any is null."""
    out: dict[str, Any] = dict.fromkeys(("scale", "spearman", "kendall_tau", "kappa", "weighted_kappa",
                                          "ci_low", "ci_high", "confusion"))
    notes: list[str] = []
    if agreement.overflow:
        return out, [f"more than {MAX_CELLS} distinct (score, label) pairs: rank and category statistics not kept"]
    if not agreement.cells:
        return out, notes
    x, y, w, boot = agreement.arrays()
    n = w.sum()
    scale = out["scale"] = agreement.scale()
    if n < 2:
        return out, ["n < 2: no agreement statistic"]
    constant_x, constant_y = len(np.unique(x)) == 1, len(np.unique(y)) == 1
    if constant_x:
        notes.append("constant scores")
    if constant_y:
        notes.append("constant labels")
    out["spearman"] = _finite(weighted_spearman(x, y, w))
    out["kendall_tau"] = _finite(weighted_kendall_tau_b(x, y, w))
    drawn = boot.sum(axis=0) > 0 if boot is not None else None
    if scale == CATEGORICAL:
        categories = np.unique(np.concatenate([x, y]))
        if len(categories) < 2:
            notes.append("one category")
        table = contingency(x, y, w, categories)
        out["kappa"] = _finite(kappa(table, None))
        out["weighted_kappa"] = _finite(kappa(table, "quadratic"))
        out["confusion"] = json.dumps({"categories": [_number(c) for c in categories],
                                       "counts": table.astype(int).tolist()})
        if boot is not None and out["weighted_kappa"] is not None:
            out["ci_low"], out["ci_high"] = _interval(kappa(contingency(x, y, boot, categories), "quadratic"), drawn)
    else:
        notes.append("continuous scale: no kappa")
        if boot is not None and out["spearman"] is not None:
            out["ci_low"], out["ci_high"] = _interval(weighted_spearman(x, y, boot), drawn)
    return out, notes


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else float(value)


def replicate_agreement(agreement: Agreement, scale: str) -> tuple[float | None, np.ndarray | None]:
    """(the agreement statistic, its value in each bootstrap replicate, NaN where undefined or
    not drawn): the weighted kappa on a categorical scale, else Spearman's rho."""
    if agreement.overflow or not agreement.cells:
        return None, None
    x, y, w, boot = agreement.arrays()
    if w.sum() < 2 or boot is None:
        return None, None
    if scale == CATEGORICAL:
        categories = np.unique(np.concatenate([x, y]))
        point = kappa(contingency(x, y, w, categories), "quadratic")
        replicates = kappa(contingency(x, y, boot, categories), "quadratic")
    else:
        point, replicates = weighted_spearman(x, y, w), weighted_spearman(x, y, boot)
    replicates = np.where(boot.sum(axis=0) > 0, replicates, np.nan)
    return _finite(point), replicates


# ------------------------------------------------------------------ one metric and slice


@dataclasses.dataclass
class CalibrationMoments:
    """One metric and slice: counts, sums and the Agreement of judge and human."""

    agreement: Agreement = dataclasses.field(default_factory=Agreement)
    n: int = 0  # instances with a valid score and a valid label
    unlabelled: int = 0  # instances with no valid label
    unscored: int = 0  # labelled instances whose score is missing (the metric failed)
    invalid_labels: int = 0  # label cells refused (counted as missing)
    invalid_example: str | None = None  # the first (in sort order) reason, for the user to find the row
    annotators: int = 0
    judge_sum: float = 0.0
    human_sum: float = 0.0
    abs_sum: float = 0.0
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    annotator_alpha: IntervalAlpha = dataclasses.field(default_factory=IntervalAlpha)
    # the human-corrected estimate of the metric's mean (metrics.statistics.ppi): labelled pairs, unlabelled scores
    ppi: PPIMoments = dataclasses.field(default_factory=PPIMoments)

    def add(self, score: float | None, labels: tuple, invalid: tuple = (), threshold: float | None = None,
            weights: np.ndarray | None = None) -> bool:
        """Count one instance; whether it is paired (a valid score and label), and so is to
        be weighed (Agreement.add_weights with the pair human_value gives)."""
        self.annotators = max(self.annotators, len(labels))
        if invalid:
            self.invalid_labels += len(invalid)
            first = min(invalid)
            if self.invalid_example is None or first < self.invalid_example:
                self.invalid_example = first
        self.annotator_alpha.add([v for v in labels if v is not None])
        human = human_value(labels)
        if human is None:
            self.unlabelled += 1
            if score is not None and math.isfinite(score):
                self.ppi.add_unlabelled(score)
            return False
        if score is None or not math.isfinite(score):
            self.unscored += 1
            return False
        self.n += 1
        self.judge_sum += score
        self.human_sum += human
        self.abs_sum += abs(score - human)
        if threshold is not None:
            judge_pass, human_pass = score >= threshold, human >= threshold
            self.tp += judge_pass and human_pass
            self.fp += judge_pass and not human_pass
            self.fn += human_pass and not judge_pass
            self.tn += not judge_pass and not human_pass
        self.agreement.add(score, human, weights)
        self.ppi.add_labelled(score, human)
        return True

    def merge(self, other: "CalibrationMoments") -> "CalibrationMoments":
        merged = CalibrationMoments(agreement=self.agreement.merge(other.agreement), ppi=self.ppi.merge(other.ppi))
        for f in dataclasses.fields(self):
            if f.name in ("agreement", "ppi", "invalid_example", "annotators", "annotator_alpha"):
                continue
            setattr(merged, f.name, getattr(self, f.name) + getattr(other, f.name))
        merged.annotators = max(self.annotators, other.annotators)
        merged.annotator_alpha = self.annotator_alpha.merge(other.annotator_alpha)
        examples = [e for e in (self.invalid_example, other.invalid_example) if e is not None]
        merged.invalid_example = min(examples) if examples else None
        return merged

    def alpha(self) -> tuple[float | None, str | None]:
        """Krippendorff's alpha (interval) among the annotators, or (None, why)."""
        if self.annotators < 2:
            return None, None
        return self.annotator_alpha.value("label", "annotator alpha")

    def corrected(self, repeated: bool = False) -> tuple[dict[str, Any], list[str]]:
        """The calibration table's corrected-estimate columns (metrics.statistics.ppi), and the notes saying
        why any is null. With repeated runs (repeated) a case's runs are not independent draws, as
        the CI assumes: no corrected estimate."""
        est = self.ppi.estimate()
        lab, every = self.ppi.labelled, self.ppi.scores()
        out = {
            "corrected_unlabelled": est["n_unlabelled"],
            **{k: est[k] for k in ("corrected_mean", "corrected_ci_low", "corrected_ci_high", "corrected_lambda",
                                   "judge_only_mean", "judge_only_ci_low", "judge_only_ci_high",
                                   "labels_only_ci_low", "labels_only_ci_high")},
            "human_variance": lab.m2_y / lab.n if lab.n else None,
            "judge_variance": every.m2_f / every.n if every.n else None,
            "covariance": lab.c_fy / lab.n if lab.n else None,
        }
        notes = [est["note"]] if est["note"] else []
        if repeated:
            out.update(dict.fromkeys(("corrected_mean", "corrected_ci_low", "corrected_ci_high", "corrected_lambda")))
            return out, ["repeated runs (inference.num_runs > 1): a case's runs are not independent, so no "
                         "corrected estimate"]
        if out["corrected_mean"] is not None and self.unscored:
            notes.append(f"{self.unscored} labelled instance(s) have no score (the metric failed): left out of the "
                         "corrected estimate, which is biased if the failures depend on the instance")
        overflowed = [k for k, v in out.items() if isinstance(v, float) and not math.isfinite(v)]
        if overflowed:
            out.update(dict.fromkeys(overflowed))
            notes.append(f"values past the float range: no {', '.join(overflowed)}")
        return out, notes

    def statistics(self, threshold: float | None = None, repeated: bool = False) -> dict[str, Any]:
        n = self.n
        stats, notes = agreement_statistics(self.agreement)
        if n == 0:
            notes = ["no instance has both a score and a label"]
        row: dict[str, Any] = {
            "n": n,
            "unlabelled_count": self.unlabelled,
            "unscored_count": self.unscored,
            "invalid_label_count": self.invalid_labels,
            "invalid_label_example": self.invalid_example,
            "annotators": self.annotators,
            "threshold": threshold,
            "judge_mean": self.judge_sum / n if n else None,
            "human_mean": self.human_sum / n if n else None,
            "bias": (self.judge_sum - self.human_sum) / n if n else None,
            "mae": self.abs_sum / n if n else None,
            **stats,
        }
        overflowed = [k for k in ("judge_mean", "human_mean", "bias", "mae")
                      if row[k] is not None and not math.isfinite(row[k])]
        if overflowed:  # scores near the float range: their sums overflowed; no inf or NaN in the table
            row.update(dict.fromkeys(overflowed))
            notes.append(f"sums past the float range (overflow): no {', '.join(overflowed)}")
        row.update(dict.fromkeys(("accuracy", "precision", "recall", "f1")))
        if threshold is not None and n:
            tp, fp, fn, tn = self.tp, self.fp, self.fn, self.tn
            row["accuracy"] = (tp + tn) / n
            row["precision"] = tp / (tp + fp) if tp + fp else None
            row["recall"] = tp / (tp + fn) if tp + fn else None
            row["f1"] = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None
            if tp + fp == 0:
                notes.append("the judge passes none: no precision")
            if tp + fn == 0:
                notes.append("the people pass none: no recall")
            if row["confusion"] is None:
                row["confusion"] = json.dumps({"categories": ["fail", "pass"], "counts": [[tn, fp], [fn, tp]]})
        corrected, why_not = self.corrected(repeated)
        row.update(corrected)
        notes += why_not
        alpha, why = self.alpha()
        row["annotator_alpha"] = alpha
        row["annotator_alpha_units"] = self.annotator_alpha.units if self.annotators >= 2 else None
        if why:
            notes.append(why)
        row["note"] = "; ".join(dict.fromkeys(notes)) or None
        return row


# ------------------------------------------------------------------ two runs' judges against the same people


@dataclasses.dataclass
class PairedAgreement:
    """For `evalbeam compare`: over the instances both runs scored and the people labelled,
    each run's Agreement with the labels, weighed with the same bootstrap weights (the
    instance's, seeded by its id): a replicate's difference in agreement is over the same
    resample of instances in both runs (a paired bootstrap)."""

    base: Agreement = dataclasses.field(default_factory=Agreement)
    run: Agreement = dataclasses.field(default_factory=Agreement)
    n: int = 0

    def add(self, base_score: float, run_score: float, human: float, weights: np.ndarray | None) -> None:
        self.n += 1
        self.base.add(base_score, human, weights)
        self.run.add(run_score, human, weights)

    def merge(self, other: "PairedAgreement") -> "PairedAgreement":
        return PairedAgreement(self.base.merge(other.base), self.run.merge(other.run), self.n + other.n)

    def statistics(self) -> dict[str, Any]:
        """The agreement statistic (weighted_kappa when both runs' scores and the labels are on a
        categorical scale, else spearman), each run's value, the difference (run minus base),
        its 95% paired bootstrap CI and which run agrees more (`run`, `base`, or `neither`
        when the CI holds 0 or is undefined)."""
        out = {"labelled_paired": self.n, "agreement_statistic": None, "base_agreement": None, "run_agreement": None,
               "agreement_difference": None, "agreement_ci_low": None, "agreement_ci_high": None, "agrees_more": None}
        if self.n == 0:
            return out
        scale = CATEGORICAL if self.base.scale() == CATEGORICAL and self.run.scale() == CATEGORICAL else CONTINUOUS
        out["agreement_statistic"] = "weighted_kappa" if scale == CATEGORICAL else "spearman"
        base, base_reps = replicate_agreement(self.base, scale)
        run, run_reps = replicate_agreement(self.run, scale)
        out["base_agreement"], out["run_agreement"] = base, run
        if base is None or run is None:
            out["agrees_more"] = "neither"
            return out
        out["agreement_difference"] = run - base
        if base_reps is not None and run_reps is not None:
            differences = run_reps - base_reps
            finite = differences[np.isfinite(differences)]
            if len(finite) >= BOOTSTRAP_REPLICATES // 2:
                low, high = np.percentile(finite, [2.5, 97.5])
                out["agreement_ci_low"], out["agreement_ci_high"] = float(low), float(high)
        low, high = out["agreement_ci_low"], out["agreement_ci_high"]
        out["agrees_more"] = "run" if low is not None and low > 0 else "base" if high is not None and high < 0 \
            else "neither"
        return out
