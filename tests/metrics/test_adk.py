"""ADK inputs, the agent-trace model, ADK criteria configuration (fidelity to ADK itself: test_adk_fidelity.py)."""
from __future__ import annotations

import json
import random

import pytest

from evalbeam.configs import ConfigError, InputConfig, load_config
from evalbeam.metrics.catalog import get_metric
from evalbeam.metrics.rows.adk_invocation import adk_invocation
from evalbeam.metrics.rows.fields import InvalidField
from evalbeam.metrics.rows.instance import RowSpec, build_instance
from evalbeam.metrics.rows.trace import parse_turns
from evalbeam.metrics.registry import MetricError
from tests.adk_cases import eval_set_result
from evalbeam.transforms.read import parse_file
from evalbeam.transforms.records import DeadLetter, Record, SourceLines


def parse(path, fmt):
    items = list(parse_file(str(path), fmt))
    records = [i for i in items if isinstance(i, Record)]
    dead = [i for i in items if isinstance(i, DeadLetter)]
    lines = [i for i in items if isinstance(i, SourceLines)]
    assert len(lines) == 1
    # every physical line belongs to one case, or holds none
    assert lines[0].lines == lines[0].skipped + sum(r.line_count for r in records) + sum(d.line_count for d in dead)
    return records, dead


def score(name, fields, **params):
    d = get_metric(name)
    return d.factory(d.params.model_validate(params))(fields)


SPEC = RowSpec(column_mapping={}, id_column="instance_id", slice_columns=(), requirements=())

