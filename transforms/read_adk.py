"""Reading Google ADK evaluation files into records: one record per eval case.

- `adk_eval_result`: an EvalSetResult as `adk eval` writes it
  (`*.evalset_result.json`; snake_case or camelCase keys; also the legacy
  double-encoded file holding a JSON string). One record per EvalCaseResult:
  its actual turns from `eval_metric_result_per_invocation[].actual_invocation`,
  the expected ones from `.expected_invocation`; `instance_id` is
  `<eval_set_id>:<eval_id>:<session_id>`.
- `adk_eval_set`: an EvalSet (`*.evalset.json`, top-level keys snake_case as ADK
  requires), or either legacy form: a flat list of `{query, expected_tool_use,
  reference}` turns (`*.test.json`: one case, whose eval_id is the file path, as
  in ADK), or a list of `{name, data, initial_session}` cases. Expected turns
  only; `instance_id` is `<eval_set_id>:<eval_id>`. A `conversation_scenario`
  case (user simulation) is dead-lettered: it has no turns until a user
  simulator runs it.

Each record carries the case's trace in `invocations` (metrics.instance) and
the columns `instance_id`, `eval_set_id`, `eval_id` (and `session_id`).

A file is one JSON document, so it is parsed whole (ADK writes one file per
eval set; no streaming JSON parser is among the dependencies). Each case's
physical lines are found with the JSON decoder's positions, so the line
accounting holds: every line belongs to one case, or is skipped as holding
none (the file's own keys and punctuation).
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Iterator

from metrics.instance import get_key, turn_from_adk
from transforms.read import MAX_RECORD_BYTES, DeadLetter, Record, SourceLines

# A whole ADK file is read at once: bounded, so a wrong file cannot take a worker's memory.
MAX_ADK_FILE_BYTES = 16 * MAX_RECORD_BYTES


class _Document:
    """The text of one file, its line count, and the line of a character offset."""

    def __init__(self, path: str, stream):
        self.path = path
        data = stream.read(MAX_ADK_FILE_BYTES + 1)
        self.too_large = len(data) > MAX_ADK_FILE_BYTES
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        self.error: str | None = None
        try:
            self.text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.text = data.decode("utf-8", "replace")
            self.error = f"the file is not valid UTF-8 ({e.reason} at byte {e.start})"
        if self.too_large:
            self.error = f"the file is over {MAX_ADK_FILE_BYTES:,} bytes, the limit for one ADK file"
        self.lines = self.text.count("\n") + (0 if self.text.endswith("\n") or not self.text else 1)
        self._starts = [m.end() for m in re.finditer("\n", self.text)]

    def line_at(self, offset: int) -> int:
        import bisect

        return bisect.bisect_right(self._starts, offset) + 1

    def dead_file(self, reason: str) -> Iterator[DeadLetter | SourceLines]:
        yield DeadLetter(f"{self.path}:1", reason, self.text[:100_000], origin=self.path, line=1,
                         line_count=self.lines)
        yield SourceLines(self.path, self.lines, 0)


def _load(doc: _Document) -> tuple[Any, bool] | str:
    """(the parsed document, whether the text positions hold) or why it cannot be read."""
    if doc.error:
        return doc.error
    try:
        value = json.loads(doc.text)
    except json.JSONDecodeError as e:
        return f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}"
    except RecursionError:
        return "invalid JSON: nested too deeply to read"
    if isinstance(value, str):  # the legacy double-encoded form: the file holds a JSON string
        try:
            return json.loads(value), False
        except (json.JSONDecodeError, RecursionError):
            return "the file holds a JSON string that is not itself valid JSON"
    return value, True


def _element_spans(doc: _Document, keys: tuple[str, ...] | None, count: int) -> list[tuple[int, int]] | None:
    """(first line, last line) of each element of the array under one of `keys`
    at the top level (or of the top-level array, keys None); None when they
    cannot be told apart (the spans are then not attributed)."""
    text = doc.text
    if keys is None:
        start = text.find("[")
    else:
        pattern = r'"(?:' + "|".join(map(re.escape, keys)) + r')"\s*:\s*\['
        match = re.search(pattern, text)
        start = match.end() - 1 if match else -1
    if start < 0:
        return None
    decoder = json.JSONDecoder()
    spans = []
    pos = start + 1
    ws = re.compile(r"[\s,]*")
    for _ in range(count):
        pos = ws.match(text, pos).end()
        try:
            _, end = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError):
            return None
        spans.append((doc.line_at(pos), doc.line_at(end - 1)))
        pos = end
    if ws.match(text, pos).end() >= len(text) or text[ws.match(text, pos).end()] != "]":
        return None
    return spans


class _Cases:
    """Yields the records and dead letters of a file's cases, attributing lines."""

    def __init__(self, doc: _Document, spans: list[tuple[int, int]] | None):
        self.doc = doc
        self.spans = spans
        self.covered = 0  # last line attributed
        self.accounted = 0

    def where(self, index: int) -> tuple[int, int]:
        """(line, line_count) of case `index`; a line shared with the previous case counts once."""
        if self.spans is None:
            return 1, 0
        first, last = self.spans[index]
        count = max(0, last - max(first, self.covered + 1) + 1)
        self.covered = max(self.covered, last)
        self.accounted += count
        return first, count

    def record(self, index: int, data: dict[str, Any], raw: Any) -> Record:
        line, count = self.where(index)
        return Record(f"{self.doc.path}:{line}", data, _raw(raw), from_csv=False, origin=self.doc.path, line=line,
                      line_count=count)

    def dead(self, index: int, reason: str, raw: Any, field: str | None) -> DeadLetter:
        line, count = self.where(index)
        return DeadLetter(f"{self.doc.path}:{line}", reason, _raw(raw), field, origin=self.doc.path, line=line,
                          line_count=count)

    def lines(self) -> SourceLines:
        return SourceLines(self.doc.path, self.doc.lines, self.doc.lines - self.accounted)


