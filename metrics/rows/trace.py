"""Agent traces: a case of turns (the `invocations` field), read from ADK's
and Gemini's (Vertex's) recorded forms and checked into one model (below)."""
from __future__ import annotations

import functools
from typing import Any, Mapping

from pydantic.alias_generators import to_camel

from evalbeam.metrics.rows.calls import CallFormatError, parse_trajectory
from evalbeam.metrics.rows.fields import INVOCATION_KEYS, TRAJECTORY_FIELDS, as_number, structured_value, value_kind

# ---------------------------------------------------------------------------
# Agent instances: a case of turns (the `invocations` field)
#
# An agent instance is one case of one or more turns (ADK: invocations). Each
# turn is a JSON object; every key but `prompt` is optional:
#
#   invocation_id            the turn's id, where the source has one
#   prompt                   the user's text
#   response                 the final response text ("" when the turn ended without one)
#   prompt_parts, response_parts  the text parts of the user's message and of the final response
#                            ([{text, thought}]), kept only where there are several (or a thought):
#                            `prompt`/`response` join them with a new line, as ADK's judges read
#                            them; ADK's multi-turn trajectory prompt joins them with a space
#   events                   the ordered events, when the source recorded them (ADK's
#                            `invocation_events`, Vertex's `intermediate_events`/`agent_data`):
#                            [{author, parts: [{text} | {function_call: {name, args, id}} |
#                              {function_response: {name, response, id}}], usage, model_version}]
#   tool_calls               the actual tool calls in order: [{tool_name, tool_input, id, response}],
#                            `response` matched to the call by call id; `tool_input` absent when
#                            the call had no arguments (ADK keeps `args: null` apart from `{}`).
#                            A turn HAS an actual side exactly when it has this key.
#   intermediate_responses   natural-language text before the final response: [{author, text}]
#   duration                 {total, model, tool} seconds, where measured
#   expected                 the expected turn, where the input has one:
#                            {response, tool_calls, intermediate_responses}
#   rubrics                  ADK rubrics for this turn (the invocation's, and its case's):
#                            [{rubric_id, rubric_content: {text_property}, description, type}]
#   app_details              ADK's AppDetails as recorded ({agent_details: {name: {instructions,
#                            tool_declarations}}}), for judges that read instructions and tools
# Events also keep ADK's `grounding_metadata` where recorded.
#
# Token usage and inference calls are read off `events[].usage`/`model_version`, as ADK does.
# The older flat invocation `{prompt, response, reference, predicted_trajectory,
# reference_trajectory}` and flat rows (`response`, `reference`, `predicted_trajectory`,
# `reference_trajectory`) are read as one-turn cases of this model (`trace_of`).
# ---------------------------------------------------------------------------

TURN_KEYS = ("invocation_id", "prompt", "prompt_parts", "response", "response_parts", "events", "tool_calls",
             "intermediate_responses", "duration", "expected", "rubrics", "app_details")
EXPECTED_KEYS = ("response", "response_parts", "tool_calls", "intermediate_responses", "events")
USAGE_COUNTS = ("prompt_token_count", "candidates_token_count", "thoughts_token_count",
                "tool_use_prompt_token_count", "cached_content_token_count", "total_token_count")


class TraceError(ValueError):
    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(reason)


@functools.lru_cache(maxsize=4096)
def camel_case(snake: str) -> str:
    """A snake_case key's camelCase spelling, by pydantic's to_camel: the alias generator of ADK's and
    google-genai's models, which accept either spelling. evalbeam's one snake/camel key helper (get_key)."""
    return to_camel(snake)


def get_key(obj: Mapping[str, Any], snake: str, default: Any = None) -> Any:
    """A key given in snake_case or camelCase (ADK and google-genai accept both)."""
    if snake in obj:
        return obj[snake]
    return obj.get(camel_case(snake), default)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object, got {value_kind(value)}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, got {value_kind(value)}")
    return value


