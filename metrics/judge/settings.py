"""The one model of the judge's settings: what a config's `judge:` section holds, and what
the judge client layer (metrics.judge.client, metrics.judge.batch) and every judge stage read.

As inspect_ai's GenerateConfig, one validated model serves both the user's config and the
model layer: nothing is copied field by field, and a default is declared once. Quotas are
split in one place, `with_quota_share`.

Secrets: only the name of the environment variable holding the API key is kept here; the
key is read where the client is built (metrics.judge.client).
"""
from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

import pydantic

from evalbeam.metrics.names import BQ_TABLE_URI_RE


class JudgeSettings(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    model: str = pydantic.Field("gemini-2.5-flash", min_length=1)
    backend: Literal["gemini_api", "vertex_ai"] = pydantic.Field(
        "gemini_api", description="gemini_api (key from the api_key_env variable) | vertex_ai (project, location, ADC)"
    )
    base_url: str | None = pydantic.Field(None, description="endpoint override: a proxy, a local server")
    project: str | None = pydantic.Field(None, description="vertex_ai: the Google Cloud project")
    location: str | None = pydantic.Field(None, description="vertex_ai: the region, e.g. us-central1")
    api_key_env: str = pydantic.Field("GOOGLE_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                      description="gemini_api: the environment variable holding the API key")
    requests_per_minute: float = pydantic.Field(600, gt=0, description="the whole job's quota, however many workers run")
    tokens_per_minute: float | None = pydantic.Field(None, gt=0, description="optional second budget")
    max_attempts: int = pydantic.Field(6, ge=1, le=20)
    timeout_seconds: float = pydantic.Field(60, gt=0)
    sampling_count: int = pydantic.Field(1, ge=1, le=32, description="samples per judgment, aggregated with a confidence")
    temperature: float = pydantic.Field(0.0, ge=0, le=2)
    max_output_tokens: int | None = pydantic.Field(2048, gt=0)
    max_concurrency: int = pydantic.Field(
        1024, ge=1, le=4096,
        description="the most calls in flight per shard (a memory bound); below it the number in flight is sized "
                    "from the quota and the observed latency")
    hedge_share: float = pydantic.Field(
        0.02, ge=0, le=0.5,
        description="at the end of a run, once the input has ended, a call slower than 3 in 4 recent calls gets one "
                    "copy (the first answer wins) when the pace has room; copies are calls, paced and counted, at most "
                    "this share of the calls made (0: never)")
    shards: int = pydantic.Field(
        1, ge=1, le=1024,
        description="judge calls are split into this many shards, each on one worker with 1/shards of the quotas",
    )
    cache: list[str] = pydantic.Field(
        default_factory=list,
        description="earlier judge_cache tables to reuse: Parquet folders or globs, or bq://project.dataset.table",
    )
    rubrics_from: list[str] = pydantic.Field(
        default_factory=list,
        description="rubric metrics: earlier rubrics tables (Parquet folders or globs, or bq://project.dataset.table) "
                    "whose rubrics are used, matched by the metric and its generation inputs, instead of generating",
    )
    prices: dict[str, dict[Literal["input_per_million", "output_per_million", "batch_input_per_million",
                                   "batch_output_per_million"], pydantic.NonNegativeFloat]] = pydantic.Field(
        default_factory=dict,
        description="model -> USD per million input and output tokens, for the cost estimate; batch_* for "
                    "judge.mode batch (default: half the online price)")
    checkpoint_seconds: float = pydantic.Field(
        5.0, gt=0, le=30,
        description="judgments are checkpointed this often while judging; a re-run of the same run_id reuses them")
    mode: Literal["online", "batch"] = pydantic.Field(
        "online", description="online: generateContent calls within the quota; batch: batch jobs at half price, "
                              "answered within hours (gemini_api: Gemini Batch; vertex_ai: batch prediction "
                              "jobs through judge.batch_staging)")
    batch_max_requests: int = pydantic.Field(
        10000, ge=1, le=1_000_000, description="batch mode: the most judgments in one batch job")
    batch_inline_max_bytes: int = pydantic.Field(
        10_000_000, ge=0, le=20_000_000,
        description="batch mode: a job whose requests take at most this many bytes is sent inline; a larger one "
                    "as a JSONL file uploaded with the Files API (the API takes 20 MB inline)")
    batch_max_bytes: int = pydantic.Field(
        1_000_000_000, ge=1000, le=2_000_000_000,
        description="batch mode: the most bytes of requests in one job's JSONL file (the API takes 2 GB)")
    batch_poll_seconds: float = pydantic.Field(
        30.0, gt=0, description="batch mode: the first wait between polls of a job's state; it grows 1.5x per poll")
    batch_poll_max_seconds: float = pydantic.Field(300.0, gt=0, description="batch mode: the longest wait between polls")
    batch_timeout_hours: float = pydantic.Field(
        48.0, gt=0, description="batch mode: a job not done after this long is cancelled and its judgments retried")
    batch_staging: str | None = pydantic.Field(
        None, pattern=r"^gs://[a-z0-9][a-z0-9._-]{1,221}[a-z0-9](/.*)?$",
        description="batch mode on vertex_ai: a gs:// folder for the batch prediction jobs' input and output files; "
                    "default: beside the run's attempts when output.parquet is on gs://")
    batch_retry: Literal["online", "batch"] = pydantic.Field(
        "online",
        description="batch mode: judgments a job failed (or answered invalidly) are retried online (with the quota "
                    "and retries of online mode) or in follow-up batch jobs (up to max_attempts in all)")

    @pydantic.field_validator("cache", "rubrics_from", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @pydantic.field_validator("cache", "rubrics_from")
    @classmethod
    def _valid_tables(cls, locations: list[str]) -> list[str]:
        for location in locations:
            if location.startswith("bq://") and not re.fullmatch(BQ_TABLE_URI_RE, location):
                raise ValueError(f"{location!r} is not a valid bq://project.dataset.table")
        return locations

    @property
    def batch_timeout_seconds(self) -> float:
        return self.batch_timeout_hours * 3600

    def generation(self) -> dict[str, Any]:
        """The settings that shape an answer, part of every request's cache key."""
        return {"model": self.model, "temperature": self.temperature, "max_output_tokens": self.max_output_tokens}

    def with_quota_share(self, share: float) -> "JudgeSettings":
        """These settings with `share` of the quotas (requests and tokens per minute): the one
        place a quota is split, between judge stages running at once and between shards."""
        if share == 1.0:
            return self
        tokens = self.tokens_per_minute
        return self.model_copy(update={"requests_per_minute": self.requests_per_minute * share,
                                       "tokens_per_minute": tokens * share if tokens else None})

    def for_model(self, model: str) -> "JudgeSettings":
        """The same settings calling another model (inference.model through the judge layer)."""
        return self.model_copy(update={"model": model})

    def overridden(self, partial: dict[str, Any]) -> "JudgeSettings":
        """These settings with a metric's partial `judge:` (or one juror's) laid over them, validated
        as a whole `judge:` is: an unknown field or a bad value raises pydantic's ValidationError
        naming the field. The one place a metric's judge is made from the run's."""
        if not partial:
            return self
        return JudgeSettings.model_validate({**self.model_dump(), **partial})

    def digest(self) -> str:
        """A short content hash of the settings: which calls share one client and one quota
        (metrics.judge.client.JudgeStreams) when a run judges with several settings (juries)."""
        return hashlib.sha256(self.model_dump_json().encode("utf-8")).hexdigest()[:16]
