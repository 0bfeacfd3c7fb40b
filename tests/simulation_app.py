"""Function agents for user simulation tests (tests/transforms/test_simulator.py). The
simulator's model is tests/servers/judge_server.py, whose free-text answer is the last `#reply=` marker
of its prompt: these agents put one in each answer, and so script the simulated user's next
message (the conversation history ends the simulator's prompt)."""


def scripted_agent(fields: dict) -> dict | str:
    """Called once per user turn with the conversation so far (the new user message last); a case
    of fixed turns calls it once, with its fields (no conversation)."""
    if "conversation" not in fields:
        return "ok 1 #reply=message 2"
    conversation = fields["conversation"]
    assert conversation[-1] == {"role": "user", "text": fields["prompt"]}
    users = [m for m in conversation if m["role"] == "user"]
    if fields["prompt"].startswith("loop"):
        return "sure #reply=loop more"
    if fields["prompt"].startswith("weather"):
        return {"response": "It is 25C #reply=thanks",
                "tool_calls": [{"tool_name": "get_weather", "tool_input": {"city": "Paris"},
                                "response": {"celsius": 25}}]}
    if fields["prompt"].startswith("thanks"):
        return "bye #reply=</finished>"
    if fields["prompt"].startswith("verify"):  # the verifier (per_turn_user_simulator_quality_v1) reads it too
        return 'fine #reply={"is_valid": true}'
    if fields["prompt"].startswith('{"is_valid"'):
        return "bye #reply=</finished>"
    if fields["prompt"].startswith("break"):
        return "#fail"
    if len(users) < 3:
        return f"ok {len(users)} #reply=message {len(users) + 1}"
    return "all done #reply=</finished>"
