"""Conversation scenarios generated for an agent (`evalbeam generate`, the config's `scenarios:`
block): the grid of what to cover, the generator's prompt and answer, the checks every
generated scenario passes, and the digests that pin a set. Pure Python, no Beam.

The grid is goals x personas x difficulties (x languages); each cell asks the generator for
`per_cell` scenarios in one judge request (transforms.scenarios sends it through the one judge
layer). The generator answers a list of {starting_prompt, conversation_plan, tools}; each item
becomes an ADK conversation_scenario (with the cell's persona) and is
  - dead-lettered when it is empty, is not text, names a tool the agent does not have, or ADK's own
    ConversationScenario / EvalCase models refuse it (read from the installed google-adk);
  - a near-duplicate when the MinHash estimate of the Jaccard similarity of its word shingles with
    a scenario kept before it in its cell reaches the threshold (datasketch's MinHash);
  - else kept.

The prompt is evalbeam's own. Personas named by id are ADK's, read from the installed google-adk's
registry (pre_built_personas.get_default_persona_registry); none of their text is held here.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import unicodedata
from typing import Any, Iterable, Mapping, Sequence

USAGE = "scenarios:generation"  # the judge_usage entry and judge_cache metric of generation calls
ANSWER_FIELD = "scenarios"  # JudgeRequest.answer_field: metrics.judge.templates.parse_answer reads it here
MAX_PER_CELL = 50  # scenarios asked in one request (Vertex's generator takes at most 100 a call)
MAX_SCENARIOS = 100_000  # scenarios asked in one run: a grid past it is refused before any call
MAX_CELLS = 20_000
MAX_SEED_CONVERSATIONS = 5
SEED_CHARS = 2_000  # of each recorded conversation shown to the generator
TOKENS_PER_SCENARIO = 500  # the generator's max_output_tokens, per scenario asked, unless scenarios.judge sets it
SHINGLE_WORDS = 3
NUM_PERM = 128
KEPT, NEAR_DUPLICATE, DEAD_LETTER = "kept", "near_duplicate", "dead_letter"


class ScenarioConfigError(ValueError):
    """The scenarios block cannot be used here (an unknown persona, an agent that cannot be read, ...)."""


def slug(text: str, limit: int = 40) -> str:
    """The text's words (letters and digits of any script, NFKC, lowercase) joined by '-', at most `limit`
    characters: a readable id part ("Réserver un vol" -> réserver-un-vol; "天気を聞く" stays)."""
    words = re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text).lower())
    out = "-".join(words)[:limit].strip("-")
    return out or "x"


@dataclasses.dataclass(frozen=True)
class Axis:
    """A value of one axis of the grid: its id (a column value, part of each eval_id) and what the
    generator is told."""
    id: str
    description: str


@dataclasses.dataclass(frozen=True)
class Persona:
    """A persona of the grid: ADK's (by id: `value` the id, as an eval set names it) or the user's own
    (`value` the UserPersona object); `text` what the generator is told of it."""
    id: str
    text: str
    value: Any


@dataclasses.dataclass(frozen=True)
class Cell:
    number: int
    goal: Axis
    persona: Persona
    difficulty: Axis
    language: str | None

    def slug(self) -> str:
        parts = [self.goal.id, self.persona.id, self.difficulty.id] + ([self.language] if self.language else [])
        return ".".join(slug(p) for p in parts)

    def columns(self) -> dict[str, str | None]:
        return {"goal": self.goal.id, "persona": self.persona.id, "difficulty": self.difficulty.id,
                "language": self.language}


@dataclasses.dataclass(frozen=True)
class Grid:
    goals: tuple[Axis, ...]
    personas: tuple[Persona, ...]
    difficulties: tuple[Axis, ...]
    languages: tuple[str | None, ...]
    per_cell: int

    @property
    def size(self) -> int:
        return len(self.goals) * len(self.personas) * len(self.difficulties) * len(self.languages)

    def cell(self, number: int) -> Cell:
        """The cell of a number (goal-major: goals, then personas, difficulties, languages), computed, so
        that a worker handed numbers never holds the whole grid's cells."""
        rest, language = divmod(number, len(self.languages))
        rest, difficulty = divmod(rest, len(self.difficulties))
        goal, persona = divmod(rest, len(self.personas))
        return Cell(number, self.goals[goal], self.personas[persona], self.difficulties[difficulty],
                    self.languages[language])

    def cells(self) -> Iterable[Cell]:
        return (self.cell(n) for n in range(self.size))


