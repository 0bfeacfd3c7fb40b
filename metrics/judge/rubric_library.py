"""The built-in rubric-based metrics, registered in the one metric registry.

Every prompt of metrics/judge/data/rubric_metrics.yaml is evalbeam's own, so every one is
registered as evalbeam_<name>: each version under its versioned name
(`evalbeam_general_quality_v1`), and the latest version under the unversioned
name (`evalbeam_general_quality`), except where that name already belongs to
one of the template judge metrics (`evalbeam_safety`, `evalbeam_text_quality`,
`evalbeam_instruction_following` keep their 1..5 or 0/1 meaning). Their
factories return the RubricTemplate to run.

The names without the prefix are Vertex's predefined rubric metrics
(agentplatform's RubricMetric, whose prompts and scoring Vertex's hosted
evaluation service keeps) or ADK's criteria: a name Vertex's service scores is
refused (VERTEX_HOSTED), naming evalbeam's; a name google-adk's own evaluator
renders (metrics.judge.adk_judges) gives ADK's score under ADK's name.
"""
from __future__ import annotations

import json
import re
from typing import Any

import pydantic

from evalbeam.metrics.judge.adk_judges import EVALBEAM_NAMES, RUBRIC_CRITERIA, AdkHallucinations, AdkJudge
from evalbeam.metrics.judge.rubrics import StaticRubric, builtin_rubric_templates
from evalbeam.metrics.judge.templates import builtin_templates
from evalbeam.metrics.registry import NoParams, refuse, register
from evalbeam.metrics.rows.trace import get_key


class RubricParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    rubric_group: str | None = pydantic.Field(
        None, min_length=1,
        description="the rubric_groups key whose rubrics this metric uses (default: the metric's unversioned name)")


