"""What `show --json` and the HTML report show of a run, read from its results:
counts and their problems, judge accounting, dead letters by reason, score
histograms, the trend of overall means, comparison flags and the instances that
got worse most. Rendering (pipelines.reports.html, reports.charts) reads nothing."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from typing import Any


from evalbeam.configs import DEFAULT_MAX_DEAD_LETTER_SHARE, EvalConfig
from evalbeam.metrics.rows.fields import PASSTHROUGH_FIELDS
from evalbeam.pipelines.results import ResultsError, as_date

def run_problems(tables: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What makes a run's results unusable: counts that do not reconcile, and
    metrics without a single valid score. Empty when all is well."""
    r = tables["runs"][0]
    problems = []
    if r["read_count"] != r["scored_count"] + r["dead_letter_count"]:
        problems.append(f"records do not reconcile: read {r['read_count']} != scored {r['scored_count']} "
                        f"+ dead-lettered {r['dead_letter_count']}")
    if r.get("lines_read") is not None:
        accounted = r["lines_skipped"] + r["lines_scored"] + r["lines_dead_lettered"]
        if r["lines_read"] != accounted:
            problems.append(f"source lines do not reconcile: {r['lines_read']} read != {accounted} accounted for "
                            "(records were lost between reading and scoring)")
    for s in tables["summary"]:
        if s["slice"] == "overall" and s["valid_count"] == 0 and s["error_count"] > 0:
            problems.append(f"metric {s['metric']} has no valid score: all {s['error_count']} rows failed")
    for c in tables.get("calibration") or []:
        # input.labels, yet no scored row had a label (a misspelt label column, most likely)
        if c["slice"] == "overall" and c["n"] == 0 and c["unscored_count"] == 0 and c["unlabelled_count"] > 0:
            problems.append(f"metric {c['metric']} has no human label to compare with (input.labels): "
                            f"{c['unlabelled_count']} row(s) unlabelled, {c['invalid_label_count']} label(s) refused; "
                            "is its label column misspelt?")
    problems += input_problems(r)
    return problems


def run_notes(r: dict[str, Any]) -> list[str]:
    """What a reader of a run should know that is not a problem (the run's status stands): BLEU scored on
    its slow Python path (the runs row's bleu_path)."""
    notes = []
    if "python" in (r.get("bleu_path") or ""):
        some = "every worker" if r["bleu_path"] == "python" else "some workers"
        notes.append(f"BLEU ran on its Python path on {some} (bleu_path {r['bleu_path']}): its C extension "
                     "(metrics/_bleu13a.c) was not built there, so BLEU took about 6x as long, with the same "
                     "scores; require_native_bleu: true refuses such a run")
    return notes


def input_problems(r: dict[str, Any]) -> list[str]:
    """A run that read nothing (unless its config's input.allow_empty), read records but scored
    none, or dead-lettered more of them than its config's max_dead_letter_share allows."""
    read, scored, dead = r["read_count"], r["scored_count"], r["dead_letter_count"]
    try:
        config = json.loads(r.get("config") or "{}")
    except (TypeError, ValueError):
        config = {}
    if not read:
        given = config.get("input") or {}
        if given.get("allow_empty"):
            return []
        source = f"input.uri {given['uri']}" if given.get("uri") else "input.query" if given.get("query") else "the input"
        return [f"no record was read from {source}: an empty input fails the run (set input.allow_empty: true "
                "when it is expected)"]
    if not scored:
        return [f"no instance was scored: all {read} records read were dead-lettered (see dead letters)"]
    share = config.get("max_dead_letter_share", DEFAULT_MAX_DEAD_LETTER_SHARE)
    if dead / read > share:
        return [f"{dead} of {read} records read were dead-lettered ({dead / read:.0%}), more than "
                f"max_dead_letter_share {share:g} allows"]
    return []