def axis_values(entries: Sequence[Any], what: str) -> tuple[Axis, ...]:
    """Goals or difficulties as the config gives them (text, or {id, description}) -> Axis values,
    ids unique (ScenarioConfigError naming the two that clash)."""
    values = []
    for entry in entries:
        if isinstance(entry, str):
            values.append(Axis(slug(entry), entry))
        else:
            values.append(Axis(entry["id"], entry.get("description") or entry["id"]))
    seen: dict[str, int] = {}
    for i, v in enumerate(values):
        if v.id in seen:
            raise ScenarioConfigError(f"scenarios.{what}: entries {seen[v.id]} and {i} have the same id {v.id!r}; "
                                      "give them ids ({id, description})")
        seen[v.id] = i
    return tuple(values)


# --- personas: ADK's registry, or the user's own ---------------------------------------------------------


def adk_personas() -> dict[str, Any]:
    """ADK's pre-built personas, id -> UserPersona, read from the installed google-adk."""
    from evalbeam.metrics.agents.simulator import require_adk

    require_adk("scenarios.personas")
    from google.adk.evaluation.simulation.pre_built_personas import get_default_persona_registry

    return {p.id: p for p in get_default_persona_registry().get_registered_personas()}


def persona_text(persona: Any) -> str:
    """What the generator is told of a persona (ADK's UserPersona, or a mapping of its fields): its id,
    description and behaviours' names and descriptions."""
    get = (lambda k: persona.get(k)) if isinstance(persona, Mapping) else (lambda k: getattr(persona, k, None))
    lines = [f"{get('id')}: {get('description') or ''}".strip()]
    for behavior in get("behaviors") or []:
        b = (lambda k: behavior.get(k)) if isinstance(behavior, Mapping) else (lambda k: getattr(behavior, k, None))
        lines.append(f"- {b('name')}: {b('description') or ''}".rstrip(": "))
    return "\n".join(lines)


def resolve_personas(entries: Sequence[Any]) -> tuple[Persona, ...]:
    """The config's personas (ADK persona ids, or persona objects) -> Persona values, each checked by
    ADK's own UserPersona model; ScenarioConfigError naming an unknown id or a refused object."""
    import pydantic

    registry = adk_personas()
    from google.adk.evaluation.simulation.user_simulator_personas import UserPersona

    from evalbeam.metrics.names import did_you_mean

    out: list[Persona] = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            if entry not in registry:
                raise ScenarioConfigError(
                    f"scenarios.personas.{i}: unknown persona {entry!r}{did_you_mean(entry, registry)}; ADK's: "
                    f"{', '.join(sorted(registry))} (or give a persona object: id, description, behaviors)")
            out.append(Persona(entry, persona_text(registry[entry]), entry))
            continue
        try:
            UserPersona.model_validate(entry)
        except pydantic.ValidationError as e:
            reason = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
            raise ScenarioConfigError(f"scenarios.personas.{i}: ADK's UserPersona refuses it: {reason}") from None
        out.append(Persona(entry["id"], persona_text(entry), dict(entry)))
    ids = [p.id for p in out]
    for p in out:
        if ids.count(p.id) > 1:
            raise ScenarioConfigError(f"scenarios.personas: the persona {p.id!r} is named twice")
    return tuple(out)


