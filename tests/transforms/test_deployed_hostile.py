"""Deployed agents (metrics/agents/deployed.py) against endpoints that misbehave: a scripted A2A server
(tests/servers/a2a_raw.py, the JSON-RPC binding spoken by hand so it can break the protocol) and the Agent
Engine stand-in (tests/servers/agent_engine_server.py), through the real a2a-sdk and google-cloud-aiplatform
clients. Each case must end with an answer or with a clear error on that case; none is dropped."""
from __future__ import annotations

import base64
import json

import pytest

from evalbeam.metrics.agents.a2a_events import events_from_a2a
from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.a2a import A2AInferrer
from evalbeam.metrics.agents.inference import InferenceError, infer_all
from evalbeam.metrics.retry import RetryPolicy
from tests.servers.a2a_raw import RawA2AServer, agent_message, result


def over_raw_a2a(answer, cases=None, max_attempts=2, request_timeout=30.0, url_suffix=""):
    with RawA2AServer(answer) as server:
        made = []

        def make():
            made.append(Calls(None, RetryPolicy(max_attempts=max_attempts), request_timeout))
            return A2AInferrer(server.url + url_suffix, made[-1])

        cases = cases or [("c1", {"prompt": "hello"})]
        return dict(infer_all(make, cases, 4, 60)), server, made[0]


def task(state, text=None, context="ctx-1"):
    status = {"state": state}
    if text is not None:
        status["message"] = {"messageId": "s1", "role": "ROLE_AGENT", "parts": [{"text": text}]}
    return {"task": {"id": "t1", "contextId": context, "status": status}}


def status_update(state, text=None, context="ctx-1"):
    update = task(state, text, context)["task"]
    return {"statusUpdate": {"taskId": update.pop("id"), **update}}


# ------------------------------------------------------------------------------------------- A2A

@pytest.mark.slow
def test_a2a_stream_cut_short_is_the_cases_error_not_a_partial_answer():
    """A stream that ends while the task is still submitted/working (a server or proxy that closed it
    early) fails the case, as ADK's RemoteA2aAgent reads it (_UNFINISHED_TASK_STATES), instead of
    scoring the half-written status message as the final response. So does an empty stream."""
    cut = lambda text, body: [result(body["id"], task("TASK_STATE_SUBMITTED")),  # noqa: E731
                              result(body["id"], status_update("TASK_STATE_WORKING", "partial thinking"))]
    done, _, _ = over_raw_a2a(cut)
    assert done["c1"]["failure"] == 1
    assert "ended before its task reached a final state (TASK_STATE_WORKING)" in done["c1"]["inference_error"]
    done, _, _ = over_raw_a2a(lambda text, body: [])
    assert done["c1"]["failure"] == 1 and "turn 1: the A2A agent's stream ended without an answer" in done["c1"]["inference_error"]
    # the same stream, finished: answered
    whole = lambda text, body: [*cut(text, body), result(body["id"], status_update("TASK_STATE_COMPLETED"))]  # noqa: E731
    done, _, _ = over_raw_a2a(whole)
    assert done["c1"]["failure"] == 0 and done["c1"]["invocations"][0]["response"] == "partial thinking"


@pytest.mark.parametrize("state, ok", [
    ("TASK_STATE_COMPLETED", True), ("TASK_STATE_INPUT_REQUIRED", True), ("TASK_STATE_AUTH_REQUIRED", True),
    ("TASK_STATE_FAILED", False), ("TASK_STATE_REJECTED", False), ("TASK_STATE_CANCELED", False),
    ("TASK_STATE_WORKING", False), ("TASK_STATE_SUBMITTED", False), (None, False)])
def test_a2a_final_task_states(state, ok):
    """Which state a turn's stream may end in: finished or deliberately paused (input/auth required) is an
    answer; failed, rejected, canceled, or not finished is the case's error."""
    stream = [{"task": {"id": "t", "contextId": "c", "status": {"state": state, "message": {
        "role": "ROLE_AGENT", "parts": [{"text": "said"}]}} if state else {}}}]
    if ok:
        events, context = events_from_a2a(stream, "a")
        assert context == "c" and events[0]["content"]["parts"] == [{"text": "said"}]
    else:
        with pytest.raises(InferenceError):
            events_from_a2a(stream, "a")
    # a message is a whole answer by itself
    assert events_from_a2a([agent_message("hi")], "a")[0][0]["content"]["parts"] == [{"text": "hi"}]


