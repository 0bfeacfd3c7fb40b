"""Planting attacks in a running agent's tool responses (metrics.red_team says what and where).

- An ADK agent (`inference.agent`) is not edited: its Runner gets a plugin (ADK's plugin callbacks, the
  `after_tool_callback` every tool call passes through) that appends the attack to the response of the
  attacked tool at the attacked JSON path. The agent's own `after_tool_callback`s then run on the attacked
  response, as they would on the tool's own (ADK skips them when a plugin answers: evalbeam runs them).
- A Python-function agent (`inference.function`) is given its tools by evalbeam (`red_team.tools[].function`,
  passed as its `tools` keyword: {name: callable}); for an attacked run the attacked tool's results are
  planted in before the function sees them. Its twin gets the same tools, unattacked.

Each case runs as its own asyncio task (metrics.agents.inference.infer_all); the attack of the case in
flight is in a context variable, which the tasks ADK starts inherit, so one plugin serves every case.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
from typing import Any, Callable, Mapping

from evalbeam.metrics.agents.inference import AgentInferrer, accepts_keyword, load_target
from evalbeam.metrics.red_team import TOOL_RESPONSE, Unplantable, plant

# the planting of the attacked run in flight in this task (None: a twin, or no red teaming)
CURRENT: contextvars.ContextVar["Planting | None"] = contextvars.ContextVar("evalbeam_red_team", default=None)


class Planting:
    """One run's attack while it runs: plants it in the attacked tool's responses and remembers what
    happened (`planted`: responses planted in; `refused`: why a response could not hold it)."""

    def __init__(self, attack: Mapping[str, Any] | None):
        self.attack = attack
        self.planted = 0
        self.refused: str | None = None

    def response(self, tool: str, response: Any) -> Any:
        """The response the agent reads: planted in when this run attacks `tool`, else None (unchanged)."""
        attack = self.attack
        if attack is None or attack["delivery"] != TOOL_RESPONSE or tool != attack["tool"]:
            return None
        try:
            planted = plant(response, attack["path"], attack["text"])
        except Unplantable as e:
            if self.refused is None:
                self.refused = (f"red_team: tool {tool}'s response has no text at {attack['path']} to plant the "
                                f"attack in: {e}")
            return None
        self.planted += 1
        return planted

    def wrap(self, name: str, tool: Callable[..., Any]) -> Callable[..., Any]:
        """A function agent's tool, its results planted in (an unattacked run's: the tool itself)."""
        if self.attack is None or self.attack["tool"] != name:
            return tool

        def planted(result):
            attacked = self.response(name, result)
            if attacked is None:  # refused: the run is dead-lettered with the reason; the function sees why
                raise AttackUndelivered(self.refused)
            return attacked

        if inspect.iscoroutinefunction(tool):
            @functools.wraps(tool)
            async def attacked_async(*args, **kwargs):
                return planted(await tool(*args, **kwargs))
            return attacked_async

        @functools.wraps(tool)
        def attacked(*args, **kwargs):
            return planted(tool(*args, **kwargs))
        return attacked


class AttackUndelivered(Exception):
    """Raised to a function agent by a tool whose response could not hold the attack."""


def adk_plugin():
    """The ADK plugin planting the attack of the run in flight (CURRENT) in its tool responses."""
    from google.adk.plugins.base_plugin import BasePlugin  # optional dependency: google-adk (the agent extra)

    class RedTeamPlugin(BasePlugin):
        def __init__(self):
            super().__init__(name="evalbeam_red_team")

        async def after_tool_callback(self, *, tool, tool_args, tool_context, result):
            planting = CURRENT.get()
            attacked = None if planting is None else planting.response(tool.name, result)
            if attacked is None:
                return None
            # ADK runs an agent's own after_tool_callbacks only when no plugin answered: run them here,
            # on the attacked response, as ADK would on the tool's own (a defense there is measured)
            agent = tool_context.get_invocation_context().agent
            callbacks = getattr(agent, "after_tool_callback", None)
            for callback in callbacks if isinstance(callbacks, list) else [callbacks] if callbacks else []:
                answer = callback(tool=tool, args=tool_args, tool_context=tool_context, tool_response=attacked)
                if inspect.isawaitable(answer):
                    answer = await answer
                if answer is not None:
                    return answer
            return attacked

    return RedTeamPlugin()


class AttackingInferrer:
    """An in-process agent (function or ADK agent) whose cases may each carry an attack: `plan` maps each
    case's fields (the very dict infer_all passes, by id) to (its attack or None, its run number).
    After a case, `plantings[id(fields)]` says what was planted."""

    def __init__(self, kind: str, target: str, max_concurrency: int, tools: Mapping[str, str],
                 plan: Mapping[int, tuple[Mapping[str, Any] | None, int]]):
        self._kind, self._plan = kind, plan
        self.plantings: dict[int, Planting] = {}
        if kind == "agent":
            self._agent = AgentInferrer(target, plugins=[adk_plugin()])
            return
        self._fn = function_agent(target)
        self._takes_run = accepts_keyword(self._fn, "run")
        self._tools = {name: load_target(path, f"red_team.tools {name}.function") for name, path in tools.items()}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_concurrency, thread_name_prefix="evalbeam-red-team")

    async def infer(self, fields: dict[str, Any]) -> Any:
        attack, run = self._plan[id(fields)]
        planting = self.plantings[id(fields)] = Planting(attack)
        if self._kind == "agent":
            token = CURRENT.set(planting)
            try:
                return await self._agent.infer(fields)
            finally:
                CURRENT.reset(token)
        keywords: dict[str, Any] = {"tools": {name: planting.wrap(name, tool) for name, tool in self._tools.items()}}
        if self._takes_run:
            keywords["run"] = run
        call = functools.partial(self._fn, **keywords)
        if inspect.iscoroutinefunction(self._fn):
            return await call(dict(fields))
        result = await asyncio.get_running_loop().run_in_executor(self._pool, call, dict(fields))
        if inspect.isawaitable(result):
            result = await result
        return result

    async def close(self) -> None:
        if self._kind == "agent":
            await self._agent.close()
        else:
            self._pool.shutdown(wait=False, cancel_futures=True)


def function_agent(target: str) -> Callable[..., Any]:
    """inference.function, which red_team.tools gives its tools to: it must take them (a `tools` keyword)."""
    fn = load_target(target, "inference.function")
    if not callable(fn):
        raise TypeError(f"inference.function {target!r} is not callable")
    if not accepts_keyword(fn, "tools"):
        raise TypeError(f"inference.function {target!r} takes no `tools` keyword: red_team.tools gives a function "
                        "agent its tools as tools={name: callable}, so that their responses can be attacked")
    return fn


def _tool_name(tool: Any) -> str | None:
    if callable(getattr(tool, "get_tools", None)):  # a toolset: its tools are known only when it runs
        return None
    name = getattr(tool, "name", None)
    if isinstance(name, str) and callable(getattr(tool, "run_async", None)):
        return name
    return getattr(tool, "__name__", None) if callable(tool) else None


def _agents(agent: Any) -> list[Any]:
    found, todo = [], [agent]
    while todo:
        current = todo.pop(0)
        if any(current is a for a in found):
            continue
        found.append(current)
        todo += list(getattr(current, "sub_agents", None) or [])
    return found


def agent_tools(agent: Any) -> tuple[set[str], bool]:
    """An ADK agent's tools (its own and its sub-agents'), by name; and whether it has toolsets, whose
    tools cannot be listed before it runs."""
    names, toolsets = set(), False
    for a in _agents(agent):
        for tool in getattr(a, "tools", None) or []:
            name = _tool_name(tool)
            if name is None:
                toolsets = True
            else:
                names.add(name)
    return names, toolsets


def _first_line(text: Any) -> str:
    return text.strip().splitlines()[0] if isinstance(text, str) and text.strip() else ""


def describe_agent(agent: Any) -> str:
    """What an ADK agent is, for the judge writing attacks against it: each agent's name, description and
    instruction, and its tools with the first line of their descriptions."""
    lines = []
    for a in _agents(agent):
        lines.append(f"Agent {getattr(a, 'name', '?')}: {getattr(a, 'description', '') or ''}".rstrip())
        if isinstance(getattr(a, "instruction", None), str) and a.instruction.strip():
            lines.append(f"  Instruction: {a.instruction.strip()}")
        for tool in getattr(a, "tools", None) or []:
            name = _tool_name(tool)
            if name is not None:
                doc = _first_line(getattr(tool, "description", None) or getattr(tool, "__doc__", None))
                lines.append(f"  Tool {name}" + (f": {doc}" if doc else ""))
    return "\n".join(lines)


def describe_function(target: str, tools: Mapping[str, str]) -> str:
    """What a function agent is: its docstring, and the tools evalbeam gives it."""
    fn = load_target(target, "inference.function")
    lines = [f"Agent {target}: {inspect.getdoc(fn) or ''}".rstrip()]
    for name, path in tools.items():
        doc = _first_line(inspect.getdoc(load_target(path, f"red_team.tools {name}.function")))
        lines.append(f"  Tool {name}" + (f": {doc}" if doc else ""))
    return "\n".join(lines)
