"""Run a real ADK 2.13 agent (tests/inference_agent.py) with OpenTelemetry's SDK and its
in-memory span exporter, message content captured on the spans (SPAN_ONLY), and write
what it traced as OTLP JSON, plus ADK's own sessions (for ADK's evaluators), in the agent
venv (.agent/):

    EVALBEAM_TEST_MODEL_URL=... python otel_traces.py CASES.json OUT_DIR

CASES: [[session_id, [user text | [user text, expected response, [[tool, args], ...]], ...]]].
OUT_DIR gets traces.jsonl (one OTLP ExportTraceServiceRequest per line, one line per session,
spans shuffled within a line), sessions.json ([[session_id, [ADK Event as JSON, ...]]]) and, for
the sessions whose turns all have an expected side, adk_scores.json: {session_id: {metric: score}}
from ADK's own evaluators (tool_trajectory_avg_score, response_match_score) over the session's
events as ADK's EvaluationGenerator turns them into invocations.

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
    scores = {}
    for session_id, turns in json.load(open(cases_path)):
        EXPORTER.clear()
        await sessions.create_session(app_name="weather_app", user_id="u1", session_id=session_id)
        for turn in turns:
            text = turn if isinstance(turn, str) else turn[0]
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
        if all(not isinstance(t, str) for t in turns):
            scores[session_id] = await adk_scores(session.events, turns)
    with open(os.path.join(out_dir, "traces.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "sessions.json"), "w") as f:
        json.dump(recorded, f)
    with open(os.path.join(out_dir, "adk_scores.json"), "w") as f:
        json.dump(scores, f)


async def adk_scores(events, turns):
    """ADK's evaluators on a session, as ADK's eval service scores an agent's run."""
    import inspect

    from google.adk.evaluation.eval_case import IntermediateData, Invocation
    from google.adk.evaluation.eval_metrics import EvalMetric
    from google.adk.evaluation.evaluation_generator import EvaluationGenerator
    from google.adk.evaluation.final_response_match_v1 import RougeEvaluator
    from google.adk.evaluation.trajectory_evaluator import TrajectoryEvaluator
    from google.genai import types

    actual = EvaluationGenerator.convert_events_to_eval_invocations(events)
    expected = [Invocation(user_content=types.Content(role="user", parts=[types.Part(text=text)]),
                           final_response=types.Content(role="model", parts=[types.Part(text=response)]),
                           intermediate_data=IntermediateData(tool_uses=[types.FunctionCall(name=n, args=a)
                                                                         for n, a in calls]))
                for text, response, calls in turns]
    out = {}
    for name, evaluator in (
            ("tool_trajectory_avg_score", TrajectoryEvaluator(eval_metric=EvalMetric(
                metric_name="tool_trajectory_avg_score", threshold=1.0))),
            ("response_match_score", RougeEvaluator(EvalMetric(metric_name="response_match_score", threshold=0.8)))):
        result = evaluator.evaluate_invocations(actual, expected)
        if inspect.isawaitable(result):
            result = await result
        out[name] = result.overall_score
    return out


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