def _text_or_none(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {value_kind(value)}")
    return value


def _function_call(value: Any, where: str) -> dict[str, Any]:
    call = _object(value, where)
    name = get_key(call, "name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where} needs a non-empty string 'name'")
    out: dict[str, Any] = {"name": name}
    args = get_key(call, "args")
    if args is not None:
        out["args"] = _object(args, f"{where}.args")
    call_id = get_key(call, "id")
    if call_id is not None:
        out["id"] = _text_or_none(call_id, f"{where}.id")
    return out


def _function_response(value: Any, where: str) -> dict[str, Any]:
    response = _object(value, where)
    out: dict[str, Any] = {}
    for key in ("name", "id"):
        if get_key(response, key) is not None:
            out[key] = _text_or_none(get_key(response, key), f"{where}.{key}")
    if get_key(response, "response") is not None:
        out["response"] = _object(get_key(response, "response"), f"{where}.response")
    return out


def content_parts(content: Any, where: str) -> list[dict[str, Any]]:
    """The parts of a google-genai Content (snake_case or camelCase keys) that
    evaluation reads: text, function calls, function responses. Other parts
    (inline data, code execution...) are left out."""
    if content is None:
        return []
    content = _object(content, where)
    parts = get_key(content, "parts")
    if parts is None:
        return []
    out = []
    for i, part in enumerate(_list(parts, f"{where}.parts")):
        part = _object(part, f"{where}.parts[{i}]")
        kept: dict[str, Any] = {}
        text = _text_or_none(get_key(part, "text"), f"{where}.parts[{i}].text")
        if text is not None:
            kept["text"] = text
            if get_key(part, "thought"):
                kept["thought"] = True
        if get_key(part, "function_call") is not None:
            kept["function_call"] = _function_call(get_key(part, "function_call"), f"{where}.parts[{i}].function_call")
        if get_key(part, "function_response") is not None:
            kept["function_response"] = _function_response(
                get_key(part, "function_response"), f"{where}.parts[{i}].function_response")
        if kept:
            out.append(kept)
    return out


def parts_text(parts: list[dict[str, Any]]) -> str:
    """ADK's text of a content: the non-empty text parts joined with a newline."""
    return "\n".join(p["text"] for p in parts if p.get("text"))


def content_text(content: Any, where: str) -> str:
    return parts_text(content_parts(content, where))


def text_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The non-empty text parts ({text, thought}) of a content, where one text would lose them:
    several parts, or a thought; else None."""
    texts = [{k: p[k] for k in ("text", "thought") if k in p} for p in parts if p.get("text")]
    return texts if len(texts) > 1 or any(p.get("thought") for p in texts) else None


def _with_parts(out: dict[str, Any], key: str, parts: list[dict[str, Any]]) -> None:
    kept = text_parts(parts)
    if kept is not None:
        out[f"{key}_parts"] = kept


def _usage(value: Any, where: str) -> dict[str, int]:
    usage = _object(value, where)
    out = {}
    for key in USAGE_COUNTS:
        count = get_key(usage, key)
        if count is None:
            continue
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(f"{where}.{key} must be an integer, got {value_kind(count)}")
        out[key] = count
    return out


def _event(value: Any, where: str) -> dict[str, Any]:
    """An ADK InvocationEvent, or a Vertex Event/AgentEvent: {author, content, ...}."""
    event = _object(value, where)
    author = get_key(event, "author")
    if not isinstance(author, str):
        raise ValueError(f"{where} needs a string 'author'")
    out: dict[str, Any] = {"author": author, "parts": content_parts(get_key(event, "content"), f"{where}.content")}
    if get_key(event, "usage_metadata") is not None:
        out["usage"] = _usage(get_key(event, "usage_metadata"), f"{where}.usage_metadata")
    if get_key(event, "model_version") is not None:
        out["model_version"] = _text_or_none(get_key(event, "model_version"), f"{where}.model_version")
    if get_key(event, "grounding_metadata") is not None:
        out["grounding_metadata"] = _object(get_key(event, "grounding_metadata"), f"{where}.grounding_metadata")
    return out


def rubrics_of(value: Any, where: str) -> list[dict[str, Any]]:
    """ADK Rubrics (snake_case or camelCase keys) in snake_case."""
    rubrics = []
    for i, rubric in enumerate(_list(value, where)):
        rubric = _object(rubric, f"{where}[{i}]")
        rubric_id = get_key(rubric, "rubric_id")
        content = _object(get_key(rubric, "rubric_content"), f"{where}[{i}].rubric_content")
        text = get_key(content, "text_property")
        if not isinstance(rubric_id, str) or not isinstance(text, str):
            raise ValueError(f"{where}[{i}] needs a string rubric_id and rubric_content.text_property")
        out: dict[str, Any] = {"rubric_id": rubric_id, "rubric_content": {"text_property": text}}
        for key in ("description", "type"):
            if get_key(rubric, key) is not None:
                out[key] = _text_or_none(get_key(rubric, key), f"{where}[{i}].{key}")
        rubrics.append(out)
    return rubrics


def add_rubrics(turn: dict[str, Any], rubrics: list[dict[str, Any]]) -> None:
    """Add rubrics to a turn, skipping ids it has (as ADK copies case rubrics onto invocations)."""
    have = {r["rubric_id"] for r in turn.get("rubrics", [])}
    new = [r for r in rubrics if r["rubric_id"] not in have]
    if new:
        turn["rubrics"] = turn.get("rubrics", []) + new


def _call_from_parts(call: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"tool_name": call["name"]}
    if "args" in call:
        out["tool_input"] = call["args"]
    if "id" in call:
        out["id"] = call["id"]
    return out


def _with_responses(calls: list[dict[str, Any]], responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each call with the response of the same call id, as ADK's
    get_all_tool_calls_with_responses pairs them (the last response of an id wins)."""
    by_id = {r.get("id"): r for r in responses}
    for call in calls:
        response = by_id.get(call.get("id"))
        if response is not None and "response" in response:
            call["response"] = response["response"]
    return calls


def side_from_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """tool_calls and intermediate_responses of canonical events."""
    calls, responses, texts = [], [], []
    for event in events:
        for part in event["parts"]:
            if "function_call" in part:
                calls.append(_call_from_parts(part["function_call"]))
            if "function_response" in part:
                responses.append(part["function_response"])
        text = parts_text(event["parts"])
        if text:
            texts.append({"author": event["author"], "text": text})
    return {"tool_calls": _with_responses(calls, responses), "intermediate_responses": texts}


def _adk_side(invocation: dict[str, Any], where: str) -> dict[str, Any]:
    """One side (actual or expected) of an ADK Invocation, both intermediate_data shapes."""
    final = content_parts(get_key(invocation, "final_response"), f"{where}.final_response")
    side: dict[str, Any] = {"response": parts_text(final)}
    _with_parts(side, "response", final)
    data = get_key(invocation, "intermediate_data")
    if data is None:
        side.update(tool_calls=[], intermediate_responses=[])
    else:
        data = _object(data, f"{where}.intermediate_data")
        if get_key(data, "invocation_events") is not None or not any(
                get_key(data, k) is not None for k in ("tool_uses", "tool_responses", "intermediate_responses")):
            raw_events = get_key(data, "invocation_events", [])
            events = [_event(e, f"{where}.intermediate_data.invocation_events[{i}]")
                      for i, e in enumerate(_list(raw_events, f"{where}.intermediate_data.invocation_events"))]
            side["events"] = events
            side.update(side_from_events(events))
        else:  # the legacy shape {tool_uses, tool_responses, intermediate_responses}
            base = f"{where}.intermediate_data"
            calls = [_call_from_parts(_function_call(c, f"{base}.tool_uses[{i}]"))
                     for i, c in enumerate(_list(get_key(data, "tool_uses", []), f"{base}.tool_uses"))]
            responses = [_function_response(r, f"{base}.tool_responses[{i}]")
                         for i, r in enumerate(_list(get_key(data, "tool_responses", []), f"{base}.tool_responses"))]
            texts = []
            for i, item in enumerate(_list(get_key(data, "intermediate_responses", []), f"{base}.intermediate_responses")):
                if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
                    raise ValueError(f"{base}.intermediate_responses[{i}] must be [author, [parts]]")
                text = content_text({"parts": item[1]}, f"{base}.intermediate_responses[{i}]")
                if text:
                    texts.append({"author": item[0], "text": text})
            side.update(tool_calls=_with_responses(calls, responses), intermediate_responses=texts)
    duration = {}
    for key, name in (("duration", "total"), ("model_duration", "model"), ("tool_duration", "tool")):
        seconds = get_key(invocation, key)
        if seconds is not None:
            duration[name] = as_number(seconds)
    if duration:
        side["duration"] = duration
    return side


def turn_from_adk(actual: dict[str, Any] | None, expected: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """A turn from an ADK actual Invocation and/or expected Invocation (JSON objects)."""
    source = actual if actual is not None else expected
    source = _object(source, where)
    user_content = get_key(source, "user_content")
    if user_content is None:
        raise ValueError(f"{where} has no user_content")
    turn: dict[str, Any] = {}
    invocation_id = get_key(source, "invocation_id")
    if invocation_id:
        turn["invocation_id"] = _text_or_none(invocation_id, f"{where}.invocation_id")
    prompt = content_parts(user_content, f"{where}.user_content")
    turn["prompt"] = parts_text(prompt)
    _with_parts(turn, "prompt", prompt)
    if actual is not None:
        side = _adk_side(actual, where)
        turn.update(side)
    if expected is not None:
        expected_where = where if actual is None else f"{where} (expected)"
        side = _adk_side(_object(expected, expected_where), expected_where)
        side.pop("duration", None)
        turn["expected"] = side
    for invocation in (actual, expected):
        if invocation is not None and get_key(invocation, "rubrics") is not None:
            add_rubrics(turn, rubrics_of(get_key(invocation, "rubrics"), f"{where}.rubrics"))
    app_details = get_key(source, "app_details")
    if app_details is not None:
        turn["app_details"] = _object(app_details, f"{where}.app_details")
    return turn


def _canonical_calls(value: Any, where: str) -> list[dict[str, Any]]:
    calls = []
    for i, call in enumerate(_list(value, where)):
        call = _object(call, f"{where}[{i}]")
        name = call.get("tool_name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}[{i}] needs a non-empty string 'tool_name'")
        out: dict[str, Any] = {"tool_name": name}
        if call.get("tool_input") is not None:
            out["tool_input"] = _object(call["tool_input"], f"{where}[{i}].tool_input")
        if call.get("id") is not None:
            out["id"] = _text_or_none(call["id"], f"{where}[{i}].id")
        if "response" in call:
            out["response"] = call["response"]
        calls.append(out)
    return calls


def _canonical_side(turn: dict[str, Any], where: str, expected: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if turn.get("response") is not None:
        out["response"] = _text_or_none(turn["response"], f"{where}.response")
    _canonical_parts(turn, out, "response", where)
    if turn.get("events") is not None:
        out["events"] = [_canonical_event(e, f"{where}.events[{i}]") for i, e in enumerate(_list(turn["events"], f"{where}.events"))]
    if turn.get("tool_calls") is not None:
        out["tool_calls"] = _canonical_calls(turn["tool_calls"], f"{where}.tool_calls")
    elif "events" in out:
        out["tool_calls"] = side_from_events(out["events"])["tool_calls"]
    elif expected:
        out["tool_calls"] = []
    if turn.get("intermediate_responses") is not None:
        texts = []
        for i, item in enumerate(_list(turn["intermediate_responses"], f"{where}.intermediate_responses")):
            item = _object(item, f"{where}.intermediate_responses[{i}]")
            if not isinstance(item.get("author"), str) or not isinstance(item.get("text"), str):
                raise ValueError(f"{where}.intermediate_responses[{i}] needs string 'author' and 'text'")
            texts.append({"author": item["author"], "text": item["text"]})
        out["intermediate_responses"] = texts
    elif "events" in out:
        out["intermediate_responses"] = side_from_events(out["events"])["intermediate_responses"]
    return out


def _canonical_parts(turn: dict[str, Any], out: dict[str, Any], key: str, where: str) -> None:
    """`prompt_parts`/`response_parts`: text parts whose new-line join must be the text beside them."""
    if turn.get(f"{key}_parts") is None:
        return
    parts = [p for p in content_parts({"parts": turn[f"{key}_parts"]}, f"{where}.{key}_parts") if "text" in p]
    if parts_text(parts) != (out.get(key) or ""):
        raise ValueError(f"{where}.{key}_parts must join (with a new line) into its {key!r}")
    _with_parts(out, key, parts)


def _canonical_event(value: Any, where: str) -> dict[str, Any]:
    event = _object(value, where)
    if "parts" not in event:  # an ADK or Vertex event, with content
        return _event(event, where)
    if not isinstance(event.get("author"), str):
        raise ValueError(f"{where} needs a string 'author'")
    out: dict[str, Any] = {"author": event["author"], "parts": content_parts({"parts": event["parts"]}, where)}
    if event.get("usage") is not None:
        out["usage"] = _usage(event["usage"], f"{where}.usage")
    if event.get("model_version") is not None:
        out["model_version"] = _text_or_none(event["model_version"], f"{where}.model_version")
    if event.get("grounding_metadata") is not None:
        out["grounding_metadata"] = _object(event["grounding_metadata"], f"{where}.grounding_metadata")
    return out


def _turn(value: Any, i: int) -> dict[str, Any]:
    where = f"item {i}"
    turn = _object(value, where)
    if get_key(turn, "user_content") is not None:  # an ADK Invocation as ADK writes it
        return turn_from_adk(turn, None, where)
    old = [k for k in ("reference", "predicted_trajectory", "reference_trajectory") if k in turn]
    new = [k for k in ("events", "tool_calls", "intermediate_responses", "duration", "expected") if k in turn]
    if old and new:
        raise ValueError(f"{where} mixes the flat keys {old} with the trace keys {new}")
    if not new:  # the flat form {prompt, response, reference, predicted_trajectory, reference_trajectory}
        unknown = set(turn) - set(INVOCATION_KEYS) - {"invocation_id"}
        if unknown:
            raise ValueError(f"{where} has unknown keys {sorted(unknown)}; allowed: {list(TURN_KEYS)} "
                             f"or the flat {list(INVOCATION_KEYS)}")
        out: dict[str, Any] = {}
        for key in ("invocation_id", "prompt", "response"):
            if turn.get(key) is not None:
                out[key] = _text_or_none(turn[key], f"{where} '{key}'")
        calls = {}
        for key in TRAJECTORY_FIELDS:
            try:
                calls[key] = parse_trajectory(turn[key]) if turn.get(key) is not None else []
            except CallFormatError as e:
                raise ValueError(f"{where} '{key}' {e}") from None
        out["tool_calls"] = calls["predicted_trajectory"]
        out["expected"] = {"tool_calls": calls["reference_trajectory"]}
        if turn.get("reference") is not None:
            out["expected"]["response"] = _text_or_none(turn["reference"], f"{where} 'reference'")
        return out
    unknown = set(turn) - set(TURN_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown keys {sorted(unknown)}; allowed: {list(TURN_KEYS)}")
    out = {}
    for key in ("invocation_id", "prompt"):
        if turn.get(key) is not None:
            out[key] = _text_or_none(turn[key], f"{where}.{key}")
    _canonical_parts(turn, out, "prompt", where)
    out.update(_canonical_side(turn, where, expected=False))
    if turn.get("rubrics") is not None:
        out["rubrics"] = rubrics_of(turn["rubrics"], f"{where}.rubrics")
    if turn.get("app_details") is not None:
        out["app_details"] = _object(turn["app_details"], f"{where}.app_details")
    if turn.get("duration") is not None:
        duration = _object(turn["duration"], f"{where}.duration")
        out["duration"] = {k: as_number(v) for k, v in duration.items() if k in ("total", "model", "tool") and v is not None}
    if turn.get("expected") is not None:
        expected = _object(turn["expected"], f"{where}.expected")
        unknown = set(expected) - set(EXPECTED_KEYS)
        if unknown:
            raise ValueError(f"{where}.expected has unknown keys {sorted(unknown)}; allowed: {list(EXPECTED_KEYS)}")
        out["expected"] = _canonical_side(expected, f"{where}.expected", expected=True)
    return out


def parse_turns(value: Any) -> list[dict[str, Any]]:
    """The `invocations` field: a list of turns in the trace form above, the
    older flat form, or ADK Invocation objects; returned in the trace form."""
    if not isinstance(value, list):
        raise ValueError(f"must be a list of invocations, got {value_kind(value)}")
    return [_turn(item, i) for i, item in enumerate(value)]


def turns_from_agent_data(value: Any) -> list[dict[str, Any]]:
    """Vertex AI's AgentData {agents, turns: [{turn_index, turn_id, events: [{author, content}]}]}.
    Per turn: the user's events give the prompt; the last agent event with text
    and no function call is the final response (and leaves the events, as in
    ADK's projection of session events into invocations); the rest are the events."""
    data = _object(structured_value(value), "agent_data")
    turns = []
    for i, raw in enumerate(_list(get_key(data, "turns", []), "turns")):
        raw = _object(raw, f"turns[{i}]")
        events = [_event(e, f"turns[{i}].events[{j}]") for j, e in enumerate(_list(get_key(raw, "events", []), f"turns[{i}].events"))]
        user = [e for e in events if e["author"] == "user"]
        agent = [e for e in events if e["author"] != "user"]
        final = None
        for event in reversed(agent):
            if parts_text(event["parts"]) and not any("function_call" in p or "function_response" in p for p in event["parts"]):
                final = event
                break
        turn: dict[str, Any] = {}
        turn_id = get_key(raw, "turn_id")
        if turn_id is not None:
            turn["invocation_id"] = str(turn_id)
        turn["prompt"] = "\n".join(t for t in (parts_text(e["parts"]) for e in user) if t)
        turn["response"] = parts_text(final["parts"]) if final is not None else ""
        rest = [e for e in agent if e is not final]
        turn["events"] = rest
        turn.update(side_from_events(rest))
        turns.append(turn)
    if not turns:
        raise ValueError("has no turns")
    return turns


def turn_from_events(prompt: str, events: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """One turn from the ADK events an agent produced for its prompt, taking `seconds`, as
    metrics.agents.inference.AgentInferrer makes it (the deployed agents' clients give the same)."""
    user = {"author": "user", "content": {"role": "user", "parts": [{"text": prompt}]}}
    turn = turns_from_agent_data({"turns": [{"events": [user, *events]}]})[0]
    invocation = next((e.get("invocation_id") for e in events if e.get("invocation_id")), None)
    if invocation:
        turn["invocation_id"] = invocation
    turn["duration"] = {"total": seconds}
    return turn


def _flat_expected(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    if fields.get("reference") is None and fields.get("reference_trajectory") is None:
        return None
    expected: dict[str, Any] = {"tool_calls": [dict(c) for c in fields.get("reference_trajectory") or []]}
    if fields.get("reference") is not None:
        expected["response"] = fields["reference"]
    return expected


def complete_agent_fields(fields: dict[str, Any]) -> None:
    """Build the trace from Vertex's `agent_data` or `intermediate_events` where
    no `invocations` are given, and fill the flat fields a trace implies:
    `predicted_trajectory` (every actual tool call in order), `reference_trajectory`
    (every expected one), and for a one-turn case `prompt`, `response`, `reference`."""
    if "invocations" not in fields:
        if "agent_data" in fields:
            try:
                turns = turns_from_agent_data(fields["agent_data"])
            except ValueError as e:
                raise TraceError("agent_data", str(e)) from None
            if len(turns) == 1 and (expected := _flat_expected(fields)) is not None:
                turns[0]["expected"] = expected
        elif isinstance(fields.get("intermediate_events"), list):
            try:
                events = [_event(e, f"item {i}") for i, e in enumerate(fields["intermediate_events"])]
            except ValueError:
                # not Vertex events: the column stays the JSON value it is, with no trace
                # (a metric needing `invocations` then names the field missing)
                return
            turn: dict[str, Any] = {"prompt": fields.get("prompt"), "response": fields.get("response"),
                                    "events": events, **side_from_events(events)}
            if (expected := _flat_expected(fields)) is not None:
                turn["expected"] = expected
            turns = [{k: v for k, v in turn.items() if v is not None}]
        else:
            return
        fields["invocations"] = turns
    turns = fields["invocations"]
    if "predicted_trajectory" not in fields and any("tool_calls" in t for t in turns):
        fields["predicted_trajectory"] = [
            {"tool_name": c["tool_name"], "tool_input": c.get("tool_input") or {}}
            for t in turns for c in t.get("tool_calls", [])]
    if "reference_trajectory" not in fields and any("expected" in t for t in turns):
        fields["reference_trajectory"] = [
            {"tool_name": c["tool_name"], "tool_input": c.get("tool_input") or {}}
            for t in turns for c in t.get("expected", {}).get("tool_calls", [])]
    if len(turns) == 1:
        turn = turns[0]
        for field, value in (("prompt", turn.get("prompt")), ("response", turn.get("response")),
                             ("reference", turn.get("expected", {}).get("response"))):
            if field not in fields and value is not None:
                fields[field] = value


def trace_of(fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The turns of an instance: its `invocations`, else the flat row as one turn."""
    if "invocations" in fields:
        return fields["invocations"]
    turn: dict[str, Any] = {"tool_calls": [dict(c) for c in fields.get("predicted_trajectory") or []]}
    for key in ("prompt", "response"):
        if fields.get(key) is not None:
            turn[key] = fields[key]
    expected = _flat_expected(fields)
    if expected is not None:
        turn["expected"] = expected
    return [turn]
