"""What `evalbeam generate` prints: the set written, its digest, the judge's accounting, and the coverage of
each grid cell (asked, generated, kept), so a team sees which cells came back thin."""
from __future__ import annotations

from typing import Any

from evalbeam.metrics.scenarios import DEAD_LETTER, KEPT, NEAR_DUPLICATE, NOT_GENERATED

# one row per cell: the asked scenarios' counts (the same SQL on DuckDB and BigQuery: results.sql)
COVERAGE_SQL = (
    "SELECT cell, goal, persona, difficulty, language, COUNT(*) AS asked, "
    "SUM(CASE WHEN decision = '{dead}' AND ({not_generated}) THEN 0 ELSE 1 END) AS generated, "
    "SUM(CASE WHEN decision = '{kept}' THEN 1 ELSE 0 END) AS kept, "
    "SUM(CASE WHEN decision = '{near}' THEN 1 ELSE 0 END) AS near_duplicate, "
    "SUM(CASE WHEN decision = '{dead}' THEN 1 ELSE 0 END) AS dead_letter "
    "FROM {{s}} GROUP BY cell, goal, persona, difficulty, language ORDER BY cell"
).format(dead=DEAD_LETTER, kept=KEPT, near=NEAR_DUPLICATE,
         not_generated=" OR ".join(f"STARTS_WITH(reason, '{p}')" for p in NOT_GENERATED))
REASONS_SQL = (f"SELECT reason, COUNT(*) AS n FROM {{s}} WHERE decision = '{DEAD_LETTER}' "
               "GROUP BY reason ORDER BY n DESC, reason LIMIT 10")
DIGESTS_SQL = f"SELECT digest FROM {{s}} WHERE decision = '{KEPT}'"


def format_coverage(cells: list[dict[str, Any]], limit: int = 40) -> list[str]:
    """The coverage table: every cell when few, else the thin ones (fewer kept than asked) first."""
    if not cells:
        return ["  (no cell)"]
    languages = any(c.get("language") for c in cells)
    head = ["goal", "persona", "difficulty", *(["language"] if languages else []), "asked", "generated", "kept",
            "near-dup", "dead"]
    shown = cells if len(cells) <= limit else sorted(cells, key=lambda c: (c["kept"] - c["asked"], c["cell"]))[:limit]
    rows = [[str(c["goal"]), str(c["persona"]), str(c["difficulty"]), *([str(c.get("language") or "")] if languages
                                                                       else []),
             *(str(int(c[k])) for k in ("asked", "generated", "kept", "near_duplicate", "dead_letter"))]
            for c in shown]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    if len(cells) > limit:
        lines.append(f"  ... {len(cells) - limit} more cells (the thinnest {limit} shown; every cell in the "
                     "scenarios table)")
    return lines


def generation_report(run_id: str, eval_set: str, digest: str, cells: list[dict[str, Any]],
                      reasons: list[dict[str, Any]], judge_lines: list[str], location: str) -> str:
    asked = sum(int(c["asked"]) for c in cells)
    kept = sum(int(c["kept"]) for c in cells)
    near = sum(int(c["near_duplicate"]) for c in cells)
    dead = sum(int(c["dead_letter"]) for c in cells)
    thin = sum(1 for c in cells if c["kept"] < c["asked"])
    lines = [f"run {run_id}: {kept} scenario(s) written to {eval_set}",
             f"scenario set digest {digest} (pin it: scenarios.pinned_from and scenarios.digest)",
             f"asked {asked} = kept {kept} + near-duplicate {near} + dead-lettered {dead}",
             *judge_lines,
             f"\ncoverage per cell ({len(cells)} cells, {thin} thin: fewer kept than asked):",
             *format_coverage(cells)]
    if reasons:
        lines.append("\ndead-lettered scenarios, by reason (the first 10; all in the scenarios table):")
        lines += [f"  {int(r['n'])} x {r['reason']}" for r in reasons]
    lines.append(f"\nresults: {location} (table scenarios)")
    return "\n".join(lines)
