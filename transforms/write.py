"""Writing the output tables as Parquet under <output>/<run_id>/<table>/.

A run never writes into its run folder directly. Each attempt writes beside it,
under <output>/_evalbeam_attempts/<run_id>.<attempt>/, and only when every
table is written (and published to BigQuery, when configured) does one final
step put the attempt in place of the run folder. So a run that fails leaves the
previous output of its run_id as it was.

evalbeam only ever removes what it wrote: a run folder it wrote holds a marker
file (MARKER), and a folder at <output>/<run_id> without one is refused before
any work, never replaced.
"""
from __future__ import annotations

import json
import os
import tempfile
import uuid

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.parquetio import WriteToParquetBatched
from apache_beam.io.textio import WriteToText
from apache_beam.metrics import Metrics
from apache_beam.transforms import window

from evalbeam.metrics.rows.otel_events import evaluation_request
from evalbeam.transforms.run_lock import holder_gone, lock_path, read_holder
from evalbeam.metrics.rows.tables import ATTEMPTS, arrow_schema, utc_now
from evalbeam.transforms.write_failure import quiet_write_failures

MARKER = "_evalbeam_run.json"


class OutputFolderError(RuntimeError):
    """An output folder evalbeam may not write or replace; the message says which and why."""


def run_folder(output: str, run_id: str) -> str:
    return FileSystems.join(output, run_id)


def attempt_folder(output: str, run_id: str, attempt: str) -> str:
    return FileSystems.join(output, ATTEMPTS, run_id, attempt)


def _is_local(path: str) -> bool:
    return FileSystems.get_scheme(path) is None


def _files(folder: str) -> list[str]:
    """Every file under a folder (an object store has no folders, only name prefixes)."""
    folder = folder.rstrip("/")
    if _is_local(folder):
        return [os.path.join(d, f) for d, _, names in os.walk(folder) for f in names]
    return [m.path for m in FileSystems.match([folder + "/**"])[0].metadata_list]


def _exists(folder: str) -> bool:
    return os.path.lexists(folder) if _is_local(folder) else bool(_files(folder))


def is_evalbeam_folder(folder: str) -> bool:
    return FileSystems.exists(FileSystems.join(folder, MARKER))


def check_run_folder(output: str, run_id: str) -> None:
    """Raise OutputFolderError if <output>/<run_id> holds something evalbeam did not write."""
    folder = run_folder(output, run_id)
    if _exists(folder) and not is_evalbeam_folder(folder):
        raise OutputFolderError(
            f"output.parquet: {folder} exists and was not written by evalbeam (it has no {MARKER}); "
            "evalbeam will not replace it: choose another run_id or output folder")


