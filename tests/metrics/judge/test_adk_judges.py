"""ADK's judge criteria rendered and scored by google-adk's own evaluators (metrics.judge.adk_judges),
against google-adk 2.13.0 itself (tier `agent`: run with .agent/bin/python -m pytest).

Generated ADK eval results (tests/adk_cases.py: one to three turns, both intermediate_data shapes,
multi-part and empty responses, cases with no or only some expected invocations) carry, in each
expected final response, a scripted sequence of judge answers (#replies: the local generateContent
server answers the n-th request with a prompt by the n-th text): valid, invalid, ADK's other
spellings (true, almost, partially, "is_the_agent_response_invalid") and answers ADK cannot read.
The multi-turn trajectory criterion's cases script the answers at the end of the dialogue, over
multi-part messages and responses (ADK joins them with a space there); hallucinations_v1's script
the segmenter's sentences in each response step and, in each sentence, the label the server's
validator gives it.
Each case is scored twice, each time against its own local server:
- by ADK's own evaluator in the ADK reference venv (tests/adk_env/adk_scores.py, its judge model
  pointed at the server with GOOGLE_GEMINI_BASE_URL);
- by a real `evalbeam run` (.agent's evalbeam) with the same test_config.json.
The prompts the server received must be the same texts, each asked num_samples times by evalbeam,
and every case's score and status must be equal.
"""
from __future__ import annotations

import collections
import copy
import json
import os
import random
import subprocess
import sys

import pytest

from evalbeam.metrics.adk import criterion_status
from tests.adk_cases import eval_set_result
from tests.helpers import ROOT, evalbeam, in_agent_env, table
from tests.servers.judge_server import JudgeServer

pytestmark = pytest.mark.agent

ADK_PYTHON = ROOT / ".adk" / "bin" / "python"
AGENT_EVALBEAM = ROOT / ".agent" / "bin" / "evalbeam"
KEY = "AIzaSy-test-key-adk-judges-0123456789"
# judge answers, as ADK's _parse_critique reads them: valid (1), invalid (0), or no label (None)
REPLIES = [
    '{"reasoning": "It matches.", "is_the_agent_response_valid": "valid"}',
    '{"reasoning": "It does not.", "is_the_agent_response_valid": "invalid"}',
    '{"reasoning": "r", "is_the_agent_response_valid": ["valid"]}',
    '{"is_the_agent_response_valid": true}',
    '{"is_the_agent_response_valid": "almost"}',
    '{"is_the_agent_response_valid": "partially valid"}',
    '{"is_the_agent_response_valid": false}',
    '{"is_the_agent_response_invalid": "true"}',
    '{"is_the_agent_response_invalid": "false"}',
    '{"is_the_agent_response_valid": "maybe"}',
    "I cannot tell.",
]
CRITERIA = {
    "three_samples": {"final_response_match_v2": {"threshold": 0.5, "judge_model_options": {"num_samples": 3}}},
    "intermediate_two_samples": {"final_response_match_v2": {
        "threshold": 0.6, "include_intermediate_responses_in_final": True,
        "judge_model_options": {"judge_model": "gemini-2.5-flash", "num_samples": 2}}},
    "rubrics": {
        "rubric_based_final_response_quality_v1": {
            "threshold": 0.6, "judge_model_options": {"num_samples": 3},
            "rubrics": [{"rubric_id": "concise", "rubric_content": {"text_property": "The response is concise."}}]},
        "rubric_based_tool_use_quality_v1": {
            "threshold": 0.5, "judge_model_options": {"num_samples": 3},
            "rubrics": [{"rubric_id": "calls", "rubric_content": {"text_property": "The tool calls fit the request."}}]}},
    "hallucinations": {"hallucinations_v1": {  # ADK does not sample it, whatever num_samples
        "threshold": 0.7, "evaluate_intermediate_nl_responses": True, "judge_model_options": {"num_samples": 2}}},
    "hallucinations_final": {"hallucinations_v1": {"threshold": 0.5}},
    "multi_turn": {"rubric_based_multi_turn_trajectory_quality_v1": {
        "threshold": 0.5, "judge_model_options": {"num_samples": 3},
        "rubrics": [{"rubric_id": "plan", "rubric_content": {"text_property": "The agent keeps to the user's plan."},
                     "type": "TRAJECTORY_QUALITY"}]}},
}
RUBRIC_TYPES = ["FINAL_RESPONSE_QUALITY", "FINAL_RESPONSE_QUALITY", "TOOL_USE_QUALITY", None]
RUBRIC_IDS = ["city", "tone", "tools", "args", "concise"]  # "concise" repeats the criterion's: ADK refuses the case


