"""What an agent judge reads of an instance's trace (metrics.rows.trace's
`invocations` turns), and the units it judges.

A rubric template's `unit` says what one judgment covers:
  instance      the instance as a whole; for an agent trace, its last turn
                (prompt, response, tool calls), the turns before it as history
  turn          every turn (ADK's per-invocation judges); a flat row is one turn
  step          every natural-language response of every turn (hallucination):
                the final response, and with `intermediate_steps` the
                intermediate ones too, each with the context before it
  conversation  the whole conversation at once (multi-turn judges, judged on the
                last turn as ADK does)
Each unit is a dict of the variables a template's prompts may name: the
canonical fields, plus the AGENT_VARIABLES derived from the trace here.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from evalbeam.metrics.rows.trace import get_key, trace_of

AGENT_VARIABLES = ("tool_calls", "intermediate_responses", "grounding_metadata", "conversation", "step_context",
                   "agent_instructions", "user_turns")


@dataclasses.dataclass(frozen=True)
class Unit:
    turn: int | None  # 0-based index of the turn (None: the instance as a whole)
    step: int | None  # 0-based index of the response step within the turn (hallucination)
    fields: dict[str, Any]
    rubrics: tuple[dict[str, Any], ...] = ()  # the turn's ADK rubrics ({rubric_id, rubric_content, type})
    skip: str | None = None  # why this unit cannot be judged (it is then not evaluated)


def _agents(turn: Mapping[str, Any]) -> dict[str, Any]:
    details = turn.get("app_details") or {}
    agents = get_key(details, "agent_details") or {}
    return agents if isinstance(agents, dict) else {}


def developer_instruction(fields: Mapping[str, Any], turn: Mapping[str, Any]) -> str | None:
    """The row's developer_instruction, else the instructions of the agents in the turn's app_details."""
    if fields.get("developer_instruction"):
        return fields["developer_instruction"]
    texts = [(name, get_key(agent, "instructions")) for name, agent in _agents(turn).items() if isinstance(agent, dict)]
    texts = [(n, t) for n, t in texts if t]
    if not texts:
        return None
    return texts[0][1] if len(texts) == 1 else "\n\n".join(f"[{n}] {t}" for n, t in texts)


def tool_declarations(fields: Mapping[str, Any], turn: Mapping[str, Any]) -> Any:
    """The row's tool_declarations, else every agent's declarations in the turn's app_details."""
    if fields.get("tool_declarations") is not None:
        return fields["tool_declarations"]
    declared = []
    for agent in _agents(turn).values():
        if isinstance(agent, dict):
            for tool in get_key(agent, "tool_declarations") or []:
                declared.extend(get_key(tool, "function_declarations") or [tool] if isinstance(tool, dict) else [tool])
    return declared or None


def tool_calls(turn: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{k: c[k] for k in ("tool_name", "tool_input", "response") if k in c} for c in turn.get("tool_calls") or []]


def grounding(turn: Mapping[str, Any]) -> list[Any] | None:
    found = [e["grounding_metadata"] for e in turn.get("events") or [] if e.get("grounding_metadata")]
    return found or None


def _event_lines(events: list[dict[str, Any]]) -> list[str]:
    lines = []
    for e in events:
        for part in e.get("parts") or []:
            if part.get("text"):
                lines.append(f"{e.get('author', 'agent')}: {part['text']}")
            elif "function_call" in part:
                lines.append("tool_calls: " + json.dumps([part["function_call"]], ensure_ascii=False, sort_keys=True))
            elif "function_response" in part:
                lines.append("tool_outputs: " + json.dumps([part["function_response"]], ensure_ascii=False,
                                                           sort_keys=True, default=str))
    return lines


def _turn_activity(turn: Mapping[str, Any]) -> list[str]:
    """A turn's tool calls, their outputs and the agents' text, in order."""
    if turn.get("events"):
        return _event_lines(turn["events"])
    lines = [f"{r['author']}: {r['text']}" for r in turn.get("intermediate_responses") or []]
    for call in turn.get("tool_calls") or []:
        lines.append("tool_calls: " + json.dumps([{"name": call["tool_name"], "args": call.get("tool_input") or {}}],
                                                 ensure_ascii=False, sort_keys=True))
        if "response" in call:
            lines.append("tool_outputs: " + json.dumps([{"name": call["tool_name"], "response": call["response"]}],
                                                       ensure_ascii=False, sort_keys=True, default=str))
    return lines


def conversation(turns: list[dict[str, Any]]) -> str:
    out = []
    for i, turn in enumerate(turns):
        out.append(f"USER TURN {i + 1}: {turn.get('prompt') or ''}")
        out.extend(_turn_activity(turn))
        out.append(f"AGENT RESPONSE {i + 1}: {turn.get('response') or ''}")
    return "\n".join(out)


