"""Trajectory metrics: a predicted list of tool calls against a reference list.

Call equality is `metrics.rows.calls.call_key` (names equal, inputs deeply equal as
JSON values).
"""
from __future__ import annotations

import operator
import threading
from typing import Any, Sequence

import pydantic

from evalbeam.metrics.rows.calls import json_key
from evalbeam.metrics.registry import register

BOTH = ("predicted_trajectory", "reference_trajectory")


def exact_match(predicted: Sequence[Any], reference: Sequence[Any]) -> float:
    """Keys in, 1.0 if the lists are equal element by element, else 0.0."""
    return float(len(predicted) == len(reference) and all(map(operator.eq, predicted, reference)))


def in_order_match(predicted: Sequence[Any], reference: Sequence[Any]) -> float:
    """1.0 if ``reference`` is a subsequence of ``predicted`` (extras allowed)."""
    # `r in it` reads the predicted keys on from where the last match left off, up to the
    # next equal to r: a loop in C (keys are ints or tuples: `in`'s identity check first is ==)
    it = iter(predicted)
    for r in reference:
        if r not in it:
            return 0.0
    return 1.0


def any_order_match(predicted: Sequence[Any], reference: Sequence[Any]) -> float:
    """1.0 if the reference multiset is contained in the predicted multiset."""
    # counted down in a dict rather than two Counters compared: the same rule, at
    # half the cost on trajectories of a few calls
    have: dict[Any, int] = {}
    for k in predicted:
        have[k] = have.get(k, 0) + 1
    for k in reference:
        n = have.get(k, 0)
        if not n:
            return 0.0
        have[k] = n - 1
    return 1.0


def precision(predicted: Sequence[Any], reference: Sequence[Any]) -> float:
    if not predicted:
        return 1.0 if not reference else 0.0
    ref = set(reference)
    return sum(map(ref.__contains__, predicted)) / len(predicted)


def recall(predicted: Sequence[Any], reference: Sequence[Any]) -> float:
    if not reference:
        return 1.0
    pred = set(predicted)
    return sum(map(pred.__contains__, reference)) / len(reference)


_last_pair = threading.local()


def pair_keys(predicted: list, reference: list) -> tuple[list[int], list[int]]:
    """The calls of an instance's two trajectories as small ints, equal exactly where
    the calls are equal (`call_key`): each metric then compares and hashes ints. A
    call key is a nested tuple, whose hash Python does not keep: every set or
    Counter of keys hashed each one again. The trajectory metrics of one instance
    get the same list objects, so the last pair seen (per thread) is kept, and an
    instance's calls are canonicalised once, not once per metric. The kept lists
    are referenced, so their ids cannot be reused."""
    kept = getattr(_last_pair, "pair", None)
    if kept is not None and kept[0] is predicted and kept[1] is reference:
        return kept[2]
    numbers: dict[Any, int] = {}
    number = numbers.setdefault
    # (c["tool_name"], json_key(c["tool_input"])) is call_key(c), written out: a call less a call
    keys = ([number((c["tool_name"], json_key(c["tool_input"])), len(numbers)) for c in predicted],
            [number((c["tool_name"], json_key(c["tool_input"])), len(numbers)) for c in reference])
    _last_pair.pair = (predicted, reference, keys)
    return keys


def _comparison(fn):
    def factory(_params):
        def score(fields):
            return fn(*pair_keys(fields["predicted_trajectory"], fields["reference_trajectory"]))

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
        for c in fields["predicted_trajectory"]:
            if c["tool_name"] == name:
                return 1.0
        return 0.0

    return score
