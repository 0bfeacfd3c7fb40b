"""The evaluation pipeline as a list of named stages, in the shape of TFMA's
ExtractEvaluateAndWriteResults over its extractors, evaluators and writers.

Each stage is one PTransform in its own module, built from the run's RunContext.
It takes the named PCollections made so far (a dict) and returns the ones it
adds or replaces; `pipelines.evaluate.build_pipeline` chooses the stages from
the config and hands everything to the one writer (stages.write.WriteResults).

Names a stage may read or make:
  records, unparseable, source_lines   what was read (stages.read)
  instances, invalid, dead_letters     rows made instances, or dead-lettered
  cached                               judge.cache entries (stages.judge_cache)
  computed                             ScoredInstances of the computation metrics
  scores/<part>                        ScoredInstances, every part summarized and written
  judge_cache/<part>, usage/<part>     judge calls' cache rows and usage, per stage
  rubrics                              generated rubrics (stages.rubrics)
  summary, runs, comparisons           (stages.summary, stages.compare)
  attacks, attack_summary              red teaming (stages.red_team): the attacks run and their summary;
  attacked/<name>, red_team/undelivered  the attacked runs set apart from the twins (scores, instances), and
                                       those that could not be attacked (dead letters)
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import apache_beam as beam

from evalbeam.configs import EvalConfig
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.metrics.rows.tables import RunKey


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What every stage is built with: the run and where it reads and writes.

    read_plan: the planned BigQuery read of the input, or None for files;
    cache_plans, rubric_plans: planned BigQuery reads of judge.cache and judge.rubrics_from;
    compare_base: (Location, base RunInfo, this RunInfo) for compare_with, or None;
    attempt: this attempt's id (its Parquet folder is swapped in at the end);
    staging: where Parquet goes before BigQuery loads it, without output.parquet;
    checkpoint: the run's judge checkpoint folder, or None;
    progress: the local folder workers write live counts to, or None;
    scratch: a local run's folder for what it groups on disk (transforms.spill), removed when the run ends; or None;
    window: input.since's window of what the run reads (transforms.since.ReadWindow), or None;
    job_lock: the locks the job itself holds and gives back at its end (a Dataflow
    job, transforms.run_lock.ReleaseRunLock): its run_id's, and its eval's input.since window's; or ()."""
    config: EvalConfig
    run: RunKey
    started_at: dt.datetime
    read_plan: Any = None
    cache_plans: tuple = ()
    rubric_plans: tuple = ()
    compare_base: Any = None
    attempt: str | None = None
    staging: str | None = None
    checkpoint: str | None = None
    progress: str | None = None
    job_lock: tuple[str, ...] = ()
    scratch: str | None = None
    window: Any = None

    def judge_context(self, named: dict, share: float = 1.0) -> JudgeContext:
        """The JudgeContext of a stage that calls the judge layer, over judge.cache when
        read, with `share` of the job's quotas."""
        return JudgeContext(self.config.judge, named.get("cached"), self.checkpoint, self.progress).share(share)

    def judges_share(self) -> float:
        """The quota share of each judge stage (template judges, rubrics, simulator quality): they
        call the judge at the same time, so each takes 1/n of n running. (Inference ends
        before judging starts, behind a join, and keeps the whole quota.)"""
        running = sum(bool(specs) for specs in (self.config.template_judge_specs(), self.config.rubric_specs(),
                                                 self.config.simulator_quality_specs()))
        return 1.0 / max(1, running)


def parts(named: dict, kind: str) -> list:
    """The PCollections named `<kind>/<part>`, in the order they were made."""
    return [pcoll for name, pcoll in named.items() if name.startswith(kind + "/")]


class Stage(beam.PTransform):
    """A stage of the pipeline, built from the run's RunContext: expand(named) takes the
    named PCollections made so far and returns the ones the stage adds or replaces."""

    def __init__(self, context: RunContext):
        super().__init__()
        self._context = context