def test_a2a_agent_card_that_cannot_be_read_is_tried_once_per_shard_not_once_per_case():
    """The card answers 503 every time: its read is retried max_attempts times once, then every case of
    the shard fails with that error at once (not max_attempts more reads, with backoff, per case)."""
    cases = [(f"c{i}", {"prompt": f"hello {i}"}) for i in range(6)]
    with RawA2AServer(lambda text, body: [], card_status=503) as server:
        calls = Calls(None, RetryPolicy(max_attempts=3, base=0.01), 30.0)
        done = dict(infer_all(lambda: A2AInferrer(server.url, calls), cases, 2, 60))
    assert server.card_reads == 3 and not server.requests
    assert {k: v["failure"] for k, v in done.items()} == {k: 1 for k, _ in cases}
    assert all("reading the A2A agent card at" in v["inference_error"] and "503" in v["inference_error"]
               for v in done.values())


# ----------------------------------------------------------------------------------- Agent Engine

from tests.transforms.test_deployed import engine_env, on_engine  # noqa: E402,F401 - the fixture and helper


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
def test_agent_engine_malformed_streams_fail_the_case_with_a_reason(name, engine_env):  # noqa: F811
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
def test_agent_engine_session_refused_fails_every_case_without_the_token(engine_env):  # noqa: F811
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
@pytest.mark.parametrize("card_path, suffix", [
    ("/.well-known/agent-card.json", "/"),  # a trailing slash
    ("/agents/weather/.well-known/agent-card.json", "/agents/weather/"),  # an agent under a path
    ("/.well-known/agent-card.json", "/.well-known/agent-card.json"),  # the card's own URL, pasted
    ("/.well-known/agent.json", "/.well-known/agent.json"),  # an A2A 0.2 server's card path, given
])
def test_a2a_url_forms(card_path, suffix):
    """The URLs a user pastes: each reaches the card, then the agent; preflight agrees."""
    from evalbeam.metrics.agents.probe import reachable

    ok = lambda text, body: [result(body["id"], agent_message("hi " + text))]  # noqa: E731
    with RawA2AServer(ok, card_path=card_path) as server:
        assert reachable("a2a", server.url + suffix) is None
        calls = Calls(None, RetryPolicy(max_attempts=2), 30.0)
        done = dict(infer_all(lambda: A2AInferrer(server.url + suffix, calls), [("c1", {"prompt": "x"})], 1, 60))
    assert done["c1"]["failure"] == 0, done["c1"].get("inference_error")
    assert done["c1"]["invocations"][0]["response"] == "hi x" and server.card_reads == 2


def test_a2a_card_naming_an_unreachable_endpoint_says_so():
    """A card that names the URL the agent was started with (http://0.0.0.0:<port>/ or localhost in a
    container), not the one it is reached at: preflight says the card names an endpoint that cannot be
    reached, and a case's error names that endpoint, not just "ConnectError"."""
    from evalbeam.metrics.agents.probe import reachable
    from tests.servers.a2a_agent import free_port

    elsewhere = f"http://127.0.0.1:{free_port()}/"
    with RawA2AServer(lambda text, body: []) as server:
        server.card_url = elsewhere
        problem = reachable("a2a", server.url)
        calls = Calls(None, RetryPolicy(max_attempts=2, base=0.01), 30.0)
        done = dict(infer_all(lambda: A2AInferrer(server.url, calls), [("c1", {"prompt": "x"})], 1, 60))
    assert problem is not None and problem.startswith(
        f"inference.a2a: the agent card at {server.url}/.well-known/agent-card.json names {elsewhere} as the "
        "agent's endpoint, which is unreachable (ConnectError"), problem
    error = done["c1"]["inference_error"]
    assert "turn 1 failed after 2 attempts" in error and elsewhere.rstrip("/") in error, error