def scripted(seed: int, samples: int, cases: int) -> dict:
    """Generated eval results whose expected final responses script the judge's answers."""
    rng = random.Random(seed)
    doc = copy.deepcopy(eval_set_result(seed, f"judged_{seed}", cases))
    for case in doc["eval_case_results"]:
        for t, entry in enumerate(case["eval_metric_result_per_invocation"]):
            final = (entry.get("expected_invocation") or {}).get("final_response")
            if final and final["parts"] and rng.random() < 0.9:  # the rest: the server's answer by the prompt's hash
                replies = " ;; ".join(rng.choice(REPLIES) for _ in range(samples))
                final["parts"][-1]["text"] += f" [{case['eval_id']}/{t}] #replies={replies}"
    return doc


def rubric_answer(rng: random.Random, ids: list[str] = RUBRIC_IDS + ["calls", "calls", "unknown"]) -> str:
    """One sample's answer in ADK's ID/Property/Rationale/Verdict form ("\\n": a new line, for the
    server), over some of the ids a case may have (and one it has not), some unreadable."""
    blocks = []
    for rubric_id in rng.sample(ids, min(len(ids), rng.randrange(1, 5))):
        verdict = rng.choice(["yes", "no", "Yes.", "no, it does not", "unclear"])
        lines = [f"ID: {rubric_id}", f"Property: the {rubric_id} property"]
        if rng.random() < 0.95:  # a missing rationale: ADK discards the whole answer
            lines.append("Rationale: because")
        lines.append(f"Verdict: {verdict}")
        blocks.append("\\n".join(lines))
    return "\\n\\n".join(blocks)


def rubric_scripted(seed: int, samples: int, cases: int) -> dict:
    """Eval results whose turns carry ADK rubrics (of both criteria's types, none, or an id that
    repeats the criterion's), the last of them scripting the judge's answers."""
    rng = random.Random(seed)
    doc = copy.deepcopy(eval_set_result(seed, f"rubrics_{seed}", cases))
    for case in doc["eval_case_results"]:
        for t, entry in enumerate(case["eval_metric_result_per_invocation"]):
            invocation = entry["actual_invocation"]
            # a result file's actual invocations already hold the expected ones' rubrics (ADK's eval service
            # copies them before evaluating and writes them so); the expected keep none here
            (entry.get("expected_invocation") or {}).pop("rubrics", None)
            rubrics = []
            for rubric_id in rng.sample(RUBRIC_IDS, rng.choice([0, 1, 1, 2, 3])):
                rubric = {"rubric_id": rubric_id, "rubric_content": {"text_property": f"The {rubric_id} is right."}}
                kind = rng.choice(RUBRIC_TYPES)
                if kind:
                    rubric["type"] = kind
                rubrics.append(rubric)
            for rubric in rubrics:  # the last rubric shown is the prompt's last line: its marker wins
                replies = " ;; ".join(rubric_answer(rng) for _ in range(samples))
                rubric["rubric_content"]["text_property"] += f" [{case['eval_id']}/{t}] #replies={replies}"
            if rubrics:
                invocation["rubrics"] = rubrics
            else:
                invocation.pop("rubrics", None)
    return doc


LABELS = ["supported", "supported", "not_applicable", "unsupported", "contradictory", "disputed", "Supported",
          "maybe", "skip"]  # "maybe": a label ADK does not know; "skip": the server leaves the sentence out


