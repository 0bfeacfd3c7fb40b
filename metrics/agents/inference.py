"""Inference before scoring: producing the actual side of an instance.

One small interface, pure Python (no Beam), used by transforms/inference.py:

    Inferrer.infer(fields) -> awaitable result    one case: its canonical fields in,
                                                  what inference produced out
    infer_all(inferrer, items, ...)                many cases with at most
                                                  `max_concurrency` in flight and a
                                                  per-case timeout
    apply_result(fields, result, seconds)          the instance's fields filled from a result
    failed(fields, error)                          the fields of a case that raised or timed out

Implementations: FunctionInferrer (`inference.function`, any callable) and
AgentInferrer (`inference.agent`, an ADK agent run with ADK's Runner and an
in-memory session). `inference.model` (a Gemini model) is not an Inferrer: its
calls go through the judge layer's client (quota, retries, cache, accounting)
in transforms/inference.py; only its prompt (`render_prompt`) is built here.

A result is one of:
- text: the final response;
- a list: the case's turns (the `invocations` trace form of metrics.rows.trace);
- an object: canonical fields (`response`, `predicted_trajectory`,
  `latency_in_seconds`, `invocations`, ...), or the keys of one turn
  (`response`, `tool_calls`, `events`, `intermediate_responses`, `duration`).
Returned turns are merged, in order, into the case's turns: what the input had
(the prompt, the expected turn, rubrics) stays; the actual side is inference's.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import inspect
import json
import re
import time
from typing import Any, Callable, Iterable, Iterator, Protocol

from evalbeam.metrics.rows.fields import CANONICAL_FIELDS, InvalidField
from evalbeam.metrics.rows.instance import check_value, normalise_field
from evalbeam.metrics.rows.trace import complete_agent_fields, parse_turns, turns_from_agent_data

# google-adk is the `agent` extra, installed with its own lock (requirements-agent.lock: google-adk
# 2.13.0 requires google-genai < 3, requirements.lock pins 3.3.0; see docs/agents.md).
INSTALL_AGENT = ("agent inference needs google-adk (2.13.0) on the launcher and every worker, and it is not "
                 "installed here: install evalbeam's agent extra from requirements-agent.lock (pip install -r "
                 "requirements-agent.lock, then evalbeam[agent]; make agent-env); see docs/agents.md, 'Installing "
                 "the agent extra' (on Dataflow: a worker or Flex Template image with that environment)")
# what a turn's actual side is made of (the rest of a turn comes from the input)
ACTUAL_TURN_KEYS = ("response", "events", "tool_calls", "intermediate_responses", "duration")
# fields an earlier inference may have derived from the trace, recomputed after a new one
DERIVED_FIELDS = ("response", "predicted_trajectory")

USAGE_METRIC = "inference"  # the line of inference.model's calls in runs.judge_usage


class InferenceError(Exception):
    """A case inference could not complete: the message goes on the instance."""


class Inferrer(Protocol):
    async def infer(self, fields: dict[str, Any]) -> Any: ...

    async def close(self) -> None: ...


def load_target(path: str, what: str) -> Any:
    """'package.module:attribute' -> the attribute. ImportError/AttributeError with a clear message."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{what} must be 'package.module:name', got {path!r}")
    module = importlib.import_module(module_name)
    target = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AttributeError(f"{what}: module {module_name!r} has no {attribute!r}") from None
    return target


