"""Reading a run's Parquet output back with DuckDB, for the printed summary."""
from __future__ import annotations

import math
from typing import Any

import duckdb

from apache_beam.io.filesystems import FileSystems


def _table_glob(output: str, run_id: str, table: str) -> str:
    return FileSystems.join(output, run_id, table, "*.parquet")


def read_table(output: str, run_id: str, table: str, order_by: str = "") -> list[dict[str, Any]]:
    with duckdb.connect() as con:
        rel = con.sql(f"SELECT * FROM read_parquet($glob){' ORDER BY ' + order_by if order_by else ''}",
                      params={"glob": _table_glob(output, run_id, table)})
        columns = rel.columns
        return [dict(zip(columns, row)) for row in rel.fetchall()]


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_summary(rows: list[dict[str, Any]]) -> str:
    header = ("metric", "slice", "n", "errors", "mean", "std", "95% CI", "pass rate")
    lines = []
    for r in rows:
        ci = "-" if r["ci_low"] is None else f"[{_fmt(r['ci_low'], 3)}, {_fmt(r['ci_high'], 3)}]"
        lines.append((r["metric"], r["slice"], str(r["valid_count"]), str(r["error_count"]),
                      _fmt(r["mean"]), _fmt(r["std"]), ci, _fmt(r["pass_rate"], 3)))
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def run_report(output: str, run_id: str) -> str:
    runs = read_table(output, run_id, "runs")
    summary = read_table(output, run_id, "summary", "metric, slice <> 'overall', slice")
    lines = [f"run {run_id}"]
    if runs:
        r = runs[0]
        lines.append(
            f"read {r['read_count']} = scored {r['scored_count']} + dead-lettered {r['dead_letter_count']}; "
            f"metric errors {r['metric_error_count']}"
        )
    lines.append(format_summary(summary))
    dead = read_table(output, run_id, "dead_letter", "source")
    if dead:
        lines.append(f"\ndead letters ({len(dead)}):")
        lines += [f"  {d['source']}: {d['reason']}" for d in dead[:20]]
        if len(dead) > 20:
            lines.append(f"  ... {len(dead) - 20} more in {FileSystems.join(output, run_id, 'dead_letter')}")
    lines.append(f"\noutput: {FileSystems.join(output, run_id)}")
    return "\n".join(lines)