def _raw(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)[:100_000]
    except (TypeError, ValueError, RecursionError):
        return repr(value)[:100_000]


def _field_of(reason: str) -> str:
    """The dotted path a reason starts with (e.g. `eval_metric_result_per_invocation[0].actual_invocation`)."""
    return reason.split(" ", 1)[0]


def parse_adk_eval_result(path: str, stream) -> Iterator[Record | DeadLetter | SourceLines]:
    doc = _Document(path, stream)
    loaded = _load(doc)
    if isinstance(loaded, str):
        yield from doc.dead_file(loaded)
        return
    value, positional = loaded
    if not isinstance(value, dict) or get_key(value, "eval_case_results") is None:
        yield from doc.dead_file("not an ADK EvalSetResult: expected an object with eval_case_results")
        return
    cases = get_key(value, "eval_case_results")
    if not isinstance(cases, list):
        yield from doc.dead_file("eval_case_results must be a list")
        return
    file_set_id = get_key(value, "eval_set_id")
    spans = _element_spans(doc, ("eval_case_results", "evalCaseResults"), len(cases)) if positional else None
    out = _Cases(doc, spans)
    for index, case in enumerate(cases):
        label = f"eval_case_results[{index}]"
        if not isinstance(case, dict):
            yield out.dead(index, f"{label} must be an object", case, label)
            continue
        eval_id = get_key(case, "eval_id")
        label = f"eval case {eval_id!r}" if isinstance(eval_id, str) and eval_id else label
        set_id = get_key(case, "eval_set_id") or get_key(case, "eval_set_file") or file_set_id
        session_id = get_key(case, "session_id")
        missing = [k for k, v in (("eval_id", eval_id), ("eval_set_id", set_id), ("session_id", session_id))
                   if not isinstance(v, str) or not v]
        if missing:
            yield out.dead(index, f"{label}: {missing[0]} is missing or not a non-empty string", case, missing[0])
            continue
        try:
            per_invocation = get_key(case, "eval_metric_result_per_invocation") or []
            if not isinstance(per_invocation, list):
                raise ValueError("eval_metric_result_per_invocation must be a list")
            turns = []
            for j, item in enumerate(per_invocation):
                where = f"eval_metric_result_per_invocation[{j}]"
                if not isinstance(item, dict):
                    raise ValueError(f"{where} must be an object")
                actual = get_key(item, "actual_invocation")
                if actual is None:
                    raise ValueError(f"{where}.actual_invocation is missing")
                turns.append(turn_from_adk(actual, get_key(item, "expected_invocation"), f"{where}.actual_invocation"))
        except ValueError as e:
            yield out.dead(index, f"{label}: {e}", case, _field_of(str(e)))
            continue
        data: dict[str, Any] = {"instance_id": f"{set_id}:{eval_id}:{session_id}", "eval_set_id": set_id,
                                "eval_id": eval_id, "session_id": session_id, "invocations": turns}
        if not turns:  # ADK records a case whose inference failed with no invocations
            data["failure"] = 1
        yield out.record(index, data, case)
    yield out.lines()


def _legacy_turn(turn: Any, where: str) -> dict[str, Any]:
    """A turn of ADK's legacy formats, as _convert_invocation_to_pydantic_schema reads it."""
    if not isinstance(turn, dict):
        raise ValueError(f"{where} must be an object")
    if not isinstance(turn.get("query"), str):
        raise ValueError(f"{where}.query is missing or not a string")
    reference = turn.get("reference", "")
    if not isinstance(reference, str):
        raise ValueError(f"{where}.reference must be a string")
    tool_uses = []
    for k, use in enumerate(turn.get("expected_tool_use", [])):
        if not isinstance(use, dict) or "tool_name" not in use or "tool_input" not in use:
            raise ValueError(f"{where}.expected_tool_use[{k}] needs tool_name and tool_input")
        tool_uses.append({"name": use["tool_name"], "args": use["tool_input"]})
    responses = []
    for k, item in enumerate(turn.get("expected_intermediate_agent_responses", [])):
        if not isinstance(item, dict) or "author" not in item or "text" not in item:
            raise ValueError(f"{where}.expected_intermediate_agent_responses[{k}] needs author and text")
        responses.append([item["author"], [{"text": item["text"]}]])
    invocation = {"user_content": {"role": "user", "parts": [{"text": turn["query"]}]},
                  "final_response": {"role": "model", "parts": [{"text": reference}]},
                  "intermediate_data": {"tool_uses": tool_uses, "intermediate_responses": responses}}
    return turn_from_adk(None, invocation, where)


