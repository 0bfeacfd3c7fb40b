"""The `evalbeam` command.

    evalbeam run CONFIG [--set key.path=value ...] [Beam flags ...]
    evalbeam validate CONFIG [--set ...]
    evalbeam plan CONFIG [--set ...] [--json]
    evalbeam metrics
    evalbeam runs [--eval NAME] [--last N] [--config CONFIG | --parquet DIR | --bigquery PROJECT.DATASET]
    evalbeam --version
    evalbeam show RUN_ID [--json] [--config CONFIG | --parquet DIR | --bigquery PROJECT.DATASET]
    evalbeam report RUN_ID [--compare BASE_RUN_ID] [-o report.html] [--config C | --parquet DIR | --bigquery P.D]
    evalbeam compare BASE_RUN_ID RUN_ID [RUN_ID ...] [--tolerance T] [--config C | --parquet DIR | --bigquery P.D]

Arguments `run` does not know go to Beam's PipelineOptions unchanged, so the
same command targets DirectRunner or Dataflow (`--runner=DataflowRunner ...`).
"""
from __future__ import annotations

import argparse
import atexit
import importlib.metadata
import json
import logging
import os
import select
import signal
import sys
import threading
from pathlib import Path
from typing import NoReturn

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from evalbeam.configs import ConfigError, load_config


