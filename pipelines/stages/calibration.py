"""The calibration stage (input.labels): each labelled metric's agreement with the human
labels, per slice, into the calibration table (transforms.calibration)."""
from __future__ import annotations

from evalbeam.pipelines.stages import Stage
from evalbeam.pipelines.stages.summary import thresholds
from evalbeam.transforms.calibration import CalibrateScores


class CalibrationStage(Stage):
    """scored -> calibration."""

    def expand(self, named):
        context = self._context
        num_runs = context.config.inference.num_runs if context.config.inference else 1
        return {"calibration": named["scored"] | "Calibrate" >> CalibrateScores(
            context.run, thresholds(context.config), context.config.input.max_slice_values, num_runs=num_runs)}
