"""Live progress of a local run: counts written by the workers, shown by the launcher.

On a local runner the DoFns may run in this process or in worker processes
(--direct_running_mode=multi_processing), so the counts travel through files:
each counting DoFn instance keeps its own counts and rewrites one small JSON
file in a folder of the launcher's (atomically, at most about once a second),
and the launcher sums the files while the pipeline runs. Beam's own counters
are only readable once a local pipeline has finished; on Dataflow they show in
the job's console, and no progress taps are added.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import sys
import threading
import time
import uuid

import apache_beam as beam
from apache_beam.metrics import Metrics

from evalbeam.metrics.judge.client import JudgeResponse
from evalbeam.transforms.interrupt import INTERRUPTED

FLUSH_SECONDS = 1.0


class CountFn(beam.DoFn):
    """Counts the elements it sees under `key`; emits nothing.

    The count is written when it changed, at most once a FLUSH_SECONDS, by a timer
    thread as well as by the elements: a burst of elements followed by a long wait (the
    judgments an instance needs, asked at once, then answered over minutes) shows
    within a second, not only when the bundle ends."""

    def __init__(self, folder: str, key: str, weight=None):
        self._folder = folder
        self._key = key
        self._weight = weight  # element -> count, default 1

    def setup(self):
        self._path = os.path.join(self._folder, f"{os.getpid()}-{uuid.uuid4().hex}.json")
        self._count = 0
        self._written = 0
        self._flushed = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._tick, name="evalbeam-progress", daemon=True)
        self._timer.start()

    def process(self, element):
        self._count += 1 if self._weight is None else self._weight(element)
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self._flush()
        return ()

    def finish_bundle(self):
        self._flush()

    def teardown(self):
        self._stop.set()

    def _tick(self) -> None:
        while not self._stop.wait(FLUSH_SECONDS):
            if self._count != self._written:
                self._flush()

    def _flush(self) -> None:
        with self._lock:  # the timer and the elements' thread write the same file
            count = self._count
            self._flushed = time.monotonic()
            temp = f"{self._path}.tmp"
            try:
                with open(temp, "w") as f:
                    json.dump({self._key: count}, f)
                os.replace(temp, self._path)
                self._written = count
            except OSError:
                pass  # progress is best effort: never fail the run for it


class JudgeShardLog:
    """Judge progress logged from the worker that holds a judge shard: a line
    every EVALBEAM_JUDGE_LOG_SECONDS (default 60) and one when the shard ends.
    On Dataflow these are the worker log lines of the CallJudge step (Cloud
    Logging); the shard's total is not known up front (its input is a lazy
    iterable), so the job-wide "needed" is the judge_requests_to_call counter."""

    def __init__(self, shard: int, shards: int, quota_per_minute: float, interval: float | None = None,
                 logger: logging.Logger | None = None):
        self._label = f"judge shard {shard + 1}/{shards}"
        self._quota = quota_per_minute
        self._interval = interval if interval is not None else float(os.environ.get("EVALBEAM_JUDGE_LOG_SECONDS", "60"))
        self._log = logger or logging.getLogger("evalbeam.judge")
        self._started = self._logged = time.monotonic()
        self.done = self.failed = self.rate_limited = 0

    def add(self, failed: bool, rate_limited: int) -> None:
        self.done += 1
        self.failed += failed
        self.rate_limited += rate_limited
        now = time.monotonic()
        if now - self._logged >= self._interval:
            self._logged = now
            self._log.info("%s", self.line(now))

    def finish(self) -> None:
        self._log.info("%s (shard finished)", self.line(time.monotonic()))

    def line(self, now: float) -> str:
        elapsed = now - self._started
        rate = self.done / elapsed * 60 if elapsed > 0 else 0.0
        return (f"{self._label}: {self.done:,} judgments done ({self.failed:,} failed, {self.rate_limited:,} "
                f"rate-limited answers) in {_duration(elapsed)}, {rate:,.0f}/min against this shard's "
                f"quota of {self._quota:,.0f}/min")


class CallCounters:
    """The counters of answers from calls (Beam metrics), and their logging and
    checkpointing: one place for both judge paths (transforms.judge.CallJudgeFn,
    transforms.judge_stream.StreamJudgeFn)."""

    def __init__(self):
        self._counters = {name: Metrics.counter("evalbeam", f"judge_{name}") for name in (
            "calls", "rate_limited", "hedged", "failures", "prompt_tokens", "output_tokens")}

    def add(self, response: JudgeResponse, log: JudgeShardLog, writer=None) -> None:
        if writer:
            writer.add(response)
        log.add(bool(response.error), response.rate_limited)
        c = self._counters
        c["calls"].inc(response.attempts)
        c["rate_limited"].inc(response.rate_limited)
        c["hedged"].inc(response.hedged)
        c["prompt_tokens"].inc(response.prompt_tokens)
        c["output_tokens"].inc(response.output_tokens)
        if response.error:
            c["failures"].inc()


def reused(answer) -> int:
    """CountFn's weight for "judge_reused": 1 for an answer (response, links) reused from this
    run_id's checkpoints (paid for by an attempt that died)."""
    return int(answer[0].checkpointed)


