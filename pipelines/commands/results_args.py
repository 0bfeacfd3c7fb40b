"""Where `runs`, `show`, `compare` and `report` read results from: the flags, the results they
name, and without a flag, the place `evalbeam run` recorded a run as written to
(pipelines.run_index), else `output/` in the current folder."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from evalbeam.configs import load_config
from evalbeam.pipelines import run_index
from evalbeam.pipelines.results import BigQueryResults, ParquetResults, ResultsError, results_for

DEFAULT_PARQUET = "output/"
# what a user not finding a run is told: the flags that read elsewhere
ELSEWHERE = "--parquet DIR, --bigquery PROJECT.DATASET or --config CONFIG reads elsewhere"


class RunNotFound(ResultsError):
    """No run of the ids asked for was recorded on this machine, and there is no output/ here."""


def results_args(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--config", help="read where this config writes (BigQuery when it has output.bigquery)")
    where.add_argument("--parquet", help="a Parquet output folder (default: where `evalbeam run` wrote the run on "
                                         "this machine, else output/)")
    where.add_argument("--bigquery", help="a BigQuery dataset, PROJECT.DATASET")


def explicit(args: argparse.Namespace) -> bool:
    """Whether the command was told where to read (a flag wins over what runs recorded)."""
    return bool(args.config or args.bigquery or args.parquet)


def results_of(args: argparse.Namespace, run_ids: Sequence[str] = ()) -> ParquetResults | BigQueryResults:
    """The results the flags name; without one, the place all of `run_ids` were recorded as
    written to (the latest, when one was written to several), else output/ here."""
    if args.config:
        return results_for(load_config(args.config))
    if args.bigquery:
        return BigQueryResults(args.bigquery)
    if args.parquet:
        return ParquetResults(args.parquet)
    recorded = recorded_place(run_ids)
    if recorded is not None:
        return recorded
    if os.path.isdir(DEFAULT_PARQUET):
        return ParquetResults(DEFAULT_PARQUET)
    if run_ids:
        runs = ", ".join(map(repr, run_ids))
        raise RunNotFound(f"no run {runs} recorded on this machine ({run_index.index_path()}) and no results folder "
                           f"{DEFAULT_PARQUET!r} here: {ELSEWHERE}")
    known = [_place_of(e) for e in run_index.all_places()[:5]]
    raise ResultsError(f"no results folder {DEFAULT_PARQUET!r} here: {ELSEWHERE}"
                       + (f" (runs on this machine were written to {', '.join(known)})" if known else ""))


def recorded_place(run_ids: Sequence[str]) -> ParquetResults | BigQueryResults | None:
    """The latest place every one of `run_ids` was recorded as written to, or None. Runs
    recorded in different places (and none holding all of them) are a ResultsError naming them."""
    if not run_ids:
        return None
    # a place whose folder holds the run first: a later run of the id elsewhere may have failed
    found = {run_id: sorted(run_index.places(run_id), key=lambda e: not _holds(e, run_id)) for run_id in run_ids}
    if not all(found.values()):
        return None
    common = [e for e in found[run_ids[0]] if all(any(_same(e, o) for o in found[r]) for r in run_ids[1:])]
    if not common:
        where = "; ".join(f"{r} in {', '.join(_place_of(e) for e in found[r])}" for r in run_ids)
        raise ResultsError(f"the runs were written to different places ({where}); a command reads one: give "
                           "--parquet DIR or --bigquery PROJECT.DATASET where they all are")
    chosen = common[0]
    if len(common) > 1:
        print(f"evalbeam: reading {_place_of(chosen)}, where the latest of them was written; also in "
              f"{', '.join(_place_of(e) for e in common[1:])} (--parquet DIR or --bigquery PROJECT.DATASET reads "
              "another)", file=sys.stderr)
    if chosen.get("bigquery"):
        return BigQueryResults(chosen["bigquery"])
    return ParquetResults(chosen["parquet"])


def not_found(run_id: str, results) -> str:
    """The message of a run that is not where the command looked, naming the flags that look elsewhere."""
    return f"no run {run_id!r} in {results.location} ({ELSEWHERE})"


def _holds(entry: dict, run_id: str) -> bool:
    """Whether a recorded place holds the run's runs table (a BigQuery dataset is not asked: assumed)."""
    parquet = entry.get("parquet")
    return bool(entry.get("bigquery")) or not run_index.is_local(parquet) or \
        os.path.isdir(os.path.join(parquet, run_id, "runs"))


def _place_of(entry: dict) -> str:
    return f"BigQuery {entry['bigquery']}" if entry.get("bigquery") else entry["parquet"]


def _same(entry: dict, other: dict) -> bool:
    return (entry.get("parquet"), entry.get("bigquery")) == (other.get("parquet"), other.get("bigquery"))
