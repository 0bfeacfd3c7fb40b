"""A comparison as people read it: the table, the gate's lines (why each gated row is or is not
flagged, the change it can detect), what was not paired, and which judge agrees more with the people.
`evalbeam compare` and `evalbeam run` (compare_with) print it; `compare --json` carries the same lines."""
from __future__ import annotations

from typing import Any

from evalbeam.metrics.statistics.compare import (ALPHA, CORRECTED, OVERALL, Tolerance, base_count, explain, flag,
                                                 lost_count, paired_needed)
from evalbeam.pipelines.reports.text import fmt, format_table


def format_comparison(rows: list[dict[str, Any]], brief: bool = False, detect: Tolerance | None = None) -> str:
    """The comparison as a table, flagged rows first, then the gate: a line per gated row (why it is or
    is not flagged, and the change its n detects), the rows that do not gate, and what was not paired.
    `brief`: only the overall rows and the flagged ones. `detect` (--detect): how many paired
    instances each gated metric needs for a change that large."""
    if brief:
        rows = [r for r in rows if r["slice"] == OVERALL or r["regression"] or r["improvement"]]
    lines = []
    for r in flagged_first(rows):
        ci = "-" if r["ci_low"] is None else f"[{fmt(r['ci_low'], 4)}, {fmt(r['ci_high'], 4)}]"
        flag = "REGRESSION" if r["regression"] else "improvement" if r["improvement"] else ""
        lines.append((r["run_id"], r["metric"], r["slice"], str(r["n_paired"]), fmt(r["base_mean"]), fmt(r["mean"]),
                      fmt(r["mean_difference"]), ci, fmt(r["p_value_adjusted"], 4),
                      f"{r['wins']}/{r['ties']}/{r['losses']}", "yes" if r.get("gated") else "no",
                      r.get("estimate") or "-", flag))
    table = format_table(("run", "metric", "slice", "paired", "base", "run mean", "difference", "95% CI",
                         "p (Holm)", "W/T/L", "gates", "estimate", "flag"), lines)
    table += corrected_note(rows)
    agreement = format_agreement(rows if not brief else [r for r in rows if r["slice"] == OVERALL])
    by_case = sorted({r["run_id"] for r in rows if r.get("paired_by") == "case"})
    if by_case:
        table += (f"\n{', '.join(by_case)}: paired by case (repeated runs, inference.num_runs > 1): 'paired' counts "
                  "cases, each case's score the mean of its valid runs")
    explained = gate_explanations(rows, detect)
    if explained:
        table += "\n\nthe gate:\n" + "\n".join(explained)
    return table + ("\n\nagreement with human labels (input.labels), run against base:\n" + agreement if agreement else "")


def corrected_note(rows: list[dict[str, Any]]) -> str:
    """What `estimate` means, when a row has corrected estimates or a labelled row could not have them."""
    lines = []
    if any(r.get("estimate") == CORRECTED for r in rows):
        lines.append("estimate corrected: both runs have human labels of the metric, so the means, the difference, "
                     "its 95% CI and p are human-corrected (PPI++ over the labelled instances; the judge-only "
                     "values are in the comparisons table's judge_* columns); W/T/L are the judge's")
    for r in rows:
        if r["slice"] == OVERALL and r.get("estimate") != CORRECTED and r.get("corrected_note"):
            lines.append(f"{r['run_id']} {r['metric']}: {r['corrected_note']}")
    return "".join("\n" + line for line in lines)


def gate_explanations(rows: list[dict[str, Any]], detect: Tolerance | None = None) -> list[str]:
    """Per run compared: a line per gated row (why it is or is not flagged; the change its n detects), a
    line per other row the gate would flag but does not watch or gate on, and a line on the rows that
    do not gate."""
    several = len({r["run_id"] for r in rows}) > 1
    out = []
    for run_id in sorted({r["run_id"] for r in rows}):
        mine = [r for r in flagged_first(rows) if r["run_id"] == run_id]
        gated = [r for r in mine if r.get("gated", r["slice"] == OVERALL)]
        lines = [explain(r) + power_note(r, detect) for r in gated]
        lines += [explain(r) for r in mine if r not in gated and any(
            flag(r, r["direction"], r["tolerance"], r.get("alpha") or ALPHA))]
        reported = [r for r in mine if r not in gated and r.get("watched", True) and r["slice"] != OVERALL]
        if reported:
            lines.append(f"{len(reported)} slice row(s) of watched metrics are reported, Holm-adjusted among "
                         "themselves, and gate only when their column is named (compare_gate_slices, --gate-slices)")
        if gated:
            lines.insert(0, f"{len(gated)} gated test(s) (Holm over them, alpha {gated[0].get('alpha') or ALPHA:g}):")
        out += [f"{run_id}: {line}" if several else line for line in lines]
    return out