def hallucination_scripted(seed: int, samples: int, cases: int) -> dict:
    """Eval results for ADK's hallucinations_v1: every text part of a response step (the final response
    and, in events, intermediate texts; each part is a step of its own in ADK) may script the
    segmenter's answer (#replies=: sentences, each with the label the local server's validator gives
    it), give it no sentence, or be left to the server (the text as one sentence, supported)."""
    rng = random.Random(seed)
    doc = copy.deepcopy(eval_set_result(seed, f"hallucinations_{seed}", cases))
    for case in doc["eval_case_results"]:
        for t, entry in enumerate(case["eval_metric_result_per_invocation"]):
            invocation = entry["actual_invocation"]
            if rng.random() < 0.2:
                invocation["app_details"] = {"agent_details": {"agent": {
                    "name": "agent", "instructions": "Answer briefly {and} exactly.",
                    "tool_declarations": [{"function_declarations": [{"name": "get_weather",
                                                                      "description": "The weather of a city."}]}]}}}
            parts = [p for p in (invocation.get("final_response") or {}).get("parts", []) if p.get("text")]
            for event in (invocation.get("intermediate_data") or {}).get("invocation_events") or []:
                parts += [p for p in (event.get("content") or {}).get("parts") or [] if p.get("text")]
            for k, part in enumerate(parts):
                part["text"] += f" [{case['eval_id']}/{t}/{k}]"  # no two cases ask the same (runs in parts)
                roll = rng.random()
                if roll < 0.15:
                    continue  # the server's default
                if roll < 0.25:
                    part["text"] += " #replies=I found nothing to split."
                    continue
                sentences = "".join(f"<sentence>Claim {j} of {case['eval_id']}/{t}/{k}. #label={rng.choice(LABELS)}"
                                    "</sentence>" for j in range(rng.randrange(1, 4)))
                part["text"] += f" #replies={sentences}"
    return doc


MULTI_TURN_TYPES = ["TRAJECTORY_QUALITY", "TRAJECTORY_QUALITY", "FINAL_RESPONSE_QUALITY", None]


def multi_turn_scripted(seed: int, samples: int, cases: int) -> dict:
    """Eval results for ADK's multi-turn trajectory criterion: turns with rubrics of its type, of
    another, none, or an id repeating the criterion's (ADK reads the last turn's); user messages and
    final responses of several text parts (a thought among them), which its prompt joins with a
    space; and the judge's answers scripted at the end of the last turn's text in the dialogue."""
    rng = random.Random(seed)
    doc = copy.deepcopy(eval_set_result(seed, f"multi_turn_{seed}", cases))
    for case in doc["eval_case_results"]:
        entries = case["eval_metric_result_per_invocation"]
        for entry in entries:
            invocation = entry["actual_invocation"]
            (entry.get("expected_invocation") or {}).pop("rubrics", None)
            invocation.pop("rubrics", None)
            user = invocation["user_content"]["parts"]
            if rng.random() < 0.3:  # a message of two text parts
                user.append({"text": rng.choice(["Please hurry.", "Thanks!", "東京"])})
            final = (invocation.get("final_response") or {}).get("parts") or []
            if final and rng.random() < 0.2:
                final.insert(0, {"text": "Let me think about the weather.", "thought": True})
        if not entries:
            continue
        last = entries[-1]["actual_invocation"]
        ids = ["plan"]
        rubrics = []
        for rubric_id in rng.sample(["order", "tools", "plan", "recap"], rng.choice([0, 1, 1, 2, 3])):
            rubric = {"rubric_id": rubric_id, "rubric_content": {"text_property": f"The {rubric_id} is sound."}}
            kind = rng.choice(MULTI_TURN_TYPES)
            if kind:
                rubric["type"] = kind
            rubrics.append(rubric)
            ids.append(rubric_id)
        if rubrics:
            last["rubrics"] = rubrics
        if len(entries) > 1 and rng.random() < 0.3:  # an earlier turn's rubrics: ADK reads the last turn's only
            entries[0]["actual_invocation"]["rubrics"] = [{"rubric_id": "early", "type": "TRAJECTORY_QUALITY",
                                                           "rubric_content": {"text_property": "Not read."}}]
        replies = " ;; ".join(rubric_answer(rng, ids + ["unknown"]) for _ in range(samples))
        texts = [p for p in (last.get("final_response") or {}).get("parts", []) if p.get("text")]
        if rng.random() < 0.9:  # the rest: the server's answer by the prompt's hash
            # the last line of the dialogue ends with the marker: its final response, else its user message
            marked = texts[-1] if texts else last["user_content"]["parts"][-1]
            marked["text"] += f" [{case['eval_id']}] #replies={replies}"
    return doc


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    if not ADK_PYTHON.exists():
        pytest.fail("the ADK reference environment is missing: run `make adk-env`: google-adk 2.13.0 in .adk/")
    if not (ROOT / ".agent" / ".installed").exists():
        pytest.fail("the agent environment is missing: run `make agent-env`: evalbeam[agent] in .agent/")
    folder = tmp_path_factory.mktemp("adk_judges")
    out = {}
    for seed, (name, criteria) in enumerate(CRITERIA.items(), start=21):
        [samples] = {c.get("judge_model_options", {}).get("num_samples", 5) for c in criteria.values()}
        data = folder / f"app_judged_{seed}_1700000000.0.evalset_result.json"
        make = {"rubrics": rubric_scripted, "multi_turn": multi_turn_scripted, "hallucinations": hallucination_scripted,
                "hallucinations_final": hallucination_scripted}.get(name, scripted)
        data.write_text(json.dumps(make(seed, samples, 40), ensure_ascii=False), encoding="utf-8")
        test_config = folder / f"{name}.test_config.json"
        test_config.write_text(json.dumps({"criteria": criteria}))
        out[name] = (data, test_config, criteria, samples)
    return folder, out


