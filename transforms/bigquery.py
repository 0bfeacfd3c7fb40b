"""BigQuery in and out.

Reading: the BigQuery Storage Read API, one read stream per element. The
launcher creates a read session (for a query, on the query's result table);
each stream is read on whichever worker gets it, so a table of millions of rows
is read in parallel and never passes through one process. We call the Storage
API ourselves rather than use Beam's ReadFromBigQuery: it gives every row a
source (stream and row number) for the dead-letter table, and the same code
runs against the BigQuery emulator's Storage Read server in the tests.

Writing: the pipeline's Parquet files (the one writer, the one schema) are
loaded into per-attempt staging tables, and then one multi-statement
transaction deletes the run's earlier rows from every table and inserts the
new ones. That is what makes re-running a run_id replace its rows: a job that
dies before the transaction leaves the tables as they were (at worst, orphaned
`_evalbeam_staging_*` tables, which expire after a day); the transaction itself
is all or nothing. A load or statement that BigQuery rejects fails the job with
the table and BigQuery's reason.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import uuid
from typing import Any, Iterable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from evalbeam.metrics.names import NAME_RE
from evalbeam.transforms.local_cloud import bigquery_client, bigquery_read_client
from evalbeam.transforms.records import LINES, Record, SourceLines
from evalbeam.metrics.rows.tables import CLUSTERING, TABLES, RunKey, bigquery_schema, table_columns
from evalbeam.transforms.write import delete_tree

STAGING_PREFIX = "_evalbeam_staging_"
STAGING_EXPIRY = dt.timedelta(days=1)


class BigQueryError(RuntimeError):
    """BigQuery refused something; the message names the table and the reason."""


def _reason(error: Exception) -> str:
    errors = getattr(error, "errors", None)
    if errors:
        return "; ".join(e.get("message", str(e)) for e in errors)
    return getattr(error, "message", None) or str(error)


# ---------------------------------------------------------------- reading


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    label: str  # what dead letters name as the source
    session: bytes  # the serialized ReadSession
    streams: tuple[str, ...]


def describe_input(input_cfg, billing_project: str | None) -> tuple[str, list[str]]:
    """Check a BigQuery input before any work; return (label, column names).
    A missing table or a query BigQuery refuses raises BigQueryError naming it."""
    from google.api_core import exceptions  # start-up time: Google Cloud clients only where used
    from google.cloud import bigquery  # start-up time: Google Cloud clients only where used

    if input_cfg.kind == "bigquery_table":
        table = input_cfg.bigquery_table()
        return f"bq://{table}", describe_table(table, input_cfg.project, "input.uri")
    client = bigquery_client(billing_project)
    try:
        job = client.query(input_cfg.query, job_config=bigquery.QueryJobConfig(dry_run=True, use_legacy_sql=False))
        return "bq://query", [f.name for f in job.schema or []]
    except exceptions.GoogleAPICallError as e:
        raise BigQueryError(f"input.query: BigQuery refused the query: {_reason(e)}") from None


def describe_table(table: str, project: str | None, field: str) -> list[str]:
    """The column names of a table; BigQueryError naming the table and `field` if it cannot be read."""
    from google.api_core import exceptions  # start-up time: Google Cloud clients only where used

    client = bigquery_client(project or table.split(".")[0])
    try:
        return [f.name for f in client.get_table(table).schema]
    except exceptions.NotFound:
        raise BigQueryError(f"{field}: BigQuery table {table} does not exist") from None
    except exceptions.GoogleAPICallError as e:
        raise BigQueryError(f"{field}: cannot read BigQuery table {table}: {_reason(e)}") from None


def plan_read(input_cfg, billing_project: str | None, window=None) -> ReadPlan:
    """Create the read session (running the query first, for a query input). A table input that
    is a logical view (Cloud Trace's `_AllSpans` is one) is read through a query of it, its rows in
    input.otel's window: the Storage Read API reads tables, not views. `window`: input.since's
    (transforms.since.ReadWindow): only the rows it reads."""
    restriction = read_restriction(input_cfg, window)
    if input_cfg.kind == "bigquery_table":
        table, project = input_cfg.bigquery_table(), input_cfg.project or billing_project
        if table_type(table, project) == "VIEW":
            sql = f"SELECT * FROM `{table}`" + (f"\nWHERE {restriction}" if restriction else "")
            return plan_table_read(_run_query(sql, input_cfg.query_dataset, billing_project, "input.uri"), project,
                                   f"bq://{table}")
        return plan_table_read(table, project, row_restriction=restriction)
    query = input_cfg.query if not restriction else f"SELECT * FROM (\n{input_cfg.query}\n)\nWHERE {restriction}"
    return plan_table_read(_run_query(query, input_cfg.query_dataset, billing_project),
                           input_cfg.project or billing_project, "bq://query")


def read_restriction(input_cfg, window=None) -> str:
    """The SQL condition on the rows read: input.since's window (spans by start_time, ADK agent events by
    timestamp, reaching back its lateness; rows by input.timestamp_column, in the window), else
    input.otel's fixed [start, end)."""
    if window is None:
        return span_window(input_cfg)
    if input_cfg.format == "otel_traces":
        return window.sql_from("start_time")
    if input_cfg.format == "adk_agent_events":
        return window.sql_from("timestamp")
    return window.sql_rows(input_cfg.timestamp_column)


