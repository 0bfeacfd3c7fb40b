"""Record real agent sessions with ADK's own BigQueryAgentAnalyticsPlugin, in the ADK
reference venv (.adk/, google-adk 2.13.0), and dump the rows it writes and ADK's own
projection of the same sessions:

    python plugin_sessions.py PROJECT.DATASET.TABLE OUT.json

The agent is tests/inference_agent.py's LlmAgent (real Python tools; its model calls go to the
local generateContent server at $EVALBEAM_TEST_MODEL_URL). The plugin is attached to ADK's
Runner as a user attaches it; it creates its table in the BigQuery emulator itself (REST,
$BIGQUERY_EMULATOR_HOST), with its own schema, partitioning and clustering.

The one seam is the Storage Write API call. The plugin appends Arrow record batches to the
table's default stream; bqemulator 1.4.0 cannot take them: it builds the target table's Arrow
schema without the fields of RECORD columns (content_parts becomes a struct with no fields,
which DuckDB refuses), and it knows the default stream only as `.../tables/T/streams/_default`
where the plugin (as real BigQuery allows) names it `.../tables/T/_default`. So the
module's BigQueryWriteAsyncClient is replaced by a recorder whose `append_rows` takes the
AppendRowsRequest the plugin built (row dicts, JSON serialization, Arrow schema and batch, all
the plugin's own) and decodes its Arrow payload (the bytes BigQuery would receive) with pyarrow;
the test loads those rows into the emulator's table.

OUT: {"rows": the rows as written (JSON), "stream": the write stream named,
      "sessions": {session_id: [ADK Invocation (JSON) per invocation]},
      "projection": {session_id: [{invocation_id, user, response, tool_calls: [{name, args, response}],
                                   usage: [{prompt_token_count, ...} per model call]}]},
      "scores": {session_id: {criterion: {score, status}}} (ADK's evaluators, efficiency criteria),
      "errors": {session_id: [the failed runs' exceptions]}, "drops": the plugin's get_drop_stats()}
where `projection` is read from ADK's Invocations with ADK's own helpers
(get_all_tool_calls_with_responses), so the test compares with ADK's reading, not ours.
"""
import asyncio
import datetime
import inspect
import json
import sys

import pyarrow as pa
from google.adk.evaluation.eval_case import get_all_tool_calls_with_responses, get_all_usage_metadata
from google.adk.evaluation.eval_config import EvalConfig, get_eval_metrics_from_config
from google.adk.evaluation.evaluation_generator import EvaluationGenerator
from google.adk.evaluation.metric_evaluator_registry import DEFAULT_METRIC_EVALUATOR_REGISTRY
from google.adk.plugins import bigquery_agent_analytics_plugin as bqaa
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.auth.credentials import AnonymousCredentials
from google.cloud.bigquery_storage_v1 import types as types_storage
from google.genai import types

from tests.inference_agent import root_agent

APP, USER = "weather_app", "u1"
# session id -> the user's turns, in order (markers: see tests/servers/judge_server.py)
SESSIONS = {
    "trip": ['Paris? #call=get_weather{"city": "Paris"}',
             'Keep Oslo #call=remember_city{"city": "Oslo"} #call=convert{"celsius": 25}',
             "Thanks, that is all"],
    # a tool the agent does not have, then a tool that answers with an error
    "bad_tool": ['Do it #call=no_such_tool{"x": 1}',
                 'Atlantis? #call=get_weather{"city": "Atlantis"}'],
    # a tool that raises: the run fails (the agent error); the session goes on afterwards
    "raises": ['Go #call=explode{"reason": "disk full"}', "Hello again"],
}


