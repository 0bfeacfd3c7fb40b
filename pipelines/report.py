"""Reading results back: a run's summary, and the list of runs.

From BigQuery when the config writes there, else from the Parquet output with
DuckDB. Parquet files are opened through Beam's filesystems (local or gs://)
and handed to DuckDB as Arrow tables: DuckDB's own gs:// support is an
extension it would download.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import re
import sys
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from evalbeam.transforms.local_cloud import bigquery_client
from evalbeam.transforms.schema import arrow_schema

RUNS_SQL = """
SELECT run_id, name, run_date, started_at, finished_at, read_count, scored_count, dead_letter_count, metric_error_count, config
FROM {runs} {where} ORDER BY started_at DESC"""
SUMMARY_SQL = """
SELECT metric, slice, valid_count, error_count, mean, std, ci_low, ci_high, pass_rate
FROM {summary} WHERE run_id = {param}
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
        if FileSystems.get_scheme(output) is None and not os.path.isdir(output):
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
        paths = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
        tables = []
        for path in paths:
            try:
                if columns is None and keep is None:
                    with FileSystems.open(path, mime_type="application/octet-stream") as f:
                        tables.append(pq.read_table(pa.BufferReader(f.read())))
                    continue
                with FileSystems.open(path, mime_type="application/octet-stream") as f:
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
        where = {name: (table, FileSystems.join(self.output, run_id or "*", table, "*.parquet"))
                 for name, (table, run_id) in tables.items()}
        return self.query(template.format(P="$", **{name: name for name in tables}), params, **where)

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
        from google.cloud import bigquery

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


# The most slices the terminal shows per metric (besides overall): the largest ones.
MAX_SHOWN_SLICES = 20


def format_summary(rows: list[dict[str, Any]], where: str | None = None) -> str:
    """The summary as a table: per metric, overall and its MAX_SHOWN_SLICES largest
    slices (most valid scores), then one line saying how many more there are and where."""
    shown, hidden = [], 0
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_metric.setdefault(r["metric"], []).append(r)
    for metric_rows in by_metric.values():
        overall = [r for r in metric_rows if r["slice"] == "overall"]
        slices = [r for r in metric_rows if r["slice"] != "overall"]
        if len(slices) > MAX_SHOWN_SLICES:
            largest = sorted(slices, key=lambda r: (-(r["valid_count"] or 0), r["slice"]))[:MAX_SHOWN_SLICES]
            hidden += len(slices) - MAX_SHOWN_SLICES
            slices = [r for r in slices if r in largest]
        shown += overall + slices
    lines = []
    for r in shown:
        ci = "-" if r["ci_low"] is None else f"[{_fmt(r['ci_low'], 3)}, {_fmt(r['ci_high'], 3)}]"
        lines.append((r["metric"], r["slice"], str(r["valid_count"]), str(r["error_count"]),
                      _fmt(r["mean"]), _fmt(r["std"]), ci, _fmt(r["pass_rate"], 3)))
    table = format_table(("metric", "slice", "n", "errors", "mean", "std", "95% CI", "pass rate"), lines)
    if hidden:
        table += (f"\n({hidden:,} more slice rows not shown, the largest {MAX_SHOWN_SLICES} of each metric are: "
                  f"every slice is in the run's summary table{f' in {where}' if where else ''})")
    return table


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
    problems += input_problems(r)
    return problems


