"""metrics.rows.otel: OpenTelemetry GenAI spans as the one instance model.

The spans are a real ADK 2.13 agent's (tests/data/otel/adk_weather.jsonl, written by
tests/agent_env/otel_traces.py with OpenTelemetry's SDK and in-memory exporter; see
docs/development.md to regenerate them); the older forms of the conventions are made from
those same spans by moving their content where the older instrumentations put it, and must
read as the same turns."""
from __future__ import annotations

import base64
import copy
import json
from collections import defaultdict
from pathlib import Path

import pytest

from evalbeam.metrics.catalog import get_metric
from evalbeam.metrics.rows.fields import InvalidField
from evalbeam.metrics.rows.instance import RowSpec, build_instance
from evalbeam.metrics.rows.otel import NO_CONTENT, case_record, conversation_of
from evalbeam.metrics.rows.otlp import SpanError, check_trace, dedup, skewed_spans, spans_of_request

DATA = Path(__file__).resolve().parents[2] / "data" / "otel"


def traces_of(path: Path) -> dict[str, list[dict]]:
    traces = defaultdict(list)
    for line in path.read_text().splitlines():
        spans, bad = spans_of_request(json.loads(line))
        assert not bad
        for span in spans:
            traces[span["trace_id"]].append(span)
    return dict(traces)


