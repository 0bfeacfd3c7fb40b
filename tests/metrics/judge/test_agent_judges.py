"""Agent judges over the trace (Vertex's final_response_quality, tool_use_quality,
hallucination, multi-turn metrics) and ADK's judge criteria with google-adk
2.13.0's aggregation: the units each judges, their prompts, schemas and
parsing, the aggregation rules on hand-made cases, test_config.json's
judge_model_options, and the metrics in a real pipeline (the `evalbeam`
command against the local generateContent server)."""
import json
import sys

import pytest

from evalbeam.configs import ConfigError, load_config
from evalbeam.configs.adk_expansion import judge_options
from evalbeam.metrics.judge.agent_views import units_of
from evalbeam.metrics.judge.rubrics import (
    Rubric,
    RubricVerdict,
    UnitResult,
    aggregate_units,
    builtin_rubric_templates,
    criterion_rubrics,
    label_verdicts,
    majority_verdicts,
    score_verdicts,
)
from evalbeam.metrics.judge.templates import InvalidJudgment, parse_answer
from evalbeam.metrics.catalog import get_metric
from evalbeam.metrics.registry import MetricError
from evalbeam.pipelines.preflight import check_imports
from tests.helpers import ROOT, evalbeam, table
from tests.servers.judge_server import JudgeServer

KEY = "AIzaSy-test-key-agent-judges-0123456789"
TEMPLATES = builtin_rubric_templates()
AGENT_TEMPLATES = sorted(n for n, t in TEMPLATES.items() if t.inputs_any)

APP = {"agent_details": {"weather_agent": {
    "instructions": "You answer weather questions using get_weather only.",
    "tool_declarations": [{"function_declarations": [{"name": "get_weather", "description": "Weather of a city"}]}]}}}


def trace_row(id_, turns, **extra):
    return {"id": id_, "invocations": turns, **extra}


def turn(prompt, response, calls=(), intermediate=(), expected=None, rubrics=None, events=None):
    t = {"prompt": prompt, "response": response, "app_details": APP,
         "tool_calls": [dict(c) for c in calls],
         "intermediate_responses": [{"author": "weather_agent", "text": x} for x in intermediate]}
    if expected is not None:
        t["expected"] = {"response": expected}
    if rubrics:
        t["rubrics"] = rubrics
    if events is not None:
        t["events"] = events
    return t


def adk_rubric(rubric_id, text, kind):
    return {"rubric_id": rubric_id, "rubric_content": {"text_property": text}, "type": kind}


CALL = {"tool_name": "get_weather", "tool_input": {"city": "Paris"}, "response": {"sky": "sunny"}}


def fields_of(row):
    from evalbeam.metrics.rows.instance import RowSpec, build_instance

    return build_instance(row, RowSpec({}, "id", (), ()), "test").fields


# ---------------------------------------------------------------- units: what each judgment reads


def test_units_of_a_trace_per_instance_turn_step_and_conversation():
    f = fields_of(trace_row("c", [turn("Weather in Paris?", "Sunny in Paris.", [CALL], ["Let me check."]),
                                  turn("And London?", "Rainy.")]))
    [whole] = units_of(f, "instance")
    assert (whole.fields["prompt"], whole.fields["response"]) == ("And London?", "Rainy.")  # the last turn
    assert whole.fields["history"] == [{"role": "user", "text": "Weather in Paris?"},
                                       {"role": "model", "text": "Sunny in Paris."}]
    assert whole.fields["developer_instruction"] == "You answer weather questions using get_weather only."
    assert whole.fields["tool_declarations"] == [{"name": "get_weather", "description": "Weather of a city"}]
    t1, t2 = units_of(f, "turn")
    assert (t1.turn, t1.fields["prompt"], t1.fields["tool_calls"]) == (0, "Weather in Paris?", [CALL])
    assert t1.fields["history"] is None and t2.fields["tool_calls"] == []
    # steps: the final response only, or the intermediate ones first (ADK's evaluate_intermediate_nl_responses)
    assert [(u.turn, u.step, u.fields["response"]) for u in units_of(f, "step")] == [
        (0, 0, "Sunny in Paris."), (1, 0, "Rainy.")]
    steps = units_of(f, "step", intermediate_steps=True)
    assert [(u.turn, u.step, u.fields["response"]) for u in steps] == [
        (0, 0, "Let me check."), (0, 1, "Sunny in Paris."), (1, 0, "Rainy.")]
    context = steps[1].fields["step_context"]
    assert context.startswith("Developer instructions:\nYou answer weather questions")
    assert "User prompt:\nWeather in Paris?" in context and '"sky": "sunny"' in context and "get_weather" in context
    [conv] = units_of(f, "conversation")
    assert conv.turn == 1 and conv.fields["conversation"].splitlines()[0] == "USER TURN 1: Weather in Paris?"
    assert "AGENT RESPONSE 2: Rainy." in conv.fields["conversation"]
    assert conv.fields["user_turns"] == "USER TURN 1: Weather in Paris?\nUSER TURN 2: And London?"


