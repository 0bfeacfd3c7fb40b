"""User simulation for ADK conversation_scenario cases (metrics.agents.simulator, transforms.simulator):
whole runs with a function agent whose simulated user is answered by the local Gemini-protocol
server (tests/servers/judge_server.py) through the judge layer. The simulator is google-adk's own (the
`agent` extra): where this interpreter has no google-adk, a test needing it is run again by
.agent's interpreter; without it, a scenario run stops before it starts, naming the extra."""
from __future__ import annotations

import pytest
import collections
import datetime as dt
import json
import re

import yaml

from tests.helpers import ROOT, evalbeam, in_agent_env, table
from tests.transforms.test_inference import rows_by, write_config

KEY = "sim-test-key-0123456789"

SCENARIO_SET = {
    "eval_set_id": "sim",
    "eval_cases": [
        {"eval_id": "three_turns", "conversation_scenario": {
            "starting_prompt": "Hi", "conversation_plan": "Ask three things."}},
        {"eval_id": "runaway", "conversation_scenario": {
            "starting_prompt": "loop", "conversation_plan": "Keep going.", "user_persona": "NOVICE"}},
        {"eval_id": "tool", "conversationScenario": {
            "startingPrompt": "weather in Paris", "conversationPlan": "Get the weather, thank the agent."},
         "rubrics": [{"rubric_id": "polite", "rubric_content": {"text_property": "The agent is polite."}}]},
        {"eval_id": "broken", "conversation_scenario": {
            "starting_prompt": "break", "conversation_plan": "Anything."}},
        {"eval_id": "fixed", "conversation": [
            {"user_content": {"parts": [{"text": "Hello"}]},
             "final_response": {"parts": [{"text": "ok 1 #reply=message 2"}]}}]},
        {"eval_id": "unknown_persona", "conversation_scenario": {
            "starting_prompt": "Hi", "conversation_plan": "x", "user_persona": "GURU"}},
        {"eval_id": "both", "conversation": [], "conversation_scenario": {
            "starting_prompt": "Hi", "conversation_plan": "x"}},
    ],
}


