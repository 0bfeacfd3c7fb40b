"""A run's failure modes read back (pipelines.results), for `show` (the top modes per
metric and slice, with an example each) and `compare` (which modes grew and which
shrank between two runs that used the same taxonomy, with paired statistics over the
instances both runs hold). The CLI calls these with a line or two."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from evalbeam.metrics.statistics.summary import OVERALL

TOP = 3


class TaxonomiesDiffer(ValueError):
    """Two runs whose failures were classified into different taxonomies: not compared."""


def _rows(results, sql: str, params: dict[str, Any], tables: dict) -> list[dict[str, Any]]:
    try:
        return results.sql(sql, params, tables)
    except Exception as e:  # noqa: BLE001 - a BigQuery dataset prepared before these tables existed has none
        if type(e).__name__ == "NotFound":
            return []
        raise


def failure_mode_rows(results, run_id: str) -> list[dict[str, Any]]:
    return _rows(results, "SELECT * FROM {fm} ORDER BY metric, slice, count DESC, mode", {},
                 {"fm": ("failure_modes", run_id)})


def assignments(results, run_id: str) -> list[dict[str, Any]]:
    return _rows(results, "SELECT * FROM {fa}", {}, {"fa": ("failure_assignments", run_id)})


def _ci(row) -> str:
    if row.get("share_ci_low") is None:
        return "-"
    return f"[{row['share_ci_low']:.2f}, {row['share_ci_high']:.2f}]"


def format_failure_modes(rows: list[dict[str, Any]], top: int = TOP,
                         taxonomies: list[dict[str, Any]] | None = None) -> str:
    """The `top` modes of each metric and slice (by count), with share, CI and an example;
    for a run that classified nothing (`taxonomies`: its taxonomies rows), that it had no failure."""
    if not rows:
        import json

        return "".join(f"\nfailure modes: no failure of {', '.join(json.loads(t['metrics'] or '[]'))} to classify "
                       f"(taxonomy {t['name']})" for t in taxonomies or [])
    import json

    lines = ["\nfailure modes (top {} per metric and slice; failure_modes table):".format(top)]
    if any(r["count"] for r in rows):  # else every failure went unclassified: no table, the count below
        lines.append(f"{'metric':24} {'slice':22} {'mode':24} {'count':>6} {'of':>6} {'share':>6} {'95% CI':>13}  example")
    shown: dict[tuple, int] = {}
    for r in sorted(rows, key=lambda r: (r["metric"], r["slice"] != OVERALL, r["slice"], -r["count"], r["mode"])):
        key = (r["metric"], r["slice"])
        if r["count"] == 0 or shown.get(key, 0) >= top:
            continue
        shown[key] = shown.get(key, 0) + 1
        examples = json.loads(r["examples"] or "[]")
        lines.append(f"{r['metric'][:24]:24} {r['slice'][:22]:22} {r['mode'][:24]:24} {r['count']:>6} "
                     f"{r['failures']:>6} {r['share']:>6.2f} {_ci(r):>13}  {examples[0] if examples else '-'}")
    unclassified = {(r["metric"], r["slice"]): r["unclassified"] for r in rows if r["unclassified"]}
    for (metric, slice_name), n in sorted(unclassified.items()):
        if slice_name == OVERALL:
            lines.append(f"  {metric}: {n} failure(s) not classified (the judge failed; see failure_assignments.error)")
    return "\n".join(lines)


def _mcnemar(b: int, c: int) -> float | None:
    """Exact two-sided McNemar p-value on the discordant pairs (b one way, c the other)."""
    n = b + c
    if n == 0:
        return None
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def taxonomy_rows(results, run_id: str) -> list[dict[str, Any]]:
    return _rows(results, "SELECT * FROM {t}", {}, {"t": ("taxonomies", run_id)})


def classified_metrics(results, run_id: str, rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The metrics whose failures a run classified (failure_modes.metrics, from its taxonomies
    row; else those with failure_modes rows)."""
    import json

    for t in taxonomy_rows(results, run_id):
        if t.get("metrics"):
            return json.loads(t["metrics"])
    return sorted({r["metric"] for r in rows or failure_mode_rows(results, run_id)})


def _digest(results, rows: list[dict[str, Any]], run_id: str) -> str:
    """The taxonomy a run classified into: its failure_modes rows', else (a run with no
    failure) its taxonomies row's. Raises TaxonomiesDiffer when it has none."""
    digests = {r["taxonomy_digest"] for r in rows} or {r["digest"] for r in taxonomy_rows(results, run_id)}
    if len(digests) > 1:
        raise TaxonomiesDiffer(f"run {run_id} classified into several taxonomies ({', '.join(sorted(digests))})")
    if not digests:
        raise TaxonomiesDiffer(f"run {run_id} has no failure modes (its config has no failure_modes section)")
    digest = digests.pop()
    if not digest:
        reason = next((r["name"] for r in taxonomy_rows(results, run_id)), "")
        raise TaxonomiesDiffer(f"run {run_id} has no taxonomy to compare ({reason})")
    return digest


def _slices(assignment: dict[str, Any], slice_columns: list[str]) -> list[str]:
    return [OVERALL] + [f"{c}={'(missing)' if assignment.get(c) is None else assignment[c]}" for c in slice_columns]


