"""User simulation against deployed agents (transforms/simulator.py with the clients of metrics/agents/): the same real
LlmAgent (tests/inference_agent.py) run against ADK's user simulator by ADK 2.13's own EvaluationGenerator
in-process, and by `evalbeam run` (in .agent) over A2A (ADK's to_a2a, behind an ID-token check, through a
proxy that refuses a message once) and on the Agent Engine stand-in in front of a real ADK app: the same
conversations, turn for turn. The agent's and the simulator's models are the local server
(tests/servers/judge_server.py), its answers scripted by the markers of the case."""
from __future__ import annotations

import ast
import collections
import json
import os
import re
import subprocess

import pytest
import yaml

from tests.helpers import ROOT, evalbeam, table
from tests.agent_cases import ENGINE, KEY, agent_env, cases_of
from tests.credentials import auth_log, guarded, id_token_check, service_account_adc
from tests.servers.faulty_proxy import FaultyProxy

pytestmark = pytest.mark.agent

SCENARIOS = {
    "eval_set_id": "dep",
    "eval_cases": [
        {"eval_id": "paris_then_oslo", "conversation_scenario": {
            "starting_prompt": 'Paris? #call=get_weather{"city": "Paris"}',
            "conversation_plan": 'Then ask about Oslo.\n#reply=And Oslo? #call=get_weather{"city": "Oslo"}'}},
        {"eval_id": "hello_stop", "conversation_scenario": {
            "starting_prompt": "Hello", "conversation_plan": "Say hello, then stop.\n#reply=</finished>"}},
        {"eval_id": "expert_remembers", "session_input": {"app_name": "weather_app", "user_id": "u2", "state": {}},
         "conversation_scenario": {
             "starting_prompt": "Hi there", "user_persona": "EXPERT",
             "conversation_plan": 'Chat.\n#reply=Remember Oslo #call=remember_city{"city": "Oslo"}'}},
        # state from session_input: set at create_session on Agent Engine; over A2A the case fails, saying why
        {"eval_id": "remembers_with_state", "session_input": {"app_name": "weather_app", "user_id": "u3",
                                                              "state": {"unit": "C"}},
         "conversation_scenario": {
             "starting_prompt": 'Remember Paris #call=remember_city{"city": "Paris"}',
             "conversation_plan": 'Again.\n#reply=Remember Rome #call=remember_city{"city": "Rome"}'}},
        {"eval_id": "fixed", "conversation": [
            {"user_content": {"parts": [{"text": "Hello, fixed"}]}, "final_response": {"parts": [{"text": "x"}]}}]},
    ],
}
ADK_CONFIG = {"criteria": {"response_match_score": 0.8},
              "user_simulator_config": {"model": "gemini-2.5-flash", "max_allowed_invocations": 3,
                                        "include_function_calls": True}}


def reference(tmp_path, model_url: str) -> dict:
    """ADK's own EvaluationGenerator with its user simulator, the agent in-process (the .adk reference
    venv where there is one, else .agent: both google-adk 2.13.0)."""
    python = next(p for p in (ROOT / ".adk" / "bin" / "python", agent_env() / "bin" / "python") if p.exists())
    result = subprocess.run(
        [str(python), str(ROOT / "tests" / "adk_env" / "simulated_conversations.py"), "tests.inference_agent:root_agent",
         str(tmp_path / "dep.evalset.json"), str(tmp_path / "test_config.json")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GOOGLE_GEMINI_BASE_URL": model_url,
             "GOOGLE_API_KEY": KEY, "EVALBEAM_TEST_MODEL_URL": model_url})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def run(tmp_path, run_id: str, inference: dict, model_url: str):
    config = {"name": "dep", "run_id": run_id, "input": {"uri": str(tmp_path / "dep.evalset.json"),
                                                        "adk_criteria": str(tmp_path / "test_config.json")},
              "inference": inference, "metrics": ["tool_call_count_v1"],
              "judge": {"base_url": model_url, "requests_per_minute": 6000},
              "output": {"parquet": str(tmp_path / "out")}}
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {"GOOGLE_API_KEY": KEY, "GOOGLE_APPLICATION_CREDENTIALS": os.environ["GOOGLE_APPLICATION_CREDENTIALS"]}
    result = evalbeam("run", path, check=False, env=env, command=agent_env() / "bin" / "evalbeam")
    assert (tmp_path / "out" / run_id / "instances").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return {r["instance_id"].split(":")[1]: r for r in table(tmp_path / "out" / run_id, "instances")}, result


