"""The text tables the `evalbeam` command prints: a run's summary (`run`,
`show`), the list of runs (`runs`), a comparison's cells."""
from __future__ import annotations

import json
import math
from typing import Any


from evalbeam.metrics.statistics.summary import OVERALL
from evalbeam.pipelines.failure_mode_results import failure_mode_rows, taxonomy_rows
from evalbeam.pipelines.red_team_results import attack_summary_rows
from evalbeam.pipelines.reports.data import judge_accounting, run_notes, run_problems, runs_data, summary_curve

def fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_table(header: tuple[str, ...], lines: list[tuple[str, ...]], right: tuple[int, ...] = ()) -> str:
    """Columns as wide as their widest cell, so that no name is ever cut (the columns `right`
    aligned right, as numbers are); every table the command prints is made here."""
    widths = [max([len(h)] + [len(line[i]) for line in lines]) for i, h in enumerate(header)]

    def row(cells) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([row(header), "  ".join("-" * w for w in widths), *map(row, lines)])


# The most slices the terminal shows per metric (besides overall): the largest ones.
MAX_SHOWN_SLICES = 20


def format_summary(rows: list[dict[str, Any]], where: str | None = None) -> str:
    """The summary as a table: per metric, overall and its MAX_SHOWN_SLICES largest
    slices (most valid scores), then one line saying how many more there are and where."""
    shown, hidden = [], 0
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_metric.setdefault(r["metric"], []).append(r)
    for metric_rows in by_metric.values():
        overall = [r for r in metric_rows if r["slice"] == "overall"]
        slices = [r for r in metric_rows if r["slice"] != "overall"]
        if len(slices) > MAX_SHOWN_SLICES:
            largest = sorted(slices, key=lambda r: (-(r["valid_count"] or 0), r["slice"]))[:MAX_SHOWN_SLICES]
            hidden += len(slices) - MAX_SHOWN_SLICES
            slices = [r for r in slices if r in largest]
        shown += overall + slices
    lines = []
    for r in shown:
        ci = "-" if r["ci_low"] is None else f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"
        lines.append((r["metric"], r["slice"], str(r["valid_count"]), str(r["error_count"]),
                      fmt(r["mean"]), fmt(r["std"]), fmt(r.get("standard_error")), ci, fmt(r["pass_rate"], 3)))
    table = format_table(("metric", "slice", "n", "errors", "mean", "std", "se", "95% CI", "pass rate"), lines)
    if hidden:
        table += (f"\n({hidden:,} more slice rows not shown, the largest {MAX_SHOWN_SLICES} of each metric are: "
                  f"every slice is in the run's summary table{f' in {where}' if where else ''})")
    return table + format_repeats(shown) + format_position_consistency(shown) + format_jury_agreement(shown)


def shown_ks(n: int) -> list[int]:
    """The k a terminal line shows of a pass curve over n runs: every k up to 8 runs, else
    1, 2, 3, 5, 10, 20, 50, ... and n (the whole curve is in show --json and the report)."""
    if n <= 8:
        return list(range(1, n + 1))
    return [k for k in (1, 2, 3, 5, 10, 20, 50) if k < n] + [n]  # inference.num_runs is at most 100


def format_repeats(rows: list[dict[str, Any]]) -> str:
    """The repeated runs' lines (inference.num_runs > 1): per metric with a threshold and
    slice, pass@k and pass^k (at shown_ks) and the between-run std; '' when there are none."""
    lines = []
    curves = [(r, summary_curve(r.get("pass_at_k")), summary_curve(r.get("pass_all_k"))) for r in rows]
    ks = shown_ks(max((len(at) for _, at, _ in curves if at), default=0))

    def values(curve):
        by_k = {p["k"]: p["value"] for p in curve}
        return " ".join(fmt(by_k.get(k), 3) for k in ks)

    for r, at, every in curves:
        if at is None and r.get("between_run_std") is None:
            continue
        lines.append((r["metric"], r["slice"], str(r.get("case_count") or 0),
                      values(at) if at else "-", values(every) if every else "-",
                      fmt(r.get("between_run_std"))))
    if not lines:
        return ""
    return (f"\n\nrepeated runs (pass@k and pass^k for k = {', '.join(map(str, ks))}; "
            "se and the CI above resample cases, not runs):\n"
            + format_table(("metric", "slice", "cases", "pass@k", "pass^k", "between-run std"), lines))