def adk_reference(data, criteria):
    """ADK's scores, its evaluator's judge model pointed at a fresh local server; and the prompts it received."""
    request = data.with_suffix(".request.json")
    request.write_text(json.dumps({"files": [str(data)], "configs": [{"criteria": criteria}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_GENAI_", "GOOGLE_CLOUD_"))}
    with JudgeServer() as server:
        env.update(GOOGLE_API_KEY=KEY, GOOGLE_GEMINI_BASE_URL=server.url)
        result = subprocess.run([str(ADK_PYTHON), str(ROOT / "tests" / "adk_env" / "adk_scores.py"), str(request)],
                                capture_output=True, text=True, timeout=600, env=env)
        prompts = collections.Counter(server.stats.prompts)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)["scores"][0], prompts


def evalbeam_run(folder, name, data, test_config, monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    config = folder / f"{name}.yaml"
    config.write_text(json.dumps({
        "name": name, "run_id": name, "input": {"uri": str(data), "adk_criteria": str(test_config)},
        # no hedged copies: every request of a prompt is one of its samples (the server answers them in turn)
        "judge": {"requests_per_minute": 6000, "max_attempts": 2, "timeout_seconds": 20, "hedge_share": 0},
        "output": {"parquet": str(folder / "out")}}))
    with JudgeServer() as server:
        run = evalbeam("run", config, "--set", f"judge.base_url={server.url}", command=AGENT_EVALBEAM)
        prompts = collections.Counter(server.stats.prompts)
    assert KEY not in run.stdout + run.stderr
    rows = {(r["instance_id"], r["metric"]): r for r in table(folder / "out" / name, "metric_results")}
    return rows, prompts


@pytest.mark.parametrize("name", list(CRITERIA))
def test_adks_own_prompts_answers_and_aggregation(cases, name, monkeypatch):
    folder, configs = cases
    data, test_config, criteria, samples = configs[name]
    adk_scores, adk_prompts = adk_reference(data, criteria)
    ours, our_prompts = evalbeam_run(folder, name, data, test_config, monkeypatch)

    # the server received ADK's own prompts: the same texts, each asked once per sample by evalbeam
    # (ADK asks a text as often as it meets it; evalbeam asks a repeated text once and reuses the answers);
    # hallucinations_v1: once, as ADK does not sample it
    asked = 1 if "hallucinations_v1" in criteria else samples
    assert our_prompts and set(our_prompts) == set(adk_prompts)
    assert set(our_prompts.values()) == {asked}, [(n, p[-400:], adk_prompts[p]) for p, n in our_prompts.items()
                                                  if n != asked][:2]
    assert all(count % asked == 0 for count in adk_prompts.values())

    assert {i for i, _ in ours} == set(adk_scores)
    for criterion in criteria:
        problems = []
        for instance_id, expected in adk_scores.items():
            score, status = expected["metrics"][criterion]
            row = ours[(instance_id, criterion)]
            got = criterion_status(criterion, row["error"], row["passed"])
            if row["score"] != pytest.approx(score) or got != status:
                problems.append(f"{instance_id} {criterion}: ADK {score!r} {status}, evalbeam {row['score']!r} {got} "
                                f"({row['error']})")
        assert not problems, "\n".join(problems[:20])
        # the cases reach every outcome: 1, 0, a share between, and not evaluated
        scores = [s["metrics"][criterion][0] for s in adk_scores.values()]
        assert {0.0, 1.0, None} <= set(scores) and any(s not in (0.0, 1.0, None) for s in scores), criterion
        statuses = {s["metrics"][criterion][1] for s in adk_scores.values()}
        assert {"PASSED", "FAILED", "NOT_EVALUATED"} <= statuses, criterion
        # a case ADK cannot evaluate carries why on its row, never a missing row
        assert all(ours[(i, criterion)]["error"] for i, s in adk_scores.items() if s["metrics"][criterion][0] is None)


def _plan(name="final_response_match_v2", params=None, threshold=0.5):
    from evalbeam.configs import MetricSpec
    from evalbeam.metrics.judge.asks import plan_judges

    return plan_judges([MetricSpec.model_validate({"name": name, "params": params or {}, "threshold": threshold})])[0]


def _turn(prompt, response, reference):
    return {"prompt": prompt, "response": response, "tool_calls": [], "expected": {"response": reference}}


@pytest.mark.agent_rerun
def test_a_turn_whose_judge_failed_is_not_evaluated_and_a_case_adk_refuses_is_a_row_error(request):
    """The judge stage's rows of an ADK criterion (metrics.judge.verdicts.adk_row), from its requests and answers:
    a turn with a sample that failed after retries is left out as ADK leaves out an invocation whose sample
    raised; no turn evaluated, or a case ADK's evaluator refuses, is an error on the row, never a lost row."""
    if in_agent_env(request):
        return
    import datetime as dt

    from evalbeam.metrics.rows.instance import Instance
    from evalbeam.metrics.judge.client import JudgeResponse
    from evalbeam.metrics.judge.settings import JudgeSettings
    from evalbeam.metrics.judge.asks import Unasked, judge_requests
    from evalbeam.metrics.judge.verdicts import judge_rows
    from evalbeam.metrics.rows.tables import RunKey

    run, plan = RunKey("r", dt.date(2026, 11, 25)), _plan()
    settings = JudgeSettings(model="m", sampling_count=3)
    valid = '{"is_the_agent_response_valid": "valid"}'
    instance = Instance("c", {"invocations": [_turn("Paris?", "Sunny.", "Sunny."), _turn("Rome?", "Rain.", "Warm.")]},
                        {}, "s")
    asked = [a for a in judge_requests(instance, [plan], settings, 3)]
    assert len(asked) == 2 * 3 and all(request.answer_field == "text" and not request.schema_json
                                       for _, (request, _) in asked)
    # turn 1: valid x3; turn 2: one sample failed after retries
    answers = [(link, JudgeResponse(key, link.metric, verdict=valid, explanation=None)) for key, (_, link) in asked
               if link.unit == 0]
    answers += [(link, JudgeResponse(key, link.metric, error="judge failed after 2 attempts: 503") if link.sample == 1
                 else JudgeResponse(key, link.metric, verdict='{"is_the_agent_response_valid": "invalid"}'))
                for key, (_, link) in asked if link.unit == 1]
    [row] = judge_rows(run, [plan], instance, "m", answers, 3)
    assert row["score"] == 1.0 and row["passed"] is True and row["error"] is None
    assert json.loads(row["extra"])["per_invocation"] == [1.0, None]
    assert json.loads(row["extra"])["sample_scores"] == [[1.0, 1.0, 1.0], None]
    # every turn failed: an error naming why, on the row
    failed = [(link, JudgeResponse(r.key, r.metric, error="judge failed after 2 attempts: 503")) for link, r in answers]
    [row] = judge_rows(run, [plan], instance, "m", failed, 3)
    assert row["score"] is None and "turn 1: not evaluated (judge failed after 2 attempts: 503)" in row["error"]
    # answers ADK cannot read: no score, and the row says so
    unread = [(link, JudgeResponse(r.key, r.metric, verdict="no idea", explanation=None)) for link, r in answers]
    [row] = judge_rows(run, [plan], instance, "m", unread, 3)
    assert row["score"] is None and "ADK read no score" in row["error"]
    # no expected response: ADK refuses the criterion for the case; nothing is asked, the row says why
    bare = Instance("b", {"invocations": [{"prompt": "Paris?", "response": "Sunny.", "tool_calls": []}]}, {}, "s")
    [unasked] = judge_requests(bare, [plan], settings, 3)
    assert isinstance(unasked, Unasked) and unasked.instance_id == unasked.link.instance_id == "b"
    assert "needs the expected response of every turn" in unasked.response.error
    [row] = judge_rows(run, [plan], bare, "m", [(unasked.link, unasked.response)], 3)
    assert row["score"] is None and "needs the expected response of every turn" in row["error"]


@pytest.mark.agent_rerun
def test_preflight_builds_adks_evaluators(tmp_path, monkeypatch, request):
    """A config naming ADK's judge criteria passes preflight only where ADK's evaluators can be built."""
    if in_agent_env(request):
        return
    from evalbeam.configs import ConfigError, load_config
    from evalbeam.pipelines.preflight import preflight

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "prompt": "p", "response": "r", "reference": "r"}) + "\n")
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"name": "x", "input": {"uri": str(data), "id_column": "id"},
                                "metrics": ["final_response_match_v2"], "output": {"parquet": str(tmp_path / "o")}}))
    config = load_config(path)
    preflight(config, credentials=False)
    monkeypatch.setitem(sys.modules, "google.adk.evaluation.final_response_match_v2", None)
    with pytest.raises(ConfigError, match="final_response_match_v2: google-adk's evaluator cannot be built here"):
        preflight(config, credentials=False)


