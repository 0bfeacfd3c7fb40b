"""Arguments more than one command takes: a config with its overrides, and the comparison gate."""
from __future__ import annotations

import argparse


def config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="path of the YAML config")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set input.uri=data/*.jsonl (repeatable)")


def set_hint(unknown: list[str]) -> str:
    """For unrecognized arguments that look like config values (`--run_id=x`, `--run_id x`, the
    `run_id=x` of a mistyped `--sett run_id=x`): the --set arguments meant, as a hint; else ''."""
    from evalbeam.configs import EvalConfig  # here, not at the top: `evalbeam --help` loads no config model

    meant = []
    for i, token in enumerate(unknown):
        dashed = token.startswith("--")
        key, eq, value = token.removeprefix("--").partition("=")
        if key.split(".")[0] not in EvalConfig.model_fields or not (dashed or eq):
            continue
        if not eq:
            following = unknown[i + 1] if i + 1 < len(unknown) else ""
            if not following or following.startswith("-"):
                continue
            value = following
        meant.append(f"--set {key}={value}")
    return f" (a config value is set with --set: {' '.join(meant)})" if meant else ""


def unknown_flags_hint(unknown: list[str], known) -> str:
    """For each unrecognized flag (`--fail-on-regresion`, `--last=3`'s `--last`) near a known one
    (the command's own, and for `run`, `compare` and `report` Beam's), the nearest, as
    ' (did you mean --x?)'; with several such flags, each named; '' when none is near."""
    from evalbeam.metrics.names import did_you_mean  # only when an argument is unknown

    known = [k for k in known if k.startswith("--")]
    flags = [t.partition("=")[0] for t in unknown if t.startswith("--") and t.partition("=")[0] not in known]
    hints = [(flag, did_you_mean(flag, known)) for flag in flags]
    hints = [(flag, hint) for flag, hint in hints if hint]
    if len(hints) == 1:
        return hints[0][1]
    return f" ({'; '.join(f'{flag}: ' + hint.strip(' ()') for flag, hint in hints)})" if hints else ""


def gate_args(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    parser.add_argument("--min-paired", type=non_negative, metavar="N",
                        help=prefix + "exit 2 when a metric pairs fewer than N instances of the two runs "
                             "(default: half of the smaller run)")
    parser.add_argument("--max-missing", type=share, metavar="SHARE",
                        help=prefix + "exit 2 when a gated metric lost more than this share of the base run's "
                             "instances: missing from the run, or with no valid score in it (0.05 or 5%%; "
                             "default 5%%). Instances new in the run are never missing")
    parser.add_argument("--allow-different-evals", action="store_true",
                        help=prefix + "compare runs of different evals (config names), which is refused otherwise")


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def share(text: str) -> float:
    """A share: 0.05 or 5%, from 0 to 1."""
    try:
        value = float(text.strip().removesuffix("%")) / (100 if text.strip().endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError("give a share: 0.05 or 5%") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError("must be from 0 to 1 (0% to 100%)")
    return value
