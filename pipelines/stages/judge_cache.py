"""The judge.cache stage: earlier judge_cache tables read once, for every stage that
calls the judge layer (inference, template judges, rubrics) to reuse."""
from __future__ import annotations


from evalbeam.pipelines.preflight import parquet_glob
from evalbeam.pipelines.stages import Stage
from evalbeam.transforms.judge import ReadJudgeCache


class JudgeCacheStage(Stage):
    """-> cached: (request_key, JudgeResponse) from judge.cache (Parquet or planned BigQuery reads)."""

    def expand(self, named):
        context = self._context
        parquet = [parquet_glob(p) for p in context.config.judge.cache if not p.startswith("bq://")]
        pipeline = named["instances"].pipeline
        return {"cached": pipeline | "ReadJudgeCache" >> ReadJudgeCache(parquet, list(context.cache_plans))}