def input_problems(r: dict[str, Any]) -> list[str]:
    """A run that read records but scored none, or dead-lettered more of them than
    its config's max_dead_letter_share allows (an empty input is an empty run)."""
    read, scored, dead = r["read_count"], r["scored_count"], r["dead_letter_count"]
    if not read:
        return []
    if not scored:
        return [f"no instance was scored: all {read} records read were dead-lettered (see dead letters)"]
    from evalbeam.configs import DEFAULT_MAX_DEAD_LETTER_SHARE

    try:
        share = json.loads(r.get("config") or "{}").get("max_dead_letter_share", DEFAULT_MAX_DEAD_LETTER_SHARE)
    except (TypeError, ValueError):
        share = DEFAULT_MAX_DEAD_LETTER_SHARE
    if dead / read > share:
        return [f"{dead} of {read} records read were dead-lettered ({dead / read:.0%}), more than "
                f"max_dead_letter_share {share:g} allows"]
    return []


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
    judge = judge_accounting(r)
    if judge:
        lines += format_judge(judge)
    lines.append(format_summary(tables["summary"], str(results.location)))
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
        more = "; the first 20 here, all of them in the run's dead_letter table" if r["dead_letter_count"] > 20 else ""
        lines.append(f"\ndead letters ({r['dead_letter_count']}{more}):")
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


HEADLINE_METRICS = 3


def runs_report(results, eval_name: str | None, last: int | None = None) -> str:
    """The last runs (of an eval), newest first, with the overall means of their first
    metrics (in the config's order) and the flags of their comparisons (when they were compared)."""
    rows = results.runs(eval_name)[:last]  # last None: all
    if not rows:
        return f"no runs{f' of eval {eval_name!r}' if eval_name else ''} in {results.location}"
    ids = {r["run_id"] for r in rows}
    means = overall_means(results, eval_name, ids)
    flags = comparison_flags(results, eval_name, ids)
    lines = []
    for r in rows:
        m = means.get(r["run_id"], {})
        shown = [k for k in dict.fromkeys([*configured_metrics(r.get("config")), *sorted(m)]) if k in m][:HEADLINE_METRICS]
        headline = ", ".join(f"{k} {_fmt(m[k]['mean'], 3)}" for k in shown) + (f" (+{len(m) - len(shown)})" if len(m) > len(shown) else "")
        lines.append((r["run_id"], r["name"], str(r["run_date"]), f"{r['started_at']:%Y-%m-%d %H:%M:%S}", str(r["read_count"]),
                      str(r["scored_count"]), str(r["dead_letter_count"]), str(r["metric_error_count"]),
                      headline or "-", format_flags(flags.get(r["run_id"], []))))
    return format_table(("run_id", "eval", "run date", "started (UTC)", "read", "scored", "dead-lettered", "metric errors",
                         "means (overall)", "compared"), lines)


def configured_metrics(config_text: str | None) -> list[str]:
    """The output names of a run's metrics in the order its config lists them (the headline first)."""
    try:
        metrics = json.loads(config_text or "{}").get("metrics") or []
    except (ValueError, AttributeError):
        return []
    names = []
    for m in metrics:
        if isinstance(m, str):
            names.append(m)
        elif isinstance(m, dict) and (m.get("as") or m.get("name")):
            names.append(m.get("as") or m["name"])
    return names


def format_flags(pairs: list[dict[str, Any]]) -> str:
    """`vs BASE: REGRESSED exact_match, rouge_1; improved x` per base compared with, `-` when never compared."""
    out = []
    for p in pairs:
        parts = []
        if p["regressions"]:
            parts.append("REGRESSED " + ", ".join(sorted({m for m, _ in p["regressions"]})))
        if p["improvements"]:
            parts.append("improved " + ", ".join(sorted({m for m, _ in p["improvements"]})))
        if p.get("unpaired"):  # a comparison that paired nothing shows no change, and is no pass
            parts.append("NOTHING PAIRED for " + ", ".join(sorted(set(p["unpaired"]))))
        out.append(f"vs {p['base_run_id']}: {'; '.join(parts) or 'no change flagged'}")
    return " | ".join(out) or "-"


# ------------------------------------------------------------- show --json, runs, and the HTML report's data
# Written once for DuckDB (Parquet) and BigQuery: `{name}` is a table (one run's rows, or
# every run's), `{P}` the parameter sigil; only functions both dialects have.

