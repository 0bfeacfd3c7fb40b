"""Run inside the ADK reference venv (.adk/bin/python): google-adk 2.13.0's user simulator pieces
on the cases of a request file, for tests/metrics/agents/test_simulator.py.

request: {"renders": [{plan, history, custom, persona (id | object | null)}],
          "summaries": [{events: [Event JSON], include_function_calls}],
          "customs": [custom_instructions texts],
          "runs": [{scenario, config, answers: [model texts], agent: [agent texts]}]}
stdout:  {"templates": {default, persona}, "personas": {id: UserPersona JSON},
          "renders": [text | {"error"}], "summaries": [text], "customs": [true | error text],
          "runs": [{"messages": [...], "status": str} | {"error"}]}
"""
import asyncio
import json
import sys

from google.adk.evaluation.conversation_scenarios import ConversationScenario
from google.adk.evaluation.simulation import llm_backed_user_simulator as llm_module
from google.adk.evaluation.simulation import llm_backed_user_simulator_prompts as prompts
from google.adk.evaluation.simulation import per_turn_user_simulator_quality_prompts as quality_prompts
from google.adk.evaluation.simulation.llm_backed_user_simulator import (
    LlmBackedUserSimulator,
    LlmBackedUserSimulatorConfig,
)
from google.adk.evaluation.simulation.pre_built_personas import get_default_persona_registry
from google.adk.evaluation.simulation.user_simulator_personas import UserPersona
from google.adk.events.event import Event
from google.adk.models.llm_response import LlmResponse
from google.genai import types


def persona_of(value):
    if value is None:
        return None
    if isinstance(value, str):
        return get_default_persona_registry().get_persona(value)
    return UserPersona.model_validate(value)


def render(case):
    try:
        return prompts.get_llm_backed_user_simulator_prompt(
            conversation_plan=case["plan"], conversation_history=case["history"], stop_signal="</finished>",
            custom_instructions=case["custom"], user_persona=persona_of(case["persona"]))
    except Exception as e:  # noqa: BLE001 - the refusal is the reference's answer
        return {"error": f"{type(e).__name__}"}


def custom(text):
    try:
        LlmBackedUserSimulatorConfig(custom_instructions=text)
        return True
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


class ScriptedLlm:
    """The simulator's model: answers from a script (no network); records the prompts."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.prompts = []

    async def generate_content_async(self, request, stream=False):
        self.prompts.append(request.contents[0].parts[0].text)
        text = self.answers.pop(0)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)] if text else []))


async def run(case):
    """get_next_user_message driven as EvaluationGenerator drives it, the agent's answers scripted."""
    scenario = ConversationScenario.model_validate(case["scenario"])
    config = LlmBackedUserSimulatorConfig.model_validate(case["config"])
    simulator = LlmBackedUserSimulator(config=config, conversation_scenario=scenario)
    llm = ScriptedLlm(case["answers"])
    simulator._llm = llm
    agent = list(case["agent"])
    events, messages = [], []
    try:
        while True:
            nxt = await simulator.get_next_user_message(list(events))
            if nxt.status.value != "success":
                return {"messages": messages, "status": nxt.status.value, "prompts": llm.prompts}
            text = nxt.user_message.parts[0].text
            messages.append(text)
            events.append(Event(author="user", content=nxt.user_message))
            events.append(Event(author="helper_agent",
                                content=types.Content(role="model", parts=[types.Part(text=agent.pop(0))])))
    except RuntimeError as e:
        return {"messages": messages, "error": str(e), "prompts": llm.prompts}


async def quality(case):
    """PerTurnUserSimulatorQualityV1.evaluate_invocations on the case's turns, its LLM scripted."""
    from google.adk.evaluation.eval_case import Invocation
    from google.adk.evaluation.eval_metrics import EvalMetric, LlmBackedUserSimulatorCriterion
    from google.adk.evaluation.simulation.per_turn_user_simulator_quality_v1 import PerTurnUserSimulatorQualityV1

    criterion = LlmBackedUserSimulatorCriterion(threshold=case["threshold"], stop_signal=case["stop_signal"],
                                                judge_model_options={"num_samples": case["num_samples"]})
    evaluator = PerTurnUserSimulatorQualityV1(EvalMetric(metric_name="per_turn_user_simulator_quality_v1",
                                                         threshold=case["threshold"], criterion=criterion))
    llm = ScriptedLlm(case["answers"])
    evaluator._llm = llm
    invocations = [Invocation(
        user_content=types.Content(role="user", parts=[types.Part(text=t["prompt"])]),
        final_response=types.Content(role="model", parts=[types.Part(text=t["response"])]) if t["response"] else None)
        for t in case["turns"]]
    try:
        result = await evaluator.evaluate_invocations(
            invocations, None, ConversationScenario.model_validate(case["scenario"]))
    except Exception as e:  # noqa: BLE001
        return {"error": type(e).__name__, "prompts": llm.prompts}
    return {"score": result.overall_score, "status": result.overall_eval_status.name,
            "per_turn": [r.score for r in result.per_invocation_results], "prompts": llm.prompts}


def main():
    request = json.loads(open(sys.argv[1]).read())
    out = {
        "templates": {"default": prompts._DEFAULT_USER_SIMULATOR_INSTRUCTIONS_TEMPLATE,
                      "persona": prompts._USER_SIMULATOR_INSTRUCTIONS_WITH_PERSONA_TEMPLATE},
        "stop_signal": llm_module._STOP_SIGNAL,
        "personas": {p.id: p.model_dump(mode="json")
                     for p in get_default_persona_registry().get_registered_personas()},
        "renders": [render(c) for c in request["renders"]],
        "summaries": [LlmBackedUserSimulator._summarize_conversation(
            [Event.model_validate(e) for e in c["events"]], c["include_function_calls"]) for c in request["summaries"]],
        "customs": [custom(t) for t in request["customs"]],
        "runs": [asyncio.run(run(c)) for c in request["runs"]],
        "quality": [asyncio.run(quality(c)) for c in request.get("quality", [])],
        "quality_templates": [quality_prompts._LATEST_TURN_USER_SIMULATOR_EVALUATOR_PROMPT_TEMPLATE,
                              quality_prompts._LATEST_TURN_USER_SIMULATOR_WITH_PERSONA_EVALUATOR_PROMPT_TEMPLATE],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
