"""Generated ADK eval results covering every rule of the ADK criteria, for the fidelity test.

Deterministic (seeded). The cases are valid ADK 2.13 EvalSetResult JSON: what
`adk eval` writes, in snake_case; `camel` turns the schema's keys (never the
keys inside tool arguments or responses) to camelCase.
"""
from __future__ import annotations

import copy
import random

NAMES = ["get_weather", "book_flight", "search"]
# Python equality as ADK compares args: 1 == 1.0 == True, "1" != 1, key order
# ignored, nested values, None apart from {} and from a missing key.
ARGS = [
    None, {}, {"x": 1}, {"x": 1.0}, {"x": True}, {"x": "1"}, {"x": 0}, {"x": False}, {"x": None},
    {"x": 1, "y": "a"}, {"y": "a", "x": 1}, {"x": 1, "y": "a", "z": 2},
    {"x": [1, {"z": 2}]}, {"x": [1.0, {"z": 2.0}]}, {"x": [{"z": 2}, 1]},
    {"city": "San Francisco"}, {"city": "san francisco"}, {"city": "東京"},
]
# Texts for ROUGE-1 with ADK's Unicode-aware tokenizer: stemming, punctuation,
# case, NFKC (fullwidth, ligatures, circled digits), CJK per character, Thai/Lao/
# Khmer/Myanmar per grapheme cluster, other scripts whole, underscores, digits.
TEXTS = [
    "The cats are running", "the cat runs", "It is 18C and foggy in San Francisco.", "18C and foggy",
    "I have set the lamp_2 status to off.", "Lamp 2 is OFF now!", "東京の天気は晴れです", "東京は晴れ",
    "今日はいい天気ですね。", "서울 날씨는 맑음", "서울은 맑아요", "สวัสดีครับ ยินดีต้อนรับ", "สวัสดีค่ะ",
    "ภาษาไทยง่ายนิดเดียว", "ມື້ນີ້ອາກາດດີ", "ខ្ញុំស្រឡាញ់ភាសាខ្មែរ", "မြန်မာစာ", "مرحبا بالعالم", "مرحبا",
    "नमस्ते दुनिया", "नमस्ते", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ", "fullwidth abc", "Café crème brûlée", "cafe creme",
    "Straße GROSS", "strasse gross", "mixed 日本 text running quickly", "numbers 1 2 3 4.5 and 45",
    "Ⅻ ① ﬁnal ligature", "final", "booking flights, booked flight; books!", "book flight",
    "Привет мир, как дела?", "привет", "Γειά σου Κόσμε", "a", "the", "...", "   ",
    "It's 25°C — sunny ☀️ in Paris", "Sunny, 25C.", "über naïve coöperation", "uber naive cooperation",
]


def _call(rng: random.Random) -> dict:
    call = {"name": rng.choice(NAMES)}
    args = rng.choice(ARGS)
    if args is not None:
        call["args"] = copy.deepcopy(args)
    return call


def _variant(rng: random.Random, calls: list[dict]) -> list[dict]:
    """Expected calls related to the actual ones, so that every match type both matches and misses."""
    calls = copy.deepcopy(calls)
    op = rng.randrange(9)
    if op == 0 or not calls:
        return [_call(rng) for _ in range(rng.randrange(4))]
    if op == 1:
        rng.shuffle(calls)
    elif op == 2:
        calls.pop(rng.randrange(len(calls)))
    elif op == 3:
        calls.insert(rng.randrange(len(calls) + 1), _call(rng))
    elif op == 4:  # the same arguments in another type, or absent
        c = rng.choice(calls)
        if rng.random() < 0.3:
            c.pop("args", None)
        else:
            c["args"] = copy.deepcopy(rng.choice(ARGS)) or {}
    elif op == 5:
        calls = [rng.choice(calls)] + calls[: rng.randrange(len(calls) + 1)]
    elif op == 6:
        return []
    return calls  # ops 7, 8: identical


def _content(role: str, texts: list[str]) -> dict:
    return {"role": role, "parts": [{"text": t} for t in texts]}


def _usage(rng: random.Random) -> dict:
    keys = ["prompt_token_count", "candidates_token_count", "thoughts_token_count", "tool_use_prompt_token_count",
            "cached_content_token_count", "total_token_count"]
    return {k: rng.randrange(0, 500) for k in keys if rng.random() < 0.5}


