"""The one model of the judge's settings: what a config's `judge:` section holds, and what
the judge client layer (metrics.judge.client, metrics.judge.batch) and every judge stage read.

As inspect_ai's GenerateConfig, one validated model serves both the user's config and the
model layer: nothing is copied field by field, and a default is declared once. Quotas are
split in one place, `with_quota_share`.

One JudgeSettings describes one judge whole, its provider included: every judge stage (and
the simulator, inference.model, a metric's own judge) derives its own from the run's
(`overridden`, `for_model`, `with_quota_share`), and the client layer builds its client, its
quota and its cache keys from the settings it is handed, so judges of several providers can
answer in one run.

Secrets: only the name of the environment variable holding the API key is kept here; the
key is read where the client is built (metrics.judge.client).
"""
from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

import pydantic

from evalbeam.metrics.names import BQ_TABLE_URI_RE, looks_like_a_secret

PROVIDERS = ("gemini", "openai_compatible", "anthropic")
# each provider's backends (the first is its default) and the variable its API key is read from by default
BACKENDS = {"gemini": ("gemini_api", "vertex_ai"), "openai_compatible": ("openai_api",),
            "anthropic": ("anthropic_api", "vertex_ai")}
DEFAULT_KEY_ENV = {"gemini": "GOOGLE_API_KEY", "openai_compatible": "OPENAI_API_KEY",
                   "anthropic": "ANTHROPIC_API_KEY"}
# how a judge is reached: given anew (not inherited) when an override names another provider
CONNECTION = ("model", "backend", "base_url", "project", "location", "api_key_env")
# each batch API's own limits per job, (requests, bytes): a larger job is refused at submission.
# OpenAI Batch API: "The file can contain up to 50,000 requests, and can be up to 200 MB in size"
# (API reference, Create batch, input_file_id: platform.openai.com/docs/api-reference/batch/create).
# Anthropic Message Batches: "limited to either 100,000 Message requests or 256 MB in size, whichever
# is reached first" (docs.anthropic.com/en/docs/build-with-claude/batch-processing, Batch limitations).
# Gemini's are the fields' own bounds (20 MB inline, 2 GB file).
BATCH_LIMITS = {"openai_compatible": (50_000, 200_000_000), "anthropic": (100_000, 256_000_000)}


