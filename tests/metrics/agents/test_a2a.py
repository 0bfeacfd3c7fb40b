"""The A2A client (metrics/agents/a2a.py): `inference.a2a` against a real ADK agent served by ADK's own `to_a2a`
(the .agent venv), whose model is the local Gemini-protocol server, compared with the same agent run in-process
(`inference.agent`); and against a scripted A2A server (tests/servers/a2a_raw.py, the JSON-RPC binding spoken by
hand so it can break the protocol) through the real a2a-sdk client. Each case ends with an answer or with a
clear error on that case; none is dropped."""
from __future__ import annotations

import copy

import pytest

from evalbeam.metrics.agents.a2a import A2AInferrer
from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.inference import infer_all
from evalbeam.metrics.retry import RetryPolicy
from tests.agent_cases import AGENT_SET, actual, cases_of, in_process, over_a2a
from tests.servers.a2a_agent import A2AServer
from tests.servers.a2a_raw import RawA2AServer, agent_message, result
from tests.servers.faulty_proxy import FaultyProxy
from tests.servers.judge_server import JudgeServer


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