# Distributions computed where the rows are: a metric with few distinct scores (0/1, a 1..5
# rubric) is counted per score, any other in 20 equal bins between its min and max. Only
# finite scores count (`score - score = 0` is false for NaN and infinities in DuckDB and
# BigQuery alike: the pipeline writes none, a table written otherwise may hold them); the bin
# is computed on halves, so that a range wider than the largest float does not overflow.
# Scores that differ only by rounding (0.6666666666666665, 0.6666666666666666) are told apart
# here and drawn as one bar by reports.charts.
HISTOGRAM_SQL = """
WITH s AS (SELECT metric, score FROM {scores} WHERE score - score = 0),
r AS (SELECT metric, MIN(score) AS lo, MAX(score) AS hi, COUNT(DISTINCT score) AS distinct_scores FROM s GROUP BY metric)
SELECT s.metric, r.lo, r.hi, r.distinct_scores,
  CASE WHEN r.distinct_scores <= {max_distinct} THEN s.score
       ELSE LEAST(FLOOR((s.score / 2 - r.lo / 2) / (r.hi / 2 - r.lo / 2) * {bins}), {bins} - 1) END AS bucket,
  COUNT(*) AS n
FROM s JOIN r ON s.metric = r.metric
GROUP BY s.metric, r.lo, r.hi, r.distinct_scores, bucket
ORDER BY s.metric, bucket"""
HISTOGRAM_BINS = 20
HISTOGRAM_MAX_DISTINCT = 12


# The overall means of an eval's runs (filtered to the runs wanted afterwards: summary tables are small).
EVAL_MEANS_SQL = """
SELECT s.run_id, s.metric, s.mean, s.ci_low, s.ci_high, s.valid_count
FROM {summary} s JOIN {runs} r ON s.run_id = r.run_id
WHERE s.slice = 'overall' {where}"""
EVAL_COMPARISONS_SQL = """
SELECT c.run_id, c.base_run_id, c.metric, c.slice, c.regression, c.improvement, c.n_paired, c.compared_at
FROM {comparisons} c JOIN {runs} r ON c.run_id = r.run_id {where}"""
DEAD_LETTER_REASONS_SQL = """
SELECT field, reason, COUNT(*) AS n FROM {dead_letter}
GROUP BY field, reason ORDER BY n DESC, reason LIMIT 5000"""


# The paired instances of one metric that got worse most, worst first; {worse} is how much
# worse the run's score is than the base's (positive: worse) for the metric's direction.
WORST_CTE = """
WITH b AS (SELECT instance_id, score FROM {base_scores} WHERE metric = {P}metric AND score IS NOT NULL),
r AS (SELECT instance_id, score FROM {run_scores} WHERE metric = {P}metric AND score IS NOT NULL),
w AS (SELECT b.instance_id, b.score AS base_score, r.score AS score, {worse} AS worse
      FROM b JOIN r ON b.instance_id = r.instance_id WHERE {worse} > 0
      ORDER BY worse DESC, b.instance_id LIMIT {limit})"""
WORSE = {"higher": "b.score - r.score", "lower": "r.score - b.score", "closer_to_zero": "ABS(r.score) - ABS(b.score)"}


# Instance columns shown beside a worsened score (in this order; then the slice columns).
SHOWN_FIELDS = ("prompt", "instruction", "history", "context", "reference", "response", "baseline_model_response",
                "predicted_trajectory", "reference_trajectory", "latency_in_seconds", "failure", "source")


def config_digest(config_text: str | None) -> str | None:
    """Which config a run ran with: the sha256 (64 hex digits, as `sha256sum` prints it) of
    the config stored in its runs row (`config`, UTF-8), so that anyone can recompute it."""
    return hashlib.sha256(config_text.encode("utf-8")).hexdigest() if config_text else None


