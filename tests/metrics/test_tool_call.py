import json

import pytest

from evalbeam.metrics import MetricError
from evalbeam.metrics.catalog import get_metric


def run(name, response, reference=None, **params):
    d = get_metric(name)
    fn = d.factory(d.params.model_validate(params))
    fields = {"response": response}
    if reference is not None:
        fields["reference"] = reference
    result = fn(fields)
    return getattr(result, "score", result)


def msg(*calls, content=""):
    return json.dumps({"content": content, "tool_calls": [{"name": n, "arguments": a} for n, a in calls]})


BOOK = {"movie": "Mission Impossible", "theater": "Regal Edwards 14", "num_tix": "2", "date": "2024-03-30"}


@pytest.mark.parametrize(
    "response,valid",
    [
        (msg(("book_tickets", BOOK)), 1),
        (msg(), 1),
        (json.dumps({"content": "x", "tool_calls": [{"name": "f", "arguments": "{}"}]}), 0),
        (json.dumps({"content": "x", "tool_calls": [{"arguments": {}}]}), 0),
        (json.dumps({"tool_calls": []}), 0),
        (json.dumps({"content": 3, "tool_calls": []}), 0),
        ("not json", 0),
        ("[]", 0),
    ],
)
def test_tool_call_valid(response, valid):
    assert run("tool_call_valid", response) == valid


def test_tool_name_match_is_ordered():
    ref = msg(("a", {}), ("b", {}))
    assert run("tool_name_match", msg(("a", {"x": 1}), ("b", {})), ref) == 1
    assert run("tool_name_match", msg(("b", {}), ("a", {})), ref) == 0
    assert run("tool_name_match", msg(("a", {})), ref) == 0
    assert run("tool_name_match", "garbage", ref) == 0


def test_parameter_key_match_pairs_by_position_with_matching_names():
    ref = msg(("book", {"a": 1, "b": 2, "c": 3}), ("pay", {"card": "x"}))
    assert run("tool_parameter_key_match", msg(("book", {"a": 9, "b": 9}), ("pay", {"card": "y"})), ref) == pytest.approx(3 / 4)
    # second pair's names differ: only the first pair counts
    assert run("tool_parameter_key_match", msg(("book", {"a": 9, "b": 9, "c": 0}), ("refund", {})), ref) == pytest.approx(1.0)
    assert run("tool_parameter_key_match", msg(("other", {"a": 1})), ref) == 0.0
    assert run("tool_parameter_key_match", msg(), ref) == 0.0
    # paired calls with no reference arguments: nothing to miss
    assert run("tool_parameter_key_match", msg(("now", {"tz": "UTC"})), msg(("now", {}))) == 1.0


def test_parameter_kv_match_strict_and_lenient():
    ref = msg(("book", {"movie": "Mission Impossible", "num_tix": 2, "opts": {"seat": "A1", "vip": True}}))
    pred = msg(("book", {"movie": "  mission impossible ", "num_tix": 2.0, "opts": {"vip": True, "seat": "a1"}}))
    assert run("tool_parameter_kv_match", pred, ref) == pytest.approx(1.0)
    assert run("tool_parameter_kv_match", pred, ref, use_strict_string_match=True) == pytest.approx(1 / 3)
    wrong_type = msg(("book", {"movie": "Mission Impossible", "num_tix": "2", "opts": {"seat": "A1", "vip": 1}}))
    assert run("tool_parameter_kv_match", wrong_type, ref) == pytest.approx(1 / 3)


def test_unparseable_reference_is_an_error_not_a_zero():
    with pytest.raises(MetricError, match="reference"):
        run("tool_name_match", msg(("a", {})), "{broken")


def test_unparseable_prediction_scores_zero_with_reason():
    d = get_metric("tool_parameter_kv_match")
    result = d.factory(d.params())({"response": "{broken", "reference": msg(("a", {"x": 1}))})
    assert result.score == 0.0 and "not valid JSON" in result.explanation