def compare_failure_modes(results, base_id: str, run_id: str, alpha: float = 0.05,
                          slice_columns: list[str] | None = None) -> list[dict[str, Any]]:
    """Per metric, slice and mode: both runs' counts and shares, and, over the instances
    both runs hold (an instance with a metric_results row of the metric in each), how
    many have a failure of the mode in the run only (grew_in) or the base only
    (shrank_in), with McNemar's exact p-value; `grew` / `shrank` when p < alpha.
    Raises TaxonomiesDiffer when the runs used different taxonomies (or none)."""
    base_rows, run_rows = failure_mode_rows(results, base_id), failure_mode_rows(results, run_id)
    # a run with no failure has no failure_modes row but its taxonomies row: compared as 0 per mode
    base_digest, run_digest = _digest(results, base_rows, base_id), _digest(results, run_rows, run_id)
    if base_digest != run_digest:
        raise TaxonomiesDiffer(f"runs {base_id} and {run_id} classified failures into different taxonomies "
                               f"({base_digest} and {run_digest}): a mode of one does not mean a mode of the other. "
                               "Pin one taxonomy (a built-in, a file, or taxonomies_from) to compare modes")
    held = {}
    for which, rid in (("base", base_id), ("run", run_id)):
        held[which] = {(r["metric"], r["instance_id"]) for r in _rows(
            results, "SELECT DISTINCT metric, instance_id FROM {mr}", {}, {"mr": ("metric_results", rid)})}
    paired = held["base"] & held["run"]
    if slice_columns is None:
        slice_columns = sorted({s.split("=", 1)[0] for s in (r["slice"] for r in run_rows + base_rows) if s != OVERALL})
    instance_slices = {}
    for rid in (base_id, run_id):  # an instance's slices: as its run's instances table has them
        for i in _rows(results, "SELECT * FROM {i}", {}, {"i": ("instances", rid)}):
            instance_slices.setdefault(i["instance_id"], _slices(i, slice_columns))
    has_mode: dict[str, set] = {"base": set(), "run": set()}  # (metric, instance, mode)
    for which, rid in (("base", base_id), ("run", run_id)):
        for a in assignments(results, rid):
            if a["mode"] is not None:
                has_mode[which].add((a["metric"], a["instance_id"], a["mode"]))
    # a metric classified in one run only has no count in the other: not 0, unknown
    both_classified = set.intersection(*(set(classified_metrics(results, rid, rows))
                                         for rid, rows in ((base_id, base_rows), (run_id, run_rows))))
    counts = {}
    for which, rows in (("base", base_rows), ("run", run_rows)):
        for r in rows:
            if r["metric"] in both_classified:
                counts.setdefault((r["metric"], r["slice"], r["mode"]), {})[which] = r
    out = []
    for (metric, slice_name, mode), both in sorted(counts.items()):
        base, run = both.get("base"), both.get("run")
        in_slice = [i for m, i in paired if m == metric and slice_name in instance_slices.get(i, [OVERALL])]
        grew = sum((metric, i, mode) in has_mode["run"] and (metric, i, mode) not in has_mode["base"] for i in in_slice)
        shrank = sum((metric, i, mode) in has_mode["base"] and (metric, i, mode) not in has_mode["run"]
                     for i in in_slice)
        p = _mcnemar(shrank, grew)
        base_share = base["share"] if base else None
        run_share = run["share"] if run else None
        out.append({
            "base_run_id": base_id, "run_id": run_id, "metric": metric, "slice": slice_name, "mode": mode,
            "taxonomy_digest": run_digest, "base_count": base["count"] if base else 0,
            "count": run["count"] if run else 0, "base_share": base_share, "share": run_share,
            "share_change": None if base_share is None or run_share is None else run_share - base_share,
            "n_paired": len(in_slice), "grew_in": grew, "shrank_in": shrank, "p_value": p,
            "grew": p is not None and p < alpha and grew > shrank,
            "shrank": p is not None and p < alpha and shrank > grew,
        })
    return out


def format_mode_comparison(rows: list[dict[str, Any]]) -> str:
    changed = [r for r in rows if r["count"] != r["base_count"] or r["grew_in"] or r["shrank_in"]]
    if not changed:
        return "\nfailure modes: no change in any mode"
    lines = ["\nfailure modes, run against base (paired over the instances both runs hold):",
             f"{'metric':22} {'slice':20} {'mode':22} {'base':>5} {'run':>5} {'share':>13} {'grew':>5} {'shrank':>6} "
             f"{'p':>7}  flag"]
    for r in changed:
        share = "-" if r["share_change"] is None else f"{r['base_share'] or 0:.2f}->{r['share'] or 0:.2f}"
        p = "-" if r["p_value"] is None else f"{r['p_value']:.4f}"
        flag = "GREW" if r["grew"] else "shrank" if r["shrank"] else ""
        lines.append(f"{r['metric'][:22]:22} {r['slice'][:20]:20} {r['mode'][:22]:22} {r['base_count']:>5} "
                     f"{r['count']:>5} {share:>13} {r['grew_in']:>5} {r['shrank_in']:>6} {p:>7}  {flag}")
    return "\n".join(lines)


def mode_gate_failed(rows: list[dict[str, Any]], gated: list[str]) -> list[dict[str, Any]]:
    """The flagged growths of the gated modes ("any": every mode)."""
    return [r for r in rows if r["grew"] and ("any" in gated or r["mode"] in gated)]


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
    import json

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
