"""Taxonomies of failure modes: the two built in, a user's own YAML list, one a judge discovered.

A leaf (json, re, yaml and the standard library; nothing of evalbeam): the config checks a
taxonomy's name, the judge's answer parser (metrics.judge.templates.parse_answer) reads a
discovered one, and metrics.failure_modes classifies failures into one, all importing it from here.

The two built-in taxonomies are evalbeam's own wording (see metrics.failure_modes).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Iterable

import yaml

OTHER = "other"
BUILTIN = ("task_success", "tool_use")
DISCOVER = "discover"
MODE_ID = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# Every classification prompt lists every mode, and the answer schema's enum holds every id:
# a taxonomy's size is paid on each failure.
MAX_MODES = 100
MAX_NAME_CHARS = 120
MAX_DESCRIPTION_CHARS = 1000


class TaxonomyError(ValueError):
    """A taxonomy that cannot be used; the message names what is wrong."""


@dataclasses.dataclass(frozen=True)
class Mode:
    id: str
    name: str
    description: str
    parent: str | None = None


@dataclasses.dataclass(frozen=True)
class Taxonomy:
    name: str  # task_success | tool_use | the file's name | discovered
    modes: tuple[Mode, ...]
    origin: str = "builtin"  # builtin | file | discovered
    discovered_in: str | None = None  # the run whose judge proposed it (not part of the digest)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.modes)

    @property
    def digest(self) -> str:
        """A content hash of the modes (ids, names, descriptions, parents): two runs with the
        same digest classified into the same taxonomy, whatever its name or origin."""
        material = json.dumps([dataclasses.asdict(m) for m in self.modes], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(material.encode("utf-8")).hexdigest()[:16]

    def modes_json(self) -> str:
        return json.dumps([dataclasses.asdict(m) for m in self.modes], sort_keys=True, ensure_ascii=False)

    def name_of(self, mode_id: str | None) -> str | None:
        return next((m.name for m in self.modes if m.id == mode_id), None)


def _modes(entries: Iterable[tuple[str, str, str]]) -> tuple[Mode, ...]:
    return tuple(Mode(i, n, d) for i, n, d in entries)


# evalbeam's own categories of why a task was not accomplished.
TASK_SUCCESS = Taxonomy("task_success", _modes([
    ("misread_request", "Misread the request",
     "The output answers a different question than the one asked, or solves the wrong problem."),
    ("partial_completion", "Left part of the task undone",
     "Some of what was asked is handled, but one or more parts are missing from the result."),
    ("incorrect_result", "Wrong result",
     "The result is delivered but is factually, numerically or logically wrong."),
    ("unsupported_content", "Content without support",
     "The output states facts, figures or actions that nothing in the input, context or tool results backs."),
    ("constraint_violated", "Broke a stated constraint",
     "An explicit requirement of the request (format, length, language, scope, rule) is not respected."),
    ("declined_doable_task", "Declined a doable task",
     "The output refuses, defers or gives up although the task could be done with what was available."),
    ("needless_question", "Asked instead of acting",
     "The output asks the user for something already given or not needed, instead of doing the task."),
    ("context_lost", "Lost the conversation's context",
     "Earlier turns, stated preferences or established facts are forgotten or contradicted."),
    ("unsafe_content", "Unsafe or out-of-policy content",
     "The output contains harmful, private or otherwise disallowed content."),
    ("unclear_delivery", "Right substance, poor delivery",
     "The content is essentially right but confusing, badly organised, too long or in the wrong tone."),
    ("run_failed", "The run itself failed",
     "No usable output was produced: the agent or model errored, timed out or returned nothing."),
    (OTHER, "Other", "None of the modes above describes this failure."),
]))

# evalbeam's own categories of how an agent's use of tools went wrong.
TOOL_USE = Taxonomy("tool_use", _modes([
    ("tool_not_called", "Needed tool not called",
     "The task needed a tool call that the agent never made; it answered from its own knowledge or not at all."),
    ("wrong_tool", "Wrong tool chosen",
     "A tool was called, but a different available tool was the one the task needed."),
    ("unneeded_call", "Unneeded tool call",
     "A tool was called that the task did not need, adding cost, delay or side effects."),
    ("bad_arguments", "Wrong or malformed arguments",
     "The right tool was called with argument values that are wrong, invented, badly formatted or missing."),
    ("wrong_order", "Calls in the wrong order",
     "The calls were the right ones but made in an order that breaks their dependencies."),
    ("repeated_call", "Repeated the same call",
     "The same call was made again without reason, or the agent looped on a tool."),
    ("nonexistent_tool", "Called a tool that does not exist",
     "The agent called a tool, or a parameter, that is not among the declared tools."),
    ("tool_error_ignored", "Tool error not handled",
     "A tool returned an error or empty result and the agent neither recovered nor said so."),
    ("output_misused", "Tool output misread or ignored",
     "The tool returned what was needed, but the final response misstates, ignores or contradicts it."),
    ("premature_answer", "Answered before the tools finished",
     "The agent gave its final answer before making the calls whose results the answer depends on."),
    ("run_failed", "The run itself failed",
     "No usable trajectory was produced: the agent errored, timed out or returned nothing."),
    (OTHER, "Other", "None of the modes above describes this failure."),
]))


def builtin_taxonomy(name: str) -> Taxonomy:
    return {"task_success": TASK_SUCCESS, "tool_use": TOOL_USE}[name]


def taxonomy_from_entries(entries: Any, name: str, origin: str) -> Taxonomy:
    """A user's (or the judge's) list of modes -> a Taxonomy, with `other` added when
    missing. Each entry: id, name, description, optionally parent (another mode's
    id, giving two levels). Raises TaxonomyError naming the entry at fault."""
    if isinstance(entries, dict) and "modes" in entries:
        entries = entries["modes"]
    if not isinstance(entries, list) or not entries:
        raise TaxonomyError("a taxonomy is a non-empty list of modes (id, name, description, optional parent)")
    if len(entries) > MAX_MODES:
        raise TaxonomyError(f"{len(entries)} modes: at most {MAX_MODES} (every classification prompt lists them all)")
    modes, seen = [], set()
    for n, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise TaxonomyError(f"mode {n}: not a mapping")
        unknown = set(entry) - {"id", "name", "description", "parent"}
        if unknown:
            raise TaxonomyError(f"mode {n}: unknown keys {sorted(unknown)}")
        mode_id = entry.get("id")
        if not isinstance(mode_id, str) or not MODE_ID.match(mode_id):
            raise TaxonomyError(f"mode {n}: id {mode_id!r} must be lowercase letters, digits and _ (a letter first)")
        if mode_id in seen:
            raise TaxonomyError(f"mode {n}: id {mode_id!r} is repeated")
        for field, most in (("name", MAX_NAME_CHARS), ("description", MAX_DESCRIPTION_CHARS)):
            if not isinstance(entry.get(field), str) or not entry[field].strip():
                raise TaxonomyError(f"mode {mode_id}: needs a {field}")
            if len(entry[field].strip()) > most:
                raise TaxonomyError(f"mode {mode_id}: its {field} is {len(entry[field].strip())} characters, at most "
                                    f"{most} (every classification prompt lists every mode)")
        if "\n" in entry["name"].strip():
            raise TaxonomyError(f"mode {mode_id}: its name is more than one line")
        seen.add(mode_id)
        modes.append(Mode(mode_id, entry["name"].strip(), entry["description"].strip(), entry.get("parent")))
    for m in modes:
        if m.parent is not None and (m.parent not in seen or m.parent == m.id):
            raise TaxonomyError(f"mode {m.id}: parent {m.parent!r} is not another mode of the taxonomy")
        parent = next((p for p in modes if p.id == m.parent), None)
        if parent is not None and parent.parent is not None:
            raise TaxonomyError(f"mode {m.id}: its parent {parent.id} has a parent itself (two levels at most)")
    if not seen - {OTHER}:
        raise TaxonomyError(f"no mode besides {OTHER!r}: every failure would be {OTHER}")
    if OTHER not in seen:
        modes.append(Mode(OTHER, "Other", "None of the modes above describes this failure."))
    return Taxonomy(name, tuple(modes), origin)


def taxonomy_from_yaml(text: str, name: str) -> Taxonomy:
    try:
        entries = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TaxonomyError(f"not valid YAML: {e}") from None
    return taxonomy_from_entries(entries, name, "file")


# ---------------------------------------------------------------- a discovered taxonomy

# The answer field of a discovery (metrics.judge.templates.parse_answer reads it).
DISCOVERY_FIELD = "modes"


def parse_discovery(text: str | None) -> tuple[str, str]:
    """The judge's proposed taxonomy -> (its modes as JSON, a note). Raises TaxonomyError."""
    try:
        answer = json.loads(text or "")
    except json.JSONDecodeError as e:
        raise TaxonomyError(f"the judge's answer is not JSON: {str(e)[:100]}") from None
    entries = answer.get(DISCOVERY_FIELD) if isinstance(answer, dict) else None
    entries = [{k: v for k, v in e.items() if v not in (None, "")} if isinstance(e, dict) else e
               for e in entries or []]
    taxonomy = taxonomy_from_entries(entries, "discovered", "discovered")
    return taxonomy.modes_json(), f"{len(taxonomy.modes)} modes"


def taxonomy_from_json(modes_json: str, name: str, origin: str) -> Taxonomy:
    return Taxonomy(name, tuple(Mode(**m) for m in json.loads(modes_json)), origin)
