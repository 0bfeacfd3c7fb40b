"""Run inside the ADK reference venv (.adk/bin/python): ADK 2.13's own evaluation generator runs an
agent against its user simulator on the conversation_scenario cases of an eval set, for
tests/transforms/test_simulator.py.

    simulated_conversations.py AGENT_MODULE EVAL_SET.json TEST_CONFIG.json
stdout: {eval_id: [{"prompt", "response", "tool_calls": [[name, args]]}] | {"error": ...}}

The agent's and the simulator's models are the local server (tests/servers/judge_server.py): the agent's
through its module ($EVALBEAM_TEST_MODEL_URL), the simulator's through google-genai's
$GOOGLE_GEMINI_BASE_URL (ADK builds the simulator's Gemini with no base_url).
"""
import asyncio
import importlib
import json
import sys

from google.adk.evaluation.eval_case import get_all_tool_calls
from google.adk.evaluation.eval_config import EvalConfig
from google.adk.evaluation.eval_set import EvalSet
from google.adk.evaluation.evaluation_generator import EvaluationGenerator
from google.adk.evaluation.simulation.user_simulator_provider import UserSimulatorProvider


def text_of(content):
    if content is None or not content.parts:
        return ""
    return "\n".join(p.text for p in content.parts if p.text)


async def main():
    module, attribute = sys.argv[1].split(":")
    agent = getattr(importlib.import_module(module), attribute)
    eval_set = EvalSet.model_validate_json(open(sys.argv[2]).read())
    config = EvalConfig.model_validate_json(open(sys.argv[3]).read())
    out = {}
    for case in eval_set.eval_cases:
        if case.conversation_scenario is None:
            continue
        simulator = UserSimulatorProvider(user_simulator_config=config.user_simulator_config).provide(case)
        try:
            invocations = await EvaluationGenerator._generate_inferences_from_root_agent(
                agent, user_simulator=simulator, initial_session=case.session_input)
        except Exception as e:  # noqa: BLE001 - the case's failure is the reference's answer
            out[case.eval_id] = {"error": f"{type(e).__name__}: {e}"}
            continue
        out[case.eval_id] = [{
            "prompt": text_of(inv.user_content),
            "response": text_of(inv.final_response),
            "tool_calls": [[c.name, c.args] for c in get_all_tool_calls(inv.intermediate_data)],
        } for inv in invocations]
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