def table_type(table: str, project: str | None) -> str:
    """A table's type as BigQuery names it (TABLE, VIEW, MATERIALIZED_VIEW, EXTERNAL, SNAPSHOT)."""
    from google.api_core import exceptions  # start-up time: Google Cloud clients only where used

    try:
        return bigquery_client(project or table.split(".")[0]).get_table(table).table_type or "TABLE"
    except exceptions.NotFound:
        raise BigQueryError(f"input.uri: BigQuery table {table} does not exist") from None
    except exceptions.GoogleAPICallError as e:
        raise BigQueryError(f"input.uri: cannot read BigQuery table {table}: {_reason(e)}") from None


def span_window(input_cfg) -> str:
    """A span table's rows in input.otel's [start, end) by start_time, as a Storage Read row restriction."""
    if input_cfg.format != "otel_traces":
        return ""
    bounds = []
    for moment, op in ((input_cfg.otel.start, ">="), (input_cfg.otel.end, "<")):
        if moment is not None:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=dt.timezone.utc)
            bounds.append(f"start_time {op} TIMESTAMP '{moment.astimezone(dt.timezone.utc).isoformat()}'")
    return " AND ".join(bounds)


def plan_table_read(table: str, billing_project: str | None, label: str | None = None,
                    row_restriction: str = "", selected_fields: Iterable[str] = ()) -> ReadPlan:
    """A read session over a table (project.dataset.table), billed to billing_project;
    optionally only the rows a SQL condition selects, and only some columns."""
    from google.cloud.bigquery_storage_v1 import types  # start-up time: Google Cloud clients only where used

    project, dataset, table_id = table.split(".")
    session = bigquery_read_client().create_read_session(
        parent=f"projects/{billing_project or project}",
        read_session=types.ReadSession(
            table=f"projects/{project}/datasets/{dataset}/tables/{table_id}",
            data_format=types.DataFormat.ARROW,
            read_options=types.ReadSession.TableReadOptions(
                row_restriction=row_restriction, selected_fields=list(selected_fields)),
        ),
        max_stream_count=0,  # the service picks the stream count from the table's size
    )
    return ReadPlan(label or f"bq://{table}", types.ReadSession.serialize(session), tuple(s.name for s in session.streams))


def _run_query(query: str, query_dataset: str, billing_project: str | None, field: str = "input.query") -> str:
    """Materialise the query as a table of its own that expires after a day, in
    `input.query_dataset` (created in the query's location when missing), and
    return that table. A table made by CREATE TABLE ... AS, rather than the
    query job's anonymous result table, is readable through the Storage Read API
    on BigQuery and on its emulator alike."""
    from google.cloud import bigquery  # start-up time: Google Cloud clients only where used

    client = bigquery_client(billing_project)
    dry = client.query(query, job_config=bigquery.QueryJobConfig(dry_run=True))
    dataset = bigquery.Dataset(f"{client.project}.{query_dataset}")
    dataset.location = dry.location or "US"
    dataset.default_table_expiration_ms = int(STAGING_EXPIRY.total_seconds() * 1000)
    client.create_dataset(dataset, exists_ok=True)
    table = f"{client.project}.{query_dataset}.query_{uuid.uuid4().hex}"
    hours = int(STAGING_EXPIRY.total_seconds() // 3600)
    sql = (f"CREATE TABLE `{table}`\n"
           f"OPTIONS (expiration_timestamp = TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL {hours} HOUR)) AS\n"
           f"{query.strip().rstrip(';')}\n")
    try:
        client.query(sql, location=dataset.location).result()
    except Exception as e:  # noqa: BLE001 - reported with the query's reason
        raise BigQueryError(f"{field}: the query failed: {_reason(e)}") from None
    return table


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "as_tuple"):  # Decimal
        return float(value)
    return value


