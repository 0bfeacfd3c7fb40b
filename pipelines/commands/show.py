"""`evalbeam show RUN_ID`: a run's counts, judge accounting, summary, errors and dead letters."""
from __future__ import annotations

import argparse
import sys

from evalbeam.configs import ConfigError
from evalbeam.pipelines.commands import UNWRITTEN_OUTPUT_STATUS, no_beam_flags
from evalbeam.pipelines.commands.results_args import RunNotFound, not_found, results_args, results_of
from evalbeam.pipelines.reports.data import show_data, to_json
from evalbeam.pipelines.results import ResultsError
from evalbeam.pipelines.reports.text import run_report
from evalbeam.transforms.write_failure import OutputWriteError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id")
    parser.add_argument("--json", action="store_true", help="print it as JSON, for scripts")
    results_args(parser)


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    no_beam_flags(beam_args, args)
    try:
        results = results_of(args, [args.run_id])
        tables = results.run_tables(args.run_id)
        if not tables["runs"]:
            print(f"evalbeam: {not_found(args.run_id, results)}", file=sys.stderr)
            return 1
        if args.json:
            print(to_json(show_data(results, args.run_id, tables)))
        else:
            print(run_report(results, args.run_id, tables))
        return 0
    except RunNotFound as e:  # as a run not in the results read: status 1
        print(f"evalbeam: {e}", file=sys.stderr)
        return 1
    except (ConfigError, ResultsError) as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    except OutputWriteError as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return UNWRITTEN_OUTPUT_STATUS
