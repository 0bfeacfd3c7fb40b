"""The evaluation pipeline: read -> validate -> score -> summarize -> write."""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import sys
import tempfile
import uuid
from importlib import metadata

import apache_beam as beam
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, GoogleCloudOptions, PipelineOptions, StandardOptions

from evalbeam.configs import ConfigError, EvalConfig
from evalbeam.metrics.compare import ALPHA
from evalbeam.metrics.instance import RowSpec, present_columns
from evalbeam.metrics.registry import unmet_inputs
from evalbeam.metrics.judge.client import JudgeCredentialsError, check_credentials
from evalbeam.transforms import bigquery, judge
from evalbeam.transforms.judge_checkpoint import batch_staging, checkpoint_folder
from evalbeam.transforms.local_cloud import storage_client
from evalbeam.transforms.read import FileParts, ReadRecords, default_part_bytes, match_files, sample_records
from evalbeam.transforms.runs import RunRecord
from evalbeam.transforms.schema import RunKey, instance_row, utc_now
from evalbeam.transforms.score import ScoreInstances, plan_metrics
from evalbeam.transforms.summarize import SummarizeScores
from evalbeam.transforms.validate import ToInstances, UniqueIdDecisions
from evalbeam.transforms.write import (
    OutputFolderError,
    remove_attempt,
    ReplaceRunFolder,
    WriteEmptyTables,
    WriteParquetTable,
    attempt_folder,
    check_run_folder,
    check_writable,
    run_folder,
)

LOCAL_RUNNERS = (None, "DirectRunner", "direct", "PrismRunner", "prism")
DIRECT_RUNNERS = (None, "DirectRunner", "direct")  # Beam's Python runner: runs each bundle once, in memory


def new_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """A Beam pipeline with these options; on the DirectRunner (the default), run by
    Beam's FnApiRunner itself.

    Beam's DirectRunner first tries to run a pipeline on Prism, a runner written
    in Go whose binary it downloads from GitHub on first use, and falls back to
    the FnApiRunner when it cannot (on a machine without internet access, this
    project's included, after a failed download and some 0.25 s). evalbeam's local
    runs are built for the FnApiRunner and tested on it: bundles run in this
    process or in --direct_num_workers worker processes, none retried (direct
    Parquet writes, the streaming judge path, transforms.progress). So a local run
    goes to it directly, as the DirectRunner's own fallback builds it: the same
    runner on every machine, and nothing fetched at run time."""
    if options.view_as(StandardOptions).runner not in DIRECT_RUNNERS:
        return beam.Pipeline(options=options)
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(
        pipeline_options=JobServiceHandle.encode_pipeline_options(options.get_all_options())))
    return beam.Pipeline(runner=fn_runner.FnApiRunner(provision_info=provision), options=options)


def evalbeam_version() -> str:
    try:
        return metadata.version("evalbeam")
    except metadata.PackageNotFoundError:
        return "unknown"


def row_spec(config: EvalConfig) -> RowSpec:
    return RowSpec(
        column_mapping=dict(config.input.column_mapping),
        # an ADK file's records carry their ADK id (<eval_set_id>:<eval_id>[:<session_id>])
        id_column=config.input.id_column or ("instance_id" if config.input.is_adk else None),
        slice_columns=tuple(config.input.slice_columns),
        requirements=tuple((m.output_name, _inputs_left(config, m.input_alternatives())) for m in config.metrics),
        # a template judge puts an instance's missing input on its own row (transforms.judge);
        # a rubric metric cannot yet: a row lacking its inputs is dead-lettered
        strict=tuple(m.output_name for m in config.rubric_specs()),
    )


# What inference fills in (metrics.inference.apply_result): not needed from the input.
INFERRED_FIELDS = ("response", "predicted_trajectory", "invocations", "latency_in_seconds", "failure")


def _inputs_left(config: EvalConfig, alternatives):
    """A metric's input alternatives less what inference produces, when the config infers."""
    if not config.inference:
        return alternatives
    return tuple(tuple(f for f in alt if f not in INFERRED_FIELDS) for alt in alternatives)


@dataclasses.dataclass
class Preflight:
    source: str  # what was checked: the files matched, or the BigQuery table/query
    checked_rows: int | None  # rows sampled for the column check (None: the table schema was used)
    columns: set[str]
    unreadable: list = dataclasses.field(default_factory=list)  # dead letters met while sampling


def billing_project(config: EvalConfig, options: PipelineOptions | None) -> str | None:
    if config.input.project:
        return config.input.project
    if config.output.bigquery:
        return config.output.bigquery_dataset()[0]
    return options.view_as(GoogleCloudOptions).project if options else None


