"""The built-in rubric-based metrics, registered in the one metric registry:
every version of configs/rubric_metrics.yaml under its versioned name
(`general_quality_v1`), and the latest version under the unversioned name
(`general_quality`), except where that name already belongs to one of the
template judge metrics (`safety`, `text_quality`, `instruction_following`
keep their 1..5 or 0/1 meaning; their rubric forms are the `_v1` names).
Their factories return the RubricTemplate to run."""
from __future__ import annotations

import re

import pydantic

from metrics.judge.rubrics import builtin_rubric_templates
from metrics.judge.templates import builtin_templates
from metrics.registry import NoParams, register


class RubricParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    rubric_group: str | None = pydantic.Field(
        None, min_length=1,
        description="the rubric_groups key whose rubrics this metric uses (default: the metric's unversioned name)")


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
    names += [(base, versioned) for base, versioned in latest.items() if base not in taken]
    for registered, versioned in names:
        template = templates[versioned]
        score_range = "0/1" if template.score == "all" or template.kind == "static" else "0..1"

        def factory(p, template=template):
            group = getattr(p, "rubric_group", None)
            return template.model_copy(update={"rubric_group": group}) if group else template

        params = RubricParams if template.kind in ("adaptive", "given") else NoParams  # only these read rubric_groups
        register(registered, kind="rubric", inputs=template.inputs(), params=params, score_range=score_range,
                 description=f"rubric judge ({template.kind}, {versioned}): {template.description}")(factory)


_register_all()
