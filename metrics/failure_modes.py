"""Failure modes: why a metric failed, as one mode of a fixed taxonomy per failure.

Pure Python (no Beam): the taxonomies (the two built in, a user's own YAML list, a
discovered one), what counts as a failure, the classification prompt and answer
schema, reading an answer, and the mergeable per-(metric, slice) count with its
bootstrap CI. transforms.failure_modes runs them in the pipeline, through the one
judge layer.

The two built-in taxonomies are evalbeam's own wording. Vertex AI's loss clusters
classify into loss patterns of its own; evalbeam does not copy their names or
descriptions, and does not claim a one-to-one mapping (see docs/judges.md,
Failure modes).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Iterable, Mapping

import numpy as np
import yaml

from evalbeam.metrics.judge.agent_views import conversation
from evalbeam.metrics.statistics.summary import BOOTSTRAP_REPLICATES, bootstrap_weight_matrix
from evalbeam.metrics.rows.trace import trace_of

OTHER = "other"
BUILTIN = ("task_success", "tool_use")
DISCOVER = "discover"
MODE_ID = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_EXAMPLES = 5
# Every classification prompt lists every mode, and the answer schema's enum holds every id:
# a taxonomy's size is paid on each failure.
MAX_MODES = 100
MAX_NAME_CHARS = 120
MAX_DESCRIPTION_CHARS = 1000
# The answer field of a classification (metrics.judge.templates.parse_answer reads it).
MODE_FIELD = "mode"


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


# ---------------------------------------------------------------- what failed


@dataclasses.dataclass(frozen=True)
class Failure:
    """One failure to classify: an instance's metric that did not pass (rubric_id None),
    or one of its rubrics that was not met."""

    instance_id: str
    metric: str
    rubric_id: str | None
    what: str  # the verdict, explanation or failed rubric, as the prompt shows it


def instance_failure(instance_id: str, fields: Mapping[str, Any], row: Mapping[str, Any]) -> Failure | None:
    """A metric_results row -> its Failure, or None when it did not fail. A failure: the
    row did not pass, or it has an error because the agent's run failed (inference_error)."""
    if row.get("error") is not None:
        if fields.get("inference_error") is None:
            return None  # a metric that could not score is not a failure of the output
        return Failure(instance_id, row["metric"], None,
                       f"The agent's run failed, so there was no output to score: {fields['inference_error']}")
    if row.get("passed") is not False:
        return None
    score, threshold = row.get("score"), row.get("threshold")
    text = f"The metric {row['metric']} did not pass: score {score:g}" if isinstance(score, (int, float)) \
        else f"The metric {row['metric']} did not pass"
    if threshold is not None:
        text += f" (threshold {threshold:g})"
    if row.get("explanation"):
        text += f".\nThe evaluator's explanation: {row['explanation']}"
    return Failure(instance_id, row["metric"], None, text)


def rubric_failure(row: Mapping[str, Any]) -> Failure | None:
    """A rubrics row -> its Failure when the rubric was judged not met."""
    if row.get("verdict") is not False:
        return None
    where = f" (turn {row['turn'] + 1})" if row.get("turn") is not None else ""
    text = f"The rubric {row['rubric_id']} of {row['metric']}{where} was not met: {row['rubric']}"
    if row.get("reasoning"):
        text += f"\nThe evaluator's reasoning: {row['reasoning']}"
    return Failure(row["instance_id"], row["metric"], row["rubric_id"], text)


def render_case(fields: Mapping[str, Any]) -> str:
    """The failing instance as the classification prompt shows it: for an agent case the
    conversation with its tool calls and final responses (as the agent judges render it),
    else the prompt and response; the reference when there is one."""
    parts = []
    if "invocations" in fields or fields.get("predicted_trajectory"):
        parts.append(conversation(trace_of(fields)))
    else:
        for label, key in (("Prompt", "prompt"), ("Response", "response")):
            if fields.get(key) is not None:
                parts.append(f"{label}:\n{fields[key]}")
    for label, key in (("Reference answer", "reference"), ("Expected tool calls", "reference_trajectory")):
        value = fields.get(key)
        if value is not None:
            parts.append(f"{label}:\n{value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}")
    return "\n\n".join(parts) or "(the case holds no text)"


