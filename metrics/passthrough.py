"""Agent performance values the service always reports (metrics.rows.fields.PASSTHROUGH_FIELDS): each passed
through as the metric of its name, of kind "agent" (as the output tables and `evalbeam metrics` name it)."""
from __future__ import annotations

from evalbeam.metrics.registry import register


@register(
    "latency_in_seconds",
    kind="agent",
    inputs=("latency_in_seconds",),
    score_range=">=0",
    direction="lower",
    description="the agent's response time in seconds, passed through (added automatically when the column is present)",
)
def _latency(_params):
    return lambda fields: fields["latency_in_seconds"]


@register(
    "failure",
    kind="agent",
    inputs=("failure",),
    score_range="0/1",
    direction="lower",
    description="1 if the agent call failed, passed through (added automatically when the column is present)",
)
def _failure(_params):
    return lambda fields: float(fields["failure"])
