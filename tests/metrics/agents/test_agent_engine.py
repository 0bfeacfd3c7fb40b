"""The Agent Engine client (metrics/agents/agent_engine.py): `inference.agent_engine` against a stand-in speaking
Agent Engine's REST protocol (tests/servers/agent_engine_server.py), through google-cloud-aiplatform's client and
real credentials, in front of a real ADK app or misbehaving (streams broken, sessions refused, turns that hang or
drop their connection). Each case ends with an answer or with a clear error on that case; none is dropped."""
from __future__ import annotations

import base64
import json

import pytest

from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.inference import infer_all
from evalbeam.metrics.retry import RetryPolicy
from tests.agent_cases import AGENT_SET, ENGINE, actual, cases_of, in_process, on_engine
from tests.servers.judge_server import JudgeServer


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
    # the rate limiter sleeps through the same `sleep` (the 429 slows its pace), so its waits can come between the
    # retries' on a loaded machine: the 429's Retry-After (2 s) is waited in full
    assert calls.stats.retries == 2 and calls.stats.rate_limited == 1
    assert any(w >= 2 for w in waits), waits
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


def chunk(obj) -> dict:
    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return {"contentType": "application/json", "data": base64.b64encode(data).decode()}


def text_event(text):
    return {"author": "weather_agent", "invocation_id": "e-1", "content": {"role": "model", "parts": [{"text": text}]}}


ENGINE_STREAMS = {
    "fine": json.dumps([chunk(text_event("ok"))]).encode(),
    "malformed line": json.dumps([chunk(text_event("before")), chunk(b'{"author": "weather_agent", "content": {')]).encode(),
    "non-utf8": json.dumps([chunk(b'{"author": "weather_agent", "content": {"parts": [{"text": "caf\\xe9"}]}}'[:0]
                                  + b'{"author": "weather_agent", "content": {"parts": [{"text": "caf\xe9"}]}}')]).encode(),
    "error object mid-stream": json.dumps([chunk(text_event("before")),
                                           {"error": {"code": 500, "message": "the app raised mid-stream"}}]).encode(),
    "truncated": json.dumps([chunk(text_event("before")), chunk(text_event("after"))]).encode()[:-40],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENGINE_STREAMS))
def test_agent_engine_malformed_streams_fail_the_case_with_a_reason(name, engine_env):
    engine_env.raw_stream = lambda turn: ENGINE_STREAMS[name]
    done, calls = on_engine(engine_env, [("c1", {"prompt": "hello"})], max_attempts=2)
    case = done["c1"]
    if name == "fine":
        assert case["failure"] == 0 and case["invocations"][0]["response"] == "ok"
        return
    error = case["inference_error"]
    assert case["failure"] == 1 and "turn 1: Agent Engine's stream could not be read (" in error, error
    assert len(error) < 400 and "eyJ" not in error  # a reason, not the base64 of the stream
    assert calls.stats.requests == 2  # create_session, the turn: a broken stream is not sent again


@pytest.mark.slow
def test_agent_engine_session_refused_fails_every_case_without_the_token(engine_env):
    """create_session answered 403 (with the bearer echoed by a careless proxy): each case fails, naming
    create_session and the status, with no access token in the error; nothing is retried (403 is final)."""
    engine_env.session_fail = (403, "echo")
    done, calls = on_engine(engine_env, [("c1", {"prompt": "a"}), ("c2", {"prompt": "b"})], max_attempts=3)
    issued = engine_env.tokens.stats.issued_tokens
    for case in done.values():
        assert case["failure"] == 1 and "403" in case["inference_error"], case["inference_error"]
        assert "you sent" in case["inference_error"]  # the echoed message is kept ...
        assert not any(token in case["inference_error"] for token in issued)  # ... without the token
    assert calls.stats.requests == 2 and calls.stats.retries == 0


