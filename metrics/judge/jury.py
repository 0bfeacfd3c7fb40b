"""Juries: a judge metric judged by several models, each juror's judgment kept, and one
verdict from them by a rule the user names (or the default: the mean for a scale, the
majority for a pairwise choice).

A juror is a partial `judge:` laid over the run's settings (JudgeSettings.overridden):
every juror's calls go through the one judge layer as any judgment does. This module is
pure: the rule, the jurors' names and the aggregation of their rows.
"""
from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from typing import Any, Literal

import pydantic

from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.templates import CHOICE_SCORE

AGGREGATES = ("mean", "median", "min", "max", "majority", "unanimous")
# judge: settings that belong to the run as a whole, not to one metric's judge or one juror
RUN_WIDE_FIELDS = frozenset({
    "shards", "cache", "rubrics_from", "prices", "checkpoint_seconds", "mode", "batch_max_requests",
    "batch_inline_max_bytes", "batch_max_bytes", "batch_poll_seconds", "batch_poll_max_seconds",
    "batch_timeout_hours", "batch_staging", "batch_retry", "max_calls"})
# outcomes on a jury's row (metric_results.jury_outcome) besides the rule's name
TIE, SPLIT, NO_QUORUM = "tie", "split", "no_quorum"


class JuryRule(pydantic.BaseModel):
    """A metric's `jury:`: how the jurors' scores make the row's."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    aggregate: Literal["mean", "median", "min", "max", "majority", "unanimous"] | None = pydantic.Field(
        None, description="mean | median | min | max | majority | unanimous; default: mean for a scale "
                          "(pointwise), majority for a choice (pairwise)")
    quorum: int | None = pydantic.Field(
        None, ge=1, description="the fewest jurors that must answer for the jury to score; default: all of them")

    def resolved(self, kind: str) -> str:
        return self.aggregate or ("majority" if kind == "pairwise" else "mean")


def juror_name(entry: dict[str, Any], settings: JudgeSettings) -> str:
    """A juror's label in columns and explanations: its `name`, else its model's name made a
    column-safe word (gemini-2.5-pro -> gemini_2_5_pro)."""
    name = entry.get("name")
    return name if name else re.sub(r"[^A-Za-z0-9_]+", "_", settings.model.rsplit("/", 1)[-1]).strip("_")


def split_entry(entry: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """A `judges:` entry -> (its name or None, the partial judge settings)."""
    partial = dict(entry)
    return partial.pop("name", None), partial


def check_partial(partial: dict[str, Any]) -> None:
    run_wide = sorted(set(partial) & RUN_WIDE_FIELDS)
    if run_wide:
        raise ValueError(f"{', '.join(run_wide)}: set for the whole run in the top-level judge:, not per metric "
                         "or juror")


def _majority(values: list) -> tuple[Any, bool]:
    """(the most common value, whether it is tied with another)."""
    counts = Counter(values)
    top = max(counts.values())
    leaders = sorted(v for v, c in counts.items() if c == top)
    return leaders[0], len(leaders) > 1


def aggregate_jury(kind: str, rule: JuryRule, jurors: int, votes: list[tuple[float, str | None]]
                   ) -> tuple[str, float | None, str | None, float | None, str | None]:
    """The answered jurors' (score, pairwise choice) -> (outcome, score, pairwise choice,
    confidence, error). The outcome is the rule applied, or tie / split / no_quorum, when
    the jury gives no verdict (error says why) or, pairwise, a tie of choices (the row's
    choice is TIE, as a tie of samples is). Confidence: the share of the answered jurors
    agreeing with the verdict, for majority and unanimous; None for the others."""
    quorum = rule.quorum or jurors
    if len(votes) < quorum:
        return NO_QUORUM, None, None, None, (f"jury: {len(votes)} of {jurors} jurors answered, "
                                             f"fewer than its quorum of {quorum}")
    aggregate = rule.resolved(kind)
    if kind == "pairwise":
        choices = [c for _, c in votes]
        if aggregate == "unanimous" and len(set(choices)) > 1:
            return SPLIT, None, None, None, f"jury split: {_tally(choices)} (aggregate unanimous)"
        if aggregate in ("majority", "unanimous"):
            choice, tied = _majority(choices)
            if tied:
                return TIE, CHOICE_SCORE["TIE"], "TIE", None, None
            return aggregate, CHOICE_SCORE[choice], choice, choices.count(choice) / len(choices), None
        score = _number(aggregate, [s for s, _ in votes])
        choice = "CANDIDATE" if score > 0.5 else "BASELINE" if score < 0.5 else "TIE"
        return aggregate, score, choice, None, None
    scores = [s for s, _ in votes]
    if aggregate == "unanimous":
        if len(set(scores)) > 1:
            return SPLIT, None, None, None, f"jury split: {_tally(scores)} (aggregate unanimous)"
        return aggregate, scores[0], None, 1.0, None
    if aggregate == "majority":
        score, tied = _majority(scores)
        if tied:
            return TIE, None, None, None, f"jury tie: {_tally(scores)} (aggregate majority)"
        return aggregate, score, None, scores.count(score) / len(scores), None
    return aggregate, _number(aggregate, scores), None, None, None


def _number(aggregate: str, scores: list[float]) -> float:
    if aggregate == "median":
        return float(statistics.median(scores))
    if aggregate == "min":
        return min(scores)
    if aggregate == "max":
        return max(scores)
    return sum(scores) / len(scores)


def _tally(values: list) -> str:
    return ", ".join(f"{_text(v)} x{c}" for v, c in sorted(Counter(values).items()))


def _text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def jury_row(row: dict[str, Any], kind: str, rule: JuryRule, threshold: float | None,
             jurors: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """A jury's metric_results row: `row` (blank, for the metric) filled from each juror's own
    row ((name, model, row) as one judge would have made it): the jurors' rows on it as JSON
    (`jurors`), how many answered, the outcome and the verdict; tokens and attempts summed."""
    for key in ("prompt_tokens", "output_tokens", "attempts"):
        row[key] = sum(r[key] or 0 for _, _, r in jurors)
    row["cache_hit"] = all(r["cache_hit"] for _, _, r in jurors)
    answered = [(name, r) for name, _, r in jurors if r["error"] is None and r["score"] is not None]
    row["jurors"] = json.dumps([{
        "name": name, "model": model, "score": r["score"], "pairwise_choice": r.get("pairwise_choice"),
        "explanation": r["explanation"], "confidence": r["confidence"], "error": r["error"]}
        for name, model, r in jurors], ensure_ascii=False)
    row["jury_answered"] = len(answered)
    outcome, score, choice, confidence, error = aggregate_jury(
        kind, rule, len(jurors), [(r["score"], r.get("pairwise_choice")) for _, r in answered])
    row["jury_outcome"] = outcome
    failed = [f"{name}: {r['error']}" for name, _, r in jurors if r["error"] is not None]
    if error is not None:
        row["error"] = error + (f" ({'; '.join(failed)})" if failed else "")
        return row
    row.update(score=score, confidence=confidence, pairwise_choice=choice,
               explanation="\n".join(f"[{name}: {_text(r['score'])}] {r['explanation'] or ''}".rstrip()
                                     for name, r in answered))
    if kind == "pairwise":
        agreements = [r["position_agreement"] for _, r in answered if r.get("position_agreement") is not None]
        row["position_agreement"] = sum(agreements) / len(agreements) if agreements else None
    if threshold is not None:
        row["passed"] = score >= threshold
    return row


def juror_scores(row: dict[str, Any]) -> list[float]:
    """The answered jurors' scores on a metric_results row (none on a row judged by one judge)."""
    text = row.get("jurors")
    if not text:
        return []
    return [j["score"] for j in json.loads(text) if j["error"] is None and j["score"] is not None]