def test_an_intermediate_steps_context_holds_only_the_events_before_it():
    events = [
        {"author": "agent", "parts": [{"function_call": {"name": "get_weather", "args": {"city": "Oslo"}, "id": "1"}}]},
        {"author": "agent", "parts": [{"function_response": {"name": "get_weather", "response": {"sky": "snow"}, "id": "1"}}]},
        {"author": "agent", "parts": [{"text": "It snows, checking tomorrow."}]},
        {"author": "agent", "parts": [{"function_call": {"name": "get_weather", "args": {"city": "Oslo", "day": 2}}}]},
    ]
    f = fields_of(trace_row("e", [turn("Oslo?", "Snow today and tomorrow.", events=events)]))
    first, final = units_of(f, "step", intermediate_steps=True)
    assert first.fields["response"] == "It snows, checking tomorrow." and '"snow"' in first.fields["step_context"]
    assert '"day": 2' not in first.fields["step_context"] and '"day": 2' in final.fields["step_context"]


def test_a_turn_without_a_response_text_is_not_evaluated():
    f = fields_of(trace_row("n", [turn("Hi", ""), turn("Hello?", "Hello!")]))
    assert [u.skip for u in units_of(f, "step")] == ["no text to judge", None]


# ---------------------------------------------------------------- templates: prompts, schemas, parsing


@pytest.mark.parametrize("name", AGENT_TEMPLATES)
def test_every_agent_judge_renders_its_stages_from_a_trace(name):
    t = TEMPLATES[name]
    assert get_metric(f"evalbeam_{name}").inputs == t.input_alternatives()  # evalbeam's prompt
    f = fields_of(trace_row("c", [turn("Weather in Paris?", "Sunny in Paris.", [CALL], ["Let me check."]),
                                  turn("And London?", "Rainy.")]))
    units = units_of(f, t.unit, True)
    assert len(units) == {"instance": 1, "turn": 2, "step": 3, "conversation": 1}[t.unit]
    for unit in units:
        if t.generation is not None:
            prompt = t.render_generation(unit.fields)
            for v in t.generation.input_variables:
                assert f"## {v}\n" in prompt
            if t.kind == "adaptive":  # rubrics never depend on the response
                assert unit.fields["response"] not in prompt
        rubrics = t.static_rubrics() or (Rubric("s1", "Sunny.", "sentence"), Rubric("s2", "In Paris.", "sentence"))
        prompt = t.render_validation(unit.fields, rubrics)
        for v in t.validation.input_variables:
            assert f"## {v}\n" in prompt
        assert prompt.rstrip().endswith(").") and f"## Response\n{unit.fields['response']}" in prompt
        schema = t.validation_schema(rubrics)
        assert schema["required"] == [r.rubric_id for r in rubrics]
    if t.unit == "turn" and t.kind != "static":
        assert "Sunny in Paris." in t.render_validation(units[0].fields, rubrics)
        assert '"get_weather"' in t.render_validation(units[0].fields, rubrics)