@pytest.mark.agent_rerun
@pytest.mark.agent
def test_scenarios_run_with_the_simulator_through_the_judge_layer_and_its_cache(tmp_path, monkeypatch, request):
    if in_agent_env(request):  # metrics.agents.simulator calls google-adk (the agent extra)
        return
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    path = tmp_path / "sim.evalset.json"
    path.write_text(json.dumps(SCENARIO_SET, indent=1))
    inference = {"function": "tests.simulation_app:scripted_agent",
                 "user_simulator": {"model": "gemini-sim", "max_allowed_invocations": 4}}
    judge = {"requests_per_minute": 6000, "max_attempts": 2, "timeout_seconds": 10}
    metrics = [{"name": "response_match_score", "threshold": 0.8}, "tool_call_count_v1"]
    with JudgeServer() as server:
        judge["base_url"] = server.url
        first = write_config(tmp_path, path, inference, metrics, run_id="first", judge=judge)
        evalbeam("run", first, check=False)
        # three_turns: 3 simulator calls (the 3rd answers the stop signal); runaway: 3 (the starting
        # prompt is the 1st of its 4 allowed invocations); tool: 2; broken: 2 attempts, both 503
        assert server.stats.stages["text"] == 3 + 3 + 2
        assert server.stats.errors == 2
        out = tmp_path / "out" / "first"
        instances = {r["instance_id"]: r for r in table(out, "instances")}
        assert set(instances) == {"sim:three_turns", "sim:runaway", "sim:tool", "sim:broken", "sim:fixed"}
        turns = json.loads(instances["sim:three_turns"]["invocations"])
        assert [(t["prompt"], t["response"]) for t in turns] == [
            ("Hi", "ok 1 #reply=message 2"), ("message 2", "ok 2 #reply=message 3"),
            ("message 3", "all done #reply=</finished>")]
        runaway = json.loads(instances["sim:runaway"]["invocations"])
        assert [t["prompt"] for t in runaway] == ["loop", "loop more", "loop more", "loop more"]  # max_allowed_invocations
        tool = json.loads(instances["sim:tool"]["invocations"])
        assert [t["prompt"] for t in tool] == ["weather in Paris", "thanks"]
        # the case's rubrics on every simulated turn, as ADK copies them onto the actual invocations
        assert [t["rubrics"] for t in tool] == [[{"rubric_id": "polite", "rubric_content": {
            "text_property": "The agent is polite."}}]] * 2
        assert tool[0]["tool_calls"] == [{"tool_name": "get_weather", "tool_input": {"city": "Paris"},
                                          "response": {"celsius": 25}}]
        broken = instances["sim:broken"]
        assert broken["failure"] == 1
        assert broken["inference_error"].startswith(
            "inference failed: UserSimulatorFailed: user simulator: judge failed after 2 attempts; last: HTTP 503")
        assert KEY not in json.dumps([str(v) for r in instances.values() for v in r.values()])
        assert json.loads(instances["sim:fixed"]["invocations"])[0]["response"] == "ok 1 #reply=message 2"

        results = rows_by(table(out, "metric_results"), "instance_id", "metric")
        # a criterion comparing with expected turns is not evaluated on a scenario case (ADK refuses it)
        assert "no expected turns" in results["sim:three_turns", "response_match_score"]["error"]
        assert results["sim:tool", "tool_call_count_v1"]["score"] == 0.5  # one call over two turns
        assert results["sim:fixed", "response_match_score"]["score"] == 1.0
        assert results["sim:broken", "tool_call_count_v1"]["error"].startswith("inference failed: UserSimulatorFailed")

        dead = sorted(r["reason"] for r in table(out, "dead_letter"))
        assert len(dead) == 2
        assert "eval case 'both': Exactly one of conversation and conversation_scenario" in dead[0]
        assert "eval case 'unknown_persona': conversation_scenario.user_persona: GURU not found in registry" in dead[1]
        [runs] = table(out, "runs")
        assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (7, 5, 2)
        usage = json.loads(runs["judge_usage"])["user_simulator"]
        assert (usage["requests"], usage["calls"], usage["failures"], usage["cache_hits"]) == (9, 10, 1, 0)
        cache = [r for r in table(out, "judge_cache") if r["metric"] == "user_simulator"]
        assert len(cache) == 8 and {r["model"] for r in cache} == {"gemini-sim"}
        assert "</finished>" in {r["verdict"] for r in cache}

        # again with the first run's answers as judge.cache: the same conversations, no simulator call
        # but the one that failed (its answer was never cached)
        requests = server.stats.requests
        second = write_config(tmp_path, path, inference, metrics, run_id="second",
                              judge={**judge, "cache": str(out / "judge_cache")})
        evalbeam("run", second, check=False)
        assert server.stats.requests == requests + 2
    out2 = tmp_path / "out" / "second"
    instances2 = {r["instance_id"]: r for r in table(out2, "instances")}
    for case in ("sim:three_turns", "sim:runaway", "sim:tool"):
        assert json.loads(instances2[case]["invocations"]) == [
            {**t, "duration": json.loads(instances2[case]["invocations"])[i]["duration"]}
            for i, t in enumerate(json.loads(instances[case]["invocations"]))]
    usage2 = json.loads(table(out2, "runs")[0]["judge_usage"])["user_simulator"]
    assert (usage2["requests"], usage2["cache_hits"], usage2["calls"]) == (9, 8, 2)


