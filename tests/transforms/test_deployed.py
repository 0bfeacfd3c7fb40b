"""Deployed agents (metrics/agents/deployed.py): `inference.a2a` against a real ADK agent served by ADK's own
`to_a2a` (the .agent venv), whose model is the local Gemini-protocol server, compared with the same agent
run in-process (`inference.agent`); `inference.agent_engine` against a stand-in speaking Agent Engine's REST
protocol (tests/servers/agent_engine_server.py) through google-cloud-aiplatform's client and real credentials."""
from __future__ import annotations

import copy
import json
import subprocess

import pytest

from evalbeam.metrics.agents.a2a_events import events_from_a2a
from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.a2a import A2AInferrer
from evalbeam.metrics.agents.inference import infer_all
from evalbeam.metrics.retry import RetryPolicy
from evalbeam.metrics.rows.instance import RowSpec, build_instance
from evalbeam.transforms.read import parse_file
from evalbeam.transforms.records import Record
from tests.servers.a2a_agent import A2AServer
from tests.helpers import ROOT, fill_disk, small_disk
from tests.servers.judge_server import JudgeServer
from tests.servers.local import LocalHTTPServer
from tests.transforms.test_inference import AGENT_SET, KEY, agent_env


def cases_of(tmp_path, eval_set):
    path = tmp_path / "set.evalset.json"
    path.write_text(json.dumps(eval_set))
    records = [r for r in parse_file(str(path), "adk_eval_set") if isinstance(r, Record)]
    spec = RowSpec({}, "instance_id", (), ())
    return [(r.data["instance_id"], build_instance(r.data, spec, "t").fields) for r in records]


def in_process(tmp_path, cases, model_url):
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GOOGLE_API_KEY": KEY, "EVALBEAM_TEST_MODEL_URL": model_url}
    result = subprocess.run([str(agent_env() / "bin" / "python"), str(ROOT / "tests" / "agent_env" / "infer_agent.py"),
                             "tests.inference_agent:root_agent", str(tmp_path / "cases.json"), str(tmp_path / "out.json")],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads((tmp_path / "out.json").read_text()))


def over_a2a(url, cases, **calls):
    settings = {"requests_per_minute": None, "max_attempts": 3, "request_timeout": 60, **calls}
    made = []

    def make():
        made.append(Calls(settings["requests_per_minute"], RetryPolicy(max_attempts=settings["max_attempts"]),
                          settings["request_timeout"]))
        return A2AInferrer(url, made[-1])

    return dict(infer_all(make, cases, 4, 120)), made[0]


def actual(turn):
    return turn["response"], [(c["tool_name"], c["tool_input"], c.get("response")) for c in turn.get("tool_calls", [])]


@pytest.mark.agent
def test_a2a_agent_gives_the_trace_the_same_agent_gives_in_process(tmp_path):
    """The same ADK agent in-process (ADK's Runner) and served by ADK's to_a2a: the same final responses
    and tool calls (names, arguments, responses), turn for turn; a raising tool fails the case both ways.
    (session_input's state is left out: A2A has no way to give a session its initial state.)"""
    eval_set = copy.deepcopy(AGENT_SET)
    for case in eval_set["eval_cases"]:
        case.pop("session_input", None)
    cases = cases_of(tmp_path, eval_set)
    with JudgeServer() as model:
        local = in_process(tmp_path, cases, model.url)
        with A2AServer(model.url) as url:
            remote, calls = over_a2a(url, cases)
    assert set(local) == set(remote) == {"agent:two_turns", "agent:no_tool", "agent:bad_tool", "agent:raises"}
    for key in ("agent:two_turns", "agent:no_tool", "agent:bad_tool"):
        assert remote[key]["failure"] == local[key]["failure"] == 0, remote[key].get("inference_error")
        mine, theirs = local[key]["invocations"], remote[key]["invocations"]
        assert [actual(t) for t in theirs] == [actual(t) for t in mine]
        assert [t["prompt"] for t in theirs] == [t["prompt"] for t in mine]
        assert all(t["invocation_id"] and t["duration"]["total"] > 0 for t in theirs)
    two = remote["agent:two_turns"]["invocations"]
    assert [c["tool_name"] for c in two[1]["tool_calls"]] == ["remember_city", "convert"]
    assert two[1]["tool_calls"][0]["response"] == {"remembered": 1, "unit": None}  # one conversation: one session
    assert two[0]["expected"]["tool_calls"][0]["tool_name"] == "get_weather"  # the expected side stays
    usage = [e["usage"] for e in two[0]["events"] if "usage" in e]
    assert usage and usage[0]["prompt_token_count"] > 0
    assert local["agent:raises"]["failure"] == remote["agent:raises"]["failure"] == 1
    # the agent card once, then one request per turn: 2 + 1 + 1 + 1, nothing retried
    assert calls.stats.requests == 1 + 5 and calls.stats.retries == 0