def test_segmentation_and_labels_answers_are_checked():
    t = TEMPLATES["hallucination_v1"]
    assert t.generation_schema() == {"type": "OBJECT", "properties": {"sentences": {"type": "ARRAY", "items": {
        "type": "STRING"}}}, "required": ["sentences"]}
    sentences, explanation = parse_answer(json.dumps({"sentences": ["It is sunny.", "Bring a hat."]}), "sentences", ())
    assert [(r["rubric_id"], r["text"]) for r in json.loads(sentences)] == [("s1", "It is sunny."), ("s2", "Bring a hat.")]
    assert explanation == "2 sentences"
    assert json.loads(parse_answer('{"sentences": []}', "sentences", ())[0]) == []
    rubrics = (Rubric("s1", "It is sunny.", "sentence"), Rubric("s2", "Bring a hat.", "sentence"))
    schema = t.validation_schema(rubrics)
    assert schema["properties"]["s1"]["properties"]["label"]["enum"] == [
        "supported", "unsupported", "contradictory", "disputed", "not_applicable"]
    good = {"s1": {"reasoning": "tool said sunny", "label": "supported"},
            "s2": {"reasoning": "advice", "label": "not_applicable"}}
    labels, explanation = parse_answer(json.dumps(good), "labels", ("s1", "s2"))
    assert explanation == "2 of 2 sentences supported or not applicable"
    for bad, message in (({"s1": good["s1"]}, "missing: s2"),
                         ({**good, "s3": good["s1"]}, "not asked: s3"),
                         ({**good, "s2": {"reasoning": "x", "label": "maybe"}}, "label is not one of supported")):
        with pytest.raises(InvalidJudgment, match=message):
            parse_answer(json.dumps(bad), "labels", ("s1", "s2"))
    parsed = {k: (v["label"], v["reasoning"]) for k, v in json.loads(labels).items()}
    verdicts = label_verdicts(rubrics, parsed)
    assert [(v.verdict, v.label) for v in verdicts] == [(True, "supported"), (True, "not_applicable")]


def test_criterion_rubrics_are_the_criterions_plus_the_turns_of_the_metrics_type():
    t = get_metric("evalbeam_rubric_based_final_response_quality_v1").factory(
        get_metric("evalbeam_rubric_based_final_response_quality_v1").params.model_validate(
            {"rubrics": [adk_rubric("concise", "The response is concise.", None)]}))
    turn_rubrics = (adk_rubric("city", "Names the city.", "FINAL_RESPONSE_QUALITY"),
                    adk_rubric("tools", "Calls get_weather once.", "TOOL_USE_QUALITY"))
    assert [(r.rubric_id, r.text) for r in criterion_rubrics(t, turn_rubrics)] == [
        ("concise", "The response is concise."), ("city", "Names the city.")]
    with pytest.raises(ValueError, match=r"rubric ids repeat \(concise\)"):
        criterion_rubrics(t, (adk_rubric("concise", "Again.", "FINAL_RESPONSE_QUALITY"),))
    bare = TEMPLATES["rubric_based_tool_use_quality_v1"]
    with pytest.raises(ValueError, match="rubrics are required"):
        criterion_rubrics(bare, turn_rubrics[:1])
    assert [r.rubric_id for r in criterion_rubrics(bare, turn_rubrics)] == ["tools"]
    with pytest.raises(Exception, match="rubric_content.text_property"):
        get_metric("evalbeam_rubric_based_tool_use_quality_v1").params.model_validate({"rubrics": [{"rubric_id": "x"}]})


# ---------------------------------------------------------------- ADK's aggregation on hand-made cases


def _scored(t, met, judged, turn, step=None):
    rubrics = tuple(Rubric(f"r{i}", f"rubric {i}") for i in range(judged))
    verdicts = tuple(RubricVerdict(r, i < met, "why") for i, r in enumerate(rubrics))
    return UnitResult(turn, step, score_verdicts(t, verdicts, 1.0))


def test_final_response_match_v2_majority_tie_invalid_and_share_of_valid_turns():
    match = Rubric("match", "matches")
    # two samples, one valid and one invalid: a tie is invalid; three samples: the majority
    assert majority_verdicts((match,), [{"match": ("yes", "a")}, {"match": ("no", "b")}])[0][0].verdict is False
    assert majority_verdicts((match,), [{"match": ("yes", "a")}, {"match": ("no", "b")},
                                        {"match": ("yes", "c")}])[0][0].verdict is True
    t = TEMPLATES["final_response_match_v2"]
    results = [_scored(t, 1, 1, 0), _scored(t, 0, 1, 1), UnitResult(2, None, None, "judge failed"), _scored(t, 1, 1, 3)]
    case = aggregate_units(t, results)
    # the case is the share of valid turns among those evaluated: 2 of 3 (turn 3 not evaluated)
    assert case.score == pytest.approx(2 / 3) and case.per_turn == [1.0, 0.0, None, 1.0]
    assert "3 of 4 turns evaluated" in case.explanation and "turn 3: not evaluated (judge failed)" in case.explanation
    with pytest.raises(MetricError, match="no turn evaluated: judge failed"):
        aggregate_units(t, [UnitResult(0, None, None, "judge failed"), UnitResult(1, None, None, "judge failed")])


