"""Inference before scoring: `inference.function` (a real Python function), `inference.model`
(through the judge layer, against the local generateContent server via the real google-genai
client) and `inference.agent` (a real ADK LlmAgent with real Python tools, in the .agent venv:
evalbeam with its `agent` extra from requirements-agent.lock, as a user installs it)."""
from __future__ import annotations

import json

import pytest
import yaml

from evalbeam.configs import load_config
from evalbeam.metrics.agents.inference import apply_result, failed, render_prompt, InferenceError
from tests.agent_cases import AGENT_SET, KEY, agent_env
from tests.helpers import ROOT, evalbeam, table


def write_config(tmp_path, data_uri, inference, metrics, name="infer", run_id="r1", **extra):
    config = {"name": name, "run_id": run_id, "input": {"uri": str(data_uri), "id_column": "id"} if str(
        data_uri).endswith(".jsonl") else {"uri": str(data_uri)},
              "inference": inference, "metrics": metrics, "output": {"parquet": str(tmp_path / "out")}, **extra}
    path = tmp_path / f"{name}-{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def rows_by(rows, *keys):
    return {tuple(r[k] for k in keys): r for r in rows}


def test_apply_result_shapes():
    flat = {"prompt": "p", "reference": "r"}
    assert apply_result(flat, "hello", 0.5) == {"prompt": "p", "reference": "r", "response": "hello",
                                                "latency_in_seconds": 0.5, "failure": 0}
    one_turn = {"invocations": [{"prompt": "p", "expected": {"response": "r", "tool_calls": []}}]}
    out = apply_result(one_turn, {"response": "x", "tool_calls": [{"tool_name": "t", "tool_input": {"a": 1}}]}, 1.0)
    assert out["invocations"][0]["expected"] == {"response": "r", "tool_calls": []}
    assert out["response"] == "x" and out["predicted_trajectory"] == [{"tool_name": "t", "tool_input": {"a": 1}}]
    two_turns = {"invocations": [{"prompt": "a"}, {"prompt": "b"}]}
    with pytest.raises(InferenceError, match="2 turns: inference must return a list of turns"):
        apply_result(two_turns, "x")
    with pytest.raises(InferenceError, match="unknown keys \\['answer'\\]"):
        apply_result(flat, {"answer": "x"})
    with pytest.raises(InferenceError, match="field 'response'.*must be a string"):
        apply_result(flat, {"response": 3})
    assert failed(flat, "boom") == {**flat, "failure": 1, "inference_error": "boom"}
    assert render_prompt('Q: {prompt} {"keep": 1} {unknown}', flat) == 'Q: p {"keep": 1} {unknown}'
    with pytest.raises(InferenceError, match="uses \\{context\\}"):
        render_prompt("{context}", flat)


@pytest.mark.slow
def test_function_inference_end_to_end(tmp_path):
    data = tmp_path / "qa.jsonl"
    cases = [{"id": "a", "prompt": "weather in Paris?", "reference": "WEATHER IN PARIS?",
              "reference_trajectory": [{"tool_name": "get_weather", "tool_input": {"city": "Paris"}}]},
             {"id": "b", "prompt": "Oslo and Lima", "reference": "something else",
              "reference_trajectory": [{"tool_name": "get_weather", "tool_input": {"city": "Lima"}}]},
             {"id": "c", "prompt": "boom now", "reference": "x", "reference_trajectory": []},
             {"id": "d", "prompt": "a slow one", "reference": "A SLOW ONE", "reference_trajectory": []},
             {"id": "e", "reference": "no prompt", "reference_trajectory": []}]
    data.write_text("\n".join(json.dumps(c) for c in cases) + "\nnot json\n")
    config = write_config(tmp_path, data, {"function": "tests.inference_app:answer", "timeout_seconds": 1},
                          ["exact_match", "trajectory_recall"])
    evalbeam("run", config)
    run = tmp_path / "out" / "r1"
    instances = {r["instance_id"]: r for r in table(run, "instances")}
    assert set(instances) == {"a", "b", "c", "d", "e"}
    assert instances["a"]["response"] == "WEATHER IN PARIS?" and instances["a"]["failure"] == 0
    assert json.loads(instances["b"]["predicted_trajectory"]) == [
        {"tool_name": "get_weather", "tool_input": {"city": "Oslo"}},
        {"tool_name": "get_weather", "tool_input": {"city": "Lima"}}]
    assert instances["a"]["latency_in_seconds"] >= 0
    assert instances["c"]["failure"] == 1 and instances["c"]["response"] is None
    assert "RuntimeError: the app broke on 'boom now'" in instances["c"]["inference_error"]
    assert instances["d"]["failure"] == 1 and instances["d"]["inference_error"] == "inference timed out after 1s"
    assert instances["e"]["failure"] == 1 and "KeyError" in instances["e"]["inference_error"]
    results = rows_by(table(run, "metric_results"), "instance_id", "metric")
    assert results["a", "exact_match"]["score"] == 1.0 and results["b", "exact_match"]["score"] == 0.0
    assert results["a", "trajectory_recall"]["score"] == 1.0 and results["b", "trajectory_recall"]["score"] == 1.0
    assert results["c", "exact_match"]["score"] is None
    assert "the app broke" in results["c", "exact_match"]["error"]
    assert results["c", "failure"]["score"] == 1.0 and results["a", "failure"]["score"] == 0.0
    assert ("a", "latency_in_seconds") in results
    summary = rows_by(table(run, "summary"), "metric", "slice")
    assert summary["failure", "overall"]["mean"] == pytest.approx(3 / 5)
    [runs] = table(run, "runs")
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (6, 5, 1)
    assert runs["lines_read"] == runs["lines_skipped"] + runs["lines_scored"] + runs["lines_dead_lettered"]