# Distributions computed where the rows are: a metric with few distinct scores (0/1, a 1..5
# rubric) is counted per score, any other in 20 equal bins between its min and max.
HISTOGRAM_SQL = """
WITH s AS (SELECT metric, score FROM {scores} WHERE score IS NOT NULL),
r AS (SELECT metric, MIN(score) AS lo, MAX(score) AS hi, COUNT(DISTINCT score) AS distinct_scores FROM s GROUP BY metric)
SELECT s.metric, r.lo, r.hi, r.distinct_scores,
  CASE WHEN r.distinct_scores <= {max_distinct} THEN s.score
       ELSE LEAST(FLOOR((s.score - r.lo) / (r.hi - r.lo) * {bins}), {bins} - 1) END AS bucket,
  COUNT(*) AS n
FROM s JOIN r ON s.metric = r.metric
GROUP BY s.metric, r.lo, r.hi, r.distinct_scores, bucket
ORDER BY s.metric, bucket"""
HISTOGRAM_BINS = 20
HISTOGRAM_MAX_DISTINCT = 12
# The overall means of an eval's runs (filtered to the runs wanted afterwards: summary tables are small).
EVAL_MEANS_SQL = """
SELECT s.run_id, s.metric, s.mean, s.ci_low, s.ci_high, s.valid_count
FROM {summary} s JOIN {runs} r ON s.run_id = r.run_id
WHERE s.slice = 'overall' {where}"""
EVAL_COMPARISONS_SQL = """
SELECT c.run_id, c.base_run_id, c.metric, c.slice, c.regression, c.improvement, c.n_paired, c.compared_at
FROM {comparisons} c JOIN {runs} r ON c.run_id = r.run_id {where}"""
DEAD_LETTER_REASONS_SQL = """
SELECT field, reason, COUNT(*) AS n FROM {dead_letter}
GROUP BY field, reason ORDER BY n DESC, reason LIMIT 5000"""
# The paired instances of one metric that got worse most, worst first; {worse} is how much
# worse the run's score is than the base's (positive: worse) for the metric's direction.
WORST_CTE = """
WITH b AS (SELECT instance_id, score FROM {base_scores} WHERE metric = {P}metric AND score IS NOT NULL),
r AS (SELECT instance_id, score FROM {run_scores} WHERE metric = {P}metric AND score IS NOT NULL),
w AS (SELECT b.instance_id, b.score AS base_score, r.score AS score, {worse} AS worse
      FROM b JOIN r ON b.instance_id = r.instance_id WHERE {worse} > 0
      ORDER BY worse DESC, b.instance_id LIMIT {limit})"""
WORSE = {"higher": "b.score - r.score", "lower": "r.score - b.score", "closer_to_zero": "ABS(r.score) - ABS(b.score)"}
# Instance columns shown beside a worsened score (in this order; then the slice columns).
SHOWN_FIELDS = ("prompt", "instruction", "history", "context", "reference", "response", "baseline_model_response",
                "predicted_trajectory", "reference_trajectory", "latency_in_seconds", "failure", "source")


def config_digest(config_text: str | None) -> str | None:
    """Which config a run ran with: the sha256 (64 hex digits, as `sha256sum` prints it) of
    the config stored in its runs row (`config`, UTF-8), so that anyone can recompute it."""
    return hashlib.sha256(config_text.encode("utf-8")).hexdigest() if config_text else None


def judge_accounting(run: dict[str, Any]) -> dict[str, Any] | None:
    """The judge's accounting of a runs row (None for a run without judge metrics)."""
    if not run.get("judge_requests"):
        return None
    usage = json.loads(run["judge_usage"]) if run.get("judge_usage") else {}
    return {
        "requests": run["judge_requests"], "cache_hits": run["judge_cache_hits"], "calls": run["judge_calls"],
        "rate_limited": run["judge_rate_limited"], "failures": run["judge_failures"],
        "prompt_tokens": run["judge_prompt_tokens"], "output_tokens": run["judge_output_tokens"],
        "estimated_cost_usd": run.get("judge_estimated_cost"), "per_metric": usage,
    }