def test_a2a_stream_of_a_plain_agent():
    """An A2A agent that is not ADK's: no adk_* metadata, the answer in a message or in its task's artifacts."""
    message = [{"message": {"contextId": "c1", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}}]
    events, context = events_from_a2a(message, "plain")
    assert context == "c1" and events == [{"author": "plain", "content": {"role": "model", "parts": [{"text": "hi"}]}}]
    task = [{"task": {"contextId": "c2", "status": {"state": "TASK_STATE_COMPLETED"},
                      "artifacts": [{"parts": [{"text": "from the artifact"}]}]}}]
    events, context = events_from_a2a(task, "plain")
    assert context == "c2" and events[0]["content"]["parts"] == [{"text": "from the artifact"}]
    failed = [{"statusUpdate": {"contextId": "c3", "status": {"state": "TASK_STATE_FAILED", "message": {
        "role": "ROLE_AGENT", "parts": [{"text": "boom"}]}}}}]
    with pytest.raises(Exception, match="TASK_STATE_FAILED: boom"):
        events_from_a2a(failed, "plain")


# ------------------------------------------------------------------------------------ Agent Engine

ENGINE = "projects/evalbeam-test/locations/europe-west4/reasoningEngines/1234567890"


@pytest.fixture
def engine_env(tmp_path, monkeypatch):
    """Application Default Credentials: a real service account file (a key made here) whose
    token_uri is the local token endpoint (tests/servers/judge_server.py), as the vertex_ai judge is tested."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.servers.agent_engine_server import AgentEngineServer
    from tests.metrics.judge.test_judge_vertex import CLIENT_EMAIL, service_account_file

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with JudgeServer() as tokens:
        tokens.trust(CLIENT_EMAIL, key.public_key())
        adc, _ = service_account_file(tmp_path, f"{tokens.url}/token", key)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        with AgentEngineServer(tokens) as engine:
            yield engine


def on_engine(engine, cases, max_attempts=3, requests_per_minute=None, sleep=None):
    from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer

    made = []

    def make():
        calls = Calls(requests_per_minute, RetryPolicy(max_attempts=max_attempts), 30, **({"sleep": sleep} if sleep else {}))
        made.append(calls)
        return AgentEngineInferrer(ENGINE, calls, engine.url, 4)

    return dict(infer_all(make, cases, 4, 120)), made[0]


@pytest.mark.slow
def test_agent_engine_sessions_turns_and_trace(tmp_path, engine_env):
    """One session per case from its session_input (user_id, state), each turn one stream_query on it,
    the streamed ADK events made into the turns as inference.agent's are; real credentials were used."""
    engine = engine_env
    cases = cases_of(tmp_path, AGENT_SET)
    done, calls = on_engine(engine, cases)
    assert done["agent:no_tool"]["failure"] == 0, done["agent:no_tool"].get("inference_error")
    assert engine.stats.unauthorized == 0 and engine.stats.resources[ENGINE] == len(cases) + 5
    assert sorted(engine.stats.sessions, key=str) == sorted(
        [("u7", {"unit": "C"})] + [("evalbeam_user", {})] * 3, key=str)
    first, second = done["agent:two_turns"]["invocations"]
    assert actual(first) == ('Done: {"celsius": 25, "city": "Paris"}', [("get_weather", {"city": "Paris"},
                                                                          {"city": "Paris", "celsius": 25})])
    assert [c["tool_name"] for c in second["tool_calls"]] == ["remember_city", "convert"]
    assert second["tool_calls"][1]["response"] == {"fahrenheit": 77.0}
    assert first["invocation_id"] != second["invocation_id"] and first["invocation_id"].startswith("e-")
    assert [e["usage"]["prompt_token_count"] > 0 for e in first["events"] if "usage" in e] == [True]
    assert done["agent:no_tool"]["invocations"][0]["response"] == "No tool needed: Hello there"
    assert done["agent:two_turns"]["failure"] == 0 and done["agent:two_turns"]["latency_in_seconds"] > 0
    # every session asked each of its turns once: nothing failed, nothing retried
    assert set(engine.stats.turn_requests.values()) == {1} and calls.stats.retries == 0