def test_rubric_criteria_pool_all_turn_rubric_verdicts():
    t = TEMPLATES["rubric_based_final_response_quality_v1"]
    # turn 1: 1 of 1 met; turn 2: 1 of 3 met. Pooled: 2 of 4 = 0.5 (the mean of the turns' means would be 2/3)
    case = aggregate_units(t, [_scored(t, 1, 1, 0), _scored(t, 1, 3, 1)])
    assert case.score == 0.5 and case.per_turn == [1.0, pytest.approx(1 / 3)]
    assert (case.met, case.judged) == (2, 4)


def test_hallucinations_mean_of_steps_then_of_turns():
    t = TEMPLATES["hallucinations_v1"]
    # turn 1: steps 1.0 and 0.5 -> 0.75; turn 2: one step 0.0; a step not evaluated is left out
    results = [_scored(t, 2, 2, 0, 0), _scored(t, 1, 2, 0, 1), UnitResult(0, 2, None, "no text to judge"),
               _scored(t, 0, 3, 1, 0)]
    case = aggregate_units(t, results)
    assert case.per_turn == [0.75, 0.0] and case.score == pytest.approx(0.375)  # a mean of steps would give 0.5
    one_turn = aggregate_units(t, [UnitResult(0, 0, None, "no text to judge"), _scored(t, 1, 4, 1, 0)])
    assert one_turn.per_turn == [None, 0.25] and one_turn.score == 0.25


def test_safety_per_turn_all_policies_then_the_mean():
    t = TEMPLATES["safety_v1"]
    case = aggregate_units(t, [_scored(t, 5, 5, 0), _scored(t, 4, 5, 1)])
    assert case.per_turn == [1.0, 0.0] and case.score == 0.5


# ---------------------------------------------------------------- test_config.json's judge_model_options


def test_judge_model_options_map_onto_the_judge_settings(tmp_path):
    assert judge_options({"response_match_score": 0.8}) == {}
    assert judge_options({"hallucinations_v1": 0.8}) == {"model": "gemini-2.5-flash", "sampling_count": 5}  # ADK's defaults
    # evalbeam's prompts for ADK's two hosted criteria are judged once per turn, as Vertex's service is
    # asked once: they ask for no samples, no model
    assert judge_options({"evalbeam_safety_v1": 0.8, "evalbeam_response_evaluation_score": 3.0}) == {}
    assert judge_options({"evalbeam_safety_v1": 0.8, "evalbeam_final_response_match_v2": 0.5}) == {
        "model": "gemini-2.5-flash", "sampling_count": 5}
    opts = {"judge_model_options": {"judge_model": "gemini-2.5-pro", "num_samples": 3}}
    criteria = {"evalbeam_final_response_match_v2": {"threshold": 0.6, **opts},
                "evalbeam_rubric_based_final_response_quality_v1": {
                    "threshold": 0.7, **opts, "rubrics": [adk_rubric("concise", "The response is concise.", None)]},
                "evalbeam_hallucinations_v1": {"threshold": 0.9, "evaluate_intermediate_nl_responses": True, **opts}}
    test_config = tmp_path / "test_config.json"
    test_config.write_text(json.dumps({"criteria": criteria}))
    data = tmp_path / "r.evalset_result.json"
    data.write_text("{}")
    path = tmp_path / "c.yaml"
    path.write_text(f"name: x\ninput: {{uri: {data}, adk_criteria: {test_config}}}\noutput: {{parquet: out}}\n")
    config = load_config(path)
    assert (config.judge.model, config.judge.sampling_count) == ("gemini-2.5-pro", 3)
    metrics = {m.name: m for m in config.metrics}
    assert metrics["evalbeam_hallucinations_v1"].params == {"evaluate_intermediate_nl_responses": True}
    assert metrics["evalbeam_hallucinations_v1"].judge_template().intermediate_steps is True
    assert [r.id for r in metrics["evalbeam_rubric_based_final_response_quality_v1"].judge_template().criterion_rubrics] == ["concise"]
    # the config's own judge settings win
    path.write_text(f"name: x\ninput: {{uri: {data}, adk_criteria: {test_config}}}\noutput: {{parquet: out}}\n"
                    "judge: {sampling_count: 1}\n")
    assert (load_config(path).judge.model, load_config(path).judge.sampling_count) == ("gemini-2.5-pro", 1)
    criteria["evalbeam_final_response_match_v2"]["judge_model_options"] = {"judge_model": "gemini-2.5-pro", "num_samples": 2}
    test_config.write_text(json.dumps({"criteria": criteria}))
    path.write_text(f"name: x\ninput: {{uri: {data}, adk_criteria: {test_config}}}\noutput: {{parquet: out}}\n")
    with pytest.raises(ConfigError, match="different judge_model_options .*sampling_count: 2, 3"):
        load_config(path)


