"""Tool-call metrics on messages in the service's format:
``{"content": str, "tool_calls": [{"name": str, "arguments": object}, ...]}``
held in `response` (prediction) and `reference`.

A response that does not parse scores 0 with the reason as explanation (the
model produced no valid calls); a reference that does not parse is bad test
data and is an error on that metric.
"""
from __future__ import annotations

import pydantic

from evalbeam.metrics.rows.calls import CallFormatError, json_key, parse_tool_call_message
from evalbeam.metrics.registry import MetricError, MetricValue, register


def _calls(fields, field):
    try:
        return parse_tool_call_message(fields[field])[1]
    except CallFormatError as e:
        if field == "reference":
            raise MetricError(f"reference {e}") from None
        raise _InvalidPrediction(f"response {e}") from None


class _InvalidPrediction(Exception):
    pass


def _scored(fn):
    """Run fn(predicted_calls, reference_calls); an unparseable prediction is 0."""

    def score(fields, *args):
        reference = _calls(fields, "reference")
        try:
            predicted = _calls(fields, "response")
        except _InvalidPrediction as e:
            return MetricValue(0.0, explanation=str(e))
        return fn(predicted, reference, *args)

    return score


@register(
    "tool_call_valid",
    kind="tool_call",
    inputs=("response",),
    score_range="0/1",
    description="1 if response parses as {content, tool_calls: [{name, arguments}]} with every call well formed",
)
def _tool_call_valid(_params):
    def score(fields):
        try:
            parse_tool_call_message(fields["response"])
        except CallFormatError as e:
            return MetricValue(0.0, explanation=f"response {e}")
        return 1.0

    return score


@register(
    "tool_name_match",
    kind="tool_call",
    inputs=("response", "reference"),
    score_range="0/1",
    description="1 if the ordered list of call names in response equals that in reference",
)
def _tool_name_match(_params):
    return _scored(lambda p, r: float([c["name"] for c in p] == [c["name"] for c in r]))


def _paired(predicted, reference):
    """Calls paired by position whose names match."""
    return [(p, r) for p, r in zip(predicted, reference) if p["name"] == r["name"]]


def _key_share(pairs, value_matches=None):
    """(reference argument keys present in the prediction [and whose values
    match]) / (all reference argument keys), over the paired calls. No pair: 0.
    Pairs whose reference calls have no arguments at all: 1 (nothing to miss)."""
    if not pairs:
        return MetricValue(0.0, explanation="no call pairs by position with matching names")
    total = hits = 0
    for p, r in pairs:
        for key, ref_value in r["arguments"].items():
            total += 1
            if key in p["arguments"] and (value_matches is None or value_matches(p["arguments"][key], ref_value)):
                hits += 1
    return 1.0 if total == 0 else hits / total


@register(
    "tool_parameter_key_match",
    kind="tool_call",
    inputs=("response", "reference"),
    description="over calls paired by position with matching names: share of reference argument keys present in the prediction; 0 when no call pairs",
)
def _tool_parameter_key_match(_params):
    return _scored(lambda p, r: _key_share(_paired(p, r)))


class KvMatchParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    use_strict_string_match: bool = False


def _fold(text: str) -> str:
    return text.strip().casefold()


@register(
    "tool_parameter_kv_match",
    kind="tool_call",
    inputs=("response", "reference"),
    params=KvMatchParams,
    description="as tool_parameter_key_match, counting a key only if its value matches too "
    "(non-strict: JSON-normalised, strings trimmed and case-folded)",
)
def _tool_parameter_kv_match(params: KvMatchParams):
    fold = None if params.use_strict_string_match else _fold

    def same(a, b):
        return json_key(a, fold) == json_key(b, fold)

    return _scored(lambda p, r: _key_share(_paired(p, r), same))
