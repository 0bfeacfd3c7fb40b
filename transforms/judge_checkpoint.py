"""Judge checkpoints: judgments written durably as they complete, so that a
retried bundle, a restarted worker or a killed run re-run with the same run_id
does not pay for them twice.

Each judge shard keeps the answers it got in memory and, every
`judge.checkpoint_seconds` (from a timer thread, so a quiet spell does not
delay it), writes them as one small Parquet chunk under the run's checkpoint
folder:

    <output.parquet>/_evalbeam_attempts/<run_id>/judge_checkpoints/shard-<n>-<id>.parquet
    (BigQuery-only output: <temp_location>/evalbeam-checkpoints/<run_id>/...)

Before calling, a shard reads every chunk of the folder and answers the
judgments it finds there by the same content key the judge cache uses
(metrics.judge.client.request_key: model, generation settings, schema, prompt,
sample), so only the answers of the last few seconds before a crash are asked
again. The folder belongs to one run_id: a different run_id never reads it,
and it is deleted with the run's other attempt files when the run completes.

A chunk is written to a temporary name and renamed (locally), or uploaded as
one object (Cloud Storage, where an object appears only when complete); a
chunk that still cannot be read (a disk filled, a hand-made file) is skipped
with a warning. Failed judgments are not checkpointed: a re-run asks them again.

A chunk that cannot be written for want of space (a full disk or quota, a read-only
filesystem: transforms.write_failure.STORAGE_ERRNOS) leaves no temporary file and ends
the run: the step that checkpoints raises it (CheckpointWriter.check, .close), and the
command says it in one line, status 120, as for its tables, which could not be written
there either. Calling on (a paid judge, a deployed agent) for answers nothing can keep
would be waste. Any other failure of a chunk is a warning, and its answers are kept for
the next try.
"""
from __future__ import annotations

import io
import json
import logging
import os
import tempfile
import threading
import uuid

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from evalbeam.metrics.judge.client import JudgeResponse
from evalbeam.transforms.write import ATTEMPTS, delete_tree
from evalbeam.transforms.write_failure import STORAGE_ERRNOS

log = logging.getLogger(__name__)
FOLDER = "judge_checkpoints"


def checkpoint_folder(output_parquet: str | None, temp_location: str | None, run_id: str) -> str:
    """Where a run_id's judge checkpoints live: beside its attempts (removed with
    them when the run completes), else under the temp location."""
    if output_parquet:
        return FileSystems.join(output_parquet, ATTEMPTS, run_id, FOLDER)

    return FileSystems.join(temp_location or tempfile.gettempdir(), "evalbeam-checkpoints", run_id)


def _schema():
    return pa.schema([
        ("request_key", pa.string()), ("metric", pa.string()), ("verdict", pa.string()),
        ("explanation", pa.string()), ("prompt_tokens", pa.int64()), ("output_tokens", pa.int64()),
        ("batch_prompt_tokens", pa.int64()), ("batch_output_tokens", pa.int64()),
        ("attempts", pa.int64()), ("rate_limited", pa.int64()),
    ])


def shard_of(key: str, shards: int) -> int:
    """The judge shard a request key goes to (the same split as transforms.judge.ResolveFn)."""
    return int(key[:8], 16) % shards


