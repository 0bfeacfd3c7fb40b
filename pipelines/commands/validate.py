"""`evalbeam validate CONFIG`: the config and its dataset's columns checked; runs nothing."""
from __future__ import annotations

import argparse
import sys

from evalbeam.configs import ConfigError, EvalConfig, load_config
from evalbeam.metrics.rows.tables import RunKey, utc_now
from evalbeam.pipelines.commands import UNWRITTEN_OUTPUT_STATUS, no_beam_flags
from evalbeam.pipelines.commands.arguments import config_args
from evalbeam.pipelines.evaluate import plan_comparison
from evalbeam.pipelines.preflight import Preflight, RowsCheck, check_rows, judge_credentials_problem, preflight
from evalbeam.pipelines.reports.data import input_problems
from evalbeam.pipelines.results import ResultsError
from evalbeam.transforms.write_failure import OutputWriteError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_args(parser)


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    no_beam_flags(beam_args, args)
    try:
        config = load_config(args.config, args.overrides)
        started_at = utc_now()
        config = config.for_run_date(config.resolved_run_date(started_at))
        # everything but the judge's credentials first: a config's columns can be checked without a key
        checked = preflight(config, credentials=False)
        if config.scenarios is not None:
            report = f"config ok: {len(config.metrics)} metrics; input {checked.source}"
        elif config.input.kind == "files" and config.input.is_adk:
            report = adk_files_report(config)
        else:
            if checked.checked_rows == 0 and checked.unreadable:
                reasons = "\n".join(f"  {d.source}: {d.reason}" for d in checked.unreadable[:10])
                raise ConfigError(f"no row of the dataset ({checked.source}) could be read; the first reasons:\n{reasons}")
            refuse_what_run_fails(config, checked)
            rows = "its schema" if checked.checked_rows is None else f"{checked.checked_rows} row(s)"
            report = f"config ok: {len(config.metrics)} metrics; input {checked.source}; columns checked on {rows}"
        # compare_with's base run: found, and of the same eval, as `run` requires before any work
        plan_comparison(config, RunKey(config.resolved_run_id(started_at), config.resolved_run_date(started_at)),
                        started_at)
        print(report)
        missing = judge_credentials_problem(config)
        if missing:
            print(f"evalbeam: everything else checked; left: {missing}", file=sys.stderr)
            return 2
        return 0
    except (ConfigError, ResultsError) as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    except OutputWriteError as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return UNWRITTEN_OUTPUT_STATUS


def refuse_what_run_fails(config: EvalConfig, checked: Preflight) -> None:
    """A file input read whole by preflight's sample (a small one): a ConfigError when `run` would
    read, score and then fail it (reports.data.input_problems: no record, none scored, too many
    dead letters), so that validate and run reach the same verdict. A larger input is judged by
    `run` alone."""
    if config.input.kind != "files" or not checked.whole:
        return
    if config.input.inferred_format() in ("jsonl", "csv"):
        rows = check_rows(config)
    elif checked.checked_rows or checked.unreadable:
        return  # spans (otel_traces), events: what a run reads of them is known once they are grouped
    else:
        rows = RowsCheck(0, 0, 0, [])
    problems = verdict(config, rows)
    if problems:
        raise ConfigError(f"`run` would fail on this input ({checked.source}): " + "; ".join(problems)
                          + first_reasons(rows))


def verdict(config: EvalConfig, rows: RowsCheck) -> list[str]:
    """What `run` would report under PROBLEMS about these rows (reports.data.input_problems)."""
    return input_problems({"read_count": rows.read, "scored_count": rows.usable, "dead_letter_count": rows.dead_count,
                           "config": config.to_json()})


def first_reasons(rows: RowsCheck) -> str:
    reasons = "".join(f"\n  {d.source}: {d.reason}" for d in rows.dead_letters)
    more = f"\n  ... and {rows.dead_count - len(rows.dead_letters)} more" if rows.dead_count > len(rows.dead_letters) else ""
    return f"; the first reasons:{reasons}{more}" if rows.dead_count else ""


def adk_files_report(config) -> str:
    """`validate` on ADK files: every file parsed as `run` reads it; what it would score and
    dead-letter, with the first reasons. Raises ConfigError (status 2) when no case is usable,
    or `run` would fail on them (more dead letters than max_dead_letter_share)."""
    check = check_rows(config)
    if not check.usable:
        raise ConfigError(f"no case of the ADK files ({check.files} file(s)) can be scored: `run` would dead-letter "
                          f"{check.dead_count}" + first_reasons(check))
    problems = verdict(config, check)
    if problems:
        raise ConfigError(f"`run` would fail on the ADK files ({check.files} file(s)): " + "; ".join(problems)
                          + first_reasons(check))
    line = (f"config ok: {len(config.metrics)} metrics; input {check.files} file(s): {check.usable} case(s) to score, "
            f"{check.dead_count} `run` would dead-letter")
    return line + first_reasons(check)
