"""metrics.agents.simulator against google-adk 2.13.0's own user simulator (run in the .adk reference venv
through tests/adk_env/simulator_reference.py): no text of ADK's simulator stands in evalbeam's
tracked files, and on generated cases the prompts, conversation summaries, custom-instruction
checks, whole simulated exchanges (messages, end status, every prompt sent to the model) and the
verifier's prompts and scores are equal. metrics.agents.simulator calls the installed google-adk: where
this interpreter has none (the main venv), each test is run again by .agent's interpreter."""
from __future__ import annotations

import asyncio
import json
import random
import subprocess

import pytest

from evalbeam.metrics.agents import simulator
from evalbeam.metrics.agents.simulator import (
    LlmBackedUserSimulator,
    ScenarioError,
    UserSimulatorFailed,
    check_custom_instructions,
    majority,
    parse_scenario,
    quality_first,
    quality_prompts,
    quality_result,
    quality_score,
    render_prompt,
    summarize,
)
from tests.helpers import ROOT, in_agent_env

pytestmark = pytest.mark.adk

ADK_PYTHON = ROOT / ".adk" / "bin" / "python"
TEXTS = ["Book a flight to Oslo.", "héllo wörld ✈", "multi\nline\n\ntext", "{{ stop_signal }} in a message",
         "{% if x %}braces{% endif %}", "", "  spaced  ", "I need a car for 3 days; budget < $150 & > $90.",
         "</finished>", "日本語のテキスト"]
CUSTOM_OK = "Plan: {{ conversation_plan }}\nSo far:\n{{ conversation_history }}\nEnd with {{ stop_signal }}."
CUSTOM_PERSONA = CUSTOM_OK + "\nYou are: {{ persona.description }} ({{ persona.id }})"
CUSTOMS = [CUSTOM_OK, CUSTOM_PERSONA, "no placeholders", "{{ conversation_plan }} {{ stop_signal }}",
           "{{ conversation_plan }} {{ conversation_history }} {{ stop_signal", "{{ conversation_plan | upper }} "
           "{{ conversation_history }} {{ stop_signal }}"]
OWN_PERSONA = {"id": "TERSE", "description": "Says little.", "behaviors": [
    {"name": "Short {{ stop_signal }}", "description": "One line, ends with {{ stop_signal }}.",
     "behavior_instructions": ["Answer in five words.", "Say {{ stop_signal }} when done."],
     "violation_rubrics": ["Long answers."]}]}


def generated(rng: random.Random) -> dict:
    renders = []
    for _ in range(60):
        persona = rng.choice([None, None, "EXPERT", "NOVICE", "EVALUATOR", OWN_PERSONA])
        custom = rng.choice([None, None, CUSTOM_OK, CUSTOM_PERSONA])
        renders.append({"plan": rng.choice(TEXTS), "history": "\n\n".join(rng.sample(TEXTS, 3)),
                        "custom": custom, "persona": persona})
    summaries = []
    for _ in range(40):
        events = []
        for _ in range(rng.randrange(6)):
            parts = []
            for _ in range(rng.randrange(1, 4)):
                kind = rng.choice(["text", "thought", "call", "response", "empty"])
                if kind == "text":
                    parts.append({"text": rng.choice(TEXTS) or "x"})
                elif kind == "thought":
                    parts.append({"text": "thinking...", "thought": True})
                elif kind == "call":
                    parts.append({"function_call": {"name": "get_weather", "args": {
                        "city": rng.choice(["Paris", "Oslo"]), "days": rng.randrange(3), "units": ["C", "F"]}}})
                elif kind == "response":
                    parts.append({"function_response": {"name": "get_weather", "response": {
                        "ok": rng.random() < 0.5, "temp": rng.choice([25, -3.5, None])}}})
            events.append({"author": rng.choice(["user", "weather_agent", "sub"]),
                           "content": {"role": "model", "parts": parts} if parts else None})
        summaries.append({"events": events, "include_function_calls": rng.random() < 0.5})
    runs = []
    for i in range(30):
        answers = [rng.choice(["Next please.", "Could you redo that?", "All good </FINISHED> bye", "</finished>",
                               "Another {{ thing }}"]) for _ in range(8)]
        if i % 7 == 3:
            answers[rng.randrange(3)] = ""  # an answer with no text: ADK raises, the case fails
        runs.append({"scenario": {"starting_prompt": rng.choice(TEXTS[:4]), "conversation_plan": rng.choice(TEXTS),
                                  "user_persona": rng.choice([None, "NOVICE", OWN_PERSONA])},
                     "config": {"max_allowed_invocations": rng.choice([1, 2, 3, 5, -1]),
                                "include_function_calls": rng.random() < 0.5},
                     "answers": answers, "agent": [f"Agent answer {k} {rng.choice(TEXTS)}" for k in range(9)]})
    quality = []
    labels = ['{"criteria": [], "is_valid": True}', '{"is_valid": false,\n}', '"is_valid": ["valid"]}',
              "no label at all", '"is_valid": "almost",', '{"is_valid": "partially valid"}', '"is_valid": maybe,',
              "", '{"is_valid": "True"}', '"is_valid":\n  "INVALID"\n}']
    for i in range(60):
        starting = rng.choice(TEXTS[:4]) or "x"
        turns = [{"prompt": (f"  {starting} " if rng.random() < 0.7 else "something else") if k == 0 else
                  rng.choice(TEXTS) or "y", "response": rng.choice(["", "Sure.", "Here: {{ a }}"])}
                 for k in range(rng.randrange(1, 5))]
        quality.append({"scenario": {"starting_prompt": starting, "conversation_plan": rng.choice(TEXTS),
                                     "user_persona": rng.choice([None, "NOVICE", OWN_PERSONA])},
                        "turns": turns, "answers": [rng.choice(labels) for _ in range(40)],
                        "threshold": rng.choice([0.0, 0.5, 1.0]), "num_samples": rng.choice([1, 2, 3]),
                        "stop_signal": rng.choice(["</finished>", "<END>"])})
    return {"renders": renders, "summaries": summaries, "customs": CUSTOMS, "runs": runs, "quality": quality}


