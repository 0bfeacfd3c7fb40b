"""The evaluation pipeline: a short list of named stages (pipelines.stages) chosen
from the config, read -> [judge cache] -> [inference] -> scoring -> [judges] ->
[rubrics] -> [failure modes] -> summaries -> [comparison] -> [ADK history] -> write; and `run`, which
checks everything first (pipelines.preflight), plans the BigQuery reads and the
comparison, then runs it."""
from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
import tempfile
import uuid
from typing import Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions

from evalbeam.configs import ConfigError, EvalConfig
from evalbeam.pipelines.compare import CompareError, check_same_eval, check_same_identity, run_info
from evalbeam.pipelines import run_index
from evalbeam.pipelines.local import LOCAL_RUNNERS, new_pipeline, stream_judge
from evalbeam.pipelines.preflight import billing_project, preflight
from evalbeam.pipelines.results import ResultsError, location_of, previous_run, results_for, runs_row
from evalbeam.pipelines.since import plan_window
from evalbeam.pipelines.stages import RunContext
from evalbeam.pipelines.stages.adk_history import AdkHistoryStage
from evalbeam.pipelines.stages.calibration import CalibrationStage
from evalbeam.pipelines.stages.compare import ComparisonStage
from evalbeam.pipelines.stages.failure_modes import FailureModesStage
from evalbeam.pipelines.stages.inference import InferenceStage
from evalbeam.pipelines.stages.judge_cache import JudgeCacheStage
from evalbeam.pipelines.stages.judge import InferredOnlyStage, JudgeStage
from evalbeam.pipelines.stages.read import ReadStage, row_spec
from evalbeam.pipelines.stages.red_team import RedTeamInferenceStage, RedTeamResultsStage, RedTeamSplitStage
from evalbeam.pipelines.stages.rubrics import RubricStage
from evalbeam.pipelines.stages.scenarios import ScenariosStage
from evalbeam.pipelines.stages.score import ScoringStage
from evalbeam.pipelines.stages.simulator_quality import SimulatorQualityStage
from evalbeam.pipelines.stages.summary import SummariesStage
from evalbeam.pipelines.stages.write import WriteResults
from evalbeam.transforms import bigquery
from evalbeam.transforms.judge_checkpoint import checkpoint_folder
from evalbeam.transforms.progress import ProgressDisplay
from evalbeam.transforms.run_lock import BigQueryRunLock, RunIdHeld, RunLock, dataflow_job_state
from evalbeam.metrics.rows.instance import id_scheme
from evalbeam.metrics.rows.tables import RunKey, utc_now
from evalbeam.transforms.interrupt import RESUME_HINT
from evalbeam.transforms.write import ATTEMPTS, remove_attempt, sweep_dead_attempts
from evalbeam.transforms.write_failure import OutputWriteError, describe, quiet_write_failures, write_failure


def stages(pipeline: beam.Pipeline, context: RunContext) -> list[tuple[str, beam.PTransform]]:
    """The named stages between reading and writing, chosen from the config."""
    config = context.config
    chosen = []
    if config.judge.cache and config.calls_a_model() and config.scenarios is None:  # the scenarios stage reads it
        chosen.append(("JudgeCache", JudgeCacheStage(context)))
    if config.red_team:  # the inference stage, wrapped: each case beside its attacked runs
        chosen.append(("RedTeamInference", RedTeamInferenceStage(context)))
    elif config.inference:
        chosen.append(("Inference", InferenceStage(context)))
    chosen.append(("Scoring", ScoringStage(context)))
    judges, rubrics = config.template_judge_specs(), config.rubric_specs()
    if config.inference and (judges or rubrics):
        chosen.append(("InferredOnly", InferredOnlyStage(context)))
    if judges:
        chosen.append(("Judges", JudgeStage(context, stream=stream_judge(pipeline, config))))
    if rubrics:
        chosen.append(("Rubrics", RubricStage(context)))
    if config.simulator_quality_specs():
        chosen.append(("SimulatorQuality", SimulatorQualityStage(context)))
    if config.red_team:  # the attacked runs apart from here: what follows sees the twins only
        chosen.append(("RedTeamSplit", RedTeamSplitStage(context)))
    if config.failure_modes:
        chosen.append(("FailureModes", FailureModesStage(context)))
    chosen.append(("Summaries", SummariesStage(context)))
    if config.input.labels:
        chosen.append(("Calibration", CalibrationStage(context)))
    if context.compare_base is not None:
        chosen.append(("Comparison", ComparisonStage(context)))
    if config.output.adk_eval_history and config.input.is_adk:
        chosen.append(("AdkEvalHistory", AdkHistoryStage(context)))
    if config.red_team:
        chosen.append(("RedTeamResults", RedTeamResultsStage(context)))
    return chosen


