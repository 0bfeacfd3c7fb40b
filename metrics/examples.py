"""Example custom metrics, and a demo inference function, importable by path from a
config (see configs/demo.yaml, configs/demo_adk_infer.yaml)."""
from __future__ import annotations

import time


def word_count(instance):
    """The seed's example: the number of space-separated words in the response."""
    response = instance["response"]
    return {"word_count": len(response.split(" ")), "characters": len(response)}



WEATHER = {"san francisco": ("foggy", 18), "paris": ("sunny", 25), "london": ("rainy", 12), "berlin": ("cloudy", 9)}


def get_weather(city: str) -> dict:
    """The demo agent's tool: canned weather by city."""
    sky, celsius = WEATHER.get(city.lower(), ("unknown", None))
    return {"city": city, "sky": sky, "celsius": celsius}


def weather_agent(instance):
    """A small pure-Python 'agent' for the inference demo (configs/demo_adk_infer.yaml):
    for each user turn in order, it calls get_weather for the city it names (the one
    of the previous turn when none is named, as a session would remember) and answers
    from the tool's response. Returns the case's turns in evalbeam's trace form."""
    turns, city = [], None
    for turn in instance["invocations"]:
        started = time.perf_counter()
        text = turn["prompt"].lower()
        city = next((c.title() for c in WEATHER if c in text), city)
        if city is None:
            turns.append({"response": "Which city?", "tool_calls": []})
            continue
        result = get_weather(city)
        call = {"tool_name": "get_weather", "tool_input": {"city": city}, "id": f"call-{len(turns)}", "response": result}
        turns.append({"response": f"It is {result['celsius']}C and {result['sky']} in {city}.", "tool_calls": [call],
                      "duration": {"total": time.perf_counter() - started}})
    return turns


def weather_chat(instance):
    """The demo agent under user simulation (configs/example_scenarios.yaml): called once per user
    turn, with `prompt` the new user message and `conversation` the messages so far (the new one
    last); the city is the one the user named last. Returns the turn."""
    started = time.perf_counter()
    said = " ".join(m["text"] for m in instance["conversation"] if m["role"] == "user").lower()
    named = [(said.rfind(c), c) for c in WEATHER if c in said]
    if not named:
        return {"response": "Which city would you like the weather for?", "tool_calls": []}
    city = max(named)[1].title()
    result = get_weather(city)
    call = {"tool_name": "get_weather", "tool_input": {"city": city}, "id": "call-0", "response": result}
    return {"response": f"It is {result['celsius']}C and {result['sky']} in {city}.", "tool_calls": [call],
            "duration": {"total": time.perf_counter() - started}}
