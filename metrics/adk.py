"""ADK evaluation criteria, computed per invocation and averaged per case.

A case is one instance. Its invocations are the `invocations` field when the
row has one (an evalbeam extension for multi-turn ADK cases: a list of
``{prompt, response, reference, predicted_trajectory, reference_trajectory}``),
otherwise the row itself is the single invocation. Inside an invocation a
missing trajectory means no tool calls, as in ADK's ``tool_uses: []``.
"""
from __future__ import annotations

from typing import Any, Literal

import pydantic

from metrics import trajectory
from metrics.calls import call_key
from metrics.registry import MetricError, MetricValue, register
from metrics.text import make_rouge_scorer

_MATCHERS = {
    "EXACT": trajectory.exact_match,
    "IN_ORDER": trajectory.in_order_match,
    "ANY_ORDER": trajectory.any_order_match,
}


def invocations_of(fields: dict[str, Any]) -> list[dict[str, Any]]:
    if "invocations" in fields:
        invocations = fields["invocations"]
        if not invocations:
            raise MetricError("'invocations' is empty")
        return invocations
    return [fields]


class TrajectoryCriterionParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    match_type: Literal["EXACT", "IN_ORDER", "ANY_ORDER"] = "EXACT"
    ignore_args: bool = False


@register(
    "tool_trajectory_avg_score",
    kind="adk",
    inputs=(("predicted_trajectory", "reference_trajectory"), ("invocations",)),
    params=TrajectoryCriterionParams,
    score_range="0..1",
    default_threshold=1.0,
    description="ADK: per invocation 1/0 trajectory match (match_type EXACT | IN_ORDER | ANY_ORDER, ignore_args), mean per case",
)
def _tool_trajectory_avg_score(params: TrajectoryCriterionParams):
    match = _MATCHERS[params.match_type]

    def keys(inv, field):
        return [call_key(c, params.ignore_args) for c in inv.get(field) or []]

    def score(fields):
        per_invocation = [
            match(keys(inv, "predicted_trajectory"), keys(inv, "reference_trajectory"))
            for inv in invocations_of(fields)
        ]
        return _mean(per_invocation)

    return score


@register(
    "response_match_score",
    kind="adk",
    inputs=(("response", "reference"), ("invocations",)),
    score_range="0..1",
    default_threshold=0.8,
    description="ADK: ROUGE-1 F-measure with stemming of the final response against the reference, mean per case",
)
def _response_match_score(_params):
    rouge1 = make_rouge_scorer("rouge1", use_stemmer=True, split_summaries=False)

    def score(fields):
        values = []
        for i, inv in enumerate(invocations_of(fields)):
            response, reference = inv.get("response"), inv.get("reference")
            if response is None or reference is None:
                raise MetricError(f"invocation {i} has no {'response' if response is None else 'reference'}")
            values.append(rouge1(reference, response))
        return _mean(values)

    return score


def _mean(values: list[float]) -> MetricValue:
    return MetricValue(
        sum(values) / len(values),
        extra={"per_invocation": values} if len(values) > 1 else None,
    )
