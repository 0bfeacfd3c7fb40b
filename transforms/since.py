"""input.since: last_run: a run reads only what arrived after the eval's last completed run.

A run reads a window, `ReadWindow(start, end, lateness)`: `start` is the window_end of the eval's
run before it (its runs row; None on the first run: from the beginning), `end` is this run's start
less input.lateness (pipelines.since plans it; the runs row keeps both). A case is the window's
when it ended in [start, end): a trace or a conversation when its last span ended (the largest
span end time), an ADK session when its last event was logged, a row at its timestamp column's
time. So the windows of successive runs tile time and each case is evaluated by exactly one run,
once it is complete: a case still going on at `end` (or whose last spans are late, by less than
the lateness) is left to the next run, whole.

To find the window's cases whole, what is read reaches back `lateness` before `start` (files
modified since then, spans that started since then, events logged since then): a case that began
before the window's start and ended in it is read with all its spans, as long as it lasted less
than the lateness before the start. Whatever is read of a case outside the window is counted as
skipped (the runs row's lines_skipped), not evaluated and not dead-lettered: an earlier run
evaluated it, or a later one will.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment.replace(tzinfo=dt.timezone.utc) if moment.tzinfo is None else moment.astimezone(dt.timezone.utc)


def nanos_of(moment: dt.datetime) -> int:
    moment = _utc(moment)
    return int(moment.replace(microsecond=0).timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def timestamp_nanos(value: Any) -> int | None:
    """A row's timestamp (a datetime, ISO text as transforms.bigquery hands TIMESTAMPs over, or
    nanoseconds) as nanoseconds since the epoch; None where there is none or it is no time."""
    if isinstance(value, dt.datetime):
        return nanos_of(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value:
        try:
            return nanos_of(dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


@dataclasses.dataclass(frozen=True)
class ReadWindow:
    start: dt.datetime | None  # None: from the beginning
    end: dt.datetime
    lateness: dt.timedelta

    @property
    def read_from(self) -> dt.datetime | None:
        """What is read reaches back this far: the start less the lateness."""
        return None if self.start is None else _utc(self.start) - self.lateness

    def where(self, nanos: int) -> str:
        """Where a case that ended at `nanos` lies: "before" the window (an earlier run's),
        "in" it, or "after" it (not complete yet: a later run's)."""
        if self.start is not None and nanos < nanos_of(self.start):
            return "before"
        return "in" if nanos < nanos_of(self.end) else "after"

    def sql_from(self, column: str) -> str:
        """A SQL condition (a Storage Read row restriction, or a WHERE) selecting the rows read:
        `column` at or after read_from; "" from the beginning."""
        if self.read_from is None:
            return ""
        return f"{column} >= TIMESTAMP '{self.read_from.isoformat()}'"

    def sql_rows(self, column: str) -> str:
        """A SQL condition selecting rows whose `column` is in [start, end): rows are cases of their own."""
        bounds = [f"{column} < TIMESTAMP '{_utc(self.end).isoformat()}'"]
        if self.start is not None:
            bounds.insert(0, f"{column} >= TIMESTAMP '{_utc(self.start).isoformat()}'")
        return " AND ".join(bounds)

    def describe(self) -> str:
        start = "the beginning" if self.start is None else _utc(self.start).isoformat()
        return f"[{start}, {_utc(self.end).isoformat()})"
