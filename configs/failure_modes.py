"""The `failure_modes:` section of a config: which metrics' failures are classified,
and into which taxonomy (metrics.failure_modes). A shape only: the taxonomy file is
read where the pipeline is built (transforms.failure_modes.taxonomy_of), not while validating."""
from __future__ import annotations

import posixpath
from typing import Any

import pydantic

from evalbeam.metrics.taxonomy import BUILTIN, DISCOVER
from evalbeam.metrics.names import did_you_mean


class FailureModesConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    metrics: list[str] = pydantic.Field(
        min_length=1, description="the metrics (their 'as' names) whose failures are classified")
    taxonomy: str = pydantic.Field(
        "task_success", min_length=1,
        description="task_success | tool_use (built in) | a YAML file of modes (.yaml/.yml) | discover")
    discover_sample: int = pydantic.Field(
        200, ge=1, le=5000, description="discover: how many failures (a seeded sample) the judge sees")
    seed: int = pydantic.Field(0, description="discover: the seed of the sample")
    taxonomies_from: list[str] = pydantic.Field(
        default_factory=list,
        description="discover: earlier runs' taxonomies tables (Parquet folders or bq://...): the earliest "
                    "discovered taxonomy in them is reused instead of discovering again")

    taxonomy_digest: str | None = pydantic.Field(
        None, pattern=r"^[0-9a-f]{16}$",
        description="with taxonomies_from: reuse the discovered taxonomy of this digest (default: the earliest)")

    @pydantic.model_validator(mode="after")
    def _pinning_needs_discover(self) -> "FailureModesConfig":
        if (self.taxonomies_from or self.taxonomy_digest) and not self.discovers:
            raise ValueError("taxonomies_from and taxonomy_digest pin a discovered taxonomy: set taxonomy: discover")
        if self.taxonomy_digest and not self.taxonomies_from:
            raise ValueError("taxonomy_digest: give taxonomies_from, the tables to find it in")
        return self

    @pydantic.field_validator("taxonomy", mode="before")
    @classmethod
    def _builtin_names(cls, value: Any) -> Any:
        # a built-in name is not a path: undo the config file's folder that loading put before it
        if isinstance(value, str) and posixpath.basename(value) in (*BUILTIN, DISCOVER):
            return posixpath.basename(value)
        return value

    @pydantic.field_validator("taxonomy")
    @classmethod
    def _known(cls, value: str) -> str:
        if value in (*BUILTIN, DISCOVER) or value.endswith((".yaml", ".yml")):
            return value
        raise ValueError(f"{value!r}: give task_success, tool_use, discover, or a taxonomy file ending .yaml/.yml")

    @pydantic.field_validator("metrics")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("a metric is listed twice")
        return names

    @property
    def discovers(self) -> bool:
        return self.taxonomy == DISCOVER


def check_metrics(config: FailureModesConfig, metrics: dict[str, bool]) -> None:
    """metrics: output name -> whether it can fail (has a pass/fail). Raises ValueError."""
    for name in config.metrics:
        if name not in metrics:
            raise ValueError(f"failure_modes.metrics: {name!r} is not a metric of this config"
                             f"{did_you_mean(name, metrics)}; its metrics: {', '.join(metrics)}")
        if not metrics[name]:
            raise ValueError(f"failure_modes.metrics: {name!r} never fails: give it a threshold (or use a rubric "
                             "metric, whose failed rubrics are classified)")