def accepts_keyword(fn: Callable, name: str) -> bool:
    """Whether fn can be called with the keyword argument `name` (declared, or **kwargs)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: only its one argument
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == name and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
               for p in parameters)


class FunctionInferrer:
    """inference.function: a callable fields -> result (plain or async). A plain
    function runs in a thread pool of `max_concurrency` threads, so slow I/O-bound
    functions overlap; a timed-out call is reported, its thread left to finish.
    A function that declares a `run` parameter (or **kwargs) is also told which run
    of the case it is making (1..inference.num_runs, keyword `run`); one that does not
    is called with the fields alone, as before."""

    def __init__(self, path: str, max_concurrency: int = 8):
        self._fn: Callable[..., Any] = load_target(path, "inference.function")
        if not callable(self._fn):
            raise TypeError(f"inference.function {path!r} is not callable")
        self._takes_run = accepts_keyword(self._fn, "run")
        self._pool = concurrent.futures.ThreadPoolExecutor(max_concurrency, thread_name_prefix="evalbeam-infer")

    async def infer(self, fields: dict[str, Any], run: int = 1) -> Any:
        call = functools.partial(self._fn, run=run) if self._takes_run else self._fn
        if inspect.iscoroutinefunction(self._fn):
            return await call(dict(fields))
        result = await asyncio.get_running_loop().run_in_executor(self._pool, call, dict(fields))
        if inspect.isawaitable(result):
            result = await result
        return result

    async def conversation(self, fields: dict[str, Any], run: int = 1) -> "FunctionConversation":
        return FunctionConversation(self, fields, run)

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class FunctionConversation:
    """A function agent under user simulation: called once per user turn with the case's fields,
    `prompt` the new user message and `conversation` every message so far, the new one last
    ([{role: user | agent, text}]); it returns the turn: its final response as text, or an object
    with the keys of one turn (response, tool_calls, intermediate_responses, events, duration)."""

    def __init__(self, inferrer: FunctionInferrer, fields: dict[str, Any], run: int = 1):
        self._inferrer, self._fields, self._run = inferrer, fields, run
        self.messages: list[dict[str, str]] = []

    async def send(self, prompt: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.messages.append({"role": "user", "text": prompt})
        started = time.monotonic()
        result = await self._inferrer.infer({**self._fields, "prompt": prompt,
                                             "conversation": [dict(m) for m in self.messages]}, run=self._run)
        seconds = time.monotonic() - started
        if isinstance(result, str):
            result = {"response": result}
        if not isinstance(result, dict):
            raise InferenceError(f"under user simulation a function returns one turn (text or an object), got "
                                 f"{type(result).__name__}")
        unknown = set(result) - set(ACTUAL_TURN_KEYS)
        if unknown:
            raise InferenceError(f"under user simulation a function returns one turn; unknown keys {sorted(unknown)} "
                                 f"(expected {list(ACTUAL_TURN_KEYS)})")
        turn = {"prompt": prompt, "tool_calls": [], "duration": {"total": seconds}, **result}
        turn = parse_turns([turn])[0]
        self.messages.append({"role": "agent", "text": turn.get("response") or ""})
        return turn, turn_events(turn)


def turn_events(turn: dict[str, Any], author: str = "agent") -> list[dict[str, Any]]:
    """A function agent's turn as the ADK events the simulator reads (its Event JSON): the user's
    message, each tool call and response, the intermediate texts, then the final response."""
    events = [{"author": "user", "content": {"role": "user", "parts": [{"text": turn["prompt"]}]}}]
    for text in turn.get("intermediate_responses") or []:
        events.append({"author": text.get("author") or author, "content": {"parts": [{"text": text.get("text")}]}})
    for call in turn.get("tool_calls") or []:
        events.append({"author": author, "content": {"parts": [{"function_call": {
            "name": call.get("tool_name"), "args": call.get("tool_input")}}]}})
        if "response" in call:
            events.append({"author": author, "content": {"parts": [{"function_response": {
                "name": call.get("tool_name"), "response": call.get("response")}}]}})
    if turn.get("response"):
        events.append({"author": author, "content": {"role": "model", "parts": [{"text": turn["response"]}]}})
    return events


class AgentInferrer:
    """inference.agent: an ADK agent (an `LlmAgent`, or any BaseAgent), run with
    ADK's Runner and InMemorySessionService. Each case is one session, created
    with the case's ADK session_input (app_name, user_id, state) where it has
    one; its user turns are sent in order, and each turn's events become the
    actual turn (final response, tool calls with their responses, intermediate
    responses, token usage), with its measured duration."""

    def __init__(self, path: str, app_name: str = "evalbeam", plugins: list | None = None):
        try:
            from google.adk.apps.app import App  # optional dependency: google-adk (the agent extra)
            from google.adk.runners import Runner  # (the same optional dependency)
            from google.adk.sessions import InMemorySessionService  # (the same optional dependency)
            from google.genai import types  # (the same optional dependency)
        except ImportError as e:
            raise ImportError(f"{INSTALL_AGENT} ({e})") from None
        self._agent = load_target(path, "inference.agent")
        self._types = types
        self._make_runner = Runner
        self._sessions = InMemorySessionService()
        self._app_name = app_name
        self._runners: dict[str, Any] = {}  # one per app name (a session belongs to its runner's app)
        self._app, self._plugins = App, plugins  # plugins: ADK plugins of the runner (metrics.agents.red_team)

    def _runner_for(self, app_name: str):
        if app_name not in self._runners:
            if self._plugins:  # an App as the Runner builds one for an agent, with the plugins (not its deprecated argument)
                app = self._app.model_construct(name=app_name, root_agent=self._agent, plugins=list(self._plugins))
                self._runners[app_name] = self._make_runner(app=app, session_service=self._sessions)
            else:
                self._runners[app_name] = self._make_runner(app_name=app_name, agent=self._agent,
                                                            session_service=self._sessions)
        return self._runners[app_name]

    async def infer(self, fields: dict[str, Any]) -> Any:
        conversation = await self.conversation(fields)
        return [(await conversation.send(prompt))[0] for prompt in user_turns(fields)]

    async def conversation(self, fields: dict[str, Any]) -> "AgentConversation":
        """The case's session, created with its ADK session_input (app_name, user_id, state)."""
        case = fields.get("adk_case")
        session_input = (case.get("session_input") or {}) if isinstance(case, dict) else {}
        user_id = session_input.get("user_id") or "evalbeam_user"
        app_name = session_input.get("app_name") or self._app_name
        runner = self._runner_for(app_name)
        session = await self._sessions.create_session(
            app_name=app_name, user_id=user_id, state=dict(session_input.get("state") or {}))
        return AgentConversation(self, runner, user_id, session.id)

    async def close(self) -> None:
        for runner in self._runners.values():
            try:
                await runner.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


