"""The per_turn_user_simulator_quality_v1 stage (transforms.simulator_quality): ADK's verifier of
simulated users, through the one judge layer."""
from __future__ import annotations

from evalbeam.pipelines.stages import Stage
from evalbeam.transforms.simulator_quality import SimulatorQuality


class SimulatorQualityStage(Stage):
    """instances -> scores/simulator_quality, judge_cache/simulator_quality, usage/simulator_quality."""

    def expand(self, named):
        context = self._context
        judge = context.judge_context(named, context.judges_share())
        scored, cache_rows, usage = named["instances"] | "SimulatorQuality" >> SimulatorQuality(
            context.run, context.config.simulator_quality_specs(), judge)
        return {"scores/simulator_quality": scored, "judge_cache/simulator_quality": cache_rows,
                "usage/simulator_quality": usage}
