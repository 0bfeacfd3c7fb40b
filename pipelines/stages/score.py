"""The score stage: every computation metric of every instance (transforms.score),
and an ADK eval set's case verdicts (transforms.adk_status)."""
from __future__ import annotations

import apache_beam as beam

from evalbeam.configs import EvalConfig
from evalbeam.metrics.adk import INFORMATIONAL_CRITERIA
from evalbeam.pipelines.stages import Stage
from evalbeam.transforms.adk_status import add_case_status
from evalbeam.transforms.score import ScoreInstances


def adk_criteria(config: EvalConfig) -> dict[str, str]:
    """output name -> ADK criterion, for the config's ADK criteria."""
    return {s.output_name: s.name for s in config.computation_specs()
            if s.definition() is not None and s.definition().kind == "adk"}


def adk_verdicts(config: EvalConfig) -> bool:
    """Whether an ADK input's cases get a verdict (adk_case_status): a criterion that
    passes or fails is needed (the efficiency ones never do)."""
    return config.input.is_adk and bool(set(adk_criteria(config).values()) - set(INFORMATIONAL_CRITERIA))


class ScoringStage(Stage):
    """instances -> computed (ScoredInstances of the computation metrics), also scores/computed."""

    def expand(self, named):
        config, run = self._context.config, self._context.run
        computed = named["instances"] | "Score" >> ScoreInstances(run, config.computation_specs(),
                                                                  config.require_native_bleu)
        if adk_verdicts(config):
            computed = computed | "AdkCaseStatus" >> beam.Map(add_case_status, run, adk_criteria(config))
        return {"computed": computed, "scores/computed": computed}
