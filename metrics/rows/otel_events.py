"""Scores written back to the tracing backend: metric_results rows as OpenTelemetry
`gen_ai.evaluation.result` events (OTLP JSON logs), each linked to the span it evaluates."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from evalbeam.metrics.rows.otlp import key_value

EVALUATION_EVENT = "gen_ai.evaluation.result"
# error.type's value for a metric that could not score: the conventions' own fallback for an
# error class the producer does not enumerate (the row's error text goes in the explanation)
OTHER_ERROR = "_OTHER"


def evaluation_record(root: Mapping[str, str], result: Mapping[str, Any], time_nanos: int,
                      run_id: str) -> dict[str, Any]:
    """One metric_results row -> an OTLP JSON LogRecord of a `gen_ai.evaluation.result` event,
    linked to the span it evaluates (`root`: {trace_id, span_id}, lower-case hex as OTLP JSON has them)."""
    attributes = [key_value("gen_ai.evaluation.name", result["metric"])]
    error = result.get("error")
    if error is not None:
        attributes.append(key_value("error.type", OTHER_ERROR))
    elif result.get("score") is not None:
        attributes.append(key_value("gen_ai.evaluation.score.value", result["score"]))
    if error is None and result.get("passed") is not None:
        attributes.append(key_value("gen_ai.evaluation.score.label", "pass" if result["passed"] else "fail"))
    explanation = result.get("explanation") or error
    if explanation:
        attributes.append(key_value("gen_ai.evaluation.explanation", explanation))
    attributes += [key_value("evalbeam.run_id", run_id), key_value("evalbeam.instance_id", result["instance_id"])]
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
        "resource": {"attributes": [key_value("service.name", "evalbeam")]},
        "scopeLogs": [{"scope": {"name": "evalbeam", "version": version}, "logRecords": records}],
    }]}
