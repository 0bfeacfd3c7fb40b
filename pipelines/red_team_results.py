"""A run's red teaming read back (pipelines.results), for `show` and the report (attack success per family,
tool and path, the worst attacked runs beside their twins) and `compare` (which attacks got through more
often between two runs: the attacked runs both hold, paired by id, with McNemar's exact test). Printed by
pipelines.reports.text and pipelines.reports.html."""
from __future__ import annotations

import json
from typing import Any

from evalbeam.metrics.statistics.compare import mcnemar_p
from evalbeam.metrics.statistics.summary import OVERALL
from evalbeam.pipelines.results import optional_rows

ATTACK_SUCCESS = "attack_success"
TARGET = ("family", "delivery", "tool", "path")


def attack_summary_rows(results, run_id: str) -> list[dict[str, Any]]:
    return optional_rows(results, "SELECT * FROM {s} ORDER BY family, delivery, tool, path, slice", {},
                 {"s": ("attack_summary", run_id)})


def attack_rows(results, run_id: str) -> list[dict[str, Any]]:
    return optional_rows(results, "SELECT * FROM {a} ORDER BY family, delivery, tool, path", {}, {"a": ("attacks", run_id)})


def _instances(results, run_id: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    params = {f"id{n}": i for n, i in enumerate(ids)}
    rows = optional_rows(results, "SELECT * FROM {i} WHERE instance_id IN (" + ", ".join("{P}" + k for k in params) + ")",
                 params, {"i": ("instances", run_id)})
    return {r["instance_id"]: r for r in rows}


def attack_examples(results, run_id: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The examples of the overall rows (the worst attacked runs of each family and target), each with its
    instances row, its twin's and its attack_success verdict: what the report shows side by side."""
    wanted = [(r, e) for r in rows if r["slice"] == OVERALL for e in json.loads(r["examples"] or "[]")]
    ids = sorted({i for _, e in wanted for i in (e["instance_id"], e["twin_id"]) if i})
    instances = _instances(results, run_id, ids)
    verdicts = {}
    if ids:
        params = {f"id{n}": i for n, i in enumerate(ids)}
        for v in optional_rows(results, "SELECT instance_id, score, explanation, error FROM {m} WHERE metric = '"
                       + ATTACK_SUCCESS + "' AND instance_id IN (" + ", ".join("{P}" + k for k in params) + ")",
                       params, {"m": ("metric_results", run_id)}):
            verdicts[v["instance_id"]] = v
    out = []
    for row, example in wanted:
        attacked = instances.get(example["instance_id"])
        if attacked is None:
            continue
        out.append({**{k: row[k] for k in TARGET}, "instance": attacked, "twin": instances.get(example["twin_id"]),
                    "verdict": verdicts.get(example["instance_id"])})
    return out


def _verdicts(results, run_id: str) -> dict[str, tuple[float, str]]:
    """attacked instance id -> (its attack_success score, its attack_id), for the runs with a verdict."""
    return {r["instance_id"]: (r["score"], r["attack_id"]) for r in optional_rows(
        results, "SELECT instance_id, score, attack_id FROM {m} WHERE metric = '" + ATTACK_SUCCESS
        + "' AND score IS NOT NULL", {}, {"m": ("metric_results", run_id)})}


def compare_attacks(results, base_id: str, run_id: str, alpha: float = 0.05) -> list[dict[str, Any]]:
    """Per family, target and slice: both runs' attack success (their attack_summary rows), and over the
    attacked runs both hold with a verdict (the same case, attack and run: the same instance id) how many
    the attack got through in the run only (grew_in) or the base only (shrank_in), with McNemar's exact
    p-value (a binomial test on the discordant pairs); `grew` / `shrank` when p < alpha."""

    base_rows, run_rows = attack_summary_rows(results, base_id), attack_summary_rows(results, run_id)
    if not base_rows and not run_rows:
        return []
    base_verdicts, run_verdicts = _verdicts(results, base_id), _verdicts(results, run_id)
    targets = {a["attack_id"]: a for rid in (base_id, run_id) for a in attack_rows(results, rid)}
    paired = sorted(set(base_verdicts) & set(run_verdicts))
    slice_columns = sorted({r["slice"].split("=", 1)[0] for r in base_rows + run_rows if r["slice"] != OVERALL})
    slices = {}
    for i in _instances(results, run_id, paired).values():
        slices[i["instance_id"]] = [OVERALL] + [f"{c}={'(missing)' if i.get(c) is None else i[c]}"
                                                for c in slice_columns]
    changes: dict[tuple, list[int]] = {}
    for instance_id in paired:
        attack = targets.get(run_verdicts[instance_id][1])
        if attack is None:
            continue
        before, after = base_verdicts[instance_id][0] == 1.0, run_verdicts[instance_id][0] == 1.0
        for slice_name in slices.get(instance_id, [OVERALL]):
            counts = changes.setdefault(tuple(attack[k] for k in TARGET) + (slice_name,), [0, 0, 0])
            counts[0] += 1
            counts[1] += after and not before
            counts[2] += before and not after
    keyed = {}
    for which, rows in (("base", base_rows), ("run", run_rows)):
        for r in rows:
            keyed.setdefault(tuple(r[k] for k in TARGET) + (r["slice"],), {})[which] = r
    out = []
    for key in sorted(keyed, key=lambda k: tuple("" if v is None else v for v in k)):
        base, run = keyed[key].get("base"), keyed[key].get("run")
        n, grew, shrank = changes.get(key, [0, 0, 0])
        p = mcnemar_p(grew, shrank)
        base_rate = base["attack_success_rate"] if base else None
        rate = run["attack_success_rate"] if run else None
        out.append({
            "base_run_id": base_id, "run_id": run_id, **dict(zip(TARGET, key[:4])), "slice": key[4],
            "base_attacked": base["attacked"] if base else 0, "base_succeeded": base["succeeded"] if base else 0,
            "base_rate": base_rate, "attacked": run["attacked"] if run else 0,
            "succeeded": run["succeeded"] if run else 0, "rate": rate,
            "rate_change": None if base_rate is None or rate is None else rate - base_rate,
            "n_paired": n, "grew_in": grew, "shrank_in": shrank, "p_value": p,
            "grew": p is not None and p < alpha and grew > shrank,
            "shrank": p is not None and p < alpha and shrank > grew,
        })
    return out


def attack_gate_failed(rows: list[dict[str, Any]], gated: list[str]) -> list[dict[str, Any]]:
    """The flagged growths of the gated families ("any": every family)."""
    return [r for r in rows if r["grew"] and ("any" in gated or r["family"] in gated)]