def preflight(config: EvalConfig, options: PipelineOptions | None = None, run_id: str | None = None) -> Preflight:
    """Check, before any work, that the input exists, that its columns provide
    every input of every metric, and that the outputs can be written (and, for
    `run_id`, that its Parquet folder is evalbeam's to replace). Raises
    ConfigError naming the resource or field at fault. Creates nothing."""
    if config.input.kind == "files":
        checked = _check_files(config)
    else:
        try:
            label, columns = bigquery.describe_input(config.input, billing_project(config, options))
        except bigquery.BigQueryError as e:
            raise ConfigError(str(e)) from None
        checked = Preflight(label, None, set(columns))
    _check_columns(config, checked)
    _check_outputs(config, options, run_id or config.resolved_run_id())
    _check_judge(config, options)
    _check_inference(config)
    return checked


def _check_inference(config: EvalConfig) -> None:
    """The function or agent to run must import here (workers need it installed too)."""
    inference = config.inference
    if inference is None or inference.kind == "model":
        return
    from evalbeam.metrics.inference import AgentInferrer, load_target

    try:
        if inference.kind == "agent":
            AgentInferrer(inference.target)
        else:
            load_target(inference.target, "inference.function")
    except Exception as e:  # noqa: BLE001 - whatever stops the import is what the user must fix
        raise ConfigError(f"inference.{inference.kind}: cannot load {inference.target!r}: {type(e).__name__}: {e}") from None


def parquet_glob(location: str) -> str:
    """A judge.cache location: a glob as given, else a judge_cache folder."""
    if any(c in location for c in "*?[") or location.endswith(".parquet"):
        return location
    return location.rstrip("/") + "/*.parquet"


def _check_judge(config: EvalConfig, options: PipelineOptions | None) -> None:
    if not config.judge_specs() and not _model_inference(config):
        return
    try:
        check_credentials(config.judge.settings())
    except JudgeCredentialsError as e:
        raise ConfigError(str(e)) from None
    tables = [("cache", "judge_cache", loc) for loc in config.judge.cache]
    if config.rubric_specs():
        tables += [("rubrics_from", "rubrics", loc) for loc in config.judge.rubrics_from]
    seen: dict[str, int] = {}
    for field, table, location in tables:
        i = seen[field] = seen.get(field, -1) + 1
        if location.startswith("bq://"):
            try:
                bigquery.describe_table(location.removeprefix("bq://"), billing_project(config, options), f"judge.{field}.{i}")
            except bigquery.BigQueryError as e:
                raise ConfigError(str(e)) from None
        else:
            try:
                found = match_files(parquet_glob(location))
            except BeamIOError as e:
                raise ConfigError(f"judge.{field}.{i}: cannot list {location!r}: {_short(e)}") from None
            if not found:
                raise ConfigError(f"judge.{field}.{i}: no {table} Parquet files at {parquet_glob(location)!r}")


def _check_files(config: EvalConfig) -> Preflight:
    uri = config.input.uri
    try:
        files = match_files(uri)
    except BeamIOError as e:
        reason = next(iter(e.exception_details.values()), e) if getattr(e, "exception_details", None) else e
        raise ConfigError(f"input.uri: cannot list {uri!r}: {_short(reason)}") from None
    if not files:
        raise ConfigError(f"input.uri: no file matches {uri!r}")
    if FileSystems.get_scheme(uri) is None and os.path.isdir(uri):  # Beam's local match gives a folder named alone
        ext = {"csv": "csv"}.get(config.input.format or "", "jsonl")
        raise ConfigError(f"input.uri: {uri!r} is a folder: name its files, e.g. "
                          f"{os.path.join(uri, '*.' + ext)!r}")
    sample = sample_records(files, config.input.inferred_format())
    return Preflight(f"{len(files)} file(s)", len(sample.records), present_columns(map(_with_trace_fields, sample.records)),
                     sample.dead_letters)


def _with_trace_fields(record: dict) -> dict:
    """A sampled row with the fields its agent trace implies (a one-turn case's response...),
    which the column check counts as provided."""
    if not any(k in record for k in ("invocations", "agent_data", "intermediate_events")):
        return record
    from evalbeam.metrics.instance import build_instance

    try:
        fields = build_instance(record, RowSpec({}, None, (), ()), "preflight").fields
    except Exception:  # noqa: BLE001 - such a row is dead-lettered when read; here it provides what it has
        return record
    return {**record, **fields}


