"""Run a real ADK 2.13 agent (tests/inference_agent.py) with OpenTelemetry's SDK and its
in-memory span exporter, message content captured on the spans (SPAN_ONLY), and write
what it traced as OTLP JSON, plus ADK's own sessions (for ADK's evaluators), in the agent
venv (.agent/):

    EVALBEAM_TEST_MODEL_URL=... python otel_traces.py CASES.json OUT_DIR

CASES: [[session_id, [user text, ...]]]. OUT_DIR gets traces.jsonl (one OTLP
ExportTraceServiceRequest per line, one line per session, spans shuffled within a line) and
sessions.json ([[session_id, [ADK Event as JSON, ...]]]).

The OTLP JSON encoding is written here (otlp_request): opentelemetry-exporter-otlp-proto-common
(which encodes protobuf) is not in the locks, and OTLP's JSON differs from protobuf's JSON
mapping in its ids (hex, not base64) anyway."""
import asyncio
import json
import os
import random
import sys

os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(PROVIDER)


def any_value(value):
    """An attribute value as OTLP JSON's AnyValue."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 is a JSON string in OTLP JSON
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def attributes(attrs):
    return [{"key": k, "value": any_value(v)} for k, v in (attrs or {}).items()]


def otlp_span(span):
    ctx = span.get_span_context()
    out = {"traceId": f"{ctx.trace_id:032x}", "spanId": f"{ctx.span_id:016x}", "name": span.name,
           "kind": int(span.kind.value) + 1, "startTimeUnixNano": str(span.start_time),
           "endTimeUnixNano": str(span.end_time), "attributes": attributes(span.attributes),
           "events": [{"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": attributes(e.attributes)}
                      for e in span.events],
           "status": {"code": {"UNSET": 0, "OK": 1, "ERROR": 2}[span.status.status_code.name],
                      **({"message": span.status.description} if span.status.description else {})}}
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    return out


def otlp_request(spans):
    by_scope = {}
    for span in spans:
        scope = span.instrumentation_scope
        by_scope.setdefault((scope.name, scope.version or ""), []).append(otlp_span(span))
    resource = spans[0].resource.attributes if spans else {}
    return {"resourceSpans": [{"resource": {"attributes": attributes(resource)}, "scopeSpans": [
        {"scope": {"name": name, "version": version}, "spans": items} for (name, version), items in by_scope.items()]}]}


async def main(cases_path, out_dir):
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    from tests.inference_agent import root_agent

    sessions = InMemorySessionService()
    runner = Runner(app_name="weather_app", agent=root_agent, session_service=sessions)
    rng = random.Random(7)
    lines, recorded = [], []
    for session_id, texts in json.load(open(cases_path)):
        EXPORTER.clear()
        await sessions.create_session(app_name="weather_app", user_id="u1", session_id=session_id)
        for text in texts:
            message = types.Content(role="user", parts=[types.Part(text=text)])
            try:
                async for _ in runner.run_async(user_id="u1", session_id=session_id, new_message=message):
                    pass
            except Exception as e:  # noqa: BLE001 - a tool that raises ends the turn; its span records the error
                print(f"{session_id}: {type(e).__name__}: {e}", file=sys.stderr)
        spans = list(EXPORTER.get_finished_spans())
        rng.shuffle(spans)  # exporters send spans as they end, in batches: no order to rely on
        lines.append(json.dumps(otlp_request(spans)))
        session = await sessions.get_session(app_name="weather_app", user_id="u1", session_id=session_id)
        recorded.append([session_id, [e.model_dump(mode="json", exclude_none=True, by_alias=True)
                                      for e in session.events]])
    with open(os.path.join(out_dir, "traces.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "sessions.json"), "w") as f:
        json.dump(recorded, f)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
