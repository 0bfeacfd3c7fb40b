"""A judge metric's answers as rows, in pure Python: one metric_results row per instance and
judge metric from the answers to its judgments (a template's samples and orders, a per-turn
template's turns, an ADK criterion scored by ADK's own parsing, a jury's jurors), and the
judge_cache rows an answer is kept as (and read back from).

What was asked is metrics.judge.asks; the judge stage (transforms.judge) and the local
streaming path (transforms.judge_stream) call these as the answers come.
"""
from __future__ import annotations

import collections
import json
from typing import Any, Iterable

from evalbeam.metrics.judge.adk_judges import AdkJudge
from evalbeam.metrics.judge.agent_views import units_of
from evalbeam.metrics.judge.asks import JudgePlan, Link
from evalbeam.metrics.judge.client import JudgeResponse
from evalbeam.metrics.judge.jury import jury_row
from evalbeam.metrics.judge.templates import (
    CHOICE_SCORE,
    aggregate_pairwise,
    aggregate_pointwise,
    orders_agree,
    pairwise_verdict,
)
from evalbeam.metrics.registry import MetricError
from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.rows.tables import RunKey, blank_metric_row
from evalbeam.metrics.rows.trace import trace_of


def judge_row(run: RunKey, plan: JudgePlan, instance_id: str, model: str,
              answers: dict[tuple[int, int], JudgeResponse], sampling_count: int) -> dict[str, Any]:
    """One metric_results row from the answers to an instance's judgments of one metric."""
    sampling_count = plan.template.samples(sampling_count)
    row = blank_metric_row(run, instance_id, plan.output_name, model)
    responses = list(answers.values())
    row["prompt_tokens"] = sum(r.prompt_tokens for r in responses if not r.cache_hit)
    row["output_tokens"] = sum(r.output_tokens for r in responses if not r.cache_hit)
    row["attempts"] = sum(r.attempts for r in responses if not r.cache_hit)
    row["cache_hit"] = bool(responses) and all(r.cache_hit for r in responses)
    failures = []
    samples = []
    agreements = []  # pairwise: per sample answered in both orders, whether the two orders agreed
    for sample in range(sampling_count):
        if plan.kind == "pointwise":
            r = answers.get((sample, 0))
            if r is None or r.error:
                failures.append(r.error if r else "no answer")
            else:
                samples.append((plan.template.scores()[r.verdict], r.explanation))
        else:
            normal, swapped = answers.get((sample, 0)), answers.get((sample, 1))
            bad = [x.error if x else "no answer" for x in (normal, swapped) if x is None or x.error]
            if bad:
                failures.extend(bad)
            else:
                verdict = pairwise_verdict(normal.verdict, swapped.verdict)
                agreements.append(orders_agree(normal.verdict, swapped.verdict))
                samples.append((verdict, f"[A=baseline] {normal.explanation}\n[A=candidate] {swapped.explanation}"))
    try:
        if plan.kind == "pointwise":
            score, explanation, confidence = aggregate_pointwise(plan.template, samples)
        else:
            choice, explanation, confidence = aggregate_pairwise(samples)
            row["pairwise_choice"], score = choice, CHOICE_SCORE[choice]
            row["position_agreement"] = sum(agreements) / len(agreements)
    except MetricError:
        row["error"] = failures[0] if len(set(failures)) == 1 else "; ".join(dict.fromkeys(failures))
        return row
    row.update(score=score, explanation=explanation, confidence=confidence)
    if plan.threshold is not None:
        row["passed"] = score >= plan.threshold
    if failures:
        row["extra"] = json.dumps({"failed_samples": len(failures), "errors": sorted(set(failures))}, sort_keys=True)
    return row