def _short(error) -> str:
    text = str(error)
    if "NotFound" in text or "404" in text:
        return "the bucket or path does not exist or is not reachable"
    return text.splitlines()[0][:300]


AGENT_EVENT_COLUMNS = ("timestamp", "event_type", "agent", "session_id", "invocation_id", "content")


def _check_columns(config: EvalConfig, checked: Preflight) -> None:
    if checked.checked_rows == 0:
        return  # an empty dataset is an empty run: nothing to check against
    columns = checked.columns
    if config.input.format == "adk_agent_events":
        # the rows are events, not instances: the plugin's columns are what is needed
        missing = [c for c in AGENT_EVENT_COLUMNS if c not in columns]
        if missing:
            raise ConfigError(f"input: {checked.source} is not an ADK agent events table (BigQueryAgentAnalyticsPlugin): "
                              f"no column {', '.join(missing)}")
        return
    mapping = config.input.column_mapping
    problems = []
    for i, spec in enumerate(config.metrics):
        alternatives = _inputs_left(config, spec.input_alternatives())
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
        seen = "its schema" if checked.checked_rows is None else f"the first {checked.checked_rows} rows"
        raise ConfigError(
            f"the dataset ({checked.source}) does not fit the config "
            f"(columns in {seen}: {', '.join(sorted(columns))}):\n" + "\n".join(problems)
        )


def _check_outputs(config: EvalConfig, options: PipelineOptions | None, run_id: str | None) -> None:
    parquet = config.output.parquet
    if parquet and parquet.startswith("gs://"):
        bucket = parquet[len("gs://"):].split("/", 1)[0]
        try:
            exists = storage_client().bucket(bucket).exists()
        except Exception as e:  # noqa: BLE001 - any failure to reach the bucket is reported as such
            raise ConfigError(f"output.parquet: cannot reach bucket {bucket!r}: {_short(e)}") from None
        if not exists:
            raise ConfigError(f"output.parquet: bucket {bucket!r} does not exist")
    if parquet:
        try:
            check_writable(parquet)
            if run_id:
                check_run_folder(parquet, run_id)
        except OutputFolderError as e:
            raise ConfigError(str(e)) from None
    if config.output.bigquery and options is not None:
        runner = options.view_as(StandardOptions).runner
        temp = options.view_as(GoogleCloudOptions).temp_location
        if parquet is None and runner not in LOCAL_RUNNERS and not (temp or "").startswith("gs://"):
            raise ConfigError("output.bigquery without output.parquet needs --temp_location=gs://... to stage files")


# A local run over at least this much input uses every core (worker processes),
# when the user sets no --direct_* flag: below it, starting the workers costs
# more than they save. Measured with bench/compute_throughput.py's rows (ROUGE,
# BLEU and trajectories; 1.4 KB a row) on 2 cores: 8.5 MB took about as long
# either way (two workers slightly longer), 17 MB 20% less time with two, 28 MB 27% less.
# (EVALBEAM_PARALLEL_INPUT_BYTES sets another size.)
PARALLEL_INPUT_BYTES = 16 * 1024 * 1024


def input_bytes(config: EvalConfig) -> int | None:
    """The size of a file input, all files together; None when it cannot be listed
    (preflight reports that) or the input is not files."""
    if config.input.kind != "files":
        return None
    try:
        return sum(m.size_in_bytes for m in FileSystems.match([config.input.uri])[0].metadata_list)
    except Exception:  # noqa: BLE001 - preflight reports an input it cannot list
        return None


def local_worker_args(config: EvalConfig, beam_args: list[str]) -> list[str]:
    """The flags that make a local run of a large file input use every core:
    [] when the runner is not local, the user chose (any --direct_ flag), the
    run calls a judge or runs inference (waiting, not computing), or the input is small."""
    options = PipelineOptions(beam_args)
    cores = os.cpu_count() or 1
    if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS or any(a.startswith("--direct_") for a in beam_args):
        return []
    if cores < 2 or config.input.kind != "files" or config.judge_specs() or config.inference:
        return []
    size = input_bytes(config)
    if size is None or size < int(os.environ.get("EVALBEAM_PARALLEL_INPUT_BYTES") or PARALLEL_INPUT_BYTES):
        return []
    return [f"--direct_num_workers={cores}", "--direct_running_mode=multi_processing"]


