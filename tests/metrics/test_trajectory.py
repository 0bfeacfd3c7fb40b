import pytest

from evalbeam.metrics.catalog import get_metric
from evalbeam.metrics.rows.calls import json_key
from evalbeam.metrics.rows.trace import parse_turns


def score(name, params=None, **fields):
    d = get_metric(name)
    fn = d.factory(d.params.model_validate(params or {}))
    if "invocations" in fields:  # as build_instance normalises them
        fields["invocations"] = parse_turns(fields["invocations"])
    result = fn(fields)
    return getattr(result, "score", result)


def c(name, **args):
    return {"tool_name": name, "tool_input": args}


A, B, C = c("a", x=1), c("b", y="z"), c("c")


@pytest.mark.parametrize(
    "pred,ref,exact,in_order,any_order,precision,recall",
    [
        ([], [], 1, 1, 1, 1.0, 1.0),
        ([], [A], 0, 0, 0, 0.0, 0.0),
        ([A], [], 0, 1, 1, 0.0, 1.0),
        ([A, B], [A, B], 1, 1, 1, 1.0, 1.0),
        ([B, A], [A, B], 0, 0, 1, 1.0, 1.0),
        ([A, C, B], [A, B], 0, 1, 1, 2 / 3, 1.0),
        ([A], [A, A], 0, 0, 0, 1.0, 1.0),  # multiset containment fails; membership counts do not
        ([A, A], [A], 0, 1, 1, 1.0, 1.0),
        ([A, A, B], [A, B, A], 0, 0, 1, 1.0, 1.0),
        ([C], [A, B], 0, 0, 0, 0.0, 0.0),
    ],
)
def test_trajectory_metrics_table(pred, ref, exact, in_order, any_order, precision, recall):
    fields = {"predicted_trajectory": pred, "reference_trajectory": ref}
    assert score("trajectory_exact_match", **fields) == exact
    assert score("trajectory_in_order_match", **fields) == in_order
    assert score("trajectory_any_order_match", **fields) == any_order
    assert score("trajectory_precision", **fields) == pytest.approx(precision)
    assert score("trajectory_recall", **fields) == pytest.approx(recall)


def test_call_equality_ignores_key_order_and_int_float():
    pred = [c("set", location="Living Room", temperature=23, nested={"a": 1, "b": [1, 2]})]
    ref = [{"tool_name": "set", "tool_input": {"nested": {"b": [1.0, 2], "a": 1.0}, "temperature": 23.0, "location": "Living Room"}}]
    assert score("trajectory_exact_match", predicted_trajectory=pred, reference_trajectory=ref) == 1


def test_call_equality_is_strict_on_types_case_and_list_order():
    base = [c("t", v=1)]
    assert score("trajectory_exact_match", predicted_trajectory=[c("t", v=True)], reference_trajectory=base) == 0
    assert score("trajectory_exact_match", predicted_trajectory=[c("t", v="1")], reference_trajectory=base) == 0
    assert score("trajectory_exact_match", predicted_trajectory=[c("T", v=1)], reference_trajectory=base) == 0
    assert score("trajectory_exact_match", predicted_trajectory=[c("t", v=[2, 1])], reference_trajectory=[c("t", v=[1, 2])]) == 0
    assert score("trajectory_exact_match", predicted_trajectory=[c("t", v=1, w=None)], reference_trajectory=base) == 0


def test_unicode_tool_inputs():
    pred = [c("post", text="Warm deals ❄️ — café")]
    assert score("trajectory_exact_match", predicted_trajectory=pred, reference_trajectory=[c("post", text="Warm deals ❄️ — café")]) == 1
    assert score("trajectory_exact_match", predicted_trajectory=pred, reference_trajectory=[c("post", text="Warm deals ❄ — café")]) == 0


def test_json_key_distinguishes_bool_number_string():
    assert len({json_key(True), json_key(1), json_key("1"), json_key(1.0)}) == 3
    assert json_key({"a": [1, {"b": 2}]}) == json_key({"a": [1.0, {"b": 2.0}]})


def test_single_tool_use():
    fields = {"predicted_trajectory": [A, B]}
    assert score("trajectory_single_tool_use", {"tool_name": "b"}, **fields) == 1
    assert score("trajectory_single_tool_use", {"tool_name": "c"}, **fields) == 0
    assert score("trajectory_single_tool_use", {"tool_name": "a"}, predicted_trajectory=[]) == 0


def test_adk_tool_trajectory_avg_score_per_invocation_mean():
    invocations = [
        {"predicted_trajectory": [A, B], "reference_trajectory": [A, B]},  # exact 1
        {"predicted_trajectory": [B, A], "reference_trajectory": [A, B]},  # exact 0, any order 1
        {"predicted_trajectory": [A, C, B], "reference_trajectory": [A, B]},  # in order 1
        {},  # no tool uses on either side: a match
    ]
    assert score("tool_trajectory_avg_score", invocations=invocations) == pytest.approx(2 / 4)
    assert score("tool_trajectory_avg_score", {"match_type": "IN_ORDER"}, invocations=invocations) == pytest.approx(3 / 4)
    assert score("tool_trajectory_avg_score", {"match_type": "ANY_ORDER"}, invocations=invocations) == pytest.approx(4 / 4)


