"""The one registry of metrics.

A metric is registered by decorating a *factory*: a function that takes the
metric's validated parameters and returns a scorer, ``scorer(fields) -> MetricValue``.
Factories run once per worker (in a DoFn's ``setup``), so expensive set-up
(tokenizers, compiled patterns) happens once, not per instance.

A leaf: it imports nothing of evalbeam. The metric modules register into it; metrics/catalog.py
imports the built-in ones, so that is where a metric is looked up (get_metric, all_metrics,
is_refused). The reads here (registered, registered_metrics, refusal) see only what has been
registered so far.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import pydantic


class MetricError(Exception):
    """A metric could not score one instance; the message says why."""


class NoParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


# ADK's per_turn_user_simulator_quality_v1: a judge with its own stage (transforms.simulator_quality)
SIMULATOR_QUALITY = "simulator_quality"

@dataclasses.dataclass(frozen=True)
class MetricValue:
    score: float
    explanation: str | None = None
    extra: dict[str, Any] | None = None


Scorer = Callable[[Mapping[str, Any]], "MetricValue | float"]


@dataclasses.dataclass(frozen=True)
class MetricDef:
    name: str
    kind: str  # computation | tool_call | agent | adk | custom | pointwise | pairwise | rubric | simulator_quality
    description: str
    # Alternatives of required canonical fields: the metric can run when every
    # field of at least one alternative is present.
    inputs: tuple[tuple[str, ...], ...]
    params: type[pydantic.BaseModel]
    score_range: str
    factory: Callable[[pydantic.BaseModel], Any]  # -> a Scorer; for judge metrics, a JudgeTemplate
    default_threshold: float | None = None
    # Inputs that depend on the parameters (e.g. use_reference); default: `inputs`.
    inputs_for: Callable[[pydantic.BaseModel], tuple[tuple[str, ...], ...]] | None = None
    # Which way is better, for run comparisons: higher | lower | closer_to_zero
    direction: str = "higher"

    @property
    def is_judge(self) -> bool:
        return self.kind in ("pointwise", "pairwise", "rubric", SIMULATOR_QUALITY)

    def inputs_with(self, params: pydantic.BaseModel) -> tuple[tuple[str, ...], ...]:
        return self.inputs_for(params) if self.inputs_for else self.inputs

    def inputs_text(self) -> str:
        return " | ".join(", ".join(alt) for alt in self.inputs) or "-"


def unmet_inputs(alternatives: tuple[tuple[str, ...], ...], available) -> tuple[str, ...]:
    """The fields lacking from the closest alternative of required inputs; empty
    when some alternative is fully available (or nothing is required)."""
    best: tuple[str, ...] = ()
    for alternative in alternatives:
        lacking = tuple(f for f in alternative if f not in available)
        if not lacking:
            return ()
        if not best or len(lacking) < len(best):
            best = lacking
    return best


_REGISTRY: dict[str, MetricDef] = {}


def register(
    name: str,
    *,
    kind: str,
    description: str,
    inputs: tuple[str, ...] | tuple[tuple[str, ...], ...] = (),
    params: type[pydantic.BaseModel] = NoParams,
    score_range: str = "0..1",
    default_threshold: float | None = None,
    inputs_for=None,
    direction: str = "higher",
):
    if inputs and isinstance(inputs[0], str):
        inputs = (tuple(inputs),)  # type: ignore[assignment]

    def decorate(factory):
        if name in _REGISTRY:
            raise ValueError(f"metric {name!r} is registered twice")
        _REGISTRY[name] = MetricDef(
            name=name,
            kind=kind,
            description=description,
            inputs=tuple(tuple(a) for a in inputs),  # type: ignore[arg-type]
            params=params,
            score_range=score_range,
            factory=factory,
            default_threshold=default_threshold,
            inputs_for=inputs_for,
            direction=direction,
        )
        return factory

    return decorate


_REFUSED: dict[str, str] = {}  # a name evalbeam will not give a score under -> why, and what to use instead


def refuse(name: str, reason: str) -> None:
    """Marks `name` (another project's metric that evalbeam cannot score as that project does) as refused:
    metrics.catalog.get_metric raises KeyError with `reason`, so a config naming it is an error that says why."""
    if name in _REGISTRY:
        raise ValueError(f"metric {name!r} is registered; it cannot be refused too")
    _REFUSED[name] = reason


def registered(name: str) -> MetricDef | None:
    """The metric registered as `name`, or None."""
    return _REGISTRY.get(name)


def registered_metrics() -> list[MetricDef]:
    """Every metric registered, by kind and name."""
    return sorted(_REGISTRY.values(), key=lambda d: (d.kind, d.name))


def refusal(name: str) -> str | None:
    """Why `name` is refused (refuse), or None when it is not."""
    return _REFUSED.get(name)


def as_metric_value(result: "MetricValue | float | int | bool") -> MetricValue:
    if isinstance(result, MetricValue):
        value = result
    else:
        value = MetricValue(score=result)  # type: ignore[arg-type]
    score = value.score
    if isinstance(score, bool):
        score = float(score)
    if not isinstance(score, (int, float)):
        raise MetricError(f"score must be a number, got {type(score).__name__}")
    score = float(score)
    if not math.isfinite(score):
        raise MetricError(f"score is not a finite number ({score!r})")
    return value if type(value.score) is float else dataclasses.replace(value, score=score)