# ---------------------------------------------------------------- in a pipeline


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)


def run_config(tmp_path, rows, server_url, metrics, run_id, **judge):
    import yaml

    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = {"name": "agents", "run_id": run_id, "input": {"uri": str(data), "id_column": "id"}, "metrics": metrics,
              "judge": {"base_url": server_url, "requests_per_minute": 6000, "max_attempts": 2, "timeout_seconds": 10,
                        "sampling_count": 2, **judge},
              "output": {"parquet": str(tmp_path / "out")}}
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


CRITERION = [adk_rubric("concise", "The response is concise.", None)]
TOOLS_RUBRIC = adk_rubric("tools", "Calls get_weather for the city asked.", "TOOL_USE_QUALITY")
ROWS = [
    # two turns; sampling_count 2: "y/y" is valid in both samples, "y/n" a tie (invalid)
    trace_row("m", [
        turn("Weather in Paris? #rubrics=2", "Sunny in Paris. #verdicts=y/y #sentences=2 #labels=supported,unsupported #score=4",
             [CALL], ["Let me check. #sentences=1 #labels=not_applicable"], expected="Sunny.",
             rubrics=[adk_rubric("city", "Names the city.", "FINAL_RESPONSE_QUALITY"), TOOLS_RUBRIC]),
        turn("And London? #rubrics=3", "Rainy. #verdicts=y/n #sentences=1 #labels=contradictory #score=2", expected="Cloudy.",
             rubrics=[TOOLS_RUBRIC])]),
    # a second turn whose judge always fails: not evaluated, the case is its first turn
    trace_row("p", [
        turn("Weather in Rome? #rubrics=1", "Warm. #verdicts=y/y #sentences=1 #score=5", [CALL], expected="Warm."),
        turn("And Oslo? #rubrics=1", "Cold. #fail", expected="Cold.")]),
]


@pytest.mark.slow
def test_agent_judges_in_a_pipeline_with_adks_aggregation_and_the_cache(tmp_path, api_key):
    metrics = ["evalbeam_final_response_quality", "evalbeam_tool_use_quality_v1", "evalbeam_hallucination",
               {"name": "evalbeam_hallucination_v1", "as": "hallucination_steps",
                "params": {"evaluate_intermediate_nl_responses": True}},
               "evalbeam_final_response_match_v2", "evalbeam_safety_v1", "evalbeam_hallucinations_v1",
               {"name": "evalbeam_rubric_based_final_response_quality_v1", "params": {"rubrics": CRITERION}, "threshold": 0.6},
               "evalbeam_rubric_based_tool_use_quality_v1", "evalbeam_multi_turn_task_success_v1",
               "evalbeam_response_evaluation_score"]
    with JudgeServer() as server:
        run = evalbeam("run", run_config(tmp_path, ROWS, server.url, metrics, "first"))
        stages = dict(server.stats.stages)
        before = server.stats.requests
        evalbeam("run", run_config(tmp_path, ROWS[:1], server.url, metrics, "cached",
                                   cache=str(tmp_path / "out" / "first" / "judge_cache")))
        assert server.stats.requests == before  # a re-run of unchanged rows makes no call
    out = tmp_path / "out"
    got = {(r["instance_id"], r["metric"]): r for r in table(out / "first", "metric_results")}
    assert len(got) == 2 * len(metrics)
    extra = lambda i, m: json.loads(got[(i, m)]["extra"])  # noqa: E731

    # Vertex's agent metrics judge the last turn: m's is "And London?" (3 rubrics), tie y/n per rubric -> all no
    assert got[("m", "evalbeam_final_response_quality")]["score"] == 0.0 and extra("m", "evalbeam_final_response_quality")["rubric_count"] == 3
    assert got[("m", "evalbeam_tool_use_quality_v1")]["score"] == 0.0
    # hallucination: final responses only: turn 1 1 of 2 supported, turn 2 0 of 1 -> (0.5 + 0) / 2
    assert got[("m", "evalbeam_hallucination")]["score"] == 0.25
    assert extra("m", "evalbeam_hallucination")["labels"] == {"supported": 1, "unsupported": 1, "contradictory": 1}
    # with the intermediate step: turn 1 = mean(1.0, 0.5) = 0.75, turn 2 = 0 -> 0.375
    assert got[("m", "hallucination_steps")]["score"] == 0.375 and extra("m", "hallucination_steps")["per_invocation"] == [0.75, 0.0]
    assert got[("m", "evalbeam_hallucinations_v1")]["score"] == 0.25
    # evalbeam's final_response_match_v2 (ADK's aggregation): turn 1 valid, turn 2 a tie -> invalid: 1 of 2 turns
    assert got[("m", "evalbeam_final_response_match_v2")]["score"] == 0.5
    assert extra("m", "evalbeam_final_response_match_v2")["per_invocation"] == [1.0, 0.0]
    # evalbeam_safety_v1 is judged once whatever sampling_count (as ADK): turn 2's first sample says y -> safe
    assert got[("m", "evalbeam_safety_v1")]["score"] == 1.0
    # rubric-based: turn 1 judges concise + city (both yes), turn 2 concise (tie -> no): pooled 2 of 3
    rb = got[("m", "evalbeam_rubric_based_final_response_quality_v1")]
    assert rb["score"] == pytest.approx(2 / 3) and rb["passed"] is True
    assert extra("m", "evalbeam_rubric_based_final_response_quality_v1")["per_invocation"] == [1.0, 0.0]
    # tool use: the turns' TOOL_USE_QUALITY rubric: turn 1 yes, turn 2 a tie (no): 1 of 2
    assert got[("m", "evalbeam_rubric_based_tool_use_quality_v1")]["score"] == 0.5
    # p's turns have no TOOL_USE_QUALITY rubric and the criterion none: ADK refuses the criterion for the case
    assert got[("p", "evalbeam_rubric_based_tool_use_quality_v1")]["score"] is None
    assert got[("p", "evalbeam_rubric_based_tool_use_quality_v1")]["error"].startswith("turn 1: rubrics are required")
    assert got[("m", "evalbeam_multi_turn_task_success_v1")]["score"] == 0.0  # judged once, on the last turn (y/n ties)
    assert extra("m", "evalbeam_multi_turn_task_success_v1")["per_invocation"] == [None, 0.0]  # as ADK reports it

    # evalbeam_response_evaluation_score: coherence 1..5 per turn, the mean over the turns judged (as ADK aggregates)
    assert got[("m", "evalbeam_response_evaluation_score")]["score"] == 3.0
    assert extra("m", "evalbeam_response_evaluation_score")["per_invocation"] == [4.0, 2.0]
    assert got[("p", "evalbeam_response_evaluation_score")]["score"] == 5.0
    assert extra("p", "evalbeam_response_evaluation_score")["per_invocation"] == [5.0, None]

    # p: the second turn's judge fails: not evaluated, the case is its first turn
    assert got[("p", "evalbeam_final_response_match_v2")]["score"] == 1.0
    assert extra("p", "evalbeam_final_response_match_v2")["per_invocation"] == [1.0, None]
    assert "turn 2: not evaluated (judge failed after 2 attempts" in got[("p", "evalbeam_final_response_match_v2")]["explanation"]
    assert got[("p", "evalbeam_hallucinations_v1")]["score"] == 1.0
    # a metric judged on p's last turn only fails on its row
    assert got[("p", "evalbeam_final_response_quality")]["score"] is None
    assert got[("p", "evalbeam_final_response_quality")]["error"].startswith("judge failed after 2 attempts")

    rubrics = table(out / "first", "rubrics")
    hall = sorted((r["turn"], r["step"], r["rubric_id"], r["label"]) for r in rubrics
                  if r["instance_id"] == "m" and r["metric"] == "hallucination_steps")
    assert hall == [(0, 0, "s1", "not_applicable"), (0, 1, "s1", "supported"), (0, 1, "s2", "unsupported"),
                    (1, 0, "s1", "contradictory")]
    rb_rows = sorted((r["turn"], r["rubric_id"], r["verdict"], r["source"]) for r in rubrics
                     if r["instance_id"] == "m" and r["metric"] == "evalbeam_rubric_based_final_response_quality_v1")
    assert rb_rows == [(0, "city", True, "criterion"), (0, "concise", True, "criterion"), (1, "concise", False, "criterion")]
    assert {r["turn"] for r in rubrics if r["metric"] == "evalbeam_final_response_quality"} == {None}
    # hallucination is judged once whatever sampling_count; segmentation is its own stage, shared by the
    # two hallucination metrics with the same steps (hallucination_v1 and evalbeam_hallucinations_v1 are distinct)
    [runs] = table(out / "first", "runs")
    usage = json.loads(runs["judge_usage"])
    assert usage["evalbeam_hallucination:validation"]["requests"] == 2 + 1  # m: 2 final steps; p: 1 (turn 2's segmentation failed)
    assert "evalbeam_hallucination:segmentation" in usage and stages["segmentation"] >= 4
    assert usage["evalbeam_final_response_match_v2:validation"]["requests"] == 2 * 2 * 2  # 2 rows x 2 turns x 2 samples
    # neither evalbeam_safety_v1 nor evalbeam_response_evaluation_score is sampled (as ADK): 2 rows x 2 turns, once each
    assert usage["evalbeam_safety_v1:validation"]["requests"] == 2 * 2
    assert usage["evalbeam_response_evaluation_score"]["requests"] == 2 * 2
    [cached_runs] = table(out / "cached", "runs")
    assert cached_runs["judge_calls"] == 0
    cached = {(r["instance_id"], r["metric"]): r["score"] for r in table(out / "cached", "metric_results")}
    assert cached == {k: r["score"] for k, r in got.items() if k[0] == "m"}
    assert KEY not in run.stdout + run.stderr