@pytest.fixture(scope="module")
def adk_simulator(tmp_path_factory):
    if not ADK_PYTHON.exists():
        pytest.fail("the ADK reference environment is missing: run `make adk-env`: google-adk 2.13.0 in .adk/")
    request = generated(random.Random(22))
    path = tmp_path_factory.mktemp("simulator") / "request.json"
    path.write_text(json.dumps(request))
    result = subprocess.run([str(ADK_PYTHON), str(ROOT / "tests" / "adk_env" / "simulator_reference.py"), str(path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return request, json.loads(result.stdout)


def ours_render(case):
    persona = parse_scenario({"starting_prompt": "", "conversation_plan": "",
                              "user_persona": case["persona"]}).user_persona
    try:
        return render_prompt(case["plan"], case["history"], case["custom"], persona)
    except ScenarioError as e:  # ADK's error, named first
        return {"error": str(e).split(":")[0]}


async def ours_run(case):
    answers = list(case["answers"])
    prompts = []

    async def ask(prompt):
        prompts.append(prompt)
        return answers.pop(0)

    config = case["config"]
    sim = LlmBackedUserSimulator(parse_scenario(case["scenario"]), ask, config["max_allowed_invocations"],
                                 None, config["include_function_calls"])
    agent = list(case["agent"])
    events, messages = [], []
    try:
        while True:
            status, text = await sim.next_message(list(events))
            if status != simulator.SUCCESS:
                return {"messages": messages, "status": status, "prompts": prompts}
            messages.append(text)
            events.append({"author": "user", "content": {"role": "user", "parts": [{"text": text}]}})
            events.append({"author": "helper_agent", "content": {"role": "model", "parts": [{"text": agent.pop(0)}]}})
    except UserSimulatorFailed as e:
        return {"messages": messages, "error": str(e), "prompts": prompts}


def tracked_text() -> str:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    texts = []
    for name in filter(None, files.split("\0")):
        try:
            texts.append((ROOT / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            pass
    return "\n".join(texts)


def test_no_text_of_adks_simulator_is_in_evalbeams_files(adk_simulator):
    """Every sentence of ADK's simulator and verifier templates and of its pre-built personas (as
    the installed google-adk holds them) is absent from the repository's tracked files: evalbeam
    reads them from google-adk, never holds them."""
    _, adk = adk_simulator
    texts = [adk["templates"]["default"], adk["templates"]["persona"], *adk["quality_templates"]]
    for persona in adk["personas"].values():
        texts.append(persona["description"])
        for b in persona["behaviors"]:
            texts += [b["name"], b["description"], *b["behavior_instructions"], *b["violation_rubrics"]]
    sentences = {s.strip() for t in texts for line in t.splitlines() for s in line.split(". ")
                 if len(s.strip()) >= 40 and "{" not in s}
    assert len(sentences) > 100  # the templates and personas were read
    ours = tracked_text()
    assert [s for s in sorted(sentences) if s in ours] == []


@pytest.mark.agent_rerun
def test_stop_signal_and_defaults_are_adks(adk_simulator, request):
    if in_agent_env(request):
        return
    from evalbeam.configs import UserSimulatorConfig

    _, adk = adk_simulator
    assert simulator.adk_stop_signal() == adk["stop_signal"]
    # the config's defaults are LlmBackedUserSimulatorConfig's, the verifier's stop signal
    # LlmBackedUserSimulatorCriterion's
    from google.adk.evaluation.eval_metrics import LlmBackedUserSimulatorCriterion

    from evalbeam.metrics.adk import SimulatorQualityParams

    fields = simulator._adk("llm_backed_user_simulator").LlmBackedUserSimulatorConfig.model_fields
    adks = {name: fields[name].default for name in ("model", "max_allowed_invocations")}
    assert simulator.SIMULATOR_DEFAULTS == adks
    ours = UserSimulatorConfig()
    assert {"model": ours.model, "max_allowed_invocations": ours.max_allowed_invocations} == adks
    assert SimulatorQualityParams().stop_signal == LlmBackedUserSimulatorCriterion(threshold=0.5).stop_signal


@pytest.mark.agent_rerun
def test_prompts_summaries_and_checks_equal_adks(adk_simulator, request):
    if in_agent_env(request):
        return
    request, adk = adk_simulator
    assert [ours_render(c) for c in request["renders"]] == adk["renders"]
    assert [summarize(c["events"], c["include_function_calls"]) for c in request["summaries"]] == adk["summaries"]
    ours = []
    for text in request["customs"]:
        try:
            check_custom_instructions(text)
            ours.append(True)
        except ScenarioError:
            ours.append("ValidationError")
    assert ours == adk["customs"]


@pytest.mark.agent_rerun
def test_simulated_exchanges_equal_adks(adk_simulator, request):
    if in_agent_env(request):
        return
    request, adk = adk_simulator
    ours = [asyncio.run(ours_run(c)) for c in request["runs"]]
    assert {("error" in r, r.get("status")) for r in adk["runs"]} >= {
        (False, "stop_signal_detected"), (False, "turn_limit_reached"), (True, None)}  # every ending was tried
    assert ours == adk["runs"]


@pytest.mark.agent_rerun
def test_scenario_and_persona_errors_say_what_adk_says(request):
    if in_agent_env(request):
        return
    with pytest.raises(ScenarioError, match="GURU not found in registry"):
        parse_scenario({"starting_prompt": "a", "conversation_plan": "b", "user_persona": "GURU"})
    with pytest.raises(ScenarioError, match="conversationPlan: Field required"):
        parse_scenario({"starting_prompt": "a"})
    # a persona is a plain pydantic model in ADK: snake_case keys only
    camel = {**OWN_PERSONA, "behaviors": [{**OWN_PERSONA["behaviors"][0], "behaviorInstructions": ["x"]}]}
    del camel["behaviors"][0]["behavior_instructions"]
    with pytest.raises(ScenarioError, match="behavior_instructions: Field required"):
        parse_scenario({"starting_prompt": "a", "conversation_plan": "b", "user_persona": camel})
    with pytest.raises(ScenarioError, match="extra_key: Extra inputs are not permitted"):
        parse_scenario({"starting_prompt": "a", "conversation_plan": "b", "extra_key": 1})
    # a persona given with custom instructions lacking {{ persona }} is refused when the prompt is made
    with pytest.raises(ScenarioError, match="persona"):
        render_prompt("p", "h", CUSTOM_OK, parse_scenario(
            {"starting_prompt": "a", "conversation_plan": "b", "user_persona": "EXPERT"}).user_persona)


def ours_quality(case):
    """The same case through metrics.agents.simulator's quality functions, the answers taken in ADK's order."""
    answers = iter(case["answers"])
    scenario = parse_scenario(case["scenario"])
    turns = [{"prompt": t["prompt"], "response": t["response"], "tool_calls": []} for t in case["turns"]]
    prompts, per_unit = [], []
    for prompt in quality_prompts(scenario, turns, case["stop_signal"]):
        samples = []
        for _ in range(case["num_samples"]):
            prompts.append(prompt)
            samples.append(quality_score(next(answers)))
        per_unit.append(majority(samples))
    score, per_turn = quality_result(quality_first(scenario, turns), per_unit[:-1], per_unit[-1], case["threshold"])
    return {"score": score, "status": "PASSED" if score >= case["threshold"] else "FAILED", "per_turn": per_turn,
            "prompts": prompts}


@pytest.mark.agent_rerun
def test_per_turn_user_simulator_quality_equals_adks(adk_simulator, request):
    """per_turn_user_simulator_quality_v1: on generated conversations (personas, thresholds, samples,
    every label spelling ADK's regex reads, answers with no label) the prompts sent, per-turn scores,
    score and status equal ADK's evaluator's."""
    if in_agent_env(request):
        return
    request, adk = adk_simulator
    ours = [ours_quality(c) for c in request["quality"]]
    assert ours == adk["quality"]
    assert {r["status"] for r in ours} == {"PASSED", "FAILED"} and any(None in r["per_turn"] for r in ours)