# --- the agent's description ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AgentDescription:
    """What the generator is told of the agent, and the tools a scenario may name. Plain data (JSON),
    so it travels to the workers without the agent's code."""
    source: str  # agent | a2a | description
    name: str
    text: str  # as the prompt shows it
    tools: tuple[str, ...]  # names a scenario's `tools` may use

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "AgentDescription":
        data = json.loads(text)
        return cls(data["source"], data["name"], data["text"], tuple(data["tools"]))


def _tool_lines(tools: Sequence[Mapping[str, Any]], indent: str = "") -> list[str]:
    lines = []
    for tool in tools:
        lines.append(f"{indent}- {tool['name']}: {tool.get('description') or '(no description)'}")
        if tool.get("parameters"):
            lines.append(f"{indent}  parameters: {json.dumps(tool['parameters'], sort_keys=True, ensure_ascii=False)}")
    return lines


def describe_given(instruction: str | None, tools: Sequence[Mapping[str, Any]], name: str = "agent") -> AgentDescription:
    """An agent described in the config: its instruction and tools ({name, description, parameters})."""
    lines = [f"Name: {name}"]
    if instruction:
        lines += ["Instruction:", instruction.strip()]
    lines += ["Tools:", *(_tool_lines(tools) or ["(none)"])]
    return AgentDescription("description", name, "\n".join(lines), tuple(t["name"] for t in tools))


def _declaration(tool) -> dict[str, Any] | None:
    """An ADK tool's function declaration as JSON (name, description, parameters), by ADK's own
    _get_declaration (what the agent sends its model), or None when it declares none."""
    declaration = tool._get_declaration()
    if declaration is None:
        return None
    data = declaration.model_dump(mode="json", exclude_none=True)
    parameters = data.get("parameters") or data.get("parameters_json_schema")
    return {"name": data.get("name") or tool.name, "description": data.get("description") or tool.description,
            **({"parameters": parameters} if parameters else {})}


def _adk_tools(agent) -> tuple[list[dict[str, Any]], list[str]]:
    """An ADK agent's tools (each a declaration) and notes on those that cannot be listed (a toolset
    whose tools need a connection)."""
    import asyncio

    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.base_toolset import BaseToolset
    from google.adk.tools.function_tool import FunctionTool

    tools, notes = [], []
    for tool in getattr(agent, "tools", None) or []:
        if isinstance(tool, BaseToolset):
            try:
                listed = asyncio.run(asyncio.wait_for(tool.get_tools(), timeout=30))
            except Exception as e:  # noqa: BLE001 - a toolset that cannot list its tools (an unreachable MCP server): said
                notes.append(f"toolset {type(tool).__name__}: its tools could not be listed ({type(e).__name__}: {e})")
                continue
            tools += [d for d in (_declaration(t) for t in listed) if d]
            continue
        declared = _declaration(tool if isinstance(tool, BaseTool) else FunctionTool(tool))
        if declared:
            tools.append(declared)
    return tools, notes


def describe_adk_agent(agent, path: str) -> AgentDescription:
    """An ADK agent object (scenarios.agent) -> its description: the name, description, instruction and
    tools of it and of each sub-agent, as ADK declares the tools to the model."""
    lines: list[str] = []
    names: list[str] = []

    def walk(node, depth: int) -> None:
        indent = "  " * depth
        tools, notes = _adk_tools(node)
        names.extend(t["name"] for t in tools)
        lines.append(f"{indent}Agent {node.name}" + (f": {node.description}" if getattr(node, "description", "") else ""))
        instruction = getattr(node, "instruction", None)
        if isinstance(instruction, str) and instruction.strip():
            lines.append(f"{indent}Instruction:")
            lines.extend(f"{indent}  {line}" for line in instruction.strip().splitlines())
        elif instruction:
            lines.append(f"{indent}Instruction: (given by a function at run time: not shown)")
        if tools or notes:
            lines.append(f"{indent}Tools:")
            lines.extend(_tool_lines(tools, indent + "  "))
            lines.extend(f"{indent}  ({note})" for note in notes)
        subs = getattr(node, "sub_agents", None) or []
        if subs:
            lines.append(f"{indent}Sub-agents (the agent hands the conversation to them):")
            for sub in subs:
                walk(sub, depth + 1)

    walk(agent, 0)
    return AgentDescription("agent", getattr(agent, "name", path), "\n".join(lines), tuple(dict.fromkeys(names)))


