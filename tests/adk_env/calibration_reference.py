"""scikit-learn's and SciPy's agreement statistics for the cases in a JSON file (argv[1]), printed
as JSON: the reference tests/metrics/statistics/test_calibration.py compares metrics.statistics.calibration with.
Runs in the reference venv .adk/ (scikit-learn 1.9.1, SciPy), so that scikit-learn stays
out of evalbeam's own environment. Each case: {"judge": [...], "human": [...], "threshold": t | null,
"categories": [...] | null}; a statistic scikit-learn or SciPy leaves undefined is null."""
import json
import math
import sys
import warnings

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, cohen_kappa_score, f1_score, precision_score, recall_score


def clean(value):
    value = float(value)
    return value if math.isfinite(value) else None


def reference(case):
    judge, human = np.asarray(case["judge"], float), np.asarray(case["human"], float)
    out = {}
    if len(judge) == 0:
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["spearman"] = clean(stats.spearmanr(judge, human).statistic)
        out["kendall_tau"] = clean(stats.kendalltau(judge, human, variant="b").statistic)
        if case.get("categorical"):
            # scikit-learn's categories are the sorted distinct values of both, as labels=None takes them
            out["kappa"] = clean(cohen_kappa_score(human, judge, weights=None, replace_undefined_by=np.nan))
            out["weighted_kappa"] = clean(cohen_kappa_score(human, judge, weights="quadratic",
                                                            replace_undefined_by=np.nan))
        threshold = case.get("threshold")
        if threshold is not None:
            truth, predicted = human >= threshold, judge >= threshold
            out["accuracy"] = clean(accuracy_score(truth, predicted))
            out["precision"] = clean(precision_score(truth, predicted, zero_division=np.nan))
            out["recall"] = clean(recall_score(truth, predicted, zero_division=np.nan))
            out["f1"] = clean(f1_score(truth, predicted, zero_division=np.nan))
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    print(json.dumps([reference(c) for c in cases]))
