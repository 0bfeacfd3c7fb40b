"""Judge prompt templates: the service's template structure, rendered into
prompts with a JSON answer schema, and the judge's answers parsed and checked.

A pointwise judge answers {"explanation": str, "score": one of the rubric's
scores}; a pairwise judge answers {"explanation": str, "choice": "A" | "B" |
"SAME"}. Anything else is an invalid judgment (and is retried by the client).
A template holding a published fixed text (Vertex AI's: metrics.judge.vertex_templates)
renders that text with its {variables} filled, and asks for the fields it names
(a pairwise answer's choice is then "pairwise_choice").
"""
from __future__ import annotations

import functools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml

from evalbeam.metrics.rows.fields import CANONICAL_FIELDS
from evalbeam.metrics.judge.rubrics import InvalidRubricAnswer, parse_stage_answer
from evalbeam.metrics.registry import MetricError
from evalbeam.metrics.taxonomy import TaxonomyError, parse_discovery
from evalbeam.metrics.red_team import AttackError, parse_generation

BUILTIN_TEMPLATES = Path(__file__).with_name("data") / "judge_metrics.yaml"
PAIRWISE_CHOICES = ("A", "B", "SAME")
# a {variable} of a fixed template text: Vertex's syntax (vertexai.evaluation.prompt_template)
TEMPLATE_VARIABLE = re.compile(r"\{([_a-zA-Z][_a-zA-Z0-9]*)\}")
CHOICE_SCORE = {"CANDIDATE": 1.0, "TIE": 0.5, "BASELINE": 0.0}

POINTWISE_INSTRUCTION = (
    "You are an impartial expert evaluator. Judge the AI-generated response below against the criteria, "
    "using the rating rubric, and follow the evaluation steps. Base your judgment only on the inputs shown."
)
PAIRWISE_INSTRUCTION = (
    "You are an impartial expert evaluator. Compare two AI-generated responses, A and B, to the same inputs "
    "against the criteria, and decide which is better. Their order says nothing about their quality, and "
    "length is not quality. Base your judgment only on the inputs shown."
)
PAIRWISE_RUBRIC = {
    "A": "Response A is better than response B on the criteria.",
    "SAME": "Neither response is better than the other on the criteria.",
    "B": "Response B is better than response A on the criteria.",
}


class InvalidJudgment(ValueError):
    """The judge's answer is not valid JSON of the expected shape."""