def local_workers(pipeline: beam.Pipeline) -> int:
    """How many worker processes (or threads) a local run spreads its bundles over."""
    options = pipeline.options
    if options.view_as(StandardOptions).runner not in DIRECT_RUNNERS:
        return 1
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode not in ("multi_processing", "multi_threading"):
        return 1
    return direct.direct_num_workers or os.cpu_count() or 1


def part_bytes(pipeline: beam.Pipeline, config: EvalConfig) -> int | None:
    """The size of the parts a large JSONL input is read in, when a local run has
    several workers: a whole multiple of the workers' number of parts (at least two
    each), so that each worker gets an equal share (the local runner deals a stage's
    input out to its workers in turn). None (transforms.read.PART_BYTES) otherwise."""
    workers = local_workers(pipeline)
    size = input_bytes(config) if workers > 1 else None
    if not size:
        return None
    parts = workers * max(2, math.ceil(size / (workers * default_part_bytes())))
    return max(1, math.ceil(size / parts))


def lean_local(pipeline: beam.Pipeline, config: EvalConfig) -> bool:
    """Whether ids are checked by reading the files twice (transforms.validate): on a
    local runner, whose shuffles hold their data in memory, when the input is files."""
    return config.input.kind == "files" and pipeline.options.view_as(StandardOptions).runner in LOCAL_RUNNERS


def direct_runner(pipeline: beam.Pipeline) -> bool:
    """Whether the pipeline runs on the DirectRunner, which holds shuffles in memory
    and never retries a bundle: each bundle then writes its own Parquet files
    (transforms.write.WriteParquetTable's `direct`)."""
    return pipeline.options.view_as(StandardOptions).runner in DIRECT_RUNNERS


def stream_judge(pipeline: beam.Pipeline, config: EvalConfig) -> bool:
    """Whether template judge metrics are answered as the rows stream by
    (transforms.judge.StreamJudgeFn): on the DirectRunner with one worker
    process, which then keeps the whole quota, judging online, and with no
    inference or rubric metric (whose stages join on shuffles)."""
    options = pipeline.options
    return (direct_runner(pipeline) and options.view_as(DirectOptions).direct_num_workers == 1
            and config.judge.mode == "online" and not config.inference and not config.rubric_specs())


def _read(pipeline: beam.Pipeline, config: EvalConfig, read_plan: bigquery.ReadPlan | None):
    """-> records, unparseable, source lines, instances, invalid."""
    decisions = None
    if read_plan is None:
        fmt = config.input.inferred_format()
        parts = pipeline | "FileParts" >> FileParts(config.input.uri, fmt, part_bytes(pipeline, config))
        records, unparseable, source_lines = pipeline | "Read" >> ReadRecords(fmt, parts=parts)
        if lean_local(pipeline, config):
            first_read = pipeline | "ReadIds" >> ReadRecords(fmt, parts=parts, counted=False)
            decisions = first_read[0] | "IdDecisions" >> UniqueIdDecisions(row_spec(config))
    else:
        records, source_lines = pipeline | "ReadBigQuery" >> bigquery.ReadBigQueryRows(read_plan)
        unparseable = pipeline | "NoUnparseableRows" >> beam.Create([])
        if config.input.format == "adk_agent_events":
            from evalbeam.transforms.read_adk import GroupAgentEvents

            records, unparseable = records | "AgentSessions" >> GroupAgentEvents(config.input.granularity, read_plan.label)
    instances, invalid = records | "Validate" >> ToInstances(row_spec(config), decisions)
    return records, unparseable, source_lines, instances, invalid


def read_marks(records, unparseable):
    """One small mark per record read, parseable or not: what the counts need. (A
    Flatten of the records themselves would be held whole by the local runner.)"""
    return ((records | "ReadMarks" >> beam.Map(lambda _: 1), unparseable | "UnparseableMarks" >> beam.Map(lambda _: 1))
            | "AllRead" >> beam.Flatten())


def read_instances(pipeline: beam.Pipeline, config: EvalConfig, read_plan: bigquery.ReadPlan | None = None):
    """The input read and validated as a run reads it -> (instances, records read, dead letters)."""
    records, unparseable, _, instances, invalid = _read(pipeline, config, read_plan)
    read = read_marks(records, unparseable)
    dead = (unparseable, invalid) | "AllDeadLetters" >> beam.Flatten()
    return instances, read, dead


