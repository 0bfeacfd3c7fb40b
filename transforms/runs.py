"""The `runs` row: what ran, when, counts that reconcile (read = scored +
dead-lettered), and the judge's accounting with an estimated cost."""
from __future__ import annotations

import datetime as dt
import json

import apache_beam as beam

from transforms.schema import RunKey, utc_now


def _count(pcoll, label):
    return pcoll | label >> beam.combiners.Count.Globally()


def judge_cost(totals: dict[str, int], price: dict[str, float] | None) -> float | None:
    """USD for the tokens: online tokens at the online price, the tokens of batch
    answers at the batch price (given, else half the online price)."""
    if not price:
        return None
    online_in, online_out = price.get("input_per_million", 0.0), price.get("output_per_million", 0.0)
    batch_in = price.get("batch_input_per_million", online_in / 2)
    batch_out = price.get("batch_output_per_million", online_out / 2)
    batch_prompt, batch_output = totals.get("batch_prompt_tokens", 0), totals.get("batch_output_tokens", 0)
    return ((totals["prompt_tokens"] - batch_prompt) * online_in + batch_prompt * batch_in
            + (totals["output_tokens"] - batch_output) * online_out + batch_output * batch_out) / 1e6


def judge_totals(usage: dict[str, dict[str, int]], prices: dict[str, dict[str, float]], model: str) -> dict:
    total = {k: sum(m.get(k, 0) for m in usage.values()) for k in
             ("requests", "cache_hits", "calls", "rate_limited", "failures", "prompt_tokens", "output_tokens",
              "batch_prompt_tokens", "batch_output_tokens")}
    price = prices.get(model)
    cost = judge_cost(total, price)
    if price:  # each metric's (and rubric stage's) share of the cost
        usage = {m: {**u, "estimated_cost": judge_cost({"prompt_tokens": 0, "output_tokens": 0, **u}, price)}
                 for m, u in usage.items()}
    return {
        "judge_requests": total["requests"],
        "judge_cache_hits": total["cache_hits"],
        "judge_calls": total["calls"],
        "judge_rate_limited": total["rate_limited"],
        "judge_failures": total["failures"],
        "judge_prompt_tokens": total["prompt_tokens"],
        "judge_output_tokens": total["output_tokens"],
        "judge_estimated_cost": cost,
        "judge_usage": json.dumps(usage, sort_keys=True) if usage else None,
    }


def _runs_row(_, *, base, prices, model, read, scored, dead, metric_errors, usage, lines):
    lines_read, lines_skipped, lines_scored, lines_dead = lines
    return {
        **base,
        "finished_at": utc_now(),
        "read_count": read,
        "scored_count": scored,
        "dead_letter_count": dead,
        "metric_error_count": metric_errors,
        "lines_read": lines_read,
        "lines_skipped": lines_skipped,
        "lines_scored": lines_scored,
        "lines_dead_lettered": lines_dead,
        **judge_totals(usage, prices, model),
    }


def _sum_tuples(rows) -> tuple:
    return tuple(map(sum, zip((0, 0, 0, 0), *rows)))


def _sum(pcoll, label, value):
    return pcoll | f"{label}Each" >> beam.Map(value) | f"{label}Sum" >> beam.CombineGlobally(sum)


class RunRecord(beam.PTransform):
    """(records read, scored instances, every scored part, dead letters, judge
    usage, source lines) -> the one `runs` row.

    Two accounts must balance: records (read = scored + dead-lettered) and the
    source's physical lines (read = skipped + in scored records + in dead
    letters). The second is counted from the files themselves and from what
    reached the end, so a record lost anywhere on the way shows as a mismatch."""

    def __init__(self, run: RunKey, name: str, config_json: str, version: str, started_at: dt.datetime,
                 prices: dict | None = None, model: str | None = None):
        super().__init__()
        self._base = {
            **run.columns(),
            "name": name,
            "config": config_json,
            "evalbeam_version": version,
            "started_at": started_at,
        }
        self._prices = prices or {}
        self._model = model

    def expand(self, inputs):
        read, computed, scored, dead, usage, source_lines = inputs
        metric_errors = _sum(scored, "MetricErrors", lambda s: sum(r["error"] is not None for r in s.results))
        # each part is summed before the parts meet: a Flatten of one tuple per row
        # would be held whole by the local runner
        lines = (
            (
                source_lines | "LinesRead" >> beam.Map(lambda s: (s.lines, s.skipped, 0, 0))
                | "SumLinesRead" >> beam.CombineGlobally(_sum_tuples),
                computed | "LinesScored" >> beam.Map(lambda s: (0, 0, s.instance.line_count, 0))
                | "SumLinesScored" >> beam.CombineGlobally(_sum_tuples),
                dead | "LinesDead" >> beam.Map(lambda d: (0, 0, 0, d.line_count))
                | "SumLinesDead" >> beam.CombineGlobally(_sum_tuples),
            )
            | "AllLines" >> beam.Flatten()
            | "SumLines" >> beam.CombineGlobally(_sum_tuples)
        )
        side = beam.pvalue.AsSingleton
        return (
            read.pipeline
            | "Start" >> beam.Create([None])
            | "RunRow" >> beam.Map(
                _runs_row,
                base=self._base,
                prices=self._prices,
                model=self._model,
                read=side(_count(read, "CountRead")),
                scored=side(_count(computed, "CountScored")),
                dead=side(_count(dead, "CountDeadLetters")),
                metric_errors=side(metric_errors),
                usage=side(usage),
                lines=side(lines),
            )
        )
