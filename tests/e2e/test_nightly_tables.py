"""Nightly runs over BigQuery inputs with `input.since: last_run` (in the BigQuery emulator): a
table of spans with Cloud Trace's schema, the table of ADK's BigQueryAgentAnalyticsPlugin, and a
table of rows with a timestamp column. Each night reads only what is new (the rows BigQuery hands
over are only those of the window, reaching back the lateness), and evaluates each case once."""
from __future__ import annotations

import datetime as dt
import json

import pytest
import yaml

from evalbeam.pipelines import evaluate
from tests.e2e.test_nightly_traces import HOUR, MINUTE, Traces, ns
from tests.emulators.control import PROJECT
from tests.helpers import evalbeam, table
from tests.transforms.test_read_otel import ALL_SPANS_SCHEMA, _row

pytestmark = pytest.mark.emulators


def night(tmp_path, monkeypatch, run_id: str, clock: dt.datetime, input_config: dict, metrics: list) -> dict:
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump({"name": "nightly", "run_id": run_id,
                                    "input": {**input_config, "project": PROJECT, "since": "last_run", "allow_empty": True},
                                    "metrics": metrics, "output": {"parquet": str(tmp_path / "out")}}))
    monkeypatch.setattr(evaluate, "utc_now", lambda: clock)
    evalbeam("run", str(path), "--direct_num_workers=1")
    [runs] = table(tmp_path / "out" / run_id, "runs")
    assert runs["lines_read"] == runs["lines_skipped"] + runs["lines_scored"] + runs["lines_dead_lettered"]
    return {"runs": runs, "cases": {r["instance_id"]: r for r in table(tmp_path / "out" / run_id, "instances")}}


def create(table_id: str, schema: list, rows: list[dict]) -> None:
    from google.cloud import bigquery

    from evalbeam.transforms.local_cloud import bigquery_client

    client = bigquery_client(PROJECT)
    client.create_dataset(table_id.rpartition(".")[0], exists_ok=True)
    client.create_table(bigquery.Table(table_id, schema=[bigquery.SchemaField.from_api_repr(f) for f in schema]),
                        exists_ok=True)
    assert client.insert_rows_json(table_id, rows) == []


def test_a_span_table_read_night_by_night(cloud, tmp_path, monkeypatch):
    """Cloud Trace's span schema: night 1 evaluates A (ended five hours before); B straddles its
    boundary and C ended within the lateness: night 2 evaluates them, B whole, reading only the
    spans that started since an hour before night 1's window ended (A's are not handed over)."""
    r = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    R = ns(r)
    make = Traces(seed=4)
    a = make.conversation("A", "s_none", [R - 5 * HOUR])
    b = make.conversation("B", "s_two", [R - 70 * MINUTE, R - 55 * MINUTE])
    c = make.conversation("C", "s_raise", [R - 20 * MINUTE])
    spans = {name: [s for trace in case for s in trace] for name, case in (("A", a), ("B", b), ("C", c))}
    table_id = f"{PROJECT}.nightly_spans._AllSpans"
    create(table_id, ALL_SPANS_SCHEMA, [_row(*s) for case in spans.values() for s in case])
    source = {"uri": f"bq://{table_id}", "format": "otel_traces", "otel": {"group_by": "conversation"}}
    metrics = ["failure", "tool_call_count_v1"]
    first = night(tmp_path, monkeypatch, "n1", r, source, metrics)
    assert set(first["cases"]) == {"A"}
    assert first["runs"]["lines_read"] == sum(map(len, spans.values()))
    second = night(tmp_path, monkeypatch, "n2", r + dt.timedelta(hours=2), source, metrics)
    assert set(second["cases"]) == {"B", "C"}
    assert len(json.loads(second["cases"]["B"]["invocations"])) == 2
    assert second["runs"]["lines_read"] == len(spans["B"]) + len(spans["C"]) == second["runs"]["lines_scored"]
    assert second["runs"]["window_start"] == first["runs"]["window_end"] == r - dt.timedelta(hours=1)


@pytest.mark.adk
def test_the_plugins_table_read_night_by_night(cloud, tmp_path, monkeypatch):
    """ADK's BigQueryAgentAnalyticsPlugin table: a session is the window's when its last event was
    logged in it; one whose last turn came within the lateness waits for the next night, whole."""
    from tests.transforms.test_adk_events import llm, plugin_schema, row, user

    r = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)

    def at(minutes: float, event: dict) -> dict:
        return {**event, "timestamp": (r + dt.timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")}

    def session(name: str, minutes: list[float]) -> list[dict]:
        events = []
        for turn, start in enumerate(minutes):
            inv = f"{name}-{turn}"
            events += [at(start, user("00:00:00.000", f"turn {turn}", session=name, invocation=inv)),
                       at(start + 0.1, llm("00:00:00.100", 10, 2, session=name, invocation=inv)),
                       at(start + 0.2, row("00:00:00.200", "AGENT_RESPONSE", session=name, invocation=inv,
                                           content={"response": f"text: 'answer {turn}'"})),
                       at(start + 0.3, row("00:00:00.300", "INVOCATION_COMPLETED", session=name, invocation=inv,
                                           latency={"total_ms": 300}))]
        return events

    events = session("early", [-300]) + session("across", [-90, -40]) + session("recent", [-10])
    table_id = f"{PROJECT}.nightly_agents.agent_events"
    create(table_id, plugin_schema(), events)
    source = {"uri": f"bq://{table_id}", "format": "adk_agent_events"}
    metrics = ["tool_call_count_v1", "inference_call_count_v1"]
    first = night(tmp_path, monkeypatch, "n1", r, source, metrics)
    assert set(first["cases"]) == {"early"}
    assert first["runs"]["lines_skipped"] == 12  # "across" and "recent": waiting for the next night
    second = night(tmp_path, monkeypatch, "n2", r + dt.timedelta(hours=2), source, metrics)
    assert set(second["cases"]) == {"across", "recent"}
    assert [t["prompt"] for t in json.loads(second["cases"]["across"]["invocations"])] == ["turn 0", "turn 1"]
    assert second["runs"]["lines_read"] == 12  # the early session's rows are not handed over


@pytest.mark.parametrize("source", ["table", "query"])
def test_a_table_of_rows_with_a_timestamp_column_read_night_by_night(cloud, tmp_path, monkeypatch, source):
    """A table of dataset rows with input.timestamp_column (or a query of it): a row is the window's
    when its time is in it."""
    r = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    rows = [{"id": f"row{i}", "prompt": f"question {i}", "response": "yes", "reference": "yes",
             "logged_at": (r + dt.timedelta(minutes=m)).isoformat()} for i, m in enumerate([-300, -61, -59, -5, 30])]
    table_id = f"{PROJECT}.nightly_rows.answers_{source}"
    create(table_id, [{"name": "id", "type": "STRING"}, {"name": "prompt", "type": "STRING"},
                      {"name": "response", "type": "STRING"}, {"name": "reference", "type": "STRING"},
                      {"name": "logged_at", "type": "TIMESTAMP"}], rows)
    read = {"uri": f"bq://{table_id}"} if source == "table" else {"query": f"SELECT * FROM `{table_id}`"}
    read = {**read, "id_column": "id", "timestamp_column": "logged_at"}
    first = night(tmp_path, monkeypatch, "n1", r, read, ["exact_match"])
    assert set(first["cases"]) == {"row0", "row1"}
    second = night(tmp_path, monkeypatch, "n2", r + dt.timedelta(hours=2), read, ["exact_match"])
    assert set(second["cases"]) == {"row2", "row3", "row4"} and second["runs"]["lines_read"] == 3
