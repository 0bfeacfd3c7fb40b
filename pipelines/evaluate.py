"""The evaluation pipeline: read -> validate -> score -> summarize -> write."""
from __future__ import annotations

import dataclasses
import datetime as dt
from importlib import metadata

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from configs import ConfigError, EvalConfig
from metrics.instance import RowSpec, present_columns
from metrics.registry import unmet_inputs
from transforms.read import ReadRecords, match_files, sample_records
from transforms.runs import RunRecord
from transforms.schema import instance_row, utc_now
from transforms.score import ScoreInstances, plan_metrics
from transforms.summarize import SummarizeScores
from transforms.validate import ToInstances
from transforms.write import WriteParquetTable, clear_run_output


def evalbeam_version() -> str:
    try:
        return metadata.version("evalbeam")
    except metadata.PackageNotFoundError:
        return "unknown"


def row_spec(config: EvalConfig) -> RowSpec:
    return RowSpec(
        column_mapping=dict(config.input.column_mapping),
        id_column=config.input.id_column,
        slice_columns=tuple(config.input.slice_columns),
        requirements=tuple((m.output_name, m.input_alternatives()) for m in config.metrics),
    )


@dataclasses.dataclass
class Preflight:
    files: list[str]
    sampled_rows: int
    columns: set[str]


def preflight(config: EvalConfig) -> Preflight:
    """Check, before any work, that the dataset exists and that its columns
    provide every input of every metric. Raises ConfigError naming what is wrong."""
    fmt = config.input.inferred_format()
    files = match_files(config.input.uri)
    if not files:
        raise ConfigError(f"input.uri: no file matches {config.input.uri!r}")
    sample = sample_records(files, fmt)
    columns = present_columns(sample)
    if not sample:
        # Nothing to check against: an empty dataset is an empty run.
        return Preflight(files, 0, columns)
    mapping = config.input.column_mapping
    problems = []
    for i, spec in enumerate(config.metrics):
        alternatives = spec.input_alternatives()
        available = {f for alt in alternatives for f in alt if mapping.get(f, f) in columns}
        if not unmet_inputs(alternatives, available):
            continue
        needs = " or ".join(
            "(" + ", ".join(f"{f}" + (f" [column {mapping[f]!r}]" if f in mapping else "") for f in alt) + ")"
            for alt in alternatives
        )
        problems.append(f"  metrics.{i} ({spec.output_name}): needs {needs}; no column provides "
                        + ", ".join(sorted({f for alt in alternatives for f in alt} - available)))
    for col in config.input.slice_columns:
        if col not in columns:
            problems.append(f"  input.slice_columns: column {col!r} is not in the dataset")
    if config.input.id_column and config.input.id_column not in columns:
        problems.append(f"  input.id_column: column {config.input.id_column!r} is not in the dataset")
    if problems:
        raise ConfigError(
            f"the dataset {config.input.uri!r} does not fit the config "
            f"(columns seen in the first {len(sample)} rows: {', '.join(sorted(columns))}):\n" + "\n".join(problems)
        )
    return Preflight(files, len(sample), columns)


def build_pipeline(pipeline: beam.Pipeline, config: EvalConfig, run_id: str, started_at: dt.datetime) -> None:
    out = config.output.parquet
    slices = tuple(config.input.slice_columns)

    records, unparseable = pipeline | "Read" >> ReadRecords(config.input.uri, config.input.inferred_format())
    instances, invalid = records | "Validate" >> ToInstances(row_spec(config))
    dead_letters = (unparseable, invalid) | "AllDeadLetters" >> beam.Flatten()
    scored = instances | "Score" >> ScoreInstances(run_id, config.metrics)
    thresholds = {p.output_name: p.threshold for p in plan_metrics(config.metrics)}
    summary = scored | "Summarize" >> SummarizeScores(run_id, thresholds)
    read = (records, unparseable) | "AllRead" >> beam.Flatten()
    runs = (read, scored, dead_letters) | "RunRecord" >> RunRecord(
        run_id, config.name, config.to_json(), evalbeam_version(), started_at
    )

    tables = {
        "instances": scored | "InstanceRows" >> beam.Map(lambda s, r: instance_row(r, s.instance), run_id),
        "metric_results": scored | "MetricRows" >> beam.FlatMap(lambda s: s.results),
        "summary": summary,
        "runs": runs,
        "dead_letter": dead_letters | "DeadLetterRows" >> beam.Map(lambda d, r: d.row(r), run_id),
    }
    for table, rows in tables.items():
        rows | f"Write_{table}" >> WriteParquetTable(out, run_id, table, slices)


def run(config: EvalConfig, options: PipelineOptions, run_id: str | None = None):
    """Check the inputs, clear an earlier attempt of this run_id, run the
    pipeline and wait for it. Returns (run_id, PipelineResult)."""
    preflight(config)
    started_at = utc_now()
    run_id = run_id or config.resolved_run_id(started_at)
    clear_run_output(config.output.parquet, run_id)
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, config, run_id, started_at)
    result = pipeline.run()
    result.wait_until_finish()
    return run_id, result
