import json

import pytest

from evalbeam.metrics.rows.fields import InvalidField
from evalbeam.metrics.rows.instance import RowSpec, build_instance, content_id

TRAJ = [{"tool_name": "a", "tool_input": {"x": 1}}]


def spec(**kw):
    base = dict(column_mapping={}, id_column=None, slice_columns=(), requirements=())
    base.update(kw)
    return RowSpec(**base)


def test_mapping_slices_and_types():
    s = spec(column_mapping={"response": "answer"}, slice_columns=("dataset", "n"),
             requirements=(("exact_match", (("response", "reference"),)),))
    inst = build_instance({"answer": "hi", "reference": "hi", "dataset": "x", "n": 3, "latency_in_seconds": 2}, s, "f:1")
    assert inst.fields == {"response": "hi", "reference": "hi", "latency_in_seconds": 2.0}
    assert inst.slices == {"dataset": "x", "n": "3"}
    assert inst.source == "f:1"


def test_content_id_is_stable_under_key_order():
    a = {"x": 1, "y": [1, 2]}
    b = {"y": [1, 2], "x": 1}
    assert content_id(a) == content_id(b) != content_id({"x": 2, "y": [1, 2]})
    s = spec()
    assert build_instance(a, s, "f:1").instance_id == build_instance(b, s, "g:9").instance_id


def test_csv_cells_hold_json_and_numbers():
    s = spec(requirements=(("m", (("predicted_trajectory", "reference_trajectory"),)),))
    row = {"predicted_trajectory": json.dumps(TRAJ), "reference_trajectory": json.dumps(TRAJ),
           "latency_in_seconds": " 1.5 ", "failure": "true", "history": '[{"role": "user"}]', "prompt": ""}
    inst = build_instance(row, s, "f:row 1", from_csv=True)
    assert inst.fields["predicted_trajectory"] == TRAJ
    assert inst.fields["latency_in_seconds"] == 1.5 and inst.fields["failure"] == 1
    assert inst.fields["history"] == [{"role": "user"}]
    assert inst.fields["prompt"] == ""  # empty text stays text


@pytest.mark.parametrize(
    "row,field,reason",
    [
        ({"reference": "r"}, "response", "missing or null; needed by metric 'em'"),
        ({"response": None, "reference": "r"}, "response", "missing or null"),
        ({"response": 5, "reference": "r"}, "response", "must be a string, got number"),
        ({"response": "a", "reference": "r", "latency_in_seconds": "fast"}, "latency_in_seconds", "must be a number"),
        ({"response": "a", "reference": "r", "failure": 2}, "failure", "must be 0 or 1"),
        ({"response": "a", "reference": "r", "predicted_trajectory": {"tool_name": "a"}}, "predicted_trajectory", "must be a list of tool calls, got object"),
        ({"response": "a", "reference": "r", "predicted_trajectory": [{"tool_input": {}}]}, "predicted_trajectory", "item 0 needs a non-empty string 'tool_name'"),
        ({"response": "a", "reference": "r", "predicted_trajectory": [{"tool_name": "a", "tool_input": [1]}]}, "predicted_trajectory", "'tool_input' must be an object, got list"),
        ({"response": "a", "reference": "r", "predicted_trajectory": "[{bad json"}, "predicted_trajectory", "not valid JSON"),
    ],
)
def test_invalid_rows_name_field_and_reason(row, field, reason):
    s = spec(requirements=(("em", (("response", "reference"),)),))
    with pytest.raises(InvalidField) as e:
        build_instance(row, s, "f:3")
    assert e.value.field == field
    assert reason in str(e.value)


def test_error_names_the_dataset_column_when_mapped():
    s = spec(column_mapping={"response": "answer"}, requirements=(("em", (("response",),)),))
    with pytest.raises(InvalidField, match=r"field 'response' \(column 'answer'\): missing"):
        build_instance({"response": "not the mapped column"}, s, "f:1")


def test_alternative_inputs_and_id_column():
    s = spec(id_column="id", requirements=(("adk", (("predicted_trajectory", "reference_trajectory"), ("invocations",))),))
    inst = build_instance({"id": 7, "invocations": [{"response": "x", "predicted_trajectory": TRAJ}]}, s, "f:1")
    assert inst.instance_id == "7"
    assert inst.fields["invocations"] == [{"response": "x", "tool_calls": TRAJ, "expected": {"tool_calls": []}}]
    # the trace implies the flat fields the trajectory metrics read
    assert inst.fields["predicted_trajectory"] == TRAJ and inst.fields["reference_trajectory"] == []
    assert inst.fields["response"] == "x" and "reference" not in inst.fields
    with pytest.raises(InvalidField, match="instance_id.*id column is missing or empty"):
        build_instance({"id": "", "invocations": []}, s, "f:1")
    with pytest.raises(InvalidField, match="needed by metric 'adk'"):
        build_instance({"id": 1, "predicted_trajectory": TRAJ}, s, "f:1")
    with pytest.raises(InvalidField, match="unknown keys"):
        build_instance({"id": 1, "invocations": [{"answer": "x"}]}, s, "f:1")