@pytest.mark.agent_rerun
def test_adks_hallucinations_leave_out_a_step_whose_call_failed_and_a_case_with_none_is_a_row_error(request):
    """ADK's hallucinations_v1 rows (transforms.rubrics.adk_hallucinations_row): a step whose segmentation
    or validation failed after retries is left out, as ADK leaves out a step whose judge call raised; a turn
    with no step scored is not evaluated; a case with no turn scored is an error on its row."""
    if in_agent_env(request):
        return
    import datetime as dt

    from evalbeam.metrics.rows.instance import Instance
    from evalbeam.metrics.judge.client import JudgeResponse
    from evalbeam.metrics.judge.rubrics import Rubric
    from evalbeam.transforms.rubrics import RubricPlan, RubricSet, adk_hallucinations_row, plan_units
    from evalbeam.metrics.rows.tables import RunKey

    run = RunKey("r", dt.date(2026, 11, 25))
    plan = RubricPlan("hallucinations_v1", _plan("hallucinations_v1", threshold=0.6).template, 0.6)
    instance = Instance("c", {"invocations": [
        {"prompt": "Paris?", "response": "Sunny in Paris.", "tool_calls": []},
        {"prompt": "Rome?", "response": "Rain in Rome.", "tool_calls": []},
        {"prompt": "Oslo?", "response": "", "tool_calls": []}]}, {}, "s")
    units = plan_units(instance, plan.template)
    assert [(u.turn, u.step, u.skip is None) for u in units] == [(0, 0, True), (1, 0, True), (2, None, False)]
    assert "Sunny in Paris." in plan.template.render_generation(units[0].fields)
    sentences = RubricSet("segmented", (Rubric("s1", "Sunny.", "sentence"), Rubric("s2", "In Paris.", "sentence")))
    block = "sentence: {}\nlabel: {}\nrationale: r\nsupporting_excerpt: null\ncontradicting_excerpt: null"
    answer = JudgeResponse("k", "hallucinations_v1:validation",
                           verdict="\n".join([block.format("Sunny.", "supported"), block.format("In Paris.", "disputed"),
                                              block.format("Odd.", "maybe")]))
    failed = JudgeResponse("k2", "hallucinations_v1:validation", error="judge failed after 2 attempts: 503")
    row, rubrics = adk_hallucinations_row(run, plan, "c", "m", [
        (units[0], sentences, {0: answer}), (units[1], sentences, {0: failed}), (units[2], None, {})], instance.fields)
    assert row["score"] == 0.5 and row["passed"] is False and row["error"] is None
    extra = json.loads(row["extra"])
    assert extra["per_invocation"] == [0.5, None, None] and extra["step_scores"] == [0.5, None]
    assert [(r["rubric"], r["label"], r["verdict"]) for r in rubrics] == [
        ("Sunny.", "supported", True), ("In Paris.", "disputed", False), ("Odd.", "maybe", None)]
    # a segmentation that failed, and a validation that failed: nothing scored, the row says why
    no_segments = RubricSet("segmented", error="segmentation failed: judge failed after 2 attempts: 503")
    row, _ = adk_hallucinations_row(run, plan, "c", "m", [
        (units[0], no_segments, {}), (units[1], sentences, {0: failed}), (units[2], None, {})], instance.fields)
    assert row["score"] is None and "turn 1 step 1: segmentation failed" in row["error"] \
        and "turn 2 step 1: validation failed" in row["error"]
    # a case ADK refuses (only some turns with an expected response): one unit saying why, the row's error
    partial = Instance("p", {"invocations": [
        {"prompt": "Paris?", "response": "Sunny.", "tool_calls": [], "expected": {"response": "Sunny."}},
        {"prompt": "Rome?", "response": "Rain.", "tool_calls": []}]}, {}, "s")
    [unit] = plan_units(partial, plan.template)
    row, _ = adk_hallucinations_row(run, plan, "p", "m", [(unit, None, {})], partial.fields)
    assert row["score"] is None and "1 of 2 turns have an expected response" in row["error"]