def _history(turns: list[dict[str, Any]]) -> list[dict[str, str]] | None:
    history = []
    for t in turns:
        history += [{"role": "user", "text": t.get("prompt") or ""}, {"role": "model", "text": t.get("response") or ""}]
    return history or None


def turn_fields(fields: Mapping[str, Any], turns: list[dict[str, Any]], i: int) -> dict[str, Any]:
    """The variables of turn i: its prompt, response, reference and tool calls,
    the agent's instruction and tools, and the turns before it as history."""
    turn = turns[i]
    out = dict(fields)
    out.update(
        prompt=turn.get("prompt", fields.get("prompt")),
        response=turn.get("response", fields.get("response") if len(turns) == 1 else None),
        reference=(turn.get("expected") or {}).get("response", fields.get("reference") if len(turns) == 1 else None),
        developer_instruction=developer_instruction(fields, turn),
        tool_declarations=tool_declarations(fields, turn),
        tool_calls=tool_calls(turn),
        intermediate_responses=[r["text"] for r in turn.get("intermediate_responses") or []],
        grounding_metadata=grounding(turn),
    )
    if i > 0 or "history" not in fields:
        out["history"] = _history(turns[:i]) if i > 0 else fields.get("history")
    return out


def _steps(fields: Mapping[str, Any], turns: list[dict[str, Any]], i: int, intermediate: bool) -> list[Unit]:
    """Turn i's natural-language responses, each with the context before it (ADK's
    hallucinations_v1: developer instructions, user prompt, tool definitions,
    grounding metadata, then the turn's earlier activity)."""
    turn = turns[i]
    base = turn_fields(fields, turns, i)
    head = []
    for name, value in (("Developer instructions", base["developer_instruction"]), ("User prompt", base["prompt"]),
                        ("Tool definitions", base["tool_declarations"]), ("Grounding metadata", base["grounding_metadata"]),
                        ("Context", fields.get("context"))):
        if value:
            head.append(f"{name}:\n{value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)}")
    steps: list[tuple[str, list[str]]] = []  # (text, activity before it)
    if intermediate:
        if turn.get("events"):
            before: list[dict[str, Any]] = []
            for e in turn["events"]:
                text = "".join(p.get("text", "") for p in e.get("parts") or [] if "text" in p)
                if text.strip() and e.get("author") != "user":
                    steps.append((text, _event_lines(before)))
                before.append(e)
        else:  # no events recorded: the order of texts and calls is unknown, so each sees the turn's calls
            steps += [(r["text"], _turn_activity({"tool_calls": turn.get("tool_calls")}))
                      for r in turn.get("intermediate_responses") or [] if r["text"].strip()]
    steps.append((base["response"] or "", _turn_activity(turn)))
    units = []
    for n, (text, activity) in enumerate(steps):
        context = "\n\n".join(head + (["Earlier in the turn:\n" + "\n".join(activity)] if activity else []))
        units.append(Unit(i, n, {**base, "response": text, "step_context": context},
                          skip=None if text.strip() else "no text to judge"))
    return units


def units_of(fields: Mapping[str, Any], unit: str, intermediate_steps: bool = False) -> list[Unit]:
    turns = trace_of(fields)
    if unit == "instance":
        last = len(turns) - 1
        view = turn_fields(fields, turns, last) if "invocations" in fields else dict(fields)
        return [Unit(None, None, view, tuple(turns[last].get("rubrics") or ()))]
    if unit == "turn":
        units = []
        for i, turn in enumerate(turns):
            view = turn_fields(fields, turns, i)
            skip = None if view.get("response") is not None else "the turn has no final response"
            units.append(Unit(i, None, view, tuple(turn.get("rubrics") or ()), skip))
        return units
    if unit == "step":
        return [u for i in range(len(turns)) for u in _steps(fields, turns, i, intermediate_steps)]
    if unit == "conversation":
        last = len(turns) - 1
        view = turn_fields(fields, turns, last)
        names = sorted({n for t in turns for n in _agents(t)})
        view.update(conversation=conversation(turns), agent_instructions=view["developer_instruction"],
                    user_turns="\n".join(f"USER TURN {i + 1}: {t.get('prompt') or ''}" for i, t in enumerate(turns)),
                    tool_calls=[c for t in turns for c in tool_calls(t)])
        if names:
            view["agent_instructions"] = "\n\n".join(
                f"[{n}] {get_key(_agents(turns[last]).get(n) or {}, 'instructions') or ''}" for n in names)
        return [Unit(last, None, view, tuple(turns[last].get("rubrics") or ()))]
    raise ValueError(f"unknown unit {unit!r}")