def render_taxonomy(taxonomy: Taxonomy) -> str:
    lines = []
    for m in taxonomy.modes:
        under = f" [under {m.parent}]" if m.parent else ""
        lines.append(f"- {m.id}{under}: {m.name}. {m.description}")
    return "\n".join(lines)


CLASSIFY_PROMPT = """You are reviewing one failure found by an automatic evaluation, to say why it failed.

# The failure
{what}

# The case that failed
{case}

# The failure modes to choose from
{modes}

Choose the single mode that best explains the failure. Answer JSON with "mode", the mode's id exactly as
listed (use "other" when none fits), and "rationale", one or two sentences on what in the case shows it."""


def classification_prompt(failure: Failure, fields: Mapping[str, Any], taxonomy: Taxonomy) -> str:
    return CLASSIFY_PROMPT.format(what=failure.what, case=render_case(fields), modes=render_taxonomy(taxonomy))


def classification_schema(taxonomy: Taxonomy) -> dict[str, Any]:
    return {"type": "object", "properties": {
        MODE_FIELD: {"type": "string", "enum": list(taxonomy.ids)},
        "rationale": {"type": "string"}}, "required": [MODE_FIELD, "rationale"]}


def assigned_mode(answered: str | None, taxonomy: Taxonomy) -> str:
    """The mode a failure is counted under: the judge's answer when it is a mode of the
    taxonomy, else `other` (the answer itself is kept beside it)."""
    return answered if answered in taxonomy.ids else OTHER


# ---------------------------------------------------------------- counts per (metric, slice)