def format_position_consistency(rows: list[dict[str, Any]]) -> str:
    """Pairwise metrics' position consistency per slice; '' when there are none."""
    lines = []
    for r in rows:
        if r.get("position_consistency") is None:
            continue
        low, high = r.get("position_consistency_ci_low"), r.get("position_consistency_ci_high")
        ci = "-" if low is None else f"[{fmt(low, 3)}, {fmt(high, 3)}]"
        lines.append((r["metric"], r["slice"], fmt(r["position_consistency"], 3), ci))
    if not lines:
        return ""
    return ("\n\nposition consistency (pairwise: share of pairs whose two orders agree; a disagreement scored a tie):\n"
            + format_table(("metric", "slice", "consistency", "95% CI"), lines))


def format_jury_agreement(rows: list[dict[str, Any]]) -> str:
    """Juries' agreement among their jurors per slice; '' when there is no jury."""
    lines = [(r["metric"], r["slice"], fmt(r.get("jury_alpha"), 3), str(r["jury_alpha_units"]))
             for r in rows if r.get("jury_alpha_units") is not None]
    if not lines:
        return ""
    return ("\n\njury agreement (Krippendorff's alpha, interval, among the jurors' scores; units: instances with "
            "two answers or more):\n" + format_table(("metric", "slice", "alpha", "units"), lines))