class JudgeSettings(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    provider: Literal["gemini", "openai_compatible", "anthropic"] = pydantic.Field(
        "gemini", description="gemini (google-genai) | openai_compatible (the `openai` client: OpenAI, or a vLLM, "
                              "TGI or Ollama server at base_url) | anthropic (the `anthropic` client: the Anthropic "
                              "API, or Claude on Vertex AI with backend vertex_ai)")
    model: str = pydantic.Field("gemini-2.5-flash", min_length=1,
                                description="the model; required for providers other than gemini")
    backend: Literal["gemini_api", "vertex_ai", "openai_api", "anthropic_api"] = pydantic.Field(
        "gemini_api", description="gemini: gemini_api (key from the api_key_env variable) | vertex_ai (project, "
                                  "location, ADC); anthropic: anthropic_api (key) | vertex_ai (Claude on Vertex AI: "
                                  "project, location, ADC); openai_compatible: openai_api. Default: the provider's first")
    base_url: str | None = pydantic.Field(
        None, pattern=r"^https?://\S+$",
        description="endpoint override: a proxy, a local server; openai_compatible: the server's /v1 URL "
                    "(default OpenAI's)")
    project: str | None = pydantic.Field(None, description="vertex_ai: the Google Cloud project")
    location: str | None = pydantic.Field(None, description="vertex_ai: the region, e.g. us-central1 (Claude: us-east5, "
                                                            "europe-west1 or global)")
    api_key_env: str = pydantic.Field(
        "GOOGLE_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the environment variable holding the API key (default GOOGLE_API_KEY, OPENAI_API_KEY or "
                    "ANTHROPIC_API_KEY by provider); openai_compatible with a base_url: may be unset, for a server "
                    "that takes no key")
    requests_per_minute: float = pydantic.Field(
        600, gt=0, description="the whole job's quota of this provider endpoint and model, however many workers run; "
                               "judges and jurors calling the same one share it")
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
        "online", description="online: one call per judgment within the quota; batch: batch jobs at half price, "
                              "answered within hours (gemini: Gemini Batch on gemini_api, batch prediction jobs "
                              "through judge.batch_staging on vertex_ai; openai_compatible: the Batch API; "
                              "anthropic: Message Batches)")
    batch_max_requests: int = pydantic.Field(
        10000, ge=1, le=1_000_000,
        description="batch mode: the most judgments in one batch job (at most the provider's: 50,000 for "
                    "openai_compatible, 100,000 for anthropic)")
    batch_inline_max_bytes: int = pydantic.Field(
        10_000_000, ge=0, le=20_000_000,
        description="batch mode, gemini_api only: a job whose requests take at most this many bytes is sent inline; "
                    "a larger one as a JSONL file uploaded with the Files API (the API takes 20 MB inline)")
    batch_max_bytes: int = pydantic.Field(
        1_000_000_000, ge=1000, le=2_000_000_000,
        description="batch mode: the most bytes of requests in one job (Gemini takes 2 GB; openai_compatible and "
                    "anthropic jobs are held to their API's 200 MB and 256 MB, the most a value may name for them)")
    batch_poll_seconds: float = pydantic.Field(
        30.0, gt=0, description="batch mode: the first wait between polls of a job's state; it grows 1.5x per poll")
    batch_poll_max_seconds: float = pydantic.Field(300.0, gt=0, description="batch mode: the longest wait between polls")
    batch_timeout_hours: float = pydantic.Field(
        48.0, gt=0, description="batch mode: a job not done after this long is cancelled and its judgments retried")
    batch_staging: str | None = pydantic.Field(
        None, pattern=r"^gs://[a-z0-9][a-z0-9._-]{1,221}[a-z0-9](/.*)?$",
        description="batch mode on vertex_ai: a gs:// folder for the batch prediction jobs' input and output files; "
                    "default: beside the run's attempts when output.parquet is on gs://")
    max_calls: int | None = pydantic.Field(
        None, ge=1,
        description="a budget of judgments for the run: with input.sample: {seed: N}, the sample takes the cases of "
                    "smallest hash whose judgments fit in it (evalbeam plan shows the rate it picks)")
    batch_retry: Literal["online", "batch"] = pydantic.Field(
        "online",
        description="batch mode: judgments a job failed (or answered invalidly) are retried online (with the quota "
                    "and retries of online mode) or in follow-up batch jobs (up to max_attempts in all)")

    @pydantic.model_validator(mode="before")
    @classmethod
    def _provider_defaults(cls, data: Any) -> Any:
        """The backend and key variable a provider has by default; a model named for any but gemini."""
        if not isinstance(data, dict):
            return data
        provider = data.get("provider", "gemini")
        if provider not in BACKENDS or provider == "gemini":
            return data  # (an unknown provider: the field's own error)
        if "model" not in data:
            raise ValueError(f"judge.provider {provider} needs judge.model (the model to call)")
        return {"backend": BACKENDS[provider][0], "api_key_env": DEFAULT_KEY_ENV[provider], **data}

    @pydantic.model_validator(mode="after")
    def _backend_of_provider(self) -> "JudgeSettings":
        if self.backend not in BACKENDS[self.provider]:
            raise ValueError(f"backend {self.backend!r} is not one of provider {self.provider}'s: "
                             f"{', '.join(BACKENDS[self.provider])}")
        if self.base_url and "@" in self.base_url.split("://", 1)[-1].split("/", 1)[0]:
            # user:password@ would be recorded with the config in the runs table
            raise ValueError("base_url: credentials in the URL are not supported (they would be recorded with the "
                             "config); give the key in the api_key_env variable")
        if self.mode == "batch" and self.provider == "anthropic" and self.backend == "vertex_ai":
            raise ValueError("mode batch is not supported for Claude on Vertex AI (provider anthropic, backend "
                             "vertex_ai) yet: use mode online, or backend anthropic_api (Message Batches)")
        if self.mode == "batch" and self.provider in BATCH_LIMITS:
            # a value above the provider's limit is refused; the defaults (1 GB, Gemini's) are capped in batch_limits
            for field, cap in zip(("batch_max_requests", "batch_max_bytes"), BATCH_LIMITS[self.provider]):
                value = getattr(self, field)
                if value > cap and value != type(self).model_fields[field].default:
                    raise ValueError(f"{field} {value} is above provider {self.provider}'s batch limit of {cap}: "
                                     f"give at most {cap}")
        return self

    @pydantic.field_validator("api_key_env", mode="before")
    @classmethod
    def _a_name_not_a_key(cls, value: Any) -> Any:
        """Refuse a key pasted in place of its variable's name (it would be recorded with the config in the
        runs table and named in credential errors), without quoting it: the A2A auth's test
        (metrics.names.looks_like_a_secret)."""
        if isinstance(value, str) and looks_like_a_secret(value):
            raise ValueError(f"api_key_env must name the environment variable holding the API key; the value given "
                             f"(not shown: its {len(value)} characters look like a key, not a variable's name) "
                             "would be recorded with the config")
        return value

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

    def batch_limits(self) -> tuple[int, int]:
        """The most requests and bytes of one batch job: batch_max_requests and batch_max_bytes
        held to the provider's batch API limits (BATCH_LIMITS), so that a large run is split into
        more jobs rather than refused at submission."""
        requests, size = BATCH_LIMITS.get(self.provider, (self.batch_max_requests, self.batch_max_bytes))
        return min(requests, self.batch_max_requests), min(size, self.batch_max_bytes)

    @property
    def batch_timeout_seconds(self) -> float:
        return self.batch_timeout_hours * 3600

    def generation(self) -> dict[str, Any]:
        """The settings that shape an answer, part of every request's cache key: the provider
        (left out for gemini, so that the keys of judge.cache tables written before providers
        existed still match), the model and the sampling."""
        generation = {"model": self.model, "temperature": self.temperature, "max_output_tokens": self.max_output_tokens}
        if self.provider != "gemini":
            generation["provider"] = self.provider
            if self.base_url:  # two servers (OpenAI's, a team's own vLLM) may serve models of one name
                generation["base_url"] = self.base_url
        return generation

    def with_quota_share(self, share: float) -> "JudgeSettings":
        """These settings with `share` of the quotas (requests and tokens per minute): the one
        place a quota is split, between judge stages running at once and between shards."""
        if share == 1.0:
            return self
        tokens = self.tokens_per_minute
        return self.model_copy(update={"requests_per_minute": self.requests_per_minute * share,
                                       "tokens_per_minute": tokens * share if tokens else None})

    def quota_key(self) -> tuple:
        """Which settings draw on one provider quota: the same provider, backend, endpoint
        (base_url; project and location on Vertex AI) and model. Settings differing only in how
        they ask (temperature, sampling, max_output_tokens) share it: metrics.judge.asks.share_quotas."""
        return (self.provider, self.backend, self.base_url, self.project, self.location, self.model)

    def for_model(self, model: str) -> "JudgeSettings":
        """The same settings calling another model (inference.model through the judge layer)."""
        return self.model_copy(update={"model": model})

    def overridden(self, partial: dict[str, Any]) -> "JudgeSettings":
        """These settings with a metric's partial `judge:` (or one juror's) laid over them, validated
        as a whole `judge:` is: an unknown field or a bad value raises pydantic's ValidationError
        naming the field. The one place a metric's judge is made from the run's."""
        if not partial:
            return self
        base = self.model_dump()
        if partial.get("provider", self.provider) != self.provider:
            # another provider inherits none of this judge's connection: it gives its own or takes
            # that provider's defaults (model, backend, base_url, project, location, api_key_env)
            base = {k: v for k, v in base.items() if k not in CONNECTION}
        return JudgeSettings.model_validate({**base, **partial})

    def digest(self) -> str:
        """A short content hash of the settings: which calls share one client and one quota
        (metrics.judge.client.JudgeStreams) when a run judges with several settings (juries)."""
        return hashlib.sha256(self.model_dump_json().encode("utf-8")).hexdigest()[:16]
