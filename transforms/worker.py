"""What a Beam worker process running evalbeam's DoFns does once: keep its
start-up objects out of the garbage collector's sight, collect young objects
less often, and end quietly on Ctrl-C.

By the time the scoring step is set up in a worker, the modules of Beam, the
cloud client libraries, NumPy, PyArrow and evalbeam are imported: some 170,000
objects that live as long as the process. CPython's collector goes through all
of them in every full collection during the run, and once more when the process
exits: about 0.65 s of a local run with worker processes, spent after the last
bundle while the launching process waits for its workers to end.
gc.freeze() moves every object alive at that moment to a permanent generation
that collections skip (what CPython documents it for: after start-up); objects
made later are collected as before.

Only in a worker process (Beam starts each with CONTROL_API_SERVICE_DESCRIPTOR
in its environment; the launching process of a local run skips the teardown
anyway, pipelines.cli.entry), and not where DuckDB is loaded: its bindings
(nanobind) report their objects still alive when the interpreter ends as leaks,
on the process's stderr.

CPython collects its youngest generation whenever 700 more container objects
(tuples, lists, dicts, sets) have been made than freed, and every tenth such
collection also goes through the older objects of the next generation. Scoring
a row keeps some hundreds of them alive at once (BLEU's n-gram tuples and sets,
the metric_results rows' dicts), so the collector ran about once a row, finding
almost nothing: collect_young_less_often() raises that first threshold to
YOUNG_COLLECTION_OBJECTS (garbage in cycles then waits for at most that many
allocations; the older generations' thresholds are kept). It is called in a
worker process and in the `evalbeam` command's own process (pipelines.cli.entry),
which runs the pipeline itself with one worker; not in a program that uses
evalbeam's transforms in its own process.

Ctrl-C reaches a local run's worker processes too (they share the terminal's
process group), and each would print its KeyboardInterrupt traceback; the
launching process says the run was interrupted (pipelines.cli.entry). A worker
cannot change its signal handler from the threads that run DoFns, so
quiet_interrupts() changes what its main thread's uncaught KeyboardInterrupt
prints: nothing.
"""
from __future__ import annotations

import gc
import os
import sys
import threading

_lock = threading.Lock()
_done = False


def freeze_start_up_objects() -> bool:
    """gc.freeze() once in a worker process (the first call decides; later ones do
    nothing). Whether this call froze."""
    global _done
    with _lock:
        if _done:
            return False
        _done = True
        if not in_worker_process() or "duckdb" in sys.modules:
            return False
        gc.collect()  # what is garbage already is not kept for good
        gc.freeze()
        return True


YOUNG_COLLECTION_OBJECTS = 10_000


def collect_young_less_often() -> None:
    """The collector's first threshold raised to YOUNG_COLLECTION_OBJECTS (never lowered)."""
    young, *older = gc.get_threshold()
    if 0 < young < YOUNG_COLLECTION_OBJECTS:  # 0: collection disabled, left so
        gc.set_threshold(YOUNG_COLLECTION_OBJECTS, *older)


_quiet = False


def in_worker_process() -> bool:
    return "CONTROL_API_SERVICE_DESCRIPTOR" in os.environ


def quiet_interrupts() -> None:
    """In a worker process, once: an uncaught KeyboardInterrupt ends it without a
    traceback (any other exception is printed as before)."""
    global _quiet
    with _lock:
        if _quiet or not in_worker_process():
            return
        _quiet = True
        previous = sys.excepthook

        def hook(kind, value, traceback):
            if not issubclass(kind, KeyboardInterrupt):
                previous(kind, value, traceback)

        sys.excepthook = hook