def format_judge(judge: dict[str, Any]) -> list[str]:
    cost = "no price in judge.prices" if judge["estimated_cost_usd"] is None else f"${judge['estimated_cost_usd']:.4f}"
    lines = [f"judge: {judge['requests']} judgments needed, {judge['cache_hits']} from the cache; {judge['calls']} calls "
             f"({judge['rate_limited']} rate-limited), {judge['failures']} failed; tokens {judge['prompt_tokens']} prompt "
             f"+ {judge['output_tokens']} output; estimated cost {cost}"]
    for metric, u in sorted(judge["per_metric"].items()):
        lines.append(f"  {metric}: {u.get('requests', 0)} needed, {u.get('cache_hits', 0)} cached, {u.get('calls', 0)} calls, "
                     f"{u.get('rate_limited', 0)} x 429, {u.get('failures', 0)} failed, "
                     f"{u.get('prompt_tokens', 0)}+{u.get('output_tokens', 0)} tokens"
                     + (f", ${u['estimated_cost']:.4f}" if u.get("estimated_cost") is not None else ""))
    return lines


_FIELD_PREFIX = re.compile(r"^field '[^']*'(?: \(column '[^']*'\))?: ")
_GOT_VALUE = re.compile(r"\b(got|id) ('[^']*'|\"[^\"]*\")")
# a number standing alone (a line, a column, a count), not part of a word or name (UTF-8, \\ud83d)
_NUMBER = re.compile(r"(?<![A-Za-z]-)(?<!\w)\d+(?:,\d{3})*(?!\w)")


def reason_kind(reason: str) -> str:
    """A dead letter's reason without its particulars, so that `must be a number, got 'slow'`
    and `..., got 'fast'` count as one: the field (shown beside it), the value it got
    and a repeated id taken out, numbers standing alone (columns, lines) as N."""
    text = _FIELD_PREFIX.sub("", " ".join(str(reason).split()))
    return _NUMBER.sub("N", _GOT_VALUE.sub(r"\1 '...'", text))


def dead_letter_reasons(results, run_id: str) -> list[dict[str, Any]]:
    """Dead letters counted by field and kind of reason, most frequent first, with one example each."""
    rows = results.sql(DEAD_LETTER_REASONS_SQL, {}, {"dead_letter": ("dead_letter", run_id)})
    kinds: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = (r["field"], reason_kind(r["reason"]))
        entry = kinds.setdefault(key, {"field": r["field"], "reason": key[1], "example": r["reason"], "n": 0})
        entry["n"] += r["n"]
    return sorted(kinds.values(), key=lambda e: (-e["n"], e["reason"]))


def histograms(results, run_id: str) -> dict[str, dict[str, Any]]:
    """metric -> {"discrete": bool, "lo", "hi", "buckets": [(value or bin start, bin width or None, count)]}."""
    rows = results.sql(HISTOGRAM_SQL.replace("{bins}", str(HISTOGRAM_BINS)).replace("{max_distinct}", str(HISTOGRAM_MAX_DISTINCT)),
                       {}, {"scores": ("metric_results", run_id)})
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        discrete = r["distinct_scores"] <= HISTOGRAM_MAX_DISTINCT
        h = out.setdefault(r["metric"], {"discrete": discrete, "lo": r["lo"], "hi": r["hi"], "buckets": []})
        if discrete:
            h["buckets"].append((float(r["bucket"]), None, r["n"]))
        else:
            width = (r["hi"] - r["lo"]) / HISTOGRAM_BINS
            h["buckets"].append((r["lo"] + int(r["bucket"]) * width, width, r["n"]))
    return out


def _date(value) -> dt.date:
    return dt.date.fromisoformat(value) if isinstance(value, str) else value


def runs_until(results, run: dict[str, Any], last: int) -> list[dict[str, Any]]:
    """A run and the last runs of its eval before it (by run date, then start time), oldest first."""
    key = (_date(run["run_date"]), run["started_at"])
    rows = [r for r in results.runs(run["name"]) if (_date(r["run_date"]), r["started_at"]) <= key]
    rows.sort(key=lambda r: (_date(r["run_date"]), r["started_at"]))
    return rows[-last:]


