"""The compare stage (compare_with): this run's scores paired with a base run's,
per metric and slice, into the comparisons table (transforms.compare)."""
from __future__ import annotations

import apache_beam as beam

from evalbeam.metrics.statistics.compare import ALPHA
from evalbeam.pipelines.compare import compare_inputs, pair_spec
from evalbeam.pipelines.stages import Stage
from evalbeam.transforms.calibration import labelled_results
from evalbeam.transforms.compare import CompareRuns, result_entry


class ComparisonStage(Stage):
    """scored, instances -> comparisons."""

    def expand(self, named):
        context = self._context
        location, base_info, this_run = context.compare_base
        inputs = compare_inputs(named["instances"].pipeline, location, base_info, this_run, "Previous")
        inputs["run"] = named["scored"] | "ThisRunScores" >> beam.FlatMap(
            lambda s: [result_entry(r) for r in labelled_results(s)])
        inputs["run_slices"] = named["instances"] | "ThisRunSlices" >> beam.Map(
            lambda i: (i.instance_id, [f"{c}={'(missing)' if v is None else v}" for c, v in i.slices.items()]))
        return {"comparisons": inputs | "CompareWithBase" >> CompareRuns(
            pair_spec(base_info, this_run, context.config.gate(), ALPHA, context.started_at))}