def test_a2a_url_with_credentials_is_refused_before_they_are_recorded():
    """user:password@ in inference.a2a would be sent only to the card (the messages go to the endpoint the
    card names, without them) and would be written with the config to the runs table: refused, without
    echoing the password."""
    import pydantic

    from evalbeam.configs import InferenceConfig, format_errors

    with pytest.raises(pydantic.ValidationError) as refused:
        InferenceConfig(a2a="https://evaluator:s3cr3t-token@agent.example.com/")
    shown = format_errors(refused.value)  # what `evalbeam validate/run` print
    assert "a2a: credentials in the URL are not supported" in shown and "s3cr3t-token" not in shown, shown
    assert InferenceConfig(a2a="https://agent.example.com/a@b").a2a  # an @ in the path is no credential


# ------------------------------------------------------------------- a turn that may have run

def test_a2a_turn_that_timed_out_is_not_sent_again():
    """The agent takes longer than request_timeout_seconds on a turn: it may well run it to the end, so
    sending the turn again would put the user's message twice into the conversation (and run its tools
    twice). The case fails saying so, after one request; the agent sees the message once."""
    def slow(text, body):
        def write(handler):
            server.release.wait(60)  # answered only when the test ends
        return write

    with RawA2AServer(slow) as server:
        calls = Calls(None, RetryPolicy(max_attempts=3), 0.3)
        done = dict(infer_all(lambda: A2AInferrer(server.url, calls), [("c1", {"prompt": "x"})], 1, 60))
    error = done["c1"]["inference_error"]
    assert len(server.requests) == 1 and calls.stats.requests == 2  # the card, the one message
    assert "turn 1: no answer within 0.3s; not sent again (the agent may have run it)" in error, error


def test_a2a_turn_refused_before_running_is_sent_again():
    """A connection refused (nothing sent) and a 503 (refused) are still retried: the agent did not run them."""
    answers = iter(["refuse", "ok"])

    def flaky(text, body):
        if next(answers) == "refuse":
            def write(handler):
                handler.send_response(503)
                handler.send_header("Content-Length", "0")
                handler.end_headers()
            return write
        return [result(body["id"], agent_message("hi"))]

    with RawA2AServer(flaky) as server:
        calls = Calls(None, RetryPolicy(max_attempts=3, base=0.01), 30.0)
        done = dict(infer_all(lambda: A2AInferrer(server.url, calls), [("c1", {"prompt": "x"})], 1, 60))
    assert done["c1"]["failure"] == 0 and len(server.requests) == 2 and calls.stats.retries == 1


@pytest.mark.slow
def test_agent_engine_turn_that_timed_out_is_not_sent_again(engine_env):  # noqa: F811
    """The same on Agent Engine: a turn held past request_timeout_seconds is the case's error, sent once;
    create_session (no conversation yet) was answered."""
    from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer
    from tests.transforms.test_deployed import ENGINE

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
def test_agent_engine_a_case_past_its_timeout_does_not_starve_the_next(engine_env):  # noqa: F811
    """Case a's turn hangs past timeout_seconds: a is cancelled, but the REST client's call goes on in its
    thread until its own timeout. Case b (one case in flight at a time) must not wait behind it in the
    client's thread pool: it is answered."""
    from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer
    from tests.transforms.test_deployed import ENGINE

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
def test_agent_engine_turn_whose_connection_dropped_after_running_is_not_sent_again(engine_env):  # noqa: F811
    """The agent ran the turn, then the connection closed without an answer (requests' 'Connection
    aborted', RemoteDisconnected): the turn is not sent again, unlike a connection that was refused."""
    from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer
    from tests.transforms.test_deployed import ENGINE

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
def test_preflight_accepts_an_endpoint_that_leaves_a_get_unanswered():
    """The card's endpoint connects but never answers the preflight's GET (it serves POSTs): reachable."""
    import socket

    from evalbeam.metrics.agents.probe import reachable

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)  # accepts connections (the kernel's backlog), never answers
    ok = lambda text, body: [result(body["id"], agent_message("hi"))]  # noqa: E731
    try:
        with RawA2AServer(ok) as server:
            server.card_url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
            assert reachable("a2a", server.url, timeout=0.5) is None
    finally:
        silent.close()


@pytest.mark.slow
def test_agent_engine_turn_past_its_timeout_closes_its_stream(engine_env):  # noqa: F811
    """A turn whose stream never ends (a byte now and then, so the client's read timeout never fires):
    at request_timeout_seconds the case fails and the stream is closed, so the REST client's thread does
    not read on for ever (and keep the process from exiting)."""
    from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer
    from tests.transforms.test_deployed import ENGINE

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