def build_pipeline(pipeline: beam.Pipeline, context: RunContext) -> None:
    """Read, then each stage on the named PCollections made so far, then the one writer."""
    named = pipeline | ("Scenarios" >> ScenariosStage(context) if context.config.scenarios is not None
                        else "Read" >> ReadStage(context))
    for name, stage in stages(pipeline, context):
        named = {**named, **(named | name >> stage)}
    named | "Write" >> WriteResults(context)


def plan_comparison(config: EvalConfig, run_key: RunKey, started_at, allow_different_evals: bool = False):
    """For compare_with: (where the base run is, its RunInfo, this run's RunInfo), or
    None when there is nothing to compare with (no compare_with; no earlier run yet).
    A base run of another eval is a ConfigError unless allowed, found before any work."""
    if not config.compare_with:
        return None

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
    if base_id == run_key.run_id:
        raise ConfigError(f"compare_with: {base_id} is this run's own run_id: a run compared with itself can flag "
                          "nothing (compare_with: previous compares with the eval's run before it)")
    row = results and runs_row(results, base_id)
    if row is None:
        raise ConfigError(f"compare_with: no run {base_id!r} in {results.location if results else config.output.parquet}")
    this = run_info({"run_id": run_key.run_id, "name": config.name, "run_date": run_key.run_date,
                     "started_at": started_at, "config": config.to_json(), "id_scheme": id_scheme(row_spec(config))})

    try:
        check_same_eval(run_info(row), this, allow_different_evals)
        check_same_identity(run_info(row), this)
    except CompareError as e:
        raise ConfigError(f"compare_with: {e}") from None
    return location_of(results), run_info(row), this


def run(config: EvalConfig, options: PipelineOptions, allow_different_evals: bool = False, flags: Sequence[str] = (),
        command: str = "run"):
    """Check the inputs and outputs, prepare the BigQuery dataset, then run the
    pipeline: to the end on a local runner, or until submitted on a remote one.
    An earlier output of the same run_id is replaced only when the run succeeds.
    `flags`: the command's arguments besides the config and its overrides (evalbeam's and
    Beam's), which the command printed to resume an interrupted run repeats (`command`: run, or generate).
    Returns (RunKey, PipelineResult)."""
    started_at = utc_now()
    run_key = RunKey(config.resolved_run_id(started_at), config.resolved_run_date(started_at))
    config = config.for_run_date(run_key.run_date)
    preflight(config, options, run_key.run_id)
    attempt = uuid.uuid4().hex[:12]
    lock = hold_run_id(config, options, run_key.run_id, attempt, started_at)
    try:
        window_lock = hold_run_id(config, options, run_key.run_id, attempt, started_at, window=True) \
            if config.input.since else None
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    remote = options.view_as(StandardOptions).runner not in LOCAL_RUNNERS
    job_lock = tuple(held.path for held in (lock, window_lock) if held is not None) if remote else ()

    quiet_write_failures()
    try:
        run_key, result = _run(config, options, started_at, run_key, attempt, allow_different_evals, job_lock)
        job_id = submitted_job(result) if job_lock else None
        # submitted: the job holds the run_id (and its eval's window) from here on
        for held, what in ((lock, f"the lock of run {run_key.run_id}"), (window_lock, f"the window lock of {config.name}")):
            if job_id and held is not None and not held.hand_to_job(job_id):
                print(f"evalbeam: {what} was taken over while job {job_id} was submitted: the job does not hold it",
                      file=sys.stderr)
        return run_key, result
    except BaseException as e:
        if lock is not None and config.output.parquet:  # the attempt is this run's: its partial files go
            try:
                remove_attempt(config.output.parquet, run_key.run_id, attempt)
            except Exception:  # noqa: BLE001 - the run's own error is the one to say
                logging.getLogger(__name__).warning("could not remove attempt %s", attempt, exc_info=True)
            RESUME_HINT[:] = resume_hint(config, run_key.run_id, flags, command)
        failure = write_failure(e) if isinstance(e, Exception) else None
        if failure is not None:
            raise OutputWriteError(describe(failure, config.output.parquet or "the staging folder",
                                            run_key.run_id)) from None
        raise
    finally:
        for held in (window_lock, lock):
            if held is not None:
                held.release()


