"""`evalbeam runs`: the runs, newest first, with their counts, first means and comparison flags."""
from __future__ import annotations

import argparse
import sys

from evalbeam.configs import ConfigError, load_config
from evalbeam.pipelines.commands import UNWRITTEN_OUTPUT_STATUS, no_beam_flags
from evalbeam.pipelines.commands.arguments import positive
from evalbeam.pipelines.commands.results_args import results_args, results_of
from evalbeam.pipelines.results import ResultsError
from evalbeam.pipelines.text_tables import runs_report
from evalbeam.transforms.write_failure import OutputWriteError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--eval", help="only the runs of this eval (config name); with --config, default: the config's name")
    parser.add_argument("--last", type=positive, metavar="N", help="only the last N runs (default: all)")
    results_args(parser)


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    no_beam_flags(beam_args)
    try:
        results, eval_name = results_of(args), args.eval
        if args.config and not eval_name:
            eval_name = load_config(args.config).name  # the config's own runs, not the other evals' beside them
        print(runs_report(results, eval_name, args.last))
        return 0
    except (ConfigError, ResultsError) as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    except OutputWriteError as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return UNWRITTEN_OUTPUT_STATUS