def overall_means(results, name: str | None, run_ids: set[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """run_id -> metric -> its overall summary row, for the runs asked."""
    where, params = ("AND r.name = {P}name", {"name": name}) if name else ("", {})
    rows = results.sql(EVAL_MEANS_SQL.replace("{where}", where), params,
                       {"summary": ("summary", None), "runs": ("runs", None)})
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r["run_id"] in run_ids:
            out.setdefault(r["run_id"], {})[r["metric"]] = r
    return out


def comparison_flags(results, name: str | None, run_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """run_id -> per base run compared with: the regressed and improved (metric, slice)s."""
    where, params = ("WHERE r.name = {P}name", {"name": name}) if name else ("", {})
    rows = results.sql(EVAL_COMPARISONS_SQL.replace("{where}", where), params,
                       {"comparisons": ("comparisons", None), "runs": ("runs", None)})
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if r["run_id"] not in run_ids:
            continue
        p = pairs.setdefault((r["run_id"], r["base_run_id"]), {"base_run_id": r["base_run_id"], "regressions": [],
                                                                "improvements": [], "unpaired": []})
        if r["slice"] == "overall" and not r["n_paired"]:
            p["unpaired"].append(r["metric"])
        if r["regression"]:
            p["regressions"].append((r["metric"], r["slice"]))
        if r["improvement"]:
            p["improvements"].append((r["metric"], r["slice"]))
    out: dict[str, list[dict[str, Any]]] = {}
    for (run_id, _), p in sorted(pairs.items()):
        out.setdefault(run_id, []).append(p)
    return out


def worst_instances(results, base_run_id: str, run_id: str, metric: str, direction: str,
                    limit: int = 5) -> list[dict[str, Any]]:
    """The paired instances whose score of `metric` got worse most, with both runs' instance rows."""
    cte = WORST_CTE.replace("{worse}", WORSE.get(direction, WORSE["higher"])).replace("{limit}", str(int(limit)))
    tables = {"base_scores": ("metric_results", base_run_id), "run_scores": ("metric_results", run_id)}
    worst = results.sql(cte + "\nSELECT * FROM w ORDER BY worse DESC, instance_id", {"metric": metric}, tables)
    if not worst:
        return []
    inputs = {}
    for side, rid in (("base", base_run_id), ("run", run_id)):
        rows = results.sql(cte + "\nSELECT i.* FROM {instances} i JOIN w ON i.instance_id = w.instance_id", {"metric": metric},
                           {**tables, "instances": ("instances", rid)})
        inputs[side] = {r["instance_id"]: r for r in rows}
    return [{**w, "base_instance": inputs["base"].get(w["instance_id"], {}),
             "run_instance": inputs["run"].get(w["instance_id"], {})} for w in worst]


def show_data(results, run_id: str, tables: dict | None = None) -> dict[str, Any]:
    """What `show --json` prints: the run, its counts, judge accounting, summary, metric errors
    by reason, dead letters (the first ones and the counts by reason) and problems."""
    tables = tables or results.run_tables(run_id)
    if not tables["runs"]:
        raise ResultsError(f"no run {run_id!r} in {results.location}")
    run = tables["runs"][0]
    counts = {k: run.get(k) for k in ("read_count", "scored_count", "dead_letter_count", "metric_error_count",
                                       "lines_read", "lines_skipped", "lines_scored", "lines_dead_lettered")}
    return {
        "run_id": run["run_id"], "name": run["name"], "run_date": run["run_date"], "started_at": run["started_at"],
        "finished_at": run["finished_at"], "evalbeam_version": run["evalbeam_version"],
        "config_digest": config_digest(run["config"]), "counts": counts,
        "reconciles": run["read_count"] == run["scored_count"] + run["dead_letter_count"],
        "judge": judge_accounting(run),
        "summary": tables["summary"],
        "metric_errors": tables.get("metric_errors") or [],
        "dead_letters": {"first": tables["dead_letter"], "by_reason": dead_letter_reasons(results, run_id)}
        if run["dead_letter_count"] else {"first": [], "by_reason": []},
        "problems": run_problems(tables),
        "results": results.location,
    }


def to_json(value: Any) -> str:
    """JSON for scripts: dates and times in ISO 8601, a non-finite number as null."""
    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, (dt.date, dt.datetime)):
            return v.isoformat()
        return v

    return json.dumps(clean(value), indent=2, ensure_ascii=False, allow_nan=False)


TREND_RUNS = 30
WORST_SHOWN = 5


def metric_info(config_text: str | None) -> dict[str, dict[str, Any]]:
    """output name -> {direction, range (lo, hi) or None, threshold} from the config a run
    ran with and the registry (a config no longer valid here: nothing; charts use the data)."""
    from evalbeam.configs import EvalConfig
    from evalbeam.metrics.agent import PASSTHROUGH_FIELDS
    from evalbeam.metrics.registry import get_metric

    try:
        config = EvalConfig.model_validate(json.loads(config_text or ""))
    except (ValueError, TypeError):
        return {}
    out = {}
    for name in PASSTHROUGH_FIELDS:
        d = get_metric(name)
        out[name] = {"direction": d.direction, "range": score_range(d.score_range), "threshold": None}
    for m in config.metrics:
        d = m.definition()
        out[m.output_name] = {"direction": m.effective_direction(), "range": score_range(d.score_range) if d else None,
                              "threshold": m.effective_threshold()}
    return out


def score_range(text: str) -> tuple[float, float] | None:
    """The registry's score range ("0..1", "1..5", "0/1", "-2..2") as numbers; None when open (">=0")."""
    m = re.fullmatch(r"(-?[\d.]+)(?:\.\.|/)(-?[\d.]+)", text.strip())
    return (float(m.group(1)), float(m.group(2))) if m else None


def report_data(results, run_id: str, base_run_id: str | None = None,
                comparisons: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Everything `evalbeam report` shows, read from where the run's tables are; rendering
    (pipelines.report_html, report_charts) reads nothing."""
    tables = results.run_tables(run_id)
    data = show_data(results, run_id, tables)
    run = tables["runs"][0]
    data["metrics"] = metric_info(run["config"])
    data["histograms"] = histograms(results, run_id)
    history = runs_until(results, run, TREND_RUNS)
    means = overall_means(results, run["name"], {r["run_id"] for r in history})
    data["trend"] = {}
    for r in history:
        for metric, s in means.get(r["run_id"], {}).items():
            data["trend"].setdefault(metric, []).append({"run_id": r["run_id"], "run_date": _date(r["run_date"]),
                                                         **{k: s[k] for k in ("mean", "ci_low", "ci_high")}})
    data["base_run_id"] = base_run_id
    data["comparisons"] = comparisons or []
    data["worst"] = {}
    regressed = {}
    for c in data["comparisons"]:
        if c["regression"]:
            regressed.setdefault(c["metric"], c["direction"])
    for metric, direction in sorted(regressed.items()):
        data["worst"][metric] = worst_instances(results, base_run_id, run_id, metric, direction, WORST_SHOWN)
    return data


def comparison_rows(results, base_run_id: str, run_id: str, options, also_parquet: str | None = None
                    ) -> tuple[list[dict[str, Any]], bool]:
    """The comparison of run_id with base_run_id: the rows already in the comparisons table,
    else computed (and written there) by `evalbeam compare`'s pipeline. -> (rows, computed)."""
    from evalbeam.pipelines.compare import compare, run_comparisons

    rows = [r for r in run_comparisons(results, run_id) if r["base_run_id"] == base_run_id]
    if rows:
        return rows, False
    # a report shows the comparison asked for, whichever evals the runs are of
    return compare(results, base_run_id, [run_id], options, also_parquet=also_parquet,
                   allow_different_evals=True), True