def submitted_job(result) -> str | None:
    """The id of the job a remote run submitted; None when none was (a dry run, a template made with
    --template_location: Beam's result then has no job, and its job_id() raises)."""
    try:
        return result.job_id()
    except AttributeError:
        return None


def resume_hint(config: EvalConfig, run_id: str, flags: Sequence[str] = (), command: str = "run") -> list[str]:
    """What a run that ended early left for a re-run of its run_id (local output): its
    checkpointed judgments and agent cases, and how to reuse or remove them."""
    folder = os.path.join(config.output.parquet, ATTEMPTS, run_id)
    if FileSystems.get_scheme(folder) is not None or not os.path.isdir(folder):
        return []
    files = sum(len(names) for _, _, names in os.walk(folder))
    if not files:
        return []
    return [f"evalbeam: run {run_id} left {files} checkpoint file(s) in {folder}: "
            f"`{resume_command(config, run_id, flags, command)}` "
            f"resumes it, reusing them; `evalbeam runs --remove-leftovers {run_id}` removes them"]


def resume_command(config: EvalConfig, run_id: str, flags: Sequence[str] = (), command: str = "run") -> str:
    """The command that runs `run_id` again as it was started, for a shell: the config file, its
    --set overrides and the other flags as given, and the run_id when it was made up (from the time)
    rather than given."""
    overrides = list(config.overrides)
    if config.run_id != run_id:
        overrides.append(f"run_id={run_id}")
    return shlex.join(["evalbeam", command, config.config_file or "CONFIG",
                       *(a for o in overrides for a in ("--set", o)), *flags])


def hold_run_id(config: EvalConfig, options: PipelineOptions, run_id: str, attempt: str, started_at,
                window: bool = False):
    """The run_id's lock (transforms.run_lock), taken before any work, for a local
    run writing Parquet locally or to gs://, or only to BigQuery (a row of the
    dataset's lock table), and for a Dataflow run writing Parquet to gs:// (its
    launcher takes it, and hands it to the job once submitted: run()). None when
    the run is not locked (Parquet on another filesystem; another remote runner,
    or Dataflow with only a BigQuery output, whose launcher does not live as long
    as the job). A held run_id is a ConfigError naming its holder. Once the lock
    is held, what dead runs of this run_id left (attempt folders, not judge
    checkpoints) is deleted. window: the lock of the eval's input.since window instead, taken
    by this run (held while it runs: the next run plans its window from this one's runs row)."""
    parquet = config.output.parquet
    runner = options.view_as(StandardOptions).runner
    cloud = options.view_as(GoogleCloudOptions)
    job_state = dataflow_job_state(cloud.dataflow_endpoint)  # a lock found held by a Dataflow job
    if runner not in LOCAL_RUNNERS and (runner != "DataflowRunner" or FileSystems.get_scheme(parquet or "") != "gs"):
        return None
    job = {"runner": runner, "project": cloud.project, "region": cloud.region} if runner not in LOCAL_RUNNERS else None
    window_of = config.name if window else None
    if not parquet:  # BigQuery only: a row of the dataset's lock table
        try:
            return BigQueryRunLock(config.output.bigquery, run_id, attempt, started_at,
                                   config.output.bigquery_location, window_of).acquire()
        except RunIdHeld as e:
            raise ConfigError(str(e)) from None
    if FileSystems.get_scheme(parquet) not in (None, "gs"):
        return None
    try:
        lock = RunLock(parquet, run_id, attempt, started_at, job, job_state, window_of).acquire()
    except RunIdHeld as e:
        raise ConfigError(str(e)) from None
    if window:
        return lock
    try:
        sweep_dead_attempts(parquet, run_id)
    except Exception:
        lock.release()
        raise
    return lock