class AgentConversation:
    """One case's ADK session: `send(prompt)` runs one user turn -> (the turn, its events as ADK's
    Event JSON, the user's first as ADK's evaluation generator records it: only when the agent answered)."""

    def __init__(self, inferrer: AgentInferrer, runner, user_id: str, session_id: str):
        self._types = inferrer._types
        self._runner, self._user_id, self._session_id = runner, user_id, session_id

    async def send(self, prompt: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        message = self._types.Content(role="user", parts=[self._types.Part(text=prompt)])
        started = time.monotonic()
        events = []
        async for event in self._runner.run_async(user_id=self._user_id, session_id=self._session_id,
                                                  new_message=message):
            events.append(event.model_dump(mode="json", exclude_none=True))
        seconds = time.monotonic() - started
        user = {"author": "user", "content": message.model_dump(mode="json", exclude_none=True)}
        turn = turns_from_agent_data({"turns": [{"events": [user, *events]}]})[0]
        if events and events[0].get("invocation_id"):
            turn["invocation_id"] = events[0]["invocation_id"]
        turn["duration"] = {"total": seconds}
        return turn, [user, *events] if events else []


def make_inferrer(kind: str, target: str, max_concurrency: int) -> Inferrer:
    if kind == "function":
        return FunctionInferrer(target, max_concurrency)
    if kind == "agent":
        return AgentInferrer(target)
    raise ValueError(f"no in-process inferrer for {kind!r}")


def user_turns(fields: dict[str, Any]) -> list[str]:
    """The user's texts of a case, in order: its turns' prompts, else its prompt."""
    turns = fields.get("invocations")
    if turns:
        prompts = [t.get("prompt") for t in turns]
        if any(p is None for p in prompts):
            raise InferenceError("a turn of the case has no user prompt to send")
        return prompts
    if scenario_of(fields) is not None:  # no turns: its user messages come from the simulator
        raise InferenceError("a conversation_scenario case has no fixed turns to send: its user messages are "
                             "written by the user simulator (inference.user_simulator)")
    if fields.get("prompt") is None:
        raise InferenceError("the instance has no prompt to send")
    return [fields["prompt"]]


_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def render_prompt(template: str, fields: dict[str, Any]) -> str:
    """The prompt of `inference.model`: `{field}` replaced by the instance's canonical
    field (JSON for structured values). Other braces are left as written (a JSON
    example in a template stays intact), which is why this is not str.format."""
    def value(match: re.Match) -> str:
        name = match.group(1)
        if name not in CANONICAL_FIELDS:
            return match.group(0)
        if fields.get(name) is None:
            raise InferenceError(f"inference.prompt_template uses {{{name}}}, which this instance does not have")
        v = fields[name]
        return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, sort_keys=True)

    return _PLACEHOLDER.sub(value, template)