def parse_adk_eval_set(path: str, stream) -> Iterator[Record | DeadLetter | SourceLines]:
    doc = _Document(path, stream)
    loaded = _load(doc)
    if isinstance(loaded, str):
        yield from doc.dead_file(loaded)
        return
    value, positional = loaded
    name = os.path.basename(path)
    for suffix in (".evalset.json", ".test.json", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if isinstance(value, list):
        if value and all(isinstance(c, dict) and "data" in c for c in value):
            # [{name, data: [turns], initial_session}]: convert_eval_set_to_pydantic_schema
            cases = [(c.get("name"), c["data"], c) for c in value]
        elif value and all(isinstance(t, dict) and "query" in t for t in value):
            # a flat list of turns (*.test.json): one case whose eval_id is the file path
            cases = [(path, value, value)]
        else:
            yield from doc.dead_file("not an ADK eval set: a list must hold {name, data} cases or {query, ...} turns")
            return
        spans = _element_spans(doc, None, len(value)) if positional and len(cases) == len(value) else None
        if len(cases) == 1 and cases[0][0] == path:
            spans = [(1, doc.lines)] if positional else None
        out = _Cases(doc, spans)
        for index, (eval_id, data, raw) in enumerate(cases):
            label = f"eval case {eval_id!r}"
            if not isinstance(eval_id, str) or not eval_id:
                yield out.dead(index, f"case {index}: name is missing or not a non-empty string", raw, "name")
                continue
            try:
                if not isinstance(data, list):
                    raise ValueError("data must be a list of turns")
                turns = [_legacy_turn(t, f"data[{j}]" if raw is not value else f"[{j}]") for j, t in enumerate(data)]
            except ValueError as e:
                yield out.dead(index, f"{label}: {e}", raw, _field_of(str(e)))
                continue
            yield out.record(index, {"instance_id": f"{name}:{eval_id}", "eval_set_id": name, "eval_id": eval_id,
                                     "invocations": turns}, raw)
        yield out.lines()
        return
    if not isinstance(value, dict):
        yield from doc.dead_file("not an ADK EvalSet: expected an object with eval_set_id and eval_cases")
        return
    if "eval_set_id" not in value or "eval_cases" not in value:
        camel = [k for k in ("evalSetId", "evalCases") if k in value]
        reason = ("an EvalSet's top-level keys must be snake_case (eval_set_id, eval_cases), as ADK requires; "
                  f"found {camel}" if camel else "not an ADK EvalSet: expected an object with eval_set_id and eval_cases")
        yield from doc.dead_file(reason)
        return
    set_id, cases = value["eval_set_id"], value["eval_cases"]
    if not isinstance(set_id, str) or not set_id or not isinstance(cases, list):
        yield from doc.dead_file("eval_set_id must be a non-empty string and eval_cases a list")
        return
    spans = _element_spans(doc, ("eval_cases",), len(cases)) if positional else None
    out = _Cases(doc, spans)
    for index, case in enumerate(cases):
        if not isinstance(case, dict):
            yield out.dead(index, f"eval_cases[{index}] must be an object", case, f"eval_cases[{index}]")
            continue
        eval_id = get_key(case, "eval_id")
        if not isinstance(eval_id, str) or not eval_id:
            yield out.dead(index, f"eval_cases[{index}]: eval_id is missing or not a non-empty string", case, "eval_id")
            continue
        label = f"eval case {eval_id!r}"
        conversation, scenario = get_key(case, "conversation"), get_key(case, "conversation_scenario")
        if scenario is not None:
            yield out.dead(index, f"{label}: conversation_scenario cases (user simulation) are not supported: their "
                                  "turns exist only once a user simulator has run them with the agent",
                           case, "conversation_scenario")
            continue
        if not isinstance(conversation, list):
            yield out.dead(index, f"{label}: conversation is missing or not a list of invocations", case, "conversation")
            continue
        try:
            turns = [turn_from_adk(None, inv, f"conversation[{j}]") for j, inv in enumerate(conversation)]
        except ValueError as e:
            yield out.dead(index, f"{label}: {e}", case, _field_of(str(e)))
            continue
        yield out.record(index, {"instance_id": f"{set_id}:{eval_id}", "eval_set_id": set_id, "eval_id": eval_id,
                                 "invocations": turns}, case)
    yield out.lines()
