"""`evalbeam generate CONFIG [Beam flags]`: conversation scenarios generated for an agent (the config's
scenarios: block), written as an ADK eval set (output.eval_set) and a scenarios table; prints the set's
digest and each cell's coverage."""
from __future__ import annotations

import argparse
import logging
import sys

from apache_beam.options.pipeline_options import StandardOptions

from evalbeam.configs import ConfigError, load_config
from evalbeam.pipelines.commands import UNWRITTEN_OUTPUT_STATUS
from evalbeam.pipelines.commands.arguments import config_args
from evalbeam.pipelines.commands.beam_flags import check_beam_args, pipeline_options
from evalbeam.pipelines.generate import generate, generated
from evalbeam.pipelines.local import LOCAL_RUNNERS
from evalbeam.pipelines.reports.scenarios import generation_report
from evalbeam.pipelines.reports.data import judge_accounting
from evalbeam.pipelines.reports.text import format_judge
from evalbeam.pipelines.results import ResultsError, results_for
from evalbeam.transforms.write_failure import OutputWriteError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_args(parser)


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    check_beam_args(beam_args, args)
    try:
        config = load_config(args.config, args.overrides)
        logging.getLogger().setLevel(logging.WARNING)
        logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(logging.ERROR)
        options = pipeline_options(beam_args)
        run_key, result = generate(config, options, flags=beam_args)
    except (ConfigError, ResultsError) as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    except OutputWriteError as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return UNWRITTEN_OUTPUT_STATUS
    if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS:
        print(f"submitted run {run_key.run_id} (run date {run_key.run_date}): scenarios to {config.output.eval_set}")
        return 0
    results = results_for(config)
    made = generated(results, run_key)
    runs = results.run_tables(run_key.run_id)["runs"]
    judge = judge_accounting(runs[0]) if runs else None
    print(generation_report(run_key.run_id, config.output.eval_set, made["digest"], made["cells"], made["reasons"],
                            format_judge(judge) if judge else [], str(results.location)))
    if not made["kept"]:
        print(f"evalbeam: run {run_key.run_id} kept no scenario (see the reasons above)", file=sys.stderr)
        return 1
    return 0
