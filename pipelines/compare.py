"""`evalbeam compare BASE_RUN_ID RUN_ID [RUN_ID ...]`: paired comparison of runs.

Both runs are read back where they were written (Parquet folders or a BigQuery
dataset) by a Beam pipeline (transforms.compare), so comparing runs of millions
of rows runs on Dataflow as it does locally. The comparison rows are written to
the `comparisons` table: Parquet under the run's folder
(<out>/<run_id>/comparisons/, replacing an earlier comparison with the same base)
and, for BigQuery results, into <dataset>.comparisons (replacing the rows of
the same pair in one transaction).

`evalbeam run` with `compare_with` uses the same transform inside the run's own
pipeline (pipelines.evaluate), so a nightly run compares itself.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import tempfile
import uuid
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.parquetio import ReadFromParquet
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from evalbeam.configs import EvalConfig
from evalbeam.metrics.red_team import twin_id
from evalbeam.metrics.rows.instance import ID_SCHEME_INPUTS, ID_SCHEME_ROW
from evalbeam.metrics.statistics.compare import (ALPHA, OVERALL, Gate, Tolerance, base_count, lost_count, parse_tolerance,
                                                 unpaired_counts)
from evalbeam.pipelines.local import new_pipeline
from evalbeam.pipelines.results import Location, location_of, read_rows, run_comparisons, runs_row
from evalbeam.transforms.bigquery import BigQueryError, PublishToBigQuery, ReadBigQueryRows, plan_table_read
from evalbeam.transforms.compare import CompareRuns, PairSpec, result_entry, slice_names
from evalbeam.metrics.rows.tables import RunKey, utc_now
from evalbeam.transforms.write import ATTEMPTS, WriteParquetTable, delete_tree, is_evalbeam_folder, run_folder

SCORE_COLUMNS = ["instance_id", "metric", "score", "error"]


class CompareError(RuntimeError):
    """The runs cannot be compared as asked; the message says why."""


@dataclasses.dataclass(frozen=True)
class GateSettings:
    """The command line's gate settings, over each run's config's: --tolerance T (every metric),
    --tolerance METRIC=T (one metric), --watch METRIC, --gate-slices COLUMN."""

    tolerance: Tolerance | None = None
    per_metric: dict[str, Tolerance] = dataclasses.field(default_factory=dict)
    watched: tuple[str, ...] | None = None
    slices: tuple[str, ...] | None = None


def _names(given: list[str]) -> tuple[str, ...]:
    """Repeatable, comma-separated flag values -> the names."""
    return tuple(m.strip() for g in given for m in g.split(",") if m.strip())


def gate_settings(tolerances: list[str], watched: list[str], gate_slices: list[str] = ()) -> GateSettings:
    """--tolerance, --watch and --gate-slices values -> GateSettings; ValueError naming the bad value."""
    everywhere, per_metric = None, {}
    for given in tolerances:
        metric, sep, value = given.rpartition("=")
        try:
            tolerance = parse_tolerance(value)
        except ValueError as e:
            raise ValueError(f"--tolerance {given}: {e}") from None
        if sep:
            if not metric:
                raise ValueError(f"--tolerance {given}: give METRIC=T, or T alone for every metric")
            per_metric[metric] = tolerance
        else:
            everywhere = tolerance
    return GateSettings(everywhere, per_metric, _names(watched) if watched else None,
                        _names(gate_slices) if gate_slices else None)


@dataclasses.dataclass(frozen=True)
class RunInfo:
    run_id: str
    name: str
    run_date: dt.date
    started_at: dt.datetime
    slice_columns: tuple[str, ...]
    directions: dict[str, str]
    labelled: bool = False  # input.labels: its metric_results have human_label
    num_runs: int = 1  # inference.num_runs: > 1, its instances are runs of cases (compared by case)
    gate: Gate = Gate()  # the config's compare_tolerance(s), compare_watch and compare_gate_slices
    labelled_metrics: frozenset[str] = frozenset()  # the metrics input.labels names
    id_scheme: str = ID_SCHEME_INPUTS  # how its instances got their ids (the runs table's id_scheme)


def run_info(row: dict[str, Any]) -> RunInfo:
    """A runs row -> what a comparison needs of it: its slice columns and metric directions
    come from the config it ran with (a config no longer valid here: none, and the
    registry's directions by metric name)."""
    slices: tuple[str, ...] = ()
    directions: dict[str, str] = {}
    labelled = False
    labelled_metrics: frozenset[str] = frozenset()
    num_runs = 1
    gate = Gate()
    # a run from before the runs table said: its id column's, else a hash of the whole row
    id_scheme = row.get("id_scheme")
    legacy = ID_SCHEME_ROW
    try:
        config = EvalConfig.model_validate(json.loads(row["config"]))
        id_column = config.input.instance_id_column()
        legacy = f"column:{id_column}" if id_column else ID_SCHEME_ROW
        slices, directions = tuple(config.input.slice_columns), config.metric_directions()
        labelled = bool(config.input.labels)
        labelled_metrics = frozenset(config.input.labels)
        num_runs = config.inference.num_runs if config.inference else 1
        gate = config.gate()
    except (ValueError, TypeError):
        pass
    run_date = row["run_date"]
    if isinstance(run_date, str):
        run_date = dt.date.fromisoformat(run_date)
    return RunInfo(row["run_id"], row["name"], run_date, row["started_at"], slices, directions, labelled, num_runs,
                   gate, labelled_metrics, id_scheme or legacy)


# ------------------------------------------------------------- where runs are


class ReadRunScores(beam.PTransform):
    """One run's metric_results -> (instance_id, (metric, score, failed))."""

    def __init__(self, location: Location, run_id: str, labelled: bool = False):
        super().__init__()
        self._location = location
        self._run_id = run_id
        # human_label only from a labelled run: an older run's files lack the column
        self._columns = SCORE_COLUMNS + (["human_label"] if labelled else [])
        self._plan = _bigquery_plan(location, "metric_results", run_id, self._columns) if location.bigquery else None
        if location.parquet:
            self._pattern = FileSystems.join(location.parquet, run_id, "metric_results", "*.parquet")
            _require_files(self._pattern, run_id, "metric_results")

    def expand(self, pbegin):
        if self._plan is not None:
            rows = (pbegin | "Read" >> ReadBigQueryRows(self._plan))[0] | "Data" >> beam.Map(lambda r: r.data)
        else:
            rows = pbegin | "Read" >> ReadFromParquet(self._pattern, columns=self._columns)
        # red_team's attacked runs are compared by their own gate (--fail-on-attack-growth): the metrics', twins only
        return (rows | "Entries" >> beam.Map(result_entry)
                | "Unattacked" >> beam.Filter(lambda entry: twin_id(entry[0]) is None))


class ReadRunSlices(beam.PTransform):
    """One run's instances -> (instance_id, [its slices])."""

    def __init__(self, location: Location, run_id: str, slice_columns: tuple[str, ...]):
        super().__init__()
        self._columns = slice_columns
        fields = ["instance_id", *slice_columns]
        self._plan = _bigquery_plan(location, "instances", run_id, fields) if location.bigquery else None
        if location.parquet:
            self._pattern = FileSystems.join(location.parquet, run_id, "instances", "*.parquet")
            _require_files(self._pattern, run_id, "instances")
        self._fields = fields

    def expand(self, pbegin):
        if self._plan is not None:
            rows = (pbegin | "Read" >> ReadBigQueryRows(self._plan))[0] | "Data" >> beam.Map(lambda r: r.data)
        else:
            rows = pbegin | "Read" >> ReadFromParquet(self._pattern, columns=self._fields)
        return (rows | "Slices" >> beam.Map(slice_names, self._columns)
                | "Unattacked" >> beam.Filter(lambda entry: twin_id(entry[0]) is None))


def _require_files(pattern: str, run_id: str, table: str) -> None:
    """The run's files of `table` exist and each is readable Parquet (its footer
    read): a comparison is a gate on every row of both runs, so a file it cannot
    read stops it, named, rather than leaving its rows out (as `show` may) or
    failing deep in the pipeline."""
    files = FileSystems.match([pattern])[0].metadata_list
    if not files:
        raise CompareError(f"run {run_id}: no {table} files at {pattern}")
    for file in files:
        try:
            with FileSystems.open(file.path, mime_type="application/octet-stream") as f:
                pq.ParquetFile(f).schema_arrow
        except (OSError, pa.ArrowException) as e:
            raise CompareError(f"run {run_id}: {table} file {file.path} is not readable Parquet ({e}); "
                               "remove it or re-run that run to compare it") from None


def _bigquery_plan(location: Location, table: str, run_id: str, fields: list[str]):
    try:
        # run_id is a NAME_RE name ([A-Za-z0-9_.-]): safe inside the quotes
        return plan_table_read(f"{location.bigquery}.{table}", location.billing_project,
                               f"bq://{location.bigquery}.{table} (run {run_id})",
                               row_restriction=f"run_id = '{run_id}'", selected_fields=fields)
    except BigQueryError as e:
        raise CompareError(str(e)) from None


def compare_inputs(pipeline, location: Location, base: RunInfo, run: RunInfo, label: str) -> dict:
    """The base run's scores and slices read back, for CompareRuns; the caller adds the run's."""
    base_slices = tuple(c for c in run.slice_columns if c in base.slice_columns)
    return {
        "base": pipeline | f"{label}BaseScores" >> ReadRunScores(location, base.run_id, base.labelled),
        "base_slices": pipeline | f"{label}BaseSlices" >> ReadRunSlices(location, base.run_id, base_slices),
    }


def pair_spec(base: RunInfo, run: RunInfo, gate: Gate, alpha: float, compared_at: dt.datetime) -> PairSpec:
    """gate: the run's (its config's, with the command line's settings over it)."""
    return PairSpec(base.run_id, run.run_id, run.run_date, run.name, {**base.directions, **run.directions},
                    gate, alpha, compared_at, base.num_runs, run.num_runs,
                    base.labelled_metrics & run.labelled_metrics)


# ------------------------------------------------------------- what a comparison may gate on


def check_same_eval(base: RunInfo, run: RunInfo, allow_different_evals: bool = False) -> None:
    """Runs of two evals (config names) measure different things: comparing them is refused
    unless asked for (--allow-different-evals)."""
    if base.name != run.name and not allow_different_evals:
        raise CompareError(f"run {run.run_id} is of eval {run.name!r}, base run {base.run_id} of eval {base.name!r}: "
                           "runs of different evals are not compared (--allow-different-evals to compare them anyway)")


def describe_scheme(scheme: str) -> str:
    if scheme == ID_SCHEME_INPUTS:
        return "a hash of each case's inputs"
    if scheme == ID_SCHEME_ROW:
        return "a hash of the whole row, outputs included (evalbeam before case identity)"
    return f"the column {scheme.removeprefix('column:')!r}"


def check_same_identity(base: RunInfo, run: RunInfo) -> None:
    """Runs whose instances got their ids differently pair nothing (or by accident): refused, naming
    the way out, rather than reported as instances only in one run or the other."""
    if base.id_scheme != run.id_scheme:
        raise CompareError(
            f"runs {base.run_id} and {run.run_id} identify their cases differently ({base.run_id}: "
            f"{describe_scheme(base.id_scheme)}; {run.run_id}: {describe_scheme(run.id_scheme)}), so their instances "
            "cannot pair: give both runs one input.id_column, or re-run the base run's config with this evalbeam")


def check_gate_metrics(run: RunInfo, settings: GateSettings) -> None:
    """Every metric the command line names (--tolerance METRIC=T, --watch) is one of the run's: a
    misspelt name would leave the metric ungated, silently."""
    known = run.directions  # every metric the run reports (empty: its config is not readable here)
    named = [*(f"--tolerance {m}=" for m in settings.per_metric), *(f"--watch {m}" for m in settings.watched or ())]
    for option, metric in zip(named, [*settings.per_metric, *(settings.watched or ())]):
        if known and metric not in known:
            raise CompareError(f"{option.rstrip('=')}: run {run.run_id} has no metric {metric!r}{did_you_mean(metric, known)}"
                               f"; its metrics: {', '.join(sorted(known))}")
    for column in settings.slices or ():
        if column not in run.slice_columns:
            raise CompareError(f"--gate-slices {column}: run {run.run_id} has no slice column {column!r}"
                               f"{did_you_mean(column, run.slice_columns)}; its slice columns: "
                               f"{', '.join(run.slice_columns) or 'none'}")


def did_you_mean(name: str, known) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def default_min_paired(base_row: dict[str, Any], run_row: dict[str, Any]) -> int:
    """Half of the smaller run (instances scored), rounded up: a comparison pairing fewer
    describes a minority of either run."""
    return -(-min(base_row.get("scored_count") or 0, run_row.get("scored_count") or 0) // 2)


MAX_MISSING = 0.05  # --max-missing's default: the share of the base's instances a run may lose


def pairing_problems(rows: list[dict[str, Any]], min_paired: int, max_missing: float = MAX_MISSING) -> list[str]:
    """Why the gate cannot pass on what it saw, one line each: a gated row (a watched metric's overall
    row, or a gating slice's) that lost more than max_missing of the base's instances, or an overall one
    that pairs fewer than min_paired (a slice is a part of the run: the run's size says nothing of it). Instances new in the run are normal; a metric new in the run has nothing to lose
    or pair (unpaired_note says so)."""
    problems = []
    for r in rows:
        if not r.get("gated", r["slice"] == OVERALL) or base_count(r) == 0:
            continue
        unit = "case" if r.get("paired_by") == "case" else "instance"
        where = f"{r['run_id']} vs {r['base_run_id']}: metric {r['metric']}" + (
            f" ({r['slice']})" if r["slice"] != OVERALL else "")
        lost, total = lost_count(r), base_count(r)
        if lost > max_missing * total:
            problems.append(f"{where}: {lost} of the base's {total} {unit}(s) ({lost / total:.0%}) are missing from "
                            f"the run ({r['only_in_base']}) or have no valid score in it ({lost - r['only_in_base']}), "
                            f"more than --max-missing {max_missing:g} allows")
        elif r["slice"] == OVERALL and r["n_paired"] < min_paired:
            problems.append(f"{where}: pairs {r['n_paired']} {unit}(s), fewer than {min_paired} (--min-paired): "
                            f"{unpaired_counts(r)}")
    return problems


def comparison_gate(results, rows: list[dict[str, Any]], base_run_id: str, run_ids: list[str],
                    min_paired: int | None, max_missing: float | None = None) -> list[str]:
    """pairing_problems for each run compared with the base, min_paired defaulting to
    default_min_paired of the two runs and max_missing to MAX_MISSING."""
    base_row = runs_row(results, base_run_id) or {}
    problems = []
    for run_id in run_ids:
        wanted = min_paired if min_paired is not None else default_min_paired(base_row, runs_row(results, run_id) or {})
        problems += pairing_problems([r for r in rows if r["run_id"] == run_id], wanted,
                                     MAX_MISSING if max_missing is None else max_missing)
    return problems


# ------------------------------------------------------------- evalbeam compare


def compare(results, base_run_id: str, run_ids: list[str], options: PipelineOptions,
            gate_settings: GateSettings | None = None, alpha: float = ALPHA, also_parquet: str | None = None,
            allow_different_evals: bool = False) -> list[dict[str, Any]]:
    """Compare each of run_ids with base_run_id, write the comparisons, return their rows.
    Each run is gated as its config says (compare_tolerance(s), compare_watch), gate_settings
    (the command line's) over it. Runs of another eval than the base's are refused
    (CompareError) unless allowed."""
    gate_settings = gate_settings or GateSettings()
    if base_run_id in run_ids:
        raise CompareError(f"run {base_run_id} is the base run itself: a run compared with itself can flag nothing; "
                           "give the base run and another run")
    location = location_of(results)
    infos = {}
    for run_id in [base_run_id, *run_ids]:
        row = runs_row(results, run_id)
        if row is None:
            raise CompareError(f"no run {run_id!r} in {results.location}")
        infos[run_id] = run_info(row)
    for run_id in run_ids:
        check_same_eval(infos[base_run_id], infos[run_id], allow_different_evals)
        check_same_identity(infos[base_run_id], infos[run_id])
        check_gate_metrics(infos[run_id], gate_settings)
    parquet_out = location.parquet or also_parquet
    for run_id in run_ids:
        if parquet_out and not is_evalbeam_folder(run_folder(parquet_out, run_id)):
            raise CompareError(f"{run_folder(parquet_out, run_id)} is not a finished evalbeam run folder")
    attempt = uuid.uuid4().hex[:12]
    if parquet_out:
        staging = FileSystems.join(parquet_out, ATTEMPTS, f"compare-{attempt}")
    else:
        temp = options.view_as(GoogleCloudOptions).temp_location or tempfile.gettempdir()
        staging = f"{temp.rstrip('/')}/evalbeam-staging/compare-{attempt}"
    compared_at = utc_now()
    base = infos[base_run_id]

    pipeline = new_pipeline(options)
    for i, run_id in enumerate(run_ids):
        run = infos[run_id]
        label = f"Run{i}"
        inputs = compare_inputs(pipeline, location, base, run, label)
        inputs["run"] = pipeline | f"{label}Scores" >> ReadRunScores(location, run_id, run.labelled)
        inputs["run_slices"] = pipeline | f"{label}Slices" >> ReadRunSlices(location, run_id, run.slice_columns)
        gate = run.gate.overridden(gate_settings.tolerance, gate_settings.per_metric, gate_settings.watched,
                                   gate_settings.slices)
        rows = inputs | f"{label}Compare" >> CompareRuns(pair_spec(base, run, gate, alpha, compared_at))
        written = rows | f"{label}Write" >> WriteParquetTable(FileSystems.join(staging, run_id), "comparisons")
        if location.bigquery:
            written_map = {"comparisons": written}
            _ = written_map | f"{label}Publish" >> PublishToBigQuery(
                location.bigquery, RunKey(run_id, run.run_date), (), f"{attempt}{i}", None, staging_folder=None,
                replace=f"run_id = '{run_id}' AND base_run_id = '{base_run_id}'")
    try:
        pipeline.run().wait_until_finish()
        out = []
        for run_id in run_ids:
            folder = FileSystems.join(staging, run_id, "comparisons")
            files = sorted(m.path for m in FileSystems.match([FileSystems.join(folder, "*.parquet")])[0].metadata_list)
            out += read_rows(files)
            if parquet_out:
                install_comparison(parquet_out, run_id, base_run_id, files)
        return out
    finally:
        delete_tree(staging)
        attempts = FileSystems.join(parquet_out, ATTEMPTS) if parquet_out else None
        if attempts and FileSystems.get_scheme(attempts) is None and os.path.isdir(attempts) and not os.listdir(attempts):
            os.rmdir(attempts)


def install_comparison(output: str, run_id: str, base_run_id: str, files: list[str]) -> None:
    """Put a comparison's files in the run folder's comparisons/, in place of any
    earlier comparison of the same two runs (a file holds one pair's rows)."""
    target = FileSystems.join(run_folder(output, run_id), "comparisons")
    existing = [m.path for m in FileSystems.match([FileSystems.join(target, "*.parquet")])[0].metadata_list]
    stale = [p for p in existing if base_run_id in {r["base_run_id"] for r in read_rows([p])}]
    prefix = f"compare-{uuid.uuid4().hex[:8]}-"
    if FileSystems.get_scheme(target) is None:
        os.makedirs(target, exist_ok=True)
    FileSystems.rename(files, [FileSystems.join(target, prefix + FileSystems.split(p)[1]) for p in files])
    if stale:
        FileSystems.delete(stale)


def comparison_rows(results, base_run_id: str, run_id: str, options, also_parquet: str | None = None
                    ) -> tuple[list[dict[str, Any]], bool]:
    """The comparison of run_id with base_run_id: the rows already in the comparisons table,
    else computed (and written there) by `evalbeam compare`'s pipeline. -> (rows, computed)."""
    rows = [r for r in run_comparisons(results, run_id) if r["base_run_id"] == base_run_id]
    if rows:
        return rows, False
    # a report shows the comparison asked for, whichever evals the runs are of
    return compare(results, base_run_id, [run_id], options, also_parquet=also_parquet,
                   allow_different_evals=True), True
