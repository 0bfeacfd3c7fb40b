"""The one writer: every table of the run written to Parquet from the one schema
(metrics.rows.tables), loaded into BigQuery when configured, then put in place of an
earlier attempt of the same run_id (transforms.write)."""
from __future__ import annotations

import apache_beam as beam

from evalbeam.pipelines.local import direct_runner
from evalbeam.pipelines.stages import Stage
from evalbeam.pipelines.stages.summary import version
from evalbeam.transforms import bigquery
from evalbeam.transforms.calibration import labelled_results
from evalbeam.transforms.judge_checkpoint import RemoveCheckpoints
from evalbeam.transforms.run_lock import ReleaseRunLock
from evalbeam.metrics.rows.tables import instance_row
from evalbeam.transforms.write import (
    ReplaceRunFolder, WriteEmptyTables, WriteOtelEvents, WriteParquetTable, attempt_folder, run_folder,
)


def _nanos(moment) -> int:
    """A datetime as OTLP's nanoseconds since the epoch (no float rounding)."""
    return int(moment.replace(microsecond=0).timestamp()) * 1_000_000_000 + moment.microsecond * 1000


class WriteResults(Stage):
    """instances, scored, summary, runs, dead_letters, judge_cache[, rubrics][, comparisons] -> written."""

    def expand(self, named):
        context = self._context
        config, run = context.config, context.run
        pipeline = named["instances"].pipeline
        slices = tuple(config.input.slice_columns)
        tables = {
            "instances": named["instances"] | "InstanceRows" >> beam.Map(lambda i, r: instance_row(r, i), run),
            # an instance's rows as one element (the runner's cost is per element)
            "metric_results": named["scored"] | "MetricRows" >> beam.Map(labelled_results),
            "summary": named["summary"],
            "runs": named["runs"],
            "dead_letter": named["dead_letters"] | "DeadLetterRows" >> beam.Map(lambda d, r: d.row(r), run),
            "judge_cache": named["judge_cache"],
            "rubrics": named["rubrics"] if "rubrics" in named else pipeline | "NoRubrics" >> beam.Create([]),
            "comparisons": named["comparisons"] if "comparisons" in named else (
                pipeline | "NoComparison" >> beam.Create([])),
            "calibration": named["calibration"] if "calibration" in named else (
                pipeline | "NoCalibration" >> beam.Create([])),
            "failure_assignments": named["failure_assignments"] if "failure_assignments" in named else (
                pipeline | "NoFailureAssignments" >> beam.Create([])),
            "failure_modes": named["failure_modes"] if "failure_modes" in named else (
                pipeline | "NoFailureModes" >> beam.Create([])),
            "taxonomies": named["taxonomies"] if "taxonomies" in named else (
                pipeline | "NoTaxonomies" >> beam.Create([])),
            "scenarios": named["scenarios"] if "scenarios" in named else (
                pipeline | "NoScenarios" >> beam.Create([])),
            "attacks": named["attacks"] if "attacks" in named else pipeline | "NoAttacks" >> beam.Create([]),
            "attack_summary": named["attack_summary"] if "attack_summary" in named else (
                pipeline | "NoAttackSummary" >> beam.Create([])),
        }
        direct = direct_runner(pipeline)
        # Parquet is always written: it is the output (written beside the run's
        # folder, and put in its place at the end), or what BigQuery loads from.
        if config.output.parquet:
            folder = attempt_folder(config.output.parquet, run.run_id, context.attempt)
        else:
            folder = run_folder(context.staging, run.run_id)
        written = {
            table: rows | f"Write_{table}" >> WriteParquetTable(folder, table, slices, direct=direct,
                                                               lists=table == "metric_results")
            for table, rows in tables.items()
        }
        done = dict(written)
        if "eval_set" in named:  # the generated scenarios' eval set file, written before the run is put in place
            done["eval_set"] = named["eval_set"]
        if direct and config.output.parquet:
            done["empty_tables"] = written | "EmptyTables" >> WriteEmptyTables(folder, slices)
        if config.output.otel_events:  # the scores as OTLP gen_ai.evaluation.result events, beside the traces
            done["otel_events"] = named["scored"] | "WriteOtelEvents" >> WriteOtelEvents(
                config.output.otel_events, run.run_id, _nanos(context.started_at), version())
        if config.output.bigquery:
            done["published"] = written | "PublishToBigQuery" >> bigquery.PublishToBigQuery(
                config.output.bigquery, run, slices, context.attempt, config.output.bigquery_location,
                staging_folder=None if config.output.parquet else folder,
            )
        if config.output.parquet:
            # the judge checkpoints live beside the attempts, and go with them
            replaced = done | "ReplaceRunFolder" >> ReplaceRunFolder(config.output.parquet, run.run_id, context.attempt)
            if context.job_lock:  # the job holds the run_id (Dataflow): its last step gives it (and a window) back
                return replaced | "ReleaseRunLock" >> ReleaseRunLock(context.job_lock, context.attempt)
            return replaced
        if context.checkpoint and (config.calls_a_model() or config.deployed_inference()):
            return done | "RemoveJudgeCheckpoints" >> RemoveCheckpoints(context.checkpoint)
        return done
