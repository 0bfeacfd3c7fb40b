"""The `scenarios:` section of a config: conversation scenarios generated for an agent
(metrics.scenarios), as `evalbeam generate` writes them and as the input of `evalbeam run`. A shape
only: the agent is imported, its A2A card read, ADK's personas looked up and the seed conversations
read where the pipeline is built (pipelines.preflight), not while validating."""
from __future__ import annotations

import re
from typing import Any

import pydantic

from evalbeam.metrics.scenarios import MAX_CELLS, MAX_PER_CELL, MAX_SCENARIOS, grid_size


class AxisEntry(pydantic.BaseModel):
    """A goal or difficulty given with an id of its own: {id, description}."""
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    id: str = pydantic.Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
    description: str = pydantic.Field(min_length=1)


class ToolEntry(pydantic.BaseModel):
    """A tool of an agent described in the config (scenarios.description.tools)."""
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: str = pydantic.Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = pydantic.Field(None, description="the tool's parameters, as a JSON schema")


class AgentDescriptionConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: str = pydantic.Field("agent", min_length=1)
    instruction: str = pydantic.Field(min_length=1, description="what the agent is told to do (its system instruction)")
    tools: list[ToolEntry] = pydantic.Field(default_factory=list)

    @pydantic.field_validator("tools", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        return [{"name": t} if isinstance(t, str) else t for t in value] if isinstance(value, list) else value


class ScenariosConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    agent: str | None = pydantic.Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description="'package.module:attribute': an ADK agent, read for its instruction, tools and sub-agents "
                    "(needs the agent extra)")
    a2a: str | None = pydantic.Field(None, pattern=r"^https?://\S+$",
                                     description="an agent served over A2A: its agent card's skills")
    description: AgentDescriptionConfig | None = pydantic.Field(
        None, description="the agent described here: {name, instruction, tools: [{name, description, parameters}]}")
    goals: list[str | AxisEntry] = pydantic.Field(
        default_factory=list, description="what the users want: text, or {id, description}")
    personas: list[str | dict[str, Any]] = pydantic.Field(
        default_factory=lambda: ["NOVICE", "EXPERT"],
        description="ADK's persona ids (read from the installed google-adk), or persona objects "
                    "{id, description, behaviors}")
    difficulties: list[str | AxisEntry] = pydantic.Field(
        default_factory=lambda: ["typical"], description="how hard each scenario is for the agent: text, or {id, description}")
    languages: list[str] = pydantic.Field(
        default_factory=list, description="the languages the users write in (one cell each); none: not said")
    per_cell: int = pydantic.Field(5, ge=1, le=MAX_PER_CELL, description="scenarios asked per cell of the grid (one "
                                                                         "generator call)")
    seed: int = pydantic.Field(0, ge=0, description="the generator's seed (part of each call's cache key)")
    seeds: str | None = pydantic.Field(
        None, min_length=1, description="an ADK eval set (local, relative to the config file's folder, or gs://) "
                                        "whose recorded conversations the generator is shown as examples")
    near_duplicate_threshold: float = pydantic.Field(
        0.7, gt=0, le=1, description="a scenario whose word-shingle Jaccard similarity (MinHash estimate) with one "
                                     "kept before it in its cell reaches this is a near-duplicate")
    judge: dict[str, Any] | None = pydantic.Field(
        None, description="the generator's settings laid over judge: (model, provider, temperature, ...); default "
                          "temperature 1.0 and max_output_tokens 500 per scenario asked")
    pinned_from: list[str] = pydantic.Field(
        default_factory=list, description="earlier runs' scenarios tables (Parquet folders or bq://...): reuse a set "
                                          "generated there (the earliest, or the one of digest) instead of generating")
    digest: str | None = pydantic.Field(None, pattern=r"^[0-9a-f]{64}$",
                                        description="with pinned_from: the scenario set of this digest")

    @pydantic.field_validator("pinned_from", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @pydantic.field_validator("personas")
    @classmethod
    def _persona_shapes(cls, value: list) -> list:
        for i, p in enumerate(value):
            if isinstance(p, dict) and not isinstance(p.get("id"), str):
                raise ValueError(f"{i}: a persona object needs an id (and description, behaviors)")
        return value

    @pydantic.field_validator("languages")
    @classmethod
    def _languages(cls, value: list[str]) -> list[str]:
        for language in value:
            if not re.fullmatch(r"[\w -]{1,40}", language):
                raise ValueError(f"{language!r}: a language's name or code, e.g. en, French, pt-BR")
        if len(set(value)) != len(value):
            raise ValueError("a language is listed twice")
        return value

    @pydantic.model_validator(mode="after")
    def _what_and_how_much(self) -> "ScenariosConfig":
        if self.digest and not self.pinned_from:
            raise ValueError("scenarios.digest: give pinned_from, the scenarios tables to find the set in")
        if self.pinned_from:
            return self  # the set is reused: nothing is generated
        sources = [k for k in ("agent", "a2a", "description") if getattr(self, k) is not None]
        if len(sources) != 1:
            raise ValueError("scenarios: give exactly one of agent (MODULE:ATTR), a2a (URL) and description "
                             "({instruction, tools})" + (f"; got {', '.join(sources)}" if sources else ""))
        if not self.goals:
            raise ValueError("scenarios.goals: give at least one goal (what the users want)")
        for what in ("personas", "difficulties"):
            if not getattr(self, what):
                raise ValueError(f"scenarios.{what}: give at least one")
        cells = grid_size(len(self.goals), len(self.personas), len(self.difficulties), len(self.languages))
        asked = cells * self.per_cell
        if cells > MAX_CELLS or asked > MAX_SCENARIOS:
            raise ValueError(f"scenarios: the grid has {cells:,} cells ({len(self.goals)} goals x {len(self.personas)} "
                             f"personas x {len(self.difficulties)} difficulties x {max(1, len(self.languages))} "
                             f"languages), {asked:,} scenarios at per_cell {self.per_cell}; at most {MAX_CELLS:,} "
                             f"cells and {MAX_SCENARIOS:,} scenarios a run")
        return self

    @property
    def pinned(self) -> bool:
        return bool(self.pinned_from)

    @property
    def cells(self) -> int:
        return grid_size(len(self.goals), len(self.personas), len(self.difficulties), len(self.languages))

    def slice_columns(self) -> list[str]:
        return ["goal", "persona", "difficulty"] + (["language"] if self.languages else [])
