"""`evalbeam validate CONFIG`: the config and its dataset's columns checked; runs nothing."""
from __future__ import annotations

import argparse
import sys

from evalbeam.configs import ConfigError, load_config
from evalbeam.pipelines.commands import UNWRITTEN_OUTPUT_STATUS, no_beam_flags
from evalbeam.pipelines.commands.arguments import config_args
from evalbeam.pipelines.preflight import check_adk_files, judge_credentials_problem, preflight
from evalbeam.pipelines.results import ResultsError
from evalbeam.transforms.write_failure import OutputWriteError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_args(parser)


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    no_beam_flags(beam_args)
    try:
        config = load_config(args.config, args.overrides)
        # everything but the judge's credentials first: a config's columns can be checked without a key
        checked = preflight(config.for_run_date(config.resolved_run_date()), credentials=False)
        if config.input.kind == "files" and config.input.is_adk:
            print(adk_files_report(config))
        else:
            if checked.checked_rows == 0 and checked.unreadable:
                reasons = "\n".join(f"  {d.source}: {d.reason}" for d in checked.unreadable[:10])
                raise ConfigError(f"no row of the dataset ({checked.source}) could be read; the first reasons:\n{reasons}")
            rows = "its schema" if checked.checked_rows is None else f"{checked.checked_rows} row(s)"
            print(f"config ok: {len(config.metrics)} metrics; input {checked.source}; columns checked on {rows}")
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


def adk_files_report(config) -> str:
    """`validate` on ADK files: every file parsed as `run` reads it; what it would score and
    dead-letter, with the first reasons. Raises ConfigError (status 2) when no case is usable."""
    check = check_adk_files(config)
    reasons = "".join(f"\n  {d.source}: {d.reason}" for d in check.dead_letters)
    more = f"\n  ... and {check.dead_count - len(check.dead_letters)} more" if check.dead_count > len(check.dead_letters) else ""
    if not check.usable:
        raise ConfigError(f"no case of the ADK files ({check.files} file(s)) can be scored: `run` would dead-letter "
                          f"{check.dead_count}" + (f"; the first reasons:{reasons}{more}" if check.dead_count else ""))
    line = (f"config ok: {len(config.metrics)} metrics; input {check.files} file(s): {check.usable} case(s) to score, "
            f"{check.dead_count} `run` would dead-letter")
    return line + (f"; the first reasons:{reasons}{more}" if check.dead_count else "")