def build_pipeline(pipeline: beam.Pipeline, config: EvalConfig, run: RunKey, started_at,
                   read_plan: bigquery.ReadPlan | None = None, attempt: str | None = None,
                   staging: str | None = None, cache_plans: list | None = None, compare_base=None,
                   progress: str | None = None, rubric_plans: list | None = None,
                   checkpoint: str | None = None) -> None:
    """compare_base: (Location, RunInfo of the base run, RunInfo of this run) to compare
    this run's scores with, into the comparisons table; None for no comparison.
    progress: a local folder the workers write live counts to (transforms.progress), or None.
    rubric_plans: planned BigQuery reads of judge.rubrics_from tables.
    checkpoint: the run's judge checkpoint folder (transforms.judge_checkpoint), or None."""
    slices = tuple(config.input.slice_columns)

    records, unparseable, source_lines, instances, invalid = _read(pipeline, config, read_plan)
    dead_letters = (unparseable, invalid) | "AllDeadLetters" >> beam.Flatten()
    cached = None
    if config.judge.cache and (config.judge_specs() or _model_inference(config)):
        parquet = [p for p in config.judge.cache if not p.startswith("bq://")]
        cached = pipeline | "JudgeCache" >> judge.ReadJudgeCache([parquet_glob(p) for p in parquet], cache_plans or [])
    inference_parts = None
    if config.inference:
        from evalbeam.transforms.infer import Infer

        instances, *inference_parts = instances | "Inference" >> Infer(
            run, config.inference, config.judge, cached, progress, checkpoint)
    computed = instances | "Score" >> ScoreInstances(run, config.computation_specs())
    thresholds = {p.output_name: p.threshold for p in plan_metrics(config.computation_specs())}
    adk_criteria = {s.output_name: s.name for s in config.computation_specs()
                    if s.definition() is not None and s.definition().kind == "adk"}
    from evalbeam.metrics.adk import INFORMATIONAL_CRITERIA

    # a verdict needs a criterion that passes or fails (the efficiency ones never do)
    if config.input.is_adk and set(adk_criteria.values()) - set(INFORMATIONAL_CRITERIA):
        from evalbeam.transforms.adk_status import THRESHOLD, add_case_status

        computed = computed | "AdkCaseStatus" >> beam.Map(add_case_status, run, adk_criteria)
        thresholds["adk_case_status"] = THRESHOLD
    rubric_specs = config.rubric_specs()
    judge_specs = [s for s in config.judge_specs() if s not in rubric_specs]
    # Template judges and rubric metrics call the judge at the same time: each
    # takes half of the quotas. (The rubric stages run one after the other.)
    judge_config = _quota_share(config.judge, 0.5 if judge_specs and rubric_specs else 1.0)
    scored_parts, cache_parts, usage_parts = [computed], [], []
    if inference_parts and _model_inference(config):
        cache_parts.append(inference_parts[0]), usage_parts.append(inference_parts[1])
    judged_instances = instances
    if config.inference and (judge_specs or rubric_specs):
        from evalbeam.transforms.infer import inference_error_rows, inferred

        # a case inference could not produce is not judged: its judge rows carry the inference error
        judged_instances = instances | "Inferred" >> beam.Filter(inferred)
        scored_parts.append(instances | "NotInferred" >> beam.Filter(lambda i: not inferred(i))
                            | "InferenceErrorRows" >> beam.Map(
                                inference_error_rows, run, [s.output_name for s in judge_specs + rubric_specs],
                                config.judge.model))
    if judge_specs:
        thresholds.update({p.output_name: p.threshold for p in judge.plan_judges(judge_specs)})
    if judge_specs and stream_judge(pipeline, config):
        # the computation rows and the judge rows of an instance come out together: no Flatten
        scored_parts[0], cache_rows, usage = computed | "Judge" >> judge.JudgeInstances(
            run, judge_specs, judge_config, cached, progress, checkpoint, stream=True)
        cache_parts.append(cache_rows), usage_parts.append(usage)
    elif judge_specs:
        judged, cache_rows, usage = judged_instances | "Judge" >> judge.JudgeInstances(run, judge_specs, judge_config, cached,
                                                                                progress, checkpoint)
        scored_parts.append(judged), cache_parts.append(cache_rows), usage_parts.append(usage)
    if rubric_specs:
        from evalbeam.transforms.rubric_judge import ReadPinnedRubrics, RubricJudge, plan_rubric_metrics

        pinned = None
        if config.judge.rubrics_from:
            parquet = [p for p in config.judge.rubrics_from if not p.startswith("bq://")]
            pinned = pipeline | "PinnedRubrics" >> ReadPinnedRubrics([parquet_glob(p) for p in parquet],
                                                                     rubric_plans or [])
        rubric_scored, cache_rows, usage, rubric_rows = judged_instances | "RubricJudge" >> RubricJudge(
            run, rubric_specs, judge_config.settings(), config.judge.sampling_count, config.judge.shards,
            cached, pinned, progress, checkpoint, config.judge.checkpoint_seconds,
            batch_staging(config.judge.batch_staging, checkpoint))
        thresholds.update({p.output_name: p.threshold for p in plan_rubric_metrics(rubric_specs)})
        scored_parts.append(rubric_scored), cache_parts.append(cache_rows), usage_parts.append(usage)
    else:
        rubric_rows = pipeline | "NoRubrics" >> beam.Create([])
    scored = tuple(scored_parts) | "AllScores" >> beam.Flatten() if len(scored_parts) > 1 else scored_parts[0]
    cache_rows = tuple(cache_parts) | "AllJudgeCache" >> beam.Flatten() if cache_parts else (
        pipeline | "NoJudgeCache" >> beam.Create([]))
    if len(usage_parts) > 1:
        from evalbeam.transforms.rubric_judge import merge_usage

        usage = tuple(usage_parts) | "AllJudgeUsage" >> beam.Flatten() | "MergeJudgeUsage" >> beam.CombineGlobally(merge_usage)
    else:
        usage = usage_parts[0] if usage_parts else pipeline | "NoJudgeUsage" >> beam.Create([{}])
    summary = scored | "Summarize" >> SummarizeScores(run, thresholds)
    if config.output.adk_eval_history and config.input.is_adk:
        from evalbeam.transforms.adk_history import WriteEvalHistory

        criteria = {s.output_name: (s.name, s.effective_threshold()) for s in config.computation_specs()
                    if s.definition() is not None and s.definition().kind == "adk"}
        scored | "AdkEvalHistory" >> WriteEvalHistory(config.output.adk_eval_history, config.name,
                                                      started_at.timestamp(), criteria)
    read = (records, unparseable)  # the records read: parsed or not (tallied apart, then summed)
    counted = computed
    if config.inference and config.inference.num_runs > 1:
        from evalbeam.transforms.infer import first_run

        # a case scored num_runs times counts once: read = scored + dead-lettered
        counted = computed | "FirstRuns" >> beam.Filter(lambda s, n: first_run(s.instance.instance_id, n),
                                                        config.inference.num_runs)
    if progress:
        from evalbeam.transforms.progress import CountFn

        # counted where they are made, not after a Flatten: the local runner runs a
        # Flatten's consumers only once every input is complete
        records | "ProgressRead" >> beam.ParDo(CountFn(progress, "read"))
        unparseable | "ProgressReadUnparseable" >> beam.ParDo(CountFn(progress, "read"))
        counted | "ProgressScored" >> beam.ParDo(CountFn(progress, "scored"))
        unparseable | "ProgressUnparseable" >> beam.ParDo(CountFn(progress, "dead_lettered"))
        invalid | "ProgressInvalid" >> beam.ParDo(CountFn(progress, "dead_lettered"))
    runs = (read, counted, scored, dead_letters, usage, source_lines) | "RunRecord" >> RunRecord(
        run, config.name, config.to_json(), evalbeam_version(), started_at, config.judge.prices, config.judge.model
    )

    if compare_base is not None:
        from evalbeam.pipelines.compare import compare_inputs, pair_spec
        from evalbeam.transforms.compare import CompareRuns, result_entry

        location, base_info, this_run = compare_base
        inputs = compare_inputs(pipeline, location, base_info, this_run, "Previous")
        inputs["run"] = scored | "ThisRunScores" >> beam.FlatMap(lambda s: [result_entry(r) for r in s.results])
        inputs["run_slices"] = instances | "ThisRunSlices" >> beam.Map(
            lambda i: (i.instance_id, [f"{c}={'(missing)' if v is None else v}" for c, v in i.slices.items()]))
        comparisons = inputs | "CompareWithBase" >> CompareRuns(
            pair_spec(base_info, this_run, config.compare_tolerance, ALPHA, started_at))
    else:
        comparisons = pipeline | "NoComparison" >> beam.Create([])

    tables = {
        "instances": instances | "InstanceRows" >> beam.Map(lambda i, r: instance_row(r, i), run),
        # an instance's rows as one element (the runner's cost is per element)
        "metric_results": scored | "MetricRows" >> beam.Map(lambda s: s.results),
        "summary": summary,
        "runs": runs,
        "dead_letter": dead_letters | "DeadLetterRows" >> beam.Map(lambda d, r: d.row(r), run),
        "judge_cache": cache_rows,
        "rubrics": rubric_rows,
        "comparisons": comparisons,
    }
    # Parquet is always written: it is the output (written beside the run's
    # folder, and put in its place at the end), or what BigQuery loads from.
    if config.output.parquet:
        folder = attempt_folder(config.output.parquet, run.run_id, attempt)
    else:
        folder = run_folder(staging, run.run_id)
    written = {
        table: rows | f"Write_{table}" >> WriteParquetTable(folder, table, slices, direct=direct_runner(pipeline),
                                                           lists=table == "metric_results")
        for table, rows in tables.items()
    }
    done = dict(written)
    if direct_runner(pipeline) and config.output.parquet:
        done["empty_tables"] = written | "EmptyTables" >> WriteEmptyTables(folder, slices)
    if config.output.bigquery:
        done["published"] = written | "PublishToBigQuery" >> bigquery.PublishToBigQuery(
            config.output.bigquery, run, slices, attempt, config.output.bigquery_location,
            staging_folder=None if config.output.parquet else folder,
        )
    if config.output.parquet:
        # the judge checkpoints live beside the attempts, and go with them
        done | "ReplaceRunFolder" >> ReplaceRunFolder(config.output.parquet, run.run_id, attempt)
    elif checkpoint and (judge_specs or rubric_specs or _model_inference(config)):
        from evalbeam.transforms.judge_checkpoint import RemoveCheckpoints

        done | "RemoveJudgeCheckpoints" >> RemoveCheckpoints(checkpoint)