def _hostile_value(rng, depth=0):
    """Random JSON-like values with what check_value refuses mixed in: NaN and
    infinities, lone surrogates (in values and keys), deep nesting, tuples and
    values JSON cannot write."""
    kind = rng.random()
    if depth > 3 or kind < 0.35:
        return rng.choice(["plain", "café ☕", "x\ud800y", 1, 2.5, float("nan"), float("-inf"), True, None,
                           b"bytes", ("tu", float("nan")), "[" * 60, 10 ** 30, -0.0])
    if kind < 0.45:
        value = "deep"
        for _ in range(rng.choice([50, 99, 100, 101, 150])):
            value = [value] if rng.random() < 0.5 else {"k": value}
        return value
    if kind < 0.75:
        return [_hostile_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["a", "b", "k\udc80", "é", "{"]
    return {rng.choice(keys): _hostile_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_check_value_fast_path_agrees_with_the_walk():
    """check_value takes a fast path through json.dumps for most values; on many
    generated values (clean and hostile) it refuses exactly what the walk over
    every value refuses, with the same message."""
    import random

    from evalbeam.metrics.rows.instance import check_by_walk, check_value

    def outcome(check, value):
        try:
            check(value)
        except ValueError as e:
            return str(e)
        return None

    rng = random.Random(7)
    outcomes = []
    for _ in range(3000):
        value = _hostile_value(rng)
        expected = outcome(check_by_walk, value)
        assert outcome(check_value, value) == expected, repr(value)[:200]
        outcomes.append(expected)
    # both kinds were met, and every reason
    assert outcomes.count(None) > 300
    assert {o.split(" (")[0] for o in outcomes if o} >= {
        "holds a non-finite number", "holds text that is not valid Unicode", "is nested more than 100 levels deep"}


def test_checked_json_text_is_the_tables_text():
    """The value check's JSON text (kept for the instances table) is to_json_text's, on
    many generated values: whenever the check returns one, it is the text the table
    would write; the check's outcome is the walk's."""
    import random

    from evalbeam.metrics.rows.instance import check_by_walk, checked_json_text
    from evalbeam.metrics.rows.tables import to_json_text

    rng = random.Random(11)
    texts = 0
    for _ in range(3000):
        value = _hostile_value(rng)
        try:
            check_by_walk(value)
            refused = None
        except ValueError as e:
            refused = str(e)
        try:
            text = checked_json_text(value)
        except ValueError as e:
            assert str(e) == refused
            continue
        assert refused is None
        if text is not None and value is not None:  # a field's None is no value (not written as JSON)
            texts += 1
            assert text == to_json_text(value), repr(value)[:200]
    assert texts > 300


def test_the_checks_encoder_made_once_is_json_s_own():
    """The value check's C encoder, made once (instance._one_shot_encoder), gives the text
    and the error its JSONEncoder's encode gives, on many generated values."""
    import random

    from evalbeam.metrics.rows.instance import _CHECKED_JSON, _checked_json

    def outcome(encode, value):
        try:
            return encode(value)
        except (TypeError, ValueError, RecursionError) as e:
            return type(e), str(e)

    rng = random.Random(12)
    outcomes = [(outcome(_checked_json, v), outcome(_CHECKED_JSON.encode, v))
                for v in (_hostile_value(rng) for _ in range(3000)) if not isinstance(v, str)]
    assert all(mine == json_s for mine, json_s in outcomes)
    assert sum(isinstance(mine, str) for mine, _ in outcomes) > 300  # texts and errors both met
    assert sum(isinstance(mine, tuple) for mine, _ in outcomes) > 30


def test_an_instance_keeps_its_json_texts_for_its_row_only_while_its_values_are_those():
    """build_instance keeps each structured field's JSON text for the instances table;
    the row is the same with and without them, a field given a new value gets that
    value's text, and a pickled copy carries none (it makes them again)."""
    import dataclasses
    import datetime
    import pickle

    from evalbeam.metrics.rows.instance import Instance
    from evalbeam.metrics.rows.tables import RunKey, instance_row

    run = RunKey("r", datetime.date(2026, 11, 27))
    row = {"id": 1, "response": "é", "predicted_trajectory": [{"tool_name": "t", "tool_input": {"b": [1, 2.5], "a": "é"}}],
           "reference_trajectory": json.dumps([{"tool_name": "u", "tool_input": {"z": {"y": None}}}])}
    built = build_instance(row, RowSpec({}, "id", (), (("m", (("predicted_trajectory",),)),)), "f:1")
    assert set(built.json_texts) == {"predicted_trajectory", "reference_trajectory"}
    fresh = dataclasses.replace(built, json_texts={})
    assert instance_row(run, built) == instance_row(run, fresh)
    assert instance_row(run, built)["predicted_trajectory"] == \
        '[{"tool_input": {"a": "é", "b": [1, 2.5]}, "tool_name": "t"}]'
    changed = dataclasses.replace(built, fields={**built.fields, "predicted_trajectory": [{"tool_name": "v", "tool_input": {}}]})
    assert instance_row(run, changed)["predicted_trajectory"] == '[{"tool_input": {}, "tool_name": "v"}]'
    copy = pickle.loads(pickle.dumps(built))
    assert copy.json_texts == {} and copy == built and isinstance(copy, Instance)
    assert instance_row(run, copy) == instance_row(run, built)


def test_content_id_is_the_hash_of_the_records_canonical_json():
    """content_id on generated records (hostile values too: what json.dumps writes through
    str(), a lone surrogate) is the SHA-256 of json.dumps with its documented options."""
    import datetime
    import hashlib
    import random

    rng = random.Random(3)
    made = set()
    for _ in range(500):
        record = {rng.choice(["id", "b", "é", "a"]): _hostile_value(rng) for _ in range(rng.randint(1, 4))}
        if rng.random() < 0.2:
            record["when"] = datetime.date(2026, 1, rng.randint(1, 28))
        try:
            canonical = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
        except (ValueError, RecursionError) as e:
            with pytest.raises(type(e)):
                content_id(record)
            continue
        assert content_id(record) == hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:20]
        made.add(content_id(record))
    assert len(made) > 300


def test_a_cases_id_comes_from_its_inputs_never_its_outputs():
    """Issue 42: with the whole row hashed, a case whose trajectory changed got a new id and dropped out of
    the comparison. The id is now the hash of the case's inputs (IDENTITY_FIELDS): every output field may
    change, every input field changes it, a column renamed by the mapping keeps it."""
    from evalbeam.metrics.rows.fields import CANONICAL_FIELDS, IDENTITY_FIELDS, OUTPUT_FIELDS

    # every canonical field is one or the other, so a new field must be classified
    assert set(IDENTITY_FIELDS) | set(OUTPUT_FIELDS) == set(CANONICAL_FIELDS)
    assert not set(IDENTITY_FIELDS) & set(OUTPUT_FIELDS)
    s = spec(requirements=(("exact_match", (("response", "reference"),)),))
    row = {"prompt": "p", "reference": "r", "context": "c", "history": [{"role": "user", "text": "hi"}],
           "reference_trajectory": TRAJ, "response": "a", "predicted_trajectory": TRAJ, "latency_in_seconds": 1.5,
           "failure": 0, "intermediate_events": [], "dataset": "x", "logged_at": "2026-12-06T01:02:03Z"}
    first = build_instance(row, s, "f:1").instance_id
    changed_outputs = {**row, "response": "b", "predicted_trajectory": [{"tool_name": "other"}],
                       "latency_in_seconds": 9.0, "failure": 1, "intermediate_events": [{"x": 1}],
                       "logged_at": "2026-12-07T01:02:03Z", "dataset": "y"}
    assert build_instance(changed_outputs, s, "g:7").instance_id == first
    for field, value in (("prompt", "p2"), ("reference", "r2"), ("context", "c2"), ("history", []),
                         ("reference_trajectory", [{"tool_name": "b"}]), ("instruction", "be brief")):
        assert build_instance({**row, field: value}, s, "f:1").instance_id != first, field
    renamed = spec(column_mapping={"prompt": "question", "reference": "gold"},
                   requirements=(("exact_match", (("response", "reference"),)),))
    moved = {k: v for k, v in row.items() if k not in ("prompt", "reference")} | {"question": "p", "gold": "r"}
    assert build_instance(moved, renamed, "f:1").instance_id == first
    # a null input is no input
    assert build_instance({**row, "instruction": None}, s, "f:1").instance_id == first


def test_a_row_with_no_input_is_known_by_the_whole_row():
    s = spec(requirements=(("fluency", (("response",),)),))
    a = build_instance({"response": "one"}, s, "f:1").instance_id
    assert a == content_id({"response": "one"}) != build_instance({"response": "two"}, s, "f:2").instance_id


def test_the_turns_of_a_case_count_by_what_was_asked():
    from evalbeam.metrics.rows.instance import case_identity

    turns = [{"invocation_id": "x1", "prompt": "hi", "response": "hello", "tool_calls": [{"tool_name": "a"}],
              "expected": {"response": "hello"}, "duration": {"total": 1.0}}]
    later = [{**turns[0], "invocation_id": "x2", "response": "hey", "tool_calls": [], "duration": {"total": 3.0}}]
    assert case_identity({"invocations": turns}, {}) == case_identity({"invocations": json.dumps(later)}, {}) == {
        "invocations": [{"prompt": "hi", "expected": {"response": "hello"}}]}
    assert case_identity({"invocations": [{**turns[0], "prompt": "bye"}]}, {}) != case_identity(
        {"invocations": turns}, {})
