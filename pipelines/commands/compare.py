"""`evalbeam compare BASE_RUN_ID RUN_ID ... [Beam flags]`: paired statistics of runs against a
base run, written to the comparisons table; status 1 when a regression is flagged."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys

from evalbeam.configs import ConfigError, load_config
from evalbeam.pipelines.commands import usage_error
from evalbeam.pipelines.commands.arguments import gate_args
from evalbeam.pipelines.commands.beam_flags import check_beam_args, pipeline_options
from evalbeam.pipelines.commands.results_args import ELSEWHERE, results_args, results_of
from evalbeam.metrics.statistics.compare import parse_tolerance
from evalbeam.pipelines.compare import CompareError, compare, comparison_gate, gate_settings
from evalbeam.pipelines.reports.compare import format_comparison, gate_explanations, unpaired_note
from evalbeam.pipelines.failure_mode_results import (TaxonomiesDiffer, classified_metrics, compare_failure_modes,
                                                     mode_gate_failed, taxonomy_rows)
from evalbeam.pipelines.reports.data import to_json
from evalbeam.pipelines.red_team_results import attack_gate_failed, attack_summary_rows, compare_attacks
from evalbeam.pipelines.results import ResultsError
from evalbeam.pipelines.reports.text import format_attack_comparison, format_mode_comparison


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base_run_id")
    parser.add_argument("run_ids", nargs="+", metavar="run_id")
    parser.add_argument("--tolerance", action="append", default=[], metavar="[METRIC=]T",
                        help="T: flag only changes whose 95%% CI lies entirely beyond -T or +T; a number (absolute) "
                             "or N%% (relative to the base mean); METRIC=T for one metric; repeatable "
                             "(default: the run's config's compare_tolerance(s), else 0)")
    parser.add_argument("--watch", action="append", default=[], metavar="METRIC[,METRIC...]",
                        help="the metrics the gate flags (default: the run's config's compare_watch, else every "
                             "metric but the automatic latency_in_seconds and failure); repeatable")
    parser.add_argument("--gate-slices", action="append", default=[], metavar="COLUMN[,COLUMN...]",
                        help="slice columns whose rows gate beside the overall ones, in the gate's Holm family "
                             "(default: the run's config's compare_gate_slices, else none: slice rows are reported, "
                             "adjusted among themselves, never flagged); repeatable")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="flag only changes whose Holm-adjusted p-value is below this (default 0.05)")
    parser.add_argument("--detect", metavar="DIFF",
                        help="say how many paired instances each gated metric needs for a change of DIFF to be "
                             "flagged 80%% of the time (a number, or N%% of the base mean)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (the comparison rows, the gate's verdict and problems, the "
                             "failure modes) instead of the tables; the exit status is the same")
    parser.add_argument("--fail-on-mode-growth", action="append", default=[], metavar="MODE",
                        help="exit 1 when this failure mode (or 'any') grew significantly in a slice (repeatable)")
    parser.add_argument("--fail-on-attack-growth", action="append", default=[], metavar="FAMILY",
                        help="red_team: exit 1 when attacks of this family (or 'any') got through significantly more "
                             "often at a target or in a slice (repeatable)")
    gate_args(parser)
    results_args(parser)


def main(args: argparse.Namespace, beam_args: list[str]) -> int:
    check_beam_args(beam_args, args)
    if not 0 < args.alpha <= 1:
        usage_error("--alpha must be in (0, 1]")
    try:
        gate = gate_settings(args.tolerance, args.watch, args.gate_slices)
    except ValueError as e:
        usage_error(str(e))
    try:
        detect = parse_tolerance(args.detect) if args.detect is not None else None
    except ValueError as e:
        usage_error(f"--detect {args.detect}: {e}")
    logging.getLogger().setLevel(logging.WARNING)
    try:
        results = results_of(args, [args.base_run_id, *args.run_ids])
        also_parquet = None
        if args.config:
            config = load_config(args.config)
            also_parquet = config.output.parquet if config.output.bigquery else None
        options = pipeline_options(beam_args)
        rows = compare(results, args.base_run_id, args.run_ids, options, gate, args.alpha, also_parquet,
                       allow_different_evals=args.allow_different_evals)
    except (ConfigError, ResultsError, CompareError) as e:
        message = str(e)
        if message.startswith("no run ") and ELSEWHERE not in message:  # not where it was looked for
            message += f" ({ELSEWHERE})"
        print(f"evalbeam: {message}", file=sys.stderr)
        return 2
    regressed = [r for r in rows if r["regression"]]
    modes = compare_modes(results, args.base_run_id, args.run_ids, args.alpha, args.fail_on_mode_growth)
    attacks = compare_attack_families(results, args.base_run_id, args.run_ids, args.alpha, args.fail_on_attack_growth)
    problems = comparison_gate(results, rows, args.base_run_id, args.run_ids, args.min_paired, args.max_missing)
    # too little paired to gate on, or a gated mode or family the gate could not look at: neither a pass nor a
    # regression
    status = 2 if problems or 2 in (modes.status, attacks.status) else \
        1 if regressed or modes.status or attacks.status else 0
    if args.json:
        print(to_json({"base_run_id": args.base_run_id, "run_ids": args.run_ids, "status": status,
                       "regressions": len(regressed), "problems": problems, "unpaired": unpaired_note(rows),
                       "gate": gate_explanations(rows, detect), "comparisons": rows, "failure_modes": modes.rows,
                       "failure_mode_errors": modes.errors, "attacks": attacks.rows, "attack_errors": attacks.errors,
                       "written_to": results.location}))
        return status
    print(format_comparison(rows, detect=detect))
    for note in unpaired_note(rows):
        print(note)
    for line in modes.lines + attacks.lines:
        print(line)
    for error in modes.errors + attacks.errors:
        print(error, file=sys.stderr)
    print(f"\n{len(regressed)} regression(s) flagged; comparisons written to {results.location}")
    for problem in problems:
        print(f"evalbeam: compare: {problem}", file=sys.stderr)
    return status


def gate_failed(results, rows, base_run_id: str, run_ids: list[str], min_paired: int | None,
                max_missing: float | None = None) -> bool:
    """Say (stderr) each gated metric that lost too many of the base's instances or pairs too few to
    gate on; whether there was one."""
    problems = comparison_gate(results, rows, base_run_id, run_ids, min_paired, max_missing)
    for problem in problems:
        print(f"evalbeam: compare: {problem}", file=sys.stderr)
    return bool(problems)


@dataclasses.dataclass
class ModeComparison:
    """`evalbeam compare`'s failure-mode part: what it prints (`lines`, and `errors` for stderr), the
    rows compared, and its status: 1 when a gated mode grew (--fail-on-mode-growth), 2 when a gated
    mode is no mode of the taxonomies compared (a typo would never fire) or when, with a gate, a
    run's modes could not be compared at all (different or no taxonomies: the gate could not be
    evaluated, and a gate that cannot look must not pass), else 0."""

    lines: list[str]
    errors: list[str]
    rows: list[dict]
    status: int


def compare_modes(results, base_id: str, run_ids: list[str], alpha: float, gated: list[str]) -> ModeComparison:
    lines, errors, all_rows = [], [], []
    failed, known, compared, uncompared = [], set(), False, []
    for run_id in run_ids:
        try:
            rows = compare_failure_modes(results, base_id, run_id, alpha)
        except TaxonomiesDiffer as e:
            if gated or "no failure modes" not in str(e):
                lines.append(f"\nfailure modes not compared: {e}")
            uncompared.append(run_id)
            continue
        base_metrics, run_metrics = classified_metrics(results, base_id), classified_metrics(results, run_id)
        for metric in sorted(set(base_metrics) ^ set(run_metrics)):
            only = base_id if metric in base_metrics else run_id
            lines.append(f"\nfailure modes of {metric} not compared: only run {only} classified its failures")
        lines.append(format_mode_comparison(rows))
        all_rows += rows
        failed += mode_gate_failed(rows, gated)
        compared = True
        known |= {r["mode"] for r in rows} | {m["id"] for t in taxonomy_rows(results, run_id)
                                              for m in json.loads(t["modes"] or "[]")}
    unknown = sorted({g for g in gated if g != "any"} - known) if compared else []
    if unknown:
        errors.append(f"evalbeam: --fail-on-mode-growth {', '.join(unknown)}: not a mode of the taxonomy compared "
                      f"(its modes: {', '.join(sorted(known))})")
    if gated and uncompared:
        errors.append(f"evalbeam: --fail-on-mode-growth: the failure modes of run(s) {', '.join(uncompared)} could "
                      f"not be compared with {base_id}'s (said above), so the gate could not be evaluated")
    if gated:
        lines.append(f"{len(failed)} gated failure mode growth(s) flagged"
                     + "".join(f"\n  {r['metric']} {r['slice']}: {r['mode']} grew ({r['base_count']} -> {r['count']}, "
                               f"p {r['p_value']:.4f})" for r in failed))
    return ModeComparison(lines, errors, all_rows, 2 if unknown or (gated and uncompared) else 1 if failed else 0)


def compare_attack_families(results, base_id: str, run_ids: list[str], alpha: float,
                            gated: list[str]) -> ModeComparison:
    """`evalbeam compare`'s red-team part, as compare_modes: which attack families got through more often
    (pipelines.red_team_results.compare_attacks); status 1 when a gated family grew (--fail-on-attack-growth),
    2 when a gated family is no family of the runs compared (a typo would never fire) or, with a gate, a run
    has no attacks to compare (the gate could not look), else 0."""
    lines, errors, all_rows, failed, known, unattacked = [], [], [], [], set(), []
    for run_id in run_ids:
        rows = compare_attacks(results, base_id, run_id, alpha)
        missing = [r for r in (base_id, run_id) if not attack_summary_rows(results, r)]
        if missing:
            if gated:
                lines.append(f"\nattacks not compared: run(s) {', '.join(missing)} ran no red team")
            unattacked.append(run_id)
            continue
        text = format_attack_comparison(rows)
        if text:
            lines.append(text)
        all_rows += rows
        failed += attack_gate_failed(rows, gated)
        known |= {r["family"] for r in rows}
    unknown = sorted({g for g in gated if g != "any"} - known) if known else []
    if unknown:
        errors.append(f"evalbeam: --fail-on-attack-growth {', '.join(unknown)}: not an attack family of the runs "
                      f"compared (their families: {', '.join(sorted(known))})")
    if gated and unattacked:
        errors.append(f"evalbeam: --fail-on-attack-growth: run(s) {', '.join(unattacked)} or {base_id} ran no red "
                      "team, so the gate could not be evaluated")
    if gated:
        lines.append(f"{len(failed)} gated attack growth(s) flagged"
                     + "".join(f"\n  {r['family']} {r['tool'] or 'user_turn'} {r['path'] or ''} {r['slice']}: "
                               f"{r['base_succeeded']} -> {r['succeeded']} succeeded, p {r['p_value']:.4f}"
                               for r in failed))
    return ModeComparison(lines, errors, all_rows, 2 if unknown or (gated and unattacked) else 1 if failed else 0)
