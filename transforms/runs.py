"""The `runs` row: what ran, when, and counts that reconcile
(read = scored + dead-lettered)."""
from __future__ import annotations

import datetime as dt

import apache_beam as beam

from transforms.schema import RunKey, utc_now


def _count(pcoll, label):
    return pcoll | label >> beam.combiners.Count.Globally()


def _runs_row(_, *, base, read, scored, dead, metric_errors):
    return {
        **base,
        "finished_at": utc_now(),
        "read_count": read,
        "scored_count": scored,
        "dead_letter_count": dead,
        "metric_error_count": metric_errors,
    }


class RunRecord(beam.PTransform):
    """(read stage outputs, scored instances, dead letters) -> the one `runs` row."""

    def __init__(self, run: RunKey, name: str, config_json: str, version: str, started_at: dt.datetime):
        super().__init__()
        self._base = {
            **run.columns(),
            "name": name,
            "config": config_json,
            "evalbeam_version": version,
            "started_at": started_at,
        }

    def expand(self, inputs):
        read, scored, dead = inputs
        metric_errors = (
            scored
            | "MetricErrors" >> beam.Map(lambda s: sum(r["error"] is not None for r in s.results))
            | "SumErrors" >> beam.CombineGlobally(sum)
        )
        side = beam.pvalue.AsSingleton
        return (
            read.pipeline
            | "Start" >> beam.Create([None])
            | "RunRow" >> beam.Map(
                _runs_row,
                base=self._base,
                read=side(_count(read, "CountRead")),
                scored=side(_count(scored, "CountScored")),
                dead=side(_count(dead, "CountDeadLetters")),
                metric_errors=side(metric_errors),
            )
        )