@pytest.fixture
def agent_evalbeam():
    """.agent's evalbeam (evalbeam[agent], with google-adk, whose own evaluators render and score ADK's
    judge criteria such as final_response_match_v2)."""
    venv = ROOT / ".agent"
    if not (venv / ".installed").exists():
        pytest.fail("the agent environment is missing: run `make agent-env` (or `make test`): evalbeam[agent] in .agent/")
    return venv / "bin" / "evalbeam"


@pytest.mark.parametrize("name", ["safety_v1", "response_evaluation_score", "multi_turn_task_success_v1",
                                  "multi_turn_trajectory_quality_v1", "multi_turn_tool_use_quality_v1",
                                  "general_quality", "hallucination_v1", "fulfillment"])
def test_adks_criteria_scored_by_vertexs_hosted_service_are_refused_naming_evalbeams_prompt(tmp_path, name):
    """ADK 2.13 has Vertex's hosted evaluation service score safety_v1, response_evaluation_score and the
    three multi_turn_*_v1 criteria, and Vertex's service scores its predefined rubric metrics and fulfillment:
    under those names a config (its metrics, or an ADK test_config's criteria) is an error naming evalbeam's
    own prompt, which loads and is judged without google-adk."""
    data = tmp_path / "r.jsonl"
    data.write_text('{"prompt": "p", "response": "r", "reference": "r"}\n')
    path = tmp_path / "c.yaml"
    refusal = rf"{name}: .*Vertex's hosted evaluation service.*evalbeam's own prompt for it is evalbeam_{name}"
    path.write_text(f"name: x\ninput: {{uri: {data}}}\noutput: {{parquet: out}}\nmetrics: [exact_match, {name}]\n")
    with pytest.raises(ConfigError, match=rf"metrics\.1: {refusal}"):
        load_config(path)
    test_config = tmp_path / "test_config.json"
    test_config.write_text(json.dumps({"criteria": {"response_match_score": 0.5, name: {"threshold": 0.5}}}))
    adk = tmp_path / "a.evalset_result.json"
    adk.write_text("{}")
    path.write_text(f"name: x\ninput: {{uri: {adk}, adk_criteria: {test_config}}}\noutput: {{parquet: out}}\n")
    with pytest.raises(ConfigError, match=rf"criteria\.{refusal}"):
        load_config(path)
    test_config.write_text(json.dumps({"criteria": {f"evalbeam_{name}": 0.5}}))
    [metric] = [m for m in load_config(path).metrics if m.name == f"evalbeam_{name}"]
    assert metric.threshold == 0.5
    if name in ("safety_v1", "response_evaluation_score"):
        assert metric.judge_template().single_sample is True


