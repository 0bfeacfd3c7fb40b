"""The `evalbeam` command.

    evalbeam run CONFIG [--set key.path=value ...] [Beam flags ...]
    evalbeam validate CONFIG [--set ...]
    evalbeam metrics

Arguments `run` does not know go to Beam's PipelineOptions unchanged, so the
same command targets DirectRunner or Dataflow (`--runner=DataflowRunner ...`).
"""
from __future__ import annotations

import argparse
import logging
import sys

from apache_beam.options.pipeline_options import PipelineOptions

from configs import ConfigError, load_config


def _config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="path of the YAML config")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set input.uri=data/*.jsonl (repeatable)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evalbeam", description="Batch evaluation of LLM and agent outputs on Apache Beam.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an evaluation (extra arguments go to Beam)")
    _config_args(run)
    validate = sub.add_parser("validate", help="check a config and its dataset's columns; runs nothing")
    _config_args(validate)
    sub.add_parser("metrics", help="list every metric")
    return parser


def _metrics_table() -> str:
    from metrics import all_metrics

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
        print(_metrics_table())
        return 0
    if args.command == "validate" and beam_args:
        _parser().error(f"unrecognized arguments: {' '.join(beam_args)}")
    from pipelines import evaluate

    try:
        config = load_config(args.config, args.overrides)
        if args.command == "validate":
            checked = evaluate.preflight(config)
            print(f"config ok: {len(config.metrics)} metrics; {len(checked.files)} file(s); "
                  f"columns checked on {checked.sampled_rows} row(s)")
            return 0
        logging.getLogger().setLevel(logging.WARNING)
        run_id, _ = evaluate.run(config, PipelineOptions(beam_args))
    except ConfigError as e:
        print(f"evalbeam: {e}", file=sys.stderr)
        return 2
    from pipelines.report import run_report

    print(run_report(config.output.parquet, run_id))
    return 0


if __name__ == "__main__":
    sys.exit(main())
