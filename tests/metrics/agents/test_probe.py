"""Preflight's check of a deployed agent (metrics/agents/probe.py): `evalbeam validate` of the example configs
against ADK's to_a2a server and the Agent Engine stand-in; an endpoint that does not answer, a card naming an
unreachable endpoint and one that never answers a GET, each in one line."""
from __future__ import annotations

import pytest

from evalbeam.metrics.agents.a2a import A2AInferrer
from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.inference import infer_all
from evalbeam.metrics.retry import RetryPolicy
from tests.agent_cases import ENGINE
from tests.helpers import ROOT
from tests.servers.a2a_agent import A2AServer
from tests.servers.a2a_raw import RawA2AServer, agent_message, result
from tests.servers.judge_server import JudgeServer


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