def _config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="path of the YAML config")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set input.uri=data/*.jsonl (repeatable)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evalbeam", description="Batch evaluation of LLM and agent outputs on Apache Beam.",
                                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"evalbeam {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run an evaluation (extra arguments go to Beam)", allow_abbrev=False)
    _config_args(run)
    run.add_argument("--fail-on-regression", action="store_true",
                     help="with compare_with in the config: exit 1 when the comparison flags a regression")
    _gate_args(run, "with compare_with in the config: ")
    validate = sub.add_parser("validate", help="check a config and its dataset's columns; runs nothing", allow_abbrev=False)
    _config_args(validate)
    plan = sub.add_parser("plan", allow_abbrev=False,
                          help="the judgments a run needs after dedup and the cache, their tokens, cost and time; "
                               "calls nothing")
    _config_args(plan)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    sub.add_parser("metrics", help="list every metric")
    runs = sub.add_parser("runs", help="list runs, newest first", allow_abbrev=False)
    runs.add_argument("--eval", help="only the runs of this eval (config name); with --config, default: the config's name")
    runs.add_argument("--last", type=_positive, metavar="N", help="only the last N runs (default: all)")
    _results_args(runs)
    compare = sub.add_parser(
        "compare", allow_abbrev=False,
        help="paired comparison of runs with a base run; exit 1 when a regression is flagged (extra arguments go to Beam)")
    compare.add_argument("base_run_id")
    compare.add_argument("run_ids", nargs="+", metavar="run_id")
    compare.add_argument("--tolerance", type=float, default=0.0,
                         help="T: flag only changes whose 95%% CI lies entirely beyond -T or +T (default 0)")
    compare.add_argument("--fail-on-mode-growth", action="append", default=[], metavar="MODE",
                         help="exit 1 when this failure mode (or 'any') grew significantly in a slice (repeatable)")
    compare.add_argument("--alpha", type=float, default=0.05,
                         help="flag only changes whose Holm-adjusted p-value is below this (default 0.05)")
    _gate_args(compare)
    _results_args(compare)
    show = sub.add_parser("show", help="print a run's summary", allow_abbrev=False)
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true", help="print it as JSON, for scripts")
    _results_args(show)
    report = sub.add_parser(
        "report", allow_abbrev=False,
        help="write a run's report as one self-contained HTML file (needs the 'report' extra: Matplotlib)")
    report.add_argument("run_id")
    report.add_argument("--compare", metavar="BASE_RUN_ID",
                        help="add the comparison with this run (computed and written as `evalbeam compare` "
                             "does when the comparisons table does not hold it yet; extra arguments go to Beam)")
    report.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default report.html)")
    _results_args(report)
    return parser


def _version() -> str:
    """The installed distribution's version (setup.py's, as pip recorded it)."""
    try:
        return importlib.metadata.version("evalbeam")
    except importlib.metadata.PackageNotFoundError:  # imported from a checkout that was never installed
        return "(not installed)"


def _gate_args(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    parser.add_argument("--min-paired", type=_non_negative, metavar="N",
                        help=prefix + "exit 2 when a metric pairs fewer than N instances of the two runs "
                             "(default: half of the smaller run)")
    parser.add_argument("--allow-different-evals", action="store_true",
                        help=prefix + "compare runs of different evals (config names), which is refused otherwise")


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _results_args(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--config", help="read where this config writes (BigQuery when it has output.bigquery)")
    where.add_argument("--parquet", help="a Parquet output folder (default: output/)")
    where.add_argument("--bigquery", help="a BigQuery dataset, PROJECT.DATASET")


def _results(args):
    from evalbeam.pipelines.results import (  # start-up time: a command imports only what it runs
        BigQueryResults,
        ParquetResults,
        results_for,
    )

    if args.config:
        return results_for(load_config(args.config))
    if args.bigquery:
        return BigQueryResults(args.bigquery)
    return ParquetResults(args.parquet or "output/")


def _check_beam_args(beam_args: list[str]) -> None:
    """A usage error (status 2) for an argument no Beam option knows (Beam would
    drop it with a warning, and a mistyped flag, `--sett run_id=x`, would silently
    not apply), or a numeric Beam option out of its range (Beam passes
    `--num_workers=-3` on to the runner unchecked)."""
    parsers = []

    def keep(parser) -> None:
        parsers.append(parser)
        # a bad value (--direct_num_workers=abc): said as evalbeam's usage error, not
        # after the usage of every Beam option (some 130 lines)
        parser.error = lambda message: _parser().error(message)

    beam_log = logging.getLogger("apache_beam.options.pipeline_options")
    level = beam_log.level
    beam_log.setLevel(logging.ERROR)  # its "Discarding unparseable args" warning: we say it as an error
    try:
        PipelineOptions(beam_args).get_all_options(add_extra_args_fn=keep)
    finally:
        beam_log.setLevel(level)
    given, unknown = parsers[0].parse_known_args(beam_args)
    if unknown:
        _parser().error(f"unrecognized arguments (neither evalbeam's nor Beam's): {' '.join(unknown)}")
    for action in parsers[0]._actions:
        value = getattr(given, action.dest, None)
        if action.type in (int, float) and value is not None and value != action.default:
            if problem := _out_of_range(action.dest, value):
                _parser().error(f"argument {action.option_strings[0]}: {problem}, got {value}")
    workers, most = getattr(given, "num_workers", None), getattr(given, "max_num_workers", None)
    if workers and most and most < workers:
        _parser().error(f"argument --max_num_workers: must be at least --num_workers ({workers}), got {most}")


# Beam's numeric options are counts, sizes, ports and durations: none may be negative
# (-1 is the default of Flink's parallelism, meaning the runner's own); these must be
# at least 1 (a 0 would be taken as not set, silently).
BEAM_OPTION_MINIMUMS = {"num_workers": 1, "max_num_workers": 1, "number_of_worker_harness_threads": 1,
                        "element_processing_timeout_minutes": 1}


def _out_of_range(option: str, value: float) -> str | None:
    if option in ("parallelism", "max_parallelism"):
        return None if value == -1 or value >= 1 else "must be -1 (the runner's default) or at least 1"
    if option == "direct_num_workers":
        return None if value >= 0 else "must be 0 (one per core) or more"
    if option == "profile_sample_rate":
        return None if 0 <= value <= 1 else "must be between 0 and 1"
    least = BEAM_OPTION_MINIMUMS.get(option, 0)
    return None if value >= least else f"must be at least {least}" if least else "must be 0 or more"


def adk_files_report(config) -> str:
    """`validate` on ADK files: every file parsed as `run` reads it; what it would score and
    dead-letter, with the first reasons. Raises ConfigError (status 2) when no case is usable."""
    from evalbeam.pipelines.preflight import check_adk_files  # start-up time: a command imports only what it runs

    check = check_adk_files(config)
    reasons = "".join(f"\n  {d.source}: {d.reason}" for d in check.dead_letters)
    more = f"\n  ... and {check.dead_count - len(check.dead_letters)} more" if check.dead_count > len(check.dead_letters) else ""
    if not check.usable:
        raise ConfigError(f"no case of the ADK files ({check.files} file(s)) can be scored: `run` would dead-letter "
                          f"{check.dead_count}" + (f"; the first reasons:{reasons}{more}" if check.dead_count else ""))
    line = (f"config ok: {len(config.metrics)} metrics; input {check.files} file(s): {check.usable} case(s) to score, "
            f"{check.dead_count} `run` would dead-letter")
    return line + (f"; the first reasons:{reasons}{more}" if check.dead_count else "")


def _check_runner(options: PipelineOptions) -> None:
    from apache_beam.runners.runner import create_runner  # start-up time: Beam's runner internals only where used

    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return
    try:
        create_runner(runner)
    except (ValueError, ImportError) as e:
        raise ConfigError(f"--runner={runner}: {e}") from None


def with_setup_file(beam_args: list[str]) -> list[str]:
    """Remote workers install evalbeam from its setup.py: pass it unless the
    caller (or a Flex Template launcher) already did."""
    given = ("--setup_file", "--extra_package", "--sdk_container_image")
    if any(a.startswith(given) for a in beam_args):
        return beam_args
    setup = Path(__file__).resolve().parent.parent / "setup.py"
    if not setup.exists():
        # an installed (not editable) evalbeam has no setup.py to stage: without one of
        # the flags above the workers would have no evalbeam to import
        raise ConfigError(
            "remote workers need evalbeam installed: run from a checkout of evalbeam (its setup.py is staged "
            "automatically), or pass --setup_file=PATH/setup.py, --extra_package=evalbeam-*.tar.gz or "
            "--sdk_container_image=IMAGE (see docs/cloud.md, 'Running on Dataflow')")
    return beam_args + [f"--setup_file={setup}"]


def metrics_table() -> str:
    from evalbeam.metrics import all_metrics  # start-up time: a command imports only what it runs

    lines = []
    for d in all_metrics():
        params = ", ".join(
            f"{name}={'(required)' if f.is_required() else repr(f.default)}" for name, f in d.params.model_fields.items()
        ) or "-"
        threshold = f"; default threshold {d.default_threshold}" if d.default_threshold is not None else ""
        lines.append(f"{d.name}\n    kind: {d.kind}; inputs: {d.inputs_text()}; params: {params}; "
                     f"range: {d.score_range}{threshold}\n    {d.description}")
    lines.append("custom\n    kind: custom; {name: NAME, function: 'package.module:function', inputs: [fields]}\n"
                 "    your function gets the instance as a dict and returns {score_name: score, other: value, ...}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, beam_args = _parser().parse_known_args(argv)
    if args.command == "metrics":
        print(metrics_table())
        return 0
    beam_commands = ("run", "compare", "report")
    if args.command not in beam_commands and beam_args:
        _parser().error(f"unrecognized arguments: {' '.join(beam_args)}")
    if args.command in beam_commands:
        _check_beam_args(beam_args)
    from evalbeam.pipelines import evaluate  # start-up time: a command imports only what it runs
    from evalbeam.pipelines.local import (  # start-up time: a command imports only what it runs
        LOCAL_RUNNERS,
        local_worker_args,
    )
    from evalbeam.pipelines.preflight import preflight  # start-up time: a command imports only what it runs
    from evalbeam.pipelines.report_data import run_problems  # start-up time: a command imports only what it runs
    from evalbeam.pipelines.results import (  # start-up time: a command imports only what it runs
        ResultsError,
        results_for,
    )
    from evalbeam.pipelines.text_tables import (  # start-up time: a command imports only what it runs
        run_report,
        runs_report,
    )
    from evalbeam.transforms.write_failure import OutputWriteError  # start-up time: a command imports only what it runs

    if args.command == "compare":
        return _compare(args, beam_args)
    if args.command == "report":
        return _report(args, beam_args)
    try:
        if args.command == "runs":
            results, eval_name = _results(args), args.eval
            if args.config and not eval_name:
                eval_name = load_config(args.config).name  # the config's own runs, not the other evals' beside them
            print(runs_report(results, eval_name, args.last))
            return 0
        if args.command == "show":
            results = _results(args)
            tables = results.run_tables(args.run_id)
            if not tables["runs"]:
                print(f"evalbeam: no run {args.run_id!r} in {results.location}", file=sys.stderr)
                return 1
            if args.json:
                from evalbeam.pipelines.report_data import (  # start-up time: a command imports only what it runs
                    show_data,
                    to_json,
                )

                print(to_json(show_data(results, args.run_id, tables)))
            else:
                from evalbeam.pipelines.failure_mode_results import failure_mode_rows, format_failure_modes  # as above
                print(run_report(results, args.run_id, tables) + format_failure_modes(failure_mode_rows(results, args.run_id)))
            return 0
        config = load_config(args.config, args.overrides)
        if args.command == "validate":
            checked = preflight(config.for_run_date(config.resolved_run_date()))
            if config.input.kind == "files" and config.input.is_adk:
                print(adk_files_report(config))
                return 0
            if checked.checked_rows == 0 and checked.unreadable:
                reasons = "\n".join(f"  {d.source}: {d.reason}" for d in checked.unreadable[:10])
                raise ConfigError(f"no row of the dataset ({checked.source}) could be read; the first reasons:\n{reasons}")
            rows = "its schema" if checked.checked_rows is None else f"{checked.checked_rows} row(s)"
            print(f"config ok: {len(config.metrics)} metrics; input {checked.source}; columns checked on {rows}")
            return 0
        if args.command == "plan":
            from evalbeam.pipelines.plan import format_plan, plan  # start-up time: a command imports only what it runs

            logging.getLogger().setLevel(logging.WARNING)
            planned = plan(config)
            print(json.dumps(planned, indent=2) if args.json else format_plan(planned))
            return 0
        logging.getLogger().setLevel(logging.WARNING)
        # the local worker processes' own start-up warnings (relayed by this logger) are
        # Beam's, about options and registries evalbeam does not use: not the user's concern
        logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(logging.ERROR)
        workers = local_worker_args(config, beam_args)
        if workers:
            print(f"evalbeam: a large input: {workers[0].split('=')[1]} local worker processes "
                  "(--direct_num_workers=1 for one)", file=sys.stderr)
            beam_args = [*beam_args, *workers]
        options = PipelineOptions(beam_args)
        _check_runner(options)
        if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS:
            options = PipelineOptions(with_setup_file(beam_args))
        run_key, result = evaluate.run(config, options, allow_different_evals=args.allow_different_evals)
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
        from evalbeam.pipelines.compare import format_comparison  # start-up time: a command imports only what it runs
        from evalbeam.pipelines.results import run_comparisons  # start-up time: a command imports only what it runs

        rows = run_comparisons(results, run_key.run_id)
        if rows:
            regressed = [r for r in rows if r["regression"]]
            print(f"\ncompared with {rows[0]['base_run_id']}:\n{format_comparison(rows, brief=True)}\n"
                  f"{len(regressed)} regression(s) flagged (all slices: evalbeam compare {rows[0]['base_run_id']} "
                  f"{run_key.run_id})")
            if regressed and args.fail_on_regression:
                print(f"evalbeam: run {run_key.run_id} regressed against {rows[0]['base_run_id']}", file=sys.stderr)
                status = 1
            if _gate_failed(results, rows, rows[0]["base_run_id"], [run_key.run_id], args.min_paired):
                status = 2
    return status


def _gate_failed(results, rows, base_run_id: str, run_ids: list[str], min_paired: int | None) -> bool:
    """Say (stderr) each metric that pairs too few instances to gate on; whether there was one."""
    from evalbeam.pipelines.compare import comparison_gate  # start-up time: a command imports only what it runs

    problems = comparison_gate(results, rows, base_run_id, run_ids, min_paired)
    for problem in problems:
        print(f"evalbeam: compare: {problem}", file=sys.stderr)
    return bool(problems)


def _compare(args, beam_args: list[str]) -> int:
    from evalbeam.pipelines.compare import (  # start-up time: a command imports only what it runs
        CompareError,
        compare,
        format_comparison,
        unpaired_note,
    )
    from evalbeam.pipelines.results import ResultsError  # start-up time: a command imports only what it runs

    if args.tolerance < 0 or not 0 < args.alpha <= 1:
        _parser().error("--tolerance must be >= 0 and --alpha in (0, 1]")
    logging.getLogger().setLevel(logging.WARNING)
    try:
        results = _results(args)
        also_parquet = None
        if args.config:
            config = load_config(args.config)
            also_parquet = config.output.parquet if config.output.bigquery else None
        options = PipelineOptions(beam_args)
        _check_runner(options)
        if options.view_as(StandardOptions).runner not in evaluate_local_runners():
            options = PipelineOptions(with_setup_file(beam_args))
        rows = compare(results, args.base_run_id, args.run_ids, options, args.tolerance, args.alpha, also_parquet,
                       allow_different_evals=args.allow_different_evals)
    except (ConfigError, ResultsError, CompareError) as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    print(format_comparison(rows))
    for note in unpaired_note(rows):
        print(note)
    regressed = [r for r in rows if r["regression"]]
    from evalbeam.pipelines.failure_mode_results import compare_modes_command  # start-up time: as above
    modes_grew = compare_modes_command(results, args.base_run_id, args.run_ids, args.alpha, args.fail_on_mode_growth)
    print(f"\n{len(regressed)} regression(s) flagged; comparisons written to {results.location}")
    if _gate_failed(results, rows, args.base_run_id, args.run_ids, args.min_paired):
        return 2  # too little paired to gate on: neither a pass nor a regression
    return 1 if regressed or modes_grew else 0


def _report(args, beam_args: list[str]) -> int:
    from evalbeam.pipelines import report_charts  # start-up time: a command imports only what it runs
    from evalbeam.pipelines.compare import (  # start-up time: a command imports only what it runs
        CompareError,
        comparison_rows,
    )
    from evalbeam.pipelines.report_data import report_data  # start-up time: a command imports only what it runs
    from evalbeam.pipelines.results import ResultsError  # start-up time: a command imports only what it runs

    try:
        report_charts.require()  # before reading anything: say what to install
    except report_charts.ChartsUnavailable as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    from evalbeam.pipelines.report_html import render  # start-up time: a command imports only what it runs

    logging.getLogger().setLevel(logging.WARNING)
    try:
        results = _results(args)
        if not results.run_tables(args.run_id)["runs"]:
            print(f"evalbeam: no run {args.run_id!r} in {results.location}", file=sys.stderr)
            return 1
        comparisons = None
        if args.compare:
            options = PipelineOptions(beam_args)
            _check_runner(options)
            if options.view_as(StandardOptions).runner not in evaluate_local_runners():
                options = PipelineOptions(with_setup_file(beam_args))
            also_parquet = None
            if args.config:
                config = load_config(args.config)
                also_parquet = config.output.parquet if config.output.bigquery else None
            comparisons, computed = comparison_rows(results, args.compare, args.run_id, options, also_parquet)
            if computed:
                print(f"compared {args.run_id} with {args.compare}; comparisons written to {results.location}")
        page = render(report_data(results, args.run_id, args.compare, comparisons))
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


def evaluate_local_runners():
    from evalbeam.pipelines.local import LOCAL_RUNNERS  # start-up time: a command imports only what it runs

    return LOCAL_RUNNERS


def entry() -> None:
    """The `evalbeam` console script: main(), then the process ends at once.

    A command that imported Beam spends about 0.4 s of its wall time (on the
    development machine; about a tenth of a small run) in the interpreter's
    teardown, freeing one by one the objects of Beam and the cloud client
    libraries, work nobody waits for once the command is done. What that teardown
    does that matters is done first: the exit handlers (logging's flush,
    temporary files' removal) and the standard streams' buffers, with the status
    the interpreter would give an output it could not write. When a
    non-daemon thread is still running (none should be), or main() raises, the
    process exits the usual way.

    A reader of the output that goes away before it is written (`evalbeam show
    RUN --json | head`) ends the command with status 141, as a shell reports a
    command that SIGPIPE ended, and no traceback."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)
    if sys.stdout is not None:
        sys.stdout = _Stdout(sys.stdout)
    try:
        status = main()
    except BrokenPipeError:
        if not _reader_gone(sys.stdout):
            raise
        # what is left to write goes nowhere, so that the shutdown's flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(STDOUT_READER_GONE_STATUS)
    except OSError as e:
        if getattr(sys.stdout, "failed", None) is not e:
            raise
        _end(UNWRITTEN_OUTPUT_STATUS)
    except BaseException as e:
        from evalbeam.transforms.progress import INTERRUPTED  # start-up time: a command imports only what it runs

        # Beam re-raises a KeyboardInterrupt met inside a step as a RuntimeError
        if not (isinstance(e, KeyboardInterrupt) or INTERRUPTED.is_set()):
            missing = _missing_credentials(e)
            if missing is None:
                raise
            # any Google Cloud client (BigQuery, Cloud Storage, Vertex AI) without credentials, past preflight
            from evalbeam.transforms.local_cloud import no_credentials  # only on failure: start-up time

            _say(f"evalbeam: {no_credentials(missing)}")
            _end(2)
        _say("evalbeam: interrupted")
        _end(INTERRUPTED_STATUS)  # Beam's threads waiting on worker processes may be left: not waited for

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(status)
    _end(status)


def _missing_credentials(error: BaseException) -> str | None:
    """The first line of google-auth's DefaultCredentialsError where `error` is one, or was
    raised from one (Beam re-raises); else None."""
    try:
        from google.auth.exceptions import DefaultCredentialsError  # only on failure: start-up time
    except ImportError:
        return None
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, DefaultCredentialsError):
            return (str(error).splitlines() or [""])[0][:200]
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _end(status: int) -> NoReturn:
    """End the process now: the exit handlers run, the standard streams flushed
    (with the status an unwritable output gives, _flushed), no teardown. Where
    the interpreter is not CPython (no atexit._run_exitfuncs), the usual exit."""
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's, as the interpreter runs them
    if run_exit_handlers is None:
        sys.exit(status)
    run_exit_handlers()
    os._exit(_flushed(status))


# What a shell reports for a command that SIGINT (Ctrl-C) ended (128 + 2).
INTERRUPTED_STATUS = 130


def _interrupt(signum, frame):
    """Ctrl-C: what Beam logs as it tears a local run down after it (its worker
    processes' failures relayed, handlers it cannot close, its threads' errors)
    is not the user's concern; the command says it was interrupted (entry). (The
    worker processes, which the terminal interrupts too, print their own.) A
    second Ctrl-C ends the process at once, should the first land where Beam
    swallows it (a worker being started), or its teardown wait on a worker."""
    from evalbeam.transforms.progress import INTERRUPTED  # start-up time: a command imports only what it runs

    if INTERRUPTED.is_set():
        _say("evalbeam: interrupted")
        os._exit(INTERRUPTED_STATUS)  # its worker processes end with their connection to it
    INTERRUPTED.set()
    logging.disable(logging.CRITICAL)
    threading.excepthook = lambda args: None  # Beam's threads failing as its workers go
    raise KeyboardInterrupt


def _say(text: str) -> None:
    try:
        print(text, file=sys.stderr, flush=True)
    except (AttributeError, OSError, ValueError):  # no stderr left to say it on
        pass


class _Stdout:
    """sys.stdout as the command writes to it, remembering the error a write or
    flush met (`failed`): an OSError main() raises is then known to be the
    output's (a full disk), not a file's the run was writing."""

    def __init__(self, stream):
        self._stream = stream
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            self.failed = e
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            self.failed = e
            raise

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


# What CPython exits with when it cannot flush stdout at shutdown.
UNWRITTEN_OUTPUT_STATUS = 120
# What a shell reports for a command that SIGPIPE ended (128 + 13).
STDOUT_READER_GONE_STATUS = 141


def _reader_gone(stream) -> bool:
    """Whether `stream` is a pipe whose reading end is closed (poll says POLLERR):
    a BrokenPipeError is then stdout's, not a socket's or a child process's."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or no file behind the stream
        return False


def _flushed(status: int) -> int:
    """The status to end with once the standard streams are flushed: `status`,
    unless stdout could not be written: UNWRITTEN_OUTPUT_STATUS (a full disk,
    an I/O error), said on stderr, as the interpreter's own shutdown would, or
    STDOUT_READER_GONE_STATUS (a reader that closed the pipe: `| head`), as
    entry() ends when that happens earlier. A closed stream takes nothing more.
    An output whose write already failed (_Stdout.failed) is said once, not tried again."""
    failed = getattr(sys.stdout, "failed", None)
    try:
        if sys.stdout is not None and failed is None:  # None: started with stdout closed (`>&-`)
            sys.stdout.flush()
    except BrokenPipeError:
        status = status or STDOUT_READER_GONE_STATUS
    except ValueError:
        pass
    except OSError as e:
        failed = e
    if failed is not None and not isinstance(failed, BrokenPipeError):
        _say(f"evalbeam: could not write the output: {failed}")
        status = status or UNWRITTEN_OUTPUT_STATUS
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):  # nowhere left to say so
        pass
    return status


if __name__ == "__main__":
    entry()
