"""A run's failure modes read back (pipelines.results), for `show` (the top modes per
metric and slice, with an example each) and `compare` (which modes grew and which
shrank between two runs that used the same taxonomy, with paired statistics over the
instances both runs hold). Printed by pipelines.reports.text."""
from __future__ import annotations

from typing import Any

from evalbeam.metrics.statistics.compare import mcnemar_p
from evalbeam.metrics.statistics.summary import OVERALL
from evalbeam.pipelines.results import optional_rows



class TaxonomiesDiffer(ValueError):
    """Two runs whose failures were classified into different taxonomies: not compared."""


def failure_mode_rows(results, run_id: str) -> list[dict[str, Any]]:
    return optional_rows(results, "SELECT * FROM {fm} ORDER BY metric, slice, count DESC, mode", {},
                 {"fm": ("failure_modes", run_id)})


def assignments(results, run_id: str) -> list[dict[str, Any]]:
    return optional_rows(results, "SELECT * FROM {fa}", {}, {"fa": ("failure_assignments", run_id)})


def taxonomy_rows(results, run_id: str) -> list[dict[str, Any]]:
    return optional_rows(results, "SELECT * FROM {t}", {}, {"t": ("taxonomies", run_id)})


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
        held[which] = {(r["metric"], r["instance_id"]) for r in optional_rows(
            results, "SELECT DISTINCT metric, instance_id FROM {mr}", {}, {"mr": ("metric_results", rid)})}
    paired = held["base"] & held["run"]
    if slice_columns is None:
        slice_columns = sorted({s.split("=", 1)[0] for s in (r["slice"] for r in run_rows + base_rows) if s != OVERALL})
    instance_slices = {}
    for rid in (base_id, run_id):  # an instance's slices: as its run's instances table has them
        for i in optional_rows(results, "SELECT * FROM {i}", {}, {"i": ("instances", rid)}):
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
        p = mcnemar_p(shrank, grew)
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


def mode_gate_failed(rows: list[dict[str, Any]], gated: list[str]) -> list[dict[str, Any]]:
    """The flagged growths of the gated modes ("any": every mode)."""
    return [r for r in rows if r["grew"] and ("any" in gated or r["mode"] in gated)]