def read_checkpoints(folder: str, shard: int | None = None, shards: int = 1) -> dict[str, JudgeResponse]:
    """request_key -> the checkpointed answer, for the keys of one shard (all with
    shard None). Unreadable chunks are skipped with a warning."""
    try:
        found = FileSystems.match([FileSystems.join(folder, "*.parquet")])[0].metadata_list
    except Exception:  # noqa: BLE001 - no folder yet: nothing checkpointed
        return {}
    answers: dict[str, JudgeResponse] = {}
    for meta in sorted(found, key=lambda m: m.path):
        try:
            with FileSystems.open(meta.path, mime_type="application/octet-stream") as f:
                rows = pq.read_table(io.BytesIO(f.read())).to_pylist()
        except Exception as e:  # noqa: BLE001 - a damaged chunk costs its answers, never the run
            log.warning("skipping an unreadable judge checkpoint chunk %s (%s: %s); its judgments will be asked again",
                        meta.path, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
            continue
        for row in rows:
            key = row["request_key"]
            if shard is not None and shard_of(key, shards) != shard:
                continue
            answers[key] = JudgeResponse(
                key=key, metric=row["metric"], verdict=row["verdict"], explanation=row["explanation"],
                prompt_tokens=row["prompt_tokens"] or 0, output_tokens=row["output_tokens"] or 0,
                batch_prompt_tokens=row["batch_prompt_tokens"] or 0, batch_output_tokens=row["batch_output_tokens"] or 0,
                attempts=row["attempts"] or 0, rate_limited=row["rate_limited"] or 0, checkpointed=True)
    return answers


def _write_file(folder: str, name: str, data: bytes) -> str:
    """Write a file that is either complete or absent: locally to a temporary
    name and renamed; on an object store, one object (visible once complete)."""
    path = FileSystems.join(folder, name)
    if FileSystems.get_scheme(folder) is None:
        os.makedirs(folder, exist_ok=True)
        temporary = os.path.join(folder, f".{name}.tmp")
        try:
            with open(temporary, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        except BaseException:
            try:  # a full disk: the partial file is not left (nor counted as a checkpoint by `runs`)
                os.remove(temporary)
            except OSError:
                pass
            raise
    else:
        with FileSystems.create(path, mime_type="application/octet-stream") as f:
            f.write(data)
    return path


class BatchJournal:
    """judge.mode batch: the Batch jobs a shard has submitted and the judgments in
    each, one small JSON file per job in the checkpoint folder, so that a re-run
    polls a job still running (or reads its results) instead of paying for its
    judgments again."""

    def __init__(self, folder: str, shard: int, shards: int):
        self._folder, self._shard, self._shards = folder, shard, shards

    def resumable(self) -> dict[str, str]:
        """request_key -> the name of the job it was sent in, for this shard's keys."""
        try:
            found = FileSystems.match([FileSystems.join(self._folder, "batch-*.json")])[0].metadata_list
        except Exception:  # noqa: BLE001 - no folder yet
            return {}
        jobs: dict[str, str] = {}
        for meta in sorted(found, key=lambda m: m.path):
            try:
                with FileSystems.open(meta.path, mime_type="application/octet-stream") as f:
                    entry = json.loads(f.read().decode("utf-8"))
                name, keys = entry["name"], entry["keys"]
            except Exception as e:  # noqa: BLE001 - a damaged record costs a resubmission, never the run
                log.warning("skipping an unreadable batch job record %s (%s)", meta.path, type(e).__name__)
                continue
            jobs.update({k: name for k in keys if shard_of(k, self._shards) == self._shard})
        return jobs

    def submitted(self, name: str, keys: list[str]) -> None:
        data = json.dumps({"name": name, "keys": keys}).encode()
        try:
            _write_file(self._folder, f"batch-{self._shard}-{uuid.uuid4().hex[:12]}.json", data)
        except Exception as e:  # noqa: BLE001 - the job runs either way; only a crash would resubmit it
            log.warning("could not record batch job %s under %s (%s)", name, self._folder, type(e).__name__)


def write_chunk(folder: str, name: str, responses: list[JudgeResponse]) -> str:
    """One Parquet chunk of answers, made visible only once complete."""
    table = pa.Table.from_pylist([
        {"request_key": r.key, "metric": r.metric, "verdict": r.verdict, "explanation": r.explanation,
         "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
         "batch_prompt_tokens": r.batch_prompt_tokens, "batch_output_tokens": r.batch_output_tokens,
         "attempts": r.attempts, "rate_limited": r.rate_limited} for r in responses], schema=_schema())
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="snappy")
    return _write_file(folder, name, buffer.getvalue())


class CheckpointWriter:
    """Collects a shard's answers and writes them as a chunk every `seconds`
    (a timer thread), and once more on close."""

    def __init__(self, folder: str, shard: int, seconds: float):
        self._folder = folder
        self._prefix = f"shard-{shard}-{uuid.uuid4().hex[:12]}"
        self._seconds = seconds
        self._pending: list[JudgeResponse] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._chunks = 0
        self.written = 0
        self._storage_error: OSError | None = None  # a full disk met: raised by check() and close()
        self._thread = threading.Thread(target=self._run, name="evalbeam-judge-checkpoint", daemon=True)
        self._thread.start()

    def add(self, response: JudgeResponse) -> None:
        if response.error is None and not response.cache_hit and not response.checkpointed:
            with self._lock:
                self._pending.append(response)

    def flush(self) -> None:
        with self._write_lock:
            with self._lock:
                pending, self._pending = self._pending, []
            if not pending:
                return
            self._chunks += 1
            try:
                write_chunk(self._folder, f"{self._prefix}-{self._chunks:06d}.parquet", pending)
                self.written += len(pending)
            except OSError as e:
                if e.errno not in STORAGE_ERRNOS:
                    self._keep(e, pending)
                elif self._storage_error is None:
                    self._storage_error = e
            except Exception as e:  # noqa: BLE001 - a checkpoint is an economy, not a result: keep judging
                self._keep(e, pending)

    def _keep(self, e: Exception, pending: list[JudgeResponse]) -> None:
        log.warning("could not write a judge checkpoint chunk under %s (%s); %d judgments kept for the next try",
                    self._folder, type(e).__name__, len(pending))
        with self._lock:
            self._pending[:0] = pending

    def check(self) -> None:
        """Raises the storage error a chunk met (a full disk): the run cannot keep its results."""
        if self._storage_error is not None:
            raise self._storage_error

    def _run(self) -> None:
        while not self._stop.wait(self._seconds) and self._storage_error is None:
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._storage_error is None:
            self.flush()
        self.check()


class GcsStaging:
    """Files for Vertex AI batch prediction (metrics.judge.batch.Staging), through
    Beam's filesystems: the job reads its input here and writes its results here."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def write(self, uri: str, data: bytes) -> None:
        with FileSystems.create(uri, mime_type="application/octet-stream") as f:
            f.write(data)

    def list(self, prefix: str) -> list[str]:
        return [m.path for m in FileSystems.match([prefix.rstrip("/") + "/**"])[0].metadata_list]

    def read(self, uri: str) -> bytes:
        with FileSystems.open(uri, mime_type="application/octet-stream") as f:
            return f.read()


def batch_staging(configured: str | None, checkpoint: str | None) -> str | None:
    """Where Vertex AI batch jobs' files go: judge.batch_staging, else beside the
    run's checkpoints when those are on Cloud Storage (deleted with them)."""
    if configured:
        return configured
    if checkpoint and checkpoint.startswith("gs://"):
        return checkpoint.rstrip("/").rsplit("/", 1)[0] + "/judge_batches"
    return None


class _RemoveFn(beam.DoFn):
    def __init__(self, folder: str):
        self._folder = folder

    def process(self, _, **done):
        delete_tree(self._folder)
        yield self._folder


class RemoveCheckpoints(beam.PTransform):
    """Once everything in `done` is finished, delete the run's checkpoint folder
    (for outputs whose checkpoints do not live beside the run's attempts)."""

    def __init__(self, folder: str):
        super().__init__()
        self._folder = folder

    def expand(self, done: dict):
        pipeline = next(iter(done.values())).pipeline
        side = {name: beam.pvalue.AsList(p) for name, p in done.items()}
        return pipeline | "Once" >> beam.Create([None]) | "Remove" >> beam.ParDo(_RemoveFn(self._folder), **side)
