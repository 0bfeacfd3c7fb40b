"""OpenTelemetry GenAI traces as agent cases: flat spans (metrics/rows/otlp.py) -> the one
instance model, by the GenAI semantic conventions.

Pure conversion, no Beam (transforms/read_otel.py groups the spans in the pipeline):

- `turn_of_trace`: one checked trace -> one turn of the `invocations` field (metrics/rows/trace.py);
- `case_record`: the turns of one case (a trace, or every trace of a conversation) -> the
  fields of a dataset row (`invocations`, `latency_in_seconds`, `failure`, ...).

Message content is read from, in this order: the current GenAI conventions' span attributes
(`gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.system_instructions`), the same
on a `gen_ai.client.inference.operation.details` event, the older per-message events
(`gen_ai.user.message`, `gen_ai.system.message`, `gen_ai.assistant.message`,
`gen_ai.tool.message`, `gen_ai.choice`) and ADK's own attributes (`gcp.vertex.agent.llm_request`,
`gcp.vertex.agent.llm_response`, `gcp.vertex.agent.tool_call_args`, `gcp.vertex.agent.tool_response`).
Tool calls come from `execute_tool` spans (`gen_ai.tool.name`, `gen_ai.tool.call.arguments`,
`gen_ai.tool.call.result`), their arguments from the model's tool-call parts where the tool
span has none. A trace whose content was not recorded (content capture off) yields no
prompt, response or tool arguments: the metrics that need them get an error naming why.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from evalbeam.metrics.rows.instance import MISSING_BECAUSE
from evalbeam.metrics.rows.otlp import json_value

# spans' operations (gen_ai.operation.name), and the older span names that mean them
MODEL_OPERATIONS = ("chat", "generate_content", "text_completion")
TOOL_OPERATION = "execute_tool"
MERGED_TOOLS = "(merged tools)"  # ADK's span around parallel tool calls: not a call of its own
CONVERSATION_KEYS = ("gen_ai.conversation.id", "gcp.vertex.agent.session_id")
NO_CONTENT = ("the trace recorded no message content (content capture was off: set "
              "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY, or SPAN_AND_EVENT, where the agent runs)")


def conversation_of(spans: Iterable[Mapping[str, Any]]) -> str | None:
    """The conversation (or ADK session) id any of a trace's spans names."""
    for key in CONVERSATION_KEYS:
        for span in spans:
            value = span["attributes"].get(key)
            if isinstance(value, str) and value:
                return value
    return None



# ------------------------------------------------------------------ messages


def _operation(span: Mapping[str, Any]) -> str:
    op = span["attributes"].get("gen_ai.operation.name")
    if isinstance(op, str) and op:
        return op
    name = span["name"]
    if name.startswith("call_llm") or name.split(" ")[0] in MODEL_OPERATIONS:
        return "generate_content"
    if name.startswith("execute_tool"):
        return TOOL_OPERATION
    return ""


def _part(part: Any) -> dict[str, Any] | None:
    """A message part of the GenAI conventions (or google-genai's, in ADK's attributes) as a
    canonical part: {text[, thought]} | {function_call} | {function_response}."""
    if isinstance(part, str):
        return {"text": part}
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in ("text", "reasoning") or (kind is None and isinstance(part.get("content"), str)):
        out: dict[str, Any] = {"text": str(part.get("content") or "")}
        if kind == "reasoning":
            out["thought"] = True
        return out
    if kind == "tool_call":
        call = {"name": str(part.get("name") or ""), "args": json_value(part.get("arguments"))}
        if part.get("id"):
            call["id"] = str(part["id"])
        return {"function_call": call}
    if kind == "tool_call_response":
        response = {"name": str(part.get("name") or ""), "response": json_value(part.get("response"))}
        if part.get("id"):
            response["id"] = str(part["id"])
        return {"function_response": response}
    # google-genai's Part (ADK's gcp.vertex.agent.* attributes)
    if isinstance(part.get("text"), str):
        return {"text": part["text"], **({"thought": True} if part.get("thought") else {})}
    call = part.get("function_call") or part.get("functionCall")
    if isinstance(call, dict):
        return {"function_call": {k: v for k, v in (("name", call.get("name")), ("args", call.get("args")),
                                                     ("id", call.get("id"))) if v is not None}}
    response = part.get("function_response") or part.get("functionResponse")
    if isinstance(response, dict):
        return {"function_response": {k: v for k, v in (("name", response.get("name")),
                                                         ("response", response.get("response")),
                                                         ("id", response.get("id"))) if v is not None}}
    return None


