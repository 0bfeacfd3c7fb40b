"""The user simulator of conversation scenarios: google-adk's own, called where it runs.

An ADK eval case may hold a `conversation_scenario` (a starting prompt, a
conversation plan, optionally a persona) instead of fixed turns. The agent is
run against a simulated user: the first user message is the starting prompt;
each later one is written by a model, asked with ADK's prompt (the plan, the
conversation so far, the stop signal), until the model answers the stop signal
or `max_allowed_invocations` user messages have been sent.

No text of ADK's is held here. Every prompt, persona and answer rule is read
from the installed google-adk (evalbeam's `agent` extra), by calling ADK's own
functions in google.adk.evaluation (simulation/ unless named):

  scenario     conversation_scenarios.ConversationScenario: ADK's validation,
               its persona ids resolved by pre_built_personas.
               get_default_persona_registry (a refused scenario: ScenarioError
               with ADK's reason, the case's dead letter);
  prompt       llm_backed_user_simulator_prompts.
               get_llm_backed_user_simulator_prompt, on the conversation as
               LlmBackedUserSimulator._summarize_conversation writes it, with
               llm_backed_user_simulator's stop signal;
  settings     LlmBackedUserSimulatorConfig: its defaults and its check of
               custom_instructions;
  verifier     per_turn_user_simulator_quality_prompts.
               get_per_turn_user_simulator_quality_prompt on the history
               per_turn_user_simulator_quality_v1 formats, and that module's
               own answer parsing (_parse_llm_response).

Where they run: on the workers (and, for the checks, where the pipeline is
built). A run with scenario cases or per_turn_user_simulator_quality_v1
needs google-adk in both places, as inference.agent does: configs and
pipelines.preflight stop such a run before it starts when it cannot be
imported, naming the extra (require_adk). Nothing of ADK's travels in the
plan: the workers read it from their own google-adk, which is the same
pinned version (requirements-agent.lock).

What stays evalbeam's: the turn loop of get_next_user_message (a limit, the
starting prompt, the stop signal, an empty answer fails the case), because
the model call is evalbeam's (`ask`: the one judge layer in the pipeline,
transforms/simulator.py: quota, retries, cache, checkpoints, accounting), and
the verifier's vote over samples and turns. tests/metrics/agents/test_simulator.py
drives both against ADK's own simulator and evaluator on generated cases.

Pure Python, no Beam; google.adk is imported inside the functions, so that
this module imports without it.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Awaitable, Callable, Mapping, Optional

USAGE_METRIC = "user_simulator"  # its line in runs.judge_usage
QUALITY_METRIC = "per_turn_user_simulator_quality_v1"
AGENT_EXTRA = "pip install 'evalbeam[agent]'"
_SIMULATION = "google.adk.evaluation.simulation"


class ScenarioError(ValueError):
    """A conversation_scenario or a user simulator setting ADK would refuse; the message says why."""


class SimulatorUnavailable(ScenarioError):
    """google-adk (evalbeam's `agent` extra) cannot be imported here."""


def require_adk(what: str) -> None:
    """Raises SimulatorUnavailable, naming `what` and the extra to install, when google-adk is missing."""
    try:
        importlib.import_module(f"{_SIMULATION}.llm_backed_user_simulator")
    except ImportError as e:
        raise SimulatorUnavailable(
            f"{what}: needs google-adk's user simulation (evalbeam reads its prompts, personas and answer parsing "
            f"from it), which cannot be imported here ({e}); install the "
            f"agent extra ({AGENT_EXTRA}) where the pipeline is built and on the workers") from None


def _adk(module: str, what: str = "conversation_scenario"):
    require_adk(what)
    return importlib.import_module(f"{_SIMULATION}.{module}")


@functools.lru_cache(maxsize=None)
def adk_stop_signal() -> str:
    """The simulator's stop signal (llm_backed_user_simulator._STOP_SIGNAL)."""
    return _adk("llm_backed_user_simulator")._STOP_SIGNAL


# LlmBackedUserSimulatorConfig's defaults of the settings evalbeam reads, for the config's schema
# (configs.schema.UserSimulatorConfig) where google-adk is not installed; the one place they are kept,
# checked against the installed google-adk's by tests/metrics/agents/test_simulator.py.
SIMULATOR_DEFAULTS: dict[str, Any] = {"model": "gemini-2.5-flash", "max_allowed_invocations": 20}


# --- the scenario ------------------------------------------------------------------------------------


def _reason(error) -> str:
    """A pydantic ValidationError as one line: `loc: message; ...` (as read_adk reports ADK's refusals)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
                     for e in error.errors())


def parse_scenario(value: Any, where: str = "conversation_scenario"):
    """An ADK ConversationScenario (snake_case or camelCase keys, a persona by id or object), validated
    by ADK's own model -> that model; ScenarioError with ADK's reason when ADK refuses it."""
    import pydantic

    require_adk(where)
    from google.adk.evaluation.conversation_scenarios import ConversationScenario

    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where} must be an object with starting_prompt and conversation_plan")
    try:
        return ConversationScenario.model_validate(dict(value))
    except pydantic.ValidationError as e:
        raise ScenarioError(f"{where}: {_reason(e)}") from None
    except Exception as e:  # noqa: BLE001 - e.g. the persona registry's NotFoundError for an unknown id
        raise ScenarioError(f"{where}.user_persona: {e}") from None


# --- the prompt --------------------------------------------------------------------------------------


def check_custom_instructions(text: Optional[str]) -> Optional[str]:
    """LlmBackedUserSimulatorConfig's own check of custom_instructions (its Jinja placeholders)."""
    if text is None:
        return None
    import pydantic

    config = _adk("llm_backed_user_simulator", "inference.user_simulator.custom_instructions")
    try:
        config.LlmBackedUserSimulatorConfig(custom_instructions=text)
    except pydantic.ValidationError as e:
        raise ScenarioError("; ".join(err["msg"].removeprefix("Value error, ") for err in e.errors())) from None
    return text


def render_prompt(plan: str, history: str, custom_instructions: Optional[str] = None, persona=None) -> str:
    """ADK's get_llm_backed_user_simulator_prompt (persona: ADK's UserPersona, or None)."""
    prompts = _adk("llm_backed_user_simulator_prompts")
    try:
        return prompts.get_llm_backed_user_simulator_prompt(
            conversation_plan=plan, conversation_history=history, stop_signal=adk_stop_signal(),
            custom_instructions=custom_instructions, user_persona=persona)
    except Exception as e:  # noqa: BLE001 - e.g. custom instructions without {{ persona }} in a persona's scenario
        raise ScenarioError(f"{type(e).__name__}: the user simulator's instructions cannot be rendered: "
                            f"{str(e).strip()}") from None


def summarize(events: list[Mapping[str, Any]], include_function_calls: bool = False) -> str:
    """ADK's LlmBackedUserSimulator._summarize_conversation on the events (ADK's Event as JSON)."""
    from google.adk.events.event import Event

    simulator = _adk("llm_backed_user_simulator").LlmBackedUserSimulator
    return simulator._summarize_conversation([Event.model_validate(e) for e in events], include_function_calls)


# --- the simulator (get_next_user_message, with evalbeam's model call) -------------------------------

SUCCESS, TURN_LIMIT_REACHED, STOP_SIGNAL_DETECTED = "success", "turn_limit_reached", "stop_signal_detected"
Ask = Callable[[str], Awaitable[str]]  # the simulator prompt -> the model's text; raises when there is none


class UserSimulatorFailed(RuntimeError):
    """The model gave no usable user message (ADK raises RuntimeError: the case fails)."""


class LlmBackedUserSimulator:
    """One per case: ADK's get_next_user_message, the model asked through `ask`.
    `next_message(events)` -> (status, the next user text or None)."""

    def __init__(self, scenario, ask: Ask, max_allowed_invocations: int,
                 custom_instructions: Optional[str] = None, include_function_calls: bool = False):
        self.scenario = scenario  # ADK's ConversationScenario (parse_scenario)
        self._ask = ask
        self._limit = max_allowed_invocations
        self._custom = custom_instructions
        self._include_calls = include_function_calls
        self.invocations = 0

    def prompt(self, events: list[Mapping[str, Any]]) -> str:
        history = summarize(events, self._include_calls)
        return render_prompt(self.scenario.conversation_plan, history, self._custom, self.scenario.user_persona)

    async def next_message(self, events: list[Mapping[str, Any]]) -> tuple[str, Optional[str]]:
        if 0 <= self._limit <= self.invocations:
            return TURN_LIMIT_REACHED, None
        if self.invocations == 0:  # the first user message is the scenario's starting prompt, asked of no model
            response = self.scenario.starting_prompt
        else:
            response = await self._ask(self.prompt(events))
        self.invocations += 1
        if response and adk_stop_signal().lower() in response.lower():
            return STOP_SIGNAL_DETECTED, None
        if response:
            return SUCCESS, response
        raise UserSimulatorFailed("Failed to generate a user message: LLM returned empty response")


# --- per_turn_user_simulator_quality_v1 (simulation/per_turn_user_simulator_quality_v1.py) ----------


def _invocations(turns: list[Mapping[str, Any]]) -> list:
    """ADK Invocations of the trace turns (metrics.rows.adk_invocation), as the verifier reads them."""
    from google.adk.evaluation.eval_case import Invocation

    from evalbeam.metrics.rows.adk_invocation import adk_invocation

    return [Invocation.model_validate(adk_invocation(t.get("prompt"), t, None)) for t in turns]


def quality_prompts(scenario, turns: list[Mapping[str, Any]], stop_signal: str) -> list[str]:
    """The verifier's prompts for a case, in ADK's order, by ADK's get_per_turn_user_simulator_quality_prompt
    on ADK's _format_conversation_history: each user turn after the first, with the turns before it as
    history, then the stop turn (the stop signal as the next user message, after every turn). Turn k
    (from 1) is prompt k-1; the stop turn is the last."""
    prompts = _adk("per_turn_user_simulator_quality_prompts", QUALITY_METRIC)
    verifier = _adk("per_turn_user_simulator_quality_v1", QUALITY_METRIC)
    invocations = _invocations(turns)
    generated = [(i, t.get("prompt") or "") for i, t in enumerate(turns) if i > 0] + [(len(turns), stop_signal)]
    return [prompts.get_per_turn_user_simulator_quality_prompt(
        conversation_plan=scenario.conversation_plan,
        conversation_history=verifier._format_conversation_history(invocations[:unit]),
        generated_user_response=text, stop_signal=stop_signal, user_persona=scenario.user_persona)
        for unit, text in generated]


def quality_score(answer: Optional[str]) -> Optional[float]:
    """The verifier's answer -> 1.0 (valid), 0.0 (invalid) or None (no label), by ADK's _parse_llm_response
    (as _convert_llm_response_to_score reads it: no text, no score)."""
    if not answer:
        return None
    verifier = _adk("per_turn_user_simulator_quality_v1", QUALITY_METRIC)
    from google.adk.evaluation.llm_as_judge_utils import Label

    label = verifier._parse_llm_response(answer)
    return 1.0 if label == Label.VALID else 0.0 if label == Label.INVALID else None


def majority(samples: list[Optional[float]]) -> Optional[float]:
    """_aggregate_samples: the majority of the samples' labels, a tie invalid; none labelled: the first."""
    valid = sum(1 for s in samples if s == 1.0)
    invalid = sum(1 for s in samples if s == 0.0)
    if not valid and not invalid:
        return samples[0]
    return 1.0 if valid > invalid else 0.0


def quality_result(first: Optional[float], turns: list[Optional[float]], stop: Optional[float],
                   threshold: float) -> tuple[Optional[float], list[Optional[float]]]:
    """evaluate_invocations + _aggregate_conversation_results: the first turn's score (its text equals
    the starting prompt), each later turn's majority, the stop turn's majority replacing the last when
    it fails; the score is the share of turns that passed (a turn below the threshold, or with no
    label, counts as not passed), over every turn. -> (score, per-turn scores)."""
    results = [first, *turns]
    if stop is not None and stop < threshold:  # the stop turn FAILED: the last turn is marked failed with it
        results[-1] = stop
    passed = sum(r for r in results if r is not None and r >= threshold)
    return passed / len(results), results


def quality_first(scenario, turns: list[Mapping[str, Any]]) -> float:
    """_evaluate_first_turn: 1 when the first user message is the starting prompt (both stripped)."""
    return float(int((turns[0].get("prompt") or "").strip() == scenario.starting_prompt.strip()))
