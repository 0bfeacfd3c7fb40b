"""The Beam flags `run`, `compare` and `report` pass on: checked before any work, and
made into the pipeline options, with evalbeam's setup.py for remote workers."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import create_runner

from evalbeam.configs import ConfigError
from evalbeam.pipelines.commands import usage_error
from evalbeam.pipelines.commands.arguments import set_hint, unknown_flags_hint
from evalbeam.pipelines.local import LOCAL_RUNNERS


def check_beam_args(beam_args: list[str], args: argparse.Namespace | None = None) -> None:
    """A usage error (status 2) for an argument no Beam option knows (Beam would
    drop it with a warning, and a mistyped flag, `--sett run_id=x`, would silently
    not apply), or a numeric Beam option out of its range (Beam passes
    `--num_workers=-3` on to the runner unchecked)."""
    parsers = []

    def keep(parser) -> None:
        parsers.append(parser)
        # a bad value (--direct_num_workers=abc): said as evalbeam's usage error, not
        # after the usage of every Beam option (some 130 lines)
        parser.error = usage_error

    beam_log = logging.getLogger("apache_beam.options.pipeline_options")
    level = beam_log.level
    beam_log.setLevel(logging.ERROR)  # its "Discarding unparseable args" warning: we say it as an error
    try:
        PipelineOptions(beam_args).get_all_options(add_extra_args_fn=keep)
    finally:
        beam_log.setLevel(level)
    given, unknown = parsers[0].parse_known_args(beam_args)
    if unknown:
        known = [*getattr(args, "known_flags", ()), *(f for action in parsers[0]._actions for f in action.option_strings)]
        usage_error(f"unrecognized arguments (neither evalbeam's nor Beam's): {' '.join(unknown)}"
                    f"{unknown_flags_hint(unknown, known)}{set_hint(unknown)}")
    for action in parsers[0]._actions:
        value = getattr(given, action.dest, None)
        if action.type in (int, float) and value is not None and value != action.default:
            if problem := out_of_range(action.dest, value):
                usage_error(f"argument {action.option_strings[0]}: {problem}, got {value}")
    workers, most = getattr(given, "num_workers", None), getattr(given, "max_num_workers", None)
    if workers and most and most < workers:
        usage_error(f"argument --max_num_workers: must be at least --num_workers ({workers}), got {most}")


# Beam's numeric options are counts, sizes, ports and durations: none may be negative
# (-1 is the default of Flink's parallelism, meaning the runner's own); these must be
# at least 1 (a 0 would be taken as not set, silently).
BEAM_OPTION_MINIMUMS = {"num_workers": 1, "max_num_workers": 1, "number_of_worker_harness_threads": 1,
                        "element_processing_timeout_minutes": 1}


def out_of_range(option: str, value: float) -> str | None:
    if option in ("parallelism", "max_parallelism"):
        return None if value == -1 or value >= 1 else "must be -1 (the runner's default) or at least 1"
    if option == "direct_num_workers":
        return None if value >= 0 else "must be 0 (one per core) or more"
    if option == "profile_sample_rate":
        return None if 0 <= value <= 1 else "must be between 0 and 1"
    least = BEAM_OPTION_MINIMUMS.get(option, 0)
    return None if value >= least else f"must be at least {least}" if least else "must be 0 or more"


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """The options of the Beam flags; the runner checked, and for a remote one the setup file added."""
    options = PipelineOptions(beam_args)
    check_runner(options)
    if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS:
        options = PipelineOptions(with_setup_file(beam_args))
    return options


def check_runner(options: PipelineOptions) -> None:
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
    setup = Path(__file__).resolve().parents[2] / "setup.py"  # pipelines/commands/ -> the checkout
    if not setup.exists():
        # an installed (not editable) evalbeam has no setup.py to stage: without one of
        # the flags above the workers would have no evalbeam to import
        raise ConfigError(
            "remote workers need evalbeam installed: run from a checkout of evalbeam (its setup.py is staged "
            "automatically), or pass --setup_file=PATH/setup.py, --extra_package=evalbeam-*.tar.gz or "
            "--sdk_container_image=IMAGE (see docs/cloud.md, 'Running on Dataflow')")
    return beam_args + [f"--setup_file={setup}"]
