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
from evalbeam.pipelines.plan import format_plan, plan
from evalbeam.pipelines.results import ResultsError
from evalbeam.transforms.write_failure import OutputWriteError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_args(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    no_beam_flags(beam_args)
    try:
        config = load_config(args.config, args.overrides)
        logging.getLogger().setLevel(logging.WARNING)
        planned = plan(config)
        print(json.dumps(planned, indent=2) if args.json else format_plan(planned))
        return 0
    except (ConfigError, ResultsError) as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    except OutputWriteError as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return UNWRITTEN_OUTPUT_STATUS