def _message(message: Any) -> dict[str, Any] | None:
    """{role, parts} of a message in any of the forms above."""
    if not isinstance(message, dict):
        return None
    role = str(message.get("role") or "")
    parts = message.get("parts")
    if parts is None:  # the older per-message events: {content} (text), {tool_calls}
        parts = []
        if message.get("content") is not None:
            content = message["content"]
            parts += content if isinstance(content, list) else [{"type": "text", "content": str(content)}]
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append({"type": "tool_call", "id": call.get("id"), "name": function.get("name"),
                          "arguments": function.get("arguments")})
    if not isinstance(parts, list):
        return None
    return {"role": role, "parts": [p for p in (_part(p) for p in parts) if p is not None]}


def _messages(value: Any) -> list[dict[str, Any]] | None:
    value = json_value(value)
    if not isinstance(value, list):
        return None
    return [m for m in (_message(item) for item in value) if m is not None]


_EVENT_ROLES = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}


def _event_message(event: Mapping[str, Any]) -> dict[str, Any] | None:
    attrs = event["attributes"]
    body = json_value(attrs.get("message", attrs.get("body")))
    if not isinstance(body, dict):
        body = {k: json_value(v) for k, v in attrs.items() if k in ("content", "tool_calls", "role")}
    body.setdefault("role", _EVENT_ROLES.get(event["name"], "assistant"))
    if "content" not in body and "tool_calls" not in body and "parts" not in body:
        return None
    return _message(body)


def model_messages(span: Mapping[str, Any]) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None]:
    """(input messages, output messages) of a model span; None where not recorded."""
    attrs = span["attributes"]
    inputs, outputs = _messages(attrs.get("gen_ai.input.messages")), _messages(attrs.get("gen_ai.output.messages"))
    for event in span["events"]:
        if event["name"] == "gen_ai.client.inference.operation.details":
            inputs = inputs or _messages(event["attributes"].get("gen_ai.input.messages"))
            outputs = outputs or _messages(event["attributes"].get("gen_ai.output.messages"))
    if inputs is None:
        found = [m for m in (_event_message(e) for e in span["events"] if e["name"] in _EVENT_ROLES) if m]
        inputs = found or None
    if outputs is None:
        found = [m for m in (_event_message(e) for e in span["events"] if e["name"] == "gen_ai.choice") if m]
        outputs = found or None
    if inputs is None:  # ADK's own attribute: the LlmRequest as JSON ("{}" when content is not captured)
        request = json_value(attrs.get("gcp.vertex.agent.llm_request"))
        if isinstance(request, dict) and request.get("contents"):
            inputs = _messages(request["contents"])
    if outputs is None:
        response = json_value(attrs.get("gcp.vertex.agent.llm_response"))
        if isinstance(response, dict) and isinstance(response.get("content"), dict):
            outputs = _messages([{"role": "assistant", **response["content"]}])
    return inputs, outputs


def _text(parts: list[dict[str, Any]]) -> str:
    return "\n".join(p["text"] for p in parts if "text" in p and not p.get("thought"))


# ------------------------------------------------------------------ a trace as a turn


def _tool_args(span: Mapping[str, Any]) -> tuple[bool, Any]:
    attrs = span["attributes"]
    for key in ("gen_ai.tool.call.arguments", "gcp.vertex.agent.tool_call_args"):
        if key in attrs:
            value = json_value(attrs[key])
            if key.startswith("gcp.") and value == {} and "gen_ai.tool.call.arguments" not in attrs:
                continue  # ADK's "{}" when content is not captured
            return True, value
    return False, None