def same_order(prompts: collections.Counter) -> collections.Counter:
    """The prompts with each tool response's keys sorted: over A2A a function response travels as a
    protobuf Struct, which keeps no key order (its values are kept, integral numbers as ints)."""
    def sort(match):
        return "returned: " + repr(dict(sorted(ast.literal_eval(match.group(1)).items())))

    return collections.Counter({re.sub(r"returned: (\{[^\n]*\})", sort, p): n for p, n in prompts.items()})


def transcript(row) -> list[dict]:
    assert row["failure"] == 0, row["inference_error"]
    return [{"prompt": t["prompt"], "response": t["response"],
             "tool_calls": [[c["tool_name"], c.get("tool_input")] for c in t["tool_calls"]]}
            for t in json.loads(row["invocations"])]


@pytest.fixture
def adc(tmp_path, monkeypatch):
    with service_account_adc(tmp_path, monkeypatch) as tokens:
        yield tokens


def test_simulated_users_talk_to_deployed_agents_as_adks_simulator_does_in_process(tmp_path, adc):
    from tests.servers.a2a_agent import AdkAppServer
    from tests.servers.agent_engine_server import AgentEngineServer
    from tests.servers.judge_server import JudgeServer

    tokens = adc
    tokens.id_token_lifetime = 5  # short-lived: each conversation outlives the first token
    (tmp_path / "dep.evalset.json").write_text(json.dumps(SCENARIOS, indent=1))
    (tmp_path / "test_config.json").write_text(json.dumps(ADK_CONFIG))
    with JudgeServer() as model:
        adk = reference(tmp_path, model.url)
        adk_prompts = collections.Counter(model.stats.prompts)

        with guarded(model.url, lambda url: id_token_check(tokens, url)) as url:
            ready = len(auth_log(url))  # A2AServer's readiness probes (no credential, refused)
            # the proxy refuses the 3rd message (503) once: sent again, never twice to the agent
            proxy = FaultyProxy(url, {3: (503, None)})
            try:
                a2a, result = run(tmp_path, "a2a", {"a2a": proxy.url, "requests_per_minute": 600, "max_attempts": 3,
                                                    "auth": {"google_id_token": {"audience": url}}}, model.url)
            finally:
                proxy.close()
            a2a_prompts = collections.Counter(model.stats.prompts) - adk_prompts
            log = auth_log(url)[ready:]

        with AgentEngineServer(tokens) as engine, AdkAppServer(model.url) as backend:
            engine.backend = backend
            seen = collections.Counter(model.stats.prompts)
            engine_run, _ = run(tmp_path, "engine", {"agent_engine": ENGINE, "base_url": engine.url}, model.url)
            engine_prompts = collections.Counter(model.stats.prompts) - seen
            sessions = list(engine.stats.sessions)

    # ADK's conversations took every ending: the invocation limit, the stop signal
    assert len(adk["paris_then_oslo"]) == 3 and len(adk["hello_stop"]) == 1
    assert adk["paris_then_oslo"][1]["tool_calls"] == [["get_weather", {"city": "Oslo"}]]
    assert adk["remembers_with_state"][1]["response"] == 'Done: {"remembered": 2, "unit": "C"}'

    # over A2A: the same conversations, with the ID token checked on every request
    for case in ("paris_then_oslo", "hello_stop", "expert_remembers"):
        assert transcript(a2a[case]) == adk[case], case
    stated = a2a["remembers_with_state"]
    assert stated["failure"] == 1 and "session_input.state cannot be set over A2A" in stated["inference_error"]
    assert transcript(a2a["fixed"])[0]["prompt"] == "Hello, fixed"  # fixed turns, beside the simulated ones
    # one agent, one quota: the simulated conversations waited for the fixed-turn case to be done
    assert proxy.order[0] == "Hello, fixed" and proxy.order.count("Hello, fixed") == 1, proxy.order
    assert {e["status"] for e in log} == {200} and len({e["exp"] for e in log}) >= 2  # tokens refreshed
    assert set(proxy.forwarded_ids.values()) == {1}  # no message reached the agent twice
    assert proxy.posts == sum(proxy.forwarded_ids.values()) + 1  # the refused one, sent again
    # the simulator's prompts are ADK's, but for the order of a tool response's keys (see same_order); the
    # state case has none: it failed before its first message was sent
    assert same_order(a2a_prompts) == same_order(adk_prompts - collections.Counter(
        p for p in adk_prompts if "Remember Paris" in p))

    # on Agent Engine: every case, its state set at create_session
    for case in ("paris_then_oslo", "hello_stop", "expert_remembers", "remembers_with_state"):
        assert transcript(engine_run[case]) == adk[case], case
    assert ("u3", {"unit": "C"}) in sessions
    assert engine_prompts == adk_prompts

    # no ID token anywhere in what the runs wrote or printed
    written = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())
    printed = result.stdout + result.stderr
    for token in tokens.stats.issued_id_tokens:
        assert token.encode() not in written and token not in printed


