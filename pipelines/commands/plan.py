"""`evalbeam plan CONFIG`: the judgments a run needs after dedup and the cache, their tokens,
cost and time; calls nothing."""
from __future__ import annotations

import argparse
import json
import logging
import sys

from evalbeam.configs import ConfigError, load_config
from evalbeam.pipelines.commands import UNWRITTEN_OUTPUT_STATUS, no_beam_flags
from evalbeam.pipelines.commands.arguments import config_args
from evalbeam.pipelines.plan import plan
from evalbeam.pipelines.reports.plan import format_labels, format_plan
from evalbeam.pipelines.preflight import judge_credentials_problem
from evalbeam.pipelines.reports.data import input_problems
from evalbeam.pipelines.results import ResultsError
from evalbeam.transforms.write_failure import OutputWriteError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_args(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--labels-for-width", type=float, metavar="W",
                        help="also tell how many instances people must label for each labelled metric's corrected "
                             "estimate to have a 95%% CI at most W wide (needs --pilot)")
    parser.add_argument("--pilot", metavar="RUN_ID",
                        help="a run of this config with input.labels whose labels tell the variances "
                             "(with --labels-for-width)")


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    no_beam_flags(beam_args, args)
    try:
        config = load_config(args.config, args.overrides)
        logging.getLogger().setLevel(logging.WARNING)
        planned = plan(config, args.labels_for_width, args.pilot)
        if args.json:
            print(json.dumps(planned, indent=2))
        else:
            print(format_plan(planned) + (f"\n\n{format_labels(planned['labels'])}" if "labels" in planned else ""))
        # what run would fail on, said as validate says it: the plan read the whole input as run reads it
        problems = input_problems({"read_count": planned["read"], "scored_count": planned["instances"],
                                   "dead_letter_count": planned["dead_lettered"], "config": config.to_json()})
        if problems:
            print(f"evalbeam: `run` would fail on this input ({planned['source']}): {'; '.join(problems)}",
                  file=sys.stderr)
        # the plan calls nothing, so it is made without a key; a run would stop for want of one, as validate says
        missing = judge_credentials_problem(config)
        if missing:
            print(f"evalbeam: everything else checked; left: {missing}", file=sys.stderr)
        return 2 if problems or missing else 0
    except (ConfigError, ResultsError) as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    except OutputWriteError as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return UNWRITTEN_OUTPUT_STATUS
