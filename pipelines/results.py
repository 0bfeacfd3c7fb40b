"""Reading results back: the runs, a run's tables, its comparisons; the one
module show, compare and report read through.

From BigQuery when the config writes there, else from the Parquet output with
DuckDB. Parquet files are opened through Beam's filesystems where the output is
a URL (gs://), and handed to DuckDB as Arrow tables: DuckDB's own gs:// support
is an extension it would download. A local output is read without Beam, whose
import would be most of the start-up of `show` and `runs`.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
import os
import re
import sys
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from evalbeam.transforms.local_cloud import bigquery_client
from evalbeam.metrics.rows.tables import ATTEMPTS, TABLES, arrow_schema

RUNS_SQL = """
SELECT run_id, name, run_date, started_at, finished_at, read_count, scored_count, dead_letter_count, metric_error_count, config
FROM {runs} {where} ORDER BY started_at DESC"""
SUMMARY_SQL = """
SELECT metric, slice, valid_count, error_count, mean, std, ci_low, ci_high, pass_rate,
       case_count, standard_error, between_run_std, pass_at_k, pass_all_k,
       position_consistency, position_consistency_ci_low, position_consistency_ci_high,
       jury_alpha, jury_alpha_units
FROM {summary} WHERE run_id = {param}
ORDER BY metric, slice <> 'overall', slice"""
# input.labels: each labelled metric's agreement with the people, overall first
CALIBRATION_SQL = """
SELECT {columns} FROM {calibration} WHERE run_id = {param}
ORDER BY metric, slice <> 'overall', slice"""
DEAD_LETTER_SQL = """
SELECT source, field, reason, SUBSTR(raw_record, 1, 300) AS raw_record_start FROM {dead_letter} WHERE run_id = {param}
ORDER BY origin, line, source LIMIT 20"""


# The reasons metrics failed, grouped per metric, most frequent first.
METRIC_ERRORS_SQL = """
SELECT metric, error, COUNT(*) AS n FROM {metric_results}
WHERE run_id = {param} AND error IS NOT NULL
GROUP BY metric, error ORDER BY metric, n DESC, error"""


class ResultsError(RuntimeError):
    """Results cannot be read from where they were asked for; the message says why."""


class ParquetResults:
    def __init__(self, output: str):
        self.output = output
        self.location = output
        self._tables: dict[tuple[str, str], pa.Table] = {}
        if not is_url(output) and not os.path.isdir(output):
            raise ResultsError(f"no results folder {output!r}")

    def _read(self, pattern: str, table: str) -> pa.Table:
        # read once per command: `runs` joins the runs tables twice more (means, flags)
        key = (pattern, table)
        if key not in self._tables:
            self._tables[key] = self._read_files(pattern, table)
        return self._tables[key]

    def _read_files(self, pattern: str, table: str, columns: list[str] | None = None, keep=None) -> pa.Table:
        """columns: only these; keep: a batch -> the mask of its rows to keep. Files are
        read a record batch at a time, so a large table read for a few of its rows
        (the metric errors of a million-row run) never sits in memory whole."""
        paths = match_files(pattern)
        tables = []
        for path in paths:
            try:
                if columns is None and keep is None:
                    with open_file(path) as f:
                        tables.append(pq.read_table(pa.BufferReader(f.read())))
                    continue
                with open_file(path) as f:
                    parquet = pq.ParquetFile(f)
                    present = [c for c in columns or parquet.schema_arrow.names if c in parquet.schema_arrow.names]
                    batches = [b.filter(keep(b)) if keep else b for b in parquet.iter_batches(columns=present)]
                    tables.append(pa.Table.from_batches(batches, schema=parquet.schema_arrow.empty_table().select(present).schema))
            except (OSError, pa.ArrowException) as e:  # one broken file must not hide every other run
                print(f"evalbeam: skipped unreadable file {path}: {e}", file=sys.stderr)
        empty = arrow_schema(table).empty_table()
        if columns is not None:
            empty = empty.select(columns)
        if not tables:
            return empty
        # older runs may lack newer columns: they read as nulls
        return pa.concat_tables([empty, *tables], promote_options="permissive")

    def query(self, sql: str, params: dict[str, Any], **tables: str | tuple[str, str]) -> list[dict[str, Any]]:
        """Run DuckDB SQL over tables given as {name: Parquet glob}, each registered under its name
        (or {name: (table, glob)} where the name is not the table's)."""
        with duckdb.connect() as con:
            for name, where in tables.items():
                table, pattern = where if isinstance(where, tuple) else (name, where)
                con.register(name, self._read(pattern, table))
            rel = con.execute(sql, params)
            columns = [d[0] for d in rel.description]
            return [dict(zip(columns, row)) for row in rel.fetchall()]

    def sql(self, template: str, params: dict[str, Any], tables: dict[str, tuple[str, str | None]]) -> list[dict[str, Any]]:
        """SQL written once for both backends: `{name}` is a table of `tables` ({name: (table,
        run_id)}; run_id None: every run's rows), `{P}` the parameter sigil."""
        where = {name: (table, join_path(self.output, run_id or "*", table, "*.parquet"))
                 for name, (table, run_id) in tables.items()}
        return self.query(template.format(P="$", **{name: name for name in tables}), params, **where)

    def runs(self, eval_name: str | None) -> list[dict[str, Any]]:
        where = "WHERE name = $name" if eval_name else ""
        return self.query(RUNS_SQL.format(runs="runs", where=where), {"name": eval_name} if eval_name else {},
                          runs=join_path(self.output, "*", "runs", "*.parquet"))

    def run_tables(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        def pattern(table):
            return join_path(self.output, run_id, table, "*.parquet")

        params = {"run_id": run_id}
        return {
            "runs": self.query("SELECT * FROM runs WHERE run_id = $run_id", params, runs=pattern("runs")),
            "summary": self.query(SUMMARY_SQL.format(summary="summary", param="$run_id"), params, summary=pattern("summary")),
            "dead_letter": self.query(DEAD_LETTER_SQL.format(dead_letter="dead_letter", param="$run_id"), params,
                                      dead_letter=pattern("dead_letter")),
            "calibration": self.query(calibration_sql("calibration", "$run_id"), params,
                                      calibration=pattern("calibration")),
            "metric_errors": self._metric_errors(pattern("metric_results"), params),
        }

    def _metric_errors(self, pattern: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """METRIC_ERRORS_SQL over only the rows with an error (and three columns)."""
        errors = self._read_files(pattern, "metric_results", ["run_id", "metric", "error"],
                                  keep=lambda batch: pc.is_valid(batch.column("error")))
        with duckdb.connect() as con:
            con.register("metric_results", errors)
            rel = con.execute(METRIC_ERRORS_SQL.format(metric_results="metric_results", param="$run_id"), params)
            columns = [d[0] for d in rel.description]
            return [dict(zip(columns, row)) for row in rel.fetchall()]


class BigQueryResults:
    def __init__(self, dataset: str):
        self.dataset = dataset
        self.location = f"BigQuery {dataset}"
        self._client = bigquery_client(dataset.rpartition(".")[0])

    def _query(self, sql: str, **params: str | int) -> list[dict[str, Any]]:
        from google.cloud import bigquery  # start-up time: Google Cloud clients only where used

        config = bigquery.QueryJobConfig(query_parameters=[
            bigquery.ScalarQueryParameter(k, "INT64" if isinstance(v, int) else "STRING", v) for k, v in params.items()])
        return [dict(row.items()) for row in self._client.query(sql, job_config=config).result()]

    def sql(self, template: str, params: dict[str, Any], tables: dict[str, tuple[str, str | None]]) -> list[dict[str, Any]]:
        """As ParquetResults.sql: a table restricted to one run is a subquery on run_id."""
        refs, params = {}, dict(params)
        for name, (table, run_id) in tables.items():
            if run_id is None:
                refs[name] = self._t(table)
            else:
                params[f"run_of_{name}"] = run_id
                refs[name] = f"(SELECT * FROM {self._t(table)} WHERE run_id = @run_of_{name})"
        return self._query(template.format(P="@", **refs), **params)

    def _t(self, table: str) -> str:
        return f"`{self.dataset}.{table}`"

    def runs(self, eval_name: str | None) -> list[dict[str, Any]]:
        where = "WHERE name = @name" if eval_name else ""
        return self._query(RUNS_SQL.format(runs=self._t("runs"), where=where), **({"name": eval_name} if eval_name else {}))

    def run_tables(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        return {
            "runs": self._query(f"SELECT * FROM {self._t('runs')} WHERE run_id = @run_id", run_id=run_id),
            "summary": self._query(SUMMARY_SQL.format(summary=self._t("summary"), param="@run_id"), run_id=run_id),
            "dead_letter": self._query(DEAD_LETTER_SQL.format(dead_letter=self._t("dead_letter"), param="@run_id"), run_id=run_id),
            "calibration": self._calibration(run_id),
            "metric_errors": self._query(METRIC_ERRORS_SQL.format(metric_results=self._t("metric_results"), param="@run_id"),
                                         run_id=run_id),
        }

    def _calibration(self, run_id: str) -> list[dict[str, Any]]:
        """A run's calibration rows; none from a dataset an evalbeam before the table prepared."""
        from google.api_core import exceptions  # start-up time: Google Cloud clients only where used

        try:
            return self._query(calibration_sql(self._t("calibration"), "@run_id"), run_id=run_id)
        except exceptions.NotFound:
            return []


def calibration_sql(table: str, param: str) -> str:
    columns = ", ".join(c.name for c in TABLES["calibration"] if c.name not in ("run_id", "run_date"))
    return CALIBRATION_SQL.format(columns=columns, calibration=table, param=param)


def results_for(config) -> ParquetResults | BigQueryResults:
    if config.output.bigquery:
        return BigQueryResults(config.output.bigquery)
    return ParquetResults(config.output.parquet)


@dataclasses.dataclass(frozen=True)
class Location:
    """Where runs' tables are: a Parquet output folder, or a BigQuery dataset."""

    parquet: str | None = None
    bigquery: str | None = None
    billing_project: str | None = None

    def __str__(self) -> str:
        return f"BigQuery {self.bigquery}" if self.bigquery else str(self.parquet)


def location_of(results) -> Location:
    """A results object (ParquetResults or BigQueryResults) -> its Location."""
    if getattr(results, "dataset", None):
        return Location(bigquery=results.dataset, billing_project=results.dataset.rpartition(".")[0])
    return Location(parquet=results.output)


@dataclasses.dataclass(frozen=True)
class Leftover:
    """What a run that ended early (Ctrl-C, a crash) left of its run_id in a local output:
    checkpointed judgments and agent cases a re-run with the same run_id reuses."""

    run_id: str
    folder: str
    files: int
    locked: bool  # a lock file beside it: a run may be writing it now


def leftovers(results) -> list[Leftover]:
    """The leftovers of a local Parquet output (none for BigQuery or gs://: not listed)."""
    output = getattr(results, "output", None)
    if not output or is_url(output):
        return []
    root = os.path.join(output, ATTEMPTS)
    if not os.path.isdir(root):
        return []
    found = []
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if name.startswith("compare-") or not os.path.isdir(folder):
            continue  # a comparison's staging, or a lock file
        files = sum(len(names) for _, _, names in os.walk(folder))
        if files:
            found.append(Leftover(name, folder, files, os.path.exists(os.path.join(root, name + ".lock"))))
    return found


def format_leftovers(found: list[Leftover]) -> str:
    if not found:
        return ""
    lines = ["", "left by runs that ended early (a re-run with the same run_id reuses them: evalbeam run CONFIG "
                 "--set run_id=RUN_ID; evalbeam runs --remove-leftovers RUN_ID removes them):"]
    for leftover in found:
        lines.append(f"  {leftover.run_id}: {leftover.files} file(s) in {leftover.folder}"
                     + (" (locked: a run may be writing it now)" if leftover.locked else ""))
    return "\n".join(lines)


def runs_row(results, run_id: str) -> dict[str, Any] | None:
    rows = results.run_tables(run_id)["runs"]
    return rows[0] if rows else None


def previous_run(results, name: str, run_id: str, run_date: dt.date) -> str | None:
    """The eval's latest run before this one by run date (then start time), other than run_id itself
    and other than a run that read nothing (an empty input: nothing to compare with)."""
    candidates = [r for r in results.runs(name) if r["run_id"] != run_id and as_date(r["run_date"]) <= run_date
                  and r.get("read_count") != 0]
    if not candidates:
        return None
    return max(candidates, key=lambda r: (as_date(r["run_date"]), r["started_at"]))["run_id"]


def as_date(value) -> dt.date:
    return dt.date.fromisoformat(value) if isinstance(value, str) else value


def read_rows(paths: list[str]) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        with open_file(path) as f:
            rows += pq.read_table(pa.BufferReader(f.read())).to_pylist()
    return rows


def optional_rows(results, sql: str, params: dict[str, Any], tables: dict) -> list[dict[str, Any]]:
    """results.sql(SQL, ...), or [] where one of its tables is missing: a BigQuery dataset prepared before
    the tables of a later feature (failure modes, red teaming) existed has none."""
    try:
        return results.sql(sql, params, tables)
    except Exception as e:  # noqa: BLE001 - google.api_core's NotFound, not imported here (start-up time)
        if type(e).__name__ == "NotFound":
            return []
        raise


def run_comparisons(results, run_id: str) -> list[dict[str, Any]]:
    """The comparisons rows of a run, from where its results are."""
    location = location_of(results)
    if location.bigquery:
        return results._query(f"SELECT * FROM `{location.bigquery}.comparisons` WHERE run_id = @run_id", run_id=run_id)
    return read_rows(match_files(join_path(location.parquet, run_id, "comparisons", "*.parquet")))


# A URL's scheme (gs://), as Beam's filesystems tell it
URL_RE = re.compile(r"[a-zA-Z][-a-zA-Z0-9+.]*://")


def is_url(path: str) -> bool:
    return URL_RE.match(path.strip()) is not None


def join_path(base: str, *parts: str) -> str:
    if is_url(base):
        from apache_beam.io.filesystems import FileSystems  # start-up time: Beam only for a URL

        return FileSystems.join(base, *parts)
    return os.path.join(base, *parts)


def open_file(path: str):
    """`path` opened for reading bytes."""
    if is_url(path):
        from apache_beam.io.filesystems import FileSystems  # start-up time: Beam only for a URL

        return FileSystems.open(path, mime_type="application/octet-stream")
    return open(path, "rb")


def match_files(pattern: str) -> list[str]:
    """The paths of the files `pattern` names, sorted. A local pattern is matched as
    Beam's local filesystem matches it: `*`, `?` and `[...]` within one path component,
    hidden files too, no folder entered through a symbolic link below the part of the
    pattern before its first wildcard, no link that leads nowhere."""
    if is_url(pattern):
        from apache_beam.io.filesystems import FileSystems  # start-up time: Beam only for a URL

        return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    parts = pattern.split(os.sep)
    first = next((i for i, part in enumerate(parts) if re.search(r"[*?[]", part)), len(parts) - 1)
    found = [os.sep.join(parts[:first]) or (os.sep if pattern.startswith(os.sep) else "")]
    for depth, part in enumerate(parts[first:], start=first):
        last = depth == len(parts) - 1
        found = [os.path.join(folder, entry.name) for folder in found for entry in _entries(folder)
                 if fnmatch.fnmatchcase(entry.name, part)
                 and (_is_file(entry) if last else entry.is_dir(follow_symlinks=False))]
    return sorted(found)


def _is_file(entry: os.DirEntry) -> bool:
    try:
        return not entry.is_dir() and entry.stat() is not None
    except OSError:  # a link to nothing
        return False


def _entries(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder or os.curdir) as entries:
            return list(entries)
    except OSError:  # no such folder (yet), or not a folder: no files
        return []