def test_adk_ignore_args_compares_names_only():
    fields = {"predicted_trajectory": [c("a", x=2)], "reference_trajectory": [c("a", x=1)]}
    assert score("tool_trajectory_avg_score", **fields) == 0
    assert score("tool_trajectory_avg_score", {"ignore_args": True}, **fields) == 1


def test_adk_response_match_score_is_rouge1_stemmed_mean():
    from rouge_score import rouge_scorer

    # on ASCII text ADK's Unicode-aware tokenizer gives rouge-score's own tokens
    ref = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
    invocations = [
        {"response": "the cats were running", "reference": "a cat runs"},
        {"response": "I rolled 4 and 7", "reference": "I got 4 and 7 from the dice"},
    ]
    expected = sum(ref.score(i["reference"], i["response"])["rouge1"].fmeasure for i in invocations) / 2
    assert score("response_match_score", invocations=invocations) == pytest.approx(expected, abs=1e-12)
    single = score("response_match_score", response="the cats were running", reference="a cat runs")
    assert single == pytest.approx(ref.score("a cat runs", "the cats were running")["rouge1"].fmeasure, abs=1e-12)


def test_adk_errors_name_the_problem():
    from evalbeam.metrics import MetricError

    d = get_metric("response_match_score")
    fn = d.factory(d.params())
    with pytest.raises(MetricError, match="invocation 1 has no reference"):
        fn({"invocations": parse_turns([{"response": "x", "reference": "x"}, {"response": "y"}])})
    with pytest.raises(MetricError, match="no expected turns"):
        fn({"invocations": []})


def _same_value(a, b) -> bool:
    """The calls' equality rule written plainly (metrics.rows.calls): JSON booleans are not
    numbers, 1 == 1.0, objects equal whatever their key order, lists in order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _reference_scores(pred, ref):
    same = [[p["tool_name"] == r["tool_name"] and _same_value(p["tool_input"], r["tool_input"]) for r in ref]
            for p in pred]
    exact = float(len(pred) == len(ref) and all(same[i][i] for i in range(len(pred))))
    j = 0
    for i in range(len(pred)):  # greedy subsequence: the reference's calls in order among the predicted
        if j < len(ref) and same[i][j]:
            j += 1
    in_order = float(j == len(ref))
    used, any_order = set(), 1.0
    for j in range(len(ref)):  # every reference call matched to a predicted one of its own
        match = next((i for i in range(len(pred)) if i not in used and same[i][j]), None)
        if match is None:
            any_order = 0.0
            break
        used.add(match)
    precision = (1.0 if not ref else 0.0) if not pred else sum(any(row) for row in same) / len(pred)
    recall = 1.0 if not ref else sum(any(same[i][j] for i in range(len(pred))) for j in range(len(ref))) / len(ref)
    return [exact, in_order, any_order, precision, recall]


def test_trajectory_metrics_agree_with_the_rule_written_plainly():
    """On many generated pairs of trajectories (few tool names and inputs, so that calls
    repeat and match; ints against equal floats, booleans against 0 and 1, nested objects
    in another key order), the five comparison metrics give what the equality rule,
    applied call against call, gives."""
    import random

    rng = random.Random(5)
    values = [0, 1, 1.0, 0.0, True, False, "1", None, 2.5, -0.0, [1, 2], [2, 1], [1.0, 2], {"a": 1, "b": [True]},
              {"b": [True], "a": 1.0}, {"a": 1}, {"é": "ü"}]

    def call():
        return {"tool_name": rng.choice("ab"),
                "tool_input": {k: rng.choice(values) for k in rng.sample(["x", "y"], rng.randint(0, 2))}}

    names = ["trajectory_exact_match", "trajectory_in_order_match", "trajectory_any_order_match",
             "trajectory_precision", "trajectory_recall"]
    outcomes = set()
    for _ in range(3000):
        pred = [call() for _ in range(rng.randint(0, 5))]
        ref = rng.sample(pred, rng.randint(0, len(pred))) if rng.random() < 0.5 else [call() for _ in range(rng.randint(0, 4))]
        fields = {"predicted_trajectory": pred, "reference_trajectory": ref}
        got = [score(n, **fields) for n in names]
        assert got == _reference_scores(pred, ref), (pred, ref)
        outcomes.add(tuple(got[:3]))
    assert {(1.0, 1.0, 1.0), (0.0, 1.0, 1.0), (0.0, 0.0, 1.0), (0.0, 0.0, 0.0)} <= outcomes