def _intermediate(rng: random.Random, calls: list[dict], shape: str, with_ids: bool) -> dict | None:
    if shape == "none":
        return None
    ids = [f"call_{rng.randrange(10**6)}" if with_ids and rng.random() < 0.8 else None for _ in calls]
    fcs = []
    for call, call_id in zip(calls, ids):
        fc = dict(call)
        if call_id:
            fc["id"] = call_id
        fcs.append(fc)
    responses = []
    for fc in fcs:
        if rng.random() < 0.7:
            r = {"name": fc["name"], "response": {"result": rng.randrange(100)}}
            if "id" in fc:
                r["id"] = fc["id"]
            responses.append(r)
    if shape == "legacy":
        inter = [[rng.choice(["agent", "sub_agent"]), [{"text": rng.choice(TEXTS)}]] for _ in range(rng.randrange(3))]
        return {"tool_uses": fcs, "tool_responses": responses, "intermediate_responses": inter}
    events = []
    pending = list(responses)
    for fc in fcs:
        if rng.random() < 0.3:
            events.append({"author": "agent", "content": _content("model", [rng.choice(TEXTS)])})
        event = {"author": rng.choice(["agent", "sub_agent"]),
                 "content": {"role": "model", "parts": [{"function_call": fc}]}}
        if rng.random() < 0.6:
            event["usage_metadata"] = _usage(rng)
        if rng.random() < 0.4:
            event["model_version"] = rng.choice(["gemini-2.5-flash", "gemini-2.5-pro"])
        events.append(event)
        if pending and rng.random() < 0.8:
            events.append({"author": "agent", "content": {"role": "user",
                                                          "parts": [{"function_response": pending.pop(0)}]}})
    if rng.random() < 0.5:  # the model call that produced the final response
        event = {"author": "agent", "content": None}
        if rng.random() < 0.7:
            event["usage_metadata"] = _usage(rng)
        else:
            event["model_version"] = "gemini-2.5-flash"
        events.append(event)
    return {"invocation_events": events}


def _invocation(rng: random.Random, prompt: str, calls: list[dict], response: list[str] | None, timed: bool) -> dict:
    shape = rng.choice(["events", "events", "legacy"] + (["none"] if not calls else []))
    invocation = {"invocation_id": f"e-{rng.randrange(10**8)}",
                  "user_content": _content("user", [prompt])}
    if response is not None:
        invocation["final_response"] = _content("model", response)
    data = _intermediate(rng, calls, shape, with_ids=True)
    if data is not None:
        invocation["intermediate_data"] = data
    if rng.random() < 0.15:  # carried into the trace for the judge criteria; no rule criterion reads them
        invocation["rubrics"] = [{"rubric_id": f"r{k}", "rubric_content": {"text_property": rng.choice(TEXTS) or "ok"},
                                  "type": "FINAL_RESPONSE_QUALITY"} for k in range(rng.randrange(1, 3))]
    if rng.random() < 0.1:
        invocation["app_details"] = {"agent_details": {"agent": {
            "name": "agent", "instructions": "Answer briefly.",
            "tool_declarations": [{"function_declarations": [{"name": n} for n in NAMES]}]}}}
    if timed and rng.random() < 0.7:
        invocation["duration"] = round(rng.uniform(0.01, 9.0), rng.choice([2, 4, 6]))
        if rng.random() < 0.6:
            invocation["model_duration"] = round(rng.uniform(0, invocation["duration"]), 4)
            invocation["tool_duration"] = round(rng.uniform(0, 1.0), 4)
    return invocation


def _response(rng: random.Random) -> list[str] | None:
    roll = rng.random()
    if roll < 0.08:
        return None
    if roll < 0.12:
        return [""]
    return [rng.choice(TEXTS) for _ in range(rng.choice([1, 1, 1, 2, 3]))]


def case(rng: random.Random, eval_set_id: str, index: int) -> dict:
    n = rng.choice([0, 1, 1, 1, 2, 2, 3]) if rng.random() > 0.03 else 0
    expected_mode = rng.choices(["all", "none", "some"], [0.85, 0.07, 0.08])[0]
    timed = rng.random() < 0.6
    per_invocation = []
    for t in range(n):
        prompt = rng.choice(TEXTS) or "hi"
        actual_calls = [_call(rng) for _ in range(rng.choice([0, 0, 1, 1, 2, 3, 4]))]
        actual_response = _response(rng)
        entry = {"actual_invocation": _invocation(rng, prompt, actual_calls, actual_response, timed),
                 "eval_metric_results": []}
        if expected_mode == "all" or (expected_mode == "some" and t == 0):
            expected_response = (list(actual_response) if actual_response and rng.random() < 0.25
                                  else _response(rng))
            entry["expected_invocation"] = _invocation(rng, prompt, _variant(rng, actual_calls), expected_response,
                                                       False)
        per_invocation.append(entry)
    return {"eval_set_file": eval_set_id, "eval_set_id": eval_set_id, "eval_id": f"case_{index}",
            "final_eval_status": 1, "overall_eval_metric_results": [],
            "eval_metric_result_per_invocation": per_invocation, "session_id": f"session-{rng.randrange(10**9)}",
            "user_id": "eval_user"}