class JudgeTemplate(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    criteria: dict[str, str] = pydantic.Field(min_length=1)
    rating_rubric: dict[str, str] = pydantic.Field(min_length=2)
    input_variables: list[str] = pydantic.Field(default_factory=list)
    instruction: str | None = None
    metric_definition: str | None = None
    evaluation_steps: dict[str, str] | None = None
    few_shot_examples: list[str] | None = None
    aggregation: Literal["mean", "majority"] | None = None
    # judged on every turn of an agent trace (a flat row is one turn); the score is the mean over the
    # turns judged (ADK's response_evaluation_score)
    per_turn: bool = False
    # judged once whatever judge.sampling_count (ADK's response_evaluation_score: ADK asks Vertex's
    # evaluation service once per turn and samples nothing)
    single_sample: bool = False
    # Whose prompt this is: evalbeam's own (rendered from the fields above), or a fixed text a
    # reference package publishes (vertex_ai: metrics.judge.vertex_templates), rendered by
    # filling its {variables} and nothing else; criteria and rating_rubric then describe it
    # (the rubric's keys are its scale).
    source: Literal["evalbeam", "vertex_ai"] = "evalbeam"
    pointwise_text: str | None = None
    pairwise_text: str | None = None
    choice_field: str = "choice"  # the pairwise answer's field (Vertex's texts ask for pairwise_choice)

    @pydantic.field_validator("input_variables")
    @classmethod
    def _canonical(cls, variables: list[str]) -> list[str]:
        for v in variables:
            if v not in CANONICAL_FIELDS:
                raise ValueError(f"{v!r} is not a canonical field (map a dataset column to one with column_mapping)")
        return variables

    # ------------------------------------------------------------ pointwise

    def scores(self) -> dict[str, float]:
        out = {}
        for key in self.rating_rubric:
            try:
                out[key] = float(key)
            except ValueError:
                raise ValueError(f"rating_rubric key {key!r} is not a number") from None
        return out

    def samples(self, sampling_count: int) -> int:
        return 1 if self.single_sample else sampling_count

    def resolved_aggregation(self) -> str:
        return self.aggregation or ("majority" if len(self.rating_rubric) == 2 else "mean")

    def render_pointwise(self, fields: dict[str, Any]) -> str:
        if self.pointwise_text is not None:
            return fill_variables(self.pointwise_text, fields)
        parts = self._head(self.instruction or POINTWISE_INSTRUCTION, self.rating_rubric)
        parts.append(self._inputs(fields))
        parts.append(f"## Response\n{fields['response']}")
        allowed = ", ".join(self.rating_rubric)
        parts.append(
            'Answer with a JSON object: "explanation" (your reasoning, brief and specific to the inputs) and '
            f'"score" (exactly one of: {allowed}).'
        )
        return "\n\n".join(parts)

    def pointwise_schema(self) -> dict[str, Any]:
        return {
            "type": "OBJECT",
            "properties": {
                "explanation": {"type": "STRING"},
                "score": {"type": "STRING", "enum": list(self.rating_rubric)},
            },
            "required": ["explanation", "score"],
            "propertyOrdering": ["explanation", "score"],
        }


    # ------------------------------------------------------------ pairwise

    def render_pairwise(self, fields: dict[str, Any], swapped: bool) -> str:
        """A is the baseline and B the candidate; swapped, the other way round."""
        baseline, candidate = fields["baseline_model_response"], fields["response"]
        first, second = (candidate, baseline) if swapped else (baseline, candidate)
        if self.pairwise_text is not None:  # the text shows baseline_model_response as A, response as B
            return fill_variables(self.pairwise_text, {**fields, "baseline_model_response": first, "response": second})
        # A template written for pairwise judging has its own A/B/SAME rubric; one
        # written for pointwise (every built-in pairwise_<name>) gets the standard one.
        rubric = self.rating_rubric if set(self.rating_rubric) == set(PAIRWISE_CHOICES) else PAIRWISE_RUBRIC
        parts = self._head(self.instruction or PAIRWISE_INSTRUCTION, rubric)
        parts.append(self._inputs(fields))
        parts.append(f"## Response A\n{first}")
        parts.append(f"## Response B\n{second}")
        parts.append(
            'Answer with a JSON object: "explanation" (your reasoning, brief and specific to the inputs) and '
            '"choice" (exactly one of: A, B, SAME).'
        )
        return "\n\n".join(parts)

    def pairwise_schema(self) -> dict[str, Any]:
        field = self.choice_field
        return {
            "type": "OBJECT",
            "properties": {
                "explanation": {"type": "STRING"},
                field: {"type": "STRING", "enum": list(PAIRWISE_CHOICES)},
            },
            "required": ["explanation", field],
            "propertyOrdering": ["explanation", field],
        }


    # ------------------------------------------------------------ shared

    def _head(self, instruction: str, rubric: dict[str, str]) -> list[str]:
        parts = [instruction]
        if self.metric_definition:
            parts.append(f"# Metric\n{self.metric_definition}")
        parts.append("# Criteria\n" + "\n".join(f"- {k}: {v}" for k, v in self.criteria.items()))
        parts.append("# Rating rubric\n" + "\n".join(f"- {k}: {v}" for k, v in rubric.items()))
        if self.evaluation_steps:
            parts.append("# Evaluation steps\n" + "\n".join(f"- {k}: {v}" for k, v in self.evaluation_steps.items()))
        if self.few_shot_examples:
            parts.append("# Examples\n" + "\n\n".join(self.few_shot_examples))
        return parts

    def _inputs(self, fields: dict[str, Any]) -> str:
        sections = []
        for name in self.input_variables:
            value = fields.get(name)
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
            sections.append(f"## {name}\n{text}")
        return "# Inputs\n" + ("\n\n".join(sections) if sections else "(none besides the response)")


def fill_variables(text: str, fields: dict[str, Any]) -> str:
    """A fixed template text with each {variable} it names replaced by the field's value (a
    string as it is, anything else as JSON), in one pass, so a value that itself contains
    "{response}" is not filled again (Vertex's PromptTemplate.assemble replaces variable by
    variable); a {name} that is not a field stays as written."""
    def value(match):
        name = match.group(1)
        if name not in fields or fields[name] is None:
            return match.group(0)
        v = fields[name]
        return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, indent=2)

    return TEMPLATE_VARIABLE.sub(value, text)


