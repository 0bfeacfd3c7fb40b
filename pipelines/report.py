"""Reading results back: a run's summary, and the list of runs.

From BigQuery when the config writes there, else from the Parquet output with
DuckDB. Parquet files are opened through Beam's filesystems (local or gs://)
and handed to DuckDB as Arrow tables: DuckDB's own gs:// support is an
extension it would download.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from transforms.local_cloud import bigquery_client
from transforms.schema import arrow_schema

RUNS_SQL = """
SELECT run_id, name, run_date, started_at, finished_at, read_count, scored_count, dead_letter_count, metric_error_count
FROM {runs} {where} ORDER BY started_at DESC"""
SUMMARY_SQL = """
SELECT metric, slice, valid_count, error_count, mean, std, ci_low, ci_high, pass_rate
FROM {summary} WHERE run_id = {param}
ORDER BY metric, slice <> 'overall', slice"""
DEAD_LETTER_SQL = """
SELECT source, reason FROM {dead_letter} WHERE run_id = {param}
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
        if FileSystems.get_scheme(output) is None and not os.path.isdir(output):
            raise ResultsError(f"no results folder {output!r}")

    def _read(self, pattern: str, table: str) -> pa.Table:
        paths = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
        tables = []
        for path in paths:
            try:
                with FileSystems.open(path, mime_type="application/octet-stream") as f:
                    tables.append(pq.read_table(pa.BufferReader(f.read())))
            except (OSError, pa.ArrowException) as e:  # one broken file must not hide every other run
                print(f"evalbeam: skipped unreadable file {path}: {e}", file=sys.stderr)
        schema = arrow_schema(table)
        if not tables:
            return schema.empty_table()
        # older runs may lack newer columns: they read as nulls
        return pa.concat_tables([schema.empty_table(), *tables], promote_options="permissive")

    def query(self, sql: str, params: dict[str, str], **tables: str) -> list[dict[str, Any]]:
        """Run DuckDB SQL over tables given as {name: Parquet glob}, each registered under its name."""
        with duckdb.connect() as con:
            for name, pattern in tables.items():
                con.register(name, self._read(pattern, name))
            rel = con.execute(sql, params)
            columns = [d[0] for d in rel.description]
            return [dict(zip(columns, row)) for row in rel.fetchall()]

    def runs(self, eval_name: str | None) -> list[dict[str, Any]]:
        where = "WHERE name = $name" if eval_name else ""
        return self.query(RUNS_SQL.format(runs="runs", where=where), {"name": eval_name} if eval_name else {},
                          runs=FileSystems.join(self.output, "*", "runs", "*.parquet"))

    def run_tables(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        def pattern(table):
            return FileSystems.join(self.output, run_id, table, "*.parquet")

        params = {"run_id": run_id}
        return {
            "runs": self.query("SELECT * FROM runs WHERE run_id = $run_id", params, runs=pattern("runs")),
            "summary": self.query(SUMMARY_SQL.format(summary="summary", param="$run_id"), params, summary=pattern("summary")),
            "dead_letter": self.query(DEAD_LETTER_SQL.format(dead_letter="dead_letter", param="$run_id"), params,
                                      dead_letter=pattern("dead_letter")),
            "metric_errors": self.query(METRIC_ERRORS_SQL.format(metric_results="metric_results", param="$run_id"),
                                        params, metric_results=pattern("metric_results")),
        }


class BigQueryResults:
    def __init__(self, dataset: str):
        self.dataset = dataset
        self.location = f"BigQuery {dataset}"
        self._client = bigquery_client(dataset.rpartition(".")[0])

    def _query(self, sql: str, **params: str) -> list[dict[str, Any]]:
        from google.cloud import bigquery

        config = bigquery.QueryJobConfig(
            query_parameters=[bigquery.ScalarQueryParameter(k, "STRING", v) for k, v in params.items()]
        )
        return [dict(row.items()) for row in self._client.query(sql, job_config=config).result()]

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
            "metric_errors": self._query(METRIC_ERRORS_SQL.format(metric_results=self._t("metric_results"), param="@run_id"),
                                         run_id=run_id),
        }


