"""OpenTelemetry GenAI traces as agent cases: OTLP JSON spans -> the one instance model.

Pure conversion, no Beam (transforms/read_otel.py groups the spans in the pipeline):

- `spans_of_request`: an OTLP ExportTraceServiceRequest in its JSON encoding
  (resourceSpans -> scopeSpans -> spans) -> flat span dicts;
- `check_trace`: one trace's spans deduplicated and checked (a root, every parent present,
  no span ending before it starts), with what was wrong;
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
The OTLP JSON decoding is written here: no library reads OTLP JSON into Python values
(opentelemetry-proto reads protobuf; OTLP JSON's hex ids are not protobuf's JSON mapping).
"""
from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Iterable, Mapping

from evalbeam.metrics.rows.instance import MISSING_BECAUSE

# spans' operations (gen_ai.operation.name), and the older span names that mean them
MODEL_OPERATIONS = ("chat", "generate_content", "text_completion")
TOOL_OPERATION = "execute_tool"
MERGED_TOOLS = "(merged tools)"  # ADK's span around parallel tool calls: not a call of its own
CONVERSATION_KEYS = ("gen_ai.conversation.id", "gcp.vertex.agent.session_id")
NO_CONTENT = ("the trace recorded no message content (content capture was off: set "
              "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY, or SPAN_AND_EVENT, where the agent runs)")
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR", "STATUS_CODE_UNSET": "UNSET", "STATUS_CODE_OK": "OK",
           "STATUS_CODE_ERROR": "ERROR"}


class SpanError(ValueError):
    """A span (or request) that cannot be read: the message names it and the reason."""


# ------------------------------------------------------------------ OTLP JSON


def _hex_id(value: Any, size: int, what: str) -> str:
    """A trace (16 bytes) or span (8 bytes) id: OTLP JSON's hex, or protobuf JSON's base64."""
    if not isinstance(value, str) or not value:
        raise SpanError(f"{what} is missing")
    if len(value) == 2 * size:
        try:
            int(value, 16)
            return value.lower()
        except ValueError:
            pass
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == size:
        return raw.hex()
    raise SpanError(f"{what} {value[:60]!r} is not {2 * size} hex digits (nor base64 of {size} bytes)")


def any_value(value: Any) -> Any:
    """An OTLP AnyValue as a Python value."""
    if not isinstance(value, dict):
        return value
    for key, item in value.items():
        if key == "stringValue":
            return item
        if key == "boolValue":
            return bool(item)
        if key == "intValue":
            return int(item)  # int64: a JSON string in OTLP JSON
        if key == "doubleValue":
            return float(item)
        if key == "arrayValue":
            return [any_value(v) for v in (item or {}).get("values", [])]
        if key == "kvlistValue":
            return attribute_map((item or {}).get("values", []))
        if key == "bytesValue":
            return item
    return None


def attribute_map(attributes: Any) -> dict[str, Any]:
    if not isinstance(attributes, list):
        return {}
    return {a["key"]: any_value(a.get("value")) for a in attributes if isinstance(a, dict) and "key" in a}


