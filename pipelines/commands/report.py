"""`evalbeam report RUN_ID [--compare BASE_RUN_ID] [-o report.html]`: a run's report as one
self-contained HTML file (needs the `report` extra: Matplotlib)."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from evalbeam.configs import ConfigError, load_config
from evalbeam.pipelines.reports import charts
from evalbeam.pipelines.commands.beam_flags import check_beam_args, pipeline_options
from evalbeam.pipelines.commands.results_args import RunNotFound, not_found, results_args, results_of
from evalbeam.pipelines.compare import CompareError, comparison_rows
from evalbeam.pipelines.reports.data import report_data
from evalbeam.pipelines.reports.html import render
from evalbeam.pipelines.results import ResultsError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id")
    parser.add_argument("--compare", metavar="BASE_RUN_ID",
                        help="add the comparison with this run (computed and written as `evalbeam compare` "
                             "does when the comparisons table does not hold it yet; extra arguments go to Beam)")
    parser.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default report.html)")
    results_args(parser)


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    check_beam_args(beam_args, args)
    try:
        charts.require()  # before reading anything: say what to install
    except charts.ChartsUnavailable as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    logging.getLogger().setLevel(logging.WARNING)
    try:
        results = results_of(args, [args.run_id, *([args.compare] if args.compare else [])])
        if not results.run_tables(args.run_id)["runs"]:
            print(f"evalbeam: {not_found(args.run_id, results)}", file=sys.stderr)
            return 1
        comparisons = None
        if args.compare:
            options = pipeline_options(beam_args)
            also_parquet = None
            if args.config:
                config = load_config(args.config)
                also_parquet = config.output.parquet if config.output.bigquery else None
            comparisons, computed = comparison_rows(results, args.compare, args.run_id, options, also_parquet)
            if computed:
                print(f"compared {args.run_id} with {args.compare}; comparisons written to {results.location}")
        page = render(report_data(results, args.run_id, args.compare, comparisons))
    except RunNotFound as e:  # as a run not in the results read: status 1
        print(f"evalbeam: {e}", file=sys.stderr)
        return 1
    except (ConfigError, ResultsError, CompareError) as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    try:
        Path(args.output).write_text(page, encoding="utf-8")
    except OSError as e:
        print(f"evalbeam: cannot write the report to {args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"wrote {args.output} ({len(page.encode('utf-8')) // 1024} KiB)")
    return 0