FIDELITY_SET = {
    "eval_set_id": "fid",
    "eval_cases": [
        {"eval_id": "paris_then_oslo", "session_input": {"app_name": "weather_app", "user_id": "u1",
                                                         "state": {"unit": "C"}},
         "conversation_scenario": {
             "starting_prompt": 'Paris? #call=get_weather{"city": "Paris"}',
             "conversation_plan": 'Then ask about Oslo.\n#reply=And Oslo? #call=get_weather{"city": "Oslo"}'}},
        {"eval_id": "hello_stop", "conversation_scenario": {
            "starting_prompt": "Hello", "conversation_plan": "Say hello, then stop.\n#reply=</finished>"}},
        # the stop signal in the starting prompt ends the conversation before it starts (as in ADK)
        {"eval_id": "instant_stop", "conversation_scenario": {
            "starting_prompt": "Hello </finished>", "conversation_plan": "Nothing."}},
        {"eval_id": "expert_remembers", "session_input": {"app_name": "weather_app", "user_id": "u2", "state": {}},
         "conversation_scenario": {
             "starting_prompt": "Hi there", "user_persona": "EXPERT",
             "conversation_plan": 'Chat.\n#reply=Remember Oslo #call=remember_city{"city": "Oslo"}'}},
        {"eval_id": "fixed", "conversation": [
            {"user_content": {"parts": [{"text": "Hello"}]}, "final_response": {"parts": [{"text": "x"}]}}]},
    ],
}


