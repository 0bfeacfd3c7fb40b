"""The ADK eval history stage (output.adk_eval_history): each eval set's results
written as ADK's own *.evalset_result.json files (transforms.adk_history)."""
from __future__ import annotations


from evalbeam.pipelines.stages import Stage
from evalbeam.transforms.adk_history import WriteEvalHistory


class AdkHistoryStage(Stage):
    """scored -> adk_history (the files written)."""

    def expand(self, named):
        config = self._context.config
        criteria = {s.output_name: (s.name, s.effective_threshold()) for s in config.computation_specs()
                    if s.definition() is not None and s.definition().kind == "adk"}
        return {"adk_history": named["scored"] | "WriteEvalHistory" >> WriteEvalHistory(
            config.output.adk_eval_history, config.name, self._context.started_at.timestamp(), criteria)}