@pytest.mark.slow
def test_agent_engine_turn_that_timed_out_is_not_sent_again(engine_env):
    """The same on Agent Engine: a turn held past request_timeout_seconds is the case's error, sent once;
    create_session (no conversation yet) was answered."""
    from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer

    engine_env.hold_after = 0  # every turn waits for release
    calls = Calls(None, RetryPolicy(max_attempts=3), 0.5)
    try:
        done = dict(infer_all(lambda: AgentEngineInferrer(ENGINE, calls, engine_env.url, 2),
                              [("c1", {"prompt": "hello"})], 1, 60))
    finally:
        engine_env.release.set()
    error = done["c1"]["inference_error"]
    assert "turn 1: no answer within 0.5s; not sent again (the agent may have run it)" in error, error
    assert list(engine_env.stats.turn_requests.values()) == [1] and calls.stats.requests == 2


@pytest.mark.slow
def test_agent_engine_a_case_past_its_timeout_does_not_starve_the_next(engine_env):
    """Case a's turn hangs past timeout_seconds: a is cancelled, but the REST client's call goes on in its
    thread until its own timeout. Case b (one case in flight at a time) must not wait behind it in the
    client's thread pool: it is answered."""
    from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer

    engine_env.hold_text = "#hang"
    calls = Calls(None, RetryPolicy(max_attempts=1), 60.0)
    try:
        done = dict(infer_all(lambda: AgentEngineInferrer(ENGINE, calls, engine_env.url, 1),
                              [("a", {"prompt": "#hang"}), ("b", {"prompt": "hello"})], 1, 2.0))
    finally:
        engine_env.release.set()
    assert done["a"]["inference_error"] == "inference timed out after 2s"
    assert done["b"]["failure"] == 0, done["b"].get("inference_error")


@pytest.mark.slow
def test_agent_engine_turn_whose_connection_dropped_after_running_is_not_sent_again(engine_env):
    """The agent ran the turn, then the connection closed without an answer (requests' 'Connection
    aborted', RemoteDisconnected): the turn is not sent again, unlike a connection that was refused."""
    from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer

    engine_env.drop_text = "#drop"
    calls = Calls(None, RetryPolicy(max_attempts=3), 30.0)
    done = dict(infer_all(lambda: AgentEngineInferrer(ENGINE, calls, engine_env.url, 2),
                          [("c1", {"prompt": "#drop"})], 1, 60))
    error = done["c1"]["inference_error"]
    assert "turn 1: ConnectionError" in error and "not sent again (the agent may have run it)" in error, error
    assert list(engine_env.stats.turn_requests.values()) == [1]


def test_agent_engine_refused_connection_is_retried():
    """A closed port (nothing sent) is a failure to retry: requests' ConnectionError of a NewConnectionError."""
    import requests

    from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer, _never_sent
    from tests.servers.a2a_agent import free_port

    try:
        requests.post(f"http://127.0.0.1:{free_port()}/", timeout=5)
    except requests.ConnectionError as e:
        refused = e
    assert _never_sent(refused)
    failure = AgentEngineInferrer.classify(AgentEngineInferrer.__new__(AgentEngineInferrer), refused)
    assert failure is not None and not failure.maybe_ran


@pytest.mark.slow
def test_agent_engine_turn_past_its_timeout_closes_its_stream(engine_env):
    """A turn whose stream never ends (a byte now and then, so the client's read timeout never fires):
    at request_timeout_seconds the case fails and the stream is closed, so the REST client's thread does
    not read on for ever (and keep the process from exiting)."""
    from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer

    engine_env.trickle_text = "#trickle"
    calls = Calls(None, RetryPolicy(max_attempts=2), 1.0)
    try:
        done = dict(infer_all(lambda: AgentEngineInferrer(ENGINE, calls, engine_env.url, 2),
                              [("c1", {"prompt": "#trickle"})], 1, 60))
        closed = engine_env.client_gone.wait(60)
    finally:
        engine_env.release.set()
    assert "turn 1: no answer within 1s; not sent again" in done["c1"]["inference_error"]
    assert closed  # the stand-in saw the client close the connection