class CriterionParams(pydantic.BaseModel):
    """ADK's RubricsBasedCriterion: the criterion's own rubrics (ADK's Rubric objects)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    rubrics: tuple[dict[str, Any], ...] = pydantic.Field(
        (), description="ADK rubrics {rubric_id, rubric_content: {text_property}, type}, added to the turn's rubrics")

    @pydantic.field_validator("rubrics")
    @classmethod
    def _adk_rubrics(cls, rubrics):
        for i, r in enumerate(rubrics):
            content = get_key(r, "rubric_content") or {}
            text = get_key(content, "text_property") if isinstance(content, dict) else None
            rubric_id = get_key(r, "rubric_id")
            if not isinstance(rubric_id, str) or not rubric_id or not isinstance(text, str) or not text.strip():
                raise ValueError(f"rubrics[{i}] needs a rubric_id and rubric_content.text_property")
        return rubrics

    def static(self) -> list[StaticRubric]:
        out = []
        for r in self.rubrics:
            content = get_key(r, "rubric_content")
            out.append(StaticRubric(id=get_key(r, "rubric_id"),
                                    text=get_key(content, "text_property"), type=r.get("type")))
        return out


class HallucinationParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    evaluate_intermediate_nl_responses: bool = pydantic.Field(
        False, description="also judge the agent's intermediate natural-language responses, each against the "
                           "context before it (default: the final response only)")


# Vertex's predefined rubric metrics that metrics/judge/data/rubric_metrics.yaml has prompts of the same name for:
# google-cloud-aiplatform 2.7's agentplatform._genai._evals_constant (SUPPORTED_PREDEFINED_METRICS, and the
# unversioned names RubricMetric resolves to one of them), scored by Vertex's hosted evaluation service with
# its own prompts. ADK's multi_turn_*_v1 are ADK's too: refused in metrics.judge.adk_judges.HOSTED_CRITERIA
VERTEX_HOSTED = frozenset({
    "general_quality", "general_quality_v1", "text_quality_v1", "instruction_following_v1",
    "multi_turn_general_quality", "multi_turn_general_quality_v1",
    "multi_turn_text_quality", "multi_turn_text_quality_v1",
    "final_response_reference_free", "final_response_reference_free_v1", "final_response_match",
    "grounding", "grounding_v1", "final_response_quality", "final_response_quality_v1",
    "tool_use_quality", "tool_use_quality_v1", "hallucination", "hallucination_v1",
    "multi_turn_task_success", "multi_turn_trajectory_quality", "multi_turn_tool_use_quality",
})


def _refuse_vertex(name: str, own: str) -> None:
    refuse(name, f"Vertex AI scores it with its predefined rubric metric {name} (RubricMetric), on Vertex's "
                 "hosted evaluation service: the service's own prompts and scoring, which it does not publish, so "
                 f"evalbeam cannot give its score under this name. evalbeam's own prompt for it is {own} "
                 "(not Vertex's score)")


def _version(name: str) -> int:
    return int(re.search(r"_v(\d+)$", name).group(1))


def _register_all() -> None:
    templates = builtin_rubric_templates()
    latest: dict[str, str] = {}
    for name, template in templates.items():
        if _version(name) > _version(latest.get(template.base_name, "x_v0")):
            latest[template.base_name] = name
    taken = set(builtin_templates())
    names = [(name, name) for name in templates]
    names += [(base, versioned) for base, versioned in latest.items()
              if base not in taken and not templates[versioned].adk]
    for borrowed, versioned in names:
        template = templates[versioned]
        # every prompt here is evalbeam's: ADK's name renders ADK's own prompt (metrics.judge.adk_judges) or is
        # refused there; Vertex's name is refused below
        registered = EVALBEAM_NAMES.get(borrowed, f"evalbeam_{borrowed}")
        if borrowed in VERTEX_HOSTED:
            _refuse_vertex(borrowed, registered)
        score_range = "0/1" if template.score == "all" or template.kind == "static" else "0..1"

        def factory(p, template=template):
            group = getattr(p, "rubric_group", None)
            if isinstance(p, CriterionParams) and p.rubrics:
                return template.model_copy(update={"criterion_rubrics": p.static()})
            if isinstance(p, HallucinationParams):
                return template.model_copy(update={"intermediate_steps": p.evaluate_intermediate_nl_responses})
            return template.model_copy(update={"rubric_group": group}) if group else template

        # only adaptive and given metrics read rubric_groups
        params = {"criterion": CriterionParams, "segmented": HallucinationParams}.get(
            template.kind, RubricParams if template.kind in ("adaptive", "given") else NoParams)
        register(registered, kind="rubric", inputs=template.input_alternatives(), params=params, score_range=score_range,
                 description=f"rubric judge ({template.kind}, {versioned}): {template.description}")(factory)


class AdkRubricParams(CriterionParams):
    """ADK's RubricsBasedCriterion, rendered and scored by google-adk's own evaluator."""

    include_intermediate_responses_in_final: bool = pydantic.Field(
        False, description="judge the turn's intermediate natural-language text joined with its final response "
                           "(ADK's BaseCriterion field)")


def _register_adk() -> None:
    for name in RUBRIC_CRITERIA:
        # google.adk is imported when the judge is used (configs.MetricSpec checks it is there)
        register(name, kind="pointwise", inputs=builtin_rubric_templates()[name].input_alternatives(),
                 params=AdkRubricParams,
                 score_range="0..1",
                 description=f"ADK's {name}: google-adk's own evaluator renders each turn's prompt with the "
                             "criterion's and the turn's rubrics and reads the answers (the agent extra)")(
            lambda p, name=name: AdkJudge(name, p.include_intermediate_responses_in_final,
                                          json.dumps(list(p.rubrics), sort_keys=True)))
    # two dependent judge calls per step (segment, then validate): the rubric stage's two stages
    register("hallucinations_v1", kind="rubric",
             inputs=builtin_rubric_templates()["hallucinations_v1"].input_alternatives(), params=HallucinationParams, score_range="0..1",
             description="ADK's hallucinations_v1: google-adk's own evaluator segments each response step into "
                         "sentences, then validates them against the step's context (the agent extra)")(
        lambda p: AdkHallucinations(evaluate_intermediate_nl_responses=p.evaluate_intermediate_nl_responses))


_register_all()
_register_adk()
