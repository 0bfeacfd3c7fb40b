"""transforms.calibration in a real pipeline: the calibration rows are those of metrics.statistics.calibration
over each (metric, slice), whether an instance's metrics come in one ScoredInstance or in several
parts (scores/computed, scores/judge, scores/rubric), and a column's slices past the limit fold
exactly into <column>=(other)."""
from __future__ import annotations

import datetime as dt
import random

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from evalbeam.metrics.statistics.calibration import CalibrationMoments, human_value
from evalbeam.metrics.statistics.ppi import Moments, PPIMoments
from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.statistics.summary import bootstrap_weight_matrix
from evalbeam.transforms.calibration import CalibrateScores
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.transforms.score import ScoredInstance

RUN = RunKey("r", dt.date(2026, 11, 25))
THRESHOLDS = {"a": 1.0, "j": 3.0}


def cases(n=90):
    rng = random.Random(2)
    out = []
    for i in range(n):
        labels = {"a": (float(rng.random() < 0.5),), "j": (float(rng.randint(1, 5)), None if i % 4 else 3.0)}
        # some unlabelled instances: the corrected estimate's N (its judge scores, no label)
        if i % 5 == 2:
            labels["j"] = (None, None)
        if i % 6 == 1:
            labels["a"] = (None,)
        instance = Instance(f"i{i}", {}, {"grp": "xyz"[i % 3] if i % 10 else "w"}, "t", labels=labels,
                            label_errors={"j": ("t: bad",)} if i == 7 else {})
        a = {"metric": "a", "score": float(rng.random() < 0.6), "error": None}
        j = {"metric": "j", "score": None if i % 17 == 0 else float(rng.randint(1, 5)),
             "error": "judge failed" if i % 17 == 0 else None}
        out.append((instance, a, j))
    return out


def expected(rows, metric, keep):
    moments = CalibrationMoments()
    chosen = [(inst, a if metric == "a" else j) for inst, a, j in rows if keep(inst)]
    weights = bootstrap_weight_matrix([inst.instance_id for inst, _ in chosen])
    for (inst, r), w in zip(chosen, weights):
        moments.add(None if r["error"] else r["score"], inst.labels[metric], inst.label_errors.get(metric, ()),
                    THRESHOLDS[metric], w)
    return moments.statistics(THRESHOLDS[metric])


def check_rows(want):
    def check(rows):
        got = {(r["metric"], r["slice"]): r for r in rows}
        assert set(got) == set(want)
        for key, stats in want.items():
            for column, value in stats.items():
                if isinstance(value, float):
                    assert got[key][column] == pytest.approx(value, abs=1e-12), (key, column)
                else:
                    assert got[key][column] == value, (key, column)
    return check


@pytest.mark.slow
@pytest.mark.parametrize("parts", [False, True])
def test_rows_equal_the_statistics_of_each_metric_and_slice(parts):
    rows = cases()
    if parts:  # each metric in its own ScoredInstance, as the stages' parts give them
        scored = [ScoredInstance(inst, [a]) for inst, a, _ in rows] + [ScoredInstance(inst, [j]) for inst, _, j in rows]
    else:
        scored = [ScoredInstance(inst, [a, j]) for inst, a, j in rows]
    want = {}
    for metric in ("a", "j"):
        want[(metric, "overall")] = expected(rows, metric, lambda i: True)
        for value in "wxyz":
            want[(metric, f"grp={value}")] = expected(rows, metric, lambda i, v=value: i.slices["grp"] == v)
    with TestPipeline() as p:
        out = p | beam.Create(scored) | CalibrateScores(RUN, THRESHOLDS)
        assert_that(out, check_rows(want))
    assert want[("j", "overall")]["unscored_count"] > 0 and want[("j", "overall")]["invalid_label_count"] == 1
    # the corrected estimate is over the scored instances: the labelled pairs, and the unlabelled scores
    overall = want[("j", "overall")]
    pairs = [(j["score"], human_value(inst.labels["j"])) for inst, _, j in rows if j["error"] is None]
    direct = PPIMoments(Moments.of([f for f, y in pairs if y is not None], [y for f, y in pairs if y is not None]),
                        Moments.of([f for f, y in pairs if y is None])).estimate()
    assert overall["corrected_unlabelled"] == direct["n_unlabelled"] > 0
    assert overall["corrected_mean"] == pytest.approx(direct["corrected_mean"], abs=1e-12)
    assert f"{overall['unscored_count']} labelled instance(s) have no score" in overall["note"]


@pytest.mark.slow
def test_slices_past_the_limit_fold_exactly_into_other():
    rows = cases()
    scored = [ScoredInstance(inst, [a, j]) for inst, a, j in rows]
    # x, y, z have 27 instances each, w 9: the limit of 2 keeps x and y, folds z and w
    want = {}
    for metric in ("a", "j"):
        want[(metric, "overall")] = expected(rows, metric, lambda i: True)
        want[(metric, "grp=x")] = expected(rows, metric, lambda i: i.slices["grp"] == "x")
        want[(metric, "grp=y")] = expected(rows, metric, lambda i: i.slices["grp"] == "y")
        want[(metric, "grp=(other)")] = expected(rows, metric, lambda i: i.slices["grp"] in "wz")
    with TestPipeline() as p:
        out = p | beam.Create(scored) | CalibrateScores(RUN, THRESHOLDS, max_slice_values=2)
        assert_that(out, check_rows(want))


@pytest.mark.slow
def test_repeated_runs_are_weighed_by_their_case():
    """num_runs > 1: each run is an instance (n counts runs), and its bootstrap weights are its case's,
    so the interval resamples cases, as the summary's does."""
    rng = random.Random(8)
    scored, pairs = [], []
    for c in range(40):
        label = float(rng.randint(1, 5))
        for k in (1, 2, 3):
            score = float(min(5, max(1, label + rng.choice([-1, 0, 0, 1]))))
            instance = Instance(f"c{c}:run{k}", {}, {}, "t", labels={"j": (label,)})
            scored.append(ScoredInstance(instance, [{"metric": "j", "score": score, "error": None}]))
            pairs.append((f"c{c}", score, label))
    moments = CalibrationMoments()
    for (case, score, label), w in zip(pairs, bootstrap_weight_matrix([case for case, _, _ in pairs])):
        moments.add(score, (label,), threshold=3.0, weights=w)
    want = {("j", "overall"): moments.statistics(3.0, repeated=True)}
    assert want[("j", "overall")]["n"] == 120
    # a case's runs are not independent draws: no corrected estimate, and the note says why
    assert want[("j", "overall")]["corrected_mean"] is None and "repeated runs" in want[("j", "overall")]["note"]
    with TestPipeline() as p:
        out = p | beam.Create(scored) | CalibrateScores(RUN, {"j": 3.0}, num_runs=3)
        assert_that(out, check_rows(want))
