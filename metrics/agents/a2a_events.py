"""An A2A stream as ADK events (no Beam): the StreamResponse objects of one message to an A2A agent, as
JSON, made into the ADK events they carry, as ADK's own A2A client (RemoteA2aAgent) reads them back, so that
the A2A client (A2AInferrer) gives the trace the same agent gives in-process."""
from __future__ import annotations

import json
from typing import Any

from evalbeam.metrics.agents.inference import InferenceError

ADK_TYPE = "adk_type"  # ADK's A2A converters mark function calls and responses in a part's metadata
TASK_ERROR_STATES = ("TASK_STATE_FAILED", "TASK_STATE_REJECTED", "TASK_STATE_CANCELED")
# neither final nor a deliberate pause (input or auth required): a stream that ends there was cut short
TASK_UNFINISHED_STATES = ("TASK_STATE_UNSPECIFIED", "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")


def _json_numbers(value: Any) -> Any:
    """A data part's values with integral numbers as ints: the part's data is a protobuf Struct, which holds
    every number as a double (a tool's 25 arrives as 25.0); the agent's own values were JSON's."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    if isinstance(value, dict):
        return {k: _json_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_numbers(v) for v in value]
    return value


def _a2a_part(part: dict[str, Any]) -> dict[str, Any] | None:
    """An A2A part (as JSON) -> a genai part, as ADK's A2A part converter reads it back."""
    kind = (part.get("metadata") or {}).get(ADK_TYPE)
    if "data" in part:
        if kind in ("function_call", "function_response", "executable_code", "code_execution_result"):
            return {kind: _json_numbers(part["data"])}
        return {"text": json.dumps(part["data"], sort_keys=True, ensure_ascii=False)}
    if "text" in part:
        return {"text": part["text"]}
    return None  # files (raw bytes, urls) are not part of a trace


def _a2a_event(message: dict[str, Any], metadata: dict[str, Any], default_author: str) -> dict[str, Any] | None:
    parts = [p for p in (_a2a_part(p) for p in message.get("parts", [])) if p is not None]
    if not parts:
        return None
    event: dict[str, Any] = {"author": metadata.get("adk_author") or default_author,
                             "content": {"role": "model", "parts": parts}}
    if metadata.get("adk_invocation_id"):
        event["invocation_id"] = metadata["adk_invocation_id"]
    usage = metadata.get("adk_usage_metadata")
    if isinstance(usage, dict):
        event["usage_metadata"] = {k: int(v) for k, v in usage.items() if isinstance(v, (int, float))}
    return event


def events_from_a2a(responses: list[dict[str, Any]], agent_name: str) -> tuple[list[dict[str, Any]], str | None]:
    """The stream of one message (StreamResponse objects as JSON) -> (the ADK events it
    carries, its context id). The agent's status messages are its events (ADK's A2A
    executor sends one per ADK event, function calls and responses as data parts); an
    agent that sends none (a plain A2A agent) answers with a message, or with its
    task's agent history and artifacts. A failed, rejected or canceled task is an error;
    so is a stream that ends while its task is unfinished (cut short: ADK's RemoteA2aAgent
    reads it so, _UNFINISHED_TASK_STATES) or that carries nothing at all."""
    events: list[dict[str, Any]] = []
    fallback: list[dict[str, Any]] = []
    context = None
    answered = False  # a message: a whole answer by itself
    state = None  # the task's last state, when the answer is a task
    for response in responses:
        if "message" in response:
            answered = True
            message = response["message"]
            context = message.get("contextId") or context
            event = _a2a_event(message, message.get("metadata") or {}, agent_name)
            events += [event] if event else []
        for key in ("statusUpdate", "task"):
            if key not in response:
                continue
            update = response[key]
            context = update.get("contextId") or context
            status = update.get("status") or {}
            state = status.get("state") or "TASK_STATE_UNSPECIFIED"
            metadata = {**(update.get("metadata") or {}), **((status.get("message") or {}).get("metadata") or {})}
            if status.get("message") and status["message"].get("role") == "ROLE_AGENT":
                event = _a2a_event(status["message"], metadata, agent_name)
                events += [event] if event else []
            if state in TASK_ERROR_STATES:
                text = " ".join(p.get("text", "") for p in (status.get("message") or {}).get("parts", []))
                raise InferenceError(f"the A2A agent's task ended {status['state']}" + (f": {text.strip()}" if text.strip() else ""))
            if key == "task":
                for message in update.get("history") or []:
                    if message.get("role") == "ROLE_AGENT":
                        event = _a2a_event(message, {**(update.get("metadata") or {}), **(message.get("metadata") or {})}, agent_name)
                        fallback += [event] if event else []
                for artifact in update.get("artifacts") or []:
                    event = _a2a_event(artifact, update.get("metadata") or {}, agent_name)
                    fallback += [event] if event else []
        if "artifactUpdate" in response:
            update = response["artifactUpdate"]
            context = update.get("contextId") or context
            event = _a2a_event(update.get("artifact") or {}, update.get("metadata") or {}, agent_name)
            fallback += [event] if event else []
    if not answered and state is None:
        raise InferenceError("the A2A agent's stream ended without an answer (no message, no task)")
    if not answered and state in TASK_UNFINISHED_STATES:
        raise InferenceError(f"the A2A agent's stream ended before its task reached a final state ({state})")
    if not events:
        events = fallback
    return events, context
