"""The failure modes' stage (transforms.failure_modes): after scoring, judging and
rubrics, every failure of failure_modes.metrics classified into the taxonomy through
the one judge layer, and counted per metric, slice and mode."""
from __future__ import annotations

import apache_beam as beam

from evalbeam.configs import ConfigError
from evalbeam.metrics.taxonomy import TaxonomyError
from evalbeam.pipelines.stages import Stage, parts
from evalbeam.transforms.failure_modes import ClassifyFailures, taxonomy_of, taxonomy_row


class FailureModesStage(Stage):
    """scores/*, instances[, rubrics] -> failure_assignments, failure_modes, taxonomies,
    judge_cache/failure_modes, usage/failure_modes."""

    def expand(self, named):
        context = self._context
        config = context.config
        fm = config.failure_modes
        pipeline = named["instances"].pipeline
        try:
            taxonomy = taxonomy_of(fm)
        except TaxonomyError as e:
            raise ConfigError(str(e)) from None
        taxonomies = None if taxonomy is None else pipeline | "Taxonomy" >> beam.Create([taxonomy])
        scores = parts(named, "scores")
        scored = tuple(scores) | "AllScoresForFailures" >> beam.Flatten() if len(scores) > 1 else scores[0]
        rubric_metrics = [s.output_name for s in config.rubric_specs()]
        # The classification waits for every score (its requests are grouped behind them),
        # so it runs alone and takes the whole quota.
        assignments, modes, cache_rows, usage, used = (scored, named["instances"]) \
            | "ClassifyFailures" >> ClassifyFailures(context.run, fm.metrics, rubric_metrics,
                                                     config.input.slice_columns, context.judge_context(named),
                                                     taxonomies, named.get("rubrics"), fm.discover_sample, fm.seed)
        rows = used | "TaxonomyRow" >> beam.Map(taxonomy_row, context.run, fm.metrics, fm.discover_sample, fm.seed)
        return {"failure_assignments": assignments, "failure_modes": modes, "taxonomies": rows,
                "judge_cache/failure_modes": cache_rows, "usage/failure_modes": usage}
