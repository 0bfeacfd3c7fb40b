"""The scenarios stage: conversation scenarios generated for an agent (transforms.scenarios) through
the one judge layer, or a set generated earlier reused by its digest (scenarios.pinned_from), written
as an ADK eval set (output.eval_set) and a scenarios table; the kept ones are the run's input, in place
of the read stage, as an ADK eval set's conversation_scenario cases are read. What the generation needs
from the launcher is resolved by pipelines.scenario_inputs."""
from __future__ import annotations

import json
from typing import Any

import apache_beam as beam

from evalbeam.pipelines.preflight import parquet_glob
from evalbeam.pipelines.scenario_inputs import generation_plan, pinned_set
from evalbeam.pipelines.stages import Stage
from evalbeam.pipelines.stages.read import row_spec
from evalbeam.transforms.judge import ReadJudgeCache
from evalbeam.transforms.scenarios import (
    GenerateScenarios,
    WriteEvalSet,
    eval_case,
    record_data,
    scenario_records,
)
from evalbeam.transforms.records import SourceLines
from evalbeam.transforms.validate import ToInstances


def pinned_outputs(row: dict[str, Any], run):
    """An earlier kept row -> (this run's scenarios row, (eval_id, case line, record data))."""
    scenario = json.loads(row["conversation_scenario"])
    columns = {k: row.get(k) for k in ("goal", "persona", "difficulty", "language")}
    out = {**row, **run.columns(), "cache_hit": True}
    return out, (row["eval_id"], eval_case(row["eval_id"], scenario), record_data(row["eval_set_id"], row["eval_id"],
                                                                                 scenario, columns))


class ScenariosStage(Stage):
    """PBegin -> records, unparseable, source_lines, instances, invalid, dead_letters (as the read stage
    makes them, of the kept scenarios), scenarios (rows), eval_set (its writing done), [cached],
    judge_cache/scenarios and usage/scenarios."""

    def expand(self, pbegin):
        context = self._context
        config = context.config
        scenarios = config.scenarios
        pipeline = pbegin.pipeline
        out: dict[str, Any] = {}
        if config.judge.cache:
            parquet = [parquet_glob(p) for p in config.judge.cache if not p.startswith("bq://")]
            out["cached"] = pipeline | "ReadJudgeCache" >> ReadJudgeCache(parquet, list(context.cache_plans))
        if scenarios.pinned:
            _, rows = pinned_set(scenarios)
            pinned = pipeline | "PinnedScenarios" >> beam.Create(rows) | "Reuse" >> beam.Map(pinned_outputs, context.run)
            rows_out = pinned | "Rows" >> beam.Map(lambda p: p[0])
            kept = pinned | "Kept" >> beam.Map(lambda p: p[1])
            set_id = rows[0]["eval_set_id"]
        else:
            plan = generation_plan(config)
            judge_context = context.judge_context(out)
            rows_out, kept, cache_rows, usage = pbegin | "Generate" >> GenerateScenarios(
                context.run, plan, judge_context)
            out.update({"judge_cache/scenarios": cache_rows, "usage/scenarios": usage})
            set_id = plan.eval_set_id
        written = kept | "WriteEvalSet" >> WriteEvalSet(config.output.eval_set, set_id, config.name)
        records = kept | "Records" >> beam.Map(scenario_records, config.output.eval_set)
        # ids are unique by construction (a cell's slug and the scenario's digest; a repeat within a cell is a
        # near-duplicate, never kept twice): no decisions to make, so no shuffle of the instances by id
        no_repeats = pipeline | "NoRepeatedIds" >> beam.Create([])
        instances, invalid = records | "Validate" >> ToInstances(row_spec(config), no_repeats)
        unparseable = pipeline | "NoUnparseable" >> beam.Create([])
        out.update({"records": records, "unparseable": unparseable,
                    # each case is one line of the eval set file: the lines reconcile as a file input's do
                    "source_lines": records | "SourceLines" >> beam.Map(lambda r: SourceLines(r.origin, 1, 0)),
                    "instances": instances,
                    "invalid": invalid,
                    "dead_letters": (unparseable, invalid) | "AllDeadLetters" >> beam.Flatten(),
                    "scenarios": rows_out, "eval_set": written})
        return out