EVAL_SET = {
    "eval_set_id": "weather",
    "eval_cases": [
        {"eval_id": "sf", "conversation": [{
            "invocation_id": "inv-1",
            "user_content": {"role": "user", "parts": [{"text": "Weather in SF?"}]},
            "final_response": {"role": "model", "parts": [{"text": "18C"}, {"text": "foggy"}]},
            "intermediate_data": {"tool_uses": [{"name": "get_weather", "args": {"city": "SF"}}],
                                  "tool_responses": [], "intermediate_responses": []}}],
         "session_input": {"app_name": "weather", "user_id": "u", "state": {}}},
        {"evalId": "paris", "conversation": [{
            "userContent": {"parts": [{"text": "Paris?"}]},
            "finalResponse": {"parts": [{"text": "Sunny"}]},
            "intermediateData": {"invocationEvents": [
                {"author": "a", "content": {"parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]}},
                {"author": "a", "content": {"parts": [{"functionResponse": {"name": "get_weather", "response": {"t": 25}}}]}}]}}]},
        {"eval_id": "simulated", "conversation_scenario": {"starting_prompt": "hi", "conversation_plan": "ask"}},
        {"eval_id": "no_user", "conversation": [{"final_response": {"parts": [{"text": "x"}]}}]},
    ],
}


def test_eval_set_expected_turns_and_unusable_cases(tmp_path):
    path = tmp_path / "weather.evalset.json"
    path.write_text(json.dumps(EVAL_SET, indent=2))
    assert InputConfig(uri=str(path)).inferred_format() == "adk_eval_set"
    records, dead = parse(path, "adk_eval_set")
    assert [r.data["instance_id"] for r in records] == ["weather:sf", "weather:paris", "weather:simulated"]
    # a user-simulation case has no turns until inference runs it: its scenario is in adk_case
    simulated = records.pop().data
    assert "invocations" not in simulated and simulated["adk_case"] == {
        "eval_set_id": "weather", "eval_id": "simulated",
        "conversation_scenario": {"starting_prompt": "hi", "conversation_plan": "ask"}}
    sf, paris = (r.data["invocations"] for r in records)
    # a response of two text parts: joined with a new line, and its parts kept (ADK joins them otherwise
    # in some judges' prompts: metrics.rows.trace)
    assert sf == [{"invocation_id": "inv-1", "prompt": "Weather in SF?", "expected": {
        "response": "18C\nfoggy", "response_parts": [{"text": "18C"}, {"text": "foggy"}],
        "tool_calls": [{"tool_name": "get_weather", "tool_input": {"city": "SF"}}], "intermediate_responses": []}}]
    assert "tool_calls" not in paris[0]  # expected only: no actual side
    # neither has an id: paired all the same, as ADK pairs them (by id, None == None)
    assert paris[0]["expected"]["tool_calls"] == [{"tool_name": "get_weather", "tool_input": {"city": "Paris"},
                                                   "response": {"t": 25}}]
    reasons = {d.field: d.reason for d in dead}
    assert reasons["conversation[0]"] == "eval case 'no_user': conversation[0] has no user_content"
    # an eval set alone has nothing to compare the expected turns with
    instance = build_instance(records[0].data, SPEC, "x")
    with pytest.raises(MetricError, match="no actual turns: an eval set holds the expected conversation only"):
        score("tool_trajectory_avg_score", instance.fields)


def test_eval_set_top_level_keys_must_be_snake_case(tmp_path):
    path = tmp_path / "camel.evalset.json"
    path.write_text(json.dumps({"evalSetId": "x", "evalCases": []}))
    records, dead = parse(path, "adk_eval_set")
    assert not records and "top-level keys must be snake_case" in dead[0].reason


@pytest.mark.parametrize("ext", ["gz", "bz2"])
def test_a_truncated_compressed_adk_file_is_one_dead_letter(tmp_path, ext):
    """An ADK file is read whole: one cut short in its compression is
    dead-lettered whole, saying why, rather than failing the run; whole, the
    same file reads as the plain one."""
    import bz2
    import gzip

    compress = {"gz": gzip.compress, "bz2": bz2.compress}[ext]
    packed = compress(json.dumps(EVAL_SET, indent=2).encode())
    whole, cut = tmp_path / f"weather.evalset.json.{ext}", tmp_path / f"cut.evalset.json.{ext}"
    whole.write_bytes(packed)
    cut.write_bytes(packed[: len(packed) // 2])
    records, _ = parse(whole, "adk_eval_set")
    assert [r.data["instance_id"] for r in records] == ["weather:sf", "weather:paris", "weather:simulated"]
    records, dead = parse(cut, "adk_eval_set")
    assert not records and [d.reason.split(" (")[0] for d in dead] == ["the file cannot be read"]
    assert "EOFError" in dead[0].reason


def test_legacy_eval_set_forms(tmp_path):
    flat = tmp_path / "home.test.json"
    flat.write_text(json.dumps([
        {"query": "Turn off lamp_2 in the Bedroom.", "reference": "I have set the lamp_2 status to off.",
         "expected_tool_use": [{"tool_name": "switch_lamp",
                                "tool_input": {"location": "Bedroom", "lamp_id": "lamp_2", "status": "OFF"}}]},
        {"query": "What can you do?", "expected_tool_use": []}], indent=1))
    records, dead = parse(flat, "adk_eval_set")
    assert not dead and len(records) == 1
    turns = records[0].data["invocations"]
    # its own eval set; ids from the path relative to the input's base folder (here none: its name)
    assert (records[0].data["eval_set_id"], records[0].data["eval_id"]) == ("home", "home.test.json")
    assert turns[0]["expected"]["tool_calls"][0]["tool_input"]["lamp_id"] == "lamp_2"
    assert turns[1]["expected"]["response"] == ""  # ADK's default reference
    older = tmp_path / "dice.json"
    older.write_text(json.dumps([
        {"name": "roll", "data": [{"query": "Roll a die", "expected_tool_use": [{"tool_name": "roll_die", "tool_input": {"sides": 6}}],
                                   "reference": "4"}], "initial_session": {"app_name": "dice", "user_id": "u", "state": {}}},
        {"name": "bad", "data": [{"query": "x", "expected_tool_use": [{"tool_name": "roll_die"}]}]}], indent=2))
    records, dead = parse(older, "adk_eval_set")
    assert [r.data["instance_id"] for r in records] == ["dice:roll"]
    assert records[0].data["adk_case"]["session_input"] == {"app_name": "dice", "user_id": "u", "state": {}}
    assert dead[0].reason == "eval case 'bad': data[0].expected_tool_use[0] needs tool_name and tool_input"


def test_eval_result_forms_and_bad_cases(tmp_path):
    doc = eval_set_result(11, "s", 12)
    cases = doc["eval_case_results"]
    cases[3]["eval_metric_result_per_invocation"] = [{"expected_invocation": {}}]
    cases[5]["session_id"] = ""
    cases[7] = "not a case"
    path = tmp_path / "r.evalset_result.json"
    path.write_text(json.dumps(doc, indent=2))
    assert InputConfig(uri=str(path)).inferred_format() == "adk_eval_result"
    records, dead = parse(path, "adk_eval_result")
    assert len(records) == 9 and len(dead) == 3
    assert {d.field for d in dead} == {"eval_metric_result_per_invocation[0].actual_invocation", "session_id",
                                       "eval_case_results[7]"}
    assert all(r.data["instance_id"] == f"s:{r.data['eval_id']}:{r.data['session_id']}" for r in records)
    # the same document double-encoded, as legacy ADK wrote it, reads the same
    encoded = tmp_path / "e.evalset_result.json"
    encoded.write_text(json.dumps(json.dumps(doc)))
    again, dead_again = parse(encoded, "adk_eval_result")
    assert [r.data for r in again] == [r.data for r in records] and len(dead_again) == 3
    bad = tmp_path / "bad.evalset_result.json"
    bad.write_text('{"eval_set_id": "x", "eval_case_results": [}\n')
    records, dead = parse(bad, "adk_eval_result")
    assert dead[0].reason.startswith("invalid JSON") and dead[0].line_count == 1


def test_tool_responses_match_calls_by_id_in_both_shapes():
    actual = {"user_content": {"parts": [{"text": "q"}]}, "intermediate_data": {"invocation_events": [
        {"author": "a", "content": {"parts": [{"function_call": {"name": "f", "args": {"x": 1}, "id": "1"}},
                                              {"function_call": {"name": "g", "id": "2"}}]},
         "usage_metadata": {"prompt_token_count": 7}},
        {"author": "a", "content": {"parts": [{"function_response": {"name": "g", "id": "2", "response": {"r": "G"}}},
                                              {"text": "thinking aloud"}]}},
        {"author": "a", "content": {"parts": [{"function_response": {"name": "f", "id": "1", "response": {"r": "F"}}}]}}]}}
    [turn] = parse_turns([actual])
    assert turn["tool_calls"] == [{"tool_name": "f", "tool_input": {"x": 1}, "id": "1", "response": {"r": "F"}},
                                  {"tool_name": "g", "id": "2", "response": {"r": "G"}}]  # no args: no tool_input
    assert turn["intermediate_responses"] == [{"author": "a", "text": "thinking aloud"}]
    assert turn["events"][0]["usage"] == {"prompt_token_count": 7}
    legacy = {"user_content": {"parts": [{"text": "q"}]}, "intermediate_data": {
        "tool_uses": [{"name": "f", "id": "1"}], "tool_responses": [{"name": "f", "id": "1", "response": {"r": 1}}],
        "intermediate_responses": [["sub", [{"text": "on it"}]]]}}
    [turn] = parse_turns([legacy])
    assert turn["tool_calls"] == [{"tool_name": "f", "id": "1", "response": {"r": 1}}] and "events" not in turn
    assert turn["intermediate_responses"] == [{"author": "sub", "text": "on it"}]


def test_trace_normalisation_is_idempotent():
    rng = random.Random(5)
    doc = eval_set_result(rng.randrange(1000), "s", 40)
    for case in doc["eval_case_results"]:
        from evalbeam.metrics.rows.trace import turn_from_adk

        turns = [turn_from_adk(p["actual_invocation"], p.get("expected_invocation"), "x")
                 for p in case["eval_metric_result_per_invocation"]]
        assert parse_turns(json.loads(json.dumps(turns))) == turns


def test_trace_fills_the_flat_fields_and_trajectory_metrics_apply():
    turns = [{"prompt": "a", "response": "r1", "tool_calls": [{"tool_name": "f", "tool_input": {"x": 1}}],
              "expected": {"response": "e1", "tool_calls": [{"tool_name": "f", "tool_input": {"x": 1}}]}},
             {"prompt": "b", "response": "r2", "tool_calls": [{"tool_name": "g"}],
              "expected": {"response": "e2", "tool_calls": [{"tool_name": "h"}]}}]
    fields = build_instance({"instance_id": "c", "invocations": turns}, SPEC, "x").fields
    assert fields["predicted_trajectory"] == [{"tool_name": "f", "tool_input": {"x": 1}}, {"tool_name": "g", "tool_input": {}}]
    assert fields["reference_trajectory"] == [{"tool_name": "f", "tool_input": {"x": 1}}, {"tool_name": "h", "tool_input": {}}]
    assert "response" not in fields  # a multi-turn case has no single response
    assert score("trajectory_precision", fields) == 0.5
    assert score("tool_trajectory_avg_score", fields).score == 0.5
    assert score("tool_call_count_v1", fields).score == 1.0
    one = build_instance({"instance_id": "d", "invocations": turns[:1]}, SPEC, "x").fields
    assert (one["prompt"], one["response"], one["reference"]) == ("a", "r1", "e1")


def test_vertex_agent_data_and_intermediate_events():
    agent_data = {"agents": {"root": {"name": "root"}}, "turns": [
        {"turn_index": 0, "turn_id": "t0", "events": [
            {"author": "user", "content": {"role": "user", "parts": [{"text": "Book a flight"}]}},
            {"author": "root", "content": {"role": "model", "parts": [{"function_call": {"name": "book", "args": {"to": "NYC"}}}]}},
            {"author": "root", "content": {"role": "user", "parts": [{"function_response": {"name": "book", "response": {"ok": True}}}]}},
            {"author": "root", "content": {"role": "model", "parts": [{"text": "Booked."}]}}]}]}
    row = {"instance_id": "v1", "agent_data": json.dumps(agent_data), "reference": "Booked.",
           "reference_trajectory": [{"tool_name": "book", "tool_input": {"to": "NYC"}}]}
    fields = build_instance(row, SPEC, "x").fields
    [turn] = fields["invocations"]
    assert (turn["invocation_id"], turn["prompt"], turn["response"]) == ("t0", "Book a flight", "Booked.")
    assert turn["tool_calls"] == [{"tool_name": "book", "tool_input": {"to": "NYC"}, "response": {"ok": True}}]
    assert len(turn["events"]) == 2  # the final response's event is the response, not an intermediate step
    assert score("trajectory_exact_match", fields) == 1.0
    assert score("response_match_score", fields).score == 1.0
    flat = {"instance_id": "v2", "prompt": "p", "response": "done", "intermediate_events": [
        {"event_id": "e1", "author": "agent", "content": {"parts": [{"function_call": {"name": "s", "args": {}}}]}}]}
    fields = build_instance(flat, SPEC, "x").fields
    assert fields["predicted_trajectory"] == [{"tool_name": "s", "tool_input": {}}]
    # intermediate_events that are not Vertex events stay the JSON value they are, with no trace
    fields = build_instance({"instance_id": "v4", "response": "r", "intermediate_events": ["step 1", "step 2"]}, SPEC, "x").fields
    assert fields["intermediate_events"] == ["step 1", "step 2"] and "invocations" not in fields
    with pytest.raises(InvalidField, match="agent_data.*turns\\[0\\].events\\[0\\] needs a string 'author'"):
        build_instance({"instance_id": "v3", "agent_data": {"turns": [{"events": [{"content": {}}]}]}}, SPEC, "x")


def test_response_match_score_reads_every_script():
    from evalbeam.metrics.text import make_rouge_scorer

    plain = make_rouge_scorer("rouge1", use_stemmer=True, split_summaries=False)
    for response, reference in (("東京の天気は晴れです", "東京は晴れ"), ("สวัสดีครับ", "สวัสดีค่ะ"), ("Привет мир", "привет")):
        fields = {"response": response, "reference": reference}
        assert plain(reference, response) == 0.0  # rouge-score's own tokenizer drops non-Latin text
        assert 0 < score("response_match_score", fields).score < 1
    assert score("response_match_score", {"response": "Ｆｕｌｌ ﬁne", "reference": "full fine"}).score == 1.0


def test_response_match_words_follow_adks_rules():
    from evalbeam.metrics.adk import UnicodeAwareTokenizer

    words = UnicodeAwareTokenizer.words
    assert words("ab東京cd") == ["ab", "東", "京", "cd"]  # CJK: a word per character
    assert words("สวัสดี") == ["ส", "วั", "ส", "ดี"]  # Thai: a word per base character, its marks attached
    assert words("กa ข") == ["กa", "ข"]  # what follows a Thai character joins it up to a break
    assert words("Ｆｕｌｌ ﬁne! naïve-café") == ["full", "fine", "naïve", "café"]  # NFKC, lower case, punctuation breaks
    assert words("x\u0301 \u0301") == ["x\u0301", "\u0301"] and words("") == words(" !") == []
    assert UnicodeAwareTokenizer(use_stemmer=True).tokenize("Running 東 naïve") == ["run", "東", "naïve"]


def _config(tmp_path, body):
    path = tmp_path / "c.yaml"
    path.write_text(body)
    return load_config(path)


def test_adk_criteria_become_metrics(tmp_path):
    data = tmp_path / "r.evalset_result.json"
    data.write_text("{}")
    test_config = tmp_path / "test_config.json"
    test_config.write_text(json.dumps({"criteria": {
        # keys a criterion does not know are ignored, as ADK ignores them
        "tool_trajectory_avg_score": {"threshold": 0.5, "matchType": "in-order", "ignore_args": True,
                                      "judge_model_options": {"num_samples": 3}},
        "response_match_score": 0.7}}))
    config = _config(tmp_path, f"name: x\ninput: {{uri: {data}, adk_criteria: {test_config}}}\noutput: {{parquet: out}}\n")
    metrics = {m.name: m for m in config.metrics}
    assert metrics["tool_trajectory_avg_score"].threshold == 0.5
    assert metrics["tool_trajectory_avg_score"].params == {"match_type": "in-order", "ignore_args": True}
    assert metrics["response_match_score"].threshold == 0.7
    assert {"tool_call_count_v1", "token_usage_v1", "inference_call_count_v1", "invocation_duration_v1"} <= set(metrics)
    assert config.input.slice_columns == ["eval_set_id"]
    # no metrics and no adk_criteria: the test_config.json beside the file (ADK's find_config_for_test_file)
    config = _config(tmp_path, f"name: x\ninput: {{uri: {data}}}\noutput: {{parquet: out}}\n")
    assert config.criteria_per_file
    assert {(m.name, m.threshold) for m in config.metrics} >= {
        ("tool_trajectory_avg_score", 0.5), ("response_match_score", 0.7)}
    # ... and with none beside it: ADK's defaults
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / data.name).write_text("{}")
    config = _config(tmp_path, f"name: x\ninput: {{uri: {tmp_path / 'alone' / data.name}}}\noutput: {{parquet: out}}\n")
    assert {(m.name, m.effective_threshold()) for m in config.metrics} >= {
        ("tool_trajectory_avg_score", 1.0), ("response_match_score", 0.8)}


@pytest.mark.parametrize("criteria,message", [
    ({"token_usage_v1": 100}, "token_usage_v1 does not support a threshold"),
    ({"no_such_criterion": 0.5}, "no_such_criterion: this ADK criterion is not supported"),
    ({"tool_trajectory_avg_score": {"match_type": "EXACT"}}, "needs a numeric 'threshold'"),
    ({"tool_trajectory_avg_score": {"threshold": 1, "match_type": "SOMETIMES"}}, "match_type"),
])
def test_bad_criteria_are_config_errors(tmp_path, criteria, message):
    test_config = tmp_path / "test_config.json"
    test_config.write_text(json.dumps({"criteria": criteria}))
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, f"name: x\ninput: {{uri: a.evalset_result.json, adk_criteria: {test_config}}}\n"
                          "output: {parquet: out}\n")


def test_threshold_on_an_informational_criterion_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="tool_call_count_v1 is informational"):
        _config(tmp_path, "name: x\ninput: {uri: a.jsonl}\nmetrics: [{name: tool_call_count_v1, threshold: 2}]\n"
                          "output: {parquet: out}\n")
    with pytest.raises(ConfigError, match="metrics: give at least one metric"):
        _config(tmp_path, "name: x\ninput: {uri: a.jsonl}\noutput: {parquet: out}\n")
    with pytest.raises(ConfigError, match="input.adk_criteria: .*missing.json: the file does not exist"):
        _config(tmp_path, f"name: x\ninput: {{uri: a.jsonl, adk_criteria: {tmp_path}/missing.json}}\n"
                          "output: {parquet: out}\n")


def test_rubrics_app_details_and_grounding_are_kept_for_judges(tmp_path):
    rubric = {"rubricId": "concise", "rubricContent": {"textProperty": "The answer is concise."},
              "type": "FINAL_RESPONSE_QUALITY"}
    doc = {"eval_set_id": "j", "eval_cases": [{
        "eval_id": "c", "rubrics": [{"rubric_id": "polite", "rubric_content": {"text_property": "Polite."}}],
        "conversation": [{
            "user_content": {"parts": [{"text": "q"}]}, "rubrics": [rubric],
            "app_details": {"agent_details": {"a": {"name": "a", "instructions": "Be brief."}}},
            "intermediate_data": {"invocation_events": [
                {"author": "a", "content": {"parts": [{"text": "searching"}]},
                 "grounding_metadata": {"web_search_queries": ["q"]}}]}}]}]}
    path = tmp_path / "j.evalset.json"
    path.write_text(json.dumps(doc))
    records, dead = parse(path, "adk_eval_set")
    [turn] = records[0].data["invocations"]
    assert [r["rubric_id"] for r in turn["rubrics"]] == ["concise", "polite"]
    assert turn["rubrics"][0] == {"rubric_id": "concise", "rubric_content": {"text_property": "The answer is concise."},
                                  "type": "FINAL_RESPONSE_QUALITY"}
    assert turn["app_details"]["agent_details"]["a"]["instructions"] == "Be brief."
    assert turn["expected"]["events"][0]["grounding_metadata"] == {"web_search_queries": ["q"]}
    assert parse_turns(json.loads(json.dumps([turn]))) == [turn]


@pytest.mark.slow
def test_the_adk_demo_runs(demo_run):
    from tests.helpers import table

    _, run_dir = demo_run("configs/demo_adk.yaml")
    verdicts = {r["instance_id"].split(":")[1]: r["explanation"]
                for r in table(run_dir, "metric_results") if r["metric"] == "adk_case_status"}
    # as ADK decides them (IN_ORDER allows the extra get_location; 'london' != 'London')
    assert verdicts == {"sf_weather": "PASSED", "paris_then_london": "FAILED", "tokyo_in_japanese": "PASSED",
                        "forecast_with_location": "PASSED"}


@pytest.mark.slow
def test_vertex_flat_jsonl_with_agent_data(tmp_path):
    """A JSONL table in Vertex AI's flat format: agent_data rows are agent cases, with ADK criteria and
    trajectory metrics; a row whose agent_data is unusable is dead-lettered naming the field."""
    from tests.helpers import evalbeam, table

    def agent_data(city, answer):
        return {"agents": {"root": {"name": "root"}}, "turns": [{"turn_index": 0, "turn_id": "t0", "events": [
            {"author": "user", "content": {"role": "user", "parts": [{"text": f"Weather in {city}?"}]}},
            {"author": "root", "content": {"role": "model", "parts": [
                {"function_call": {"name": "get_weather", "args": {"city": city}}}]}},
            {"author": "root", "content": {"role": "model", "parts": [{"text": answer}]}}]}]}

    rows = [{"id": "a", "agent_data": agent_data("Paris", "Sunny in Paris."), "reference": "Sunny in Paris.",
             "reference_trajectory": [{"tool_name": "get_weather", "tool_input": {"city": "Paris"}}]},
            {"id": "b", "agent_data": json.dumps(agent_data("Rome", "Rain in Rome.")), "reference": "Sunny in Rome.",
             "reference_trajectory": [{"tool_name": "get_weather", "tool_input": {"city": "Roma"}}]},
            {"id": "c", "agent_data": {"turns": "none"}, "reference": "x"}]
    data = tmp_path / "vertex.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(f"name: vertex\nrun_id: v\ninput: {{uri: {data}, id_column: id}}\n"
                      "metrics: [tool_trajectory_avg_score, response_match_score, trajectory_exact_match, exact_match]\n"
                      f"output: {{parquet: {tmp_path}/out}}\n")
    evalbeam("run", config)
    results = {(r["instance_id"], r["metric"]): r["score"] for r in table(tmp_path / "out" / "v", "metric_results")}
    assert results[("a", "tool_trajectory_avg_score")] == results[("a", "exact_match")] == 1.0
    assert results[("b", "trajectory_exact_match")] == 0.0 and 0 < results[("b", "response_match_score")] < 1
    [dead] = table(tmp_path / "out" / "v", "dead_letter")
    assert dead["field"] == "agent_data" and "turns must be a list" in dead["reason"]


