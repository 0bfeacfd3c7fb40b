"""An A2A stream as ADK events (metrics/agents/a2a_events.py): the answers of ADK's agents and of plain A2A
agents, and the task states a turn's stream may end in."""
from __future__ import annotations

import pytest

from evalbeam.metrics.agents.a2a_events import events_from_a2a
from evalbeam.metrics.agents.inference import InferenceError
from tests.servers.a2a_raw import agent_message


def test_a2a_stream_of_a_plain_agent():
    """An A2A agent that is not ADK's: no adk_* metadata, the answer in a message or in its task's artifacts."""
    message = [{"message": {"contextId": "c1", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}}]
    events, context = events_from_a2a(message, "plain")
    assert context == "c1" and events == [{"author": "plain", "content": {"role": "model", "parts": [{"text": "hi"}]}}]
    task = [{"task": {"contextId": "c2", "status": {"state": "TASK_STATE_COMPLETED"},
                      "artifacts": [{"parts": [{"text": "from the artifact"}]}]}}]
    events, context = events_from_a2a(task, "plain")
    assert context == "c2" and events[0]["content"]["parts"] == [{"text": "from the artifact"}]
    failed = [{"statusUpdate": {"contextId": "c3", "status": {"state": "TASK_STATE_FAILED", "message": {
        "role": "ROLE_AGENT", "parts": [{"text": "boom"}]}}}}]
    with pytest.raises(Exception, match="TASK_STATE_FAILED: boom"):
        events_from_a2a(failed, "plain")


@pytest.mark.parametrize("state, ok", [
    ("TASK_STATE_COMPLETED", True), ("TASK_STATE_INPUT_REQUIRED", True), ("TASK_STATE_AUTH_REQUIRED", True),
    ("TASK_STATE_FAILED", False), ("TASK_STATE_REJECTED", False), ("TASK_STATE_CANCELED", False),
    ("TASK_STATE_WORKING", False), ("TASK_STATE_SUBMITTED", False), (None, False)])
def test_a2a_final_task_states(state, ok):
    """Which state a turn's stream may end in: finished or deliberately paused (input/auth required) is an
    answer; failed, rejected, canceled, or not finished is the case's error."""
    stream = [{"task": {"id": "t", "contextId": "c", "status": {"state": state, "message": {
        "role": "ROLE_AGENT", "parts": [{"text": "said"}]}} if state else {}}}]
    if ok:
        events, context = events_from_a2a(stream, "a")
        assert context == "c" and events[0]["content"]["parts"] == [{"text": "said"}]
    else:
        with pytest.raises(InferenceError):
            events_from_a2a(stream, "a")
    # a message is a whole answer by itself
    assert events_from_a2a([agent_message("hi")], "a")[0][0]["content"]["parts"] == [{"text": "hi"}]