@pytest.mark.agent
def test_simulated_conversations_equal_adks_evaluation_generator(tmp_path):
    """The same real LlmAgent (tests/inference_agent.py) run against the user simulator by ADK 2.13's
    EvaluationGenerator in .adk and by `evalbeam run` in .agent, the agent's and the simulator's
    models both the local server (scripted answers): the same conversations, turn for turn."""
    import subprocess

    from tests.servers.judge_server import JudgeServer
    from tests.agent_cases import agent_env

    agent_bin = agent_env() / "bin"
    eval_set = tmp_path / "fid.evalset.json"
    eval_set.write_text(json.dumps(FIDELITY_SET, indent=1))
    adk_config = tmp_path / "test_config.json"
    adk_config.write_text(json.dumps({
        "criteria": {"response_match_score": 0.8},
        "user_simulator_config": {"model": "gemini-2.5-flash", "max_allowed_invocations": 3,
                                  "include_function_calls": True}}))
    with JudgeServer() as server:
        env = {"GOOGLE_API_KEY": KEY, "EVALBEAM_TEST_MODEL_URL": server.url}
        reference = subprocess.run(
            [str(ROOT / ".adk" / "bin" / "python"), str(ROOT / "tests" / "adk_env" / "simulated_conversations.py"),
             "tests.inference_agent:root_agent", str(eval_set), str(adk_config)],
            capture_output=True, text=True, timeout=600, cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GOOGLE_GEMINI_BASE_URL": server.url, **env})
        assert reference.returncode == 0, reference.stderr[-3000:]
        adk = json.loads(reference.stdout)
        adk_prompts = collections.Counter(server.stats.prompts)  # the simulator's prompts (free text) ADK sent
        config = write_config(tmp_path, eval_set, {"agent": "tests.inference_agent:root_agent"},
                              ["tool_call_count_v1"], run_id="fid",
                              judge={"base_url": server.url, "requests_per_minute": 6000})
        raw = yaml.safe_load(config.read_text())
        raw["input"]["adk_criteria"] = str(adk_config)
        config.write_text(yaml.safe_dump(raw))
        result = evalbeam("run", config, check=False, env=env, command=agent_bin / "evalbeam")
        ours_prompts = collections.Counter(server.stats.prompts) - adk_prompts
    # the same prompts, character for character: the conversation summaries of the real agent's
    # events (tool calls and responses included) and the persona's prompt are ADK's
    assert ours_prompts == adk_prompts and sum(adk_prompts.values()) == 2 + 1 + 2
    assert (tmp_path / "out" / "fid" / "instances").exists(), result.stderr[-3000:]
    instances = {r["instance_id"]: r for r in table(tmp_path / "out" / "fid", "instances")}
    ours = {}
    for instance_id, row in instances.items():
        if instance_id == "fid:fixed":
            continue
        assert row["failure"] == 0, row["inference_error"]
        ours[instance_id.split(":")[1]] = [
            {"prompt": t["prompt"], "response": t["response"],
             "tool_calls": [[c["tool_name"], c.get("tool_input")] for c in t["tool_calls"]]}
            for t in json.loads(row["invocations"])]
    assert ours == adk
    # the cases took every ending: the stop signal, the invocation limit
    assert len(adk["hello_stop"]) == 1 and len(adk["paris_then_oslo"]) == 3 and adk["instant_stop"] == []
    assert adk["paris_then_oslo"][1]["tool_calls"] == [["get_weather", {"city": "Oslo"}]]
    assert [t["prompt"] for t in adk["expert_remembers"]] == ["Hi there"] + ['Remember Oslo #call=remember_city'
                                                                             '{"city": "Oslo"}'] * 2
    assert adk["expert_remembers"][2]["response"] == 'Done: {"remembered": 2, "unit": null}'  # one session


@pytest.mark.agent_rerun
@pytest.mark.agent
def test_the_scenarios_example_config_validates(monkeypatch, request):
    if in_agent_env(request):  # metrics.agents.simulator calls google-adk (the agent extra)
        return
    from evalbeam.configs import load_config
    from evalbeam.metrics.examples import weather_chat

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    path = ROOT / "configs" / "example_scenarios.yaml"
    result = evalbeam("validate", path)
    assert result.stdout.startswith("config ok") and "2 case(s) to score, 0 `run` would dead-letter" in result.stdout
    config = load_config(path)
    assert config.inference.user_simulator.max_allowed_invocations == 6
    assert config.inference.user_simulator.include_function_calls
    assert [m.name for m in config.simulator_quality_specs()] == ["per_turn_user_simulator_quality_v1"]
    # the example agent answers the city the user named last
    turn = weather_chat({"prompt": "And London?", "conversation": [
        {"role": "user", "text": "Paris please"}, {"role": "agent", "text": "It is 25C and sunny in Paris."},
        {"role": "user", "text": "And London?"}]})
    assert turn["response"] == "It is 12C and rainy in London." and turn["tool_calls"][0]["tool_input"] == {
        "city": "London"}


@pytest.mark.agent_rerun
@pytest.mark.agent
def test_user_simulator_config_checks(tmp_path, request):
    if in_agent_env(request):  # metrics.agents.simulator calls google-adk (the agent extra)
        return
    from evalbeam.configs import validate_config
    from evalbeam.pipelines.preflight import check_imports

    # an ADK file's user_simulator_config as ADK reads it: camelCase, no type, other keys ignored
    adk_file = tmp_path / "test_config.json"
    adk_file.write_text(json.dumps({"criteria": {"evalbeam_safety_v1": 0.5}, "userSimulatorConfig": {
        "maxAllowedInvocations": 4, "someFutureKey": 1}}))
    config = validate_config({"name": "s", "input": {"uri": "x.evalset.json", "adk_criteria": str(adk_file)},
                             "inference": {"function": "a.b:c"}, "output": {"parquet": "/tmp/x"}})
    assert config.inference.user_simulator.max_allowed_invocations == 4
    # the config's own inference.user_simulator wins over the file's
    config = validate_config({"name": "s", "input": {"uri": "x.evalset.json", "adk_criteria": str(adk_file)},
                             "inference": {"function": "a.b:c", "user_simulator": {"model": "m2"}},
                             "output": {"parquet": "/tmp/x"}})
    assert (config.inference.user_simulator.model, config.inference.user_simulator.max_allowed_invocations) == (
        "m2", 20)

    base = {"name": "s", "input": {"uri": "x.evalset.json"}, "metrics": ["tool_call_count_v1"],
            "output": {"parquet": "/tmp/x"}}
    # over an ADK eval set, an agent gets ADK's default simulator
    config = validate_config({**base, "inference": {"function": "a.b:c"}})
    assert config.inference.user_simulator.model_dump() == {
        "type": "llm_backed", "model": "gemini-2.5-flash", "model_configuration": {}, "max_allowed_invocations": 20,
        "custom_instructions": None, "include_function_calls": False}
    config = validate_config({**base, "inference": {"function": "a.b:c", "user_simulator": {
        "maxAllowedInvocations": -1, "includeFunctionCalls": True, "model_configuration": {"temperature": 0.5}}}})
    sim = config.inference.user_simulator
    assert sim.max_allowed_invocations == -1 and sim.include_function_calls
    assert sim.judge_settings(config.judge).temperature == 0.5
    for bad, reason in [({"custom_instructions": "no placeholders"}, "custom_instructions must contain"),
                        ({"max_allowed_invocations": -2}, "greater than or equal to -1"),
                        ({"type": "llm_audio"}, "llm_backed"),
                        ({"model_configuration": {"tools": []}}, "not supported"),
                        ({"unknown": 1}, "Extra inputs")]:
        try:  # custom_instructions: checked by ADK's own config, before any work (preflight)
            check_imports(validate_config({**base, "inference": {"function": "a.b:c", "user_simulator": bad}}))
        except ValueError as e:
            assert reason in str(e), (bad, str(e))
        else:
            raise AssertionError(f"accepted {bad}")
    try:
        validate_config({**base, "inference": {"model": "m", "user_simulator": {}}})
    except ValueError as e:
        assert "not with inference.model" in str(e)
    else:
        raise AssertionError("user_simulator with inference.model accepted")


@pytest.mark.agent_rerun
@pytest.mark.agent
def test_per_turn_user_simulator_quality_in_a_run(tmp_path, monkeypatch, request):
    """per_turn_user_simulator_quality_v1 from an ADK test_config, judged through the judge layer
    (the local server's free-text answers, read with ADK's regex); a case without a scenario and a
    case whose inference failed are not evaluated, saying why."""
    if in_agent_env(request):  # metrics.agents.simulator calls google-adk (the agent extra)
        return
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    path = tmp_path / "q.evalset.json"
    path.write_text(json.dumps({"eval_set_id": "q", "eval_cases": [
        {"eval_id": "verified", "conversation_scenario": {
            "starting_prompt": "verify", "conversation_plan": "Get verified.", "user_persona": "EXPERT"}},
        {"eval_id": "broken", "conversation_scenario": {"starting_prompt": "break", "conversation_plan": "x"}},
        SCENARIO_SET["eval_cases"][4]]}))  # fixed turns
    criteria = tmp_path / "test_config.json"
    criteria.write_text(json.dumps({"criteria": {"per_turn_user_simulator_quality_v1": {
        "threshold": 0.5, "judge_model_options": {"judge_model": "gemini-verifier", "num_samples": 1}}}}))
    with JudgeServer() as server:
        config = write_config(tmp_path, path, {"function": "tests.simulation_app:scripted_agent"}, [],
                              run_id="q", judge={"base_url": server.url, "max_attempts": 2})
        raw = yaml.safe_load(config.read_text())
        raw["input"]["adk_criteria"] = str(criteria)
        del raw["metrics"]
        config.write_text(yaml.safe_dump(raw))
        result = evalbeam("run", config, check=False)
    out = tmp_path / "out" / "q"
    # the progress line counts the simulator's calls as the judge line does (issue 32): 2 judgments of
    # the criterion and 3 simulator calls (the broken case's one failed), none from the cache
    [needed] = re.findall(r"^judge: (\d+) judgments needed, 0 from the cache;", result.stdout, re.M)
    progress = [line for line in result.stderr.splitlines() if line.startswith("evalbeam progress:")]
    assert progress and int(needed) == 2 + 3, result.stdout + result.stderr
    assert f"| judgments {needed}/{needed} at " in progress[-1], progress[-1]
    turns = json.loads({r["instance_id"]: r for r in table(out, "instances")}["q:verified"]["invocations"])
    assert [t["prompt"] for t in turns] == ["verify", '{"is_valid": true}']
    results = rows_by(table(out, "metric_results"), "instance_id", "metric")
    verified = results["q:verified", "per_turn_user_simulator_quality_v1"]
    # the first turn is the starting prompt (1), the second judged valid (1); the stop turn's answer has no
    # label (not evaluated), so it marks nothing failed
    assert (verified["score"], verified["passed"], verified["judge_model"]) == (1.0, True, "gemini-verifier")
    assert json.loads(verified["extra"]) == {"per_turn": [1.0, 1.0], "stop_turn": None}
    assert results["q:fixed", "per_turn_user_simulator_quality_v1"]["error"] == \
        "conversation_scenario is needed by this metric."
    assert results["q:broken", "per_turn_user_simulator_quality_v1"]["error"].startswith("inference failed")
    [runs] = table(out, "runs")
    usage = json.loads(runs["judge_usage"])
    assert usage["per_turn_user_simulator_quality_v1"]["requests"] == 2  # the second turn and the stop turn
    assert usage["user_simulator"]["requests"] == 2 + 1
    cache = {r["metric"] for r in table(out, "judge_cache")}
    assert {"per_turn_user_simulator_quality_v1", "user_simulator"} <= cache


@pytest.mark.agent_rerun
@pytest.mark.agent
def test_a_scenario_case_without_inference_is_dead_lettered_saying_what_to_set(tmp_path, request):
    if in_agent_env(request):  # metrics.agents.simulator calls google-adk (the agent extra)
        return
    from evalbeam.metrics.rows.fields import InvalidField
    from evalbeam.metrics.rows.instance import RowSpec, build_instance
    from evalbeam.transforms.read import parse_file
    from evalbeam.transforms.records import Record

    path = tmp_path / "sim.evalset.json"
    path.write_text(json.dumps(SCENARIO_SET))
    records = {r.data["eval_id"]: r.data for r in parse_file(str(path), "adk_eval_set") if isinstance(r, Record)}
    spec = RowSpec({}, "instance_id", (), (("tool_trajectory_avg_score", (("invocations",),)),))
    build_instance(records["fixed"], spec, "t")
    try:
        build_instance(records["runaway"], spec, "t")
    except InvalidField as e:
        assert "set inference.function or inference.agent" in str(e) and e.field == "invocations"
    else:
        raise AssertionError("a scenario case without turns was scored")
    # camelCase scenario keys are read as ADK reads them
    assert records["tool"]["adk_case"]["conversation_scenario"]["startingPrompt"] == "weather in Paris"


@pytest.mark.agent_rerun
@pytest.mark.agent
def test_runs_are_separate_simulations_and_checkpointed_answers_are_not_asked_again(tmp_path, monkeypatch, request):
    """num_runs 2: each run's simulator is its own sample (its own calls); a re-run of a run_id whose
    earlier attempt checkpointed simulator answers (here: written as that attempt would have) reuses
    them instead of calling."""
    if in_agent_env(request):  # metrics.agents.simulator calls google-adk (the agent extra)
        return
    from evalbeam.metrics.judge.client import JudgeResponse
    from evalbeam.transforms.judge_checkpoint import checkpoint_folder, write_chunk
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    path = tmp_path / "one.evalset.json"
    path.write_text(json.dumps({"eval_set_id": "one", "eval_cases": [SCENARIO_SET["eval_cases"][0]]}))
    inference = {"function": "tests.simulation_app:scripted_agent", "num_runs": 2}
    with JudgeServer() as server:
        judge = {"base_url": server.url}
        first = write_config(tmp_path, path, inference, ["tool_call_count_v1"], run_id="runs", judge=judge)
        evalbeam("run", first)
        assert server.stats.stages["text"] == 3 * 2  # the same three prompts, asked once per run (sample)
        out = tmp_path / "out" / "runs"
        instances = {r["instance_id"]: r for r in table(out, "instances")}
        prompts = {k: [t["prompt"] for t in json.loads(v["invocations"])] for k, v in instances.items()}
        assert prompts == {f"one:three_turns:run{k}": ["Hi", "message 2", "message 3"] for k in (1, 2)}
        answers = [r for r in table(out, "judge_cache") if r["metric"] == "user_simulator"]
        assert len(answers) == 6 and len({r["request_key"] for r in answers}) == 6

        # the same run_id again, its checkpoint folder holding these answers: nothing is asked
        folder = checkpoint_folder(str(tmp_path / "out"), None, "runs")
        write_chunk(folder, "shard-0-earlier-000001.parquet", [
            JudgeResponse(r["request_key"], "user_simulator", r["verdict"], prompt_tokens=r["prompt_tokens"],
                          output_tokens=r["output_tokens"], attempts=r["attempts"]) for r in answers])
        requests = server.stats.requests
        evalbeam("run", first)
        assert server.stats.requests == requests
    usage = json.loads(table(out, "runs")[0]["judge_usage"])["user_simulator"]
    assert (usage["requests"], usage["checkpoint_reused"]) == (6, 6)
    again = {r["instance_id"]: [t["prompt"] for t in json.loads(r["invocations"])] for r in table(out, "instances")}
    assert again == prompts


@pytest.mark.slow
def test_an_answer_with_no_text_fails_the_case_after_the_judges_retries(monkeypatch):
    import asyncio

    from evalbeam.configs import UserSimulatorConfig
    from evalbeam.metrics.judge.settings import JudgeSettings
    from evalbeam.metrics.agents.simulator import UserSimulatorFailed
    from evalbeam.transforms.simulator import SimulatorCalls
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    with JudgeServer() as server:
        settings = UserSimulatorConfig().judge_settings(JudgeSettings(base_url=server.url, max_attempts=3))
        calls = SimulatorCalls(settings, UserSimulatorConfig(), {}, None)

        async def main():
            try:
                first = await calls.ask("Plan: say hi.\n#reply=hello there")
                again = await calls.ask("Plan: say hi.\n#reply=hello there")  # answered before: no call
                try:
                    await calls.ask("Plan: nothing.\n#reply=")  # the model's answer has no text
                except UserSimulatorFailed as e:
                    return first, again, str(e)
                return first, again, None
            finally:
                await calls.close()

        first, again, error = asyncio.run(main())
        assert first == again == "hello there"
        assert server.stats.stages["text"] == 1 + 3

        # two cases asking the same prompt at the same moment share one call
        together = SimulatorCalls(settings, UserSimulatorConfig(), {}, None)

        async def both():
            try:
                return await asyncio.gather(together.ask("Same.\n#reply=ok"), together.ask("Same.\n#reply=ok"))
            finally:
                await together.close()

        assert asyncio.run(both()) == ["ok", "ok"]
        assert server.stats.stages["text"] == 1 + 3 + 1
        assert sorted((r.cache_hit, r.attempts) for r in together.responses) == [(False, 1), (True, 0)]
    assert error == ("user simulator: judge failed after 3 attempts; last: invalid judge output: the model's "
                     "answer has no text")
    assert [(r.cache_hit, r.attempts, r.error is None) for r in calls.responses] == [
        (False, 1, True), (True, 0, True), (False, 3, False)]


@pytest.mark.slow
def test_a_scenario_run_without_the_agent_extra_stops_before_it_starts(tmp_path, monkeypatch):
    """evalbeam without its `agent` extra (the main venv: no google-adk): a run with conversation_scenario
    cases, per_turn_user_simulator_quality_v1 or custom simulator instructions stops before it starts
    (exit 2, nothing written), naming the extra to install; an eval set without scenarios still validates."""
    main = ROOT / ".venv" / "bin" / "evalbeam"  # make env: evalbeam without its extras
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    scenarios = tmp_path / "sim.evalset.json"
    scenarios.write_text(json.dumps(SCENARIO_SET))
    fixed = tmp_path / "fixed.evalset.json"
    fixed.write_text(json.dumps({"eval_set_id": "fixed", "eval_cases": [SCENARIO_SET["eval_cases"][4]]}))
    agent = {"function": "tests.simulation_app:scripted_agent"}
    extra = "install the agent extra (pip install 'evalbeam[agent]')"

    config = write_config(tmp_path, scenarios, agent, ["tool_call_count_v1"], run_id="scenarios")
    result = evalbeam("run", config, check=False, command=main)
    assert result.returncode == 2, result.stdout + result.stderr
    assert extra in result.stderr and "conversation_scenario cases (eval case" in result.stderr
    assert f"{scenarios}: 'three_turns'" in result.stderr  # the first scenario case found
    assert not (tmp_path / "out" / "scenarios").exists()

    config = write_config(tmp_path, fixed, agent, [{"name": "per_turn_user_simulator_quality_v1", "threshold": 0.5}],
                          run_id="quality")
    result = evalbeam("validate", config, check=False, command=main)
    assert result.returncode == 2 and "per_turn_user_simulator_quality_v1: needs google-adk's" in result.stderr
    assert extra in result.stderr

    config = write_config(tmp_path, fixed, {**agent, "user_simulator": {
        "custom_instructions": "{{ conversation_plan }} {{ conversation_history }} {{ stop_signal }}"}},
        ["tool_call_count_v1"], run_id="custom")
    result = evalbeam("validate", config, check=False, command=main)
    assert result.returncode == 2 and extra in result.stderr and "custom_instructions" in result.stderr

    # no scenario case, no metric of the simulator's: the agent extra is not needed
    config = write_config(tmp_path, fixed, agent, ["tool_call_count_v1"], run_id="fixed")
    result = evalbeam("validate", config, check=False, command=main)
    assert result.returncode == 0 and result.stdout.startswith("config ok"), result.stdout + result.stderr


def test_simulator_cache_rows_name_the_model_the_simulator_called():
    """With a judge of another provider, the simulator calls the judge's model
    (UserSimulatorConfig.judge_settings): its judge_cache rows say so, not user_simulator.model's default."""
    from evalbeam.configs.schema import UserSimulatorConfig
    from evalbeam.metrics.judge.client import JudgeResponse
    from evalbeam.metrics.judge.settings import JudgeSettings
    from evalbeam.metrics.rows.tables import RunKey
    from evalbeam.transforms.simulator import simulator_cache_rows

    run = RunKey("run-1", dt.date(2026, 1, 2))
    answer = JudgeResponse(key="k", metric="user_simulator", verdict="hello", prompt_tokens=3, output_tokens=1)
    judge = JudgeSettings(provider="openai_compatible", model="gpt-judge")
    config = UserSimulatorConfig()
    assert config.model == "gemini-2.5-flash"  # the default, not called with this judge
    [row] = simulator_cache_rows(answer, run, config.judge_settings(judge))
    assert (row["model"], row["request_key"], row["verdict"]) == ("gpt-judge", "k", "hello")
    named = UserSimulatorConfig(model="gpt-sim").judge_settings(judge)
    assert simulator_cache_rows(answer, run, named)[0]["model"] == "gpt-sim"
    assert simulator_cache_rows(answer, run, JudgeSettings())[0]["model"] == "gemini-2.5-flash"
    failed = JudgeResponse(key="k", metric="user_simulator", error="judge failed")
    assert simulator_cache_rows(failed, run, named) == []