def describe_agent_card(card: Mapping[str, Any], url: str) -> AgentDescription:
    """An A2A agent card (scenarios.a2a) -> its description: name, description and skills. A scenario's
    `tools` name skills (by id or name): an A2A agent's tools are its own."""
    skills = [s for s in card.get("skills") or [] if isinstance(s, Mapping)]
    lines = [f"Name: {card.get('name') or url}"]
    if card.get("description"):
        lines += ["Description:", str(card["description"]).strip()]
    lines.append("Skills:")
    for s in skills:
        lines.append(f"- {s.get('id') or s.get('name')}: {s.get('name') or ''} {s.get('description') or ''}".rstrip())
        if s.get("examples"):
            lines.append(f"  examples: {json.dumps(s['examples'], ensure_ascii=False)}")
    if not skills:
        lines.append("(none listed)")
    names = [str(n) for s in skills for n in (s.get("id"), s.get("name")) if n]
    return AgentDescription("a2a", str(card.get("name") or url), "\n".join(lines), tuple(dict.fromkeys(names)))


def seed_conversations(eval_set: Mapping[str, Any]) -> list[str]:
    """Recorded conversations (an ADK EvalSet's cases with turns) as the generator is shown them:
    `user: ...` / `agent: ...` lines, the first MAX_SEED_CONVERSATIONS, each cut at SEED_CHARS."""
    out = []
    for case in eval_set.get("eval_cases") or []:
        lines = []
        for invocation in case.get("conversation") or []:
            for role, key in (("user", "user_content"), ("agent", "final_response")):
                content = invocation.get(key) or {}
                text = " ".join(p.get("text", "") for p in content.get("parts") or [] if isinstance(p, Mapping)).strip()
                if text:
                    lines.append(f"{role}: {text}")
        if lines:
            out.append("\n".join(lines)[:SEED_CHARS])
        if len(out) == MAX_SEED_CONVERSATIONS:
            break
    return out


# --- the request and its answer ---------------------------------------------------------------------------

INSTRUCTION = (
    "You write test scenarios for a conversational AI agent. A scenario is a conversation that a simulated user "
    "will have with the agent: the user's first message (starting_prompt), and a plan the simulated user follows "
    "for the rest of the conversation (conversation_plan). Another model plays the user from your plan, one "
    "message at a time, reacting to what the agent says, so the plan must say everything the user knows and wants."
)

RULES = (
    "- starting_prompt: the user's first message, as the user would type it.\n"
    "- conversation_plan: written to the simulated user, in the second person (\"You want ...\"): the goal, the "
    "facts and preferences the user gives when the agent asks for them, how to react to the agent's answers "
    "(what to accept, what to correct, when to push back), and when the conversation is over (the goal met, or "
    "given up). It describes the user, never what the agent should do.\n"
    "- tools: the names of the agent's tools (or skills) the agent needs in order to serve this user, only names "
    "listed above; [] when it needs none.\n"
    "- Keep the scenarios within what the agent is for, as its description says, except where the goal asks "
    "for something else.\n"
    "- Make the scenarios differ from one another: different requests, details, constraints, and turns the "
    "conversation may take. No two should read alike."
)