def parse_answer(text: str | None, field: str, allowed: tuple[str, ...]) -> tuple[str, str]:
    """The judge's JSON answer -> (the allowed value it chose, its explanation).
    Raises InvalidJudgment for anything else. A rubric stage's answer (field
    rubrics | verdicts | claims) is checked by metrics.judge.rubrics instead."""
    if field == "text":  # a free-text answer (metrics.judge.client.FREE_TEXT): the text itself
        if not isinstance(text, str) or not text.strip():
            raise InvalidJudgment("the model's answer has no text")
        return text, None
    if field == "mode":  # a failure's classification (metrics.failure_modes): any mode named is kept
        answer = _json_object(text)
        mode, rationale = answer.get("mode"), answer.get("rationale")
        if not isinstance(mode, str) or not mode.strip():
            raise InvalidJudgment("the judge's answer names no mode")
        if not isinstance(rationale, str) or not rationale.strip():
            raise InvalidJudgment("the judge's answer has no rationale")
        return mode.strip(), rationale
    if field == "modes":  # a taxonomy of failure modes proposed from a sample (metrics.taxonomy)
        try:
            return parse_discovery(text)
        except TaxonomyError as e:
            raise InvalidJudgment(str(e)) from None
    if field == "scenarios":  # conversation scenarios generated (metrics.scenarios): each item checked on its own later
        from evalbeam.metrics.scenarios import parse_generation as parse_scenarios  # only where scenarios are read

        try:
            return parse_scenarios(text), None
        except ValueError as e:
            raise InvalidJudgment(str(e)) from None
    if field == "attacks":  # a red-team attack set written from the agent's description (metrics.red_team)
        try:
            return parse_generation(text)
        except AttackError as e:
            raise InvalidJudgment(str(e)) from None
    if field in ("rubrics", "verdicts", "claims", "sentences", "labels"):
        try:
            return parse_stage_answer(text, field, allowed)
        except InvalidRubricAnswer as e:
            raise InvalidJudgment(str(e)) from None
    answer = _json_object(text)
    value = answer.get(field)
    key = _score_key(value)
    if key not in allowed:
        raise InvalidJudgment(f"{field} {value!r} is not one of {list(allowed)}")
    return key, _explanation(answer)


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        answer = json.loads(text)
    except (json.JSONDecodeError, TypeError) as e:
        raise InvalidJudgment(f"the judge's answer is not JSON: {str(e)[:100]}") from None
    if not isinstance(answer, dict):
        raise InvalidJudgment("the judge's answer is not a JSON object")
    return answer


def _explanation(answer: dict[str, Any]) -> str:
    explanation = answer.get("explanation")
    if not isinstance(explanation, str) or not explanation.strip():
        raise InvalidJudgment("the judge's answer has no explanation")
    return explanation


def _score_key(score: Any) -> str | None:
    if isinstance(score, bool):
        return None
    if isinstance(score, (int, float)):
        return str(int(score)) if float(score).is_integer() else str(score)
    return score if isinstance(score, str) else None


@functools.lru_cache(maxsize=1)
def builtin_templates() -> dict[str, JudgeTemplate]:
    raw = yaml.safe_load(BUILTIN_TEMPLATES.read_text(encoding="utf-8"))
    return {name: JudgeTemplate.model_validate(body) for name, body in raw.items()}


# ---------------------------------------------------------------- aggregation


def aggregate_pointwise(template: JudgeTemplate, samples: list[tuple[float, str]]) -> tuple[float, str, float]:
    """Samples (score, explanation) -> (score, explanation, confidence).
    mean: the mean score; majority: the most common score (a tie goes to the
    lower score). Confidence: the share of samples equal to the rubric score
    nearest the final score. The explanation is that of an agreeing sample."""
    if not samples:
        raise MetricError("no judgment succeeded")
    scores = [s for s, _ in samples]
    if template.resolved_aggregation() == "majority":
        counts = Counter(scores)
        top = max(counts.values())
        final = min(s for s, c in counts.items() if c == top)
    else:
        final = sum(scores) / len(scores)
    nearest = min(template.scores().values(), key=lambda v: (abs(v - final), v))
    agreeing = [e for s, e in samples if s == nearest]
    explanation = agreeing[0] if agreeing else samples[0][1]
    return final, explanation, len(agreeing) / len(samples)


def pairwise_verdict(normal: str, swapped: str) -> str:
    """Choices of the two orders -> BASELINE | CANDIDATE | TIE. In the normal
    order A is the baseline; in the swapped order A is the candidate. The two
    must agree, else position decided it: a TIE."""
    first = {"A": "BASELINE", "B": "CANDIDATE", "SAME": "TIE"}[normal]
    second = {"A": "CANDIDATE", "B": "BASELINE", "SAME": "TIE"}[swapped]
    return first if first == second else "TIE"


def orders_agree(normal: str, swapped: str) -> bool:
    """Whether the two orders chose the same response (or both SAME): pairwise_verdict
    without its tie-break, the unit of position consistency."""
    return {"A": "BASELINE", "B": "CANDIDATE", "SAME": "TIE"}[normal] == \
        {"A": "CANDIDATE", "B": "BASELINE", "SAME": "TIE"}[swapped]


def aggregate_pairwise(samples: list[tuple[str, str]]) -> tuple[str, str, float]:
    """Samples (verdict, explanation) -> (verdict, explanation, confidence), by
    majority; a tie between verdicts is a TIE."""
    if not samples:
        raise MetricError("no judgment succeeded")
    counts = Counter(v for v, _ in samples)
    top = max(counts.values())
    leaders = [v for v, c in counts.items() if c == top]
    final = leaders[0] if len(leaders) == 1 else "TIE"
    agreeing = [e for v, e in samples if v == final]
    return final, (agreeing[0] if agreeing else samples[0][1]), len(agreeing) / len(samples)
