"""The `failure_modes:` section of a config: which metrics' failures are classified,
and into which taxonomy (metrics.failure_modes). A shape only: the taxonomy file is
read where the pipeline is built (`taxonomy_of`), not while validating."""
from __future__ import annotations

import posixpath
from typing import Any

import pydantic
from apache_beam.io.filesystems import FileSystems

from evalbeam.metrics.failure_modes import BUILTIN, DISCOVER, Taxonomy, TaxonomyError, builtin_taxonomy, \
    taxonomy_from_yaml


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


def taxonomy_of(config: FailureModesConfig) -> Taxonomy | None:
    """The taxonomy a built-in name or a file names (None for discover, found in the
    pipeline). Raises TaxonomyError naming the file."""
    if config.taxonomy in BUILTIN:
        return builtin_taxonomy(config.taxonomy)
    if config.discovers:
        return None
    try:
        with FileSystems.open(config.taxonomy, mime_type="application/octet-stream") as f:
            text = f.read().decode("utf-8")
    except (IOError, OSError, UnicodeDecodeError) as e:
        raise TaxonomyError(f"failure_modes.taxonomy: cannot read {config.taxonomy}: {e}") from None
    try:
        return taxonomy_from_yaml(text, posixpath.basename(config.taxonomy).rsplit(".", 1)[0])
    except TaxonomyError as e:
        raise TaxonomyError(f"failure_modes.taxonomy: {config.taxonomy}: {e}") from None


def check_metrics(config: FailureModesConfig, metrics: dict[str, bool]) -> None:
    """metrics: output name -> whether it can fail (has a pass/fail). Raises ValueError."""
    for name in config.metrics:
        if name not in metrics:
            raise ValueError(f"failure_modes.metrics: {name!r} is not a metric of this config; its metrics: "
                             f"{', '.join(metrics)}")
        if not metrics[name]:
            raise ValueError(f"failure_modes.metrics: {name!r} never fails: give it a threshold (or use a rubric "
                             "metric, whose failed rubrics are classified)")