def check_writable(output: str) -> None:
    """Raise OutputFolderError unless a local output folder can be created and written.
    Creates nothing that stays: a probe file in the nearest existing folder is removed at once."""
    if not _is_local(output):
        return
    path = os.path.abspath(output)
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise OutputFolderError(f"output.parquet: cannot write under {output!r}: {existing} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".evalbeam-probe-", dir=existing)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise OutputFolderError(f"output.parquet: cannot write under {output!r}: {e.strerror or e} ({existing})") from None


def delete_tree(folder: str) -> bool:
    """Delete a folder and everything under it, on a filesystem with folders
    (local) or an object store (gs://, where a folder is only a name prefix).
    Returns whether anything was there."""
    folder = folder.rstrip("/")
    if FileSystems.exists(folder):
        FileSystems.delete([folder])
        return True
    found = _files(folder)
    if found:
        FileSystems.delete(found)
    return bool(found)


def _move_tree(source: str, target: str) -> None:
    source, target = source.rstrip("/"), target.rstrip("/")
    if _is_local(source):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(source, target)  # one atomic rename on a local filesystem
        return
    files = _files(source)
    FileSystems.rename(files, [target + f[len(source):] for f in files])


def replace_run_folder(output: str, run_id: str, attempt: str) -> None:
    """Put a finished attempt in place of the run folder. The previous output is
    moved aside first and deleted last; only evalbeam's own folders are touched.

    The run_id's lock (transforms.run_lock) says who owns the run_id. Held by
    this attempt: every other attempt of the run_id, which no live run can own
    while the lock is held, goes with this one's. Held by another run (this
    one's lease passed while it stalled, and a retry took it over): nothing is
    installed. No lock (a remote runner, which is not locked): only what this
    attempt made is deleted: its folder, the output it replaced and the
    run_id's judge checkpoints and batches (which its success makes useless)."""
    holder = read_holder(output, run_id)
    if holder is not None and holder.get("attempt") != attempt:
        raise OutputFolderError(f"run_id {run_id!r}: another run holds its lock now (attempt {holder.get('attempt')}, "
                                f"host {holder.get('host')}, pid {holder.get('pid')}); this run's output was not installed")
    locked = holder is not None
    final = run_folder(output, run_id)
    new = attempt_folder(output, run_id, attempt)
    with FileSystems.create(FileSystems.join(new, MARKER), mime_type="application/json") as f:
        f.write(json.dumps({"run_id": run_id, "attempt": attempt, "written_at": utc_now().isoformat()}).encode())
    check_run_folder(output, run_id)  # again: something may have appeared there while the run ran
    replaced = attempt_folder(output, run_id, f"{attempt}-replaced-{uuid.uuid4().hex[:6]}")
    if _exists(final):
        _move_tree(final, replaced)
    _move_tree(new, final)
    if locked:
        # what remains of this run_id's attempts is evalbeam's own: the output just
        # replaced, and attempts that died before finishing
        delete_tree(FileSystems.join(output, ATTEMPTS, run_id))
    else:
        for folder in (replaced, *(attempt_folder(output, run_id, k) for k in RUN_ID_STATE)):
            delete_tree(folder)
        remove_empty_folder(FileSystems.join(output, ATTEMPTS, run_id))
    remove_empty_folder(FileSystems.join(output, ATTEMPTS))


def remove_empty_folder(folder: str) -> None:
    """A local folder removed when nothing is in it (an object store has no empty folders)."""
    if _is_local(folder):
        try:
            os.rmdir(folder)
        except OSError:
            pass


def remove_attempt(output: str, run_id: str, attempt: str) -> None:
    """A failed attempt's files removed (its own only), and the folders it leaves empty."""
    delete_tree(attempt_folder(output, run_id, attempt))
    remove_empty_folder(FileSystems.join(output, ATTEMPTS, run_id))
    remove_empty_folder(FileSystems.join(output, ATTEMPTS))


def remove_leftovers(output: str, run_id: str) -> int:
    """What runs of run_id that ended early left in a local output (checkpoints, attempts and a
    dead run's lock), removed; the files removed. A run_id a live run holds is refused."""
    root = os.path.join(output, ATTEMPTS)
    folder = os.path.join(root, run_id)
    if not os.path.isdir(folder):
        raise OutputFolderError(f"nothing is left of run_id {run_id!r} in {root}")
    holder = read_holder(output, run_id)
    if holder is not None and not holder_gone(holder):
        raise OutputFolderError(f"run_id {run_id!r} is held by a run (host {holder.get('host')}, pid {holder.get('pid')}): "
                                "not removed")
    files = sum(len(names) for _, _, names in os.walk(folder))
    delete_tree(folder)
    if holder is not None:
        os.remove(lock_path(output, run_id))
    remove_empty_folder(root)
    return files


# What a run_id keeps beside its attempts for a retry to reuse (transforms.judge_checkpoint)
RUN_ID_STATE = ("judge_checkpoints", "judge_batches")


def sweep_dead_attempts(output: str, run_id: str, keep=RUN_ID_STATE) -> None:
    """With the run_id's lock held, the attempts left by runs that died (no live run
    owns one) are deleted, so that they do not fill the disk; the judge checkpoints
    stay, for this run to reuse."""
    root = FileSystems.join(output, ATTEMPTS, run_id)
    if _is_local(root):
        if os.path.isdir(root):
            for name in os.listdir(root):
                if name not in keep:
                    delete_tree(os.path.join(root, name))
        return
    prefix = root.rstrip("/") + "/"
    dead = [f for f in _files(root) if f[len(prefix):].split("/", 1)[0] not in keep]
    if dead:
        FileSystems.delete(dead)


RECORD_BATCH_ROWS = 1000  # WriteToParquet's default
# A table (a Parquet row group) every 16 MiB, where WriteToParquet's default is 64:
# a worker holds at most this much of each table it writes, and writes two large
# ones (instances, metric_results) at once.
ROW_GROUP_BYTES = 16 * 1024 * 1024


class _ArrowBatches:
    """Row dicts -> pyarrow Tables of about ROW_GROUP_BYTES each: pyarrow builds a
    record batch from every RECORD_BATCH_ROWS dicts (`RecordBatch.from_pylist`),
    where Beam's own step appends every value to a column list in Python and
    asks for the window and pane of every row (about 6x less CPU per row)."""

    def __init__(self, schema):
        self._schema = schema
        self._rows: list = []
        self._batches: list = []
        self._bytes = 0

    def add(self, row) -> pa.Table | None:
        """Take a row; a Table when a row group's worth is ready."""
        self._rows.append(row)
        if len(self._rows) >= RECORD_BATCH_ROWS:
            self._flush_rows()
            if self._bytes >= ROW_GROUP_BYTES:
                return self._table()
        return None

    def extend(self, rows) -> list[pa.Table]:
        """Take several rows; the Tables made ready by them (usually none): what add() of
        each in turn gives, without a call per row."""
        tables = []
        self._rows.extend(rows)
        while len(self._rows) >= RECORD_BATCH_ROWS:
            rest = self._rows[RECORD_BATCH_ROWS:]
            del self._rows[RECORD_BATCH_ROWS:]
            self._flush_rows()
            self._rows = rest
            if self._bytes >= ROW_GROUP_BYTES:
                tables.append(self._table())
        return tables

    def rest(self) -> pa.Table | None:
        if self._rows:
            self._flush_rows()
        return self._table() if self._batches else None

    def _flush_rows(self):
        batch = pa.RecordBatch.from_pylist(self._rows, schema=self._schema)
        self._rows = []
        self._batches.append(batch)
        self._bytes += batch.nbytes

    def _table(self):
        table = pa.Table.from_batches(self._batches, schema=self._schema)
        self._batches, self._bytes = [], 0
        return table


class _ArrowTablesFn(beam.DoFn):
    """Row dicts -> pyarrow Tables for Beam's Parquet sink (_ArrowBatches): a table
    every ROW_GROUP_BYTES and at the end of the bundle. The pipeline is in the
    global window (batch), where the tables belong."""

    def __init__(self, schema, lists: bool = False):
        self._schema = schema
        self._lists = lists

    def start_bundle(self):
        self._batches = _ArrowBatches(self._schema)

    def process(self, row):
        yield from self._batches.extend(row if self._lists else (row,))

    def finish_bundle(self):
        table = self._batches.rest()
        if table is not None:
            yield window.GlobalWindows.windowed_value_at_end_of_window(table)


def _parquet_writer(path: str, schema):
    """A file and a pyarrow ParquetWriter on it, with the settings of Beam's Parquet sink."""
    file = FileSystems.create(path, mime_type="application/octet-stream")
    return file, pq.ParquetWriter(file, schema, compression="snappy", use_deprecated_int96_timestamps=False,
                                  use_compliant_nested_type=False)


class _WriteFilesFn(beam.DoFn):
    """Row dicts -> Parquet files written where the rows are made, one per bundle
    that has rows, a row group every ROW_GROUP_BYTES; emits each file's path."""

    def __init__(self, prefix: str, schema, lists: bool = False):
        self._prefix = prefix
        self._schema = schema
        self._lists = lists

    def setup(self):
        # a worker process's own log of a failed write (a full disk) is not printed:
        # the command says it in one line (transforms.write_failure)
        quiet_write_failures()

    def start_bundle(self):
        self._batches = _ArrowBatches(self._schema)
        self._writer = None

    def process(self, row):
        for table in self._batches.extend(row if self._lists else (row,)):
            self._write(table)

    def _write(self, table):
        if self._writer is None:
            self._path = f"{self._prefix}-{uuid.uuid4().hex}.parquet"
            self._file, self._writer = _parquet_writer(self._path, self._schema)
        self._writer.write_table(table)

    def finish_bundle(self):
        table = self._batches.rest()
        if table is not None:
            self._write(table)
        if self._writer is not None:
            self._writer.close()
            self._file.close()
            yield window.GlobalWindows.windowed_value_at_end_of_window(self._path)


class _EmptyTablesFn(beam.DoFn):
    def __init__(self, folder: str, slice_columns):
        self._folder = folder
        self._slices = tuple(slice_columns)

    def process(self, _, **written):
        for table, files in written.items():
            if not files:
                path = FileSystems.join(self._folder, table, "part-empty.parquet")
                file, writer = _parquet_writer(path, arrow_schema(table, self._slices))
                writer.close()
                file.close()
                yield path


class WriteEmptyTables(beam.PTransform):
    """{table: PCollection of the files written} -> for each table that got no
    rows (and so, with direct writes, no file), a file with its schema and no
    rows, as Beam's sink writes one: readers of <table>/*.parquet find the table."""

    def __init__(self, folder: str, slice_columns=()):
        super().__init__()
        self._fn = _EmptyTablesFn(folder, slice_columns)

    def expand(self, written: dict):
        pipeline = next(iter(written.values())).pipeline
        side = {table: beam.pvalue.AsList(files) for table, files in written.items()}
        return pipeline | "Once" >> beam.Create([None]) | "EmptyFiles" >> beam.ParDo(self._fn, **side)


class WriteParquetTable(beam.PTransform):
    """Rows -> Parquet files under <folder>/<table>/; the output is the final
    file names, emitted once every file is written.

    `direct` (local runs, pipelines.local.direct_runner): each bundle writes its
    own file as its rows come, with no further stage. Beam's sink instead writes
    each bundle to a temporary file and renames the files of the bundles that
    succeeded in a last step, after a shuffle: what a runner that retries bundles
    (Dataflow) needs, and some six stages per table, which cost a local run about
    a second in all. The local runner does not retry a bundle: a failure fails the
    run, whose attempt folder is then never put in place (ReplaceRunFolder).

    `lists`: each element is a list of rows (an instance's metric_results rows, say),
    which costs the runner one element where a row each would cost one per row."""

    def __init__(self, folder: str, table: str, slice_columns=(), direct: bool = False, lists: bool = False):
        super().__init__()
        self._prefix = FileSystems.join(folder, table, "part")
        self._schema = arrow_schema(table, slice_columns)
        self._direct = direct
        self._lists = lists

    def expand(self, rows):
        if self._direct:  # a table that gets no rows gets no file here: see WriteEmptyTables
            return rows | "WriteFiles" >> beam.ParDo(_WriteFilesFn(self._prefix, self._schema, self._lists))
        return (
            rows
            | "ToArrow" >> beam.ParDo(_ArrowTablesFn(self._schema, self._lists))
            | "WriteParquet" >> WriteToParquetBatched(
                self._prefix, self._schema, file_name_suffix=".parquet", codec="snappy")
        )


class _ReplaceFn(beam.DoFn):
    def __init__(self, output: str, run_id: str, attempt: str):
        self._args = (output, run_id, attempt)

    def process(self, _, **done):
        replace_run_folder(*self._args)
        yield self._args[1]


class ReplaceRunFolder(beam.PTransform):
    """Once everything in `done` (PCollections: written files, a publish step)
    is finished, put the attempt's folder in place of the run folder."""

    def __init__(self, output: str, run_id: str, attempt: str):
        super().__init__()
        self._fn = _ReplaceFn(output, run_id, attempt)

    def expand(self, done: dict):
        pipeline = next(iter(done.values())).pipeline
        side = {name: beam.pvalue.AsList(p) for name, p in done.items()}
        return pipeline | "Once" >> beam.Create([None]) | "Replace" >> beam.ParDo(self._fn, **side)


class _EvaluationEventsFn(beam.DoFn):
    """A ScoredInstance of an otel_traces case -> one line: an ExportLogsServiceRequest (OTLP
    JSON) of its metric_results rows' gen_ai.evaluation.result events. An instance that names no
    trace (no otel_case) is counted, not written."""

    def __init__(self, time_nanos: int, run_id: str, version: str):
        self._args = (time_nanos, run_id, version)
        self._unlinked = Metrics.counter("evalbeam", "otel_events_unlinked")

    def process(self, scored):
        otel_case = scored.instance.fields.get("otel_case")
        results = scored.results
        if not (isinstance(otel_case, dict) and otel_case.get("roots")):
            self._unlinked.inc(len(results))
            return
        request = evaluation_request(otel_case, results, *self._args)
        if request is not None:
            yield json.dumps(request, ensure_ascii=False, separators=(",", ":"))


class WriteOtelEvents(beam.PTransform):
    """ScoredInstances -> output.otel_events: <prefix>/<run_id>-SSSSS-of-NNNNN.jsonl, one OTLP JSON
    ExportLogsServiceRequest a line (the paths written)."""

    def __init__(self, prefix: str, run_id: str, time_nanos: int, version: str):
        super().__init__()
        self._path = FileSystems.join(prefix, run_id)
        self._fn = _EvaluationEventsFn(time_nanos, run_id, version)

    def expand(self, scored):
        return (scored
                | "EvaluationEvents" >> beam.ParDo(self._fn)
                | "WriteEvents" >> WriteToText(self._path, file_name_suffix=".jsonl"))
