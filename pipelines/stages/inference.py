"""The inference stage: a model, a function or an agent run on each case before it
is scored (transforms.inference); a model's calls go through the one judge layer."""
from __future__ import annotations


from evalbeam.pipelines.stages import Stage
from evalbeam.transforms.inference import Infer


class InferenceStage(Stage):
    """instances -> instances with what inference produced; for a model, also
    judge_cache/inference and usage/inference."""

    def expand(self, named):
        context = self._context
        config = context.config
        instances, cache_rows, usage = named["instances"] | "Infer" >> Infer(
            context.run, config.inference, context.judge_context(named))
        if config.simulates_users():
            return {"instances": instances, "judge_cache/user_simulator": cache_rows, "usage/user_simulator": usage}
        if not config.model_inference():
            return {"instances": instances}
        return {"instances": instances, "judge_cache/inference": cache_rows, "usage/inference": usage}
