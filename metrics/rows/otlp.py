"""The OTLP JSON wire format: spans in (an ExportTraceServiceRequest's JSON encoding, or a row
of Cloud Trace's span table), OTLP JSON KeyValues out; and the checks a trace's spans must pass.

Pure conversion, no Beam (transforms/read_otel.py groups the spans in the pipeline):

- `spans_of_request`: an OTLP ExportTraceServiceRequest in its JSON encoding
  (resourceSpans -> scopeSpans -> spans) -> flat span dicts;
- `span_of_row`: a row of Cloud Trace's span table -> the same flat span dict;
- `dedup`, `check_trace`: one trace's spans deduplicated and checked (a root, every parent
  present, no span ending before it starts), with what was wrong.

What the spans mean (the GenAI conventions: a trace as an agent's turn) is metrics/rows/otel.py.
The OTLP JSON decoding is written here: no library reads OTLP JSON into Python values
(opentelemetry-proto reads protobuf; OTLP JSON's hex ids are not protobuf's JSON mapping).
"""
from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Mapping

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
    value = json_value(value)
    if isinstance(value, list):  # OTLP's [{key, value}] form
        return attribute_map(value)
    return dict(value) if isinstance(value, dict) else {}


def span_of_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row of a Cloud Trace span table as a flat span dict (the same as span_of's)."""
    span_id = row.get("span_id")
    status = json_value(row.get("status")) or {}
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
                   for e in json_value(row.get("events")) or [] if isinstance(e, dict)],
        "status": _STATUS.get(code, code if code in ("UNSET", "OK", "ERROR") else "UNSET"),
        "status_message": (status.get("message") if isinstance(status, dict) else "") or "",
        "scope": str(((json_value(row.get("instrumentation_scope")) or {}).get("name")) or ""),
    }
    resource = json_value(row.get("resource")) or {}
    service = _attributes_column(resource.get("attributes") if isinstance(resource, dict) else None).get("service.name")
    if service:
        span["service"] = str(service)
    return span


def span_size(span: Mapping[str, Any]) -> int:
    """About the bytes a span holds (its attributes' and events' text): what max_trace_bytes counts."""
    return len(json.dumps(span["attributes"], default=str)) + len(json.dumps(span["events"], default=str)) + 200


# ------------------------------------------------------------------ checking a trace


# a span's place in the input (set by the reader): not its content
PLACE_KEYS = ("origin", "line")


def _content(span: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in span.items() if k not in PLACE_KEYS}, sort_keys=True, default=str)


def _place(span: Mapping[str, Any]) -> tuple[str, int]:
    return str(span.get("origin", "")), int(span.get("line") or 0)


def dedup(spans: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int, list[tuple[dict[str, Any], list[dict[str, Any]]]]]:
    """The spans with each span id once, and what else came with that id:
    (kept, identical copies dropped, [(kept span, the copies of one other content)]).

    Identical copies (the same content wherever they were read: an exporter or collector
    that retried sent the span again) are dropped and only counted; of them the one read
    first (by file, then line) is kept. A span id that came with different contents is a
    conflict: the content whose JSON sorts first is kept (the same whatever order they
    came in), and each other content's copies are returned for a dead letter naming both."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        copies = by_id.get(span["span_id"])
        if copies is None:
            by_id[span["span_id"]] = [span]
        else:
            copies.append(span)
    kept, duplicates, conflicts = [], 0, []
    for copies in by_id.values():
        if len(copies) == 1:
            kept.append(copies[0])
            continue
        contents: dict[str, list[dict[str, Any]]] = {}
        for span in copies:
            contents.setdefault(_content(span), []).append(span)
        first, *others = sorted(contents)
        span = min(contents[first], key=_place)
        kept.append(span)
        duplicates += len(contents[first]) - 1
        conflicts += [(span, sorted(contents[other], key=_place)) for other in others]
    return kept, duplicates, conflicts


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


def awaiting(spans: list[dict[str, Any]]) -> bool:
    """Whether spans yet to arrive could make the trace whole: it has no root yet, or a span's
    parent has not arrived (a span is exported when it ends: a root ends last)."""
    ids = {s["span_id"] for s in spans}
    return all(s["parent_id"] is not None for s in spans) or any(
        s["parent_id"] is not None and s["parent_id"] not in ids for s in spans)


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


def json_value(value: Any) -> Any:
    """A value that may be JSON text (an attribute holding a JSON document) as a Python value;
    any other value (or text that is not JSON) as it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def key_value(key: str, value: Any) -> dict[str, Any]:
    """An OTLP JSON KeyValue (string, double, or bool, as evaluation events need)."""
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, (int, float)):
        return {"key": key, "value": {"doubleValue": float(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}