def _model_inference(config: EvalConfig) -> bool:
    return config.inference is not None and config.inference.kind == "model"


def _quota_share(judge_config, share: float):
    """The judge settings with `share` of the configured quotas."""
    if share == 1.0:
        return judge_config
    tokens = judge_config.tokens_per_minute
    return judge_config.model_copy(update={"requests_per_minute": judge_config.requests_per_minute * share,
                                           "tokens_per_minute": tokens * share if tokens else None})


def plan_comparison(config: EvalConfig, run_key: RunKey, started_at, allow_different_evals: bool = False):
    """For compare_with: (where the base run is, its RunInfo, this run's RunInfo), or
    None when there is nothing to compare with (no compare_with; no earlier run yet).
    A base run of another eval is a ConfigError unless allowed, found before any work."""
    if not config.compare_with:
        return None
    from evalbeam.pipelines.compare import location_of, previous_run, run_info, runs_row
    from evalbeam.pipelines.report import ResultsError, results_for

    try:
        results = results_for(config)
    except ResultsError:
        results = None  # no output folder yet: no earlier run
    base_id = config.compare_with
    if base_id == "previous":
        base_id = results and previous_run(results, config.name, run_key.run_id, run_key.run_date)
        if not base_id:
            logging.getLogger(__name__).warning("compare_with: no earlier run of %s to compare with", config.name)
            print(f"compare_with: previous: no earlier run of {config.name} to compare with", file=sys.stderr)
            return None
    row = results and runs_row(results, base_id)
    if row is None:
        raise ConfigError(f"compare_with: no run {base_id!r} in {results.location if results else config.output.parquet}")
    this = run_info({"run_id": run_key.run_id, "name": config.name, "run_date": run_key.run_date,
                     "started_at": started_at, "config": config.to_json()})
    from evalbeam.pipelines.compare import CompareError, check_same_eval

    try:
        check_same_eval(run_info(row), this, allow_different_evals)
    except CompareError as e:
        raise ConfigError(f"compare_with: {e}") from None
    return location_of(results), run_info(row), this


