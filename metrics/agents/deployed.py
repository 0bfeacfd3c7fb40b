"""A deployed agent's case (no Beam): which inferrer runs it, the key its inference is checkpointed under,
and its saved result. The agent is reached over the network:

    metrics.agents.a2a           inference.a2a: an agent served over A2A, through the a2a-sdk client
    metrics.agents.agent_engine  inference.agent_engine: an ADK app on Vertex AI Agent Engine, through
                                 google-cloud-aiplatform's REST client
    metrics.agents.calls         every request of either: the quota, timeouts, retries
    metrics.agents.auth          inference.auth: the credential of A2A requests
    metrics.agents.probe         preflight's check that the endpoint answers
"""
from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from evalbeam.metrics.agents.a2a import A2AInferrer
from evalbeam.metrics.agents.agent_engine import AgentEngineInferrer
from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.inference import InferenceError, user_turns


def case_key(kind: str, target: str, instance_id: str, fields: dict[str, Any]) -> str:
    """The content key of a case's deployed inference (its checkpoint key): the agent, the
    case and what is sent (its user turns and session_input). Hex, as the judge's keys."""
    case = fields.get("adk_case")
    session_input = (case.get("session_input") or {}) if isinstance(case, dict) else {}
    try:
        turns = user_turns(fields)
    except InferenceError:
        turns = []
    material = {"kind": kind, "target": target, "id": instance_id, "turns": turns, "session_input": session_input}
    scenario = case.get("conversation_scenario") if isinstance(case, dict) else None
    if scenario is not None:  # a simulated conversation: what its user is told to do (cases without one keep their keys)
        material["conversation_scenario"] = scenario
    material = json.dumps(material, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(material.encode()).hexdigest()


def encode_result(turns: Any) -> str:
    return base64.b64encode(json.dumps(turns, ensure_ascii=False).encode()).decode()


def decode_result(text: str) -> Any:
    return json.loads(base64.b64decode(text).decode())


def make_deployed_inferrer(kind: str, target: str, calls: Calls, base_url: str | None, max_concurrency: int,
                           auth: dict[str, Any] | None = None):
    """auth: inference.auth as plain data (A2AAuthConfig.plain), for a2a."""
    if kind == "a2a":
        return A2AInferrer(target, calls, max_concurrency, auth)
    if kind == "agent_engine":
        return AgentEngineInferrer(target, calls, base_url, max_concurrency)
    raise ValueError(f"no deployed inferrer for {kind!r}")
