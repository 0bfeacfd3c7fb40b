"""Failure modes: why a metric failed, as one mode of a fixed taxonomy per failure.

Pure Python (no Beam): what counts as a failure, the classification prompt and answer
schema, reading an answer, the discovery prompt, and the mergeable per-(metric, slice)
count with its bootstrap CI. The taxonomies themselves (the two built in, a user's own
YAML list, a discovered one) are metrics.taxonomy, a leaf. transforms.failure_modes runs them in the pipeline, through the one
judge layer.

The two built-in taxonomies (metrics.taxonomy) are evalbeam's own wording. Vertex AI's loss clusters
classify into loss patterns of its own; evalbeam does not copy their names or
descriptions, and does not claim a one-to-one mapping (see docs/judges.md,
Failure modes).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Mapping

import numpy as np

from evalbeam.metrics.judge.agent_views import conversation
from evalbeam.metrics.statistics.summary import BOOTSTRAP_REPLICATES, bootstrap_weight_matrix
from evalbeam.metrics.rows.trace import trace_of
from evalbeam.metrics.taxonomy import DISCOVERY_FIELD, OTHER, Taxonomy

MAX_EXAMPLES = 5
# The answer field of a classification (metrics.judge.templates.parse_answer reads it).
MODE_FIELD = "mode"


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