@pytest.mark.slow
def test_agent_engine_retries_never_resend_an_answered_turn(tmp_path, engine_env):
    """The stand-in fails mid-conversation: the second turn's first request with 503, its second with
    429 (Retry-After 2). The case completes; turn 1 was sent once, turn 2 three times; the waits honour
    Retry-After. A turn failing every attempt fails its case with the last error, nothing re-sent."""
    engine = engine_env
    engine.fail = {(2, 1): (503, None), (2, 2): (429, 2)}
    waits = []

    async def sleep(seconds):
        waits.append(seconds)

    [two_turns] = [c for c in cases_of(tmp_path, AGENT_SET) if c[0] == "agent:two_turns"]
    done, calls = on_engine(engine, [two_turns], max_attempts=3, requests_per_minute=6000, sleep=sleep)
    assert done["agent:two_turns"]["failure"] == 0, done["agent:two_turns"].get("inference_error")
    [(session, _)] = [k for k in engine.stats.turn_requests if k[1] == 1]
    assert engine.stats.turn_requests[(session, 1)] == 1 and engine.stats.turn_requests[(session, 2)] == 3
    assert calls.stats.retries == 2 and calls.stats.rate_limited == 1 and waits[1] >= 2
    assert calls.limiter.rate_limited == 1  # the 429 slowed the shared limiter down
    assert [len(t["tool_calls"]) for t in done["agent:two_turns"]["invocations"]] == [1, 2]

    engine.fail = {(2, k): (503, None, "echo") for k in range(1, 10)}  # the error repeats the bearer token
    done, calls = on_engine(engine, [two_turns], max_attempts=3, sleep=sleep)
    assert done["agent:two_turns"]["failure"] == 1
    error = done["agent:two_turns"]["inference_error"]
    assert error.startswith("inference failed: turn 2 failed after 3 attempts; last: HTTP 503")
    assert "you sent [redacted]" in error and "eyJ" not in error and "ya29" not in error
    session = [s for s, t in engine.stats.turn_requests if t == 2][-1]
    assert engine.stats.turn_requests[(session, 1)] == 1 and engine.stats.turn_requests[(session, 2)] == 3


