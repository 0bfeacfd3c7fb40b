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


# Why inference (metrics.agents.inference) could not produce a case's actual side.
INFERENCE_FIELDS = ("inference_error",)
CANONICAL_FIELDS = TEXT_FIELDS + TRAJECTORY_FIELDS + STRUCTURED_FIELDS + NUMBER_FIELDS + FLAG_FIELDS + INFERENCE_FIELDS


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
