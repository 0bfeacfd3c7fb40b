"""`evalbeam generate`: conversation scenarios made for an agent (the config's scenarios: block) and
written, nothing evaluated: the run pipeline (pipelines.evaluate) with its scenarios stage alone, so the
run lock, checkpoints, the judge layer's cache and accounting, the tables and the run index are a run's.
Then what was made, read back from the scenarios table: the set's digest and each cell's coverage."""
from __future__ import annotations

from typing import Sequence

from apache_beam.options.pipeline_options import PipelineOptions

from evalbeam.configs import ConfigError, EvalConfig
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.metrics.scenarios import set_digest
from evalbeam.pipelines import evaluate
from evalbeam.pipelines.reports.scenarios import COVERAGE_SQL, DIGESTS_SQL, REASONS_SQL


def generate(config: EvalConfig, options: PipelineOptions, flags: Sequence[str] = ()):
    """The scenarios generated (or a pinned set written again) -> (RunKey, PipelineResult)."""
    if config.scenarios is None:
        raise ConfigError("scenarios: evalbeam generate makes the scenarios a scenarios: block asks for "
                          "(agent | a2a | description, goals, personas, difficulties, per_cell, seed); this config "
                          "has none")
    return evaluate.run(config.generation_only(), options, flags=flags, command="generate")


def generated(results, run_key: RunKey) -> dict:
    """What a generation run wrote: its cells' coverage, the dead letters' reasons, the set's digest."""
    tables = {"s": ("scenarios", run_key.run_id)}
    digests = [r["digest"] for r in results.sql(DIGESTS_SQL, {}, tables)]
    return {"cells": results.sql(COVERAGE_SQL, {}, tables), "reasons": results.sql(REASONS_SQL, {}, tables),
            "digest": set_digest(digests), "kept": len(digests)}