def per_turn_row(run: RunKey, plan: JudgePlan, instance: Instance, model: str, by_metric: dict,
                 sampling_count: int) -> dict[str, Any]:
    """A per-turn template's row: each turn judged as judge_row does, then the mean of
    the turns' scores; a turn with no response or whose judgment failed is not evaluated
    (ADK's response_evaluation_score: the mean of the non-None per-invocation scores)."""
    units = units_of(instance.fields, "turn")
    turn_rows = [None if unit.skip else judge_row(run, plan, instance.instance_id, model,
                                                  by_metric.get((plan.output_name, u), {}), sampling_count)
                 for u, unit in enumerate(units)]
    row = blank_metric_row(run, instance.instance_id, plan.output_name, model)
    done = [r for r in turn_rows if r is not None]
    for key in ("prompt_tokens", "output_tokens", "attempts"):
        row[key] = sum(r[key] for r in done)
    row["cache_hit"] = bool(done) and all(r["cache_hit"] for r in done)
    scores = [r["score"] if r is not None and r["error"] is None else None for r in turn_rows]
    present = [s for s in scores if s is not None]
    if not present:
        reasons = [r["error"] for r in done if r["error"]] or [units[0].skip or "nothing to judge"]
        row["error"] = "; ".join(dict.fromkeys(reasons))
        return row
    score = sum(present) / len(present)
    row.update(score=score, confidence=sum(r["confidence"] for r in done if r["error"] is None) / len(present),
               explanation=" | ".join(f"turn {i + 1}: " + (r["explanation"] if r is not None and r["error"] is None
                                                           else f"not evaluated ({units[i].skip or r['error']})")
                                      for i, r in enumerate(turn_rows)) if len(units) > 1 else done[0]["explanation"],
               extra=json.dumps({"per_invocation": scores}, sort_keys=True) if len(units) > 1 else None)
    if plan.threshold is not None:
        row["passed"] = score >= plan.threshold
    return row


def judge_rows(run: RunKey, plans: list[JudgePlan], instance: Instance, model: str,
               judged: Iterable[tuple[Link, JudgeResponse]], sampling_count: int) -> list[dict[str, Any]]:
    """An instance's judge rows (one per plan) from the answers to its judgments."""
    by_juror: dict[int, dict[tuple[str, int], dict[tuple[int, int], JudgeResponse]]] = \
        collections.defaultdict(lambda: collections.defaultdict(dict))
    for link, response in judged:
        by_juror[link.juror][(link.metric, link.unit)][(link.sample, link.order)] = response
    rows = []
    for plan in plans:
        if not plan.jurors:
            rows.append(_one_judge_row(run, plan, instance, model, by_juror[0], sampling_count))
            continue
        own = [(j.name, j.settings.model, _one_judge_row(run, plan, instance, j.settings.model, by_juror[i],
                                                         j.settings.sampling_count))
               for i, j in enumerate(plan.jurors)]
        if plan.jury is None:  # the metric's own judge
            rows.append(own[0][2])
        else:
            rows.append(jury_row(blank_metric_row(run, instance.instance_id, plan.output_name,
                                                  ",".join(j.settings.model for j in plan.jurors)),
                                 plan.kind, plan.jury, plan.threshold, own))
    return rows


def _one_judge_row(run: RunKey, plan: JudgePlan, instance: Instance, model: str, by_metric: dict,
                   sampling_count: int) -> dict[str, Any]:
    """A metric's row from one judge's answers (a jury: one juror's, as if it judged alone)."""
    if isinstance(plan.template, AdkJudge):
        return adk_row(run, plan, instance, model, by_metric, sampling_count)
    if getattr(plan.template, "per_turn", False):
        return per_turn_row(run, plan, instance, model, by_metric, sampling_count)
    return judge_row(run, plan, instance.instance_id, model, by_metric.get((plan.output_name, 0), {}), sampling_count)