@pytest.mark.agent_rerun
def test_finished_simulated_conversations_are_checkpointed_and_not_held_again(tmp_path, request, monkeypatch):
    """transforms.simulator.SimulateFn on an A2A agent (behind the ID-token check) with a checkpoint folder:
    each finished conversation is checkpointed as a finished case; the same cases again (a re-run of the
    run_id) are taken from there, the agent sent nothing, with the same turns."""
    from tests.helpers import in_agent_env

    if in_agent_env(request):  # the simulator is google-adk's (the agent extra)
        return
    from evalbeam.configs import InferenceConfig
    from evalbeam.metrics.rows.instance import Instance
    from evalbeam.metrics.judge.settings import JudgeSettings
    from evalbeam.transforms.simulator import SimulateFn
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    eval_set = {**SCENARIOS, "eval_cases": SCENARIOS["eval_cases"][:3]}
    with service_account_adc(tmp_path, monkeypatch) as tokens, JudgeServer() as model:
        with guarded(model.url, lambda url: id_token_check(tokens, url)) as url:
            inference = InferenceConfig(a2a=url, auth="google_id_token", user_simulator={"max_allowed_invocations": 3})
            settings = JudgeSettings(base_url=model.url, requests_per_minute=6000)
            batch = [Instance(i, f, {}, "t") for i, f in cases_of(tmp_path, eval_set)]

            def simulate():
                fn = SimulateFn("a2a", url, 4, 120, inference.user_simulator, settings, str(tmp_path / "ckpt"), inference)
                fn.setup()
                return {i.instance_id: i.fields for i in fn.process((0, batch), {})
                        if isinstance(i, Instance)}

            ready = len(auth_log(url))
            first = simulate()
            sent = len(auth_log(url))
            second = simulate()
            assert len(auth_log(url)) == sent > ready  # the second time, no request reached the agent
    assert [len(first[k]["invocations"]) for k in sorted(first)] == [3, 1, 3]
    for key, fields in first.items():
        assert fields["failure"] == 0, fields.get("inference_error")
        assert [t["prompt"] for t in second[key]["invocations"]] == [t["prompt"] for t in fields["invocations"]]
        assert [t["response"] for t in second[key]["invocations"]] == [t["response"] for t in fields["invocations"]]