EVAL_SET = {
    "eval_set_id": "weather",
    "eval_cases": [
        {"eval_id": "two_turns", "session_input": {"app_name": "weather", "user_id": "u1", "state": {"unit": "F"}},
         "conversation": [
             {"user_content": {"parts": [{"text": "How warm is Paris?"}]},
              "final_response": {"parts": [{"text": "Paris 77F"}]},
              "intermediate_data": {"tool_uses": [{"name": "get_weather", "args": {"city": "Paris"}}]}},
             {"user_content": {"parts": [{"text": "And Oslo?"}]},
              "final_response": {"parts": [{"text": "Oslo 26.6F"}]},
              "intermediate_data": {"tool_uses": [{"name": "get_weather", "args": {"city": "Oslo"}}]}}]},
        {"eval_id": "wrong_tool", "conversation": [
            {"user_content": {"parts": [{"text": "Lima please"}]},
             "final_response": {"parts": [{"text": "Lima 19C"}]},
             "intermediate_data": {"tool_uses": [{"name": "get_weather", "args": {"city": "Quito"}}]}}]},
    ],
}


@pytest.mark.slow
def test_function_agent_over_an_adk_eval_set_with_runs(tmp_path):
    path = tmp_path / "weather.evalset.json"
    path.write_text(json.dumps(EVAL_SET, indent=1))
    config = write_config(tmp_path, path, {"function": "tests.inference_app:weather_agent", "num_runs": 2},
                          [{"name": "tool_trajectory_avg_score", "threshold": 1.0},
                           {"name": "response_match_score", "threshold": 0.8}])
    result = evalbeam("run", config)
    # the progress counts cases as the runs table does, whatever the runs of each
    assert [line for line in result.stderr.splitlines() if line.startswith("evalbeam progress:")][-1].startswith(
        "evalbeam progress: read 2 | scored 2 | dead-lettered 0"), result.stderr
    run = tmp_path / "out" / "r1"
    instances = {r["instance_id"]: r for r in table(run, "instances")}
    assert set(instances) == {"weather:two_turns:run1", "weather:two_turns:run2",
                              "weather:wrong_tool:run1", "weather:wrong_tool:run2"}
    turns = json.loads(instances["weather:two_turns:run2"]["invocations"])
    assert [t["response"] for t in turns] == ["Paris 77F", "Oslo 26.6F"]  # the session state's unit
    assert turns[1]["tool_calls"] == [{"tool_name": "get_weather", "tool_input": {"city": "Oslo"}, "id": "c0",
                                       "response": {"city": "Oslo", "celsius": -3}}]
    assert turns[1]["expected"]["response"] == "Oslo 26.6F" and turns[1]["duration"] == {"total": 0.02}
    assert instances["weather:two_turns:run1"]["latency_in_seconds"] == pytest.approx(0.04)
    results = rows_by(table(run, "metric_results"), "instance_id", "metric")
    for k in (1, 2):
        assert results[f"weather:two_turns:run{k}", "tool_trajectory_avg_score"]["score"] == 1.0
        assert results[f"weather:two_turns:run{k}", "response_match_score"]["score"] == 1.0
        assert results[f"weather:two_turns:run{k}", "adk_case_status"]["passed"] is True
        assert results[f"weather:wrong_tool:run{k}", "tool_trajectory_avg_score"]["score"] == 0.0
        assert results[f"weather:wrong_tool:run{k}", "adk_case_status"]["passed"] is False
    [runs] = table(run, "runs")
    # a case scored num_runs times counts once
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (2, 2, 0)
    assert runs["lines_read"] == runs["lines_skipped"] + runs["lines_scored"] + runs["lines_dead_lettered"]