def read_counts(folder: str) -> dict[str, int]:
    totals: collections.Counter = collections.Counter()
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    for name in names:
        if name.endswith(".json"):
            try:
                with open(os.path.join(folder, name)) as f:
                    totals.update(json.load(f))
            except (OSError, ValueError):
                continue  # being replaced right now
    return dict(totals)


def describe(counts: dict[str, int], elapsed: float, quota_per_minute: float | None) -> str:
    read, scored, dead = counts.get("read", 0), counts.get("scored", 0), counts.get("dead_lettered", 0)
    # each process tallies its counts per bundle, so a moment's read may lag what was
    # scored or dead-lettered from it: every such row was read
    read = max(read, scored + dead)
    text = f"read {read:,} | scored {scored:,} | dead-lettered {dead:,}"
    needed = counts.get("judge_needed")
    if needed:
        done, reused = counts.get("judge_done", 0), counts.get("judge_reused", 0)
        needed = max(needed, done)  # each count is written apart: the needed may lag the done a moment
        # the pace of the calls made: answers reused from checkpoints cost no call
        rate = (done - reused) / elapsed * 60 if elapsed > 0 else 0.0
        text += f" | judgments {done:,}/{needed:,}" + (f" ({reused:,} from checkpoints)" if reused else "") \
            + f" at {rate:,.0f}/min"
        if quota_per_minute:
            text += f" ({rate / quota_per_minute:.0%} of the quota)"
        if 0 < done < needed and rate > 0:
            text += f", ETA {_duration((needed - done) / rate * 60)}"
    return text + f" | {_duration(elapsed)}"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressDisplay:
    """A thread that shows the counts: one rewritten status line on a terminal
    (tqdm's), a plain log line every `interval` seconds otherwise."""

    def __init__(self, folder: str, quota_per_minute: float | None, stream=None, interval: float | None = None):
        self._folder = folder
        self._quota = quota_per_minute
        self._stream = stream or sys.stderr
        # EVALBEAM_PROGRESS_SECONDS: how often the plain log line comes (default 15)
        self._interval = interval or float(os.environ.get("EVALBEAM_PROGRESS_SECONDS", "15"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="evalbeam-progress", daemon=True)
        self._started = time.monotonic()
        self._outcome = "finished"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, exc_type, *exc):
        # the last line says how the run ended: it may have been interrupted (Ctrl-C) or failed
        self._outcome = "interrupted" if INTERRUPTED.is_set() or (exc_type and issubclass(exc_type, KeyboardInterrupt)) \
            else "finished" if exc_type is None else "failed"
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self):
        if self._stream.isatty():
            from tqdm import tqdm  # start-up time: tqdm only for a progress bar

            with tqdm(file=self._stream, bar_format="{desc}", leave=True) as bar:
                while not self._stop.wait(0.5):
                    bar.set_description_str(self._line())
                bar.set_description_str(self._line())
            return
        while not self._stop.wait(self._interval):
            print(f"evalbeam progress: {self._line()}", file=self._stream, flush=True)
        print(f"evalbeam progress: {self._line()} ({self._outcome})", file=self._stream, flush=True)

    def _line(self) -> str:
        return describe(read_counts(self._folder), time.monotonic() - self._started, self._quota)
