"""Arguments more than one command takes: a config with its overrides, and the comparison gate."""
from __future__ import annotations

import argparse


def config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="path of the YAML config")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set input.uri=data/*.jsonl (repeatable)")


def gate_args(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    parser.add_argument("--min-paired", type=non_negative, metavar="N",
                        help=prefix + "exit 2 when a metric pairs fewer than N instances of the two runs "
                             "(default: half of the smaller run)")
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