@pytest.mark.slow
def test_a_judge_metric_over_multi_turn_cases_from_inference(tmp_path, monkeypatch):
    """A pointwise judge reads the one `response` a multi-turn case does not have:
    that case's row carries why, the one-turn cases are judged, and the run goes on."""
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    path = tmp_path / "weather.evalset.json"
    path.write_text(json.dumps(EVAL_SET, indent=1))
    with JudgeServer() as server:
        config = write_config(tmp_path, path, {"function": "tests.inference_app:weather_agent"},
                              ["evalbeam_fluency", "tool_trajectory_avg_score"],
                              judge={"base_url": server.url, "requests_per_minute": 6000, "max_attempts": 2})
        evalbeam("run", config)
        assert server.stats.requests == 1  # the one-turn case only
    run = tmp_path / "out" / "r1"
    results = rows_by(table(run, "metric_results"), "instance_id", "metric")
    assert results["weather:two_turns", "evalbeam_fluency"]["score"] is None
    assert results["weather:two_turns", "evalbeam_fluency"]["error"] == \
        "cannot be judged: the instance has no 'response' (needed by evalbeam_fluency)"
    assert results["weather:two_turns", "tool_trajectory_avg_score"]["score"] == 1.0
    assert results["weather:wrong_tool", "evalbeam_fluency"]["score"] is not None
    [runs] = table(run, "runs")
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"], runs["metric_error_count"]) == (2, 2, 0, 1)


@pytest.mark.slow
def test_inference_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "input": {"uri": "x.jsonl"}, "metrics": ["exact_match"],
                                   "inference": {"function": "a:b", "model": "m"}, "output": {"parquet": "o"}}))
    with pytest.raises(Exception, match="exactly one of function, model, agent"):
        load_config(bad)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "1", "prompt": "p", "reference": "r"}) + "\n")
    config = write_config(tmp_path, data, {"function": "tests.no_such_module:answer"}, ["exact_match"])
    result = evalbeam("run", config, check=False)
    assert result.returncode != 0
    assert "inference.function: cannot load 'tests.no_such_module:answer': ModuleNotFoundError" in result.stderr