def turns(traces: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """conversation id -> its turns, in order, as case_record makes them."""
    by_conversation = defaultdict(list)
    for spans in traces.values():
        by_conversation[conversation_of(spans)].append(spans)
    return {key: case_record(key, group)["invocations"] for key, group in by_conversation.items()}


def sessions() -> dict[str, list[dict]]:
    return dict(json.loads((DATA / "adk_weather_sessions.json").read_text()))


def summary(turn: dict) -> dict:
    return {"prompt": turn["prompt"], "response": turn["response"],
            "calls": [(c["tool_name"], c.get("tool_input"), c.get("response")) for c in turn["tool_calls"]]}


def session_turns(events: list[dict]) -> list[dict]:
    """The turns ADK's session recorded: per invocation, the user's text, the calls with their
    responses (matched by call id) and the last text the agent gave."""
    out: dict[str, dict] = {}
    for event in events:
        turn = out.setdefault(event["invocationId"], {"prompt": "", "response": "", "calls": [], "results": {}})
        for part in (event.get("content") or {}).get("parts", []):
            if event["author"] == "user" and "text" in part:
                turn["prompt"] = part["text"]
            elif "functionCall" in part:
                turn["calls"].append(part["functionCall"])
            elif "functionResponse" in part:
                turn["results"][part["functionResponse"]["id"]] = part["functionResponse"]["response"]
            elif "text" in part:
                turn["response"] = part["text"]
    return [{"prompt": t["prompt"], "response": t["response"],
             "calls": [(c["name"], c["args"], t["results"].get(c["id"])) for c in t["calls"]]} for t in out.values()]


def test_adk_traces_read_as_the_turns_adk_recorded_in_its_session():
    """Every turn of every session: the prompt, the final response and each tool call with its
    arguments and result, read off the spans, are what ADK's own session recorded."""
    read = turns(traces_of(DATA / "adk_weather.jsonl"))
    recorded = sessions()
    assert set(read) == set(recorded) == {"s_two", "s_none", "s_raise"}
    for session_id, events in recorded.items():
        expected = session_turns(events)
        if session_id == "s_raise":  # the raising tool: ADK's session holds no response for its call
            expected[0]["calls"] = [(n, a, {"error": "RuntimeError: the tool exploded: disk full"})
                                    for n, a, _ in expected[0]["calls"]]
        assert [summary(t) for t in read[session_id]] == expected, session_id
    two = read["s_two"]
    assert len(two) == 2 and two[0]["invocation_id"] != two[1]["invocation_id"]
    assert all(t["duration"]["total"] >= t["duration"]["model"] > 0 for t in two)
    usage = [e["usage"] for t in two for e in t["events"] if "usage" in e]
    assert usage and all(u["prompt_token_count"] > 0 for u in usage)


def test_a_failing_tool_fails_the_case_and_names_the_error():
    traces = traces_of(DATA / "adk_weather.jsonl")
    [raising] = [t for t in traces.values() if conversation_of(t) == "s_raise"]
    row = case_record("k", [raising])
    assert row["failure"] == 1
    assert any("execute_tool explode: RuntimeError: the tool exploded: disk full" == e for e in row["errors"])
    others = [t for t in traces.values() if t is not raising]
    assert all(case_record("k", [t])["failure"] == 0 for t in others)


def _older_events(span: dict) -> None:
    """The current conventions' message attributes moved to the older per-message span events."""
    attrs = span["attributes"]
    inputs = json.loads(attrs.pop("gen_ai.input.messages", "null") or "null")
    outputs = json.loads(attrs.pop("gen_ai.output.messages", "null") or "null")
    for message in inputs or []:
        name = {"user": "gen_ai.user.message", "assistant": "gen_ai.assistant.message"}[message["role"]]
        texts = [p["content"] for p in message["parts"] if p["type"] == "text"]
        calls = [{"id": p["id"], "type": "function", "function": {"name": p["name"], "arguments": p["arguments"]}}
                 for p in message["parts"] if p["type"] == "tool_call"]
        event = {"content": "\n".join(texts)} if texts else {}
        if calls:
            event["tool_calls"] = json.dumps(calls)
        span["events"].append({"name": name, "time": span["start"], "attributes": event})
    for message in outputs or []:
        body = {"role": "assistant", "content": "\n".join(p["content"] for p in message["parts"] if p["type"] == "text")
                or None, "tool_calls": [{"id": p["id"], "type": "function",
                                         "function": {"name": p["name"], "arguments": p["arguments"]}}
                                        for p in message["parts"] if p["type"] == "tool_call"]}
        span["events"].append({"name": "gen_ai.choice", "time": span["end"],
                               "attributes": {"message": json.dumps({k: v for k, v in body.items() if v})}})


def _operation_details(span: dict) -> None:
    """The message attributes moved to a gen_ai.client.inference.operation.details event."""
    moved = {k: span["attributes"].pop(k) for k in ("gen_ai.input.messages", "gen_ai.output.messages")
             if k in span["attributes"]}
    if moved:
        span["events"].append({"name": "gen_ai.client.inference.operation.details", "time": span["end"],
                               "attributes": moved})


def _genai_part(part: dict) -> dict:
    if part["type"] == "text":
        return {"text": part["content"]}
    if part["type"] == "tool_call":
        return {"function_call": {"name": part["name"], "args": part["arguments"], "id": part["id"]}}
    return {"function_response": {"id": part["id"], "response": part["response"]}}


def _adk_attributes(span: dict) -> None:
    """ADK's own attributes (gcp.vertex.agent.*: google-genai's Content as JSON), as ADK wrote
    them before the GenAI conventions' messages: a call_llm span."""
    attrs = span["attributes"]
    if attrs.get("gen_ai.operation.name") == "generate_content":
        inputs = json.loads(attrs.pop("gen_ai.input.messages"))
        outputs = json.loads(attrs.pop("gen_ai.output.messages"))
        del attrs["gen_ai.operation.name"]
        span["name"] = "call_llm"
        attrs["gcp.vertex.agent.llm_request"] = json.dumps({"contents": [
            {"role": "model" if m["role"] == "assistant" else "user", "parts": [_genai_part(p) for p in m["parts"]]}
            for m in inputs]})
        attrs["gcp.vertex.agent.llm_response"] = json.dumps({"content": {
            "role": "model", "parts": [_genai_part(p) for p in outputs[0]["parts"]]}})
    elif "gen_ai.tool.call.arguments" in attrs:
        attrs["gcp.vertex.agent.tool_call_args"] = attrs.pop("gen_ai.tool.call.arguments")
        if "gen_ai.tool.call.result" in attrs:
            attrs["gcp.vertex.agent.tool_response"] = attrs.pop("gen_ai.tool.call.result")


@pytest.mark.parametrize("older", [_older_events, _operation_details, _adk_attributes])
def test_the_older_forms_of_the_conventions_read_as_the_same_turns(older):
    traces = traces_of(DATA / "adk_weather.jsonl")
    moved = copy.deepcopy(traces)
    for spans in moved.values():
        for span in spans:
            older(span)
    assert not any("gen_ai.input.messages" in s["attributes"] for t in moved.values() for s in t)
    current = {k: [summary(t) for t in v] for k, v in turns(traces).items()}
    assert {k: [summary(t) for t in v] for k, v in turns(moved).items()} == current


def test_no_content_recorded_gives_each_metric_needing_it_an_error_naming_why():
    """Content capture off (the same agent run with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=false):
    no turns, no prompt, no tool arguments are invented; trajectory and response metrics get
    the reason; latency and failure, which the spans do record, are kept."""
    traces = traces_of(DATA / "adk_weather_no_content.jsonl")
    assert len(traces) == 4
    requirements = tuple((name, get_metric(name).inputs) for name in ("tool_trajectory_avg_score", "latency_in_seconds"))
    spec = RowSpec({}, "instance_id", (), requirements)
    for key, spans in traces.items():
        row = case_record(key, [spans])
        assert "invocations" not in row and "prompt" not in row
        instance = build_instance(row, spec, "t")
        assert instance.fields["latency_in_seconds"] > 0
        [missing] = instance.missing_inputs["tool_trajectory_avg_score"]
        assert NO_CONTENT in missing and missing.startswith("invocations")
        assert "latency_in_seconds" not in instance.missing_inputs
    only = RowSpec({}, "instance_id", (), requirements[:1])
    with pytest.raises(InvalidField, match="content capture was off"):
        build_instance(case_record(key, [spans]), only, "t")


def test_checks_name_what_is_wrong_with_a_trace():
    [spans] = [t for t in traces_of(DATA / "adk_weather.jsonl").values() if len(t) == 7]
    assert check_trace(spans) is None
    root = next(s for s in spans if s["parent_id"] is None)
    assert "has no root span" in check_trace([s for s in spans if s is not root])
    parent = next(s for s in spans if s["parent_id"] == root["span_id"])
    orphaned = [s for s in spans if s is not parent]
    assert f"has parent {parent['span_id']}, which never arrived" in check_trace(orphaned)
    twice = spans + [copy.deepcopy(spans[3]), copy.deepcopy(spans[3])]
    kept, copies, conflicts = dedup(twice)
    assert copies == 2 and not conflicts
    assert sorted(s["span_id"] for s in kept) == sorted(s["span_id"] for s in spans)
    backwards = copy.deepcopy(spans)
    backwards[2]["end"] = backwards[2]["start"] - 1
    assert "ends before it starts" in check_trace(backwards)
    assert skewed_spans(spans) == 0
    skewed = copy.deepcopy(spans)
    child = next(s for s in skewed if s["parent_id"] is not None)
    child["start"] -= 10**9  # its host's clock a second behind
    assert skewed_spans(skewed) == 1 and check_trace(skewed) is None


def test_ids_in_protobufs_json_mapping_read_as_otlps_hex():
    request = json.loads((DATA / "adk_weather.jsonl").read_text().splitlines()[0])
    hex_spans, _ = spans_of_request(request)
    for resource in request["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    b64_spans, _ = spans_of_request(request)
    assert b64_spans == hex_spans
    with pytest.raises(SpanError, match="no resourceSpans"):
        spans_of_request({"spans": []})
    request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "xyz"
    spans, bad = spans_of_request(request)
    assert len(spans) == len(hex_spans) - 1 and "traceId 'xyz' is not 32 hex digits" in bad[0][0]


def genai_turns_match_what_the_app_saw(traces_path: Path, calls_path: Path) -> None:
    """The turns read from OpenTelemetry's google-genai instrumentation's spans are what the app
    got from google-genai: the prompt, the response text, and each automatic function call with
    its arguments and result (google-genai hands the model a dict result as {"result": ...})."""
    seen = json.loads(calls_path.read_text())
    read = sorted((case_record(k, [t])["invocations"][0] for k, t in traces_of(traces_path).items()),
                  key=lambda t: [s[0] for s in seen].index(t["prompt"]))
    assert [t["prompt"] for t in read] == [s[0] for s in seen]
    for turn, (_, response, calls) in zip(read, seen):
        assert turn["response"] == response
        assert [(c["tool_name"], c["tool_input"], {"result": c["response"]}) for c in turn["tool_calls"]] == \
            [tuple(c) for c in calls]


def test_google_genai_instrumentation_spans_read_as_the_calls_the_app_made():
    """tests/data/otel/genai_weather.jsonl: written by tests/agent_env/otel_genai.py (plain google-genai,
    automatic function calling, opentelemetry-instrumentation-google-genai 1.3b0). Its third call's
    tool spans are nested three deep per call (the instrumentation wraps a reused config's tools again
    on each call): each is read as one call."""
    genai_turns_match_what_the_app_saw(DATA / "genai_weather.jsonl", DATA / "genai_weather.jsonl.calls.json")
    nested = [s for t in traces_of(DATA / "genai_weather.jsonl").values() for s in t
              if s["name"].startswith("execute_tool")]
    assert len(nested) == 1 + 3 + 3


def test_a_malformed_part_of_a_request_makes_its_spans_unreadable_and_the_rest_is_read():
    """A scopeSpans item that is a string, a status that is a string, a resource that is a list, an
    event time that is not a number, an attribute whose value is not its type: each makes its span
    (or its scope's or resource's spans) unreadable with a reason naming the field; every other span
    of the request is read."""
    request = json.loads((DATA / "adk_weather.jsonl").read_text().splitlines()[0])
    good, _ = spans_of_request(request)
    [resource] = request["resourceSpans"]
    spans = resource["scopeSpans"][0]["spans"]
    assert len(spans) >= 4
    broken = copy.deepcopy(spans[:4])
    broken[0]["status"] = "ERROR"
    broken[1].setdefault("events", []).append({"name": "e", "timeUnixNano": "abc"})
    broken[2]["attributes"] = [{"key": "n", "value": {"intValue": "many"}}]
    broken[3]["startTimeUnixNano"] = {"nanos": 1}
    for n, span in enumerate(broken):
        span["spanId"] = f"{n + 1:016x}"
    listed = copy.deepcopy(resource)
    listed["resource"] = [{"key": "service.name"}]
    listed["scopeSpans"][0]["spans"] = copy.deepcopy(spans[:2])
    scoped = {"resource": resource["resource"], "scopeSpans": [
        "not a scope", {"scope": "a string", "spans": copy.deepcopy(spans[:3])}, {"scope": {}, "spans": "none"}]}
    resource["scopeSpans"].append({"scope": {"name": "x"}, "spans": broken})
    request["resourceSpans"] += [listed, scoped, "text"]
    read, bad = spans_of_request(request)
    assert read == good  # the good spans, all of them, as before
    reasons = [reason for reason, _ in bad]
    assert len(bad) == 4 + 2 + 1 + 3 + 1 + 1, reasons
    expected = ["span 0000000000000001 status 'ERROR' is not an object",
                "span 0000000000000002 event timeUnixNano 'abc' is not a time",
                "span 0000000000000003 attributes cannot be read",
                "span 0000000000000004 startTimeUnixNano {'nanos': 1} is not a time",
                "resourceSpans[1].resource is not a JSON object", "resourceSpans[1].resource is not a JSON object",
                "resourceSpans[2].scopeSpans[0] is not a JSON object",
                "resourceSpans[2].scopeSpans[1].scope is not a JSON object"]
    for want, got in zip(expected, reasons):
        assert want in got, (want, got)
    assert reasons[7] == reasons[8] == reasons[9]  # each span of the unreadable scope
    assert "resourceSpans[2].scopeSpans[2].spans is not a list" in reasons[10]
    assert reasons[11] == "resourceSpans[3] is not a JSON object"
