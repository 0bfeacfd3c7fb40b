"""Tool calls: parsing and the equality rule every trajectory metric shares.

Two calls are equal when their names are equal and their inputs are deeply
equal as JSON values: object key order is ignored and ``1 == 1.0``, but unlike
Python ``True != 1`` (JSON booleans are not numbers).
"""
from __future__ import annotations

import json
from typing import Any, Callable


class CallFormatError(ValueError):
    """A trajectory or tool-call list is not in the expected shape."""


# json_key's tag of a value of these exact types, with no string folding (the key is (tag, value))
_SCALAR_TAGS = {str: "str", int: "num", bool: "bool"}


def json_key(value: Any, fold_strings: Callable[[str], str] | None = None) -> Any:
    """A hashable canonical form of a JSON value.

    Type tags keep ``true`` apart from ``1`` and ``"1"``; integral floats are
    folded to ints so ``1 == 1.0``; objects become sorted tuples so key order is
    ignored. ``fold_strings`` (e.g. trim + casefold) applies to every string
    value, at any depth.
    """
    # The exact JSON types first, by one type lookup (this is the trajectory metrics'
    # inner loop); subclasses (an IntEnum, an OrderedDict...) take the checks below,
    # which give the same keys.
    kind = type(value)
    if kind is str:
        return ("str", fold_strings(value) if fold_strings else value)
    if kind is dict:
        if fold_strings is None:
            # An object of text, integers and booleans alone (a tool call's usual input), its
            # values' keys made in place rather than by a call each: the same key as below.
            # A KeyError: some value is of another type, which the general case below keys.
            try:
                return ("obj", tuple(sorted([(k if type(k) is str else str(k), (_SCALAR_TAGS[type(v)], v))
                                             for k, v in value.items()])))
            except KeyError:
                pass
        return ("obj", tuple(sorted([(k if type(k) is str else str(k), json_key(v, fold_strings))
                                     for k, v in value.items()])))
    if kind is int:
        return ("num", value)
    if kind is bool:
        return ("bool", value)
    if kind is float:
        return ("num", int(value) if value.is_integer() else value)
    if kind is list:
        return ("list", tuple([json_key(v, fold_strings) for v in value]))
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return ("num", value)
    if isinstance(value, str):
        return ("str", fold_strings(value) if fold_strings else value)
    if isinstance(value, (list, tuple)):
        return ("list", tuple(json_key(v, fold_strings) for v in value))
    if isinstance(value, dict):
        return (
            "obj",
            tuple(sorted((str(k), json_key(v, fold_strings)) for k, v in value.items())),
        )
    raise CallFormatError(f"not a JSON value: {type(value).__name__}")


def parse_trajectory(value: Any) -> list[dict[str, Any]]:
    """A trajectory: a list of ``{tool_name: str, tool_input: object}``, or its
    JSON text. ``tool_input`` may be omitted (no arguments) or be the JSON text
    of an object; other keys of a call (an id, a timestamp) are ignored."""
    if isinstance(value, str):
        value = _json_text(value, "is a string but not")
    if not isinstance(value, list):
        raise CallFormatError(f"must be a list of tool calls, got {_type_name(value)}")
    calls = []
    for i, call in enumerate(value):
        if type(call) is dict:
            # the usual call, a dict with a non-empty text name and a dict input, taken
            # with fewer checks; any other item is taken (or refused) by the checks below
            name, tool_input = call.get("tool_name"), call.get("tool_input")
            if type(tool_input) is dict and type(name) is str and name:
                calls.append({"tool_name": name, "tool_input": tool_input})
                continue
        if not isinstance(call, dict):
            raise CallFormatError(f"item {i} must be an object with tool_name and tool_input, got {_type_name(call)}")
        name = call.get("tool_name")
        if not isinstance(name, str) or not name:
            raise CallFormatError(f"item {i} needs a non-empty string 'tool_name'")
        tool_input = call.get("tool_input", {})
        if tool_input is None:
            tool_input = {}
        elif isinstance(tool_input, str):  # e.g. a BigQuery JSON column
            tool_input = _json_text(tool_input, f"item {i} 'tool_input' is text but not")
        if not isinstance(tool_input, dict):
            raise CallFormatError(f"item {i} 'tool_input' must be an object, got {_type_name(tool_input)}")
        calls.append({"tool_name": name, "tool_input": tool_input})
    return calls


def call_key(call: dict[str, Any], ignore_args: bool = False) -> Any:
    if ignore_args:
        return call["tool_name"]
    return (call["tool_name"], json_key(call["tool_input"]))


def parse_tool_call_message(text: Any) -> tuple[str, list[dict[str, Any]]]:
    """Parse the service's tool-call message format:
    ``{"content": str, "tool_calls": [{"name": str, "arguments": object}, ...]}``.
    Extra top-level keys are allowed; each call needs exactly a string name and
    an object of arguments."""
    if not isinstance(text, str):
        raise CallFormatError(f"must be a JSON string, got {_type_name(text)}")
    message = _json_text(text, "is not")
    if not isinstance(message, dict):
        raise CallFormatError(f"must be a JSON object, got {_type_name(message)}")
    content = message.get("content")
    if not isinstance(content, str):
        raise CallFormatError("'content' must be a string")
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        raise CallFormatError("'tool_calls' must be a list")
    for i, call in enumerate(calls):
        if not isinstance(call, dict):
            raise CallFormatError(f"tool_calls[{i}] must be an object")
        if not isinstance(call.get("name"), str) or not call["name"]:
            raise CallFormatError(f"tool_calls[{i}] needs a non-empty string 'name'")
        if not isinstance(call.get("arguments"), dict):
            raise CallFormatError(f"tool_calls[{i}] 'arguments' must be an object")
    return content, calls


def _json_text(text: str, prefix: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CallFormatError(f"{prefix} valid JSON ({e.msg} at char {e.pos})") from None


def _type_name(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )
