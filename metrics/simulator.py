"""The user simulator of conversation scenarios, with google-adk 2.13.0's semantics.

An ADK eval case may hold a `conversation_scenario` (a starting prompt, a
conversation plan, optionally a persona) instead of fixed turns. The agent is
run against a simulated user: the first user message is the starting prompt;
each later one is written by a model, asked with ADK's prompt (the plan, the
conversation so far, the stop signal), until the model answers the stop signal
or `max_allowed_invocations` user messages have been sent. Reproduced from
google/adk/evaluation/simulation/:
- llm_backed_user_simulator.py: LlmBackedUserSimulatorConfig (lines 48-118),
  _summarize_conversation (lines 146-180), get_next_user_message (lines
  248-307), the stop signal `</finished>` (line 45);
- llm_backed_user_simulator_prompts.py: the two templates (lines 26-107), the
  template choice (lines 143-181) and the rendering (lines 184-219);
- static_user_simulator.py: a case with fixed turns replays them;
- pre_built_personas.py: the personas (metrics/simulator_personas.py).
Copied rather than imported: google-adk is an extra, and inference.function
under simulation runs without it. tests/metrics/test_simulator.py compares the
copies with the installed ADK's text and renders both on generated cases.

Pure Python, no Beam. The model call is handed in (`ask`): in the pipeline it
is the one judge layer (transforms/simulate.py), so quota, retries, cache,
checkpoints and accounting are the judge's.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Awaitable, Callable, Mapping, Optional

from evalbeam.metrics.simulator_personas import PERSONAS

STOP_SIGNAL = "</finished>"  # llm_backed_user_simulator.py:45
USAGE_METRIC = "user_simulator"  # its line in runs.judge_usage
DEFAULT_MODEL = "gemini-2.5-flash"  # LlmBackedUserSimulatorConfig.model's default
DEFAULT_MAX_INVOCATIONS = 20  # LlmBackedUserSimulatorConfig.max_allowed_invocations' default

# llm_backed_user_simulator_prompts.py:26-81, verbatim
DEFAULT_TEMPLATE = """You are a Simulated User designed to test an AI Agent.

Your single most important job is to react logically to the Agent's last message.
The Conversation Plan is your canonical grounding, not a script; your response MUST be dictated by what the Agent just said.

# Primary Operating Loop

You MUST follow this three-step process while thinking:

Step 1: Analyze what the Agent just said or did. Specifically, is the Agent asking you a question, reporting a successful or unsuccessful operation, or saying something incorrect or unexpected?

Step 2: Choose one action based on your analysis:
* ANSWER any questions the Agent asked.
* ADVANCE to the next request as per the Conversation Plan if the Agent succeeds in satisfying your current request.
* INTERVENE if the Agent is yet to complete your current request and the Conversation Plan requires you to modify it.
* CORRECT the Agent if it is making a mistake or failing.
* END the conversation if any of the below stopping conditions are met:
  - The Agent has completed all your requests from the Conversation Plan.
  - The Agent has failed to fulfill a request *more than once*.
  - The Agent has performed an incorrect operation and informs you that it is unable to correct it.
  - The Agent ends the conversation on its own by transferring you to a *human/live agent* (NOT another AI Agent).

Step 3: Formulate a response based on the chosen action and the below Action Protocols and output it.

# Action Protocols

**PROTOCOL: ANSWER**
* Only answer the Agent's questions using information from the Conversation Plan.
* Do NOT provide any additional information the Agent did not explicitly ask for.
* If you do not have the information requested by the Agent, inform the Agent. Do NOT make up information that is not in the Conversation Plan.
* Do NOT advance to the next request in the Conversation Plan.

**PROTOCOL: ADVANCE**
* Make the next request from the Conversation Plan.
* Skip redundant requests already fulfilled by the Agent.

**PROTOCOL: INTERVENE**
* Change your current request as directed by the Conversation Plan with natural phrasing.

**PROTOCOL: CORRECT**
* Challenge illogical or incorrect statements made by the Agent.
* If the Agent did an incorrect operation, ask the Agent to fix it.
* If this is the FIRST time the Agent failed to satisfy your request, ask the Agent to try again.

**PROTOCOL: END**
* End the conversation only when any of the stopping conditions are met; do NOT end prematurely.
* Output `{{ stop_signal }}` to indicate that the conversation with the AI Agents is over.

# Conversation Plan

{{ conversation_plan }}

# Conversation History

{{ conversation_history }}
"""

# llm_backed_user_simulator_prompts.py:83-107, verbatim
PERSONA_TEMPLATE = """
You are a Simulated User designed to test an AI Agent.

Your single most important job is to react logically to the Agent's last message while role-playing as the given Persona.
The Conversation Plan is your canonical grounding, not a script; your response MUST be dictated by what the Agent just said.

# Persona Description

{{ persona.description }}
This persona behaves in the following ways:
{% for b in persona.behaviors %}
## {{ b.name | render_string_filter}}
{{ b.description | render_string_filter }}

Instructions:
{{ b.get_behavior_instructions_str() | render_string_filter }}
{% endfor %}
# Conversation Plan

{{ conversation_plan }}

# Conversation History

{{ conversation_history }}
""".strip()


class ScenarioError(ValueError):
    """A conversation_scenario or a user simulator setting ADK would refuse; the message says why."""


# --- the scenario and its persona (conversation_scenarios.py, user_simulator_personas.py) ------------


@dataclasses.dataclass(frozen=True)
class UserBehavior:
    name: str
    description: str
    behavior_instructions: tuple[str, ...]
    violation_rubrics: tuple[str, ...]

    # the two methods ADK's templates call (user_simulator_personas.py:59-65)
    def get_behavior_instructions_str(self) -> str:
        return "\n".join(f"  * {i}" for i in self.behavior_instructions)

    def get_violation_rubrics_str(self) -> str:
        return "\n".join(f"  * {v}" for v in self.violation_rubrics)


@dataclasses.dataclass(frozen=True)
class UserPersona:
    id: str
    description: str
    behaviors: tuple[UserBehavior, ...]


@dataclasses.dataclass(frozen=True)
class Scenario:
    starting_prompt: str
    conversation_plan: str
    user_persona: Optional[UserPersona] = None


def _key(value: Mapping[str, Any], name: str, camel: bool = True) -> Any:
    """A key in snake_case or camelCase (ADK's eval models take both; its persona models, plain
    pydantic models, snake_case only: camel False)."""
    if name in value or not camel:
        return value.get(name)
    head, *rest = name.split("_")
    return value.get(head + "".join(w.title() for w in rest))


def _text(value: Mapping[str, Any], name: str, where: str, camel: bool = True) -> str:
    text = _key(value, name, camel)
    if not isinstance(text, str):
        raise ScenarioError(f"{where}.{name} is missing or not a string")
    return text


def _persona(value: Any, where: str) -> Optional[UserPersona]:
    if value is None:
        return None
    if isinstance(value, str):  # a pre-built persona's id (ConversationScenario.validate_user_persona)
        if value not in PERSONAS:
            raise ScenarioError(f"{where}: {value} not found in registry. (the pre-built personas: "
                                f"{', '.join(PERSONAS)})")
        value = PERSONAS[value]
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where} must be a persona id or an object with id, description and behaviors")
    # UserPersona and UserBehavior are plain pydantic models: snake_case keys, others ignored
    behaviors = value.get("behaviors")
    if not isinstance(behaviors, list):
        raise ScenarioError(f"{where}.behaviors is missing or not a list")
    out = []
    for i, b in enumerate(behaviors):
        at = f"{where}.behaviors[{i}]"
        if not isinstance(b, Mapping):
            raise ScenarioError(f"{at} must be an object")
        lists = []
        for name in ("behavior_instructions", "violation_rubrics"):
            items = b.get(name)
            if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
                raise ScenarioError(f"{at}.{name} is missing or not a list of strings")
            lists.append(tuple(items))
        out.append(UserBehavior(_text(b, "name", at, False), _text(b, "description", at, False), *lists))
    return UserPersona(_text(value, "id", where, False), _text(value, "description", where, False), tuple(out))


def parse_scenario(value: Any, where: str = "conversation_scenario") -> Scenario:
    """An ADK ConversationScenario (snake_case or camelCase keys) -> Scenario; ScenarioError saying why not."""
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where} must be an object with starting_prompt and conversation_plan")
    known = {"starting_prompt", "startingPrompt", "conversation_plan", "conversationPlan", "user_persona",
             "userPersona"}
    extra = sorted(set(value) - known)
    if extra:  # EvalBaseModel forbids extra keys
        raise ScenarioError(f"{where}.{extra[0]}: Extra inputs are not permitted")
    return Scenario(_text(value, "starting_prompt", where), _text(value, "conversation_plan", where),
                    _persona(_key(value, "user_persona"), f"{where}.user_persona"))


# --- the prompt (llm_backed_user_simulator_prompts.py) ----------------------------------------------


REQUIRED_PLACEHOLDERS = ("stop_signal", "conversation_plan", "conversation_history")


def valid_template(text: str, required: tuple[str, ...]) -> bool:
    """is_valid_user_simulator_template: the text parses as Jinja and uses every required variable."""
    from jinja2 import StrictUndefined, exceptions, meta
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=StrictUndefined)
    try:
        names = meta.find_undeclared_variables(env.parse(text))
    except (exceptions.TemplateSyntaxError, exceptions.UndefinedError):
        return False
    return all(r in names for r in required)


def check_custom_instructions(text: Optional[str]) -> Optional[str]:
    """LlmBackedUserSimulatorConfig.validate_custom_instructions."""
    if text is not None and not valid_template(text, REQUIRED_PLACEHOLDERS):
        raise ScenarioError("custom_instructions must contain each of the following formatting placeholders using "
                            "Jinja syntax: {{ stop_signal }}, {{ conversation_plan }}, {{ conversation_history }}")
    return text


def template_for(custom_instructions: Optional[str], persona: Optional[UserPersona]) -> str:
    """_get_user_simulator_instructions_template."""
    if custom_instructions is None:
        return DEFAULT_TEMPLATE if persona is None else PERSONA_TEMPLATE
    if persona is None:
        return custom_instructions
    if not valid_template(custom_instructions, (*REQUIRED_PLACEHOLDERS, "persona")):
        raise ScenarioError("custom instructions using personas must contain the formatting placeholders "
                            "{{ stop_signal }}, {{ conversation_plan }}, {{ conversation_history }} and {{ persona }}")
    return custom_instructions


def render_prompt(plan: str, history: str, custom_instructions: Optional[str] = None,
                  persona: Optional[UserPersona] = None) -> str:
    """get_llm_backed_user_simulator_prompt: ADK's Jinja rendering, in the same sandbox with the same filter.
    (Jinja, not str.format: the templates, and users' custom instructions, are Jinja.)"""
    from jinja2 import DictLoader, TemplateError, pass_context
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(loader=DictLoader({"user_instructions": template_for(custom_instructions, persona)}))

    @pass_context
    def render_string_filter(context, template_string: str) -> str:
        if not template_string:
            return ""
        return env.from_string(template_string).render(context.get_all())

    env.filters["render_string_filter"] = render_string_filter
    parameters: dict[str, Any] = {"stop_signal": STOP_SIGNAL, "conversation_plan": plan,
                                  "conversation_history": history}
    if persona is not None:
        parameters["persona"] = persona
    try:
        return env.get_template("user_instructions").render(parameters)
    except TemplateError as e:  # e.g. custom instructions using {{ persona }} in a scenario without one
        raise ScenarioError(f"{type(e).__name__}: the user simulator's instructions cannot be rendered: {e}") from None


def summarize(events: list[Mapping[str, Any]], include_function_calls: bool = False) -> str:
    """_summarize_conversation: the events' texts as `author: text` (thoughts left out), and, when
    asked, their tool calls and responses; joined by blank lines. Events are ADK's Event as JSON
    (Event.model_dump(mode="json")); args and responses are written as ADK writes them (Python's repr)."""
    lines = []
    for event in events:
        parts = ((event.get("content") or {}).get("parts")) or []
        author = event.get("author")
        for part in parts:
            call = part.get("function_call") or part.get("functionCall")
            reply = part.get("function_response") or part.get("functionResponse")
            if part.get("text") and not part.get("thought"):
                lines.append(f"{author}: {part['text']}")
            elif include_function_calls and call:
                lines.append(f"{author} called tool '{call.get('name')}' with args: {call.get('args')}")
            elif include_function_calls and reply:
                lines.append(f"Tool '{reply.get('name')}' returned: {reply.get('response')}")
    return "\n\n".join(lines)


# --- the simulator (llm_backed_user_simulator.py get_next_user_message) ------------------------------

SUCCESS, TURN_LIMIT_REACHED, STOP_SIGNAL_DETECTED = "success", "turn_limit_reached", "stop_signal_detected"
Ask = Callable[[str], Awaitable[str]]  # the simulator prompt -> the model's text; raises when there is none


class UserSimulatorFailed(RuntimeError):
    """The model gave no usable user message (ADK raises RuntimeError: the case fails)."""


class LlmBackedUserSimulator:
    """One per case. `next_message(events)` -> (status, the next user text or None)."""

    def __init__(self, scenario: Scenario, ask: Ask, max_allowed_invocations: int = DEFAULT_MAX_INVOCATIONS,
                 custom_instructions: Optional[str] = None, include_function_calls: bool = False):
        self.scenario = scenario
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
        if response and STOP_SIGNAL.lower() in response.lower():
            return STOP_SIGNAL_DETECTED, None
        if response:
            return SUCCESS, response
        raise UserSimulatorFailed("Failed to generate a user message: LLM returned empty response")


# --- per_turn_user_simulator_quality_v1 (simulation/per_turn_user_simulator_quality_v1.py) ---------
# The verifier's prompts: per_turn_user_simulator_quality_prompts.py:25-134 and 137-207, verbatim.
QUALITY_TEMPLATE = """
You are a data scientist tasked with evaluating the quality of a User Simulator that is interacting with an Agent.
Your task is to determine if the Generated User Response is consistent with:
  - The Conversation Plan: A list of high-level goals that the User Simulator is expected to achieve in the conversation.
  - The Conversation History: The exchange between the User Simulator and the Agent so far.
To determine this, we provide specific Evaluation Criteria that must be satisfied by the Generated User Response.

# Definition of Conversation Plan
The Conversation Plan specifies the goals that the User Simulator must execute.
The Conversation Plan also specifies the information and details that are needed to complete the goals.
The Conversation Plan is sequential in nature and the User Simulator must ensure the sequence is followed.

# Definition of Conversation History
The Conversation History is the actual dialogue between the User Simulator and the Agent.
The Conversation History may not be complete, but the existing dialogue should adhere to the Conversation Plan.
The Conversation History may contain instances where the User Simulator troubleshoots an incorrect/inappropriate response from the Agent in order to enforce the Conversation Plan.
The Conversation History is finished only when the User Simulator outputs `{{ stop_signal }}` in its response. If this token is missing, the conversation between the User Simulator and the Agent has not finished, and more turns can be generated.

# Definition of Generated User Response
The Generated User Response is a the next user response in the conversation between a User Simulator and an Agent.
The Generated User Response was generated by the User Simulator based on a Conversation Plan and Conversation History.

# Evaluation Criteria
Your task is to evaluate the Generated User Response on a PASS/FAIL basis looking for specific errors.
The Generated User Response is marked as PASS unless it contains any of the Violations listed below, in which case it is marked as FAIL.

** CONVERSATION_PLAN_FOLLOWED **
Does the Generated User Response stick to the Conversation Plan?

Mark as FAIL if any of the following Violations occur:
- The Generated User Response repeats a high-level goal that was already completed in previous turns.
- The Generated User Response provides details for a high-level goal that was already completed.
- The Generated User Response response agrees to change the topic or perform a task not listed in the Conversation Plan.
- The Generated User Response invents a new goal not present in the Conversation Plan.
- The Generated User Response invents details (e.g., a made-up phone number or address) not provided in the Conversation Plan.

** STOP_CONDITION_FOLLOWED **
Did the conversation end exactly when it was supposed to?

Mark as FAIL if any of the following Violations occur:
- The conversation should have ended, but the Generated User Response did not use `{{ stop_signal }}`.
- The Generated User Response used `{{ stop_signal }}`, but tasks in the Conversation Plan are still incomplete AND the Agent has not failed.
- The Agent successfully transferred the User Simulator to a human/live agent, but the Generated User Response continued instead of using `{{ stop_signal }}`.

** USER_GOAL_ORIENTED **
Is the User Simulator acting naturally, or is it "data dumping"?

Mark as FAIL if any of the following Violations occur:
- The Generated User Response provides specific details for a high-level goal (email content, recipient address, phone numbers) BEFORE the Agent has explicitly asked for them.
- The Generated User Response tries to accomplish more than one high-level task in a single turn.

** LIMITED_TROUBLESHOOTING **
Does the User Simulator have the correct amount of patience? (Note: Please check the conversation history and count the number of Agent errors).

Mark as FAIL if any of the following Violations occur:
- The Generated User Response ends the conversation immediately after the first Agent error.
- On the second Agent error, the Generated User Response response continues the conversation without using `{{ stop_signal }}`.
- After the second Agent error, the Generated User Response tries to continue the conversation or continues addressing errors without using `{{ stop_signal }}`.

** RESPONSIVENESS **
Does the User Simulator answer what is asked?

Mark as FAIL if any of the following Violations occur:
- The Agent asked a question (or multiple questions), and the Generated User Response failed to address one or all of them.
- The Agent asked for information NOT in the Conversation Plan, and the Generated User Response made up an answer instead of stating, e.g., "I don't know" or "I don't have that info."

** CORRECTS_AGENT  **
Does the User Simulator catch the Agent's mistakes?

Mark as FAIL if any of the following Violations occur:
- The Agent provided incorrect information, but the Generated User Response continued as if it was correct.
- The Agent made a dangerous assumption (e.g., sending an email without asking for the content first), and the Generated User Response continues without correcting the Agent.

** CONVERSATIONAL_TONE **
Does the User Simulator sound like a human?

Mark as FAIL if any of the following Violations occur:
- The Generated User Response uses overly complex sentence structures, or uses technical jargon inappropriately.
- The Generated User Response is sterile and purely functional (direct commands) with no natural conversational framing.
- The Generated User Response is too formal in nature, employing overly polite phrases and expressions.
- The Generated User Response is a "wall of text" where a simple sentence would suffice.

# Output Format
Format your response in the following JSON format:
{
    "criteria": [
        {
          "name": "CRITERIA_NAME_1",
          "reasoning": "reasoning",
          "passes": True or False,
        },
        {
          "name": "CRITERIA_NAME_2",
          "reasoning": "reasoning",
          "passes": True or False,
        },
        ...
    ],
    "is_valid": True or False,
}

# Conversation Plan
{{ conversation_plan }}

# Conversation History
{{ conversation_history }}

# Generated User Response
{{ generated_user_response }}
""".strip()

QUALITY_PERSONA_TEMPLATE = """
You are a data scientist tasked with evaluating the quality of a User Simulator that is interacting with an Agent.
Your task is to determine if the Generated User Response is consistent with:
  - The Conversation Plan: A list of high-level goals that the User Simulator is expected to achieve in the conversation.
  - The Conversation History: The exchange between the User Simulator and the Agent so far.
  - A Persona: A set of behaviours that the User Simulator is expected to exhibit in the conversation.
To determine this, we provide specific Evaluation Criteria that you must use to evaluate the Generated User Response.

# Definition of Conversation Plan
The Conversation Plan specifies the goals that the User Simulator must execute.
The Conversation Plan also specifies the information and details that are needed to complete the goals.
The Conversation Plan is sequential in nature and the User Simulator must ensure the sequence is followed.
The Conversation Plan is not a script.

# Definition of Conversation History
The Conversation History is the actual dialogue between the User Simulator and the Agent.
The Conversation History may not be complete, but the existing dialogue should adhere to the Conversation Plan.
The Conversation History may contain instances where the User Simulator troubleshoots an incorrect/inappropriate response from the Agent in order to enforce the Conversation Plan.
The Conversation History is finished only when the User Simulator outputs `{{ stop_signal }}` in its response. If this token is missing, the conversation between the User Simulator and the Agent has not finished, and more turns can be generated.

# Definition of Persona
The Persona is a description of how the User Simulator should behave in a conversation with the Agent.
A Persona specifies behaviors, not goals.
If the Persona contradicts the Conversation Plan, the Conversation Plan has precedence.

# Definition of Generated User Response
The Generated User Response is the next user response in the conversation between a User Simulator and an Agent.
The Generated User Response was generated by the User Simulator based on the Conversation Plan and Conversation History.

# Evaluation Criteria
Your task is to evaluate the Generated User Response on a PASS/FAIL basis looking for specific errors.
The Generated User Response is marked as PASS unless it contains any of the Violations listed below, in which case it is marked as FAIL.
{% for b in persona.behaviors %}
## Criteria: {{ b.name | render_string_filter}}
{{ b.description | render_string_filter}}

Mark as FAIL if any of the following Violations occur:
{{ b.get_violation_rubrics_str() | render_string_filter}}
{% endfor %}
# Output Format
Format your response in the following JSON format:
{
    "criteria": [
        {
          "name": "CRITERIA_NAME_1",
          "reasoning": "reasoning",
          "passes": True or False,
        },
        {
          "name": "CRITERIA_NAME_2",
          "reasoning": "reasoning",
          "passes": True or False,
        },
        ...
    ],
    "is_valid": True if it passes all criteria, False otherwise
}

# Conversation Plan
{{ conversation_plan }}

# Conversation History
{{ conversation_history }}

# Persona Description
{{ persona.description }}
The Evaluation Criteria above already specify how to evaluate whether the Generated User Response satisfies this persona.

# Generated User Response
{{ generated_user_response }}
""".strip()

QUALITY_METRIC = "per_turn_user_simulator_quality_v1"
STOP_TURN = "stop_signal_proxy_invocation"  # the turn judged after the last (per_turn_..._v1.py:99-105)


def quality_prompt(plan: str, history: str, generated: str, stop_signal: str,
                   persona: Optional[UserPersona] = None) -> str:
    """get_per_turn_user_simulator_quality_prompt (per_turn_user_simulator_quality_prompts.py:219-259):
    the verifier's prompt for one generated user message. (Kept in one function: the judge
    templates' owner may render it from the installed ADK instead.)"""
    from jinja2 import DictLoader, pass_context
    from jinja2.sandbox import SandboxedEnvironment

    template = QUALITY_TEMPLATE if persona is None else QUALITY_PERSONA_TEMPLATE
    env = SandboxedEnvironment(loader=DictLoader({"verifier_instructions": template}))

    @pass_context
    def render_string_filter(context, template_string: str) -> str:
        if not template_string:
            return ""
        return env.from_string(template_string).render(context.get_all())

    env.filters["render_string_filter"] = render_string_filter
    parameters: dict[str, Any] = {"conversation_plan": plan, "conversation_history": history,
                                  "generated_user_response": generated, "stop_signal": stop_signal}
    if persona is not None:
        parameters["persona"] = persona
    return env.get_template("verifier_instructions").render(parameters)


def quality_history(turns: list[Mapping[str, Any]]) -> str:
    """_format_conversation_history (per_turn_user_simulator_quality_v1.py:84-97): `user: <text>` and
    `model: <final response>` per turn (ADK's final response is the model's content), blank-line joined."""
    lines = []
    for turn in turns:
        if turn.get("prompt"):
            lines.append(f"user: {turn['prompt']}")
        if turn.get("response"):  # "" in the trace: the turn ended with no final response (ADK's None)
            lines.append(f"model: {turn['response']}")
    return "\n\n".join(lines)


# _parse_llm_response (per_turn_user_simulator_quality_v1.py:45-81): ADK's regex and its labels
# (llm_as_judge_utils.Label): the verifier answers free text, read as ADK reads it.
_IS_VALID = re.compile(r'"is_valid":\s*\[*[\n\s]*"*([^"\]]*)"*[\n\s]*\]*\s*[,\n\}]')
_INVALID_LABELS = ("invalid", "almost", "false", "partially_valid", "partially valid", "partially")
_VALID_LABELS = ("valid", "true")


def quality_score(answer: Optional[str]) -> Optional[float]:
    """The verifier's answer -> 1.0 (valid), 0.0 (invalid) or None (no label found)."""
    if not answer:
        return None
    match = _IS_VALID.search(answer)
    if match is None:
        return None
    label = match.group(1).strip("}").replace(",", "").strip().lower()
    if label in _INVALID_LABELS:
        return 0.0
    if label in _VALID_LABELS:
        return 1.0
    return None


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


def quality_prompts(scenario: Scenario, turns: list[Mapping[str, Any]], stop_signal: str) -> list[str]:
    """The verifier's prompts for a case, in ADK's order: each user turn after the first, with the
    turns before it as history, then the stop turn (the stop signal as the next user message, after
    every turn). Turn k (from 1) is prompt k-1; the stop turn is the last."""
    generated = [(i, t.get("prompt") or "") for i, t in enumerate(turns) if i > 0] + [(len(turns), stop_signal)]
    return [quality_prompt(scenario.conversation_plan, quality_history(turns[:unit]), text, stop_signal,
                           scenario.user_persona) for unit, text in generated]


def quality_first(scenario: Scenario, turns: list[Mapping[str, Any]]) -> float:
    """_evaluate_first_turn: 1 when the first user message is the starting prompt (both stripped)."""
    return float(int((turns[0].get("prompt") or "").strip() == scenario.starting_prompt.strip()))
