"""The `runs` row: what ran, when, counts that reconcile (read = scored +
dead-lettered), and the judge's accounting with an estimated cost."""
from __future__ import annotations

import datetime as dt
import json

import apache_beam as beam
from apache_beam.transforms import window

from evalbeam.metrics.rows.tables import RunKey, utc_now


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


def usage_cost(u: dict, prices: dict[str, dict[str, float]], model: str) -> float | None:
    """USD of one judge_usage entry: its tokens at the price of the model that answered them
    (`model`, or each of `models`; the run's judge model when it names none); None when a
    model has no price."""
    per_model = u.get("models") or {u.get("model") or model: u}
    cost = 0.0
    for name, tokens in per_model.items():
        priced = judge_cost({"prompt_tokens": 0, "output_tokens": 0, **tokens}, prices.get(name or model))
        if priced is None:
            return None
        cost += priced
    return cost


def judge_totals(usage: dict[str, dict[str, int]], prices: dict[str, dict[str, float]], model: str,
                 models: dict[str, str] | None = None) -> dict:
    """The runs row's judge columns. An entry names the model(s) that answered it (`model`, or `models`
    with the tokens of each); `models` (metrics.judge.asks.usage_models) names the model of an entry judged
    by another model than the run's `model` (a metric's own judge, a juror), for an entry whose answers
    did not say (all from judge.cache, say). Each entry is priced at its model's price."""
    if models and any(m in models for m in usage):
        usage = {m: u if u.get("model") or u.get("models") else {**u, "model": models.get(m, model)}
                 for m, u in usage.items()}
    total = {k: sum(m.get(k, 0) for m in usage.values()) for k in
             ("requests", "cache_hits", "calls", "rate_limited", "failures", "prompt_tokens", "output_tokens",
              "batch_prompt_tokens", "batch_output_tokens")}
    # each metric's (and rubric stage's) cost at its own model's price; the run's: their sum, when all are priced
    costs = {m: usage_cost(u, prices, model) for m, u in usage.items()}
    usage = {m: {**u, "estimated_cost": costs[m]} if costs[m] is not None else u for m, u in usage.items()}
    cost = None if any(c is None for c in costs.values()) else sum(costs.values())
    if not usage:
        cost = judge_cost(total, prices.get(model))
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


# The run's counts, as one tuple: each input is tallied where it is made, one
# partial tuple per bundle, and the partials are summed in one combine.
COUNTS = ("read", "scored", "dead", "metric_errors", "lines_read", "lines_skipped", "lines_scored", "lines_dead",
          "bleu_c", "bleu_python", "lines_duplicate")


def bleu_path(c: int, python: int) -> str | None:
    """The runs row's bleu_path from the instances BLEU scored on each path (ScoredInstance.bleu_path)."""
    return "+".join(name for name, n in (("c", c), ("python", python)) if n) or None


def _runs_row(_, *, base, prices, model, counts, usage, models=None, sample=None):
    c = dict(zip(COUNTS, counts))
    return {
        **base,
        "sample": json.dumps(sample, sort_keys=True) if sample is not None else None,
        "finished_at": utc_now(),
        "read_count": c["read"],
        "scored_count": c["scored"],
        "dead_letter_count": c["dead"],
        "metric_error_count": c["metric_errors"],
        "lines_read": c["lines_read"],
        "lines_skipped": c["lines_skipped"],
        "lines_scored": c["lines_scored"],
        "lines_dead_lettered": c["lines_dead"],
        "lines_duplicate": c["lines_duplicate"],
        **judge_totals(usage, prices, model, models),
        "bleu_path": bleu_path(c["bleu_c"], c["bleu_python"]),
    }


def _sum_tuples(rows) -> tuple:
    return tuple(map(sum, zip((0,) * len(COUNTS), *rows)))


class _TallyFn(beam.DoFn):
    """Elements -> one tuple of COUNTS per bundle: the sums of `counts(element)`,
    named {count: function of an element}. (A Flatten of one tuple per element
    would be held whole by the local runner; one per bundle is nothing.)"""

    def __init__(self, **counts):
        self._counts = [(COUNTS.index(name), fn) for name, fn in counts.items()]

    def start_bundle(self):
        self._sums = [0] * len(COUNTS)
        self._seen = False

    def process(self, element):
        self._seen = True
        for i, fn in self._counts:
            self._sums[i] += fn(element)
        return ()

    def finish_bundle(self):
        if self._seen:
            yield window.GlobalWindows.windowed_value_at_end_of_window(tuple(self._sums))


class RunRecord(beam.PTransform):
    """(records read (a PCollection, or a tuple of them), scored instances, every
    scored part, dead letters, judge usage, source lines) -> the one `runs` row.

    Two accounts must balance: records (read = scored + dead-lettered) and the
    source's physical lines (read = skipped + in scored records + in dead
    letters). The second is counted from the files themselves and from what
    reached the end, so a record lost anywhere on the way shows as a mismatch."""

    def __init__(self, run: RunKey, name: str, config_json: str, version: str, started_at: dt.datetime,
                 prices: dict | None = None, model: str | None = None, models: dict[str, str] | None = None,
                 id_scheme: str | None = None, window=None):
        """window: input.since's (transforms.since.ReadWindow): its start and end, the next run's start."""
        super().__init__()
        self._base = {
            **run.columns(),
            "name": name,
            "config": config_json,
            "evalbeam_version": version,
            "id_scheme": id_scheme,
            "started_at": started_at,
            "window_start": window.start if window is not None else None,
            "window_end": window.end if window is not None else None,
        }
        self._prices = prices or {}
        self._model = model
        self._models = models or {}

    def expand(self, inputs):
        """inputs: (read, computed, scored, dead, usage, source_lines[, sample]): sample, input.sample's
        account (transforms.sampling, one element), for the row's `sample`."""
        read, computed, scored, dead, usage, source_lines, *sample = inputs
        one = lambda _: 1  # noqa: E731
        reads = read if isinstance(read, (tuple, list)) else (read,)  # every part counts one per record
        counts = (
            (
                *(part | f"TallyRead{i}" >> beam.ParDo(_TallyFn(read=one)) for i, part in enumerate(reads)),
                computed | "TallyScored" >> beam.ParDo(_TallyFn(
                    scored=one, lines_scored=lambda s: s.instance.line_count,
                    bleu_c=lambda s: s.bleu_path == "c", bleu_python=lambda s: s.bleu_path == "python")),
                dead | "TallyDead" >> beam.ParDo(_TallyFn(dead=one, lines_dead=lambda d: d.line_count)),
                scored | "TallyMetricErrors" >> beam.ParDo(_TallyFn(
                    metric_errors=lambda s: sum(r["error"] is not None for r in s.results))),
                source_lines | "TallyLines" >> beam.ParDo(_TallyFn(lines_read=lambda s: s.lines,
                                                                   lines_skipped=lambda s: s.skipped,
                                                                   lines_duplicate=lambda s: s.duplicates)),
            )
            | "AllCounts" >> beam.Flatten()
            | "SumCounts" >> beam.CombineGlobally(_sum_tuples)
        )
        side = beam.pvalue.AsSingleton
        return (
            computed.pipeline
            | "Start" >> beam.Create([None])
            | "RunRow" >> beam.Map(
                _runs_row,
                base=self._base,
                prices=self._prices,
                model=self._model,
                models=self._models,
                counts=side(counts),
                usage=side(usage),
                **({"sample": side(sample[0])} if sample else {}),
            )
        )