class RecordingWriteClient:
    """Stands in for BigQueryWriteAsyncClient: keeps what each AppendRows request carries."""

    rows: list[dict] = []
    streams: set[str] = set()

    def __init__(self, credentials=None, client_info=None, client_options=None):
        pass

    async def append_rows(self, requests, metadata=()):
        async for request in requests:
            RecordingWriteClient.streams.add(request.write_stream)
            payload = request.arrow_rows
            reader = pa.ipc.open_stream(payload.writer_schema.serialized_schema
                                        + payload.rows.serialized_record_batch)
            RecordingWriteClient.rows.extend(reader.read_all().to_pylist())

        async def responses():  # one answer per request: appended, no error
            yield types_storage.AppendRowsResponse()
        return responses()


def json_row(row: dict) -> dict:
    """A decoded Arrow row as insert_rows_json takes it (timestamps as RFC 3339 text)."""
    return {k: v.isoformat() if isinstance(v, datetime.datetime) else v for k, v in row.items()}


def text_of(content) -> str | None:
    if content is None or not content.parts:
        return None
    return "\n".join(p.text for p in content.parts if p.text) or None


def projection(invocation) -> dict:
    calls = [{"name": call.name, "args": call.args,
              "response": None if response is None else response.response}
             for call, response in get_all_tool_calls_with_responses(invocation.intermediate_data)]
    usage = [u.model_dump(include={"prompt_token_count", "candidates_token_count", "total_token_count"},
                          exclude_none=True) for u in get_all_usage_metadata(invocation)]
    return {"invocation_id": invocation.invocation_id, "user": text_of(invocation.user_content),
            "response": text_of(invocation.final_response), "tool_calls": calls, "usage": usage}


async def adk_scores(invocations) -> dict:
    """ADK's own scores of the criteria it always reports (no expected side), as LocalEvalService runs them."""
    scores = {}
    for metric in get_eval_metrics_from_config(EvalConfig(criteria={})):
        evaluator = DEFAULT_METRIC_EVALUATOR_REGISTRY.get_evaluator(metric)
        try:
            result = evaluator.evaluate_invocations(invocations, None, None)
            if inspect.isawaitable(result):
                result = await result
            scores[metric.metric_name] = {"score": result.overall_score, "status": result.overall_eval_status.name}
        except Exception as e:  # noqa: BLE001 - as LocalEvalService: NOT_EVALUATED
            scores[metric.metric_name] = {"score": None, "status": "NOT_EVALUATED", "error": f"{type(e).__name__}: {e}"}
    return scores


async def main(table: str, out_path: str) -> None:
    project, dataset, table_id = table.split(".")
    bqaa.BigQueryWriteAsyncClient = RecordingWriteClient
    # create_views: the per-event-type views are BigQuery SQL the emulator need not run; the
    # rows do not depend on them
    plugin = bqaa.BigQueryAgentAnalyticsPlugin(project, dataset, table_id, credentials=AnonymousCredentials(),
                                               config=bqaa.BigQueryLoggerConfig(create_views=False))
    sessions = InMemorySessionService()
    runner = Runner(app_name=APP, agent=root_agent, session_service=sessions, plugins=[plugin])
    out = {"sessions": {}, "projection": {}, "scores": {}, "errors": {}}
    for session_id, turns in SESSIONS.items():
        await sessions.create_session(app_name=APP, user_id=USER, session_id=session_id)
        for text in turns:
            message = types.Content(role="user", parts=[types.Part(text=text)])
            try:
                async for _ in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
                    pass
            except Exception as e:  # noqa: BLE001 - the agent failed on this turn: recorded, and the session goes on
                out["errors"].setdefault(session_id, []).append(f"{type(e).__name__}: {e}")
        session = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
        invocations = EvaluationGenerator.convert_events_to_eval_invocations(session.events)
        out["sessions"][session_id] = [i.model_dump(mode="json", exclude_none=True) for i in invocations]
        out["projection"][session_id] = [projection(i) for i in invocations]
        out["scores"][session_id] = await adk_scores(invocations)
    await plugin.flush()
    out["drops"] = plugin.get_drop_stats()
    out["rows"] = [json_row(r) for r in RecordingWriteClient.rows]
    out["stream"] = sorted(RecordingWriteClient.streams)
    await runner.close()
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