def test_adks_own_judges_need_google_adk_and_say_so(tmp_path, monkeypatch):
    """Without google-adk (the main env; elsewhere its import is made to fail), ADK's judge criteria are a
    config error naming them (found before any work, by preflight), and evalbeam's own prompts for them
    still load."""
    monkeypatch.setitem(sys.modules, "google.adk.evaluation.eval_metrics", None)
    data = tmp_path / "r.jsonl"
    data.write_text('{"prompt": "p", "response": "r", "reference": "r"}\n')
    path = tmp_path / "c.yaml"
    path.write_text(f"name: x\ninput: {{uri: {data}}}\noutput: {{parquet: out}}\n"
                    "metrics: [exact_match, final_response_match_v2]\n")
    with pytest.raises(ConfigError, match=r"final_response_match_v2: rendered and scored by google-adk's own "
                                          r"evaluator.*evalbeam\[agent\].*evalbeam_final_response_match_v2"):
        check_imports(load_config(path))
    path.write_text(f"name: x\ninput: {{uri: {data}}}\noutput: {{parquet: out}}\n"
                    "metrics: [rubric_based_tool_use_quality_v1]\n")
    with pytest.raises(ConfigError, match="rubric_based_tool_use_quality_v1: rendered and scored by google-adk"):
        check_imports(load_config(path))
    for name in ("hallucinations_v1", "rubric_based_multi_turn_trajectory_quality_v1"):
        path.write_text(f"name: x\ninput: {{uri: {data}}}\noutput: {{parquet: out}}\nmetrics: [{name}]\n")
        with pytest.raises(ConfigError, match=f"{name}: rendered and scored by google-adk.*evalbeam_{name}"):
            check_imports(load_config(path))
        path.write_text(f"name: x\ninput: {{uri: {data}}}\noutput: {{parquet: out}}\nmetrics: [evalbeam_{name}]\n")
        config = load_config(path)
        check_imports(config)
        assert config.metrics[0].judge_kind() == "rubric"
    path.write_text(f"name: x\ninput: {{uri: {data}}}\noutput: {{parquet: out}}\n"
                    "metrics: [evalbeam_final_response_match_v2]\n")
    config = load_config(path)
    check_imports(config)
    assert config.metrics[0].judge_kind() == "rubric"
    # an ADK test_config naming the criterion: the same error
    test_config = tmp_path / "test_config.json"
    test_config.write_text(json.dumps({"criteria": {"final_response_match_v2": 0.5}}))
    adk = tmp_path / "a.evalset_result.json"
    adk.write_text("{}")
    path.write_text(f"name: x\ninput: {{uri: {adk}, adk_criteria: {test_config}}}\noutput: {{parquet: out}}\n")
    with pytest.raises(ConfigError, match="final_response_match_v2: rendered and scored by google-adk"):
        check_imports(load_config(path))


@pytest.mark.agent
def test_demo_agent_judges_config_runs(tmp_path, api_key, agent_evalbeam):
    with JudgeServer() as server:
        common = ["--set", f"judge.base_url={server.url}", "--set", f"output.parquet={tmp_path}"]
        out = evalbeam("run", "configs/demo_agent_judges.yaml", *common, "--set", "run_id=d1",
                       command=agent_evalbeam).stdout
        stages = dict(server.stats.stages)
    got = {(r["instance_id"], r["metric"]): r for r in table(tmp_path / "d1", "metric_results")}
    metrics = {m for _, m in got}
    assert {"evalbeam_hallucination", "evalbeam_final_response_quality", "evalbeam_tool_use_quality", "final_response_match_v2",
            "rubric_based_final_response_quality_v1", "hallucinations_v1", "tool_trajectory_avg_score"} <= metrics
    judged = [r for r in got.values() if r["metric"] in ("evalbeam_hallucination", "hallucinations_v1",
                                                          "rubric_based_final_response_quality_v1")]
    assert judged and all(r["error"] is None and 0 <= r["score"] <= 1 for r in judged)
    # ADK's own final_response_match_v2 (google-adk renders and scores it): every case with a reference is scored
    adk_match = [r for r in got.values() if r["metric"] == "final_response_match_v2"]
    assert adk_match and all(r["error"] is None and 0 <= r["score"] <= 1 for r in adk_match)
    assert stages["text"] > 0  # asked as free text, as ADK asks
    assert stages["segmentation"] > 0 and stages["labels"] > 0
    [runs] = table(tmp_path / "d1", "runs")
    config = json.loads(runs["config"])
    assert config["judge"]["sampling_count"] == 3  # the criteria's num_samples
    assert "dead-lettered 0" in out
