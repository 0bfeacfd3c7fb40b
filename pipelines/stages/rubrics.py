"""The rubric metrics' stage (transforms.rubrics): rubrics generated (or pinned
from judge.rubrics_from), then validated, through the one judge layer."""
from __future__ import annotations


from evalbeam.pipelines.preflight import parquet_glob
from evalbeam.pipelines.stages import Stage
from evalbeam.transforms.rubrics import ReadPinnedRubrics, RubricJudge


class RubricStage(Stage):
    """-> scores/rubric, judge_cache/rubric, usage/rubric, rubrics."""

    def expand(self, named):
        context = self._context
        config = context.config
        instances = named.get("judged_instances", named["instances"])
        pinned = None
        if config.judge.rubrics_from:
            parquet = [parquet_glob(p) for p in config.judge.rubrics_from if not p.startswith("bq://")]
            pinned = instances.pipeline | "PinnedRubrics" >> ReadPinnedRubrics(parquet, list(context.rubric_plans))
        scored, cache_rows, usage, rubric_rows = instances | "RubricJudge" >> RubricJudge(
            context.run, config.rubric_specs(), context.judge_context(named, context.judges_share()), pinned)
        return {"scores/rubric": scored, "judge_cache/rubric": cache_rows, "usage/rubric": usage, "rubrics": rubric_rows}
