"""`evalbeam run CONFIG [Beam flags]`: the evaluation run, its summary printed, and with
`compare_with` its comparison with a base run."""
from __future__ import annotations

import argparse
import logging
import sys

from apache_beam.options.pipeline_options import StandardOptions

from evalbeam.configs import ConfigError, load_config
from evalbeam.pipelines import evaluate
from evalbeam.pipelines.commands import UNWRITTEN_OUTPUT_STATUS
from evalbeam.pipelines.commands.arguments import config_args, gate_args
from evalbeam.pipelines.commands.beam_flags import check_beam_args, pipeline_options
from evalbeam.pipelines.commands.compare import gate_failed
from evalbeam.pipelines.reports.compare import format_comparison
from evalbeam.pipelines.local import LOCAL_RUNNERS, local_worker_args
from evalbeam.pipelines.reports.data import run_problems
from evalbeam.pipelines.results import ResultsError, results_for, run_comparisons
from evalbeam.pipelines.reports.text import run_report
from evalbeam.transforms.write_failure import OutputWriteError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_args(parser)
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="with compare_with in the config: exit 1 when the comparison flags a regression")
    gate_args(parser, "with compare_with in the config: ")


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    check_beam_args(beam_args, args)
    # as given, for the command printed to resume an interrupted run (the local workers added below are not)
    flags = [*(["--fail-on-regression"] if args.fail_on_regression else []),
             *(["--min-paired", str(args.min_paired)] if args.min_paired is not None else []),
             *(["--allow-different-evals"] if args.allow_different_evals else []), *beam_args]
    try:
        config = load_config(args.config, args.overrides)
        logging.getLogger().setLevel(logging.WARNING)
        # the local worker processes' own start-up warnings (relayed by this logger) are
        # Beam's, about options and registries evalbeam does not use: not the user's concern
        logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(logging.ERROR)
        workers = local_worker_args(config, beam_args)
        if workers:
            print(f"evalbeam: a large input: {workers[0].split('=')[1]} local worker processes "
                  "(--direct_num_workers=1 for one)", file=sys.stderr)
            beam_args = [*beam_args, *workers]
        options = pipeline_options(beam_args)
        run_key, result = evaluate.run(config, options, allow_different_evals=args.allow_different_evals, flags=flags)
    except (ConfigError, ResultsError) as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    except OutputWriteError as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return UNWRITTEN_OUTPUT_STATUS
    if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS:
        job_id = getattr(result, "job_id", lambda: None)()
        print(f"submitted run {run_key.run_id} (run date {run_key.run_date})" + (f" as job {job_id}" if job_id else ""))
        return 0
    results = results_for(config)
    tables = results.run_tables(run_key.run_id)
    print(run_report(results, run_key.run_id, tables))
    status = 0
    if tables["runs"] and run_problems(tables):
        print(f"evalbeam: run {run_key.run_id} finished with problems (listed above)", file=sys.stderr)
        status = 1
    if config.compare_with:
        rows = run_comparisons(results, run_key.run_id)
        if rows:
            regressed = [r for r in rows if r["regression"]]
            print(f"\ncompared with {rows[0]['base_run_id']}:\n{format_comparison(rows, brief=True)}\n"
                  f"{len(regressed)} regression(s) flagged (all slices: evalbeam compare {rows[0]['base_run_id']} "
                  f"{run_key.run_id})")
            if regressed and args.fail_on_regression:
                print(f"evalbeam: run {run_key.run_id} regressed against {rows[0]['base_run_id']}", file=sys.stderr)
                status = 1
            if gate_failed(results, rows, rows[0]["base_run_id"], [run_key.run_id], args.min_paired, args.max_missing):
                status = 2
    return status