class ReadStreamFn(beam.DoFn):
    def __init__(self, label: str, session: bytes):
        self._label = label
        self._session_bytes = session
        self._read = Metrics.counter("evalbeam", "records_read")

    def setup(self):
        from google.cloud.bigquery_storage_v1 import types  # start-up time: Google Cloud clients only where used

        self._client = bigquery_read_client()
        self._session = types.ReadSession.deserialize(self._session_bytes)

    def process(self, indexed_stream):
        index, stream = indexed_stream
        origin = f"{self._label} stream {index}"
        row_number = 0
        for page in self._client.read_rows(stream).rows(self._session).pages:
            for row in page.to_arrow().to_pylist():
                row_number += 1
                data = _jsonable(row)
                self._read.inc()
                yield Record(f"{origin} row {row_number}", data, json.dumps(data, ensure_ascii=False, sort_keys=True),
                             from_csv=False, origin=origin, line=row_number)
        # a BigQuery row is one "line" of the source
        yield beam.pvalue.TaggedOutput(LINES, SourceLines(origin, row_number, 0))


class ReadBigQueryRows(beam.PTransform):
    """A planned read -> (Records, one SourceLines per stream); rows are plain
    JSON-like values (RECORD -> dict, REPEATED -> list, JSON -> its text,
    DATE/TIMESTAMP -> ISO text)."""

    def __init__(self, plan: ReadPlan):
        super().__init__()
        self._plan = plan

    def expand(self, pbegin):
        read = (
            pbegin
            | "Streams" >> beam.Create(list(enumerate(self._plan.streams)))
            | "OneStreamPerWorker" >> beam.Reshuffle()
            | "ReadStreams" >> beam.ParDo(ReadStreamFn(self._plan.label, self._plan.session)).with_outputs(
                LINES, main="records")
        )
        return read.records, read[LINES]


# ---------------------------------------------------------------- writing


def _staging_id(table: str, run_id: str, attempt: str) -> str:
    return f"{STAGING_PREFIX}{table}_{re.sub(r'[^A-Za-z0-9_]', '_', run_id)}_{attempt}"


def prepare_output(dataset: str, slice_columns: Iterable[str], location: str | None) -> None:
    """Create the dataset, the five tables (partitioned by run_date, clustered)
    and the views when missing; add columns a newer evalbeam or another config's
    slice columns need. Runs on the launcher, before any work."""
    from google.api_core import exceptions  # start-up time: Google Cloud clients only where used
    from google.cloud import bigquery  # start-up time: Google Cloud clients only where used

    project, _, dataset_id = dataset.rpartition(".")
    client = bigquery_client(project, location)
    try:
        ds = bigquery.Dataset(f"{project}.{dataset_id}")
        ds.location = location or "US"
        client.create_dataset(ds, exists_ok=True)
        for table in TABLES:
            wanted = bigquery_schema(table, slice_columns)
            ref = f"{project}.{dataset_id}.{table}"
            try:
                existing = client.get_table(ref)
            except exceptions.NotFound:
                t = bigquery.Table(ref, schema=wanted)
                t.time_partitioning = bigquery.TimePartitioning(field="run_date")
                t.clustering_fields = CLUSTERING[table]
                client.create_table(t)
                continue
            have = {f.name for f in existing.schema}
            added = [
                bigquery.SchemaField(f.name, f.field_type, mode="NULLABLE", description=f.description)
                for f in wanted if f.name not in have
            ]
            if added:
                existing.schema = list(existing.schema) + added
                client.update_table(existing, ["schema"])
        for name, sql in view_definitions(f"{project}.{dataset_id}").items():
            client.query(f"CREATE OR REPLACE VIEW `{project}.{dataset_id}.{name}` AS\n{sql}").result()
    except exceptions.GoogleAPICallError as e:
        raise BigQueryError(f"output.bigquery: cannot prepare dataset {dataset}: {_reason(e)}") from None