def _run(config: EvalConfig, options: PipelineOptions, started_at, run_key: RunKey, attempt: str,
         allow_different_evals: bool = False, job_lock: tuple[str, ...] = ()):
    staging = None
    if config.output.bigquery and not config.output.parquet:
        temp = options.view_as(GoogleCloudOptions).temp_location or tempfile.gettempdir()
        staging = f"{temp.rstrip('/')}/evalbeam-staging/{attempt}"
    try:
        if config.output.bigquery:
            bigquery.prepare_output(config.output.bigquery, config.input.slice_columns, config.output.bigquery_location)
        window = plan_window(config, run_key.run_id, started_at)  # input.since: after the earlier runs' rows
        if window is not None:
            print(f"evalbeam: input.since: last_run: reading the cases that ended in {window.describe()}",
                  file=sys.stderr, flush=True)
        read_plan = None
        if config.input.kind != "files":
            read_plan = bigquery.plan_read(config.input, billing_project(config, options), window)
        cache_plans = [bigquery.plan_table_read(c.removeprefix("bq://"), billing_project(config, options))
                       for c in config.judge.cache if c.startswith("bq://")] \
            if config.calls_a_model() else []
        rubric_plans = [bigquery.plan_table_read(c.removeprefix("bq://"), billing_project(config, options))
                        for c in config.judge.rubrics_from if c.startswith("bq://")] if config.rubric_specs() else []
    except bigquery.BigQueryError as e:
        raise ConfigError(str(e)) from None
    compare_base = plan_comparison(config, run_key, started_at, allow_different_evals)
    pipeline = new_pipeline(options)

    local = options.view_as(StandardOptions).runner in LOCAL_RUNNERS
    checkpoint = checkpoint_folder(config.output.parquet, options.view_as(GoogleCloudOptions).temp_location,
                                   run_key.run_id) if config.calls_a_model() or config.deployed_inference() else None
    progress = tempfile.mkdtemp(prefix="evalbeam-progress-") if local else None
    scratch = tempfile.mkdtemp(prefix="evalbeam-scratch-") if local else None
    try:
        try:
            build_pipeline(pipeline, RunContext(
                config, run_key, started_at, read_plan, tuple(cache_plans), tuple(rubric_plans), compare_base,
                attempt, staging, checkpoint, progress, job_lock, scratch, window))
        except CompareError as e:
            raise ConfigError(f"compare_with: {e}") from None
        # where the run writes, so that `show RUN_ID` finds it from any folder
        run_index.record(run_key.run_id, config.name, config.output.parquet, config.output.bigquery, config.config_file)
        print(f"evalbeam: run {run_key.run_id} (run date {run_key.run_date}) started", file=sys.stderr, flush=True)
        if not local:
            return run_key, pipeline.run()

        quota = config.judge.requests_per_minute if config.judge_specs() or config.generates_scenarios() else None
        with ProgressDisplay(progress, quota):
            result = pipeline.run()
            result.wait_until_finish()
        return run_key, result
    finally:
        for folder in (progress, scratch):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
