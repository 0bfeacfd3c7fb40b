"""An ADK Invocation (as JSON, snake_case as ADK writes it) from one side of an evalbeam trace turn:
what output.adk_eval_history writes (transforms.adk_history) and what ADK's own judge criteria read
(metrics.judge.adk_judges). Pure Python: google.adk is not imported here."""
from __future__ import annotations

from typing import Any


def _content(role: str, text: str | None, parts: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """A Content of the text, or of its text parts where the trace kept them (metrics.rows.trace: prompt_parts,
    response_parts), so that a reader joining them otherwise than with a new line reads them as recorded."""
    if text is None:
        return None
    return {"role": role, "parts": [_part(p) for p in parts] if parts else [{"text": text}]}


def _part(part: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "text" in part:
        out["text"] = part["text"]
        if part.get("thought"):
            out["thought"] = True
    if "function_call" in part:
        out["function_call"] = dict(part["function_call"])
    if "function_response" in part:
        out["function_response"] = dict(part["function_response"])
    return out


def _call(call: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": call["tool_name"]}
    if "tool_input" in call:
        out["args"] = call["tool_input"]
    if "id" in call:
        out["id"] = call["id"]
    return out


def adk_invocation(prompt: str | None, side: dict[str, Any], invocation_id: str | None,
                   prompt_parts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An ADK Invocation (JSON) from a prompt and one side of a trace turn."""
    invocation: dict[str, Any] = {"invocation_id": invocation_id or "",
                                  "user_content": _content("user", prompt or "", prompt_parts)}
    if side.get("response"):
        invocation["final_response"] = _content("model", side["response"], side.get("response_parts"))
    if "events" in side:
        events = []
        for event in side["events"]:
            e: dict[str, Any] = {"author": event["author"],
                                 "content": {"role": "model", "parts": [_part(p) for p in event["parts"]]}}
            if "usage" in event:
                e["usage_metadata"] = event["usage"]
            if "model_version" in event:
                e["model_version"] = event["model_version"]
            if "grounding_metadata" in event:
                e["grounding_metadata"] = event["grounding_metadata"]
            events.append(e)
        invocation["intermediate_data"] = {"invocation_events": events}
    else:
        calls = side.get("tool_calls", [])
        invocation["intermediate_data"] = {
            "tool_uses": [_call(c) for c in calls],
            "tool_responses": [{"name": c["tool_name"], "response": c["response"], **({"id": c["id"]} if "id" in c else {})}
                               for c in calls if isinstance(c.get("response"), dict)],
            "intermediate_responses": [[r["author"], [{"text": r["text"]}]] for r in side.get("intermediate_responses", [])],
        }
    duration = side.get("duration") or {}
    for key, name in (("total", "duration"), ("model", "model_duration"), ("tool", "tool_duration")):
        if key in duration:
            invocation[name] = duration[key]
    return invocation