def run(config: EvalConfig, options: PipelineOptions, allow_different_evals: bool = False):
    """Check the inputs and outputs, prepare the BigQuery dataset, then run the
    pipeline: to the end on a local runner, or until submitted on a remote one.
    An earlier output of the same run_id is replaced only when the run succeeds.
    Returns (RunKey, PipelineResult)."""
    started_at = utc_now()
    run_key = RunKey(config.resolved_run_id(started_at), config.resolved_run_date(started_at))
    config = config.for_run_date(run_key.run_date)
    preflight(config, options, run_key.run_id)
    attempt = uuid.uuid4().hex[:12]
    lock = hold_run_id(config, options, run_key.run_id, attempt, started_at)
    from evalbeam.transforms.write_failure import OutputWriteError, describe, quiet_write_failures, write_failure

    quiet_write_failures()
    try:
        return _run(config, options, started_at, run_key, attempt, allow_different_evals)
    except BaseException as e:
        if lock is not None and config.output.parquet:  # the attempt is this run's: its partial files go
            try:
                remove_attempt(config.output.parquet, run_key.run_id, attempt)
            except Exception:  # noqa: BLE001 - the run's own error is the one to say
                logging.getLogger(__name__).warning("could not remove attempt %s", attempt, exc_info=True)
        failure = write_failure(e) if isinstance(e, Exception) else None
        if failure is not None:
            raise OutputWriteError(describe(failure, config.output.parquet or "the staging folder",
                                            run_key.run_id)) from None
        raise
    finally:
        if lock is not None:
            lock.release()


