"""metrics.statistics.calibration against scikit-learn and SciPy (run in the reference venv .adk/, through
tests/adk_env/calibration_reference.py, so scikit-learn stays out of evalbeam's environment) and
against the `krippendorff` package, on generated labels: ties, missing and invalid labels,
constant columns, one category, tiny slices, several annotators, continuous scales."""
from __future__ import annotations

import json
import math
import random
import subprocess

import krippendorff
import numpy as np
import pytest

from evalbeam.metrics.statistics.calibration import (
    CATEGORICAL,
    MAX_CELLS,
    MAX_LABEL_MAGNITUDE,
    CalibrationMoments,
    human_value,
    parse_label,
)
from evalbeam.metrics.rows.instance import read_labels
from evalbeam.metrics.statistics.summary import bootstrap_weight_matrix
from tests.helpers import ROOT

ADK_PYTHON = ROOT / ".adk" / "bin" / "python"
STATS = ("spearman", "kendall_tau", "kappa", "weighted_kappa", "accuracy", "precision", "recall", "f1")


def sklearn_reference(cases: list[dict], tmp_path) -> list[dict]:
    # As the other tests of the `adk` tier: a missing environment fails, naming what builds it.
    if not ADK_PYTHON.exists():
        pytest.fail("the ADK reference environment is missing: run `make adk-env` (or `make test`): "
                    "scikit-learn and SciPy in .adk/")
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    result = subprocess.run([str(ADK_PYTHON), str(ROOT / "tests" / "adk_env" / "calibration_reference.py"), str(path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def generate_case(rng: random.Random, kind: str, n: int, annotators: int) -> dict:
    """instances: (id, score or None, labels per annotator (None: missing))."""
    if kind == "rating":
        draw = lambda: float(rng.randint(1, 5))  # noqa: E731
    elif kind == "skewed":
        draw = lambda: float(rng.choice([1, 1, 1, 2, 5]))  # noqa: E731
    elif kind == "binary":
        draw = lambda: float(rng.random() < 0.6)  # noqa: E731
    elif kind == "continuous":
        draw = lambda: round(rng.random(), 2)  # noqa: E731 - two decimals: ties
    elif kind == "constant_labels":
        draw = lambda: 3.0  # noqa: E731
    else:  # one category: scores and labels all the same
        draw = lambda: 1.0  # noqa: E731
    instances = []
    for i in range(n):
        score = None if rng.random() < 0.1 else (1.0 if kind == "one_category" else draw())
        if kind == "constant_labels" and score is not None:
            score = float(rng.randint(1, 5))
        labels = tuple(None if rng.random() < 0.15 else draw() for _ in range(annotators))
        instances.append((f"case-{kind}-{i}", score, labels))
    return {"kind": kind, "instances": instances,
            "threshold": {"rating": 3.0, "skewed": 2.0, "binary": 0.5, "continuous": 0.5}.get(kind, 3.0)}


def moments_of(case: dict) -> CalibrationMoments:
    moments = CalibrationMoments()
    weights = bootstrap_weight_matrix([i for i, _, _ in case["instances"]]) if case["instances"] else []
    for (instance_id, score, labels), w in zip(case["instances"], weights):
        moments.add(score, labels, threshold=case["threshold"], weights=w)
    return moments


def paired(case: dict) -> tuple[list[float], list[float], list[str]]:
    judge, human, ids = [], [], []
    for instance_id, score, labels in case["instances"]:
        h = human_value(labels)
        if score is not None and h is not None:
            judge.append(score)
            human.append(h)
            ids.append(instance_id)
    return judge, human, ids


CASES = [(kind, n, a) for kind in ("rating", "skewed", "binary", "continuous")
         for n in (0, 1, 2, 3, 7, 40, 300) for a in (1, 2, 3)] + \
        [(kind, n, a) for kind in ("constant_labels", "one_category") for n in (1, 2, 9, 50) for a in (1, 3)]


@pytest.mark.adk
def test_every_statistic_equals_scikit_learn_and_scipy(tmp_path):
    rng = random.Random(23)
    cases = [generate_case(rng, *spec) for spec in CASES for _ in range(3)]
    rows = [moments_of(c).statistics(c["threshold"]) for c in cases]
    references = []
    for case, row in zip(cases, rows):
        judge, human, _ = paired(case)
        references.append({"judge": judge, "human": human, "threshold": case["threshold"],
                           "categorical": row["scale"] == CATEGORICAL})
    expected = sklearn_reference(references, tmp_path)
    checked = 0
    for case, row, ref, want in zip(cases, rows, references, expected):
        n = len(ref["judge"])
        assert row["n"] == n
        if n == 0:
            assert all(row[s] is None for s in STATS) and row["note"]
            continue
        assert row["judge_mean"] == pytest.approx(np.mean(ref["judge"]), abs=1e-12)
        assert row["human_mean"] == pytest.approx(np.mean(ref["human"]), abs=1e-12)
        assert row["mae"] == pytest.approx(np.mean(np.abs(np.subtract(ref["judge"], ref["human"]))), abs=1e-12)
        values = set(ref["judge"]) | set(ref["human"])
        categorical = len(values) <= 20 and all(float(v).is_integer() for v in values)
        assert (row["scale"] == CATEGORICAL) == categorical
        for stat in STATS:
            if stat in ("kappa", "weighted_kappa") and not categorical:
                assert row[stat] is None
                continue
            if n < 2 and stat in ("spearman", "kendall_tau", "kappa", "weighted_kappa"):
                assert row[stat] is None, (stat, case["kind"])
                continue
            if want.get(stat) is None:
                assert row[stat] is None, (stat, case["kind"], n, row[stat])
            else:
                assert row[stat] == pytest.approx(want[stat], abs=1e-9), (stat, case["kind"], n)
                checked += 1
        for value in row.values():  # never NaN: null with a note
            assert not (isinstance(value, float) and math.isnan(value))
    assert checked > 500


@pytest.mark.adk
def test_bootstrap_interval_is_the_replicates_weighted_statistic(tmp_path):
    """The CI is the 2.5/97.5 percentiles over the Poisson replicates (weights seeded by instance
    id) of scikit-learn's weighted kappa with those sample weights (categorical), or of SciPy's
    Spearman on the data the weights repeat (continuous)."""
    rng = random.Random(5)
    for kind in ("rating", "continuous"):
        case = generate_case(rng, kind, 60, 1)
        row = moments_of(case).statistics(case["threshold"])
        judge, human, ids = paired(case)
        weights = bootstrap_weight_matrix(ids)
        replicates = [{"judge": list(np.repeat(judge, weights[:, r].astype(int))),
                       "human": list(np.repeat(human, weights[:, r].astype(int))),
                       "threshold": None, "categorical": kind == "rating"} for r in range(weights.shape[1])]
        results = sklearn_reference(replicates, tmp_path)
        stat = "weighted_kappa" if kind == "rating" else "spearman"
        values = [r[stat] for r in results if r.get(stat) is not None]
        assert len(values) > 150
        low, high = np.percentile(values, [2.5, 97.5])
        assert row["ci_low"] == pytest.approx(low, abs=1e-9)
        assert row["ci_high"] == pytest.approx(high, abs=1e-9)
        assert row["ci_low"] <= row[stat] <= row["ci_high"]


def test_krippendorff_alpha_equals_the_krippendorff_package():
    rng = random.Random(7)
    compared = 0
    for kind in ("rating", "binary", "continuous", "skewed"):
        for n in (2, 5, 30, 200):
            for annotators in (2, 3, 5):
                case = generate_case(rng, kind, n, annotators)
                row = moments_of(case).statistics(case["threshold"])
                data = np.array([[np.nan if labels[a] is None else labels[a] for _, _, labels in case["instances"]]
                                 for a in range(annotators)])
                pairable = (~np.isnan(data)).sum(axis=0) >= 2
                values = data[:, pairable]
                values = values[~np.isnan(values)]
                if not pairable.any() or len(set(values)) < 2:
                    assert row["annotator_alpha"] is None and "annotator alpha" in row["note"]
                    continue
                want = krippendorff.alpha(reliability_data=data, level_of_measurement="interval")
                assert row["annotator_alpha"] == pytest.approx(want, abs=1e-9), (kind, n, annotators)
                assert row["annotator_alpha_units"] == int(pairable.sum())
                compared += 1
    assert compared > 30


def test_one_annotator_has_no_alpha_column_value():
    case = generate_case(random.Random(1), "rating", 20, 1)
    row = moments_of(case).statistics(3.0)
    assert row["annotator_alpha"] is None and row["annotator_alpha_units"] is None
    assert "alpha" not in (row["note"] or "")


def test_merged_parts_equal_the_whole():
    rng = random.Random(11)
    for kind in ("rating", "continuous", "binary"):
        case = generate_case(rng, kind, 200, 2)
        whole = moments_of(case).statistics(case["threshold"])
        instances = list(case["instances"])
        rng.shuffle(instances)
        parts = [instances[i::4] for i in range(4)]
        merged = CalibrationMoments()
        for part in parts:
            merged = merged.merge(moments_of({**case, "instances": part}))
        got = merged.statistics(case["threshold"])
        for key, value in whole.items():
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, abs=1e-9), key
            else:
                assert got[key] == value, key


def test_labels_are_parsed_or_refused_with_a_reason():
    assert parse_label(4) == 4.0 and parse_label(True) == 1.0 and parse_label(" 2.5 ") == 2.5
    assert parse_label("false") == 0.0 and parse_label("PASS") == 1.0
    assert parse_label(None) is None and parse_label("") is None and parse_label("  ") is None
    for bad, reason in (("good", "'good' is not a number"), (float("nan"), "not a finite number"),
                        ("inf", "not a finite number"), ([1], "got list"), ({"a": 1}, "got dict")):
        with pytest.raises(ValueError, match=reason):
            parse_label(bad)


def test_invalid_and_missing_labels_are_counted_not_dropped():
    moments = CalibrationMoments()
    moments.add(4.0, (4.0,), threshold=3.0)
    moments.add(2.0, (None,), invalid=("row b.jsonl:2: column human: 'x' is not a number",), threshold=3.0)
    moments.add(None, (5.0,), threshold=3.0)  # the metric failed on a labelled instance
    moments.add(3.0, (None,), threshold=3.0)
    row = moments.statistics(3.0)
    assert (row["n"], row["unlabelled_count"], row["unscored_count"], row["invalid_label_count"]) == (1, 2, 1, 1)
    assert row["invalid_label_example"].startswith("row b.jsonl:2")
    assert row["note"] == ("n < 2: no agreement statistic; 1 labelled instance with a score: fewer than 10, "
                           "no corrected estimate")


def test_continuous_scores_past_the_cell_limit_keep_their_sums():
    moments = CalibrationMoments()
    for i in range(MAX_CELLS + 5):
        moments.add(i / 7.0, (i / 3.0,), threshold=100.0)
    row = moments.statistics(100.0)
    assert row["n"] == MAX_CELLS + 5 and row["mae"] is not None and row["accuracy"] is not None
    assert row["spearman"] is None and "distinct (score, label) pairs" in row["note"]
    assert json.loads(row["confusion"])["categories"] == ["fail", "pass"]


@pytest.mark.adk
def test_paired_agreement_difference_is_a_paired_bootstrap_of_scikit_learns_statistic(tmp_path):
    """evalbeam compare's agreement columns: each run's weighted kappa (or Spearman) with the labels
    as scikit-learn/SciPy give it, and the CI the percentiles of the per-replicate differences, both
    runs weighed with the same instance's weights."""
    from evalbeam.metrics.statistics.calibration import PairedAgreement

    rng = random.Random(17)
    for kind in ("rating", "continuous"):
        ids = [f"p{i}" for i in range(80)]
        human = [float(rng.randint(1, 5)) if kind == "rating" else round(rng.random(), 2) for _ in ids]
        if kind == "rating":
            base = [float(rng.randint(1, 5)) for _ in ids]  # a judge that guesses
            run = [min(5.0, max(1.0, h + rng.choice([-1, 0, 0, 0, 1]))) for h in human]  # one that agrees
        else:
            base = [round(rng.random(), 2) for _ in ids]
            run = [round(min(1.0, max(0.0, h + rng.uniform(-0.2, 0.2))), 2) for h in human]
        weights = bootstrap_weight_matrix(ids)
        paired = PairedAgreement()
        for b, r, h, w in zip(base, run, human, weights):
            paired.add(b, r, h, w)
        got = paired.statistics()
        categorical = kind == "rating"
        stat = "weighted_kappa" if categorical else "spearman"
        assert got["agreement_statistic"] == stat and got["labelled_paired"] == 80
        cases = [{"judge": base, "human": human, "threshold": None, "categorical": categorical},
                 {"judge": run, "human": human, "threshold": None, "categorical": categorical}]
        for r in range(weights.shape[1]):
            repeat = weights[:, r].astype(int)
            for scores in (base, run):
                cases.append({"judge": list(np.repeat(scores, repeat)), "human": list(np.repeat(human, repeat)),
                              "threshold": None, "categorical": categorical})
        results = sklearn_reference(cases, tmp_path)
        assert got["base_agreement"] == pytest.approx(results[0][stat], abs=1e-9)
        assert got["run_agreement"] == pytest.approx(results[1][stat], abs=1e-9)
        differences = [results[i + 1][stat] - results[i][stat] for i in range(2, len(results), 2)
                       if results[i].get(stat) is not None and results[i + 1].get(stat) is not None]
        low, high = np.percentile(differences, [2.5, 97.5])
        assert got["agreement_ci_low"] == pytest.approx(low, abs=1e-9)
        assert got["agreement_ci_high"] == pytest.approx(high, abs=1e-9)
        assert got["agrees_more"] == "run" and got["agreement_ci_low"] > 0


def test_labels_too_large_for_the_sums_are_refused_not_a_crash():
    """A JSON label of 1e308 (or a 400-digit integer) once overflowed the annotator sums
    (math.fsum raised OverflowError and the whole run crashed) or made them inf: such a
    label is refused, with its reason, as any other bad label."""
    for bad in (1e308, -1e300, int("9" * 400), "1e200", MAX_LABEL_MAGNITUDE * 2):
        with pytest.raises(ValueError, match="beyond"):
            parse_label(bad)
    assert parse_label(MAX_LABEL_MAGNITUDE) == MAX_LABEL_MAGNITUDE
    labels, errors = read_labels({"a": 1e308, "b": int("9" * 400), "c": 2}, (("m", ("a", "b", "c")),), "f.jsonl:3")
    assert labels == {"m": (None, None, 2.0)}
    assert len(errors["m"]) == 2 and errors["m"][0].startswith("f.jsonl:3: label column 'a' of metric 'm'")


def test_scores_whose_sums_overflow_give_null_means_not_inf():
    """A metric's score may be any finite float: sums past the float range give null means
    with a note, never inf or NaN in the table."""
    moments = CalibrationMoments()
    moments.add(1.7e308, (1.0,), threshold=1.0)
    moments.add(1.7e308, (2.0,), threshold=1.0)
    moments.add(0.0, (3.0,), threshold=1.0)
    row = moments.statistics(1.0)
    for key, value in row.items():
        assert not (isinstance(value, float) and not math.isfinite(value)), key
    assert row["judge_mean"] is None and row["mae"] is None and row["bias"] is None
    assert row["human_mean"] == 2.0 and row["n"] == 3
    assert "overflow" in row["note"]