def engine_config(tmp_path, engine, n_cases, run_id="r1", judge=None, **inference):
    import yaml

    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps({"id": f"c{i:03d}", "prompt": f"case {i} #call=get_weather{{\"city\": \"Oslo\"}}",
                                        "reference": 'Done: {"celsius": -3, "city": "Oslo"}'}) + "\n"
                            for i in range(n_cases)))
    config = {"name": "engine", "run_id": run_id, "input": {"uri": str(data), "id_column": "id"},
              "inference": {"agent_engine": ENGINE, "base_url": engine.url, **inference},
              "metrics": ["exact_match"], "output": {"parquet": str(tmp_path / "out")}, **({"judge": judge} if judge else {})}
    path = tmp_path / f"engine-{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_a_whole_run_on_agent_engine_killed_and_rerun_repeats_only_unsaved_cases(tmp_path, engine_env):
    """`evalbeam run` with inference.agent_engine, killed once some finished cases are checkpointed, then run
    again with the same run_id: the checkpointed cases are not sent again (counted at the stand-in), every
    case is scored once, and the counts reconcile."""
    import os
    import signal
    import time as clock

    from evalbeam.metrics.agents.deployed import case_key
    from evalbeam.transforms.judge_checkpoint import read_checkpoints
    from tests.helpers import EVALBEAM, evalbeam, table

    engine = engine_env
    engine.latency = 0.05
    engine.hold_after = 8  # the first run cannot finish: the 9th turn on waits until it is killed
    n = 30
    # checkpoints every second (judge.checkpoint_seconds, at most 30: what a killed run may repeat)
    config = engine_config(tmp_path, engine, n, judge={"checkpoint_seconds": 1}, max_concurrency=2)
    checkpoints = tmp_path / "out" / "_evalbeam_attempts" / "r1" / "judge_checkpoints" / "inference"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([EVALBEAM, "run", str(config)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    saved: dict = {}
    try:
        while first.poll() is None and len(saved) < 8:  # wait for the answered cases to be on disk
            clock.sleep(0.2)
            saved = read_checkpoints(str(checkpoints))
        assert first.poll() is None, first.communicate()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    engine.hold_after = None
    engine.release.set()  # the killed run's held requests are answered into the void
    while engine.stats.in_flight:
        clock.sleep(0.1)
    asked_first = sum(engine.stats.messages.values())
    saved = read_checkpoints(str(checkpoints))
    assert len(saved) == 8 and asked_first < n
    run = evalbeam("run", config)
    assert f"read {n} = scored {n} + dead-lettered 0" in run.stdout
    # the re-run asked every case but the checkpointed ones, once each
    keys = {case_key("agent_engine", ENGINE, f"c{i:03d}", {"prompt": f"case {i} #call=get_weather{{\"city\": \"Oslo\"}}"})
            for i in range(n)}
    assert set(saved) <= keys
    assert sum(engine.stats.messages.values()) - asked_first == n - len(saved)
    # so only the cases the killed run finished after its last checkpoint (or left in flight) were asked twice
    assert sum(engine.stats.messages.values()) == n + asked_first - len(saved)
    rows = [r for r in table(tmp_path / "out" / "r1", "metric_results") if r["metric"] == "exact_match"]
    assert len(rows) == n and all(r["score"] == 1.0 for r in rows)
    assert not checkpoints.exists()  # gone with the run's attempts


@pytest.mark.agent
def test_the_example_configs_validate_and_an_unreachable_endpoint_fails_in_one_line(tmp_path, engine_env):
    """configs/agent_a2a.yaml (against ADK's to_a2a server) and configs/agent_engine.yaml (against the
    stand-in) pass `evalbeam validate`; an endpoint that does not answer fails validate and run in
    preflight with one line (status 2), before any work."""
    from tests.servers.a2a_agent import free_port
    from tests.helpers import evalbeam

    engine = engine_env
    with JudgeServer() as model, A2AServer(model.url) as url:
        ok = evalbeam("validate", ROOT / "configs" / "agent_a2a.yaml", "--set", f"inference.a2a={url}")
    assert ok.stdout.startswith("config ok: 3 metrics")
    ok = evalbeam("validate", ROOT / "configs" / "agent_engine.yaml", "--set", f"inference.agent_engine={ENGINE}",
                  "--set", f"inference.base_url={engine.url}")
    assert ok.stdout.startswith("config ok: 3 metrics")
    closed = f"http://127.0.0.1:{free_port()}"
    for command in ("validate", "run"):
        refused = evalbeam(command, ROOT / "configs" / "agent_a2a.yaml", "--set", f"inference.a2a={closed}",
                           "--set", f"output.parquet={tmp_path / 'out'}", check=False)
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines()[-1].startswith(
            f"evalbeam: inference.a2a: the agent card at {closed}/.well-known/agent-card.json is unreachable (ConnectError")
        assert not (tmp_path / "out").exists()
    refused = evalbeam("validate", ROOT / "configs" / "agent_engine.yaml", "--set", f"inference.base_url={closed}",
                       check=False)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith(
        f"evalbeam: inference.agent_engine: {closed} is unreachable (ConnectError")
    refused = evalbeam("validate", ROOT / "configs" / "agent_engine.yaml", "--set", f"inference.base_url={engine.url}",
                       env={"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "missing.json")}, check=False)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith(
        "evalbeam: inference.agent_engine: no Application Default Credentials (File ")


class FaultyProxy(LocalHTTPServer):
    """An HTTP proxy in front of the A2A server that answers scripted POSTs (1-based, in arrival
    order) with an error status instead of forwarding them; the agent card it serves names the
    proxy. Counts the POSTs it forwarded per message text and per message id."""

    def __init__(self, upstream: str, fail: dict):
        import collections
        from http.server import BaseHTTPRequestHandler

        self.upstream, self.fail, self.posts, self.forwarded = upstream, fail, 0, collections.Counter()
        self.forwarded_ids = collections.Counter()  # per message id (a retry keeps its message's id)
        self.order: list[str] = []  # the forwarded messages' texts, in the order they were forwarded
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _relay(self, method, body=None):
                import urllib.error
                import urllib.request

                request = urllib.request.Request(proxy.upstream + self.path, data=body, method=method,
                                                 headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
                try:
                    with urllib.request.urlopen(request, timeout=60) as response:
                        status, headers, data = response.status, response.headers, response.read()
                except urllib.error.HTTPError as e:
                    status, headers, data = e.code, e.headers, e.read()
                if method == "GET":
                    data = data.replace(proxy.upstream.encode(), proxy.url.encode())
                self.send_response(status)
                self.send_header("Content-Type", headers.get("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._relay("GET")

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.posts += 1
                failure = proxy.fail.get(proxy.posts)
                if failure:
                    status, retry_after = failure
                    data = b'{"error": "scripted"}'
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if retry_after:
                        self.send_header("Retry-After", str(retry_after))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                message = json.loads(body)["params"]["message"]
                proxy.forwarded[message["parts"][0]["text"]] += 1
                proxy.order.append(message["parts"][0]["text"])
                proxy.forwarded_ids[message["messageId"]] += 1
                self._relay("POST", body)

        self._listen(Handler)
        self.start()


@pytest.mark.agent
def test_a2a_retries_resend_only_the_failed_message(tmp_path):
    """Through a proxy that fails the second turn's message with 503, then with 429 (Retry-After 1):
    the case completes in one conversation; the first turn's message reached the agent once, the second
    once (after two refused attempts); the agent's model was asked exactly what one clean run asks."""
    eval_set = copy.deepcopy(AGENT_SET)
    for case in eval_set["eval_cases"]:
        case.pop("session_input", None)  # A2A cannot set a conversation's state: such a case fails, saying so
    [two_turns] = [c for c in cases_of(tmp_path, eval_set) if c[0] == "agent:two_turns"]
    with JudgeServer() as model, A2AServer(model.url) as url:
        proxy = FaultyProxy(url, {2: (503, None), 3: (429, 1)})
        try:
            done, calls = over_a2a(proxy.url, [two_turns])
        finally:
            proxy.close()
        model_calls = model.stats.stages["agent"]
    case = done["agent:two_turns"]
    assert case["failure"] == 0, case.get("inference_error")
    assert proxy.posts == 4 and sorted(proxy.forwarded.values()) == [1, 1]
    assert calls.stats.retries == 2 and calls.stats.rate_limited == 1
    assert model_calls == 2 + 2  # per turn: the calls, then the final text; nothing asked twice
    assert [c["tool_name"] for t in case["invocations"] for c in t["tool_calls"]] == ["get_weather", "remember_city", "convert"]


def test_calls_retry_only_transient_failures_and_honour_retry_after():
    """metrics.agents.calls.Calls on scripted outcomes: transient failures (429 with Retry-After, 5xx, a
    timeout) are retried with backoff, up to max_attempts; anything else is raised at once."""
    import asyncio

    from evalbeam.metrics.retry import transient_for_status

    def run(outcomes, max_attempts=4, timeout=5.0):
        waits, sent = [], []

        async def sleep(seconds):
            waits.append(seconds)

        calls = Calls(600, RetryPolicy(max_attempts=max_attempts), timeout, sleep=sleep)

        async def send():
            outcome = outcomes[len(sent)]
            sent.append(outcome)
            if outcome == "hang":
                await asyncio.sleep(3600)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        def classify(e):
            return transient_for_status(getattr(e, "status", None), str(e), getattr(e, "headers", None))

        async def main():
            return await calls.call("turn 1", send, classify)

        try:
            return asyncio.run(main()), sent, waits, calls
        except Exception as e:  # noqa: BLE001
            return e, sent, waits, calls

    class Status(Exception):
        def __init__(self, status, headers=None):
            super().__init__(f"status {status}")
            self.status, self.headers = status, headers or {}

    result, sent, waits, calls = run([Status(429, {"retry-after": "7"}), Status(503), "answer"])
    assert result == "answer" and len(sent) == 3 and waits[0] >= 7 and calls.stats.rate_limited == 1
    assert calls.limiter.rate < calls.limiter.max_rate  # the 429 slowed the pace
    result, sent, waits, calls = run([Status(400), "answer"])
    assert isinstance(result, Status) and len(sent) == 1 and waits == []  # not transient: no retry
    result, sent, _, calls = run([Status(500)] * 4, max_attempts=4)
    assert str(result) == "turn 1 failed after 4 attempts; last: HTTP 500: status 500" and len(sent) == 4
    result, sent, _, _ = run(["hang", "answer"], timeout=0.05)
    assert result == "answer" and len(sent) == 2


def test_inference_config_for_deployed_agents():
    from evalbeam.configs import InferenceConfig

    a2a = InferenceConfig(a2a="http://agent:8000", requests_per_minute=120, shards=4)
    assert a2a.kind == "a2a" and a2a.deployed and a2a.quota_share() == 30
    engine = InferenceConfig(agent_engine=ENGINE, base_url="http://127.0.0.1:1")
    assert engine.kind == "agent_engine" and engine.quota_share() is None
    for bad, reason in [({"a2a": "agent:8000"}, "should match pattern"),
                        ({"agent_engine": "projects/p/reasoningEngines/1"}, "should match pattern"),
                        ({"a2a": "http://a", "agent_engine": ENGINE}, "exactly one of"),
                        ({"a2a": "http://a", "base_url": "http://b"}, "base_url is for inference.agent_engine")]:
        with pytest.raises(Exception, match=reason):
            InferenceConfig(**bad)


@pytest.mark.agent
def test_agent_engine_with_a_real_adk_app_gives_the_in_process_trace(tmp_path, engine_env):
    """The stand-in in front of a real ADK app (ADK's Runner, in .agent/, as Agent Engine's ADK template runs
    it): the same responses and tool calls as the agent run in-process, session state from session_input
    included; the raising tool fails the case both ways."""
    from tests.servers.a2a_agent import AdkAppServer

    engine = engine_env
    cases = cases_of(tmp_path, AGENT_SET)
    with JudgeServer() as model:
        local = in_process(tmp_path, cases, model.url)
        with AdkAppServer(model.url) as backend:
            engine.backend = backend
            remote, _ = on_engine(engine, cases)
    for key in ("agent:two_turns", "agent:no_tool", "agent:bad_tool"):
        assert remote[key]["failure"] == local[key]["failure"] == 0, remote[key].get("inference_error")
        assert [actual(t) for t in remote[key]["invocations"]] == [actual(t) for t in local[key]["invocations"]]
    second = remote["agent:two_turns"]["invocations"][1]
    assert second["tool_calls"][0]["response"] == {"remembered": 1, "unit": "C"}  # the state from session_input
    assert local["agent:raises"]["failure"] == remote["agent:raises"]["failure"] == 1


@pytest.mark.agent
def test_a_whole_run_of_an_a2a_agent_scored_with_adk_criteria(tmp_path):
    """`evalbeam run` with inference.a2a against ADK's to_a2a server: the turns it produced are scored
    with ADK's trajectory criterion, a raising tool's case keeps its row with the error, counts reconcile."""
    import yaml

    from tests.helpers import evalbeam, table

    eval_set = copy.deepcopy(AGENT_SET)
    for case in eval_set["eval_cases"]:
        case.pop("session_input", None)
    data = tmp_path / "agent.evalset.json"
    data.write_text(json.dumps(eval_set))
    with JudgeServer() as model, A2AServer(model.url) as url:
        config = tmp_path / "a2a.yaml"
        config.write_text(yaml.safe_dump({
            "name": "a2a", "run_id": "r1", "input": {"uri": str(data)},
            "inference": {"a2a": url, "requests_per_minute": 600, "max_attempts": 2},
            "metrics": [{"name": "tool_trajectory_avg_score", "threshold": 1.0}],
            "output": {"parquet": str(tmp_path / "out")}}))
        run = evalbeam("run", config)
    assert "read 4 = scored 4 + dead-lettered 0" in run.stdout
    rows = {r["instance_id"]: r for r in table(tmp_path / "out" / "r1", "metric_results")
            if r["metric"] == "tool_trajectory_avg_score"}
    assert rows["agent:two_turns"]["score"] == 1.0 and rows["agent:no_tool"]["score"] == 1.0
    assert rows["agent:bad_tool"]["score"] == 0.0  # it expected no call; the agent called no_such_tool
    assert rows["agent:raises"]["score"] is None and "inference failed" in rows["agent:raises"]["error"]
    instances = {r["instance_id"]: r for r in table(tmp_path / "out" / "r1", "instances")}
    assert instances["agent:raises"]["failure"] == 1 and instances["agent:two_turns"]["failure"] == 0


@pytest.mark.slow
def test_a_full_disk_while_inference_checkpoints_ends_the_run_with_120_in_one_line(tmp_path, engine_env):
    """Issue 32: a full disk was not tried against the inference checkpoints. A run on Agent Engine whose
    output (and so its checkpoint folder) is on a real small filesystem (a tmpfs: CI runs as root), filled
    once the first cases are checkpointed: the next chunk cannot be written, so the run ends (the agent is
    asked no more) with status 120 and one line, no traceback; no run is installed, no partial chunk is
    left, and what is left is the checkpoints written before, whole (a re-run reuses them)."""
    import os
    import re
    import time as clock

    from evalbeam.transforms.judge_checkpoint import read_checkpoints
    from tests.helpers import EVALBEAM, table

    with small_disk(tmp_path, "1m") as disk:
        engine = engine_env
        engine.latency = 0.3
        engine.hold_after = 8  # the 9th turn on waits: the disk is filled meanwhile
        n = 30
        config = engine_config(tmp_path, engine, n, judge={"checkpoint_seconds": 1}, max_concurrency=2)
        out = disk / "out"
        config.write_text(config.read_text().replace(str(tmp_path / "out"), str(out)))
        checkpoints = out / "_evalbeam_attempts" / "r1" / "judge_checkpoints" / "inference"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        run = subprocess.Popen([EVALBEAM, "run", str(config)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            saved: dict = {}
            deadline = clock.monotonic() + 300
            while run.poll() is None and len(saved) < 8 and clock.monotonic() < deadline:
                clock.sleep(0.2)
                saved = read_checkpoints(str(checkpoints))
            assert run.poll() is None and len(saved) == 8, run.communicate()
            fill_disk(disk)  # the disk, full
            engine.hold_after = None
            engine.release.set()
            stdout, stderr = run.communicate(timeout=300)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        assert run.returncode == 120, stdout + stderr
        assert "Traceback" not in stderr and "ERROR" not in stderr, stderr
        assert re.fullmatch(rf"evalbeam: could not write the output under {re.escape(str(out))}\S*: \[Errno 28\] No space "
                            r"left on device \(in step [\w/]*InferDeployed\w*\); this run's partial files were removed and "
                            r"the previous output of run_id r1, if any, is as it was", stderr.splitlines()[-1]), stderr
        assert stdout == ""  # no summary, no "results:": nothing claimed as written
        # the agent was asked no more once the chunk failed: not every case
        assert sum(engine.stats.messages.values()) < n
        # no run installed; left: the whole chunks written before the disk filled, no partial file
        assert not (out / "r1").exists()
        left = sorted(p.name for p in checkpoints.iterdir())
        assert left and not [name for name in left if name.endswith(".tmp") or name.startswith(".")], left
        assert read_checkpoints(str(checkpoints)) == saved
        # room again: the re-run reuses them and asks the agent only the other cases
        (disk / "filler").unlink()
        asked = sum(engine.stats.messages.values())
        again = subprocess.run([EVALBEAM, "run", str(config)], env=env, cwd=ROOT, capture_output=True, text=True,
                               timeout=600)
        assert again.returncode == 0, again.stdout + again.stderr
        assert sum(engine.stats.messages.values()) - asked == n - len(saved)
        assert len([r for r in table(out / "r1", "metric_results") if r["metric"] == "exact_match"]) == n


def test_calls_wait_and_give_up_as_the_policy_says():
    """Calls asks metrics.retry's policy: the first retry waits U(0, base) (the judge's numbers: no longer
    1 s or more), each later bound doubles; 501 and 505 to 511 are retried now, as the judge retries them;
    a deadline ends the retries before max_attempts does."""
    import asyncio

    from evalbeam.metrics.agents.a2a import A2AInferrer

    class Status(Exception):
        def __init__(self, status):
            super().__init__(f"status {status}")
            self.status_code = status

    def run(outcomes, policy):
        waits, sent = [], []

        async def sleep(seconds):
            waits.append(seconds)

        async def send():
            sent.append(outcomes[len(sent)])
            if isinstance(sent[-1], BaseException):
                raise sent[-1]
            return sent[-1]

        calls = Calls(None, policy, 5.0, sleep=sleep)
        try:
            return asyncio.run(calls.call("turn 1", send, A2AInferrer.classify)), sent, waits
        except Exception as e:  # noqa: BLE001
            return e, sent, waits

    result, sent, waits = run([Status(501), Status(505), Status(511), "answer"], RetryPolicy(max_attempts=4, base=0.5))
    assert result == "answer" and len(sent) == 4
    assert 0 <= waits[0] <= 0.5 and 0 <= waits[1] <= 1.0 and 0 <= waits[2] <= 2.0
    result, sent, waits = run([Status(503)] * 3, RetryPolicy(max_attempts=3, base=0.5))
    assert str(result) == "turn 1 failed after 3 attempts; last: HTTP 503: status 503" and len(waits) == 2
    result, sent, waits = run([Status(503)] * 3, RetryPolicy(max_attempts=3, base=5.0, deadline=0.0))
    assert str(result) == "turn 1 failed after 1 attempts; last: HTTP 503: status 503" and waits == []
