"""transforms.score: each instance's metric_results rows, against the rules and reference libraries they follow."""
import math
import random

import numpy as np
import pytest
import sacrebleu
from rouge_score import rouge_scorer

from evalbeam.configs import MetricSpec
from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.registry import MetricValue, as_metric_value
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.transforms.score import MetricPlan, plan_metrics, result_base, score_instance

RUN = RunKey("run", __import__("datetime").date(2026, 11, 27))


def _scorers(specs):
    plans = plan_metrics(specs)
    automatic = {p.output_name for p in plans[len(specs):]}
    return [(p, p.build(), p.name if p.output_name in automatic else None) for p in plans]


def _row_by_the_rule(instance_id, plan, result):
    """The row of one metric's result as as_metric_value defines it (the rule score_instance follows)."""
    row = {**result_base(RUN), "instance_id": instance_id, "metric": plan.output_name, "threshold": plan.threshold}
    try:
        value = as_metric_value(result)
    except Exception as e:  # noqa: BLE001
        row["error"] = f"{type(e).__name__}: {e}"
        return row
    row["score"], row["explanation"] = value.score, value.explanation
    if value.extra:
        import json
        row["extra"] = json.dumps(value.extra, ensure_ascii=False, sort_keys=True, default=str)
    if plan.threshold is not None:
        row["passed"] = value.score >= plan.threshold
    return row


RESULTS = [0.25, 1.0, 0.0, -0.0, 3, True, False, np.float64(0.5), np.float32(0.125), float("nan"), float("inf"),
           -float("inf"), np.float64("nan"), "0.5", None, MetricValue(0.75, "why", {"k": 1}), MetricValue(2),
           MetricValue(float("nan")), 1e308, 5e-324]


@pytest.mark.parametrize("threshold", [None, 0.5])
def test_every_kind_of_result_makes_the_row_as_metric_value_defines(threshold):
    for result in RESULTS:
        plan = MetricPlan("m", "m", {}, None, threshold)
        rows = score_instance(RUN, Instance("i", {}, {}, "f:1"), [(plan, lambda fields, r=result: r, None)]).results
        assert len(rows) == 1
        expected = _row_by_the_rule("i", plan, result)
        got = rows[0]
        assert got.keys() == expected.keys(), result
        for key in expected:
            same = (got[key] == expected[key] or (isinstance(got[key], float) and math.isnan(got[key])
                                                  and math.isnan(expected[key])))
            assert same and type(got[key]) is type(expected[key]), (result, key, got[key], expected[key])
            if key == "score" and got[key] is not None:
                assert math.copysign(1, got[key]) == math.copysign(1, expected[key])


@pytest.mark.slow
def test_text_and_trajectory_rows_equal_the_reference_libraries_on_generated_rows():
    from bench.compute_throughput import generate

    specs = [MetricSpec(name=n, params={"use_stemmer": True}) for n in ("rouge_1", "rouge_2", "rouge_l", "rouge_l_sum")]
    specs += [MetricSpec(name="bleu", threshold=0.3), MetricSpec(name="trajectory_exact_match"),
              MetricSpec(name="trajectory_precision", threshold=0.5)]
    scorers = _scorers(specs)
    reference = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    rows = generate(300, seed=random.Random(7).randrange(1000))
    for i, row in enumerate(rows):
        fields = {k: row[k] for k in ("response", "reference", "predicted_trajectory", "reference_trajectory")}
        scored = score_instance(RUN, Instance(f"id{i}", fields, {}, f"f:{i}"), scorers)
        got = {r["metric"]: r for r in scored.results}
        rouge = reference.score(row["reference"], row["response"])
        for metric, kind in (("rouge_1", "rouge1"), ("rouge_2", "rouge2"), ("rouge_l", "rougeL"), ("rouge_l_sum", "rougeLsum")):
            assert got[metric]["score"] == rouge[kind].fmeasure and got[metric]["error"] is None
        bleu = sacrebleu.sentence_bleu(row["response"], [row["reference"]]).score / 100
        assert got["bleu"]["score"] == bleu and got["bleu"]["passed"] == (bleu >= 0.3)
        names = lambda t: [(c["tool_name"], sorted(c["tool_input"].items())) for c in t]  # noqa: E731
        pred, ref = names(row["predicted_trajectory"]), names(row["reference_trajectory"])
        assert got["trajectory_exact_match"]["score"] == float(pred == ref)
        precision = sum(p in ref for p in pred) / len(pred) if pred else float(not ref)
        assert got["trajectory_precision"]["score"] == precision
        assert got["trajectory_precision"]["passed"] == (precision >= 0.5)
        assert all(type(r["score"]) is float and r["explanation"] is None and r["extra"] is None for r in scored.results)