def power_note(row: dict[str, Any], detect: Tolerance | None = None) -> str:
    """'; detects ...' for a gated row that is not flagged: the change its n_paired detects with 80%
    power, and with --detect D, the paired instances D needs."""
    if row["regression"] or row["improvement"] or row.get("detectable_difference") is None and detect is None:
        return ""
    unit = "case" if row.get("paired_by") == "case" else "paired"
    notes = []
    if row.get("detectable_difference") is not None:
        notes.append(f"{row['n_paired']} {unit} detect a change of {row['detectable_difference']:.3g} or more "
                     "80% of the time")
    if detect is not None and row.get("family_size"):
        size = detect.absolute(row.get("base_mean"))
        needed = paired_needed(size, row.get("difference_std"), row.get("alpha") or ALPHA, row["family_size"],
                               row["tolerance"])
        notes.append(f"a change of {size:.3g} needs {needed} {unit}" if needed is not None else
                     f"a change of {size:.3g}: " + ("within the tolerance" if size <= row["tolerance"]
                                                    else "no sd of the paired differences to size it from"))
    return "; " + "; ".join(notes) if notes else ""


def format_agreement(rows: list[dict[str, Any]]) -> str:
    """Which run's judge agrees more with the people, per labelled metric and slice ('' when none is labelled)."""
    lines = []
    for r in flagged_first(rows):
        if not r.get("labelled_paired"):
            continue
        ci = "-" if r["agreement_ci_low"] is None else f"[{fmt(r['agreement_ci_low'], 3)}, {fmt(r['agreement_ci_high'], 3)}]"
        verdict = {"run": f"{r['run_id']} agrees more", "base": f"{r['base_run_id']} agrees more"}.get(
            r["agrees_more"], "no clear difference")
        lines.append((r["run_id"], r["metric"], r["slice"], str(r["labelled_paired"]), r["agreement_statistic"] or "-",
                      fmt(r["base_agreement"], 3), fmt(r["run_agreement"], 3), fmt(r["agreement_difference"], 3), ci,
                      verdict))
    if not lines:
        return ""
    return format_table(("run", "metric", "slice", "labelled", "statistic", "base", "run", "difference", "95% CI",
                         "verdict"), lines)


def flagged_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Comparison rows per run: regressions first, then improvements, then by metric (overall first)."""
    return sorted(rows, key=lambda r: (r["run_id"], not r["regression"], not r["improvement"], r["metric"],
                                       r["slice"] != "overall", r["slice"]))


def unpaired_note(rows: list[dict[str, Any]]) -> list[str]:
    """Per overall row with instances not paired: how many and why (the base's lost tonight, new in the run,
    errors); a metric in one run alone."""
    notes = []
    for r in rows:
        if r["slice"] != OVERALL or not (r["only_in_base"] or r["only_in_run"] or r["error_in_either"]):
            continue
        unit = "case(s)" if r.get("paired_by") == "case" else "instance(s)"
        if base_count(r) == 0:
            notes.append(f"{r['run_id']} {r['metric']}: new in this run ({r['only_in_run']} {unit}), nothing in the "
                         "base to compare with")
            continue
        lost = lost_count(r)
        notes.append(f"{r['run_id']} {r['metric']}: {unit} not paired: {r['only_in_base']} of the base missing from "
                     f"the run, {lost - r['only_in_base']} with no valid score in the run, "
                     f"{r['error_in_either'] - (lost - r['only_in_base'])} with none in the base, "
                     f"{r['only_in_run']} new in the run")
    return notes