def test_text_parts_are_kept_where_one_text_would_lose_them():
    """An ADK Invocation's message and final response of several text parts (or a thought) keep them beside
    the new-line join; the trace form reads them back the same, and parts that do not join into the text
    beside them are refused."""
    [turn] = parse_turns([{"user_content": {"parts": [{"text": "Hi"}, {"text": ""}, {"text": "there"}]},
                           "final_response": {"parts": [{"text": "Thinking", "thought": True}, {"text": "Sunny."}]}}])
    assert turn["prompt"] == "Hi\nthere" and turn["prompt_parts"] == [{"text": "Hi"}, {"text": "there"}]
    assert turn["response"] == "Thinking\nSunny."
    assert turn["response_parts"] == [{"text": "Thinking", "thought": True}, {"text": "Sunny."}]
    [plain] = parse_turns([{"user_content": {"parts": [{"text": "Hi"}]}, "final_response": {"parts": [{"text": "Yo"}]}}])
    assert "prompt_parts" not in plain and "response_parts" not in plain
    assert parse_turns([turn]) == [turn]  # the trace form, read again
    rebuilt = adk_invocation(turn["prompt"], turn, None, turn["prompt_parts"])
    assert rebuilt["user_content"]["parts"] == [{"text": "Hi"}, {"text": "there"}]
    assert rebuilt["final_response"]["parts"] == [{"text": "Thinking", "thought": True}, {"text": "Sunny."}]
    with pytest.raises(ValueError, match="response_parts must join"):
        parse_turns([{**turn, "response": "Sunny."}])