def adk_row(run: RunKey, plan: JudgePlan, instance: Instance, model: str, by_metric: dict,
            sampling_count: int) -> dict[str, Any]:
    """An ADK judge criterion's row: each sample's answer scored by ADK's own parsing, a turn with a
    sample whose judgment failed NOT_EVALUATED (as ADK treats a sample that raised), then ADK's own
    aggregation over samples and turns (metrics.judge.adk_judges)."""
    t = plan.template
    row = blank_metric_row(run, instance.instance_id, plan.output_name, model)
    try:  # rendered again here: a rubric evaluator reads the answers against what it rendered last, as in ADK
        turns = len(t.prompts(instance.fields))
    except Exception as e:  # noqa: BLE001 - ADK refusing the case, as when it is asked (asks._adk_requests)
        row["error"] = f"cannot be judged: {e}" if isinstance(e, ValueError) else \
            f"cannot be judged: {type(e).__name__}: {e}"
        return row
    samples = t.samples(sampling_count)
    responses = [r for u in range(turns) for r in by_metric.get((plan.output_name, u), {}).values()]
    row["prompt_tokens"] = sum(r.prompt_tokens for r in responses if not r.cache_hit)
    row["output_tokens"] = sum(r.output_tokens for r in responses if not r.cache_hit)
    row["attempts"] = sum(r.attempts for r in responses if not r.cache_hit)
    row["cache_hit"] = bool(responses) and all(r.cache_hit for r in responses)
    per_turn_samples: list[list | None] = []  # each sample's AutoRaterScore, as ADK's evaluator read it
    reasons = []
    first = len(trace_of(instance.fields)) - turns  # a conversation criterion judges its last turn only
    for u in range(turns):
        answers = by_metric.get((plan.output_name, u), {})
        got = [answers.get((sample, 0)) for sample in range(samples)]
        failed = [r.error if r else "no answer" for r in got if r is None or r.error]
        if failed:
            per_turn_samples.append(None)
            reasons.append(f"turn {first + u + 1}: not evaluated ({failed[0]})")
            continue
        try:
            per_turn_samples.append([t.score_answer(r.verdict) for r in got])
        except Exception as e:  # noqa: BLE001 - ADK: a sample whose reading raises leaves its turn NOT_EVALUATED
            per_turn_samples.append(None)
            reasons.append(f"turn {first + u + 1}: not evaluated (ADK could not read an answer: "
                           f"{type(e).__name__}: {e})")
    try:
        score, per_turn = t.aggregate(instance.fields, per_turn_samples, plan.threshold)
    except Exception as e:  # noqa: BLE001 - ADK's aggregation raising: the criterion is NOT_EVALUATED, as in ADK
        row["error"] = f"ADK's aggregation failed: {type(e).__name__}: {e}"
        return row
    sample_scores = [None if xs is None else [x.score for x in xs] for xs in per_turn_samples]
    extra = {"per_invocation": per_turn, "sample_scores": sample_scores}
    judged = per_turn[first:]
    if score is None:
        reasons += [f"turn {first + u + 1}: ADK read no score from the judge's answers" for u, s in enumerate(judged)
                    if s is None and per_turn_samples[u] is not None]
        row["error"] = "no turn evaluated: " + "; ".join(reasons)
        row["extra"] = json.dumps(extra, sort_keys=True)
        return row
    agreeing = [sum(x == s for x in xs) / len(xs) for xs, s in zip(sample_scores, judged) if xs and s is not None]
    explanation = "; ".join(f"turn {u + 1}: " + (f"{s:g}" if s is not None else "not evaluated")
                            for u, s in enumerate(per_turn))
    row.update(score=score, confidence=sum(agreeing) / len(agreeing) if agreeing else None,
               explanation=f"ADK {t.name}: {explanation}", extra=json.dumps(extra, sort_keys=True))
    if plan.threshold is not None:
        row["passed"] = score >= plan.threshold
    return row


def cache_row(run: RunKey, model: str, response: JudgeResponse) -> dict[str, Any]:
    """A judge_cache row: an answer kept for later runs (judge.cache), with the model that gave it."""
    return {**run.columns(), "request_key": response.key, "metric": response.metric, "model": model,
            "verdict": response.verdict, "explanation": response.explanation,
            "prompt_tokens": response.prompt_tokens, "output_tokens": response.output_tokens,
            "attempts": response.attempts}


def response_from_cache_row(row: dict[str, Any]) -> tuple[str, JudgeResponse]:
    """A judge_cache row read back: (request_key, the answer as a cache hit)."""
    return row["request_key"], JudgeResponse(
        key=row["request_key"], metric=row["metric"], verdict=row["verdict"], explanation=row["explanation"],
        prompt_tokens=row.get("prompt_tokens") or 0, output_tokens=row.get("output_tokens") or 0,
        attempts=0, cache_hit=True)
