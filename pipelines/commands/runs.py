"""`evalbeam runs`: the runs, newest first, with their counts, first means and comparison flags."""
from __future__ import annotations

import argparse
import sys

from evalbeam.configs import ConfigError, load_config
from evalbeam.pipelines.commands import UNWRITTEN_OUTPUT_STATUS, no_beam_flags
from evalbeam.pipelines.commands.arguments import positive
from evalbeam.pipelines.commands.results_args import results_args, results_of
from evalbeam.pipelines.reports.data import runs_data, to_json
from evalbeam.pipelines.results import ResultsError, format_leftovers, is_url, leftovers
from evalbeam.pipelines.reports.text import runs_report
from evalbeam.transforms.write_failure import OutputWriteError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--eval", help="only the runs of this eval (config name); with --config, default: the config's name")
    parser.add_argument("--last", type=positive, metavar="N", help="only the last N runs (default: all)")
    parser.add_argument("--json", action="store_true",
                        help="print the runs as a JSON list, for scripts (each run's counts, overall means and "
                             "comparison flags)")
    parser.add_argument("--remove-leftovers", action="append", default=[], metavar="RUN_ID",
                        help="remove what runs of RUN_ID that ended early left (checkpoints a re-run would reuse); "
                             "repeatable")
    results_args(parser)


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    no_beam_flags(beam_args, args)
    try:
        results, eval_name = results_of(args), args.eval
        if args.config and not eval_name:
            eval_name = load_config(args.config).name  # the config's own runs, not the other evals' beside them
        if args.remove_leftovers:
            return remove(results, args.remove_leftovers)
        if args.json:
            print(to_json(runs_data(results, eval_name, args.last)))
            return 0
        print(runs_report(results, eval_name, args.last) + format_leftovers(leftovers(results)))
        return 0
    except (ConfigError, ResultsError) as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    except OutputWriteError as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return UNWRITTEN_OUTPUT_STATUS


def remove(results, run_ids: list[str]) -> int:
    """--remove-leftovers: each run_id's leftovers removed, said; status 2 when one cannot be."""
    from evalbeam.transforms.write import OutputFolderError, remove_leftovers  # Beam: only when removing

    output = getattr(results, "output", None)
    if not output or is_url(output):
        print("evalbeam: --remove-leftovers works on a local Parquet output (--parquet DIR or --config)", file=sys.stderr)
        return 2
    status = 0
    for run_id in run_ids:
        try:
            print(f"removed {remove_leftovers(output, run_id)} file(s) left by run_id {run_id}")
        except OutputFolderError as e:
            print(f"evalbeam: {e}", file=sys.stderr)
            status = 2
    return status