def generation_prompt(agent: AgentDescription, cell: Cell, count: int, examples: Sequence[str] = ()) -> str:
    parts = [INSTRUCTION, "## The agent\n" + agent.text]
    if examples:
        parts.append("## Recorded conversations with the agent (for what its users ask and how; do not copy them)\n"
                     + "\n\n".join(f"Conversation {i + 1}:\n{text}" for i, text in enumerate(examples)))
    cover = [f"- The user's goal: {cell.goal.description}",
             f"- The user (the simulator plays this persona):\n{_indented(cell.persona.text)}",
             f"- Difficulty: {cell.difficulty.description}"]
    if cell.language:
        cover.append(f"- Language: the user writes in {cell.language}; the starting_prompt is in {cell.language}.")
    parts.append(f"## What to write\nWrite {count} scenario{'s' if count > 1 else ''} for this user:\n"
                 + "\n".join(cover))
    parts.append("## Each scenario\n" + RULES)
    parts.append(f'Answer with a JSON object: "scenarios", a list of exactly {count} objects, each with '
                 '"starting_prompt" (text), "conversation_plan" (text) and "tools" (a list of names).')
    return "\n\n".join(parts)


def _indented(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def generation_schema(count: int) -> dict[str, Any]:
    item = {"type": "object", "properties": {"starting_prompt": {"type": "string"},
                                             "conversation_plan": {"type": "string"},
                                             "tools": {"type": "array", "items": {"type": "string"}}},
            "required": ["starting_prompt", "conversation_plan", "tools"]}
    return {"type": "object", "properties": {ANSWER_FIELD: {"type": "array", "items": item, "minItems": 1,
                                                            "maxItems": count}},
            "required": [ANSWER_FIELD]}


def parse_generation(text: str | None) -> str:
    """The generator's answer -> its items as JSON text (the judgment's verdict, cached as it is).
    ValueError for an answer that is not a JSON object with a non-empty `scenarios` list (asked again,
    as any malformed answer); each item is checked later, on its own (check_item)."""
    try:
        answer = json.loads(text or "")
    except json.JSONDecodeError as e:
        raise ValueError(f"the generator's answer is not JSON: {str(e)[:100]}") from None
    items = answer.get(ANSWER_FIELD) if isinstance(answer, dict) else None
    if not isinstance(items, list) or not items:
        raise ValueError(f'the generator\'s answer has no "{ANSWER_FIELD}" list')
    return json.dumps(items, ensure_ascii=False, sort_keys=True)


# --- each generated scenario -----------------------------------------------------------------------------


def scenario_digest(scenario: Mapping[str, Any]) -> str:
    """A content hash of a conversation_scenario (its prompt, plan and persona): what pins it."""
    return hashlib.sha256(json.dumps(scenario, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def eval_id_of(cell: Cell, digest: str) -> str:
    return f"{cell.slug()}.{digest[:10]}"


def adk_check(eval_id: str, scenario: Mapping[str, Any]) -> str | None:
    """ADK's own models on one eval case of the scenario (ConversationScenario through EvalCase): None
    when they take it, else their reason. Needs google-adk (the agent extra)."""
    import pydantic

    from evalbeam.metrics.agents.simulator import require_adk

    require_adk("scenarios")
    from google.adk.evaluation.eval_case import EvalCase

    try:
        EvalCase.model_validate({"eval_id": eval_id, "conversation_scenario": dict(scenario)})
    except pydantic.ValidationError as e:
        return "ADK's EvalCase refuses it: " + "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
    except Exception as e:  # noqa: BLE001 - e.g. the persona registry's NotFoundError: ADK's reason, said
        return f"ADK's EvalCase refuses it: {type(e).__name__}: {e}"
    return None


@dataclasses.dataclass(frozen=True)
class Checked:
    """One generated item after its checks: the scenario, the tools it names, and why it is
    dead-lettered (None: it may be kept), with the field at fault."""
    scenario: dict[str, Any] | None
    tools: tuple[str, ...]
    reason: str | None = None
    field: str | None = None


def check_item(item: Any, persona: Persona, agent_tools: Sequence[str]) -> Checked:
    """A generated item -> the scenario it makes with the cell's persona, or why it cannot be one:
    not an object, an empty or missing starting_prompt or conversation_plan, a tool the agent does not
    have. (ADK's own models check what passes: adk_check, once its eval_id is known.)"""
    if not isinstance(item, Mapping):
        return Checked(None, (), f"the generator's item is not an object: {json.dumps(item)[:200]}", "scenario")
    tools = item.get("tools")
    tools = tuple(str(t) for t in tools) if isinstance(tools, list) else ()
    scenario: dict[str, Any] = {"starting_prompt": item.get("starting_prompt"),
                                "conversation_plan": item.get("conversation_plan"), "user_persona": persona.value}
    for field in ("starting_prompt", "conversation_plan"):
        value = scenario[field]
        if isinstance(value, str) and not value.strip():
            return Checked(scenario, tools, f"{field} is empty", field)
        if value is None:
            return Checked(scenario, tools, f"{field} is missing", field)
    unknown = [t for t in tools if t not in agent_tools]
    if unknown:
        have = ", ".join(agent_tools) or "none"
        return Checked(scenario, tools, f"names tool(s) the agent does not have: {', '.join(unknown)} (its tools: "
                                        f"{have})", "tools")
    return Checked(scenario, tools)


def shingles(text: str) -> set[bytes]:
    """The text's word shingles: every SHINGLE_WORDS consecutive words (lowercase letters and digits)."""
    words = re.findall(r"\w+", text.lower())
    if len(words) < SHINGLE_WORDS:
        return {" ".join(words).encode("utf-8")} if words else set()
    return {" ".join(words[i:i + SHINGLE_WORDS]).encode("utf-8") for i in range(len(words) - SHINGLE_WORDS + 1)}


@functools.lru_cache(maxsize=1)
def _permutations():
    """datasketch's permutations (and their scheme) for NUM_PERM and its fixed seed, made once (each MinHash
    would make them again: most of its cost for a short text)."""
    from datasketch import MinHash

    m = MinHash(num_perm=NUM_PERM)
    return m.permutations, m.scheme


def minhash(text: str):
    """datasketch's MinHash of the text's word shingles (NUM_PERM permutations, datasketch's fixed seed:
    the same signature in every process)."""
    from datasketch import MinHash

    permutations, scheme = _permutations()
    m = MinHash(num_perm=NUM_PERM, permutations=permutations, scheme=scheme)
    m.update_batch(sorted(shingles(text)))
    return m


def scenario_text(scenario: Mapping[str, Any]) -> str:
    return f"{scenario.get('starting_prompt')}\n{scenario.get('conversation_plan')}"


def near_duplicates(texts: Sequence[str], threshold: float) -> list[int | None]:
    """For each text, in order, the index of an earlier kept text it nearly repeats (estimated Jaccard
    similarity of their word shingles >= threshold), else None (kept). The first of a group is kept."""
    if len(texts) < 2:
        return [None] * len(texts)
    kept: list[tuple[int, Any]] = []
    out: list[int | None] = []
    for i, text in enumerate(texts):
        signature = minhash(text)
        match = next((j for j, other in kept if signature.jaccard(other) >= threshold), None)
        out.append(match)
        if match is None:
            kept.append((i, signature))
    return out


def set_digest(digests: Iterable[str]) -> str:
    """The digest of a set of scenarios: a hash of their digests, in any order (the sum of the digests
    as numbers, modulo 2**256, with their count), so that it is made as they stream, in constant memory."""
    total, count = 0, 0
    for d in digests:
        total = (total + int(d, 16)) % (1 << 256)
        count += 1
    return hashlib.sha256(f"{count}:{total:064x}".encode()).hexdigest()


def grid_size(goals: int, personas: int, difficulties: int, languages: int) -> int:
    return goals * personas * difficulties * max(1, languages)


# the reasons of dead letters for which no scenario came back (the rest came back and were refused)
NOT_GENERATED = ("not generated", "generation failed")