def _nanos(value: Any, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SpanError(f"{what} {value!r} is not a time in nanoseconds") from None


def _status(value: Any, span_id: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpanError(f"span {span_id} status {str(value)[:60]!r} is not an object ({{code, message}})")
    return value


def _events(value: Any, span_id: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpanError(f"span {span_id} events is not a list")
    return [{"name": str(e.get("name") or ""),
             "time": _nanos(e.get("timeUnixNano") or 0, f"span {span_id} event timeUnixNano"),
             "attributes": attribute_map(e.get("attributes"))}
            for e in value if isinstance(e, dict)]


def span_of(raw: Mapping[str, Any], resource: Mapping[str, Any], scope: str) -> dict[str, Any]:
    """One OTLP JSON span as a flat dict (the ids as lower-case hex)."""
    if not isinstance(raw, dict):
        raise SpanError("a span is not a JSON object")
    trace_id = _hex_id(raw.get("traceId"), 16, "traceId")
    span_id = _hex_id(raw.get("spanId"), 8, "spanId")
    parent = raw.get("parentSpanId") or None
    status = _status(raw.get("status"), span_id)
    try:
        attributes = attribute_map(raw.get("attributes"))
    except (TypeError, AttributeError, ValueError) as e:  # an AnyValue that is not what its key says
        raise SpanError(f"span {span_id} attributes cannot be read ({type(e).__name__}: {str(e)[:200]})") from None
    try:
        status_code = _STATUS.get(status.get("code", 0), "UNSET")
    except TypeError:  # an unhashable code
        raise SpanError(f"span {span_id} status.code {str(status.get('code'))[:60]!r} is not a status code") from None
    span = {
        "trace_id": trace_id, "span_id": span_id,
        "parent_id": _hex_id(parent, 8, f"span {span_id} parentSpanId") if parent else None,
        "name": str(raw.get("name") or ""),
        "start": _nanos(raw.get("startTimeUnixNano"), f"span {span_id} startTimeUnixNano"),
        "end": _nanos(raw.get("endTimeUnixNano"), f"span {span_id} endTimeUnixNano"),
        "attributes": attributes,
        "events": _events(raw.get("events"), span_id),
        "status": status_code,
        "status_message": str(status.get("message") or ""),
        "scope": scope,
    }
    if resource.get("service.name"):
        span["service"] = str(resource["service.name"])
    return span


# what a malformed request raises where a field is not of its type (a string for an object...)
_UNREADABLE = (TypeError, AttributeError, ValueError)


def _why(where: str, error: Exception) -> str:
    return str(error) if isinstance(error, SpanError) else f"{where} cannot be read ({type(error).__name__}: {str(error)[:200]})"


def _spans_in(item: Any, key: str, *older: str) -> list[Any]:
    """The list under `key` (or an older name of it) of an object; [] where there is none."""
    if not isinstance(item, dict):
        return []
    for name in (key, *older):
        value = item.get(name)
        if value:
            return value if isinstance(value, list) else []
    return []


def spans_of_request(request: Any) -> tuple[list[dict[str, Any]], list[tuple[str, Any]]]:
    """An ExportTraceServiceRequest (JSON) -> (its spans, [(reason, raw span)] of those unreadable).
    A resource or scope that cannot be read makes each of its spans (or, where even they cannot be
    told apart, the item itself) unreadable with the reason naming the field; the rest is read."""
    if not isinstance(request, dict) or not isinstance(request.get("resourceSpans"), list):
        raise SpanError("not an OTLP ExportTraceServiceRequest: it has no resourceSpans list")
    spans, bad = [], []
    for r, resource_spans in enumerate(request["resourceSpans"]):
        if not isinstance(resource_spans, dict):
            bad.append((f"resourceSpans[{r}] is not a JSON object", resource_spans))
            continue
        # instrumentationLibrarySpans: OTLP before 0.15's rename
        scopes = resource_spans.get("scopeSpans") or resource_spans.get("instrumentationLibrarySpans") or []
        try:
            resource_field = resource_spans.get("resource")
            if resource_field is not None and not isinstance(resource_field, dict):
                raise SpanError(f"resourceSpans[{r}].resource is not a JSON object")
            resource = attribute_map((resource_field or {}).get("attributes"))
            if not isinstance(scopes, list):
                raise SpanError(f"resourceSpans[{r}].scopeSpans is not a list")
        except _UNREADABLE as e:
            why = _why(f"resourceSpans[{r}].resource", e)
            raws = [raw for scope in (scopes if isinstance(scopes, list) else [])
                    for raw in _spans_in(scope, "spans")] or [resource_spans]
            bad += [(why, raw) for raw in raws]
            continue
        for s, scope_spans in enumerate(scopes):
            where = f"resourceSpans[{r}].scopeSpans[{s}]"
            try:
                if not isinstance(scope_spans, dict):
                    raise SpanError(f"{where} is not a JSON object")
                scope_field = scope_spans.get("scope") or scope_spans.get("instrumentationLibrary") or {}
                if not isinstance(scope_field, dict):
                    raise SpanError(f"{where}.scope is not a JSON object")
                scope = str(scope_field.get("name", "") or "")
                raws = scope_spans.get("spans") or []
                if not isinstance(raws, list):
                    raise SpanError(f"{where}.spans is not a list")
            except _UNREADABLE as e:
                bad += [(_why(where, e), raw) for raw in _spans_in(scope_spans, "spans")] or [
                    (_why(where, e), scope_spans)]
                continue
            for raw in raws:
                try:
                    spans.append(span_of(raw, resource, scope))
                except _UNREADABLE as e:
                    bad.append((_why(f"{where} span", e), raw))
    return spans, bad


# Cloud Trace's span storage schema (the _AllSpans view of a linked dataset), as documented in
# "Storage schema for trace data": trace_id, span_id, trace_state, parent_span_id, name (verified);
# start_time, end_time, kind, status {code, message}, attributes (JSON), resource {attributes
# (JSON)}, instrumentation_scope {name}, events [{time, name, attributes (JSON)}] (the OTLP
# fields as that page names them; not verified against a live view, see docs/agents.md).
SPAN_COLUMNS = ("trace_id", "span_id", "parent_span_id", "name", "start_time", "end_time", "attributes")


def _time_nanos(value: Any, what: str) -> int:
    """A BigQuery TIMESTAMP (ISO text as transforms.bigquery hands it over), or nanoseconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        import datetime as dt

        try:
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise SpanError(f"{what} {value!r} is not a timestamp") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.timezone.utc)
        whole = int(moment.replace(microsecond=0).timestamp())
        return whole * 1_000_000_000 + moment.microsecond * 1000
    raise SpanError(f"{what} is missing")


def _attributes_column(value: Any) -> dict[str, Any]:
    value = _json(value)
    if isinstance(value, list):  # OTLP's [{key, value}] form
        return attribute_map(value)
    return dict(value) if isinstance(value, dict) else {}


def span_of_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row of a Cloud Trace span table as a flat span dict (the same as span_of's)."""
    span_id = row.get("span_id")
    status = _json(row.get("status")) or {}
    code = status.get("code", 0) if isinstance(status, dict) else 0
    parent = row.get("parent_span_id") or None
    span = {
        "trace_id": _hex_id(row.get("trace_id"), 16, "trace_id"),
        "span_id": _hex_id(span_id, 8, "span_id"),
        "parent_id": _hex_id(parent, 8, f"span {span_id} parent_span_id") if parent else None,
        "name": str(row.get("name") or ""),
        "start": _time_nanos(row.get("start_time"), f"span {span_id} start_time"),
        "end": _time_nanos(row.get("end_time"), f"span {span_id} end_time"),
        "attributes": _attributes_column(row.get("attributes")),
        "events": [{"name": str(e.get("name") or ""), "time": _time_nanos(e.get("time") or 0, "event time"),
                    "attributes": _attributes_column(e.get("attributes"))}
                   for e in _json(row.get("events")) or [] if isinstance(e, dict)],
        "status": _STATUS.get(code, code if code in ("UNSET", "OK", "ERROR") else "UNSET"),
        "status_message": (status.get("message") if isinstance(status, dict) else "") or "",
        "scope": str(((_json(row.get("instrumentation_scope")) or {}).get("name")) or ""),
    }
    resource = _json(row.get("resource")) or {}
    service = _attributes_column(resource.get("attributes") if isinstance(resource, dict) else None).get("service.name")
    if service:
        span["service"] = str(service)
    return span


def span_size(span: Mapping[str, Any]) -> int:
    """About the bytes a span holds (its attributes' and events' text): what max_trace_bytes counts."""
    return len(json.dumps(span["attributes"], default=str)) + len(json.dumps(span["events"], default=str)) + 200


def conversation_of(spans: Iterable[Mapping[str, Any]]) -> str | None:
    """The conversation (or ADK session) id any of a trace's spans names."""
    for key in CONVERSATION_KEYS:
        for span in spans:
            value = span["attributes"].get(key)
            if isinstance(value, str) and value:
                return value
    return None


# ------------------------------------------------------------------ checking a trace


def dedup(spans: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The spans with each span id once (of copies, the one whose JSON sorts first: the same
    whatever order they came in), and how many copies were dropped."""
    by_id: dict[str, dict[str, Any]] = {}
    for span in spans:
        kept = by_id.get(span["span_id"])
        if kept is None or json.dumps(span, sort_keys=True, default=str) < json.dumps(kept, sort_keys=True, default=str):
            by_id[span["span_id"]] = span
    return list(by_id.values()), len(spans) - len(by_id)


def check_trace(spans: list[dict[str, Any]]) -> str | None:
    """Why a trace's (deduplicated) spans cannot be a turn, else None."""
    trace_id = spans[0]["trace_id"]
    ids = {s["span_id"] for s in spans}
    roots = [s for s in spans if s["parent_id"] is None]
    if not roots:
        return f"trace {trace_id} has no root span (a span without a parent): its root never arrived"
    if len(roots) > 1:
        return f"trace {trace_id} has {len(roots)} root spans ({', '.join(sorted(s['span_id'] for s in roots)[:5])})"
    orphans = sorted(s["span_id"] for s in spans if s["parent_id"] is not None and s["parent_id"] not in ids)
    if orphans:
        span = next(s for s in spans if s["span_id"] == orphans[0])
        return (f"trace {trace_id}: span {orphans[0]} ({span['name']}) has parent {span['parent_id']}, which never "
                f"arrived" + (f" ({len(orphans)} such spans)" if len(orphans) > 1 else ""))
    backwards = [s for s in spans if s["end"] < s["start"]]
    if backwards:
        return f"trace {trace_id}: span {backwards[0]['span_id']} ({backwards[0]['name']}) ends before it starts"
    return None


def skewed_spans(spans: list[dict[str, Any]]) -> int:
    """Spans that start before their parent or end after it: clocks of different hosts
    disagree. Counted, not refused: the turn orders its steps by start time all the same."""
    by_id = {s["span_id"]: s for s in spans}
    count = 0
    for span in spans:
        parent = by_id.get(span["parent_id"]) if span["parent_id"] else None
        if parent is not None and (span["start"] < parent["start"] or span["end"] > parent["end"]):
            count += 1
    return count


# ------------------------------------------------------------------ messages


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


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
        call = {"name": str(part.get("name") or ""), "args": _json(part.get("arguments"))}
        if part.get("id"):
            call["id"] = str(part["id"])
        return {"function_call": call}
    if kind == "tool_call_response":
        response = {"name": str(part.get("name") or ""), "response": _json(part.get("response"))}
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
    value = _json(value)
    if not isinstance(value, list):
        return None
    return [m for m in (_message(item) for item in value) if m is not None]


_EVENT_ROLES = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}


def _event_message(event: Mapping[str, Any]) -> dict[str, Any] | None:
    attrs = event["attributes"]
    body = _json(attrs.get("message", attrs.get("body")))
    if not isinstance(body, dict):
        body = {k: _json(v) for k, v in attrs.items() if k in ("content", "tool_calls", "role")}
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
        request = _json(attrs.get("gcp.vertex.agent.llm_request"))
        if isinstance(request, dict) and request.get("contents"):
            inputs = _messages(request["contents"])
    if outputs is None:
        response = _json(attrs.get("gcp.vertex.agent.llm_response"))
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
            value = _json(attrs[key])
            if key.startswith("gcp.") and value == {} and "gen_ai.tool.call.arguments" not in attrs:
                continue  # ADK's "{}" when content is not captured
            return True, value
    return False, None


def _tool_result(span: Mapping[str, Any]) -> tuple[bool, Any]:
    attrs = span["attributes"]
    for key in ("gen_ai.tool.call.result", "gcp.vertex.agent.tool_response"):
        if key in attrs:
            value = _json(attrs[key])
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
    instructions = next((_json(s["attributes"]["gen_ai.system_instructions"]) for s in all_spans
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


# ------------------------------------------------------------------ scores out

EVALUATION_EVENT = "gen_ai.evaluation.result"
# error.type's value for a metric that could not score: the conventions' own fallback for an
# error class the producer does not enumerate (the row's error text goes in the explanation)
OTHER_ERROR = "_OTHER"


def _attribute(key: str, value: Any) -> dict[str, Any]:
    """An OTLP JSON KeyValue (string, double, or bool, as evaluation events need)."""
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, (int, float)):
        return {"key": key, "value": {"doubleValue": float(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def evaluation_record(root: Mapping[str, str], result: Mapping[str, Any], time_nanos: int,
                      run_id: str) -> dict[str, Any]:
    """One metric_results row -> an OTLP JSON LogRecord of a `gen_ai.evaluation.result` event,
    linked to the span it evaluates (`root`: {trace_id, span_id}, lower-case hex as OTLP JSON has them)."""
    attributes = [_attribute("gen_ai.evaluation.name", result["metric"])]
    error = result.get("error")
    if error is not None:
        attributes.append(_attribute("error.type", OTHER_ERROR))
    elif result.get("score") is not None:
        attributes.append(_attribute("gen_ai.evaluation.score.value", result["score"]))
    if error is None and result.get("passed") is not None:
        attributes.append(_attribute("gen_ai.evaluation.score.label", "pass" if result["passed"] else "fail"))
    explanation = result.get("explanation") or error
    if explanation:
        attributes.append(_attribute("gen_ai.evaluation.explanation", explanation))
    attributes += [_attribute("evalbeam.run_id", run_id), _attribute("evalbeam.instance_id", result["instance_id"])]
    return {"timeUnixNano": str(time_nanos), "observedTimeUnixNano": str(time_nanos), "eventName": EVALUATION_EVENT,
            "traceId": root["trace_id"], "spanId": root["span_id"], "attributes": attributes}


def evaluation_request(otel_case: Mapping[str, Any], results: Iterable[Mapping[str, Any]], time_nanos: int,
                       run_id: str, version: str) -> dict[str, Any] | None:
    """An instance's metric_results rows -> one ExportLogsServiceRequest (its JSON encoding) of
    their evaluation events, each linked to the case's first trace's root span (a conversation's
    score is of the whole conversation: it sits on its first turn); None when there are no rows."""
    root = otel_case["roots"][0]
    records = [evaluation_record(root, r, time_nanos, run_id) for r in results]
    if not records:
        return None
    return {"resourceLogs": [{
        "resource": {"attributes": [_attribute("service.name", "evalbeam")]},
        "scopeLogs": [{"scope": {"name": "evalbeam", "version": version}, "logRecords": records}],
    }]}
