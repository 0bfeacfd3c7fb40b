"""`evalbeam metrics`: every metric of the registry, its kind, inputs, parameters and score range."""
from __future__ import annotations

import argparse

from evalbeam.metrics.catalog import all_metrics


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """None."""


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    print(metrics_table())  # any other argument is ignored, as it always was
    return 0


def metrics_table() -> str:
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