def eval_set_result(seed: int, eval_set_id: str, cases: int) -> dict:
    rng = random.Random(seed)
    return {"eval_set_result_id": f"app_{eval_set_id}_1700000000.0", "eval_set_result_name": f"app_{eval_set_id}",
            "eval_set_id": eval_set_id, "eval_case_results": [case(rng, eval_set_id, i) for i in range(cases)],
            "creation_timestamp": 1700000000.0}


_OPAQUE = {"args", "response", "state"}  # user data: their keys are not the schema's


def camel(value, key: str | None = None):
    """The document with every schema key in camelCase (as ADK and google-genai also accept)."""
    if key in _OPAQUE:
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            head, *rest = k.split("_")
            out[head + "".join(w[:1].upper() + w[1:] for w in rest)] = camel(v, k)
        return out
    if isinstance(value, list):
        return [camel(v, key) for v in value]
    return value


# ADK test_config.json criteria: every match type, spelling, ignore_args, thresholds on both sides.
CONFIGS = [
    {"criteria": {}},
    {"criteria": {"tool_trajectory_avg_score": 1.0, "response_match_score": 0.8}},
    {"criteria": {"tool_trajectory_avg_score": {"threshold": 0.5, "match_type": "IN_ORDER"}, "response_match_score": 0.3}},
    {"criteria": {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "any-order", "ignore_args": True},
                  "response_match_score": {"threshold": 0.0}}},
    {"criteria": {"tool_trajectory_avg_score": {"threshold": 0.6, "matchType": "EXACT", "ignoreArgs": True}}},
    {"criteria": {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "ANY_ORDER"}}},
    {"criteria": {"tool_trajectory_avg_score": {"threshold": 0.0, "match_type": "in order"}}},
    {"criteria": {"response_match_score": 0.5, "tool_trajectory_avg_score": {"threshold": 0.75, "match_type": 1}}},
]


def eval_set_sets(seed: int = 7) -> dict[str, object]:
    """{file name: document} of eval sets in each of ADK's eval set formats."""
    rng = random.Random(seed)
    result = eval_set_result(seed, "sets", 80)
    cases = []
    for case in result["eval_case_results"]:
        conversation = [p["expected_invocation"] for p in case["eval_metric_result_per_invocation"]
                        if "expected_invocation" in p]
        if conversation:
            cases.append({"eval_id": case["eval_id"], "conversation": conversation,
                          "session_input": {"app_name": "app", "user_id": "u", "state": {"k": 1}}})
            if rng.random() < 0.2:
                cases[-1]["rubrics"] = [{"rubric_id": "case_r", "rubric_content": {"text_property": "Polite."}}]
    for i in range(5):
        cases.append({"eval_id": f"simulated_{i}", "conversation_scenario": {
            "starting_prompt": "hi", "conversation_plan": "ask for the weather, then stop"}})
    rng.shuffle(cases)
    camel_cases = [camel(c) if i % 2 else c for i, c in enumerate(cases)]

    def legacy_turn():
        turn = {"query": rng.choice(TEXTS) or "q",
                "expected_tool_use": [{"tool_name": c["name"], "tool_input": c.get("args", {})}
                                      for c in (_call(rng) for _ in range(rng.randrange(3)))]}
        if rng.random() < 0.8:
            turn["reference"] = rng.choice(TEXTS)
        if rng.random() < 0.3:
            turn["expected_intermediate_agent_responses"] = [{"author": "sub", "text": rng.choice(TEXTS)}]
        return turn

    older = [{"name": f"legacy_{i}", "data": [legacy_turn() for _ in range(rng.randrange(1, 4))],
              "initial_session": {"app_name": "app", "user_id": "u", "state": {}}} for i in range(15)]
    return {"generated.evalset.json": {"eval_set_id": "generated", "eval_cases": camel_cases},
            "older_list.json": older,
            "flat_turns.test.json": [legacy_turn() for _ in range(6)]}