def example_rank(instance_id: str) -> str:
    """Examples are the instances with the smallest hashes: a fixed, bounded choice
    whatever the order rows come in."""
    return hashlib.blake2b(instance_id.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


# Failures whose bootstrap weights wait to be drawn together (one matrix a batch).
PENDING = 512


class ModeCounts:
    """Failures of one metric in one slice, per mode: counts, the Poisson-bootstrap
    replicate sums (each failure weighed by its instance's weights, seeded by the
    instance id, so all failures of an instance move together: the CI resamples
    instances), and the MAX_EXAMPLES smallest-hash instances of each mode. Its size
    grows with the modes, never with the failures."""

    __slots__ = ("counts", "unclassified", "boot", "boot_total", "examples", "pending")

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.unclassified = 0
        self.boot: dict[str, np.ndarray] = {}
        self.boot_total = np.zeros(BOOTSTRAP_REPLICATES)
        self.examples: dict[str, list[tuple[str, str]]] = {}
        self.pending: list[tuple[str, str | None]] = []

    def add(self, instance_id: str, mode: str | None) -> "ModeCounts":
        """One failure of `instance_id` classified as `mode` (None: its classification failed)."""
        if mode is None:
            self.unclassified += 1
        else:
            self.counts[mode] = self.counts.get(mode, 0) + 1
            rank = (example_rank(instance_id), instance_id)
            kept = self.examples.setdefault(mode, [])
            if rank not in kept:
                kept.append(rank)
                kept.sort()
                del kept[MAX_EXAMPLES:]
        self.pending.append((instance_id, mode))
        if len(self.pending) >= PENDING:
            self.flush()
        return self

    def flush(self) -> None:
        if not self.pending:
            return
        weights = bootstrap_weight_matrix([i for i, _ in self.pending])
        self.boot_total += weights.sum(axis=0)
        for row, (_, mode) in zip(weights, self.pending):
            if mode is not None:
                if mode not in self.boot:
                    self.boot[mode] = np.zeros(BOOTSTRAP_REPLICATES)
                self.boot[mode] += row
        self.pending = []

    def merge(self, other: "ModeCounts") -> "ModeCounts":
        self.flush()
        other.flush()
        for mode, n in other.counts.items():
            self.counts[mode] = self.counts.get(mode, 0) + n
        self.unclassified += other.unclassified
        self.boot_total += other.boot_total
        for mode, sums in other.boot.items():
            self.boot[mode] = self.boot.get(mode, 0) + sums
        for mode, ranks in other.examples.items():
            kept = sorted(set(self.examples.get(mode, [])) | set(ranks))
            self.examples[mode] = kept[:MAX_EXAMPLES]
        return self

    @property
    def failures(self) -> int:
        return sum(self.counts.values()) + self.unclassified

    def rows(self, taxonomy: Taxonomy) -> list[dict[str, Any]]:
        """One row per mode of the taxonomy (count 0 included), and per mode answered
        outside it (none: those count as other): count, share of the failures,
        its 95% bootstrap CI, examples."""
        self.flush()
        total = self.failures
        valid = self.boot_total > 0
        out = []
        for mode in list(taxonomy.ids) + sorted(set(self.counts) - set(taxonomy.ids)):
            count = self.counts.get(mode, 0)
            low = high = None
            if total > 1 and valid.any():
                shares = self.boot.get(mode, np.zeros(BOOTSTRAP_REPLICATES))[valid] / self.boot_total[valid]
                low, high = (float(v) for v in np.percentile(shares, [2.5, 97.5]))
            out.append({"mode": mode, "mode_name": taxonomy.name_of(mode), "count": count, "failures": total,
                        "unclassified": self.unclassified, "share": count / total if total else None,
                        "share_ci_low": low, "share_ci_high": high,
                        "examples": [i for _, i in self.examples.get(mode, [])]})
        return out


# ---------------------------------------------------------------- discovering a taxonomy

DISCOVERY_FIELD = "modes"
CASE_CHARS = 1500  # of each sampled case in the discovery prompt: the sample must fit one prompt

DISCOVER_PROMPT = """You are designing the categories an evaluation team will use to sort its failures, night after
night. Below are {n} failures of an automatic evaluation, sampled from one run.

{failures}

Propose a taxonomy of failure modes that covers them: between 4 and 15 modes, each with an "id" (lowercase
letters, digits and underscores, starting with a letter), a short "name" and a one-sentence "description"
that lets a reviewer decide whether a new failure belongs to it. A mode may name a "parent" (the id of a
broader mode) to give two levels, no more. Modes must not overlap. Include a mode with id "other" for
failures that fit none."""


def sample_rank(seed: int, failure: Failure) -> str:
    """The discovery sample is the failures with the smallest ranks: fixed by the seed
    and the failures, whatever order they come in."""
    material = f"{seed}\x00{failure.instance_id}\x00{failure.metric}\x00{failure.rubric_id or ''}"
    return hashlib.blake2b(material.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def sample_entry(failure: Failure, fields: Mapping[str, Any]) -> str:
    case = render_case(fields)
    if len(case) > CASE_CHARS:
        case = case[:CASE_CHARS] + " [...]"
    return f"{failure.what}\nThe case:\n{case}"


def discovery_prompt(entries: list[str]) -> str:
    failures = "\n\n".join(f"## Failure {n}\n{e}" for n, e in enumerate(entries, 1))
    return DISCOVER_PROMPT.format(n=len(entries), failures=failures)


def discovery_schema() -> dict[str, Any]:
    mode = {"type": "object", "properties": {k: {"type": "string"} for k in ("id", "name", "description", "parent")},
            "required": ["id", "name", "description"]}
    return {"type": "object", "properties": {DISCOVERY_FIELD: {"type": "array", "items": mode, "minItems": 2}},
            "required": [DISCOVERY_FIELD]}


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
