"""What every judge stage is handed: template judges (transforms.judge), both rubric
stages (transforms.rubrics) and model inference (transforms.inference) all answer
through one composite (judge.AnswerJudgeRequests) with one JudgeContext."""
from __future__ import annotations

import dataclasses
from typing import Any

from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.transforms.judge_checkpoint import batch_staging


@dataclasses.dataclass(frozen=True)
class JudgeContext:
    """settings: the judge settings with this stage's share of the job's quotas
    (JudgeSettings.with_quota_share, the one place a quota is split);
    cached: (request_key, JudgeResponse) from judge.cache, a PCollection, or None;
    checkpoint: the run's judge checkpoint folder (transforms.judge_checkpoint), or None;
    progress: the local folder live counts go to (transforms.progress), or None."""
    settings: JudgeSettings
    cached: Any = None
    checkpoint: str | None = None
    progress: str | None = None
    quota_share: float = 1.0  # the share of the job's quotas `settings` holds (share)
    # the other settings this stage judges with (metrics' own judges, jurors): (digest, settings), each
    # with the stage's share of its quotas (juror_settings), split between the settings calling one
    # provider quota (metrics.judge.asks.share_quotas); requests name theirs (JudgeRequest.judge)
    judges: tuple = ()

    @property
    def staging(self) -> str | None:
        """Where Vertex AI batch jobs' files go."""
        return batch_staging(self.settings.batch_staging, self.checkpoint)

    def shard_settings(self) -> JudgeSettings:
        """The settings one of the `judge.shards` shards calls with: 1/shards of the stage's quotas."""
        return self.settings.with_quota_share(1.0 / self.settings.shards)

    def shard_judges(self) -> dict[str, JudgeSettings]:
        """Every settings one shard calls with, by JudgeRequest.judge ("" the stage's own), each with
        1/shards of its quotas."""
        share = 1.0 / self.settings.shards
        return {"": self.shard_settings(), **{digest: s.with_quota_share(share) for digest, s in self.judges}}

    def share(self, fraction: float) -> "JudgeContext":
        """This context for a stage that runs beside others: `fraction` of the quotas."""
        return dataclasses.replace(self, settings=self.settings.with_quota_share(fraction),
                                   quota_share=self.quota_share * fraction)

    def juror_settings(self, partial: dict) -> JudgeSettings:
        """A metric's own judge (or a juror): the partial `judge:` laid over these settings
        (JudgeSettings.overridden); a quota it names is the job's, given this stage's share. (A quota
        it inherits is split with the other settings calling the same model: share_quotas.)"""
        settings = self.settings.overridden(partial)
        own = {k: partial[k] * self.quota_share for k in ("requests_per_minute", "tokens_per_minute")
               if partial.get(k) is not None}
        return settings.model_copy(update=own) if own else settings

    def for_model(self, model: str) -> "JudgeContext":
        """This context calling another model (inference.model)."""
        return dataclasses.replace(self, settings=self.settings.for_model(model))