def judge_accounting(run: dict[str, Any]) -> dict[str, Any] | None:
    """The judge's accounting of a runs row (None for a run without judge metrics)."""
    if not run.get("judge_requests"):
        return None
    usage = json.loads(run["judge_usage"]) if run.get("judge_usage") else {}
    return {
        "requests": run["judge_requests"], "cache_hits": run["judge_cache_hits"], "calls": run["judge_calls"],
        "rate_limited": run["judge_rate_limited"], "failures": run["judge_failures"],
        "prompt_tokens": run["judge_prompt_tokens"], "output_tokens": run["judge_output_tokens"],
        "estimated_cost_usd": run.get("judge_estimated_cost"), "per_metric": usage,
        # judgments a killed attempt had checkpointed, taken again by this run (neither called nor cached)
        "checkpoint_reused": sum(u.get("checkpoint_reused", 0) for u in usage.values()),
    }


_FIELD_PREFIX = re.compile(r"^field '[^']*'(?: \(column '[^']*'\))?: ")
_GOT_VALUE = re.compile(r"\b(got|id) ('[^']*'|\"[^\"]*\")")


# a number standing alone (a line, a column, a count), not part of a word or name (UTF-8, \\ud83d)
_NUMBER = re.compile(r"(?<![A-Za-z]-)(?<!\w)\d+(?:,\d{3})*(?!\w)")


def reason_kind(reason: str) -> str:
    """A dead letter's reason without its particulars, so that `must be a number, got 'slow'`
    and `..., got 'fast'` count as one: the field (shown beside it), the value it got
    and a repeated id taken out, numbers standing alone (columns, lines) as N."""
    text = _FIELD_PREFIX.sub("", " ".join(str(reason).split()))
    return _NUMBER.sub("N", _GOT_VALUE.sub(r"\1 '...'", text))


def dead_letter_reasons(results, run_id: str) -> list[dict[str, Any]]:
    """Dead letters counted by field and kind of reason, most frequent first, with one example each."""
    rows = results.sql(DEAD_LETTER_REASONS_SQL, {}, {"dead_letter": ("dead_letter", run_id)})
    kinds: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = (r["field"], reason_kind(r["reason"]))
        entry = kinds.setdefault(key, {"field": r["field"], "reason": key[1], "example": r["reason"], "n": 0})
        entry["n"] += r["n"]
    return sorted(kinds.values(), key=lambda e: (-e["n"], e["reason"]))


def histograms(results, run_id: str) -> dict[str, dict[str, Any]]:
    """metric -> {"discrete": bool, "lo", "hi", "buckets": [(value or bin start, bin width or None, count)]}."""
    rows = results.sql(HISTOGRAM_SQL.replace("{bins}", str(HISTOGRAM_BINS)).replace("{max_distinct}", str(HISTOGRAM_MAX_DISTINCT)),
                       {}, {"scores": ("metric_results", run_id)})
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        discrete = r["distinct_scores"] <= HISTOGRAM_MAX_DISTINCT
        h = out.setdefault(r["metric"], {"discrete": discrete, "lo": r["lo"], "hi": r["hi"], "buckets": []})
        if discrete:
            h["buckets"].append((float(r["bucket"]), None, r["n"]))
        else:
            # on halves, as the bin above: finite for any finite lo and hi
            width = r["hi"] / HISTOGRAM_BINS - r["lo"] / HISTOGRAM_BINS
            h["buckets"].append((2 * (r["lo"] / 2 + int(r["bucket"]) * (width / 2)), width, r["n"]))
    return out


def runs_until(results, run: dict[str, Any], last: int) -> list[dict[str, Any]]:
    """A run and the last runs of its eval before it (by run date, then start time), oldest first."""
    key = (as_date(run["run_date"]), run["started_at"])
    rows = [r for r in results.runs(run["name"]) if (as_date(r["run_date"]), r["started_at"]) <= key]
    rows.sort(key=lambda r: (as_date(r["run_date"]), r["started_at"]))
    return rows[-last:]


