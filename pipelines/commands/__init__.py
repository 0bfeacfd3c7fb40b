"""The commands of `evalbeam`, one module each, imported only when chosen.

COMMANDS names them with the line `evalbeam --help` gives each; `top_parser()` builds
the command line with every command as a name and its help line. The entry point
(pipelines/cli.py) adds the chosen command's arguments from its module's
`add_arguments(parser)` and imports that module: this package imports no command
module, and a command module imports the helpers here (usage_error, no_beam_flags),
so the imports go one way. A command module's `main(args, beam_args)` returns the
exit status; its imports are what that command runs, so `evalbeam --help` and
`evalbeam metrics` load neither Beam nor the pipeline.
"""
from __future__ import annotations

import argparse
import importlib.metadata
from typing import NoReturn

# name: (its line in `evalbeam --help`, whether its options may be abbreviated), in that order
COMMANDS = {
    "run": ("run an evaluation (extra arguments go to Beam)", False),
    "generate": ("generate conversation scenarios for an agent (the config's scenarios:) as an ADK eval set "
                 "(extra arguments go to Beam)", False),
    "validate": ("check a config and its dataset's columns; runs nothing", False),
    "plan": ("the judgments a run needs after dedup and the cache, their tokens, cost and time; calls nothing", False),
    "metrics": ("list every metric", True),
    "runs": ("list runs, newest first", False),
    "compare": ("paired comparison of runs with a base run; exit 1 when a regression is flagged "
                "(extra arguments go to Beam)", False),
    "show": ("print a run's summary", False),
    "report": ("write a run's report as one self-contained HTML file (needs the 'report' extra: Matplotlib)", False),
}

# What CPython exits with when it cannot flush stdout at shutdown.
UNWRITTEN_OUTPUT_STATUS = 120


def top_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """`evalbeam`'s parser, every command a name and its help line, and each command's own
    parser by name, with no argument yet (pipelines/cli.py adds the chosen one's)."""
    top = argparse.ArgumentParser(prog="evalbeam", description="Batch evaluation of LLM and agent outputs on Apache Beam.",
                                  allow_abbrev=False)
    top.add_argument("--version", action="version", version=f"evalbeam {version()}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    return top, {name: sub.add_parser(name, help=help_line, allow_abbrev=abbreviated)
                 for name, (help_line, abbreviated) in COMMANDS.items()}


def usage_error(message: str) -> NoReturn:
    """A usage error said as `evalbeam`'s own (its usage line, then the message); status 2."""
    top_parser()[0].error(message)


def no_beam_flags(beam_args: list[str], args: argparse.Namespace | None = None) -> None:
    """Only `run`, `compare` and `report` take Beam flags: another command's unknown argument is an
    error, naming the nearest flag of the command (`args`: the command's parsed arguments)."""
    if beam_args:
        from evalbeam.pipelines.commands.arguments import set_hint, unknown_flags_hint  # they import this module

        usage_error(f"unrecognized arguments: {' '.join(beam_args)}"
                    f"{unknown_flags_hint(beam_args, getattr(args, 'known_flags', ()))}{set_hint(beam_args)}")


def version() -> str:
    """The installed distribution's version (setup.py's, as pip recorded it)."""
    try:
        return importlib.metadata.version("evalbeam")
    except importlib.metadata.PackageNotFoundError:  # imported from a checkout that was never installed
        return "(not installed)"