def _tool_result(span: Mapping[str, Any]) -> tuple[bool, Any]:
    attrs = span["attributes"]
    for key in ("gen_ai.tool.call.result", "gcp.vertex.agent.tool_response"):
        if key in attrs:
            value = json_value(attrs[key])
            if key.startswith("gcp.") and value == {}:
                continue
            return True, value
    if span["status"] == "ERROR":
        return True, {"error": span["status_message"] or attrs.get("error.type") or "the tool failed"}
    return False, None


def _usage(span: Mapping[str, Any]) -> dict[str, int]:
    attrs = span["attributes"]
    usage = {}
    for key, name in (("gen_ai.usage.input_tokens", "prompt_token_count"),
                      ("gen_ai.usage.output_tokens", "candidates_token_count")):
        if isinstance(attrs.get(key), int) and not isinstance(attrs.get(key), bool):
            usage[name] = attrs[key]
    return usage


def _order(span: Mapping[str, Any]):
    return span["start"], span["end"], span["span_id"]


def turn_of_trace(spans: list[dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """A checked trace's spans -> (its turn, whether its content was recorded)."""
    spans = sorted(spans, key=_order)
    root = next(s for s in spans if s["parent_id"] is None)
    models = [s for s in spans if _operation(s) in MODEL_OPERATIONS]
    tools = [s for s in spans if _operation(s) == TOOL_OPERATION
             and s["attributes"].get("gen_ai.tool.name") != MERGED_TOOLS]
    # A tool span inside a tool span of the same tool is the same call traced again: the google-genai
    # instrumentation (1.3b0) wraps the tools of a reused config once more on every call, nesting
    # one execute_tool span per wrapper. The outermost is the call.
    by_id = {s["span_id"]: s for s in tools}
    tools = [s for s in tools if not (s["parent_id"] in by_id and by_id[s["parent_id"]]["attributes"].get(
        "gen_ai.tool.name") == s["attributes"].get("gen_ai.tool.name"))]
    turn: dict[str, Any] = {}
    invocation = next((s["attributes"].get("gcp.vertex.agent.invocation_id") for s in spans
                       if s["attributes"].get("gcp.vertex.agent.invocation_id")), None)
    turn["invocation_id"] = str(invocation or root["trace_id"])
    read = [(s, *model_messages(s)) for s in models]
    recorded = any(i is not None or o is not None for _, i, o in read)
    prompt = None
    for _, inputs, _ in read:
        if inputs is not None:
            users = [m for m in inputs if m["role"] == "user" and _text(m["parts"])]
            if users:
                prompt = _text(users[-1]["parts"])
            break
    # the model's calls in order: their arguments where a tool span has none
    asked = [p["function_call"] for _, _, outputs in read for m in outputs or [] for p in m["parts"]
             if "function_call" in p]
    calls = []
    for i, span in enumerate(tools):
        name = str(span["attributes"].get("gen_ai.tool.name") or span["name"].removeprefix("execute_tool ").strip())
        call: dict[str, Any] = {"tool_name": name}
        has_args, args = _tool_args(span)
        if not has_args:
            match = next((c for c in asked if c.get("name") == name), None)
            if match is not None:
                asked.remove(match)
                has_args, args = "args" in match, match.get("args")
        else:
            recorded = True
        if has_args and isinstance(args, dict):
            call["tool_input"] = args
        call_id = span["attributes"].get("gen_ai.tool.call.id")
        call["id"] = str(call_id) if call_id else span["span_id"]
        has_result, result = _tool_result(span)
        if has_result:
            call["response"] = result
        calls.append((span, call))
    # events: each model answer and each tool's result, in the order they started
    events, final = [], None
    steps = sorted([(s, "model", outputs) for s, _, outputs in read] + [(s, "tool", c) for s, c in calls],
                   key=lambda item: _order(item[0]))
    for span, kind, item in steps:
        author = str(span["attributes"].get("gen_ai.agent.name") or "model")
        if kind == "model":
            parts = [p for m in item or [] for p in m["parts"] if "function_response" not in p]
            event: dict[str, Any] = {"author": author, "parts": parts, "usage": _usage(span)}
            model = span["attributes"].get("gen_ai.response.model") or span["attributes"].get("gen_ai.request.model")
            if model:
                event["model_version"] = str(model)
            events.append(event)
            if _text(parts) and not any("function_call" in p for p in parts):
                final = event
        else:
            response = {"name": item["tool_name"], "id": item["id"], "response": item.get("response")}
            events.append({"author": author, "parts": [{"function_response": response}]})
    if recorded:
        turn["prompt"] = prompt or ""
        turn["response"] = _text(final["parts"]) if final is not None else ""
        turn["tool_calls"] = [c for _, c in calls]
        turn["intermediate_responses"] = [{"author": e["author"], "text": _text(e["parts"])} for e in events
                                          if e is not final and _text(e["parts"])]
        turn["events"] = [e for e in events if e is not final]
    turn["duration"] = {"total": (root["end"] - root["start"]) / 1e9}
    if tools:
        turn["duration"]["tool"] = sum(s["end"] - s["start"] for s in tools) / 1e9
    if models:
        turn["duration"]["model"] = sum(s["end"] - s["start"] for s in models) / 1e9
    return turn, recorded


def errors_of(spans: Iterable[Mapping[str, Any]]) -> list[str]:
    """The errors the spans' statuses record: '<span name>: <message>'."""
    return [f"{s['name']}: {s['status_message'] or s['attributes'].get('error.type') or 'error'}"
            for s in sorted(spans, key=_order) if s["status"] == "ERROR"]


def case_record(key: str, traces: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """The checked traces of one case, in the order their roots started -> a dataset row:
    `invocations` (a turn per trace), `latency_in_seconds` (the roots' durations summed),
    `failure` (1 when a span's status is ERROR), and where content was not recorded, no
    prompt, response or turns, with the reason the metrics needing them report."""
    traces = sorted(traces, key=lambda t: min(_order(s) for s in t))
    turns, recorded = [], True
    for spans in traces:
        turn, has_content = turn_of_trace(spans)
        turns.append(turn)
        recorded = recorded and has_content
    all_spans = [s for t in traces for s in t]
    errors = errors_of(all_spans)
    # the root span of each turn's trace, in turn order: what output.otel_events links each score to
    roots = [next(s for s in t if s["parent_id"] is None) for t in traces]
    row: dict[str, Any] = {
        "instance_id": key,
        "trace_ids": [t[0]["trace_id"] for t in traces],
        "otel_case": {"roots": [{"trace_id": r["trace_id"], "span_id": r["span_id"]} for r in roots]},
        "latency_in_seconds": sum(t["duration"]["total"] for t in turns),
        "failure": int(bool(errors)),
        "span_count": len(all_spans),
    }
    conversation = conversation_of(all_spans)
    if conversation:
        row["conversation_id"] = conversation
    agents = sorted({str(s["attributes"]["gen_ai.agent.name"]) for s in all_spans
                     if s["attributes"].get("gen_ai.agent.name")})
    if agents:
        row["agent_names"] = agents
    services = sorted({s["service"] for s in all_spans if s.get("service")})
    if services:
        row["service_name"] = services[0]
    if errors:
        row["errors"] = errors
    instructions = next((json_value(s["attributes"]["gen_ai.system_instructions"]) for s in all_spans
                         if s["attributes"].get("gen_ai.system_instructions")), None)
    if isinstance(instructions, list):
        text = _text([p for p in (_part(i) for i in instructions) if p])
        if text:
            row["instruction"] = text
    elif isinstance(instructions, str):
        row["instruction"] = instructions
    if recorded:
        row["invocations"] = turns
    else:
        row[MISSING_BECAUSE] = {f: NO_CONTENT for f in ("invocations", "prompt", "response", "predicted_trajectory")}
    return row
