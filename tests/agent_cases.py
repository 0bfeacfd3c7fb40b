"""Agent cases shared by the tests of inference and of deployed agents (metrics/agents/, transforms/inference.py,
transforms/simulator.py, tests/e2e/): an ADK eval set run by the real agent of tests/inference_agent.py, the
.agent venv it runs in, the Agent Engine stand-in with real credentials, and the cases through each client."""
from __future__ import annotations

import contextlib
import copy
import json
import subprocess

import pytest

from evalbeam.metrics.agents.a2a import A2AInferrer
from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer
from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.inference import infer_all
from evalbeam.metrics.retry import RetryPolicy
from evalbeam.metrics.rows.instance import RowSpec, build_instance
from evalbeam.transforms.read import parse_file
from evalbeam.transforms.records import Record
from tests.helpers import ROOT

KEY = "AIzaSy-inference-test-key-0123456789"
ENGINE = "projects/evalbeam-test/locations/europe-west4/reasoningEngines/1234567890"

AGENT_SET = {
    "eval_set_id": "agent",
    "eval_cases": [
        {"eval_id": "two_turns", "session_input": {"app_name": "weather_app", "user_id": "u7", "state": {"unit": "C"}},
         "conversation": [
             {"user_content": {"parts": [{"text": 'Paris? #call=get_weather{"city": "Paris"}'}]},
              "final_response": {"parts": [{"text": 'Done: {"celsius": 25, "city": "Paris"}'}]},
              "intermediate_data": {"tool_uses": [{"name": "get_weather", "args": {"city": "Paris"}}]}},
             {"user_content": {"parts": [{"text": 'Keep Oslo #call=remember_city{"city": "Oslo"} '
                                                  '#call=convert{"celsius": 25}'}]},
              "final_response": {"parts": [{"text": "whatever"}]},
              "intermediate_data": {"tool_uses": [{"name": "remember_city", "args": {"city": "Oslo"}},
                                                  {"name": "convert", "args": {"celsius": 25}}]}}]},
        {"eval_id": "no_tool", "conversation": [
            {"user_content": {"parts": [{"text": "Hello there"}]},
             "final_response": {"parts": [{"text": "No tool needed: Hello there"}]},
             "intermediate_data": {"tool_uses": []}}]},
        {"eval_id": "bad_tool", "conversation": [
            {"user_content": {"parts": [{"text": 'Do it #call=no_such_tool{"x": 1}'}]},
             "final_response": {"parts": [{"text": "x"}]}}]},
        {"eval_id": "raises", "conversation": [
            {"user_content": {"parts": [{"text": 'Go #call=explode{"reason": "disk full"}'}]}}]},
    ],
}


def agent_env():
    """The venv of evalbeam with its `agent` extra (make agent-env)."""
    venv = ROOT / ".agent"
    if not (venv / ".installed").exists():
        pytest.fail("the agent environment is missing: run `make agent-env` (or `make test`): evalbeam[agent] in .agent/")
    return venv


def cases_of(tmp_path, eval_set):
    path = tmp_path / "set.evalset.json"
    path.write_text(json.dumps(eval_set))
    records = [r for r in parse_file(str(path), "adk_eval_set") if isinstance(r, Record)]
    spec = RowSpec({}, "instance_id", (), ())
    return [(r.data["instance_id"], build_instance(r.data, spec, "t").fields) for r in records]


def a2a_cases(tmp_path):
    """AGENT_SET's cases without their session_input (A2A cannot set a conversation's state)."""
    eval_set = copy.deepcopy(AGENT_SET)
    for case in eval_set["eval_cases"]:
        case.pop("session_input", None)
    return cases_of(tmp_path, eval_set)


def in_process(tmp_path, cases, model_url):
    """The cases run by the agent in-process (ADK's Runner, in .agent), its model at model_url."""
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GOOGLE_API_KEY": KEY, "EVALBEAM_TEST_MODEL_URL": model_url}
    result = subprocess.run([str(agent_env() / "bin" / "python"), str(ROOT / "tests" / "agent_env" / "infer_agent.py"),
                             "tests.inference_agent:root_agent", str(tmp_path / "cases.json"), str(tmp_path / "out.json")],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads((tmp_path / "out.json").read_text()))


def actual(turn):
    """A turn's final response and tool calls (name, input, response)."""
    return turn["response"], [(c["tool_name"], c["tool_input"], c.get("response")) for c in turn.get("tool_calls", [])]


def over_a2a(url, cases, auth=None, max_concurrency=4):
    """The cases through A2AInferrer (inference.auth's plain data: `auth`), 3 attempts, 60 s per request
    -> ({instance_id: fields}, the Calls)."""
    made = []

    def make():
        made.append(Calls(None, RetryPolicy(max_attempts=3), 60))
        return A2AInferrer(url, made[-1], max_concurrency, auth)

    return dict(infer_all(make, cases, max_concurrency, 120)), made[0]


@contextlib.contextmanager
def engine_stand_in(tmp_path, monkeypatch):
    """The Agent Engine stand-in (tests/servers/agent_engine_server.py) behind real credentials: Application
    Default Credentials a service account file (a key made here) whose token_uri is the local token
    endpoint (tests/servers/judge_server.py), as the vertex_ai judge is tested. Yields the stand-in."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.credentials import CLIENT_EMAIL, service_account_file
    from tests.servers.agent_engine_server import AgentEngineServer
    from tests.servers.judge_server import JudgeServer

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with JudgeServer() as tokens:
        tokens.trust(CLIENT_EMAIL, key.public_key())
        adc, _ = service_account_file(tmp_path, f"{tokens.url}/token", key)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        with AgentEngineServer(tokens) as engine:
            yield engine


def on_engine(engine, cases, max_attempts=3, requests_per_minute=None, sleep=None):
    """The cases through AgentEngineInferrer on the stand-in -> ({instance_id: fields}, the Calls)."""
    made = []

    def make():
        calls = Calls(requests_per_minute, RetryPolicy(max_attempts=max_attempts), 30, **({"sleep": sleep} if sleep else {}))
        made.append(calls)
        return AgentEngineInferrer(ENGINE, calls, engine.url, 4)

    return dict(infer_all(make, cases, 4, 120)), made[0]