def overall_means(results, name: str | None, run_ids: set[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """run_id -> metric -> its overall summary row, for the runs asked."""
    where, params = ("AND r.name = {P}name", {"name": name}) if name else ("", {})
    rows = results.sql(EVAL_MEANS_SQL.replace("{where}", where), params,
                       {"summary": ("summary", None), "runs": ("runs", None)})
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r["run_id"] in run_ids:
            out.setdefault(r["run_id"], {})[r["metric"]] = r
    return out


def comparison_flags(results, name: str | None, run_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """run_id -> per base run compared with: the regressed and improved (metric, slice)s."""
    where, params = ("WHERE r.name = {P}name", {"name": name}) if name else ("", {})
    rows = results.sql(EVAL_COMPARISONS_SQL.replace("{where}", where), params,
                       {"comparisons": ("comparisons", None), "runs": ("runs", None)})
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if r["run_id"] not in run_ids:
            continue
        p = pairs.setdefault((r["run_id"], r["base_run_id"]), {"base_run_id": r["base_run_id"], "regressions": [],
                                                                "improvements": [], "unpaired": []})
        if r["slice"] == "overall" and not r["n_paired"]:
            p["unpaired"].append(r["metric"])
        if r["regression"]:
            p["regressions"].append((r["metric"], r["slice"]))
        if r["improvement"]:
            p["improvements"].append((r["metric"], r["slice"]))
    out: dict[str, list[dict[str, Any]]] = {}
    for (run_id, _), p in sorted(pairs.items()):
        out.setdefault(run_id, []).append(p)
    return out


def runs_data(results, eval_name: str | None, last: int | None = None) -> list[dict[str, Any]]:
    """The runs `evalbeam runs` lists (of an eval; the last `last`), newest first, as `runs --json`
    prints them: each run's counts, the overall mean of each of its metrics (in its config's order)
    and, per base run it was compared with, the (metric, slice)s flagged."""
    rows = results.runs(eval_name)[:last]  # last None: all
    ids = {r["run_id"] for r in rows}
    means = overall_means(results, eval_name, ids) if rows else {}
    flags = comparison_flags(results, eval_name, ids) if rows else {}
    out = []
    for r in rows:
        m = means.get(r["run_id"], {})
        order = [k for k in dict.fromkeys([*configured_metrics(r.get("config")), *sorted(m)]) if k in m]
        out.append({
            "run_id": r["run_id"], "eval": r["name"], "run_date": r["run_date"], "started_at": r["started_at"],
            "finished_at": r["finished_at"], "read_count": r["read_count"], "scored_count": r["scored_count"],
            "dead_letter_count": r["dead_letter_count"], "metric_error_count": r["metric_error_count"],
            "means": {k: {"mean": m[k]["mean"], "ci_low": m[k]["ci_low"], "ci_high": m[k]["ci_high"],
                          "valid_count": m[k]["valid_count"]} for k in order},
            "compared": [{"base_run_id": p["base_run_id"],
                          "regressions": [{"metric": metric, "slice": s} for metric, s in p["regressions"]],
                          "improvements": [{"metric": metric, "slice": s} for metric, s in p["improvements"]],
                          "unpaired": p["unpaired"]} for p in flags.get(r["run_id"], [])],
        })
    return out


def configured_metrics(config_text: str | None) -> list[str]:
    """The output names of a run's metrics in the order its config lists them (the headline first)."""
    try:
        metrics = json.loads(config_text or "{}").get("metrics") or []
    except (ValueError, AttributeError):
        return []
    names = []
    for m in metrics:
        if isinstance(m, str):
            names.append(m)
        elif isinstance(m, dict) and (m.get("as") or m.get("name")):
            names.append(m.get("as") or m["name"])
    return names


def worst_instances(results, base_run_id: str, run_id: str, metric: str, direction: str,
                    limit: int = 5) -> list[dict[str, Any]]:
    """The paired instances whose score of `metric` got worse most, with both runs' instance rows."""
    cte = WORST_CTE.replace("{worse}", WORSE.get(direction, WORSE["higher"])).replace("{limit}", str(int(limit)))
    tables = {"base_scores": ("metric_results", base_run_id), "run_scores": ("metric_results", run_id)}
    worst = results.sql(cte + "\nSELECT * FROM w ORDER BY worse DESC, instance_id", {"metric": metric}, tables)
    if not worst:
        return []
    inputs = {}
    for side, rid in (("base", base_run_id), ("run", run_id)):
        rows = results.sql(cte + "\nSELECT i.* FROM {instances} i JOIN w ON i.instance_id = w.instance_id", {"metric": metric},
                           {**tables, "instances": ("instances", rid)})
        inputs[side] = {r["instance_id"]: r for r in rows}
    return [{**w, "base_instance": inputs["base"].get(w["instance_id"], {}),
             "run_instance": inputs["run"].get(w["instance_id"], {})} for w in worst]


def summary_curve(value: Any) -> list[dict[str, Any]] | None:
    """A summary row's pass_at_k / pass_all_k: [{k, value, cases}] (stored as JSON text), or None."""
    if value is None or isinstance(value, list):
        return value
    return json.loads(value)


def show_data(results, run_id: str, tables: dict | None = None) -> dict[str, Any]:
    """What `show --json` prints: the run, its counts, judge accounting, summary, metric errors
    by reason, dead letters (the first ones and the counts by reason) and problems."""
    tables = tables or results.run_tables(run_id)
    if not tables["runs"]:
        raise ResultsError(f"no run {run_id!r} in {results.location}")
    run = tables["runs"][0]
    counts = {k: run.get(k) for k in ("read_count", "scored_count", "dead_letter_count", "metric_error_count",
                                       "lines_read", "lines_skipped", "lines_scored", "lines_dead_lettered")}
    from evalbeam.pipelines.failure_mode_results import failure_mode_rows  # imports one way: it reads results
    from evalbeam.pipelines.red_team_results import attack_summary_rows  # (the same: it reads results)

    modes = failure_mode_rows(results, run_id)
    attacks = attack_summary_rows(results, run_id)
    return {
        "run_id": run["run_id"], "name": run["name"], "run_date": run["run_date"], "started_at": run["started_at"],
        "finished_at": run["finished_at"], "evalbeam_version": run["evalbeam_version"],
        "config_digest": config_digest(run["config"]), "counts": counts,
        "reconciles": run["read_count"] == run["scored_count"] + run["dead_letter_count"],
        "judge": judge_accounting(run),
        "summary": [{**s, "pass_at_k": summary_curve(s.get("pass_at_k")),
                     "pass_all_k": summary_curve(s.get("pass_all_k"))} for s in tables["summary"]],
        # the confusion as JSON itself, not text holding JSON
        "calibration": [{**c, "confusion": json.loads(c["confusion"]) if c.get("confusion") else None}
                        for c in tables.get("calibration") or []],
        "metric_errors": tables.get("metric_errors") or [],
        "dead_letters": {"first": tables["dead_letter"], "by_reason": dead_letter_reasons(results, run_id)}
        if run["dead_letter_count"] else {"first": [], "by_reason": []},
        "problems": run_problems(tables),
        "notes": run_notes(run),
        "results": results.location,
        # failure_modes: the failure_modes rows, each with its examples as a list
        **({"failure_modes": [{**m, "examples": json.loads(m["examples"] or "[]")} for m in modes]} if modes else {}),
        # red_team: the attack_summary rows, each with its examples as a list
        **({"attack_summary": [{**a, "examples": json.loads(a["examples"] or "[]")} for a in attacks]} if attacks else {}),
    }


def to_json(value: Any) -> str:
    """JSON for scripts: dates and times in ISO 8601, a non-finite number as null."""
    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, (dt.date, dt.datetime)):
            return v.isoformat()
        return v

    return json.dumps(clean(value), indent=2, ensure_ascii=False, allow_nan=False)


TREND_RUNS = 30
WORST_SHOWN = 5


def metric_info(config_text: str | None) -> dict[str, dict[str, Any]]:
    """output name -> {direction, range (lo, hi) or None, threshold} from the config a run
    ran with and the registry (a config no longer valid here: nothing; charts use the data)."""
    from evalbeam.metrics.catalog import get_metric  # start-up time: the metric modules only where a report is made

    try:
        config = EvalConfig.model_validate(json.loads(config_text or ""))
    except (ValueError, TypeError):
        return {}
    out = {}
    for name in PASSTHROUGH_FIELDS:
        d = get_metric(name)
        out[name] = {"direction": d.direction, "range": score_range(d.score_range), "threshold": None}
    for m in config.metrics:
        d = m.definition()
        out[m.output_name] = {"direction": m.effective_direction(), "range": score_range(d.score_range) if d else None,
                              "threshold": m.effective_threshold()}
    return out


def score_range(text: str) -> tuple[float, float] | None:
    """The registry's score range ("0..1", "1..5", "0/1", "-2..2") as numbers; None when open (">=0")."""
    m = re.fullmatch(r"(-?[\d.]+)(?:\.\.|/)(-?[\d.]+)", text.strip())
    return (float(m.group(1)), float(m.group(2))) if m else None


def report_data(results, run_id: str, base_run_id: str | None = None,
                comparisons: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Everything `evalbeam report` shows, read from where the run's tables are; rendering
    (pipelines.reports.html, reports.charts) reads nothing."""
    tables = results.run_tables(run_id)
    data = show_data(results, run_id, tables)
    run = tables["runs"][0]
    data["metrics"] = metric_info(run["config"])
    data["histograms"] = histograms(results, run_id)
    history = runs_until(results, run, TREND_RUNS)
    means = overall_means(results, run["name"], {r["run_id"] for r in history})
    data["trend"] = {}
    for r in history:
        for metric, s in means.get(r["run_id"], {}).items():
            data["trend"].setdefault(metric, []).append({"run_id": r["run_id"], "run_date": as_date(r["run_date"]),
                                                         **{k: s[k] for k in ("mean", "ci_low", "ci_high")}})
    data["failure_examples"] = failure_examples(results, run_id, data.get("failure_modes") or [])
    if data.get("attack_summary"):
        from evalbeam.pipelines.red_team_results import attack_examples  # imports one way: it reads results

        data["attack_examples"] = attack_examples(results, run_id, [
            {**a, "examples": json.dumps(a["examples"])} for a in data["attack_summary"]])
    data["base_run_id"] = base_run_id
    data["comparisons"] = comparisons or []
    data["worst"] = {}
    regressed = {}
    for c in data["comparisons"]:
        if c["regression"]:
            regressed.setdefault(c["metric"], c["direction"])
    for metric, direction in sorted(regressed.items()):
        data["worst"][metric] = worst_instances(results, base_run_id, run_id, metric, direction, WORST_SHOWN)
    return data


def failure_examples(results, run_id: str, modes: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(metric, instance_id) -> the instance's row and its failure assignments, for the
    example instances of the overall slice (at most five per mode): what the report links to."""
    wanted = {(m["metric"], i) for m in modes if m["slice"] == "overall" for i in m["examples"]}
    if not wanted:
        return {}
    from evalbeam.pipelines.failure_mode_results import assignments  # imports one way: it reads results

    ids = sorted({i for _, i in wanted})
    params = {f"id{n}": i for n, i in enumerate(ids)}
    rows = results.sql("SELECT * FROM {i} WHERE instance_id IN (" + ", ".join("{P}" + k for k in params) + ")",
                       params, {"i": ("instances", run_id)})
    instances = {r["instance_id"]: r for r in rows}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for a in assignments(results, run_id):
        key = (a["metric"], a["instance_id"])
        if key in wanted and a["instance_id"] in instances:
            out.setdefault(key, {"instance": instances[a["instance_id"]], "assignments": []})["assignments"].append(a)
    return out
