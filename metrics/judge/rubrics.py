"""Rubric-based metrics, in pure Python: the templates (metrics/judge/data/rubric_metrics.yaml),
the two judge stages' prompts and response schemas, the parsing of their
answers, and the scoring.

A rubric metric runs in two judge stages:
  generate  the inputs the rubrics depend on (for general_quality, the prompt)
            -> a list of rubrics (text, type, importance), numbered r1..rN.
            Only adaptive metrics generate, and only for rows whose rubric_groups
            do not already give the metric's group.
  validate  the instance and its rubrics -> one verdict (yes/no) and a reasoning
            per rubric. The response schema has one required property per rubric
            id and no other, so an answer that skips a rubric or invents one does
            not validate and is asked again.
Score = share of the judged rubrics met; beside it, in `extra`, the
importance-weighted share (HIGH 3, MEDIUM 2, LOW 1; a rubric without an
importance weighs as MEDIUM). Static metrics have fixed rubrics; `claims`
metrics (grounding) let the judge split the response into claims and label
each against the context.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml

from evalbeam.metrics.rows.fields import CANONICAL_FIELDS
from evalbeam.metrics.judge.agent_views import AGENT_VARIABLES
from evalbeam.metrics.registry import MetricError

BUILTIN_RUBRIC_METRICS = Path(__file__).with_name("data") / "rubric_metrics.yaml"
IMPORTANCE_WEIGHT = {"HIGH": 3, "MEDIUM": 2, "LOW": 1}
DEFAULT_IMPORTANCE = "MEDIUM"  # the weight of a rubric that gives none
VERDICTS = ("yes", "no")
CLAIM_LABELS = ("supported", "unsupported", "contradicted", "no_rad")
PASSING_CLAIMS = ("supported", "no_rad")
# Hallucination's sentence labels (ADK's hallucinations_v1 vocabulary); the first and last pass.
SENTENCE_LABELS = ("supported", "unsupported", "contradictory", "disputed", "not_applicable")
PASSING_SENTENCES = ("supported", "not_applicable")
# The answer kinds of the two stages (JudgeRequest.answer_field); templates.parse_answer hands them here.
GENERATE, VALIDATE, CLAIMS = "rubrics", "verdicts", "claims"
SEGMENT, LABEL = "sentences", "labels"  # segmented metrics: the response's sentences, then a label for each
STAGE_ANSWERS = (GENERATE, VALIDATE, CLAIMS, SEGMENT, LABEL)
RUBRIC_ID_RE = r"^[A-Za-z0-9_.-]{1,64}$"


class InvalidRubricAnswer(ValueError):
    """The judge's answer does not fit the stage's schema (retried by the client)."""


# ---------------------------------------------------------------- rubrics


@dataclasses.dataclass(frozen=True)
class Rubric:
    rubric_id: str
    text: str
    type: str | None = None
    importance: str | None = None  # HIGH | MEDIUM | LOW

    def weight(self) -> int:
        return IMPORTANCE_WEIGHT[self.importance or DEFAULT_IMPORTANCE]

    def as_json(self) -> dict[str, Any]:
        return {"rubric_id": self.rubric_id, "text": self.text, "type": self.type, "importance": self.importance}


def rubrics_to_json(rubrics: tuple[Rubric, ...]) -> str:
    return json.dumps([r.as_json() for r in rubrics], sort_keys=True, ensure_ascii=False)


def rubrics_from_json(text: str) -> tuple[Rubric, ...]:
    return tuple(Rubric(r["rubric_id"], r["text"], r.get("type"), r.get("importance")) for r in json.loads(text))


def _importance(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value.upper() not in IMPORTANCE_WEIGHT:
        raise ValueError(f"{where}: importance {value!r} is not one of HIGH, MEDIUM, LOW")
    return value.upper()


def _rubric_text(item: dict[str, Any], where: str) -> str:
    """A rubric's text: `text`, or Vertex's `content: {property: {description}}`."""
    text = item.get("text")
    content = item.get("content")
    if text is None and isinstance(content, str):
        text = content
    elif text is None and isinstance(content, dict):
        prop = content.get("property")
        text = prop.get("description") if isinstance(prop, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: has no text (give 'text', or 'content': {{'property': {{'description': ...}}}})")
    return text.strip()


def given_rubrics(rubric_groups: Any, group: str) -> tuple[Rubric, ...] | None:
    """The rubrics a row's rubric_groups gives for `group`; None when it gives
    none for that group. Raises ValueError naming what is wrong with them. A
    group is a list of rubrics (or Vertex's {"rubrics": [...]}); a rubric is
    its text, or an object with text (or Vertex's content.property.description)
    and optional rubric_id, type and importance."""
    if rubric_groups is None:
        return None
    if not isinstance(rubric_groups, dict):
        raise ValueError("rubric_groups must be an object {group: [rubric, ...]}")
    if group not in rubric_groups:
        return None
    items = rubric_groups[group]
    if isinstance(items, dict) and "rubrics" in items:
        items = items["rubrics"]
    if not isinstance(items, list) or not items:
        raise ValueError(f"rubric_groups.{group} must be a non-empty list of rubrics")
    out = []
    for i, item in enumerate(items):
        where = f"rubric_groups.{group}.{i}"
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict):
            raise ValueError(f"{where}: a rubric is its text or an object, got {type(item).__name__}")
        rubric_id = item.get("rubric_id", item.get("id", f"r{i + 1}"))
        rubric_id = str(rubric_id)
        if not re.fullmatch(RUBRIC_ID_RE, rubric_id):
            raise ValueError(f"{where}: rubric_id {rubric_id!r} must be 1-64 letters, digits, '_', '.', '-'")
        kind = item.get("type")
        out.append(Rubric(rubric_id, _rubric_text(item, where), str(kind) if kind is not None else None,
                          _importance(item.get("importance"), where)))
    ids = [r.rubric_id for r in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"rubric_groups.{group}: rubric ids repeat ({', '.join(sorted(k for k, c in Counter(ids).items() if c > 1))})")
    return tuple(out)


# ---------------------------------------------------------------- templates


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class StageSpec(_Model):
    instruction: str = pydantic.Field(min_length=1)
    input_variables: list[str] = pydantic.Field(default_factory=list)
    guidance: str | None = None
    max_rubrics: int = pydantic.Field(8, ge=1, le=50)

    @pydantic.field_validator("input_variables")
    @classmethod
    def _canonical(cls, variables: list[str]) -> list[str]:
        for v in variables:
            if v not in CANONICAL_FIELDS and v not in AGENT_VARIABLES:
                raise ValueError(f"{v!r} is not a canonical field nor one of {', '.join(AGENT_VARIABLES)}")
        return variables


class StaticRubric(_Model):
    id: str = pydantic.Field(pattern=RUBRIC_ID_RE)
    text: str = pydantic.Field(min_length=1)
    type: str | None = None
    importance: Literal["HIGH", "MEDIUM", "LOW"] | None = None


class RubricTemplate(_Model):
    """One version of a rubric metric, as metrics/judge/data/rubric_metrics.yaml defines it."""

    name: str  # the versioned name, e.g. general_quality_v1
    kind: Literal["adaptive", "given", "static", "claims", "criterion", "segmented"]
    description: str
    score: Literal["share", "all"] = "share"
    generation: StageSpec | None = None
    validation: StageSpec
    rubrics: list[StaticRubric] = pydantic.Field(default_factory=list)
    rubric_group: str | None = None  # the rubric_groups key that gives this metric's rubrics
    # what one judgment covers (metrics.judge.agent_views) and how the units' results make the score:
    #   single     one unit: the share of its judged rubrics
    #   turn_mean  each turn's score, then their mean over the evaluated turns (ADK's final_response_match_v2,
    #              safety_v1)
    #   pooled     the share over all (turn, rubric) verdicts pooled (ADK's rubric-based criteria)
    #   step_mean  each step's share, then the mean per turn, then the mean over turns (ADK's hallucinations_v1)
    unit: Literal["instance", "turn", "step", "conversation"] = "instance"
    aggregate: Literal["single", "turn_mean", "pooled", "step_mean"] = "single"
    inputs_any: list[list[str]] = pydantic.Field(default_factory=list)  # required inputs, alternatives (default: derived)
    turn_rubric_type: str | None = None  # criterion: the type of the turn's (and case's) rubrics it takes
    criterion_rubrics: list[StaticRubric] = pydantic.Field(default_factory=list)  # criterion: the criterion's own
    intermediate_steps: bool = False  # step: also judge the intermediate natural-language responses
    single_sample: bool = False  # judged once whatever judge.sampling_count (ADK's hallucinations_v1)
    adk: bool = False  # an ADK criterion: registered under its own name only

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> "RubricTemplate":
        if (self.kind in ("adaptive", "segmented")) != (self.generation is not None):
            raise ValueError("an adaptive or segmented metric, and only one, has a generation stage")
        if (self.kind == "static") != bool(self.rubrics):
            raise ValueError("a static metric, and only one, lists its rubrics")
        return self

    @property
    def base_name(self) -> str:
        return re.sub(r"_v\d+$", "", self.name)

    @property
    def group(self) -> str:
        return self.rubric_group or self.base_name

    def input_alternatives(self) -> tuple[tuple[str, ...], ...]:
        if self.inputs_any:
            return tuple(tuple(a) for a in self.inputs_any)
        return (self.inputs(),)

    def samples(self, sampling_count: int) -> int:
        """Validation samples: claims and segmented metrics are judged once."""
        return 1 if self.kind == "claims" or self.single_sample else sampling_count

    def inputs(self) -> tuple[str, ...]:
        """The canonical fields an instance needs (rubric_groups for a `given` metric)."""
        if self.inputs_any:
            return tuple(self.inputs_any[0])
        fields = ["response", *(v for v in self.validation.input_variables if v not in AGENT_VARIABLES)]
        if self.generation:
            fields += [v for v in self.generation.input_variables if v not in fields]
        if self.kind == "given":
            fields.append("rubric_groups")
        return tuple(fields)

    def static_rubrics(self) -> tuple[Rubric, ...]:
        return tuple(Rubric(r.id, r.text, r.type, r.importance) for r in self.rubrics)

    # ------------------------------------------------------------ generate

    def generation_inputs(self, fields: dict[str, Any]) -> dict[str, Any]:
        return {v: fields.get(v) for v in self.generation.input_variables}  # type: ignore[union-attr]

    def generation_key(self, fields: dict[str, Any]) -> str:
        """What the rubrics depend on: the metric (versioned) and its generation
        inputs, never the judge model, so that rubrics can be pinned across runs."""
        material = json.dumps({"metric": self.name, "inputs": self.generation_inputs(fields)},
                              sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    def render_generation(self, fields: dict[str, Any]) -> str:
        g = self.generation
        parts = [g.instruction]  # type: ignore[union-attr]
        if g.guidance:  # type: ignore[union-attr]
            parts.append(g.guidance)  # type: ignore[union-attr]
        parts.append(_inputs(self.generation_inputs(fields)))
        if self.kind == "segmented":
            parts.append('Answer with a JSON object: "sentences", the list of the text\'s sentences in order, each '
                         'copied exactly (an empty list when the text has none).')
            return "\n\n".join(parts)
        parts.append(
            f'Answer with a JSON object: "rubrics", a list of 1 to {g.max_rubrics} items, each with "text" '  # type: ignore[union-attr]
            '(the property, as a statement about the response), "type" and "importance" (HIGH, MEDIUM or LOW).')
        return "\n\n".join(parts)

    def generation_schema(self) -> dict[str, Any]:
        if self.kind == "segmented":
            return {"type": "OBJECT", "properties": {"sentences": {"type": "ARRAY", "items": {"type": "STRING"}}},
                    "required": ["sentences"]}
        rubric = {
            "type": "OBJECT",
            "properties": {
                "text": {"type": "STRING"},
                "type": {"type": "STRING"},
                "importance": {"type": "STRING", "enum": list(IMPORTANCE_WEIGHT)},
            },
            "required": ["text", "type", "importance"],
            "propertyOrdering": ["text", "type", "importance"],
        }
        return {
            "type": "OBJECT",
            "properties": {"rubrics": {"type": "ARRAY", "items": rubric, "minItems": 1,
                                       "maxItems": self.generation.max_rubrics}},  # type: ignore[union-attr]
            "required": ["rubrics"],
        }

    # ------------------------------------------------------------ validate

    def render_validation(self, fields: dict[str, Any], rubrics: tuple[Rubric, ...]) -> str:
        v = self.validation
        parts = [v.instruction]
        if self.kind == "segmented":
            parts.append("# Sentences\n" + "\n".join(f"- {r.rubric_id}: {r.text}" for r in rubrics))
        elif self.kind != "claims":
            parts.append("# Rubrics\n" + "\n".join(f"- {r.rubric_id}: {r.text}" for r in rubrics))
        parts.append(_inputs({name: fields.get(name) for name in v.input_variables}))
        parts.append(f"## Response\n{fields.get('response')}")
        if self.kind == "segmented":
            ids = ", ".join(r.rubric_id for r in rubrics)
            parts.append(
                f'Answer with a JSON object with exactly one property per sentence id ({ids}), each an object with '
                f'"reasoning" (brief, naming the context it rests on) and "label" (one of: {", ".join(SENTENCE_LABELS)}).')
        elif self.kind == "claims":
            parts.append(
                'Answer with a JSON object: "claims", a list with one item per claim, in order, each with "claim", '
                f'"label" (one of: {", ".join(CLAIM_LABELS)}), "reasoning" and "excerpt" (the context it rests on, '
                'or an empty text).')
        else:
            ids = ", ".join(r.rubric_id for r in rubrics)
            parts.append(
                f'Answer with a JSON object with exactly one property per rubric id ({ids}), each an object with '
                '"reasoning" (brief, specific to the response) and "verdict" (yes or no).')
        return "\n\n".join(parts)

    def validation_schema(self, rubrics: tuple[Rubric, ...]) -> dict[str, Any]:
        if self.kind == "claims":
            claim = {
                "type": "OBJECT",
                "properties": {"claim": {"type": "STRING"}, "label": {"type": "STRING", "enum": list(CLAIM_LABELS)},
                               "reasoning": {"type": "STRING"}, "excerpt": {"type": "STRING"}},
                "required": ["claim", "label", "reasoning", "excerpt"],
                "propertyOrdering": ["claim", "label", "reasoning", "excerpt"],
            }
            return {"type": "OBJECT", "properties": {"claims": {"type": "ARRAY", "items": claim}},
                    "required": ["claims"]}
        answer, values = ("label", SENTENCE_LABELS) if self.kind == "segmented" else ("verdict", VERDICTS)
        verdict = {
            "type": "OBJECT",
            "properties": {"reasoning": {"type": "STRING"}, answer: {"type": "STRING", "enum": list(values)}},
            "required": ["reasoning", answer],
            "propertyOrdering": ["reasoning", answer],
        }
        ids = [r.rubric_id for r in rubrics]
        return {"type": "OBJECT", "properties": {i: verdict for i in ids}, "required": ids, "propertyOrdering": ids}


def _inputs(values: dict[str, Any]) -> str:
    sections = []
    for name, value in values.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
        sections.append(f"## {name}\n{text}")
    return "# Inputs\n" + ("\n\n".join(sections) if sections else "(none besides the response)")


def resolve_aliases(raw: dict[str, dict]) -> dict[str, dict]:
    """The entries of a rubric metrics file with each `alias_of: NAME` written out: NAME's entry
    with the alias's own keys laid over it (one metric's prompts, written once, under a second
    name). ValueError, naming the entry, for an alias of an alias or of a name the file lacks."""
    out = {}
    for name, body in raw.items():
        target = body.get("alias_of")
        if target is None:
            out[name] = body
            continue
        if target not in raw:
            raise ValueError(f"{name}: alias_of {target!r}: no entry of that name")
        if "alias_of" in raw[target]:
            raise ValueError(f"{name}: alias_of {target!r}, itself an alias of {raw[target]['alias_of']!r}: "
                             "name the entry that holds the prompts")
        out[name] = {**raw[target], **{k: v for k, v in body.items() if k != "alias_of"}}
    return out


@functools.lru_cache(maxsize=1)
def builtin_rubric_templates() -> dict[str, RubricTemplate]:
    raw = resolve_aliases(yaml.safe_load(BUILTIN_RUBRIC_METRICS.read_text(encoding="utf-8")))
    return {name: RubricTemplate.model_validate({"name": name, **body}) for name, body in raw.items()}


# ---------------------------------------------------------------- parsing answers


def parse_stage_answer(text: str | None, kind: str, allowed: tuple[str, ...]) -> tuple[str, str | None]:
    """A stage's JSON answer -> (its canonical JSON, to keep as the judgment's
    verdict, and an explanation). `allowed` is, for validation, the rubric ids
    asked. Raises InvalidRubricAnswer when the answer does not fit.

    Checked here by hand rather than with a JSON Schema validator: the response
    schema is in Gemini's OpenAPI dialect (not JSON Schema), the service already
    enforces it, and what matters when it does not (the exact set of rubric ids,
    the closed vocabularies) is a few lines, with messages that say what was wrong."""
    try:
        answer = json.loads(text) if text is not None else None
    except json.JSONDecodeError as e:
        raise InvalidRubricAnswer(f"the judge's answer is not JSON: {str(e)[:100]}") from None
    if not isinstance(answer, dict):
        raise InvalidRubricAnswer("the judge's answer is not a JSON object")
    if kind == GENERATE:
        rubrics = _parse_generated(answer)
        return rubrics_to_json(rubrics), f"{len(rubrics)} rubrics generated"
    if kind == VALIDATE:
        verdicts = _parse_verdicts(answer, allowed)
        met = sum(v == "yes" for v, _ in verdicts.values())
        return json.dumps({k: {"verdict": v, "reasoning": r} for k, (v, r) in verdicts.items()},
                          sort_keys=True, ensure_ascii=False), f"{met} of {len(verdicts)} rubrics met"
    if kind == SEGMENT:
        sentences = _parse_sentences(answer)
        return rubrics_to_json(sentences), f"{len(sentences)} sentences"
    if kind == LABEL:
        labels = _parse_verdicts(answer, allowed, "label", SENTENCE_LABELS)
        passed = sum(v in PASSING_SENTENCES for v, _ in labels.values())
        return json.dumps({k: {"label": v, "reasoning": r} for k, (v, r) in labels.items()},
                          sort_keys=True, ensure_ascii=False), \
            f"{passed} of {len(labels)} sentences supported or not applicable"
    if kind == CLAIMS:
        claims = _parse_claims(answer)
        passed = sum(c["label"] in PASSING_CLAIMS for c in claims)
        return json.dumps(claims, ensure_ascii=False), f"{passed} of {len(claims)} claims supported or needing no support"
    raise InvalidRubricAnswer(f"unknown answer kind {kind!r}")


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRubricAnswer(f"{what} is not a non-empty text")
    return value.strip()


def _parse_generated(answer: dict[str, Any]) -> tuple[Rubric, ...]:
    items = answer.get("rubrics")
    if not isinstance(items, list) or not items:
        raise InvalidRubricAnswer("'rubrics' is not a non-empty list")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRubricAnswer(f"rubric {i} is not an object")
        importance = item.get("importance")
        if importance not in IMPORTANCE_WEIGHT:
            raise InvalidRubricAnswer(f"rubric {i}: importance {importance!r} is not one of HIGH, MEDIUM, LOW")
        out.append(Rubric(f"r{i + 1}", _text(item.get("text"), f"rubric {i} text"),
                          _text(item.get("type"), f"rubric {i} type"), importance))
    return tuple(out)


def _parse_sentences(answer: dict[str, Any]) -> tuple[Rubric, ...]:
    items = answer.get("sentences")
    if not isinstance(items, list):
        raise InvalidRubricAnswer("'sentences' is not a list")
    texts = [_text(item, f"sentence {i}") for i, item in enumerate(items)]
    return tuple(Rubric(f"s{i + 1}", t, "sentence", None) for i, t in enumerate(texts))


def _parse_verdicts(answer: dict[str, Any], asked: tuple[str, ...], key: str = "verdict",
                    values: tuple[str, ...] = VERDICTS) -> dict[str, tuple[str, str]]:
    missing = [i for i in asked if i not in answer]
    invented = sorted(set(answer) - set(asked))
    if missing or invented:
        raise InvalidRubricAnswer(
            "the verdicts do not match the rubrics asked"
            + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; not asked: {', '.join(invented)}" if invented else ""))
    out = {}
    for rubric_id in asked:
        item = answer[rubric_id]
        if not isinstance(item, dict) or item.get(key) not in values:
            raise InvalidRubricAnswer(f"rubric {rubric_id}: the {key} is not "
                                      + ("yes or no" if values == VERDICTS else f"one of {', '.join(values)}"))
        out[rubric_id] = (item[key], _text(item.get("reasoning"), f"rubric {rubric_id} reasoning"))
    return out


def _parse_claims(answer: dict[str, Any]) -> list[dict[str, str]]:
    items = answer.get("claims")
    if not isinstance(items, list):
        raise InvalidRubricAnswer("'claims' is not a list")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("label") not in CLAIM_LABELS:
            raise InvalidRubricAnswer(f"claim {i}: the label is not one of {', '.join(CLAIM_LABELS)}")
        excerpt = item.get("excerpt")
        out.append({"claim": _text(item.get("claim"), f"claim {i}"), "label": item["label"],
                    "reasoning": _text(item.get("reasoning"), f"claim {i} reasoning"),
                    "excerpt": excerpt if isinstance(excerpt, str) else ""})
    return out


# ---------------------------------------------------------------- scoring


@dataclasses.dataclass(frozen=True)
class RubricVerdict:
    rubric: Rubric
    verdict: bool | None  # None: not judged
    reasoning: str | None
    label: str | None = None  # claims: the judge's label


@dataclasses.dataclass(frozen=True)
class RubricScore:
    score: float
    weighted_score: float
    met: int
    judged: int
    confidence: float
    verdicts: tuple[RubricVerdict, ...]
    explanation: str


def majority_verdicts(rubrics: tuple[Rubric, ...], samples: list[dict[str, tuple[str, str]]]
                      ) -> tuple[tuple[RubricVerdict, ...], float]:
    """Per rubric, the majority over the samples that judged it; a tie is no
    (ADK's rule). Also the confidence: the share of all (rubric, sample)
    verdicts that agree with the final ones."""
    out, agreeing, total = [], 0, 0
    for rubric in rubrics:
        said = [s[rubric.rubric_id] for s in samples if rubric.rubric_id in s]
        if not said:
            out.append(RubricVerdict(rubric, None, None))
            continue
        yes = sum(v == "yes" for v, _ in said)
        verdict = yes > len(said) - yes
        agreeing += yes if verdict else len(said) - yes
        total += len(said)
        reasoning = next(r for v, r in said if (v == "yes") == verdict)
        out.append(RubricVerdict(rubric, verdict, reasoning))
    return tuple(out), (agreeing / total if total else 0.0)


def claim_verdicts(claims: list[dict[str, str]]) -> tuple[RubricVerdict, ...]:
    return tuple(
        RubricVerdict(Rubric(f"c{i + 1}", c["claim"], "claim", None), c["label"] in PASSING_CLAIMS,
                      c["reasoning"] + (f" [excerpt: {c['excerpt']}]" if c.get("excerpt") else ""), c["label"])
        for i, c in enumerate(claims))


def score_verdicts(template: RubricTemplate, verdicts: tuple[RubricVerdict, ...], confidence: float) -> RubricScore:
    """Score = share of the judged rubrics met ("all": 1 when all are met, else 0);
    the weighted share weighs each judged rubric by its importance. Raises
    MetricError when none was judged."""
    judged = [v for v in verdicts if v.verdict is not None]
    if not judged:
        if template.kind == "claims" and verdicts == ():
            raise MetricError("the judge found no claim in the response")
        raise MetricError("no rubric was judged")
    met = [v for v in judged if v.verdict]
    share = len(met) / len(judged)
    weighted = sum(v.rubric.weight() for v in met) / sum(v.rubric.weight() for v in judged)
    if template.score == "all":
        share = weighted = float(len(met) == len(judged))
    failing = [v for v in judged if not v.verdict]
    explanation = (f"{len(met)} of {len(judged)} claims supported or needing no support" if template.kind == "claims"
                   else f"{len(met)} of {len(judged)} rubrics met")
    if failing:
        explanation += ". Not met: " + "; ".join(
            f"{v.rubric.rubric_id} ({_clip(v.rubric.text)}): {_clip(v.reasoning or '')}" for v in failing)
    return RubricScore(share, weighted, len(met), len(judged), confidence, verdicts, explanation)


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


# ---------------------------------------------------------------- agent judges: rubrics per turn, units' scores


def label_verdicts(rubrics: tuple[Rubric, ...], labels: dict[str, tuple[str, str]]) -> tuple[RubricVerdict, ...]:
    """A segmented metric's sentences with their labels: supported and not_applicable pass."""
    out = []
    for r in rubrics:
        if r.rubric_id in labels:
            label, reasoning = labels[r.rubric_id]
            out.append(RubricVerdict(r, label in PASSING_SENTENCES, reasoning, label))
        else:
            out.append(RubricVerdict(r, None, None))
    return tuple(out)


def criterion_rubrics(template: RubricTemplate, turn_rubrics: tuple[dict[str, Any], ...]) -> tuple[Rubric, ...]:
    """ADK's effective rubrics of a turn: the criterion's own (not filtered) and the
    turn's, its case's copied in, whose type is the metric's
    (rubric_based_evaluator.py). Raises ValueError on a repeated id or none at all."""
    out = [Rubric(r.id, r.text, r.type, r.importance) for r in template.criterion_rubrics]
    for i, item in enumerate(turn_rubrics):
        if item.get("type") != template.turn_rubric_type:
            continue
        content = item.get("rubric_content") or {}
        text = content.get("text_property") if isinstance(content, dict) else None
        if not text:
            raise ValueError(f"rubric {item.get('rubric_id')!r} has no rubric_content.text_property")
        out.append(Rubric(str(item.get("rubric_id") or f"t{i + 1}"), text, item.get("type"), None))
    if not out:
        raise ValueError(f"rubrics are required: give the criterion's 'rubrics', or rubrics of type "
                         f"{template.turn_rubric_type} in the case or its invocations")
    ids = [r.rubric_id for r in out]
    repeated = sorted(k for k, c in Counter(ids).items() if c > 1)
    if repeated:
        raise ValueError(f"rubric ids repeat ({', '.join(repeated)})")
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class UnitResult:
    turn: int | None
    step: int | None
    score: RubricScore | None  # None: the unit was not evaluated
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class CaseScore:
    score: float
    weighted_score: float
    met: int
    judged: int
    confidence: float
    explanation: str
    per_turn: list[float | None] | None  # the turns' scores (None: not evaluated), for multi-unit metrics


def aggregate_units(template: RubricTemplate, results: list[UnitResult]) -> CaseScore:
    """One instance's score from its units' results, by the template's rule (ADK
    2.13.0's aggregation for its criteria): a unit not evaluated is left out;
    none evaluated is a MetricError naming why."""
    done = [r for r in results if r.score is not None]
    if not done:
        reasons = list(dict.fromkeys(r.error for r in results if r.error)) or ["nothing to judge"]
        if len(results) == 1:
            raise MetricError(reasons[0])
        raise MetricError(f"no {'turn' if template.unit != 'step' else 'step'} evaluated: " + "; ".join(reasons))
    met = sum(r.score.met for r in done)
    judged = sum(r.score.judged for r in done)
    confidence = sum(r.score.confidence for r in done) / len(done)
    weighted = sum(r.score.weighted_score for r in done) / len(done)
    turns = sorted({r.turn for r in results if r.turn is not None})
    per_turn: list[float | None] | None = None
    if template.aggregate == "single":
        only = done[0].score
        return CaseScore(only.score, only.weighted_score, only.met, only.judged, only.confidence, only.explanation, None)
    if template.aggregate == "pooled":
        # mean over all (turn, rubric) verdicts pooled: a micro-average (MeanInvocationResultsSummarizer)
        score = met / judged
        weighted = (sum(v.rubric.weight() for r in done for v in r.score.verdicts if v.verdict)
                    / sum(v.rubric.weight() for r in done for v in r.score.verdicts if v.verdict is not None))
        per_turn = [next((r.score.score for r in done if r.turn == t), None) for t in turns]
    elif template.aggregate == "turn_mean":
        score = sum(r.score.score for r in done) / len(done)
        per_turn = [next((r.score.score for r in done if r.turn == t), None) for t in turns]
    else:  # step_mean: steps' shares -> mean per turn -> mean over turns
        per_turn = []
        for t in turns:
            steps = [r.score.score for r in done if r.turn == t]
            per_turn.append(sum(steps) / len(steps) if steps else None)
        present = [s for s in per_turn if s is not None]
        score = sum(present) / len(present)
    evaluated = sum(s is not None for s in per_turn)
    what = "steps" if template.aggregate == "step_mean" else "turns"
    explanation = (f"{evaluated} of {len(turns)} turns evaluated" if len(turns) > 1 else
                   (f"{len(done)} of {len(results)} {what} evaluated" if len(results) > 1 else done[0].score.explanation))
    if len(turns) > 1 or len(results) > 1:
        explanation += "; " + " | ".join(
            (f"turn {r.turn + 1}" if r.turn is not None else "") + (f" step {r.step + 1}" if r.step is not None else "")
            + ": " + (r.score.explanation if r.score else f"not evaluated ({r.error})") for r in results)
    return CaseScore(score, weighted, met, judged, confidence, _clip(explanation, 2000), per_turn)
