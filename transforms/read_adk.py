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
  case (user simulation) has no turns: its record carries the scenario in
  `adk_case`, and inference runs the agent with the user simulator
  (transforms.simulator).

Each record carries the case's trace in `invocations` (metrics.rows.trace) and
the columns `instance_id`, `eval_set_id`, `eval_id` (and `session_id`).

A file is one JSON document, so it is parsed whole (ADK writes one file per
eval set; no streaming JSON parser is among the dependencies). Each case's
physical lines are found with the JSON decoder's positions, so the line
accounting holds: every line belongs to one case, or is skipped as holding
none (the file's own keys and punctuation).
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import os
import re
from typing import Any, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from evalbeam.configs.adk_expansion import criteria_of_file, test_config_path
from evalbeam.metrics.adk import INFORMATIONAL_CRITERIA
from evalbeam.metrics.agents.simulator import ScenarioError, SimulatorUnavailable, parse_scenario
from evalbeam.metrics.rows.trace import (USAGE_COUNTS, add_rubrics, camel_case, get_key, rubrics_of, side_from_events,
                                         turn_from_adk)
from evalbeam.transforms.adk_models import EXTRA_FORBIDDEN, forbidden_keys, session_input_errors
from evalbeam.transforms.records import DEAD_LETTER, LINES, MAX_RECORD_BYTES, DeadLetter, Record, SourceLines
from evalbeam.transforms.since import timestamp_nanos

# A whole ADK file is read at once: bounded, so a wrong file cannot take a worker's memory.
MAX_ADK_FILE_BYTES = 16 * MAX_RECORD_BYTES


class _Document:
    """The text of one file, its line count, and the line of a character offset."""

    def __init__(self, path: str, stream):
        self.path = path
        unreadable = None
        try:
            data = stream.read(MAX_ADK_FILE_BYTES + 1)
        except Exception as e:  # noqa: BLE001 - a corrupt or truncated compressed file: the file is its dead letter
            data, unreadable = b"", f"the file cannot be read ({type(e).__name__}: {e})"
        self.too_large = len(data) > MAX_ADK_FILE_BYTES
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        self.error: str | None = None
        try:
            self.text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.text = data.decode("utf-8", "replace")
            self.error = f"the file is not valid UTF-8 ({e.reason} at byte {e.start})"
            if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # as Windows tools (PowerShell's `>`) write
                self.error += ": it is UTF-16 (it starts with a UTF-16 byte order mark); ADK reads UTF-8 only: save it as UTF-8"
        if self.too_large:
            self.error = f"the file is over {MAX_ADK_FILE_BYTES:,} bytes, the limit for one ADK file"
        if unreadable:
            self.error = unreadable
        self.lines = self.text.count("\n") + (0 if self.text.endswith("\n") or not self.text else 1)
        self._starts = [m.end() for m in re.finditer("\n", self.text)]

    def line_at(self, offset: int) -> int:
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
        return f"invalid JSON: {e.msg}: line {e.lineno} column {e.colno}"
    except RecursionError:
        return "invalid JSON: nested too deeply to read"
    if isinstance(value, str):  # the legacy double-encoded form: the file holds a JSON string
        try:
            return json.loads(value), False
        except (json.JSONDecodeError, RecursionError):
            return "the file holds a JSON string that is not itself valid JSON"
    return value, True


def whole_json_file(path: str, stream) -> Iterator[Record | DeadLetter | SourceLines]:
    """A file holding one JSON document (an OTLP request, pretty-printed) -> one Record of it
    (a value that is not an object as {"value": ...}), or the file dead-lettered with the reason."""
    doc = _Document(path, stream)
    loaded = _load(doc)
    if isinstance(loaded, str):
        yield from doc.dead_file(loaded)
        return
    value = loaded[0] if isinstance(loaded[0], dict) else {"value": loaded[0]}
    yield Record(f"{path}:1", value, doc.text[:100_000], from_csv=False, origin=path, line=1, line_count=doc.lines)
    yield SourceLines(path, doc.lines, 0)


@dataclasses.dataclass(frozen=True)
class AdkReading:
    """How a run reads its ADK files: `base`, the input's base folder (its uri up
    to the first wildcard: adk_base), which a legacy *.test.json file's ids are
    relative to; `criteria_per_file`: each file's cases carry the criteria of the
    test_config.json ADK's AgentEvaluator.find_config_for_test_file finds for it
    (adk_case.criteria: criterion -> threshold), when the config names none."""
    base: str = ""
    criteria_per_file: bool = False


def adk_base(uri: str) -> str:
    """The folder a file uri starts from: up to its first wildcard, to the last '/'
    (a uri without one: its file's folder)."""
    cut = min((uri.index(c) for c in "*?[" if c in uri), default=len(uri))
    return uri[: uri.rfind("/", 0, cut) + 1]


def relative_path(path: str, base: str) -> str:
    """A file's path relative to the input's base folder (its name, where the path is not under it)."""
    return path[len(base):] if base and path.startswith(base) else path.rsplit("/", 1)[-1]


def _whole_document(parse):
    """parse(doc, value, positional, reading) -> a file parser, (path, stream, reading) -> items:
    the file read and parsed whole first, and dead-lettered whole when it cannot be."""
    @functools.wraps(parse)
    def parse_file(path: str, stream, reading: AdkReading = AdkReading()) -> Iterator[Record | DeadLetter | SourceLines]:
        doc = _Document(path, stream)
        loaded = _load(doc)
        if isinstance(loaded, str):
            yield from doc.dead_file(loaded)
            return
        criteria = None
        if reading.criteria_per_file:
            try:
                criteria = {spec["name"]: spec.get("threshold") for spec in criteria_of_file(path)}
            except ValueError as e:  # ADK cannot judge the file without its criteria
                yield from doc.dead_file(f"the file's test_config.json cannot be read: {e}")
                return
        items = parse(doc, *loaded, reading)
        for item in items:
            if criteria is not None and isinstance(item, Record):
                item.data["adk_case"]["criteria"] = criteria
            yield item

    return parse_file


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


@_whole_document
def parse_adk_eval_result(doc: _Document, value: Any, positional: bool, reading: AdkReading) -> Iterator[Record | DeadLetter | SourceLines]:
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
    forbidden = forbidden_keys(value, "EvalSetResult")
    if forbidden:  # EvalSetResult.model_validate_json refuses the whole file: every case dead-lettered, none scored
        yield from _refused_cases(out, cases, forbidden, list_key="eval_case_results", document="eval set result")
        yield out.lines()
        return
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
        user_id = get_key(case, "user_id")
        data: dict[str, Any] = {"instance_id": f"{set_id}:{eval_id}:{session_id}", "eval_set_id": set_id,
                                "eval_id": eval_id, "session_id": session_id, "invocations": turns,
                                "adk_case": {"eval_set_id": set_id, "eval_id": eval_id, "session_id": session_id,
                                             **({"user_id": user_id} if isinstance(user_id, str) else {})}}
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


def _refused_cases(out: _Cases, cases: list, forbidden: list[str],
                   invalid: list[tuple[str, str]] = (), list_key: str = "eval_cases",
                   document: str = "eval set") -> Iterator[DeadLetter]:
    """A dead letter per case of an eval set (or, with list_key "eval_case_results", a result
    file) ADK refuses for keys its models forbid (or `invalid`: (path, message) of values its
    models refuse, adk_models.session_input_errors): a case holding such keys names its first
    (and how many more); the others name the file's first."""
    problems = [(p, EXTRA_FORBIDDEN) for p in forbidden] + list(invalid)
    # grouped by case once: a file of many cases each with a forbidden key is linear, not quadratic
    by_case: dict[int, list[tuple[str, str]]] = {}
    for path, message in problems:
        found = re.match(rf"(?:{list_key}|{camel_case(list_key)})\[(\d+)\]\.", path)
        if found:
            by_case.setdefault(int(found.group(1)), []).append((path, message))
    for index, case in enumerate(cases):
        eval_id = get_key(case, "eval_id") if isinstance(case, dict) else None
        label = f"eval case {eval_id!r}" if isinstance(eval_id, str) and eval_id else f"{list_key}[{index}]"
        own = by_case.get(index, [])
        if own:
            kind = "forbidden key" if all(m == EXTRA_FORBIDDEN for _, m in own) else "refused key"
            more = f" (and {len(own) - 1} more {kind}{'s' * (len(own) > 2)} in this case)" if len(own) > 1 else ""
            what = "forbid the key" if own[0][1] == EXTRA_FORBIDDEN else "refuse the value"
            reason = (f"{label}: {own[0][0]}: {own[0][1]}{more}; ADK's models {what}, "
                      f"so ADK refuses the whole {document}")
        else:
            what = "a key its models forbid" if problems[0][1] == EXTRA_FORBIDDEN else "a value its models refuse"
            reason = (f"{label}: not scored: ADK refuses the whole {document}, which holds {what} "
                      f"({problems[0][0]}: {problems[0][1]})")
        yield out.dead(index, reason, case, (own or problems)[0][0])


# AgentEvaluator's ALLOWED_CRITERIA: the criteria its legacy test files may be judged with
LEGACY_TEST_CRITERIA = ("tool_trajectory_avg_score", "response_evaluation_score", "response_match_score", "safety_v1")


def _agent_evaluator_refusal(turns: list, path: str) -> tuple[str, str] | None:
    """(reason, field) where ADK's AgentEvaluator._validate_input refuses a legacy flat test
    file with the criteria of its test_config.json (it checks the first turn only), else None."""
    names = [spec["name"] for spec in criteria_of_file(path) if spec["name"] not in INFORMATIONAL_CRITERIA]
    for name in names:
        if name not in LEGACY_TEST_CRITERIA:
            return (f"ADK's AgentEvaluator refuses a legacy test file judged with {name} (its test_config.json "
                    f"{test_config_path(path)}): Invalid criteria key: {name}. Expected one of "
                    f"{list(LEGACY_TEST_CRITERIA)}.", "criteria")
    first = turns[0]
    if "tool_trajectory_avg_score" in names and "expected_tool_use" not in first:
        return ("[0].expected_tool_use is missing: ADK's AgentEvaluator refuses a legacy test file judged with "
                "tool_trajectory_avg_score whose first turn has no 'query' and 'expected_tool_use' keys",
                "[0].expected_tool_use")
    return None


@_whole_document
def parse_adk_eval_set(doc: _Document, value: Any, positional: bool, reading: AdkReading) -> Iterator[Record | DeadLetter | SourceLines]:
    path = doc.path
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
            # a flat list of turns (*.test.json): one case, its own eval set, as AgentEvaluator
            # makes it (whose ids are the path as given and a random uuid): here the path
            # relative to the input's base folder, so ids hold when the data folder moves
            relative = relative_path(path, reading.base)
            name = relative.removesuffix(".test.json")
            cases = [(relative, value, value)]
            if reading.criteria_per_file:  # judged with its test_config.json: AgentEvaluator checks the two agree
                refused = _agent_evaluator_refusal(value, path)
                if refused:
                    out = _Cases(doc, [(1, doc.lines)] if positional else None)
                    yield out.dead(0, f"eval case {relative!r}: {refused[0]}", value, refused[1])
                    yield out.lines()
                    return
        else:
            yield from doc.dead_file("not an ADK eval set: a list must hold {name, data} cases or {query, ...} turns")
            return
        spans = _element_spans(doc, None, len(value)) if positional and len(cases) == len(value) else None
        if cases[0][2] is value:
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
            adk_case = {"eval_set_id": name, "eval_id": eval_id}
            session = raw.get("initial_session") if raw is not value else None
            if session:  # the case's session_input, as convert_eval_set_to_pydantic_schema makes it
                if not isinstance(session, dict):
                    yield out.dead(index, f"{label}: initial_session must be an object", raw, "initial_session")
                    continue
                # what ADK's SessionInput refuses of the values it is made with
                wrong = next((k for k, kind in (("app_name", str), ("user_id", str), ("state", dict))
                              if k in session and not isinstance(session[k], kind)), None)
                if wrong:
                    yield out.dead(index, f"{label}: initial_session.{wrong} must be "
                                          f"{'an object' if wrong == 'state' else 'a string'} (ADK's SessionInput "
                                          f"refuses {type(session[wrong]).__name__})", raw, f"initial_session.{wrong}")
                    continue
                adk_case["session_input"] = {"app_name": session.get("app_name", ""),
                                             "user_id": session.get("user_id", ""), "state": session.get("state", {})}
            yield out.record(index, {"instance_id": f"{name}:{eval_id}", "eval_set_id": name, "eval_id": eval_id,
                                     "invocations": turns, "adk_case": adk_case}, raw)
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
    forbidden, invalid = forbidden_keys(value), session_input_errors(value)
    if forbidden or invalid:  # ADK refuses the whole file: every case is dead-lettered, none scored
        yield from _refused_cases(out, cases, forbidden, invalid)
        yield out.lines()
        return
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
            # user simulation (metrics.agents.simulator): no turns until inference runs the agent with the simulator
            if conversation is not None:
                yield out.dead(index, f"{label}: Exactly one of conversation and conversation_scenario must be "
                                      "provided in an EvalCase.", case, "conversation_scenario")
                continue
            try:
                parse_scenario(scenario)  # ADK's own ConversationScenario: a case ADK refuses is dead-lettered
            except SimulatorUnavailable:
                pass  # no google-adk here: kept; a run that would simulate it stops before it starts (preflight)
            except ScenarioError as e:
                yield out.dead(index, f"{label}: {e}", case, "conversation_scenario")
                continue
            adk_case = {"eval_set_id": set_id, "eval_id": eval_id, "conversation_scenario": scenario}
            if isinstance(get_key(case, "session_input"), dict):
                adk_case["session_input"] = get_key(case, "session_input")
            if get_key(case, "rubrics") is not None:  # copied onto the simulated turns, as ADK copies them
                try:
                    adk_case["rubrics"] = rubrics_of(get_key(case, "rubrics"), "rubrics")
                except ValueError as e:
                    yield out.dead(index, f"{label}: {e}", case, _field_of(str(e)))
                    continue
            record = {"instance_id": f"{set_id}:{eval_id}", "eval_set_id": set_id, "eval_id": eval_id,
                      "adk_case": adk_case}
            yield out.record(index, record, case)
            continue
        if not isinstance(conversation, list):
            yield out.dead(index, f"{label}: conversation is missing or not a list of invocations", case, "conversation")
            continue
        try:
            turns = [turn_from_adk(None, inv, f"conversation[{j}]") for j, inv in enumerate(conversation)]
            if get_key(case, "rubrics") is not None:  # the case's rubrics apply to every turn (as ADK copies them)
                case_rubrics = rubrics_of(get_key(case, "rubrics"), "rubrics")
                for turn in turns:
                    add_rubrics(turn, case_rubrics)
        except ValueError as e:
            yield out.dead(index, f"{label}: {e}", case, _field_of(str(e)))
            continue
        adk_case = {"eval_set_id": set_id, "eval_id": eval_id}
        if isinstance(get_key(case, "session_input"), dict):  # the session inference starts the case in
            adk_case["session_input"] = get_key(case, "session_input")
        yield out.record(index, {"instance_id": f"{set_id}:{eval_id}", "eval_set_id": set_id, "eval_id": eval_id,
                                 "invocations": turns, "adk_case": adk_case}, case)
    yield out.lines()


# ---------------------------------------------------------------------------
# adk_agent_events: the BigQuery table of ADK's BigQueryAgentAnalyticsPlugin
#
# One row per logged event (`timestamp`, `event_type`, `agent`, `session_id`,
# `invocation_id`, `user_id`, `content` JSON, `content_parts`, `attributes`
# JSON, `latency_ms` JSON, `status`, `error_message`, ...). The rows are keyed
# by session (or session and invocation) and grouped by the runner, so a day
# of millions of events never meets in one process; each group becomes one
# record whose trace has a turn per invocation_id, in timestamp order. The
# projection follows the plugin's own eval views (`_EVAL_VIEW_CTES_SQL`) and
# ADK's convert_events_to_eval_invocations:
# - USER_MESSAGE_RECEIVED: the user's text (inline text/plain content parts in
#   part order, else the content's text); "Function response: ..." rows are not user text;
# - TOOL_STARTING: a tool call (name, args), TOOL_COMPLETED its response (a
#   non-object result as {"result": ...}), paired with the earliest open call of
#   the same tool; `transfer_to_agent` and ADK's `adk_request_*` tools are left
#   out, as in the plugin's views;
# - TOOL_ERROR: the row leaves out what the model was answered (ADK's "no tool
#   with that name" payload, or an error callback's answer). The next LLM_REQUEST
#   of the turn holds it, in content_parts (part_attributes.function_response, in
#   call order): that is the call's response. With no model call after it, the
#   error ended the turn: ADK's session has the call with no response, and so
#   does the trace (unless no error row follows either, e.g. LLM_REQUEST rows
#   were filtered out: then {"error": error_message});
# - AGENT_RESPONSE: agent text (the plugin's `text: '...'` rendering unwrapped);
#   a turn's last one is its final response, earlier ones intermediate responses;
# - LLM_RESPONSE: a model call, with attributes.usage_metadata and model_version
#   (when some rows of a turn are terminal, i.e. carry finish_reason or
#   cache_type, only those count: streamed partial chunks would count twice);
# - INVOCATION_COMPLETED: latency_ms.total_ms is the turn's measured duration.
# ---------------------------------------------------------------------------

_SKIPPED_TOOLS = ("transfer_to_agent",)
_TEXT_RENDERING = re.compile(r"(?s)^text: '.*'$")
_NON_TEXT_PARTS = re.compile(r" [|] (?:call: |resp: |Executable code |Code execution result )")
_OTHER_PART = re.compile(r" [|] other(?: [|] |$)")
_NOT_TEXT = re.compile(r"^(?:call: |resp: |Executable code |Code execution result )")
_NO_TEXT = re.compile(r"^(?:None$|text: '|other(?: [|] |$))")


def _json(value: Any, column: str) -> Any:
    """A JSON column's value (the Storage Read API gives its text)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{column} is not valid JSON ({e.msg} at char {e.pos})") from None
    return value


def response_text(response: Any) -> str | None:
    """AGENT_RESPONSE content.response as text, as the plugin's eval views read it."""
    if response is None:
        return None
    if not isinstance(response, str):
        return json.dumps(response, ensure_ascii=False)
    if _TEXT_RENDERING.match(response) and not _NON_TEXT_PARTS.search(response) and not _OTHER_PART.search(response):
        text = response[len("text: '"):-1].replace("' | text: '", "\n")
        return text or None
    if not _NOT_TEXT.match(response) and not _NO_TEXT.match(response):
        return response or None
    return None


def _user_text(row: dict[str, Any], content: Any) -> str | None:
    parts = row.get("content_parts") or []
    if parts:
        texts = [p for p in parts if isinstance(p, dict) and p.get("mime_type") == "text/plain"
                 and (p.get("storage_mode") or "INLINE") == "INLINE" and (p.get("part_attributes") or "{}") == "{}"
                 and p.get("text") not in (None, "", "[BINARY DATA]", "[UPLOAD FAILED]")]
        texts.sort(key=lambda p: p.get("part_index") or 0)
        return "\n".join(p["text"] for p in texts) or None
    text = content.get("text_summary") if isinstance(content, dict) else content
    if not isinstance(text, str) or not text or text.startswith("Function response: "):
        return None
    return text


def _is_skipped_tool(name: Any) -> bool:
    return not isinstance(name, str) or name in _SKIPPED_TOOLS or name.startswith("adk_request_")


def _request_responses(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The function responses an LLM_REQUEST row sends the model (the whole history), in order."""
    found = []
    for part in row.get("content_parts") or []:
        attributes = _json(part.get("part_attributes"), "content_parts.part_attributes") \
            if isinstance(part, dict) else None
        response = attributes.get("function_response") if isinstance(attributes, dict) else None
        if isinstance(response, dict) and isinstance(response.get("name"), str):
            found.append(response)
    return found


def _answer_errors(pending: list[dict[str, Any]], step: list[dict[str, Any]], request: dict[str, Any]) -> None:
    """Give each failed call of this step the response the next model request carries for it.

    The request's history ends with this step's responses in call order; a tool's
    last k responses there are those of its k calls in the step."""
    history = _request_responses(request)
    for failed in list(pending):
        name = failed["call"]["name"]
        calls = [c for c in step if c["name"] == name]
        answers = [r for r in history if r["name"] == name][-len(calls):] if calls else []
        if len(answers) == len(calls) and failed["call"] in calls:
            failed["part"]["response"] = answers[calls.index(failed["call"])].get("response")
            pending.remove(failed)


def turn_from_events(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One invocation's event rows (in timestamp order) -> a trace turn."""
    llm = [r for r in rows if r.get("event_type") == "LLM_RESPONSE"]
    terminal = [r for r in llm if isinstance(a := _json(r.get("attributes"), "attributes"), dict)
                and (a.get("finish_reason") is not None or a.get("cache_type") is not None)]
    counted = {id(r) for r in (terminal or llm)}
    prompts, events, open_calls, responses = [], [], [], []
    step: list[dict[str, Any]] = []  # the calls since the last model request
    pending: list[dict[str, Any]] = []  # failed calls whose response the next model request tells
    failed_after = False  # an agent or invocation error row after the last pending call
    duration = None
    for row in rows:
        kind = row.get("event_type")
        author = row.get("agent") or "root_agent"
        content = _json(row.get("content"), "content")
        if kind == "USER_MESSAGE_RECEIVED":
            text = _user_text(row, content)
            if text:
                prompts.append(text)
        elif kind == "TOOL_STARTING" and isinstance(content, dict) and not _is_skipped_tool(content.get("tool")):
            call: dict[str, Any] = {"name": content["tool"], "id": f"call_{len(open_calls) + len(responses)}"}
            if isinstance(content.get("args"), dict):
                call["args"] = content["args"]
            open_calls.append(call)
            step.append(call)
            events.append({"author": author, "parts": [{"function_call": call}]})
        elif kind in ("TOOL_COMPLETED", "TOOL_ERROR") and isinstance(content, dict) \
                and not _is_skipped_tool(content.get("tool")):
            call = next((c for c in open_calls if c["name"] == content["tool"]), None)
            if kind == "TOOL_COMPLETED":
                result = content.get("result")
                response = result if isinstance(result, dict) else {"result": result}
            else:
                response = {"error": row.get("error_message") or content.get("error")}
            fr: dict[str, Any] = {"name": content["tool"], "response": response}
            if call is not None:
                open_calls.remove(call)
                responses.append(call)
                fr["id"] = call["id"]
            event = {"author": author, "parts": [{"function_response": fr}]}
            events.append(event)
            if kind == "TOOL_ERROR" and call is not None:
                pending.append({"call": call, "part": fr, "event": event})
                failed_after = False
        elif kind == "LLM_REQUEST":
            if pending:
                _answer_errors(pending, step, row)
            step = []
        elif kind in ("AGENT_ERROR", "INVOCATION_ERROR"):
            failed_after = True
        elif kind == "AGENT_RESPONSE":
            text = response_text(content.get("response") if isinstance(content, dict) else content)
            if text:
                events.append({"author": author, "parts": [{"text": text}], "agent_response": True})
        elif kind == "LLM_RESPONSE" and id(row) in counted:
            attributes = _json(row.get("attributes"), "attributes") or {}
            event: dict[str, Any] = {"author": author, "parts": []}
            usage = attributes.get("usage_metadata") if isinstance(attributes, dict) else None
            if not isinstance(usage, dict) and isinstance(content, dict) and isinstance(content.get("usage"), dict):
                plain = content["usage"]
                usage = {"prompt_token_count": plain.get("prompt"), "candidates_token_count": plain.get("completion"),
                         "total_token_count": plain.get("total")}
            if isinstance(usage, dict):
                event["usage"] = {k: v for k, v in usage.items() if k in USAGE_COUNTS and isinstance(v, int)}
            if isinstance(attributes, dict) and isinstance(attributes.get("model_version"), str):
                event["model_version"] = attributes["model_version"]
            if "usage" not in event and "model_version" not in event:
                event["usage"] = {}  # a model call all the same
            events.append(event)
        elif kind == "INVOCATION_COMPLETED":
            latency = _json(row.get("latency_ms"), "latency_ms")
            if isinstance(latency, dict) and isinstance(latency.get("total_ms"), (int, float)):
                duration = latency["total_ms"] / 1000
    if failed_after:  # the error ended the turn before the model was answered: no response, as in ADK's session
        for failed in pending:
            events.remove(failed["event"])
    final = next((e for e in reversed(events) if e.get("agent_response")), None)
    kept = [{k: v for k, v in e.items() if k != "agent_response"} for e in events if e is not final]
    turn: dict[str, Any] = {"invocation_id": rows[0].get("invocation_id"), "prompt": "\n".join(prompts),
                            "response": final["parts"][0]["text"] if final else "", "events": kept}
    turn.update(side_from_events(kept))
    if duration is not None:
        turn["duration"] = {"total": duration}
    return turn


def _order(record: Record):
    return (str(record.data.get("timestamp") or ""), record.origin, record.line)


def key_event_row(record: Record, granularity: str):
    """(group key, record), or a DeadLetter for a row that belongs to no session or turn."""
    pvalue = beam.pvalue
    data = record.data
    for column in ("session_id", "invocation_id"):
        value = data.get(column)
        if not isinstance(value, str) or not value:
            yield pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(
                record.source, f"event row has no {column}: it belongs to no {column.split('_')[0]}",
                record.raw, column, record.origin, record.line, record.line_count))
            return
    key = data["session_id"] if granularity == "session" else f"{data['session_id']}:{data['invocation_id']}"
    yield key, record


def session_record(element, label: str, window=None):
    """(key, event rows) -> one Record whose trace has a turn per invocation, or a DeadLetter.
    window (input.since, transforms.since.ReadWindow): a session whose last event was logged outside
    it is skipped, its rows counted as such (a SourceLines, tag 'lines')."""
    pvalue = beam.pvalue
    key, records = element
    records = sorted(records, key=_order)
    first = records[0]
    line_count = sum(r.line_count for r in records)
    if window is not None:
        times = [t for t in (timestamp_nanos(r.data.get("timestamp")) for r in records) if t is not None]
        where = window.where(max(times)) if times else "in"  # a session with no time: dead-lettered below if broken
        if where != "in":
            Metrics.counter("evalbeam", f"adk_sessions_{where}_window").inc()
            yield pvalue.TaggedOutput(LINES, SourceLines(first.origin, 0, line_count))
            return
    source = f"{label} session {first.data['session_id']}" + (f" turn {first.data['invocation_id']}"
                                                              if key != first.data["session_id"] else "")
    turns_rows: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        turns_rows.setdefault(r.data["invocation_id"], []).append(r.data)
    raw = "\n".join(r.raw for r in records)[:100_000]
    try:
        turns = [turn_from_events(rows) for rows in turns_rows.values()]
    except ValueError as e:
        yield pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(source, f"session {first.data['session_id']!r}: {e}", raw,
                                                          str(e).split(" ", 1)[0], first.origin, first.line,
                                                          line_count))
        return
    users = sorted({r.data.get("user_id") for r in records if r.data.get("user_id")})
    data = {"instance_id": key, "session_id": first.data["session_id"], "user_id": users[0] if users else None,
            "invocations": turns, "adk_case": {"session_id": first.data["session_id"],
                                               **({"user_id": users[0]} if users else {})}}
    # the agent (not a tool) failed on a turn: the automatic `failure` metric
    data["failure"] = int(any(r.data.get("event_type") in ("INVOCATION_ERROR", "AGENT_ERROR") for r in records))
    yield Record(source, data, raw, from_csv=False, origin=first.origin, line=first.line, line_count=line_count)


class GroupAgentEvents(beam.PTransform):
    """Records of event rows -> (one Record per session, or per turn, DeadLetters, and SourceLines of
    the rows of sessions outside input.since's `window`, skipped)."""

    def __init__(self, granularity: str, label: str, window=None):
        super().__init__()
        self._granularity = granularity
        self._label = label
        self._window = window

    def expand(self, rows):
        keyed = rows | "KeyBySession" >> beam.FlatMap(key_event_row, self._granularity).with_outputs(
            DEAD_LETTER, main="keyed")
        built = (keyed.keyed
                 | "GroupBySession" >> beam.GroupByKey()
                 | "SessionTrace" >> beam.FlatMap(session_record, self._label, self._window).with_outputs(
                     DEAD_LETTER, LINES, main="records"))
        dead = (keyed[DEAD_LETTER], built[DEAD_LETTER]) | "EventDeadLetters" >> beam.Flatten()
        return built.records, dead, built[LINES]
