"""The canonical instance fields, and the checks of a value every reader of them shares."""
from __future__ import annotations

import json
import math
from typing import Any

TEXT_FIELDS = (
    "prompt",
    "response",
    "reference",
    "baseline_model_response",
    "context",
    "instruction",
    "developer_instruction",
)
TRAJECTORY_FIELDS = ("predicted_trajectory", "reference_trajectory")


# Fields kept as JSON values (a list, an object, or text).
STRUCTURED_FIELDS = ("history", "rubric_groups", "tool_declarations", "intermediate_events", "invocations", "agent_data",
                     "adk_case", "otel_case")
NUMBER_FIELDS = ("latency_in_seconds",)
FLAG_FIELDS = ("failure",)
# The agent values a service always reports: each is passed through as the metric of its name (metrics/passthrough.py)
PASSTHROUGH_FIELDS = ("latency_in_seconds", "failure")


# Why inference (metrics.agents.inference) could not produce a case's actual side.
INFERENCE_FIELDS = ("inference_error",)
CANONICAL_FIELDS = TEXT_FIELDS + TRAJECTORY_FIELDS + STRUCTURED_FIELDS + NUMBER_FIELDS + FLAG_FIELDS + INFERENCE_FIELDS


# A case's identity (metrics.rows.instance.case_identity): the fields that say what was asked of the system
# under test, never what it produced. A row's id hashes these, so two nights of the same cases pair in
# `evalbeam compare` however their outputs changed. Every canonical field is one or the other (tested).
IDENTITY_FIELDS = ("prompt", "reference", "baseline_model_response", "context", "instruction",
                   "developer_instruction", "reference_trajectory", "history", "rubric_groups", "tool_declarations")
# What the system under test produced or what running it recorded. Of `invocations` (a case of turns),
# each turn's asked side counts in the identity (IDENTITY_TURN_KEYS); ADK's and OpenTelemetry's cases
# (adk_case, otel_case) have ids of their own.
OUTPUT_FIELDS = ("response", "predicted_trajectory", "intermediate_events", "invocations", "agent_data", "adk_case",
                 "otel_case", "latency_in_seconds", "failure", "inference_error")
# The keys of an invocation's turn (metrics.rows.trace, and its older flat form) that say what was asked:
# the user's message and what was expected of the answer.
IDENTITY_TURN_KEYS = ("prompt", "prompt_parts", "expected", "rubrics", "reference", "reference_trajectory")


# Keys of the older, flat form of an invocation (still accepted; see metrics.rows.trace).
INVOCATION_KEYS = ("prompt", "response", "reference", "predicted_trajectory", "reference_trajectory")


class InvalidField(ValueError):
    def __init__(self, field: str, reason: str, column: str | None = None):
        self.field = field
        self.column = column
        where = f"field '{field}'" + (f" (column '{column}')" if column and column != field else "")
        super().__init__(f"{where}: {reason}")


def as_number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("must be a number, got boolean")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"must be a number, got {value!r}") from None
    if not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, got {value_kind(value)}")
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value!r}")
    return float(value)


def structured_value(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # text that merely starts with a bracket
    return value


def value_kind(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), type(value).__name__
    )