def results_for(config) -> ParquetResults | BigQueryResults:
    if config.output.bigquery:
        return BigQueryResults(config.output.bigquery)
    return ParquetResults(config.output.parquet)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_table(header: tuple[str, ...], lines: list[tuple[str, ...]]) -> str:
    widths = [max([len(h)] + [len(line[i]) for line in lines]) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    return "\n".join(out)


def format_summary(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        ci = "-" if r["ci_low"] is None else f"[{_fmt(r['ci_low'], 3)}, {_fmt(r['ci_high'], 3)}]"
        lines.append((r["metric"], r["slice"], str(r["valid_count"]), str(r["error_count"]),
                      _fmt(r["mean"]), _fmt(r["std"]), ci, _fmt(r["pass_rate"], 3)))
    return format_table(("metric", "slice", "n", "errors", "mean", "std", "95% CI", "pass rate"), lines)


def run_problems(tables: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What makes a run's results unusable: counts that do not reconcile, and
    metrics without a single valid score. Empty when all is well."""
    r = tables["runs"][0]
    problems = []
    if r["read_count"] != r["scored_count"] + r["dead_letter_count"]:
        problems.append(f"records do not reconcile: read {r['read_count']} != scored {r['scored_count']} "
                        f"+ dead-lettered {r['dead_letter_count']}")
    if r.get("lines_read") is not None:
        accounted = r["lines_skipped"] + r["lines_scored"] + r["lines_dead_lettered"]
        if r["lines_read"] != accounted:
            problems.append(f"source lines do not reconcile: {r['lines_read']} read != {accounted} accounted for "
                            "(records were lost between reading and scoring)")
    for s in tables["summary"]:
        if s["slice"] == "overall" and s["valid_count"] == 0 and s["error_count"] > 0:
            problems.append(f"metric {s['metric']} has no valid score: all {s['error_count']} rows failed")
    return problems


def run_report(results, run_id: str, tables: dict | None = None) -> str:
    tables = tables or results.run_tables(run_id)
    if not tables["runs"]:
        return f"no run {run_id!r} in {results.location}"
    r = tables["runs"][0]
    lines = [
        f"run {run_id} ({r['name']}, run date {r['run_date']})",
        f"read {r['read_count']} = scored {r['scored_count']} + dead-lettered {r['dead_letter_count']}; "
        f"metric errors {r['metric_error_count']}",
    ]
    if r.get("lines_read") is not None:
        lines.append(f"source lines {r['lines_read']} = {r['lines_scored']} scored + {r['lines_dead_lettered']} "
                     f"dead-lettered + {r['lines_skipped']} holding no record")
    lines.append(format_summary(tables["summary"]))
    errors = tables.get("metric_errors") or []
    if errors:
        lines.append(f"\nmetric errors ({sum(e['n'] for e in errors)}), by reason:")
        shown: dict[str, int] = {}
        for e in errors:
            shown[e["metric"]] = shown.get(e["metric"], 0) + 1
            if shown[e["metric"]] <= 5:
                lines.append(f"  {e['metric']}: {e['n']} x {_one_line(e['error'])}")
        for metric, n in shown.items():
            if n > 5:
                lines.append(f"  {metric}: ... and {n - 5} other reasons")
    dead = tables["dead_letter"]
    if dead:
        lines.append(f"\ndead letters ({r['dead_letter_count']}{', the first 20' if r['dead_letter_count'] > 20 else ''}):")
        lines += [f"  {d['source']}: {d['reason']}" for d in dead]
    problems = run_problems(tables)
    if problems:
        lines.append("\nPROBLEMS:")
        lines += [f"  {p}" for p in problems]
    lines.append(f"\nresults: {results.location}")
    return "\n".join(lines)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def runs_report(results, eval_name: str | None) -> str:
    rows = results.runs(eval_name)
    if not rows:
        return f"no runs{f' of eval {eval_name!r}' if eval_name else ''} in {results.location}"
    lines = [(r["run_id"], r["name"], str(r["run_date"]), f"{r['started_at']:%Y-%m-%d %H:%M:%S}", str(r["read_count"]),
              str(r["scored_count"]), str(r["dead_letter_count"]), str(r["metric_error_count"])) for r in rows]
    return format_table(("run_id", "eval", "run date", "started (UTC)", "read", "scored", "dead-lettered", "metric errors"), lines)
