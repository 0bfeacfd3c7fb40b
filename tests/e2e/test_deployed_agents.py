"""Deployed agents through `evalbeam run`: inference.a2a against ADK's to_a2a server (the .agent venv), the
turns it produced scored as any trace. (The clients themselves: tests/metrics/agents/.)"""
from __future__ import annotations

import copy
import json

import pytest

from tests.agent_cases import AGENT_SET
from tests.servers.a2a_agent import A2AServer
from tests.servers.judge_server import JudgeServer


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