@pytest.mark.slow
def test_an_inference_function_in_the_current_folder_is_named_with_the_pythonpath_it_needs(tmp_path):
    """Issue 32, item 7: the evalbeam command does not put the current folder on Python's path,
    so a user's `my_agent.py` beside the config did not import, and nothing said why."""
    import os
    import subprocess

    (tmp_path / "my_agent.py").write_text("def answer(fields):\n    return {'response': fields['prompt']}\n")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "1", "prompt": "p", "reference": "p"}) + "\n")
    config = write_config(tmp_path, data, {"function": "my_agent:answer"}, ["exact_match"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [str(ROOT / ".venv" / "bin" / "evalbeam"), "validate", str(config)]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert ("inference.function: cannot load 'my_agent:answer': ModuleNotFoundError: No module named 'my_agent' "
            "('my_agent' is in the current folder, which the evalbeam command does not put on Python's path: "
            "run it with PYTHONPATH=. before it, or install your package)") in result.stderr, result.stderr
    result = subprocess.run(command, cwd=tmp_path, env={**env, "PYTHONPATH": "."}, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    # elsewhere, the general hint
    result = subprocess.run(command, cwd=tmp_path.parent, env=env, capture_output=True, text=True, timeout=300)
    assert "No module named 'my_agent' (it must be importable: install it, or put its folder on PYTHONPATH)" \
        in result.stderr, result.stderr


@pytest.mark.slow
def test_model_inference_through_the_judge_layer_and_its_cache(tmp_path, monkeypatch):
    from tests.servers.judge_server import JudgeServer

    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    data = tmp_path / "qa.jsonl"
    rows = [{"id": "four", "prompt": "What is 2+2? #reply=4", "reference": "4"},
            {"id": "same", "prompt": "What is 2+2? #reply=4", "reference": "5"},  # the same prompt: asked once
            {"id": "free", "prompt": "Say anything", "reference": "x"},
            {"id": "down", "prompt": "#fail", "reference": "x"},
            {"id": "ctx", "reference": "no prompt"}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    inference = {"model": "gemini-test", "prompt_template": "Answer briefly.\n{prompt}"}
    judge = {"requests_per_minute": 6000, "max_attempts": 2, "timeout_seconds": 10,
             "prices": {"gemini-2.5-flash": {"input_per_million": 1.0, "output_per_million": 1.0}}}
    with JudgeServer() as server:
        judge["base_url"] = server.url
        first = write_config(tmp_path, data, inference, ["exact_match", "evalbeam_fluency"], run_id="first", judge=judge)
        evalbeam("run", first)
        assert server.stats.stages["text"] == 2  # four and same asked once, free; #fail's 2 attempts are 503s
        assert server.stats.errors == 2
        out = tmp_path / "out" / "first"
        instances = {r["instance_id"]: r for r in table(out, "instances")}
        assert instances["four"]["response"] == "4" == instances["same"]["response"]
        import hashlib

        expected = "Answer " + hashlib.sha256(b"Answer briefly.\nSay anything").hexdigest()[:8]
        assert instances["free"]["response"] == expected and instances["free"]["failure"] == 0
        assert instances["down"]["failure"] == 1
        assert instances["down"]["inference_error"].startswith("inference.model: judge failed after 2 attempts; last: HTTP 503")
        assert instances["ctx"]["failure"] == 1 and "uses {prompt}" in instances["ctx"]["inference_error"]
        assert KEY not in json.dumps([str(v) for r in instances.values() for v in r.values()])
        results = rows_by(table(out, "metric_results"), "instance_id", "metric")
        assert results["four", "exact_match"]["score"] == 1.0 and results["same", "exact_match"]["score"] == 0.0
        assert results["down", "exact_match"]["error"].startswith("inference.model: judge failed")
        # a judge metric judges what inference produced; a case it could not produce is not judged
        assert results["four", "evalbeam_fluency"]["score"] is not None and results["free", "evalbeam_fluency"]["error"] is None
        assert results["down", "evalbeam_fluency"]["error"].startswith("inference.model: judge failed")
        assert "uses {prompt}" in results["ctx", "evalbeam_fluency"]["error"]
        [runs] = table(out, "runs")
        assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (5, 5, 0)
        usage = json.loads(runs["judge_usage"])
        assert usage["inference"]["requests"] == 3 and usage["inference"]["calls"] == 2 + 2
        assert usage["inference"]["failures"] == 1 and runs["judge_prompt_tokens"] > 0
        assert usage["evalbeam_fluency"]["requests"] == 2  # four and same judge the same prompt and response
        cache = table(out, "judge_cache")
        inference_cache = [r for r in cache if r["metric"] == "inference"]
        assert sorted(r["verdict"] for r in inference_cache) == sorted(["4", expected])
        assert {r["model"] for r in inference_cache} == {"gemini-test"}

        # the same prompts again, with the first run's answers as judge.cache: nothing generated again
        answered = server.stats.stages["text"]
        requests = server.stats.requests
        second = write_config(tmp_path, data, inference, ["exact_match", "evalbeam_fluency"], run_id="second",
                              judge={**judge, "cache": str(out / "judge_cache")})
        data.write_text("\n".join(json.dumps(r) for r in rows if r["id"] != "down") + "\n")
        evalbeam("run", second)
        assert server.stats.stages["text"] == answered and server.stats.requests == requests
    out2 = tmp_path / "out" / "second"
    instances2 = {r["instance_id"]: r for r in table(out2, "instances")}
    assert instances2["four"]["response"] == "4" and instances2["free"]["response"] == expected
    [runs2] = table(out2, "runs")
    assert runs2["judge_cache_hits"] == runs2["judge_requests"] == 2 + 2 and runs2["judge_calls"] == 0


@pytest.mark.agent
def test_adk_agent_inference_with_a_real_llm_agent(tmp_path, monkeypatch):
    """A real LlmAgent with real Python tools, run by metrics.agents.inference.AgentInferrer with ADK's
    Runner and in-memory sessions, in the .agent venv (evalbeam[agent]: google-adk 2.13.0 with
    google-genai 2.34.0, requirements-agent.lock); the model's calls go to the local
    generateContent server, which answers with function calls."""
    import subprocess

    from evalbeam.metrics.catalog import get_metric
    from evalbeam.metrics.rows.instance import RowSpec, build_instance
    from tests.servers.judge_server import JudgeServer
    from evalbeam.transforms.read import parse_file
    from evalbeam.transforms.records import Record

    agent_python = agent_env() / "bin" / "python"
    path = tmp_path / "agent.evalset.json"
    path.write_text(json.dumps(AGENT_SET))
    records = [r for r in parse_file(str(path), "adk_eval_set") if isinstance(r, Record)]
    spec = RowSpec({}, "instance_id", (), ())
    cases = [[r.data["instance_id"], build_instance(r.data, spec, "t").fields] for r in records]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    with JudgeServer() as server:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GOOGLE_API_KEY": KEY,
               "EVALBEAM_TEST_MODEL_URL": server.url}
        result = subprocess.run([str(agent_python), str(ROOT / "tests" / "agent_env" / "infer_agent.py"),
                                 "tests.inference_agent:root_agent", str(tmp_path / "cases.json"),
                                 str(tmp_path / "out.json")], capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        # per turn: the calls, then the final text; the raising tool's turn stops after its call
        assert server.stats.stages["agent"] == 2 + 2 + 1 + 2 + 1
    done = dict(json.loads((tmp_path / "out.json").read_text()))
    two = done["agent:two_turns"]
    turns = two["invocations"]
    assert [t["prompt"] for t in turns] == [c["user_content"]["parts"][0]["text"]
                                            for c in AGENT_SET["eval_cases"][0]["conversation"]]
    first, second = turns
    assert [(c["tool_name"], c["tool_input"], c["response"]) for c in first["tool_calls"]] == [
        ("get_weather", {"city": "Paris"}, {"city": "Paris", "celsius": 25})]
    assert first["response"] == 'Done: {"celsius": 25, "city": "Paris"}'
    # the session's state came from session_input and is kept across the case's turns
    assert [(c["tool_name"], c["response"]) for c in second["tool_calls"]] == [
        ("remember_city", {"remembered": 1, "unit": "C"}), ("convert", {"fahrenheit": 77.0})]
    assert second["response"] == 'Done: {"remembered": 1, "unit": "C"}; {"fahrenheit": 77.0}'
    assert all(t["duration"]["total"] > 0 and t["invocation_id"] for t in turns)
    assert turns[0]["invocation_id"] != turns[1]["invocation_id"]
    usage = [e["usage"] for t in turns for e in t["events"] if "usage" in e]
    assert len(usage) == 2 and all(u["prompt_token_count"] > 0 for u in usage)  # the function-call events' usage
    assert two["failure"] == 0 and two["latency_in_seconds"] == pytest.approx(sum(t["duration"]["total"] for t in turns))
    assert second["expected"]["tool_calls"][0]["tool_name"] == "remember_city"  # the expected side stays

    def score(name, fields, **params):
        d = get_metric(name)
        return d.factory(d.params.model_validate(params))(fields)

    assert score("tool_trajectory_avg_score", two).score == 1.0
    assert done["agent:no_tool"]["response"] == "No tool needed: Hello there"
    assert score("response_match_score", done["agent:no_tool"]).score == 1.0
    # a tool the agent does not have: ADK answers the model with an error, recorded as the call's response
    [call] = done["agent:bad_tool"]["invocations"][0]["tool_calls"]
    assert call["tool_name"] == "no_such_tool" and "no tool with that name" in call["response"]["error"]
    # a tool that raises: the case fails with the error, and is kept
    raised = done["agent:raises"]
    assert raised["failure"] == 1 and raised["inference_error"] == "inference failed: RuntimeError: the tool exploded: disk full"
    assert "response" not in raised["invocations"][0]


def adk_turn(text, response=None, calls=None):
    turn = {"user_content": {"parts": [{"text": text}]}}
    if response is not None:
        turn["final_response"] = {"parts": [{"text": response}]}
    if calls is not None:
        turn["intermediate_data"] = {"tool_uses": [{"name": n, "args": a} for n, a in calls]}
    return turn


RUN_SET = {
    "eval_set_id": "agentrun",
    "eval_cases": [
        {"eval_id": "two_turns", "session_input": {"app_name": "weather_app", "user_id": "u7", "state": {"unit": "C"}},
         "conversation": [
             adk_turn('Paris? #call=get_weather{"city": "Paris"}', 'Done: {"celsius": 25, "city": "Paris"}',
                      [("get_weather", {"city": "Paris"})]),
             adk_turn('Keep Oslo #call=remember_city{"city": "Oslo"} #call=convert{"celsius": 25}',
                      'Done: {"remembered": 1, "unit": "C"}; {"fahrenheit": 77.0}',
                      [("remember_city", {"city": "Oslo"}), ("convert", {"celsius": 25})])]},
        {"eval_id": "no_tool", "conversation": [adk_turn("Hello there", "No tool needed: Hello there", [])]},
        # the agent asks for Quito where Lima was expected: the trajectory fails, the case fails
        {"eval_id": "wrong_city", "conversation": [
            adk_turn('Lima? #call=get_weather{"city": "Quito"}', 'Done: {"celsius": 19, "city": "Lima"}',
                     [("get_weather", {"city": "Lima"})])]},
        {"eval_id": "raises", "conversation": [
            adk_turn('Go #call=explode{"reason": "disk full"}', "never", [])]},
        # no user content: dead-lettered by the reader, never run
        {"eval_id": "no_user", "conversation": [{"final_response": {"parts": [{"text": "x"}]}}]},
    ],
}


@pytest.mark.agent
def test_a_whole_evalbeam_run_of_an_adk_agent(tmp_path, monkeypatch):
    """`evalbeam run` (the CLI, DirectRunner) of the .agent venv over an ADK eval set with
    `inference.agent`: the real LlmAgent's model calls and an LLM judge metric's calls both go
    to the local generateContent server through google-genai 2.34.0 (the version google-adk
    2.13.0 accepts); the Parquet tables hold each case's ADK criteria, its verdict, the failed
    case's error and counts that reconcile."""
    import subprocess

    from tests.servers.judge_server import JudgeServer

    venv = agent_env()
    evalbeam_agent = venv / "bin" / "evalbeam"
    # the environment is the lock's: google-genai as google-adk 2.13.0 needs it, not requirements.lock's 3.3.0
    versions = subprocess.run([venv / "bin" / "python", "-c", "from importlib.metadata import version as v; "
                               "print(v('google-genai'), v('google-adk'))"], capture_output=True, text=True, check=True)
    assert versions.stdout.split() == ["2.34.0", "2.13.0"]
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    path = tmp_path / "agentrun.evalset.json"
    path.write_text(json.dumps(RUN_SET, indent=1))
    with JudgeServer() as server:
        monkeypatch.setenv("EVALBEAM_TEST_MODEL_URL", server.url)
        config = write_config(
            tmp_path, path, {"agent": "tests.inference_agent:root_agent", "max_concurrency": 4, "timeout_seconds": 120},
            [{"name": "tool_trajectory_avg_score", "threshold": 1.0},
             {"name": "response_match_score", "threshold": 0.8}, "evalbeam_response_evaluation_score"],
            judge={"base_url": server.url, "requests_per_minute": 6000, "max_attempts": 2, "timeout_seconds": 10})
        result = evalbeam("run", config, command=evalbeam_agent)
        # per turn: the calls, then the final text; the raising tool's turn stops after its call
        assert server.stats.stages["agent"] == (2 + 2) + 1 + 2 + 1
        # evalbeam_response_evaluation_score judges each turn's final response (not the failed case's)
        assert server.stats.stages["score"] == 2 + 1 + 1
        assert server.stats.api_keys == {KEY}
    assert "read 5 = scored 4 + dead-lettered 1" in result.stdout, result.stdout
    run = tmp_path / "out" / "r1"
    instances = {r["instance_id"]: r for r in table(run, "instances")}
    assert set(instances) == {"agentrun:two_turns", "agentrun:no_tool", "agentrun:wrong_city", "agentrun:raises"}
    turns = json.loads(instances["agentrun:two_turns"]["invocations"])
    assert [[(c["tool_name"], c["response"]) for c in t["tool_calls"]] for t in turns] == [
        [("get_weather", {"city": "Paris", "celsius": 25})],
        [("remember_city", {"remembered": 1, "unit": "C"}), ("convert", {"fahrenheit": 77.0})]]
    assert instances["agentrun:two_turns"]["failure"] == 0 and instances["agentrun:two_turns"]["latency_in_seconds"] > 0
    raised = instances["agentrun:raises"]
    assert raised["failure"] == 1
    assert raised["inference_error"] == "inference failed: RuntimeError: the tool exploded: disk full"

    results = rows_by(table(run, "metric_results"), "instance_id", "metric")
    score = {(i.split(":")[1], m): r["score"] for (i, m), r in results.items()}
    assert score["two_turns", "tool_trajectory_avg_score"] == 1.0 and score["two_turns", "response_match_score"] == 1.0
    assert score["no_tool", "tool_trajectory_avg_score"] == 1.0 and score["no_tool", "response_match_score"] == 1.0
    assert score["wrong_city", "tool_trajectory_avg_score"] == 0.0
    assert 0 < score["wrong_city", "response_match_score"] < 0.8
    status = {i.split(":")[1]: r["passed"] for (i, m), r in results.items() if m == "adk_case_status"}
    assert status["two_turns"] is True and status["no_tool"] is True and status["wrong_city"] is False
    for metric in ("tool_trajectory_avg_score", "response_match_score", "evalbeam_response_evaluation_score"):
        failed_row = results["agentrun:raises", metric]
        assert failed_row["score"] is None and "the tool exploded: disk full" in failed_row["error"], metric
    assert all(1 <= score[c, "evalbeam_response_evaluation_score"] <= 5
               for c in ("two_turns", "no_tool", "wrong_city"))
    assert score["raises", "failure"] == 1.0 and score["two_turns", "failure"] == 0.0
    assert results["agentrun:raises", "adk_case_status"]["passed"] is None
    assert results["agentrun:raises", "adk_case_status"]["error"].startswith("NOT_EVALUATED")

    [dead] = table(run, "dead_letter")
    assert "no_user" in dead["reason"] and "user_content" in dead["reason"]
    [runs] = table(run, "runs")
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (5, 4, 1)
    assert runs["read_count"] == runs["scored_count"] + runs["dead_letter_count"]
    assert runs["lines_read"] == runs["lines_skipped"] + runs["lines_scored"] + runs["lines_dead_lettered"]
    assert json.loads(runs["judge_usage"])["evalbeam_response_evaluation_score"]["calls"] == 4


@pytest.mark.slow
def test_agent_inference_without_google_adk_says_what_to_install(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "1", "prompt": "p", "reference": "r"}) + "\n")
    config = write_config(tmp_path, data, {"agent": "tests.inference_agent:root_agent"}, ["exact_match"])
    result = evalbeam("run", config, check=False)
    assert result.returncode != 0
    assert "inference.agent: cannot load 'tests.inference_agent:root_agent': ImportError: agent inference needs " \
           "google-adk (2.13.0) on the launcher and every worker, and it is not installed here" in result.stderr


@pytest.mark.slow
def test_inference_demo(tmp_path):
    evalbeam("run", "configs/demo_adk_infer.yaml", "--set", f"output.parquet={tmp_path}", "--set", "run_id=demo")
    status = {r["instance_id"]: r["passed"] for r in table(tmp_path / "demo", "metric_results")
              if r["metric"] == "adk_case_status"}
    # the demo agent calls one tool per turn: the case expecting two calls fails, in both runs
    assert status == {f"weather_inference:{case}:run{k}": case != "london_expects_two_calls"
                      for case in ("sf_weather", "paris_then_again", "london_expects_two_calls") for k in (1, 2)}
    instances = {r["instance_id"]: r for r in table(tmp_path / "demo", "instances")}
    turns = json.loads(instances["weather_inference:paris_then_again:run1"]["invocations"])
    assert [t["tool_calls"][0]["tool_input"] for t in turns] == [{"city": "Paris"}, {"city": "Paris"}]


@pytest.mark.slow
def test_plan_says_it_does_not_estimate_inference():
    result = evalbeam("plan", "configs/demo_adk_infer.yaml", check=False)
    assert result.returncode != 0 and "evalbeam plan does not estimate runs with inference yet" in result.stderr


def test_model_runs_are_separate_samples():
    from evalbeam.metrics.rows.instance import Instance
    from evalbeam.metrics.judge.client import JudgeSettings
    from evalbeam.transforms.inference import model_asks, run_copies

    settings = JudgeSettings(model="m")
    case = Instance("q1", {"prompt": "hi"}, {}, "src")
    copies = list(run_copies(case, 3))
    assert [c.instance_id for c in copies] == ["q1:run1", "q1:run2", "q1:run3"]
    asks = [next(model_asks(c, settings, "{prompt}", 3)) for c in copies]
    assert len({key for key, _ in asks}) == 3 and [a[1][0].seed for a in asks] == [0, 1, 2]
    [(key, (request, link))] = list(model_asks(case, settings, "{prompt}", 1))
    assert request.seed is None and request.schema_json == "" and link == "q1"


@pytest.mark.agent
def test_a_legacy_cases_initial_session_is_the_state_the_agent_starts_in(tmp_path):
    """The older [{name, data, initial_session}] eval set: ADK makes initial_session the case's
    session_input, and the real agent's session starts from its state (the tool reads `unit`)."""
    import subprocess

    from evalbeam.metrics.rows.instance import RowSpec, build_instance
    from tests.servers.judge_server import JudgeServer
    from evalbeam.transforms.read import parse_file
    from evalbeam.transforms.records import Record

    agent_python = agent_env() / "bin" / "python"
    path = tmp_path / "older.json"
    turn = {"query": 'Keep Oslo #call=remember_city{"city": "Oslo"}', "expected_tool_use": [
        {"tool_name": "remember_city", "tool_input": {"city": "Oslo"}}], "reference": "ok"}
    path.write_text(json.dumps([
        {"name": "fahrenheit", "data": [turn], "initial_session": {"app_name": "weather_app", "user_id": "u1",
                                                                   "state": {"unit": "F", "cities": ["Rome"]}}},
        {"name": "no_session", "data": [turn]}]))
    records = [r for r in parse_file(str(path), "adk_eval_set") if isinstance(r, Record)]
    spec = RowSpec({}, "instance_id", (), ())
    cases = [[r.data["instance_id"], build_instance(r.data, spec, "t").fields] for r in records]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    with JudgeServer() as server:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GOOGLE_API_KEY": KEY,
               "EVALBEAM_TEST_MODEL_URL": server.url}
        result = subprocess.run([str(agent_python), str(ROOT / "tests" / "agent_env" / "infer_agent.py"),
                                 "tests.inference_agent:root_agent", str(tmp_path / "cases.json"),
                                 str(tmp_path / "out.json")], capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
    done = dict(json.loads((tmp_path / "out.json").read_text()))
    [call] = done["older:fahrenheit"]["invocations"][0]["tool_calls"]
    assert call["response"] == {"remembered": 2, "unit": "F"}  # Rome from the state, then Oslo
    [call] = done["older:no_session"]["invocations"][0]["tool_calls"]
    assert call["response"] == {"remembered": 1, "unit": None}


@pytest.mark.agent
def test_the_example_config_of_an_eval_set_with_an_in_process_agent_validates(tmp_path):
    """configs/adk_agent_eval_set.yaml (docs/agents.md), with the agent extra: its ADK agent imports,
    its eval set's cases are all usable, and with no metrics the test_config.json beside it applies."""
    from tests.helpers import evalbeam

    result = evalbeam("validate", ROOT / "configs" / "adk_agent_eval_set.yaml", "--set",
                      f"output.parquet={tmp_path}/out", path_first=[ROOT / "configs" / "agents"],
                      command=agent_env() / "bin" / "evalbeam")
    assert "input 1 file(s): 3 case(s) to score, 0 `run` would dead-letter" in result.stdout
    # the criteria of configs/data/adk/test_config.json, and ADK's four informational ones
    assert "config ok: 6 metrics" in result.stdout
