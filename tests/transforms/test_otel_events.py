"""output.otel_events: an otel_traces run's scores written back as OTLP JSON
gen_ai.evaluation.result events (ExportLogsServiceRequest lines), each linked to the root
span of the trace it scores; checked against the spans of the real ADK run in tests/data/otel."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions
# the conventions' own names, from the installed opentelemetry-semantic-conventions
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GEN_AI_EVALUATION_EXPLANATION as EXPLANATION,
    GEN_AI_EVALUATION_NAME as NAME,
    GEN_AI_EVALUATION_SCORE_LABEL as LABEL,
    GEN_AI_EVALUATION_SCORE_VALUE as VALUE,
)
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE, ErrorTypeValues

from evalbeam.configs import ConfigError, load_config
from evalbeam.pipelines.evaluate import run
from tests.helpers import table

DATA = Path(__file__).resolve().parents[1] / "data" / "otel"


def _attributes(items) -> dict:
    out = {}
    for item in items:
        [(kind, value)] = item["value"].items()
        out[item["key"]] = (kind, value)
    return out


def expected_roots(group_by: str) -> dict[str, tuple[str, str]]:
    """From the fixture's raw OTLP JSON: case id -> (trace id, root span id) of the case's first
    trace (the trace itself, by trace; by conversation, the trace whose root started first)."""
    roots, conversation = {}, {}
    for line in (DATA / "adk_weather.jsonl").read_text().splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    if not span.get("parentSpanId"):
                        roots[span["traceId"]] = (int(span["startTimeUnixNano"]), span["spanId"])
                    for a in span["attributes"]:
                        if a["key"] == "gen_ai.conversation.id":
                            conversation[span["traceId"]] = a["value"]["stringValue"]
    if group_by == "trace":
        return {trace: (trace, span) for trace, (_, span) in roots.items()}
    cases: dict[str, tuple[int, str, str]] = {}
    for trace, (start, span) in roots.items():
        key = conversation[trace]
        if key not in cases or start < cases[key][0]:
            cases[key] = (start, trace, span)
    return {key: (trace, span) for key, (_, trace, span) in cases.items()}


def _config(tmp_path: Path, group_by: str, **output) -> Path:
    config = {"name": "otel", "run_id": "otel1",
              "input": {"uri": str(DATA / "adk_weather.jsonl"), "format": "otel_traces",
                        "otel": {"group_by": group_by}},
              "metrics": [{"name": "failure", "threshold": 0.5}, {"name": "latency_in_seconds"},
                          {"name": "tool_trajectory_avg_score"}],
              "output": {"parquet": str(tmp_path / "out"), **output}}
    path = tmp_path / "otel.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("group_by", ["trace", "conversation"])
def test_every_score_is_one_event_on_its_cases_root_span(tmp_path, group_by):
    run(load_config(_config(tmp_path, group_by, otel_events="events")), PipelineOptions([]))
    files = sorted((tmp_path / "events").glob("otel1-*.jsonl"))
    assert files
    events = []
    for line in (line for f in files for line in f.read_text().splitlines()):
        request = json.loads(line)  # one ExportLogsServiceRequest a line
        [resource] = request["resourceLogs"]
        for scope in resource["scopeLogs"]:
            events += scope["logRecords"]
    rows = table(tmp_path / "out" / "otel1", "metric_results")
    roots = expected_roots(group_by)
    assert {r["instance_id"] for r in rows} == set(roots)
    by_key = {}
    for event in events:
        attributes = _attributes(event["attributes"])
        assert event["eventName"] == "gen_ai.evaluation.result" and int(event["timeUnixNano"]) > 0
        key = (attributes["evalbeam.instance_id"][1], attributes[NAME][1])
        assert key not in by_key, f"two events for {key}"
        by_key[key] = (event, attributes)
    assert set(by_key) == {(r["instance_id"], r["metric"]) for r in rows}  # exactly one event a row
    errored = 0
    for row in rows:
        event, attributes = by_key[(row["instance_id"], row["metric"])]
        assert (event["traceId"], event["spanId"]) == roots[row["instance_id"]]
        if row["error"] is not None:
            errored += 1
            assert attributes[ERROR_TYPE] == ("stringValue", ErrorTypeValues.OTHER.value)
            assert VALUE not in attributes
            assert LABEL not in attributes
            assert attributes[EXPLANATION] == ("stringValue", row["explanation"] or row["error"])
        else:
            assert ERROR_TYPE not in attributes
            assert attributes[VALUE] == ("doubleValue", row["score"])
            label = {True: ("stringValue", "pass"), False: ("stringValue", "fail")}.get(row["passed"])
            assert attributes.get(LABEL) == label
    # the fixture's cases have no expected trajectory: that metric errs on each; failure has a threshold
    assert errored == len(roots)
    assert {by_key[(i, "failure")][1][LABEL][1] for i in roots} == {"pass", "fail"}


def test_otel_events_of_a_run_that_reads_no_traces_is_a_config_error(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump({
        "name": "plain", "input": {"uri": str(tmp_path / "rows.jsonl")}, "metrics": ["exact_match"],
        "output": {"parquet": str(tmp_path / "out"), "otel_events": str(tmp_path / "events")}}))
    with pytest.raises(ConfigError, match="output.otel_events: .*input.format otel_traces"):
        load_config(path)
