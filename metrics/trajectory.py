"""Trajectory metrics: a predicted list of tool calls against a reference list.

Call equality is `metrics.rows.calls.call_key` (names equal, inputs deeply equal as
JSON values).
"""
from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Sequence

import pydantic

from evalbeam.metrics.rows.calls import call_key
from evalbeam.metrics.registry import register

BOTH = ("predicted_trajectory", "reference_trajectory")


def exact_match(predicted: Sequence[Any], reference: Sequence[Any]) -> float:
    """Keys in, 1.0 if the lists are equal element by element, else 0.0."""
    return float(len(predicted) == len(reference) and all(p == r for p, r in zip(predicted, reference)))


def in_order_match(predicted: Sequence[Any], reference: Sequence[Any]) -> float:
    """1.0 if ``reference`` is a subsequence of ``predicted`` (extras allowed)."""
    it = iter(predicted)
    return float(all(any(p == r for p in it) for r in reference))


def any_order_match(predicted: Sequence[Any], reference: Sequence[Any]) -> float:
    """1.0 if the reference multiset is contained in the predicted multiset."""
    have = Counter(predicted)
    need = Counter(reference)
    return float(all(have[k] >= n for k, n in need.items()))


def precision(predicted: Sequence[Any], reference: Sequence[Any]) -> float:
    if not predicted:
        return 1.0 if not reference else 0.0
    ref = set(reference)
    return sum(p in ref for p in predicted) / len(predicted)


def recall(predicted: Sequence[Any], reference: Sequence[Any]) -> float:
    if not reference:
        return 1.0
    pred = set(predicted)
    return sum(r in pred for r in reference) / len(reference)


_last_keys = threading.local()


def call_keys(trajectory: list) -> list:
    """The call keys of a trajectory. The trajectory metrics of one instance get
    the same list objects, so the keys of the last two lists seen (per thread)
    are kept, and each instance's trajectories are canonicalised once, not once
    per metric. A kept list is referenced, so its id cannot be reused."""
    kept = getattr(_last_keys, "pairs", ())
    for seen, keys in kept:
        if seen is trajectory:
            return keys
    keys = [call_key(c) for c in trajectory]
    _last_keys.pairs = ((trajectory, keys),) + kept[:1]
    return keys


def _comparison(fn):
    def factory(_params):
        def score(fields):
            return fn(call_keys(fields["predicted_trajectory"]), call_keys(fields["reference_trajectory"]))

        return score

    return factory


for _name, _fn, _range, _description in (
    ("trajectory_exact_match", exact_match, "0/1",
     "1 if both lists have the same length and are pairwise equal in order"),
    ("trajectory_in_order_match", in_order_match, "0/1",
     "1 if the reference calls occur in the predicted list in the same order (extra calls allowed)"),
    ("trajectory_any_order_match", any_order_match, "0/1",
     "1 if every reference call occurs in the predicted list, any order, counting repeats (extras allowed)"),
    ("trajectory_precision", precision, "0..1",
     "share of predicted calls that occur in the reference; empty predicted: 1 if the reference is empty, else 0"),
    ("trajectory_recall", recall, "0..1",
     "share of reference calls that occur in the predicted list; empty reference: 1"),
):
    register(_name, kind="trajectory", inputs=BOTH, score_range=_range, description=_description)(_comparison(_fn))


class SingleToolUseParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    tool_name: str = pydantic.Field(min_length=1)


@register(
    "trajectory_single_tool_use",
    kind="trajectory",
    inputs=("predicted_trajectory",),
    params=SingleToolUseParams,
    score_range="0/1",
    description="1 if any predicted call uses the tool named by param tool_name",
)
def _single_tool_use(params: SingleToolUseParams):
    name = params.tool_name

    def score(fields):
        return float(any(c["tool_name"] == name for c in fields["predicted_trajectory"]))

    return score
