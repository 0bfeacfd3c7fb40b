"""The template judges' stage (transforms.judge), and what judging needs after
inference: only the cases inference produced are judged."""
from __future__ import annotations

import apache_beam as beam

from evalbeam.pipelines.stages import Stage
from evalbeam.transforms.inference import inference_error_rows, inferred
from evalbeam.transforms.judge import JudgeInstances


class InferredOnlyStage(Stage):
    """instances -> judged_instances (those inference produced), and scores/not_inferred:
    a case inference could not produce is not judged; its judge rows carry the inference error."""

    def expand(self, named):
        config, run = self._context.config, self._context.run
        instances = named["instances"]
        judge_metrics = [s.output_name for s in config.template_judge_specs() + config.rubric_specs()]
        return {
            "judged_instances": instances | "Inferred" >> beam.Filter(inferred),
            "scores/not_inferred": (instances | "NotInferred" >> beam.Filter(lambda i: not inferred(i))
                                    | "InferenceErrorRows" >> beam.Map(
                                        inference_error_rows, run, judge_metrics, config.judge.model)),
        }


class JudgeStage(Stage):
    """The template judge metrics -> scores/judge, judge_cache/judge, usage/judge.

    With `stream` (pipelines.local.stream_judge), the computation rows are judged as
    they stream by: scores/computed is replaced by the same rows with the judge rows."""

    def __init__(self, context, stream: bool = False):
        super().__init__(context)
        self._stream = stream

    def expand(self, named):
        context = self._context
        specs = context.config.template_judge_specs()
        judge = context.judge_context(named, context.judges_share())
        if self._stream:
            scored, cache_rows, usage = named["computed"] | "Judge" >> JudgeInstances(context.run, specs, judge, stream=True)
            return {"scores/computed": scored, "judge_cache/judge": cache_rows, "usage/judge": usage}
        instances = named.get("judged_instances", named["instances"])
        judged, cache_rows, usage = instances | "Judge" >> JudgeInstances(context.run, specs, judge)
        return {"scores/judge": judged, "judge_cache/judge": cache_rows, "usage/judge": usage}
