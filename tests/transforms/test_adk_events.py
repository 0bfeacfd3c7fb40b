"""Recorded agent runs: the table of ADK's BigQueryAgentAnalyticsPlugin, read from the BigQuery
emulator, grouped per session (or turn) by the runner, scored with the reference-free criteria.
The table is created with the plugin's own schema (from google-adk 2.13.0, in the ADK environment),
filled with hand-written rows for the edge cases, and, in the last test, with the rows the real
plugin writes while a real agent runs, checked against ADK's own projection of the same sessions."""
from __future__ import annotations

import collections
import json
import subprocess

import pytest

from tests.emulators.control import PROJECT
from tests.helpers import ROOT, evalbeam, table
from evalbeam.transforms.read_adk import response_text, turn_from_events

TABLE = f"{PROJECT}.agent_logs.agent_events"


def plugin_schema():
    python = ROOT / ".adk" / "bin" / "python"
    if not python.exists():
        pytest.fail("the ADK reference environment is missing: run `make adk-env` (or `make test`)")
    code = ("import json\nfrom google.adk.plugins.bigquery_agent_analytics_plugin import _get_events_schema\n"
            "print(json.dumps([f.to_api_repr() for f in _get_events_schema()]))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)


def row(ts, event_type, session="s1", invocation="inv1", agent="weather_agent", content=None, attributes=None,
        latency=None, **extra):
    return {"timestamp": f"2026-11-22T{ts}Z", "event_id": f"{session}-{invocation}-{ts}", "event_type": event_type,
            "agent": agent, "session_id": session, "invocation_id": invocation, "user_id": "u1",
            "content": None if content is None else json.dumps(content),
            "attributes": None if attributes is None else json.dumps(attributes),
            "latency_ms": None if latency is None else json.dumps(latency), "status": "OK", **extra}


def user(ts, text, **kw):
    return row(ts, "USER_MESSAGE_RECEIVED", content={"text_summary": text},
               content_parts=[{"mime_type": "text/plain", "text": text, "part_index": 0, "storage_mode": "INLINE"}], **kw)


def llm(ts, prompt, completion, **kw):
    return row(ts, "LLM_RESPONSE", content={"response": "call: get_weather", "usage": {"prompt": prompt, "completion": completion,
                                                                                     "total": prompt + completion}},
               attributes={"model_version": "gemini-2.5-flash", "finish_reason": "STOP",
                           "usage_metadata": {"prompt_token_count": prompt, "candidates_token_count": completion}}, **kw)


EVENTS = [
    # session s1, turn 1: a tool call, two model calls, the final answer
    user("10:00:00.000", "Weather in SF?"),
    row("10:00:00.100", "INVOCATION_STARTING"),
    llm("10:00:00.500", 100, 10),
    row("10:00:00.600", "TOOL_STARTING", content={"tool": "get_weather", "args": {"city": "SF"}}),
    row("10:00:00.700", "TOOL_COMPLETED", content={"tool": "get_weather", "result": {"temp_c": 18}}),
    llm("10:00:01.000", 150, 20),
    row("10:00:01.100", "AGENT_RESPONSE", content={"response": "text: 'It is 18C' | text: 'and foggy.'"}),
    row("10:00:01.200", "INVOCATION_COMPLETED", latency={"total_ms": 1200}),
    # session s1, turn 2: no tool
    user("10:01:00.000", "Thanks!", invocation="inv2"),
    llm("10:01:00.400", 300, 5, invocation="inv2"),
    row("10:01:00.500", "AGENT_RESPONSE", invocation="inv2", content={"response": "text: 'You are welcome.'"}),
    row("10:01:00.600", "INVOCATION_COMPLETED", invocation="inv2", latency={"total_ms": 600}),
    # session s2: the agent fails
    user("11:00:00.000", "Book a flight", session="s2", invocation="inv9"),
    row("11:00:00.300", "TOOL_STARTING", session="s2", invocation="inv9", content={"tool": "book", "args": {"to": "NYC"}}),
    row("11:00:00.400", "TOOL_ERROR", session="s2", invocation="inv9", content={"tool": "book", "args": {"to": "NYC"}},
        error_message="no seats"),
    row("11:00:00.500", "AGENT_ERROR", session="s2", invocation="inv9"),
    # a row that belongs to no session
    row("12:00:00.000", "USER_MESSAGE_RECEIVED", session=None, content={"text_summary": "lost"}),
]
# another day's session, which the nightly query leaves out
OTHER_DAY = [dict(user("09:00:00.000", "yesterday", session="old"), timestamp="2026-11-21T09:00:00Z")]


@pytest.fixture(scope="module")
def events_table(cloud):
    from google.cloud import bigquery

    from evalbeam.transforms.local_cloud import bigquery_client

    client = bigquery_client(PROJECT)
    client.create_dataset(f"{PROJECT}.agent_logs", exists_ok=True)
    schema = [bigquery.SchemaField.from_api_repr(f) for f in plugin_schema()]
    client.create_table(bigquery.Table(TABLE, schema=schema), exists_ok=True)
    assert client.insert_rows_json(TABLE, EVENTS + OTHER_DAY) == []
    return TABLE


def run(tmp_path, granularity="session", run_id="events-1"):
    config = tmp_path / "eval.yaml"
    config.write_text(f"""
name: nightly-agents
run_id: {run_id}
run_date: 2026-11-22
input:
  query: "SELECT * FROM `{TABLE}` WHERE DATE(timestamp) = '{{run_date}}'"
  format: adk_agent_events
  granularity: {granularity}
  project: {PROJECT}
metrics:
  - tool_call_count_v1
  - token_usage_v1
  - inference_call_count_v1
  - invocation_duration_v1
  - {{name: trajectory_single_tool_use, params: {{tool_name: get_weather}}}}
output:
  parquet: {tmp_path}/out
""")
    evalbeam("run", config)
    return tmp_path / "out" / run_id


@pytest.mark.adk
@pytest.mark.emulators
def test_sessions_from_the_plugin_table(events_table, tmp_path):
    run_dir = run(tmp_path)
    instances = {r["instance_id"]: r for r in table(run_dir, "instances")}
    assert set(instances) == {"s1", "s2"}  # the other day's session is not selected
    s1 = json.loads(instances["s1"]["invocations"])
    assert [t["prompt"] for t in s1] == ["Weather in SF?", "Thanks!"]
    assert [t["response"] for t in s1] == ["It is 18C\nand foggy.", "You are welcome."]
    assert s1[0]["tool_calls"] == [{"tool_name": "get_weather", "tool_input": {"city": "SF"}, "id": "call_0",
                                    "response": {"temp_c": 18}}]
    assert s1[0]["duration"] == {"total": 1.2}
    results = collections.defaultdict(dict)
    for r in table(run_dir, "metric_results"):
        results[r["instance_id"]][r["metric"]] = r
    s1r, s2r = results["s1"], results["s2"]
    assert s1r["tool_call_count_v1"]["score"] == 0.5  # 1 and 0 tool calls per turn
    assert s1r["inference_call_count_v1"]["score"] == 1.5
    assert s1r["token_usage_v1"]["score"] == (110 + 170 + 305) / 2
    assert s1r["invocation_duration_v1"]["score"] == 0.9
    assert s1r["trajectory_single_tool_use"]["score"] == 1.0
    assert s1r["failure"]["score"] == 0.0 and s2r["failure"]["score"] == 1.0
    assert "n/a" in s2r["token_usage_v1"]["error"]
    dead = table(run_dir, "dead_letter")
    assert len(dead) == 1 and dead[0]["field"] == "session_id" and "belongs to no session" in dead[0]["reason"]
    runs = table(run_dir, "runs")[0]
    assert runs["read_count"] == runs["scored_count"] + runs["dead_letter_count"] == 3
    assert runs["lines_read"] == 17 == runs["lines_scored"] + runs["lines_dead_lettered"]
    assert "DATE(timestamp) = '2026-11-22'" in json.loads(runs["config"])["input"]["query"]


@pytest.mark.adk
@pytest.mark.emulators
def test_one_instance_per_turn(events_table, tmp_path):
    run_dir = run(tmp_path, "turn", "events-turns")
    instances = {r["instance_id"]: json.loads(r["invocations"]) for r in table(run_dir, "instances")}
    assert set(instances) == {"s1:inv1", "s1:inv2", "s2:inv9"}
    # the tool's error ended the turn (AGENT_ERROR, no model call after it): the call has no response,
    # as in ADK's own session (see test_the_real_plugins_rows_become_adks_own_invocations)
    [failed_call] = instances["s2:inv9"][0]["tool_calls"]
    assert failed_call["tool_name"] == "book" and "response" not in failed_call
    assert instances["s1:inv2"][0]["response"] == "You are welcome."


def test_response_text_unwraps_the_plugins_rendering():
    assert response_text("text: 'a' | text: 'b'") == "a\nb"
    assert response_text("text: 'a' | call: f") is None
    assert response_text("None") is None
    assert response_text({"answer": 1}) == '{"answer": 1}'
    assert response_text("plain") == "plain"


def test_a_failed_tool_call_gets_the_response_the_model_was_sent():
    """TOOL_ERROR rows leave out what the model was answered; the next LLM_REQUEST row's
    content_parts carry it (part_attributes.function_response, the history in call order)."""
    def request(ts, *responses):
        parts = [{"mime_type": "text/plain", "text": "Weather?", "part_index": 0, "part_attributes": "{}",
                  "storage_mode": "INLINE"}]
        parts += [{"mime_type": "application/json", "text": f"Function response: {name}", "part_index": 0,
                   "part_attributes": json.dumps({"function_response": {"name": name, "response": response}}),
                   "storage_mode": "INLINE"} for name, response in responses]
        return row(ts, "LLM_REQUEST", content={"prompt": []}, content_parts=parts)

    earlier = ("get_weather", {"temp_c": 1})  # an earlier step's response to the same tool, still in the history
    rows = [json.loads(json.dumps(r)) for r in (
        user("10:00:00.000", "Weather?"),
        row("10:00:00.100", "TOOL_STARTING", content={"tool": "get_weather", "args": {"city": "SF"}}),
        row("10:00:00.110", "TOOL_STARTING", content={"tool": "get_weather", "args": {"city": "??"}}),
        row("10:00:00.200", "TOOL_COMPLETED", content={"tool": "get_weather", "result": {"temp_c": 18}}),
        row("10:00:00.210", "TOOL_ERROR", content={"tool": "get_weather", "args": {"city": "??"}},
            error_message="ValueError: no such city"),
        request("10:00:00.300", earlier, ("get_weather", {"temp_c": 18}), ("get_weather", {"error": "retry"})),
        row("10:00:00.400", "TOOL_STARTING", content={"tool": "book", "args": {}}),
        row("10:00:00.500", "TOOL_ERROR", content={"tool": "book", "args": {}}, error_message="no seats"))]
    turn = turn_from_events(rows)
    assert [c.get("response") for c in turn["tool_calls"]] == [{"temp_c": 18}, {"error": "retry"}, {"error": "no seats"}]
    # the same turn ended by the error (an AGENT_ERROR row after it): the last call has no response
    turn = turn_from_events(rows + [row("10:00:00.600", "AGENT_ERROR")])
    assert [c.get("response") for c in turn["tool_calls"]] == [{"temp_c": 18}, {"error": "retry"}, None]
    assert sum("function_response" in p for e in turn["events"] for p in e["parts"]) == 2


def test_streamed_partial_responses_are_not_counted_twice():
    rows = [json.loads(json.dumps(r)) for r in (
        user("10:00:00.000", "hi"),
        row("10:00:00.100", "LLM_RESPONSE", attributes={"usage_metadata": {"prompt_token_count": 5}}),
        llm("10:00:00.200", 5, 7),
        row("10:00:00.300", "AGENT_RESPONSE", content={"response": "text: 'hello'"}))]
    turn = turn_from_events(rows)
    assert [e.get("usage") for e in turn["events"]] == [{"prompt_token_count": 5, "candidates_token_count": 7}]
    assert turn["response"] == "hello"


# ---------------------------------------------------------------------------
# The rows the REAL plugin writes: a real LlmAgent with real tools, run by ADK's Runner with
# BigQueryAgentAnalyticsPlugin attached, in the ADK reference venv (tests/adk_env/plugin_sessions.py),
# its model calls answered by the local generateContent server. The same process dumps ADK's own
# projection of the sessions (convert_events_to_eval_invocations, read with ADK's helpers) and
# ADK's own scores of the efficiency criteria; evalbeam must read the plugin's rows into the same turns.

RECORDED = f"{PROJECT}.plugin_logs.agent_events"


@pytest.fixture(scope="module")
def recorded(cloud, tmp_path_factory):
    """The plugin's rows loaded into the emulator's table (created by the plugin), and ADK's side."""
    import os

    from tests.servers.judge_server import JudgeServer
    from evalbeam.transforms.local_cloud import bigquery_client

    python = ROOT / ".adk" / "bin" / "python"
    if not python.exists():
        pytest.fail("the ADK reference environment is missing: run `make adk-env` (or `make test`)")
    client = bigquery_client(PROJECT)
    client.create_dataset(f"{PROJECT}.plugin_logs", exists_ok=True)
    out = tmp_path_factory.mktemp("plugin") / "recorded.json"
    with JudgeServer() as server:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GOOGLE_API_KEY": "test-key",
               "EVALBEAM_TEST_MODEL_URL": server.url, "BIGQUERY_EMULATOR_HOST": os.environ["BIGQUERY_EMULATOR_HOST"]}
        result = subprocess.run([str(python), str(ROOT / "tests" / "adk_env" / "plugin_sessions.py"), RECORDED,
                                 str(out)], capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        # per turn: the calls, then the final text; the raising tool's turn stops after its call
        assert server.stats.stages["agent"] == (2 + 2 + 1) + (2 + 2) + (1 + 1)
    recorded = json.loads(out.read_text())
    # the plugin created its table in the emulator, with its own schema and daily partitions
    created = client.get_table(RECORDED)
    assert [f.name for f in created.schema] == [f["name"] for f in plugin_schema()]
    assert created.time_partitioning.field == "timestamp"
    # everything it logged reached the write call, on the table's default stream: nothing dropped
    assert not any(recorded["drops"].values()) and recorded["stream"] == [
        f"projects/{PROJECT}/datasets/plugin_logs/tables/agent_events/_default"]
    assert client.insert_rows_json(RECORDED, recorded["rows"]) == []
    return recorded


@pytest.mark.adk
@pytest.mark.emulators
def test_the_real_plugins_rows_become_adks_own_invocations(recorded, tmp_path):
    rows = recorded["rows"]
    config = tmp_path / "eval.yaml"
    config.write_text(f"""
name: recorded-agents
run_id: recorded
input:
  uri: bq://{RECORDED}
  format: adk_agent_events
  project: {PROJECT}
metrics: [tool_call_count_v1, token_usage_v1, inference_call_count_v1,
          {{name: trajectory_single_tool_use, params: {{tool_name: get_weather}}}}]
output:
  parquet: {tmp_path}/out
""")
    evalbeam("run", config)
    run_dir = tmp_path / "out" / "recorded"
    instances = {r["instance_id"]: r for r in table(run_dir, "instances")}
    assert set(instances) == set(recorded["projection"]) == {"trip", "bad_tool", "raises"}
    for session, adk_turns in recorded["projection"].items():
        turns = json.loads(instances[session]["invocations"])
        ours = [{"invocation_id": t["invocation_id"], "user": t["prompt"] or None, "response": t["response"] or None,
                 "tool_calls": [{"name": c["tool_name"], "args": c.get("tool_input"), "response": c.get("response")}
                                for c in t["tool_calls"]],
                 "usage": [e["usage"] for e in t["events"] if "usage" in e]} for t in turns]
        assert ours == adk_turns, session

    # what the real rows hold, and ADK's session does not say the same way:
    by_type = collections.defaultdict(list)
    for r in rows:
        by_type[r["session_id"], r["event_type"]].append(r)
    # a tool the agent does not have: the TOOL_ERROR row carries ADK's exception text, while the model
    # was answered ADK's "no tool with that name" payload, which only the next LLM_REQUEST row holds
    [missing] = by_type["bad_tool", "TOOL_ERROR"]
    assert missing["error_message"].startswith("Tool 'no_such_tool' not found.")
    [bad_turn, _] = recorded["projection"]["bad_tool"]
    assert bad_turn["tool_calls"][0]["response"]["error"].startswith("Invoking `no_such_tool()` failed as no tool")
    # a tool that raises: TOOL_ERROR, AGENT_ERROR and INVOCATION_ERROR rows; ADK's session keeps the
    # call with no response (the error ended the turn), and the session's next turn goes on
    assert [r["error_message"] for r in by_type["raises", "TOOL_ERROR"] + by_type["raises", "AGENT_ERROR"]
            + by_type["raises", "INVOCATION_ERROR"]] == ["the tool exploded: disk full"] * 3
    assert recorded["errors"] == {"raises": ["RuntimeError: the tool exploded: disk full"]}
    raised, after = recorded["projection"]["raises"]
    assert raised["tool_calls"] == [{"name": "explode", "args": {"reason": "disk full"}, "response": None}]
    assert raised["response"] is None and after["response"] == "No tool needed: Hello again"

    # the efficiency criteria: ADK's own evaluators' scores on ADK's invocations
    results = collections.defaultdict(dict)
    for r in table(run_dir, "metric_results"):
        results[r["instance_id"]][r["metric"]] = r
    for session, scores in recorded["scores"].items():
        for metric in ("tool_call_count_v1", "token_usage_v1", "inference_call_count_v1"):
            assert results[session][metric]["score"] == pytest.approx(scores[metric]["score"]), (session, metric)
        assert results[session]["failure"]["score"] == (1.0 if session == "raises" else 0.0)
    assert results["trip"]["trajectory_single_tool_use"]["score"] == 1.0
    assert results["raises"]["trajectory_single_tool_use"]["score"] == 0.0
    # the turn's measured duration, which ADK's projection of stored events does not have
    assert all(t["duration"]["total"] > 0 for t in json.loads(instances["trip"]["invocations"]))

    assert table(run_dir, "dead_letter") == []
    runs = table(run_dir, "runs")[0]
    assert runs["read_count"] == runs["scored_count"] + runs["dead_letter_count"] == 3
    assert runs["lines_read"] == len(rows) == runs["lines_scored"] + runs["lines_dead_lettered"]


@pytest.mark.adk
@pytest.mark.emulators
def test_the_example_config_for_recorded_runs_validates_and_runs(events_table, tmp_path):
    """configs/adk_recorded_runs.yaml (docs/agents.md) against the plugin's table: only its project
    (and the run date and output folder) set from the command line."""
    config = ROOT / "configs" / "adk_recorded_runs.yaml"
    overrides = ["--set", f"input.project={PROJECT}", "--set", "run_date=2026-11-22",
                 "--set", f"output.parquet={tmp_path}/out", "--set", "run_id=recorded-example"]
    assert "config ok" in evalbeam("validate", config, *overrides).stdout
    evalbeam("run", config, *overrides)
    instances = {r["instance_id"] for r in table(tmp_path / "out" / "recorded-example", "instances")}
    assert instances == {"s1", "s2"}