def view_definitions(dataset: str) -> dict[str, str]:
    summary, runs, comparisons = f"`{dataset}.summary`", f"`{dataset}.runs`", f"`{dataset}.comparisons`"
    return {
        # each eval's most recent run
        "latest_summary": f"""
SELECT r.name, s.*
FROM {summary} AS s
JOIN (
  SELECT name, run_id FROM (
    SELECT name, run_id, ROW_NUMBER() OVER (PARTITION BY name ORDER BY started_at DESC) AS recency
    FROM {runs})
  WHERE recency = 1
) AS r ON r.run_id = s.run_id""",
        # mean and CI per metric per run date (the latest run of each date), overall slice
        "metric_trend": f"""
SELECT name, run_date, run_id, metric, mean, ci_low, ci_high, valid_count FROM (
  SELECT r.name, s.run_date, s.run_id, s.metric, s.mean, s.ci_low, s.ci_high, s.valid_count,
         ROW_NUMBER() OVER (PARTITION BY r.name, s.run_date, s.metric ORDER BY r.started_at DESC) AS recency
  FROM {summary} AS s JOIN {runs} AS r ON r.run_id = s.run_id
  WHERE s.slice = 'overall')
WHERE recency = 1""",
        # each run against the previous run of the same eval (by run date), per metric and
        # slice: the means, and, where the run was compared with it (compare_with: previous,
        # or `evalbeam compare`), the paired difference's CI, adjusted p-value and flags
        "run_comparison": f"""
SELECT o.name, o.run_id, o.run_date, o.previous_run_id, cur.metric, cur.slice,
       cur.mean, prev.mean AS previous_mean, cur.mean - prev.mean AS mean_difference,
       cur.valid_count, prev.valid_count AS previous_valid_count,
       c.n_paired, c.mean_difference AS paired_mean_difference, c.ci_low, c.ci_high,
       c.p_value_adjusted, c.regression, c.improvement
FROM (
  SELECT name, run_id, run_date,
         LAG(run_id) OVER (PARTITION BY name ORDER BY run_date, started_at) AS previous_run_id
  FROM {runs}
) AS o
JOIN {summary} AS cur ON cur.run_id = o.run_id
LEFT JOIN {summary} AS prev
  ON prev.run_id = o.previous_run_id AND prev.metric = cur.metric AND prev.slice = cur.slice
LEFT JOIN {comparisons} AS c
  ON c.run_id = o.run_id AND c.base_run_id = o.previous_run_id AND c.metric = cur.metric AND c.slice = cur.slice""",
        # the flagged regressions of each eval's latest compared run: empty on a good night
        "regressions": f"""
SELECT name, base_run_id, run_id, run_date, metric, slice, direction, n_paired, base_mean, mean,
       mean_difference, ci_low, ci_high, p_value_adjusted, tolerance, compared_at
FROM (
  SELECT c.*, DENSE_RANK() OVER (PARTITION BY c.name ORDER BY c.run_date DESC, c.compared_at DESC) AS recency
  FROM {comparisons} AS c)
WHERE recency = 1 AND regression""",
        # failure_modes: each eval's most recent run's modes per metric and slice
        "latest_failure_modes": f"""
SELECT r.name, f.*
FROM `{dataset}.failure_modes` AS f
JOIN (
  SELECT name, run_id FROM (
    SELECT name, run_id, ROW_NUMBER() OVER (PARTITION BY name ORDER BY started_at DESC) AS recency
    FROM {runs})
  WHERE recency = 1
) AS r ON r.run_id = f.run_id""",
        # input.labels: each eval's most recent run's agreement with the human labels
        "latest_calibration": f"""
SELECT r.name, c.*
FROM `{dataset}.calibration` AS c
JOIN (
  SELECT name, run_id FROM (
    SELECT name, run_id, ROW_NUMBER() OVER (PARTITION BY name ORDER BY started_at DESC) AS recency
    FROM {runs})
  WHERE recency = 1
) AS r ON r.run_id = c.run_id""",
    }