def hold_run_id(config: EvalConfig, options: PipelineOptions, run_id: str, attempt: str, started_at):
    """The run_id's lock (transforms.run_lock), taken before any work, for a local
    run writing Parquet locally or to gs://, or only to BigQuery (a row of the
    dataset's lock table): None when the run is not locked (a remote runner, whose
    launcher does not live as long as the job; Parquet on another filesystem).
    A held run_id is a ConfigError naming its holder. Once the lock is held, what
    dead runs of this run_id left (attempt folders, not judge checkpoints) is deleted."""
    from evalbeam.transforms.run_lock import BigQueryRunLock, RunIdHeld, RunLock
    from evalbeam.transforms.write import sweep_dead_attempts

    parquet = config.output.parquet
    if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS:
        return None
    if not parquet:  # BigQuery only: a row of the dataset's lock table
        try:
            return BigQueryRunLock(config.output.bigquery, run_id, attempt, started_at,
                                   config.output.bigquery_location).acquire()
        except RunIdHeld as e:
            raise ConfigError(str(e)) from None
    if FileSystems.get_scheme(parquet) not in (None, "gs"):
        return None
    try:
        lock = RunLock(parquet, run_id, attempt, started_at).acquire()
    except RunIdHeld as e:
        raise ConfigError(str(e)) from None
    try:
        sweep_dead_attempts(parquet, run_id)
    except Exception:
        lock.release()
        raise
    return lock


def _run(config: EvalConfig, options: PipelineOptions, started_at, run_key: RunKey, attempt: str,
         allow_different_evals: bool = False):
    staging = None
    if config.output.bigquery and not config.output.parquet:
        temp = options.view_as(GoogleCloudOptions).temp_location or tempfile.gettempdir()
        staging = f"{temp.rstrip('/')}/evalbeam-staging/{attempt}"
    try:
        if config.output.bigquery:
            bigquery.prepare_output(config.output.bigquery, config.input.slice_columns, config.output.bigquery_location)
        read_plan = None
        if config.input.kind != "files":
            read_plan = bigquery.plan_read(config.input, billing_project(config, options))
        cache_plans = [bigquery.plan_table_read(c.removeprefix("bq://"), billing_project(config, options))
                       for c in config.judge.cache if c.startswith("bq://")] \
            if config.judge_specs() or _model_inference(config) else []
        rubric_plans = [bigquery.plan_table_read(c.removeprefix("bq://"), billing_project(config, options))
                        for c in config.judge.rubrics_from if c.startswith("bq://")] if config.rubric_specs() else []
    except bigquery.BigQueryError as e:
        raise ConfigError(str(e)) from None
    compare_base = plan_comparison(config, run_key, started_at, allow_different_evals)
    pipeline = new_pipeline(options)
    from evalbeam.pipelines.compare import CompareError

    local = options.view_as(StandardOptions).runner in LOCAL_RUNNERS
    checkpoint = checkpoint_folder(config.output.parquet, options.view_as(GoogleCloudOptions).temp_location,
                                   run_key.run_id) if config.judge_specs() or _model_inference(config) else None
    progress = tempfile.mkdtemp(prefix="evalbeam-progress-") if local else None
    try:
        try:
            build_pipeline(pipeline, config, run_key, started_at, read_plan, attempt, staging, cache_plans,
                           compare_base, progress, rubric_plans, checkpoint)
        except CompareError as e:
            raise ConfigError(f"compare_with: {e}") from None
        print(f"evalbeam: run {run_key.run_id} (run date {run_key.run_date}) started", file=sys.stderr, flush=True)
        if not local:
            return run_key, pipeline.run()
        from evalbeam.transforms.progress import ProgressDisplay

        quota = config.judge.requests_per_minute if config.judge_specs() else None
        with ProgressDisplay(progress, quota):
            result = pipeline.run()
            result.wait_until_finish()
        return run_key, result
    finally:
        if progress:
            shutil.rmtree(progress, ignore_errors=True)
