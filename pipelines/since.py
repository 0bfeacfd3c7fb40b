"""input.since: last_run, planned before a run: its window, from the eval's earlier runs' rows
(transforms.since says what a window reads), and the lock that keeps two runs from reading it at once.

The window of a run of eval E started at T is [start, end): start is the largest window_end among
E's completed runs (their runs rows: a run that failed or was killed wrote none, so it moves nothing
and the next run reads its nights too), end is T less input.lateness. A run_id run again (its runs
row is there) reads its own window again, so that a night re-run replaces its results with the same
cases, whatever ran since; so let the run_id differ per run (the default, or {name}-{run_date}).
"""
from __future__ import annotations

import datetime as dt

from evalbeam.configs import EvalConfig
from evalbeam.configs.schema import DEFAULT_LATENESS
from evalbeam.pipelines.results import ResultsError, results_for
from evalbeam.transforms.since import ReadWindow

WINDOWS_SQL = "SELECT run_id, window_start, window_end FROM {runs} WHERE name = {P}name AND window_end IS NOT NULL"


def _utc(value) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value.astimezone(dt.timezone.utc)


def earlier_windows(config: EvalConfig) -> list[dict]:
    """The windows of the eval's completed runs: [{run_id, window_start, window_end}] (none before its first)."""
    try:
        results = results_for(config)
    except ResultsError:
        return []  # no output folder yet: no earlier run
    from google.api_core import exceptions  # start-up time: Google Cloud clients only where used

    try:
        rows = results.sql(WINDOWS_SQL, {"name": config.name}, {"runs": ("runs", None)})
    except exceptions.NotFound:
        return []  # a dataset evalbeam has written no runs table to yet
    except exceptions.BadRequest as e:
        if "window_end" in str(e) or "window_start" in str(e):
            return []  # a runs table from before the window's columns (plan, which adds none): no run read a window
        raise
    return [{**r, "window_start": _utc(r["window_start"]), "window_end": _utc(r["window_end"])} for r in rows]


def plan_window(config: EvalConfig, run_id: str, started_at: dt.datetime) -> ReadWindow | None:
    """The window this run reads (None without input.since)."""
    if config.input.since is None:
        return None
    lateness = config.input.lateness if config.input.lateness is not None else DEFAULT_LATENESS
    windows = earlier_windows(config)
    own = next((w for w in windows if w["run_id"] == run_id), None)
    if own is not None:  # a re-run of a completed run: the same window again
        return ReadWindow(own["window_start"], own["window_end"], lateness)
    start = max((w["window_end"] for w in windows), default=None)
    end = _utc(started_at) - lateness
    if start is not None and end < start:
        end = start  # nothing has had its lateness since the last run: an empty window
    return ReadWindow(start, end, lateness)