class PublishFn(beam.DoFn):
    """Loads each table's files into a staging table, then in one transaction
    deletes the rows `replace` selects and inserts the staged ones. `replace` is
    a SQL condition; default: every row of the run."""

    def __init__(self, dataset: str, run: RunKey, slice_columns: tuple[str, ...], attempt: str,
                 location: str | None, staging_folder: str | None, replace: str | None = None):
        self._dataset = dataset
        self._run = run
        self._slices = slice_columns
        self._attempt = attempt
        self._location = location
        self._staging_folder = staging_folder
        # run_id (and base_run_id) can only hold [A-Za-z0-9_.-] (metrics.names.NAME_RE), so they
        # are safe as literals; query parameters are not bound inside scripts everywhere.
        assert re.fullmatch(NAME_RE, run.run_id), run.run_id
        self._replace = replace or f"run_id = '{run.run_id}'"

    def process(self, _, **files: list[str]):
        from google.api_core import exceptions  # start-up time: Google Cloud clients only where used

        project, _, dataset_id = self._dataset.rpartition(".")
        client = bigquery_client(project, self._location)
        staged = {}
        try:
            for table in sorted(files):
                staging = f"{project}.{dataset_id}.{_staging_id(table, self._run.run_id, self._attempt)}"
                self._load(client, table, staging, sorted(files[table]))
                staged[table] = staging
            statements = ["BEGIN TRANSACTION;"]
            for table, staging in staged.items():
                columns = ", ".join(f"`{c.name}`" for c in table_columns(table, self._slices))
                statements.append(f"DELETE FROM `{project}.{dataset_id}.{table}` WHERE {self._replace};")
                statements.append(
                    f"INSERT INTO `{project}.{dataset_id}.{table}` ({columns}) SELECT {columns} FROM `{staging}`;"
                )
            statements.append("COMMIT TRANSACTION;")
            try:
                client.query("\n".join(statements)).result()
            except exceptions.GoogleAPICallError as e:
                raise BigQueryError(
                    f"BigQuery rejected replacing run {self._run.run_id} in {self._dataset}: {_reason(e)}"
                ) from None
        finally:
            for staging in staged.values():
                client.delete_table(staging, not_found_ok=True)
        if self._staging_folder:
            delete_tree(self._staging_folder)
        yield self._run.run_id

    def _load(self, client, table: str, staging: str, paths: list[str]) -> None:
        from google.api_core import exceptions  # start-up time: Google Cloud clients only where used
        from google.cloud import bigquery  # start-up time: Google Cloud clients only where used

        config = bigquery.LoadJobConfig(
            source_format=bigquery.SourceFormat.PARQUET,
            schema=bigquery_schema(table, self._slices),
            write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
            create_disposition=bigquery.CreateDisposition.CREATE_IF_NEEDED,
        )
        t = bigquery.Table(staging, schema=config.schema)
        t.expires = dt.datetime.now(dt.timezone.utc) + STAGING_EXPIRY
        client.create_table(t, exists_ok=False)
        try:
            remote = [p for p in paths if p.startswith("gs://")]
            if remote:
                client.load_table_from_uri(remote, staging, job_config=config).result()
            for path in (p for p in paths if not p.startswith("gs://")):
                with FileSystems.open(path, mime_type="application/octet-stream") as f:
                    client.load_table_from_file(f, staging, job_config=config).result()
        except exceptions.GoogleAPICallError as e:
            raise BigQueryError(f"BigQuery rejected the load of table {table} (staged as {staging}): {_reason(e)}") from None


class PublishToBigQuery(beam.PTransform):
    """{table: PCollection of written Parquet file names} -> the run's rows
    replace any earlier rows of that run_id in every table, atomically. Runs
    once, after every file is written (the file names are its side inputs)."""

    def __init__(self, dataset: str, run: RunKey, slice_columns, attempt: str, location: str | None,
                 staging_folder: str | None, replace: str | None = None):
        super().__init__()
        self._fn = PublishFn(dataset, run, tuple(slice_columns), attempt, location, staging_folder, replace)

    def expand(self, written: dict):
        pipeline = next(iter(written.values())).pipeline
        side = {table: beam.pvalue.AsList(files) for table, files in written.items()}
        return pipeline | "Once" >> beam.Create([None]) | "LoadAndSwap" >> beam.ParDo(self._fn, **side)