def _merge_turns(existing: list[dict[str, Any]], returned: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged = []
    for i in range(max(len(existing), len(returned))):
        base = dict(existing[i]) if i < len(existing) else {}
        for key in (*ACTUAL_TURN_KEYS, "response_parts"):  # the recorded response's parts go with it
            base.pop(key, None)
        if i < len(returned):
            actual = returned[i]
            base.update({k: actual[k] for k in ACTUAL_TURN_KEYS if k in actual})
            if "prompt" not in base and actual.get("prompt") is not None:
                base["prompt"] = actual["prompt"]
            if actual.get("invocation_id") is not None:
                base["invocation_id"] = actual["invocation_id"]
        merged.append(base)
    return merged


def apply_result(fields: dict[str, Any], result: Any, seconds: float | None = None) -> dict[str, Any]:
    """The case's fields with inference's result in (see the module doc). Raises
    InferenceError for a result that is not one of the accepted shapes."""
    if isinstance(result, str):
        result = {"response": result}
    elif isinstance(result, list):
        result = {"invocations": result}
    elif not isinstance(result, dict):
        raise InferenceError(f"inference returned {type(result).__name__}; expected text, a list of turns or an object")
    result = dict(result)
    turn_keys = [k for k in ("tool_calls", "events", "intermediate_responses", "duration") if k in result]
    unknown = set(result) - set(CANONICAL_FIELDS) - set(turn_keys)
    if unknown:
        raise InferenceError(f"inference returned unknown keys {sorted(unknown)}; expected canonical fields "
                             f"or the keys of a turn {list(ACTUAL_TURN_KEYS)}")
    out = {k: v for k, v in fields.items() if k != "inference_error"}
    existing = fields.get("invocations")
    if turn_keys or (existing and "invocations" not in result):
        if existing and len(existing) > 1:
            raise InferenceError(f"the case has {len(existing)} turns: inference must return a list of turns")
        turn = {k: result.pop(k) for k in turn_keys}
        if "response" in result:
            turn["response"] = result.pop("response")
        if "predicted_trajectory" in result and "tool_calls" not in turn:
            turn["tool_calls"] = result.pop("predicted_trajectory")
        result["invocations"] = [turn]
    try:
        if "invocations" in result:
            returned = parse_turns(result.pop("invocations"))
            for field in DERIVED_FIELDS:
                if field not in result:
                    out.pop(field, None)
            out["invocations"] = _merge_turns(existing or [], returned)
        for field, value in result.items():
            normalised = normalise_field(field, field, value, False)
            if normalised is None:
                out.pop(field, None)
            else:
                out[field] = normalised
        for field, value in out.items():
            try:
                check_value(value)
            except ValueError as e:
                raise InvalidField(field, str(e)) from None
        complete_agent_fields(out)
    except (InvalidField, ValueError) as e:
        raise InferenceError(f"inference returned an unusable result: {e}") from None
    turns = out.get("invocations") or []
    if len(turns) == 1 and "duration" not in turns[0] and "tool_calls" in turns[0] and seconds is not None:
        turns[0]["duration"] = {"total": float(seconds)}  # a one-turn case: its measured time is the turn's
    if "latency_in_seconds" not in out:
        durations = [t.get("duration", {}).get("total") for t in out.get("invocations", [])]
        if durations and all(d is not None for d in durations):
            out["latency_in_seconds"] = float(sum(durations))
        elif seconds is not None:
            out["latency_in_seconds"] = float(seconds)
    out.setdefault("failure", 0)
    return out


def failed(fields: dict[str, Any], error: str) -> dict[str, Any]:
    """The fields of a case whose inference failed: `failure` 1 and the error, kept
    so that every metric of the case reports it (transforms.score)."""
    return {**fields, "failure": 1, "inference_error": error}


def describe(error: BaseException) -> str:
    if isinstance(error, InferenceError):
        return str(error)
    text = str(error).splitlines()[0][:500] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def scenario_of(fields: dict[str, Any]) -> Any:
    """The case's ADK conversation_scenario, or None."""
    case = fields.get("adk_case")
    return case.get("conversation_scenario") if isinstance(case, dict) else None


async def simulate(conversation, simulator) -> list[dict[str, Any]]:
    """A conversation_scenario case (`conversation`: the inferrer's, for this case): the simulated
    user and the agent take turns, as ADK's EvaluationGenerator._generate_inferences_from_root_agent
    drives them (evaluation_generator.py:936-983): the simulator reads every event so far and answers
    the next user message, or ends (its stop signal, or max_allowed_invocations); each message is
    one agent turn."""
    events: list[dict[str, Any]] = []
    turns = []
    while True:
        status, text = await simulator.next_message(events)
        if text is None:
            return turns
        turn, turn_events = await conversation.send(text)
        events.extend(turn_events)
        turns.append(turn)


def infer_all(make: Callable[[], Inferrer], items: Iterable[tuple[Any, dict[str, Any]]], max_concurrency: int,
              timeout_seconds: float | None, run_of: Callable[[Any], int] | None = None,
              make_simulators: Callable[[], Any] | None = None,
              ) -> Iterator[tuple[Any, dict[str, Any]]]:
    """(key, fields) items -> (key, fields filled or failed), each case exactly once,
    at most `max_concurrency` in flight on one asyncio loop. The inferrer is made
    (and closed) on that loop: ADK's runner and sessions belong to one loop.
    run_of(key): which run of its case an item is, passed on to a FunctionInferrer
    (the one kind of inferrer a user's code can be told it by).
    make_simulators: for conversation_scenario cases, made on the loop too: an object with
    `for_case(scenario, key) -> metrics.agents.simulator.LlmBackedUserSimulator` and `async close()`."""
    items = list(items)

    async def main() -> list:
        inferrer = make()
        simulators = make_simulators() if make_simulators is not None else None
        gate = asyncio.Semaphore(max_concurrency)

        async def run(key, fields):
            told = run_of is not None and isinstance(inferrer, FunctionInferrer)
            scenario = scenario_of(fields)
            if scenario is None:
                return await (inferrer.infer(fields, run=run_of(key)) if told else inferrer.infer(fields))
            if simulators is None:
                raise InferenceError("a conversation_scenario case runs with the user simulator (inference.user_simulator), "
                                     "which is not set")
            conversation = await (inferrer.conversation(fields, run=run_of(key)) if told
                                  else inferrer.conversation(fields))
            result = await simulate(conversation, simulators.for_case(scenario, key))
            finished = getattr(inferrer, "finished", None)  # a deployed agent's: checkpoints the finished case
            if finished is not None:
                finished(fields, result)
            return result

        async def one(key, fields):
            async with gate:
                started = time.monotonic()
                try:
                    result = await asyncio.wait_for(run(key, fields), timeout_seconds)
                    return key, apply_result(fields, result, time.monotonic() - started)
                except (asyncio.TimeoutError, TimeoutError):
                    return key, failed(fields, f"inference timed out after {timeout_seconds:g}s")
                except Exception as e:  # noqa: BLE001 - whatever the user's code raises is the case's error
                    return key, failed(fields, f"inference failed: {describe(e)}")

        try:
            return await asyncio.gather(*(one(k, f) for k, f in items))
        finally:
            await inferrer.close()
            if simulators is not None:
                await simulators.close()

    yield from asyncio.run(main())