def _moment(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def format_sample(sample: dict) -> str:
    """What input.sample evaluated: the cases of the population it kept, and by what rule."""
    if "max_calls" in sample:
        rule = f"judge.max_calls {sample['max_calls']:,} picks rate {sample['rate']:.4g}"
    elif "per_slice" in sample:
        rule = f"{sample['per_slice']:,} per slice"
    else:
        rule = f"rate {sample['rate']:g}"
    return (f"input.sample ({rule}, seed {sample['seed']}): {sample['sampled']:,} of {sample['population']:,} cases "
            "evaluated; the summary's estimates are over them (population_count: each slice's cases)")


def _lines_note(run: dict[str, Any]) -> str:
    fmt = _input_format(run)
    if fmt == "otel_traces":
        return " (OpenTelemetry input: these are spans, spans read = used + dead-lettered; an unreadable line counts one)"
    return " (the lines of the ADK files' JSON: one case spans many)" if (fmt or "").startswith("adk_") else ""


def _input_format(run: dict[str, Any]) -> str | None:
    """The format of the files the run read (None for BigQuery, or a config that cannot be read)."""
    try:
        from evalbeam.configs import EvalConfig  # start-up time: the config model only for this line

        config = EvalConfig.model_validate(json.loads(run.get("config") or "{}"))
        return config.input.inferred_format() if config.input.kind == "files" else None
    except (TypeError, ValueError):
        return None


def _num_runs(run: dict[str, Any]) -> int:
    """inference.num_runs of the config a runs row ran with (1 without inference, or unreadable)."""
    try:
        inference = json.loads(run.get("config") or "{}").get("inference") or {}
        return int(inference.get("num_runs") or 1)
    except (TypeError, ValueError, AttributeError):
        return 1


def run_report(results, run_id: str, tables: dict | None = None) -> str:
    """A run as `run` prints it when it ends and `show` prints it (one text for both): counts, judge
    accounting, summary, calibration, metric errors, dead letters, failure modes, problems, where."""
    tables = tables or results.run_tables(run_id)
    if not tables["runs"]:
        return f"no run {run_id!r} in {results.location}"
    r = tables["runs"][0]
    lines = [
        f"run {run_id} ({r['name']}, run date {r['run_date']})",
        f"read {r['read_count']} = scored {r['scored_count']} + dead-lettered {r['dead_letter_count']}; "
        f"metric errors {r['metric_error_count']}",
    ]
    num_runs = _num_runs(r)
    if num_runs > 1:  # the summary's n counts runs: say how the records read become them
        lines.append(f"each of the {r['scored_count']} case(s) scored ran {num_runs} times (inference.num_runs): "
                     f"{r['scored_count'] * num_runs} instances, counted in the summary's n and errors")
    if r.get("lines_read") is not None:
        lines.append(f"source lines {r['lines_read']} = {r['lines_scored']} scored + {r['lines_dead_lettered']} "
                     f"dead-lettered + {r['lines_skipped']} holding no record"
                     + (f" (of them {r['lines_duplicate']} identical copies, dropped)" if r.get("lines_duplicate") else "")
                     + _lines_note(r))
    if r.get("window_end") is not None:
        start = _moment(r["window_start"]) if r.get("window_start") is not None else "the beginning"
        lines.append(f"input.since: last_run: the cases that ended in [{start}, {_moment(r['window_end'])}); "
                     "what was read of others is counted as holding no record")
    if r.get("sample"):
        lines.append(format_sample(json.loads(r["sample"])))
    judge = judge_accounting(r)
    if judge:
        lines += format_judge(judge)
    lines.append(format_summary(tables["summary"], str(results.location)))
    if tables.get("calibration"):
        lines.append("\nagreement with human labels (input.labels; calibration table):")
        lines.append(format_calibration(tables["calibration"]))
    errors = tables.get("metric_errors") or []
    if errors:
        lines.append(f"\nmetric errors ({sum(e['n'] for e in errors)}), by reason:")
        shown: dict[str, int] = {}
        for e in errors:
            shown[e["metric"]] = shown.get(e["metric"], 0) + 1
            if shown[e["metric"]] <= 5:
                lines.append(f"  {e['metric']}: {e['n']} x {_one_line(e['error'])}")
        for metric, n in shown.items():
            if n > 5:
                lines.append(f"  {metric}: ... and {n - 5} other reasons")
    # red teaming's attacked runs that could not be attacked are no record read: listed apart, not counted
    attacked = [d for d in tables["dead_letter"] if (d.get("field") or "").startswith("red_team ")]
    dead = [d for d in tables["dead_letter"] if d not in attacked]
    if dead:
        more = "; the first 20 here, all of them in the run's dead_letter table" if r["dead_letter_count"] > 20 else ""
        lines.append(f"\ndead letters ({r['dead_letter_count']}{more}):")
        lines += [f"  {d['source']}: {d['reason']}" for d in dead]
    if attacked:
        lines.append("\nattacked runs that could not be attacked (red_team; in the dead_letter table, not counted as "
                     "records read):")
        lines += [f"  {d['source']}: {d['reason']}" for d in attacked]
    notes = run_notes(r)
    if notes:
        lines.append("\nnotes:")
        lines += [f"  {n}" for n in notes]
    modes = format_failure_modes(failure_mode_rows(results, run_id), taxonomies=taxonomy_rows(results, run_id))
    if modes:
        lines.append(modes)
    attacks = format_attack_summary(attack_summary_rows(results, run_id))
    if attacks:
        lines.append(attacks)
    problems = run_problems(tables)
    if problems:
        lines.append("\nPROBLEMS:")
        lines += [f"  {p}" for p in problems]
    lines.append(f"\nresults: {results.location}")
    return "\n".join(lines)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


HEADLINE_METRICS = 3


def runs_report(results, eval_name: str | None, last: int | None = None) -> str:
    """The last runs (of an eval), newest first, with the overall means of their first
    metrics (in the config's order) and the flags of their comparisons (when they were compared):
    reports.data.runs_data, which `runs --json` prints, as a table."""
    runs = runs_data(results, eval_name, last)
    if not runs:
        return f"no runs{f' of eval {eval_name!r}' if eval_name else ''} in {results.location}"
    lines = []
    for r in runs:
        means = r["means"]
        shown = list(means)[:HEADLINE_METRICS]
        headline = ", ".join(f"{k} {fmt(means[k]['mean'], 3)}" for k in shown) + \
            (f" (+{len(means) - len(shown)})" if len(means) > len(shown) else "")
        lines.append((r["run_id"], r["eval"], str(r["run_date"]), f"{r['started_at']:%Y-%m-%d %H:%M:%S}",
                      str(r["read_count"]), str(r["scored_count"]), str(r["dead_letter_count"]),
                      str(r["metric_error_count"]), headline or "-", format_flags(r["compared"])))
    return format_table(("run_id", "eval", "run date", "started (UTC)", "read", "scored", "dead-lettered", "metric errors",
                         "means (overall)", "compared"), lines)


def format_flags(pairs: list[dict[str, Any]]) -> str:
    """`vs BASE: REGRESSED exact_match, rouge_1; improved x` per base compared with, `-` when never compared."""
    out = []
    for p in pairs:
        parts = []
        if p["regressions"]:
            parts.append("REGRESSED " + ", ".join(sorted({f["metric"] for f in p["regressions"]})))
        if p["improvements"]:
            parts.append("improved " + ", ".join(sorted({f["metric"] for f in p["improvements"]})))
        if p.get("unpaired"):  # a comparison that paired nothing shows no change, and is no pass
            parts.append("NOTHING PAIRED for " + ", ".join(sorted(set(p["unpaired"]))))
        out.append(f"vs {p['base_run_id']}: {'; '.join(parts) or 'no change flagged'}")
    return " | ".join(out) or "-"


def format_judge(judge: dict[str, Any]) -> list[str]:
    cost = "no price in judge.prices" if judge["estimated_cost_usd"] is None else f"${judge['estimated_cost_usd']:.4f}"
    reused = judge.get("checkpoint_reused") or 0
    from_checkpoints = f", {reused} from the checkpoints of an interrupted attempt" if reused else ""
    lines = [f"judge: {judge['requests']} judgments needed, {judge['cache_hits']} from the cache{from_checkpoints}; {judge['calls']} calls "
             f"({judge['rate_limited']} rate-limited), {judge['failures']} failed; tokens {judge['prompt_tokens']} prompt "
             f"+ {judge['output_tokens']} output; estimated cost {cost}"]
    for metric, u in sorted(judge["per_metric"].items()):
        checkpointed = f"{u['checkpoint_reused']} from checkpoints, " if u.get("checkpoint_reused") else ""
        judge = f" ({u['model']})" if u.get("model") else f" ({', '.join(sorted(u['models']))})" if u.get("models") else ""
        lines.append(f"  {metric}{judge}: {u.get('requests', 0)} needed, {u.get('cache_hits', 0)} cached, {checkpointed}"
                     f"{u.get('calls', 0)} calls, "
                     f"{u.get('rate_limited', 0)} x 429, {u.get('failures', 0)} failed, "
                     f"{u.get('prompt_tokens', 0)}+{u.get('output_tokens', 0)} tokens"
                     + (f", ${u['estimated_cost']:.4f}" if u.get("estimated_cost") is not None else ""))
    return lines


def format_calibration(rows: list[dict[str, Any]]) -> str:
    """The calibration table: per labelled metric, overall and its MAX_SHOWN_SLICES largest slices;
    then the notes (why a statistic is null) and the refused labels."""
    shown = []
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_metric.setdefault(r["metric"], []).append(r)
    for metric_rows in by_metric.values():
        overall = [r for r in metric_rows if r["slice"] == "overall"]
        slices = sorted((r for r in metric_rows if r["slice"] != "overall"), key=lambda r: (-(r["n"] or 0), r["slice"]))
        shown += overall + sorted(slices[:MAX_SHOWN_SLICES], key=lambda r: r["slice"])
    lines, notes = [], []
    overall_notes = {r["metric"]: r.get("note") for r in shown if r["slice"] == "overall"}
    for r in shown:
        ci = "-" if r["ci_low"] is None else f"[{fmt(r['ci_low'], 3)}, {fmt(r['ci_high'], 3)}]"
        lines.append((r["metric"], r["slice"], str(r["n"]), fmt(r["bias"], 3), fmt(r["mae"], 3), fmt(r["spearman"], 3),
                      fmt(r["kendall_tau"], 3), fmt(r["kappa"], 3), fmt(r["weighted_kappa"], 3), ci, fmt(r["f1"], 3),
                      fmt(r["annotator_alpha"], 3)))
        if r["slice"] == "overall":
            if r.get("note"):
                notes.append(f"  {r['metric']}: {r['note']}")
            missing = [f"{r['unlabelled_count']} unlabelled" if r["unlabelled_count"] else "",
                       f"{r['unscored_count']} labelled but unscored" if r["unscored_count"] else "",
                       f"{r['invalid_label_count']} label(s) refused, e.g. {r['invalid_label_example']}"
                       if r["invalid_label_count"] else ""]
            if any(missing):
                notes.append(f"  {r['metric']}: not compared: " + "; ".join(m for m in missing if m))
        elif r.get("note") and r["note"] != overall_notes.get(r["metric"]):
            # a slice's own reason (too few pairs there, one label value...), not the overall row's again
            notes.append(f"  {r['metric']} ({r['slice']}): {r['note']}")
    table = format_table(("metric", "slice", "n", "bias", "MAE", "spearman", "kendall", "kappa", "w. kappa",
                          "95% CI", "F1", "annot. alpha"), lines)
    return table + ("\n" + "\n".join(notes) if notes else "") + format_corrected(shown)


def format_corrected(rows: list[dict[str, Any]]) -> str:
    """The calibration table's corrected estimates (PPI++): the judge's mean, the labels' and the
    corrected one, each with its 95% CI ('' when no row has them: no score, or a run before they were kept)."""
    def with_ci(mean, low, high) -> str:
        return "-" if mean is None else fmt(mean, 4) + ("" if low is None else f" [{fmt(low, 4)}, {fmt(high, 4)}]")

    lines = [(r["metric"], r["slice"], str(r["n"]), str(r.get("corrected_unlabelled") or 0),
              with_ci(r.get("judge_only_mean"), r.get("judge_only_ci_low"), r.get("judge_only_ci_high")),
              with_ci(r["human_mean"], r.get("labels_only_ci_low"), r.get("labels_only_ci_high")),
              with_ci(r.get("corrected_mean"), r.get("corrected_ci_low"), r.get("corrected_ci_high")),
              fmt(r.get("corrected_lambda"), 3))
             for r in rows if r.get("judge_only_mean") is not None]
    if not lines:
        return ""
    return ("\n\ncorrected estimates of the mean (PPI++: the labels correct the judge; valid when the labelled "
            "instances are a random sample):\n"
            + format_table(("metric", "slice", "labelled", "unlabelled", "judge only [95% CI]",
                            "labels only [95% CI]", "corrected [95% CI]", "lambda"), lines))


# The failure modes `show` prints per metric and slice: the largest ones.
TOP_MODES = 3


def format_failure_modes(rows: list[dict[str, Any]], top: int = TOP_MODES,
                         taxonomies: list[dict[str, Any]] | None = None) -> str:
    """The `top` modes of each metric and slice (by count), with share, CI and an example;
    for a run that classified nothing (`taxonomies`: its taxonomies rows), that it had no failure."""
    if not rows:
        return "".join(f"\nfailure modes: no failure of {', '.join(json.loads(t['metrics'] or '[]'))} to classify "
                       f"(taxonomy {t['name']})" for t in taxonomies or [])
    lines = [f"\nfailure modes (top {top} per metric and slice; failure_modes table):"]
    cells: list[tuple[str, ...]] = []
    shown: dict[tuple, int] = {}
    for r in sorted(rows, key=lambda r: (r["metric"], r["slice"] != OVERALL, r["slice"], -r["count"], r["mode"])):
        key = (r["metric"], r["slice"])
        if r["count"] == 0 or shown.get(key, 0) >= top:
            continue
        shown[key] = shown.get(key, 0) + 1
        examples = json.loads(r["examples"] or "[]")
        ci = "-" if r.get("share_ci_low") is None else f"[{r['share_ci_low']:.2f}, {r['share_ci_high']:.2f}]"
        cells.append((r["metric"], r["slice"], r["mode"], str(r["count"]), str(r["failures"]), f"{r['share']:.2f}", ci,
                      str(examples[0]) if examples else "-"))
    if cells:  # else every failure went unclassified: no table, the count below
        lines.append(format_table(("metric", "slice", "mode", "count", "of", "share", "95% CI", "example"), cells,
                                  right=(3, 4, 5, 6)))
    unclassified = {(r["metric"], r["slice"]): r["unclassified"] for r in rows if r["unclassified"]}
    for (metric, slice_name), n in sorted(unclassified.items()):
        if slice_name == OVERALL:
            lines.append(f"  {metric}: {n} failure(s) not classified (the judge failed; see failure_assignments.error)")
    return "\n".join(lines)


def format_mode_comparison(rows: list[dict[str, Any]]) -> str:
    """Which failure modes grew and which shrank, run against base, per metric and slice."""
    changed = [r for r in rows if r["count"] != r["base_count"] or r["grew_in"] or r["shrank_in"]]
    if not changed:
        return "\nfailure modes: no change in any mode"
    cells = []
    for r in changed:
        share = "-" if r["share_change"] is None else f"{r['base_share'] or 0:.2f}->{r['share'] or 0:.2f}"
        p = "-" if r["p_value"] is None else f"{r['p_value']:.4f}"
        flag = "GREW" if r["grew"] else "shrank" if r["shrank"] else ""
        cells.append((r["metric"], r["slice"], r["mode"], str(r["base_count"]), str(r["count"]), share,
                      str(r["grew_in"]), str(r["shrank_in"]), p, flag))
    return ("\nfailure modes, run against base (paired over the instances both runs hold):\n"
            + format_table(("metric", "slice", "mode", "base", "run", "share", "grew", "shrank", "p", "flag"), cells,
                           right=(3, 4, 5, 6, 7, 8)))


def _target(r: dict[str, Any]) -> tuple[str, str]:
    return ("user's turn", "-") if r["delivery"] == "user_turn" else (r["tool"], r["path"])


def format_attack_summary(rows: list[dict[str, Any]]) -> str:
    """Attack success per family and target (overall), with its CI, the runs the attack reached and the
    utility beside the twins; then the worst attacked run of each."""
    overall = [r for r in rows if r["slice"] == OVERALL]
    if not overall:
        return ""
    cells = []
    for r in overall:
        tool, path = _target(r)
        ci = "-" if r.get("ci_low") is None else f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        utility = "-" if r.get("benign_utility") is None else \
            f"{r['benign_utility']:.2f} -> {r['utility_under_attack']:.2f}"
        cells.append((r["family"], tool, path, str(r["attacked"]), str(r["succeeded"]), fmt(r["attack_success_rate"]),
                      ci, str(r["delivered"]), str(r["errors"]), utility))
    metric = next((r["utility_metric"] for r in overall if r.get("utility_metric")), None)
    lines = ["\nattack success (red_team, overall; the attack_summary table has every slice):",
             format_table(("family", "tool", "path", "attacked", "succeeded", "rate", "95% CI", "reached", "errors",
                           f"utility ({metric or 'none'}): twin -> attacked"), cells, right=(3, 4, 5, 6, 7, 8))]
    worst = [(r, json.loads(r["examples"] or "[]")) for r in overall if r["succeeded"]]
    if worst:
        lines.append("the worst attacked run of each (its twin: the same id without :attack=...):")
        lines += [f"  {r['family']} {' '.join(_target(r)).rstrip(' -')}: {examples[0]['instance_id']}"
                  for r, examples in worst if examples]
    return "\n".join(lines)


def format_attack_comparison(rows: list[dict[str, Any]]) -> str:
    """Which attacks got through more often and which less, run against base, per family, target and slice."""
    changed = [r for r in rows if r["succeeded"] != r["base_succeeded"] or r["grew_in"] or r["shrank_in"]]
    if not changed:
        return "\nattacks: no change in any family" if rows else ""
    cells = []
    for r in changed:
        tool, path = _target(r)
        rate = f"{fmt(r['base_rate'], 2)}->{fmt(r['rate'], 2)}"
        p = "-" if r["p_value"] is None else f"{r['p_value']:.4f}"
        flag = "GREW" if r["grew"] else "shrank" if r["shrank"] else ""
        cells.append((r["family"], tool, path, r["slice"], rate, str(r["n_paired"]), str(r["grew_in"]),
                      str(r["shrank_in"]), p, flag))
    return ("\nattack success, run against base (paired over the attacked runs both runs hold):\n"
            + format_table(("family", "tool", "path", "slice", "rate", "paired", "grew", "shrank", "p", "flag"), cells,
                           right=(5, 6, 7, 8)))
