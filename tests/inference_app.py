"""Real functions and a real ADK agent's tools that tests/transforms/test_inference.py runs
as `inference.function` / `inference.agent` (imported by the evalbeam command
from tests/, as a user's package would be)."""
from __future__ import annotations

import re
import time

CITIES = {"paris": 25, "oslo": -3, "lima": 19}


def get_weather(city: str) -> dict:
    """The temperature in a city, in Celsius."""
    if city.lower() not in CITIES:
        return {"error": f"unknown city {city}"}
    return {"city": city, "celsius": CITIES[city.lower()]}


def convert(celsius: int) -> dict:
    """Celsius to Fahrenheit."""
    return {"fahrenheit": celsius * 9 / 5 + 32}


def answer(fields: dict) -> dict:
    """A one-turn 'app': the prompt upper-cased, a tool call per known city named
    in it; `boom` raises, `slow` sleeps longer than the configured timeout."""
    prompt = fields["prompt"]
    if "boom" in prompt:
        raise RuntimeError(f"the app broke on {prompt!r}")
    if "slow" in prompt:
        time.sleep(5)
    cities = [w.strip("?,.") for w in prompt.split() if w.strip("?,.").lower() in CITIES]
    return {"response": prompt.upper(),
            "predicted_trajectory": [{"tool_name": "get_weather", "tool_input": {"city": c}} for c in cities]}


def weather_agent(fields: dict) -> list:
    """A multi-turn 'agent' as a plain function: for each user turn in order, the
    weather tool for each city named, then the temperatures as its answer. The
    session state (ADK session_input) gives the unit."""
    unit = ((fields.get("adk_case") or {}).get("session_input") or {}).get("state", {}).get("unit", "C")
    turns = []
    for turn in fields["invocations"]:
        prompt = turn["prompt"]
        cities = [w.strip("?,.") for w in prompt.split() if w.strip("?,.").lower() in CITIES]
        calls, texts = [], []
        for i, city in enumerate(cities):
            result = get_weather(city)
            calls.append({"tool_name": "get_weather", "tool_input": {"city": city}, "id": f"c{i}", "response": result})
            value = result["celsius"] if unit == "C" else convert(result["celsius"])["fahrenheit"]
            texts.append(f"{city} {value:g}{unit}")
        turns.append({"response": ", ".join(texts) or "no city", "tool_calls": calls,
                      "duration": {"total": 0.01 * (len(calls) + 1)}})
    return turns


def right_in_early_runs(fields: dict, run: int) -> str:
    """An app that learns which run it is (the `run` keyword): the reference in the
    runs numbered up to the prompt's `#right=N`, a wrong answer in the others; the
    run in `#boom=K` raises."""
    prompt = fields["prompt"]
    marker = re.search(r"#boom=(\d+)", prompt)
    if marker and int(marker.group(1)) == run:
        raise RuntimeError(f"run {run} broke")
    right = int(re.search(r"#right=(\d+)", prompt).group(1))
    return fields["reference"] if run <= right else f"wrong in run {run}"


def run_named(fields: dict, run: int = 0) -> str:
    return f"run {run}"


async def run_named_async(fields: dict, *, run: int) -> str:
    return f"async run {run}"


def run_in_kwargs(fields: dict, **options) -> str:
    return f"options {sorted(options.items())}"
