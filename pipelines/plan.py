"""`evalbeam plan CONFIG`: before spending anything, the judgments a run needs
after dedup and the cache, their estimated tokens and cost (online and batch),
and the wall time at the configured quota. Runs a pipeline on the local runner
that reads and validates the whole input as `run` does, and calls nothing.

With --labels-for-width W --pilot RUN: per labelled metric, how many of the input's
instances people must label for the human-corrected estimate's 95% CI to be at most W
wide, from the variances the pilot run's labels show (its calibration table)."""
from __future__ import annotations

import json
import math
import os
import tempfile

import apache_beam as beam
import duckdb
from apache_beam.options.pipeline_options import PipelineOptions

from evalbeam.configs import ConfigError, EvalConfig
from evalbeam.metrics.taxonomy import TaxonomyError
from evalbeam.metrics.judge.asks import plan_judges, share_quotas
from evalbeam.metrics.red_team import TOOL_RESPONSE, AttackError
from evalbeam.metrics.judge.client import CHARS_PER_TOKEN
from evalbeam.metrics.statistics.ppi import MIN_LABELS, PilotVariances, labels_for_width
from evalbeam.pipelines.local import new_pipeline
from evalbeam.pipelines.preflight import billing_project, parquet_glob, preflight
from evalbeam.pipelines.results import ResultsError, results_for
from evalbeam.pipelines.since import plan_window
from evalbeam.pipelines.stages.read import read_instances
from evalbeam.transforms import bigquery, judge
from evalbeam.transforms.failure_modes import taxonomy_of
from evalbeam.transforms.plan import PlanFailureModes, PlanJudging, plan_key, sum_counts
from evalbeam.transforms.red_team import attack_set_of, plan_counts, targets_of
from evalbeam.transforms.rubrics import ReadPinnedRubrics
from evalbeam.metrics.rows.tables import utc_now
from evalbeam.transforms.runs import judge_cost


def _write(value, path):
    with open(path, "w") as f:
        json.dump(value, f)


def plan(config: EvalConfig, width: float | None = None, pilot: str | None = None) -> dict:
    """The plan; with `width` and `pilot` (a run_id in the config's outputs), also the labels
    each labelled metric needs (label_plan)."""
    if (width is None) != (pilot is None):
        raise ConfigError("--labels-for-width and --pilot go together: the width wanted, and the run whose labels "
                          "tell the variances")
    if width is not None and not (math.isfinite(width) and width > 0):
        raise ConfigError(f"--labels-for-width: {width:g} is not a width; give the 95% CI's width wanted "
                          "(high - low, in the metric's units), e.g. 0.05")
    planned = plan_judging(config)
    if width is not None:
        planned["labels"] = label_plan(config, pilot, width, planned["instances"])
    return planned


def label_plan(config: EvalConfig, pilot: str, width: float, instances: int) -> dict:
    """Per metric the pilot run labelled (its overall calibration row), the labels needed among
    `instances` (metrics.statistics.ppi.labels_for_width)."""
    try:
        tables = results_for(config).run_tables(pilot)
        if not tables["runs"]:
            raise ConfigError(f"--pilot: no run {pilot!r} in this config's outputs; `evalbeam runs --config "
                              "CONFIG` lists its runs")
        rows = [r for r in tables["calibration"] if r["slice"] == "overall"]
    except (ResultsError, OSError, duckdb.Error) as e:
        raise ConfigError(f"--pilot: cannot read run {pilot!r}: {e}") from None
    metrics = []
    for r in rows:
        entry = {"metric": r["metric"], "pilot_labelled": r["n"], "pilot_unlabelled": r.get("corrected_unlabelled"),
                 "labels_needed": None, "lambda_at_needed": None, "labels_only_needed": None, "note": None}
        if r.get("human_variance") is None or r.get("judge_variance") is None or r.get("covariance") is None:
            entry["note"] = "the pilot run has no variances for it (no scored label, or a run before evalbeam kept them)"
        elif r["n"] < 2 or r["human_variance"] == 0:
            entry["note"] = (f"the pilot's {r['n']} label(s) have no spread to learn from: label more of it "
                             "(a random sample) first")
        else:
            pilot_variances = PilotVariances(r["human_variance"], r["judge_variance"], r["covariance"])
            entry.update(labels_for_width(pilot_variances, width, instances))
            notes = []
            if entry["labels_needed"] is None:
                notes.append(f"labelling all {instances:,} instances gives a wider CI than {width:g}: the run is "
                             "too small for it")
            if r["n"] < 2 * MIN_LABELS:  # said too when the run is too small: the estimate of that is rough as well
                notes.append(f"the pilot has only {r['n']} labels: its variances, and so these counts, are rough")
            entry["note"] = "; ".join(notes) or None
        metrics.append(entry)
    return {"pilot": pilot, "width": width, "instances": instances, "metrics": metrics,
            "unlabelled_in_pilot": not rows}


def plan_judging(config: EvalConfig) -> dict:
    if config.scenarios is not None:
        return plan_scenarios(config)
    if config.red_team is not None:
        return plan_red_team(config)
    if config.inference is not None:
        raise ConfigError("inference: evalbeam plan does not estimate runs with inference yet (the judge prompts "
                          "depend on what inference produces, and inference.model calls are not counted)")
    checked = preflight(config, credentials=False)  # plan calls nothing: no key needed
    rubric_specs = config.rubric_specs()
    judge_specs = config.template_judge_specs()
    project = billing_project(config, None)
    window = plan_window(config, "", utc_now())  # input.since: what a run started now would read
    try:
        read_plan = bigquery.plan_read(config.input, project, window) if config.input.kind != "files" else None
        cache_plans = [bigquery.plan_table_read(c.removeprefix("bq://"), project)
                       for c in config.judge.cache if c.startswith("bq://")] if config.calls_a_model() else []
        rubric_plans = [bigquery.plan_table_read(c.removeprefix("bq://"), project)
                        for c in config.judge.rubrics_from if c.startswith("bq://")] if rubric_specs else []
    except bigquery.BigQueryError as e:
        raise ConfigError(str(e)) from None
    with tempfile.TemporaryDirectory(prefix="evalbeam-plan-") as folder:
        counts_path, totals_path = os.path.join(folder, "counts.json"), os.path.join(folder, "totals.json")
        with new_pipeline(PipelineOptions(["--runner=DirectRunner"])) as p:
            instances, read, dead, sample = read_instances(p, config, read_plan, scratch=folder, window=window)
            cached = pinned = None
            if config.judge.cache and config.calls_a_model():
                parquet = [parquet_glob(c) for c in config.judge.cache if not c.startswith("bq://")]
                cached = p | "JudgeCache" >> judge.ReadJudgeCache(parquet, cache_plans)
            if config.judge.rubrics_from and rubric_specs:
                parquet = [parquet_glob(c) for c in config.judge.rubrics_from if not c.startswith("bq://")]
                pinned = p | "PinnedRubrics" >> ReadPinnedRubrics(parquet, rubric_plans)
            counted = instances | "Plan" >> PlanJudging(judge_specs, rubric_specs, config.judge, cached, pinned,
                                                        plan_failure_modes(config))
            counted | "WriteCounts" >> beam.Map(_write, counts_path)
            totals = {
                "read": read | "CountRead" >> beam.combiners.Count.Globally(),
                "instances": instances | "CountInstances" >> beam.combiners.Count.Globally(),
                "dead_lettered": dead | "CountDead" >> beam.combiners.Count.Globally(),
            }
            if sample is not None:
                totals["sample"] = sample
            (p | "Once" >> beam.Create([None])
             | "Totals" >> beam.Map(lambda _, **t: t, **{k: beam.pvalue.AsSingleton(v) for k, v in totals.items()})
             | "WriteTotals" >> beam.Map(_write, totals_path))
        with open(counts_path) as f:
            counts = dict(json.load(f))
        with open(totals_path) as f:
            totals = json.load(f)
    planned = estimate(config, checked.source, totals, counts, earlier_output_tokens(config))
    planned["window"] = window.describe() if window is not None else None
    # a rubric metric's classifications (one per failed rubric) are not known before its rubrics are judged
    rubric_names = {s.output_name for s in rubric_specs}
    planned["uncounted_failure_modes"] = [m for m in config.failure_modes.metrics if m in rubric_names] \
        if config.failure_modes is not None else []
    return planned


def plan_scenarios(config: EvalConfig) -> dict:
    """A scenarios: config: the generation's requests (one per cell, exactly those the run sends) after
    judge.cache, priced at the generator's settings; the evaluation of what they make is not estimated
    (its prompts depend on the scenarios and the agent's answers)."""
    from evalbeam.pipelines.scenario_inputs import generation_plan  # start-up time: only with scenarios:

    checked = preflight(config, credentials=False)
    counts: dict = {}
    asked = 0
    settings = config.judge
    if not config.scenarios.pinned:
        generation = generation_plan(config)
        settings = generation.settings
        asked = generation.grid.size * generation.grid.per_cell
        try:
            cache_plans = [bigquery.plan_table_read(c.removeprefix("bq://"), billing_project(config, None))
                           for c in config.judge.cache if c.startswith("bq://")]
        except bigquery.BigQueryError as e:
            raise ConfigError(str(e)) from None
        with tempfile.TemporaryDirectory(prefix="evalbeam-plan-") as folder:
            counts_path = os.path.join(folder, "counts.json")
            with new_pipeline(PipelineOptions(["--runner=DirectRunner"])) as p:
                asks = (p | "Cells" >> beam.Create(list(range(generation.grid.size)))
                        | "Asks" >> beam.Map(lambda n, g: (lambda r: (r.key, (r, None)))(g.request(g.grid.cell(n))),
                                             generation))
                if config.judge.cache:
                    parquet = [parquet_glob(c) for c in config.judge.cache if not c.startswith("bq://")]
                    cached = p | "JudgeCache" >> judge.ReadJudgeCache(parquet, cache_plans)
                else:
                    cached = p | "NoCache" >> beam.Create([])
                (({"asks": asks, "cached": cached} | "JoinCache" >> beam.CoGroupByKey()
                  | "PerRequest" >> beam.FlatMap(plan_key) | "PerMetric" >> beam.CombinePerKey(sum_counts)
                  | "Together" >> beam.combiners.ToList() | "WriteCounts" >> beam.Map(_write, counts_path)))
            with open(counts_path) as f:
                counts = dict(json.load(f))
    generator = config.model_copy(update={"judge": settings})
    planned = estimate(generator, checked.source, {"read": asked, "instances": asked, "dead_lettered": 0}, counts,
                       earlier_output_tokens(config))
    planned["uncounted_failure_modes"] = []
    planned["scenarios_evaluation"] = bool(config.metrics or config.inference)
    return planned


def plan_red_team(config: EvalConfig) -> dict:
    """red_team: before anything runs, the agent runs (the twins and the attacked runs, num_runs each), the
    requests they make of a deployed agent and their time at its quota, and the judge calls: the attacks'
    generation, inference.model's, and the judge metrics' on every run (an upper bound: their prompts hold
    what the agent answers). Calls nothing."""
    checked = preflight(config, credentials=False)
    red_team, inference = config.red_team, config.inference
    try:
        attack_set = attack_set_of(red_team)
    except AttackError as e:
        raise ConfigError(str(e)) from None
    attacks = len(attack_set.attacks) if attack_set is not None else red_team.attacks.generate.count
    targets = targets_of(red_team)
    tool_targets = sum(t.delivery == TOOL_RESPONSE for t in targets)
    window = plan_window(config, "", utc_now())  # input.since: what a run started now would read
    try:
        read_plan = bigquery.plan_read(config.input, billing_project(config, None), window) \
            if config.input.kind != "files" else None
    except bigquery.BigQueryError as e:
        raise ConfigError(str(e)) from None
    with tempfile.TemporaryDirectory(prefix="evalbeam-plan-") as folder:
        path = os.path.join(folder, "counts.json")
        with new_pipeline(PipelineOptions(["--runner=DirectRunner"])) as p:
            instances, read, dead, _sample = read_instances(p, config, read_plan, scratch=folder, window=window)
            counted = instances | "AttackCounts" >> beam.Map(plan_counts, tool_targets, red_team.user_turn, attacks)
            totals = {
                "read": read | "CountRead" >> beam.combiners.Count.Globally(),
                "dead_lettered": dead | "CountDead" >> beam.combiners.Count.Globally(),
                "cases": counted | "SumCases" >> beam.CombineGlobally(
                    lambda cs: {k: sum(c[k] for c in cs) for k in ("cases", "scenarios", "attacked", "turns",
                                                                    "attacked_turns")} if cs else {}),
            }
            (p | "Once" >> beam.Create([None])
             | "Totals" >> beam.Map(lambda _, **t: t, **{k: beam.pvalue.AsSingleton(v) for k, v in totals.items()})
             | "Write" >> beam.Map(_write, path))
        with open(path) as f:
            totals = json.load(f)
    cases = {"cases": 0, "scenarios": 0, "attacked": 0, "turns": 0, "attacked_turns": 0, **totals["cases"]}
    runs = inference.num_runs
    twins, attacked = cases["cases"] * runs, cases["attacked"] * runs
    judges = []
    for spec in config.template_judge_specs() + config.rubric_specs():
        samples = config.judge.sampling_count * (2 if spec.judge_kind() == "pairwise" else 1)
        if spec in config.rubric_specs():
            samples += 1  # its rubrics' generation
        judges.append({"metric": spec.output_name, "at_most": (twins + attacked) * samples})
    requests = (cases["turns"] + cases["attacked_turns"]) * runs if inference.deployed else None
    rpm = inference.requests_per_minute if inference.deployed else None
    return {
        "name": config.name, "source": checked.source, "read": totals["read"], "instances": cases["cases"],
        "dead_lettered": totals["dead_lettered"], "red_team": {
            "attacks": attacks, "attacks_generated": attack_set is None, "attacks_source": red_team.attacks
            if isinstance(red_team.attacks, str) else "generate",
            "targets": [{"delivery": t.delivery, "tool": t.tool, "path": t.path} for t in targets],
            "num_runs": runs, "cases": cases["cases"], "scenario_cases": cases["scenarios"],
            "twins": twins, "attacked_runs": attacked, "agent_runs": twins + attacked, "kind": inference.kind,
            "agent_requests": requests, "requests_per_minute": rpm,
            "minutes_at_quota": requests / rpm if requests is not None and rpm else None,
            "generation_calls": int(red_team.generates), "model_calls": twins + attacked
            if inference.kind == "model" else 0, "judge_metrics": judges,
            "judge_calls_at_most": int(red_team.generates) + sum(j["at_most"] for j in judges)
            + (twins + attacked if inference.kind == "model" else 0),
            "simulated_conversations_uncounted": bool(cases["scenarios"]) and config.simulates_users(),
        }}


def plan_failure_modes(config: EvalConfig) -> PlanFailureModes | None:
    """The failure classifications' part of the plan, or None without failure_modes."""
    fm = config.failure_modes
    if fm is None:
        return None
    try:
        taxonomy = taxonomy_of(fm)
    except TaxonomyError as e:
        raise ConfigError(str(e)) from None
    judge_metrics = {s.output_name for s in config.template_judge_specs()}
    return PlanFailureModes(fm, taxonomy, config.computation_specs(), judge_metrics, config.judge)


# The eval's runs read for the output tokens their judge answers took (newest first)
EARLIER_RUNS_READ = 5


def earlier_output_tokens(config: EvalConfig) -> dict[str, tuple[float, str]]:
    """metric -> (output tokens per judge answer, the run_id they come from), from the judge
    accounting of the eval's latest earlier runs that called that metric; {} when there are none
    (or the results cannot be read)."""
    try:
        results = results_for(config)
        runs = results.runs(config.name)[:EARLIER_RUNS_READ]
        found: dict[str, tuple[float, str]] = {}
        for run in runs:
            rows = results.run_tables(run["run_id"])["runs"]
            usage = json.loads(rows[0].get("judge_usage") or "{}") if rows else {}
            for metric, u in usage.items():
                answered = (u.get("calls") or 0) - (u.get("rate_limited") or 0) - (u.get("failures") or 0)
                if metric not in found and answered > 0 and u.get("output_tokens") is not None:
                    found[metric] = (u["output_tokens"] / answered, run["run_id"])
        return found
    except (ResultsError, OSError, ValueError, KeyError, duckdb.Error):
        return {}


def estimate(config: EvalConfig, source: str, totals: dict, counts: dict,
             earlier: dict[str, tuple[float, str]] | None = None) -> dict:
    """Tokens, cost and time from the counts. Prompt tokens: the prompts' characters
    over CHARS_PER_TOKEN (the judge client's own estimate); output tokens: the mean
    of the cached answers of the same metric when there are some, else the mean
    answer of the metric in the eval's latest earlier run (`earlier`), else
    judge.max_output_tokens (an upper bound)."""
    judge_config = config.judge
    earlier = earlier or {}
    # each entry's settings: a metric's own judge or a juror's, the template judges' stage's (its quota shared
    # with the jurors calling the same model: metrics.judge.asks.share_quotas), else the run's judge
    own = judge_settings_of(config)
    rows = []
    for metric, c in sorted(counts.items()):
        settings = own.get(metric, judge_config)
        price = judge_config.prices.get(settings.model)
        to_call = c["asked"] if c["upper_bound"] else c["to_call"]
        if c["cached"]:
            per_output, source_of_output = c["cached_output_tokens"] / c["cached"], "cached answers"
        elif metric in earlier:
            per_output, source_of_output = earlier[metric][0], f"run {earlier[metric][1]}"
        else:
            per_output, source_of_output = judge_config.max_output_tokens or 0, "max_output_tokens"
        prompt_tokens = None if c["upper_bound"] else c["prompt_chars"] // CHARS_PER_TOKEN
        output_tokens = round(per_output * to_call)
        cost = cost_batch = None
        if price and prompt_tokens is not None:
            tokens = {"prompt_tokens": prompt_tokens, "output_tokens": output_tokens}
            cost = judge_cost(tokens, price)
            cost_batch = judge_cost({**tokens, "batch_prompt_tokens": prompt_tokens,
                                     "batch_output_tokens": output_tokens}, price)
        rows.append({
            "metric": metric, "asked": c["asked"], "distinct": None if c["upper_bound"] else c["distinct"],
            "cached": None if c["upper_bound"] else c["cached"], "to_call": to_call,
            "upper_bound": bool(c["upper_bound"]), "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
            "output_tokens_from": source_of_output,
            "cost": cost, "cost_batch": cost_batch, "model": settings.model, "provider": settings.provider,
        })
    calls = sum(r["to_call"] for r in rows)
    providers: dict[str, int] = {}
    for r in rows:
        providers[r["provider"]] = providers.get(r["provider"], 0) + r["to_call"]
    tokens = sum((r["prompt_tokens"] or 0) + r["output_tokens"] for r in rows)
    # each settings (the run's judge, each metric's own judge or juror) calls at its own quota, all at once
    paces: dict[str, list] = {}
    for r in rows:
        settings = own.get(r["metric"], judge_config)
        pace = paces.setdefault(settings.digest(), [settings, 0, 0])
        pace[1] += r["to_call"]
        pace[2] += (r["prompt_tokens"] or 0) + r["output_tokens"]
    minutes = max((max(n / s.requests_per_minute, t / s.tokens_per_minute if s.tokens_per_minute else 0.0)
                   for s, n, t in paces.values()), default=0.0)
    known = [r for r in rows if r["cost"] is not None]
    unpriced = sorted({r["model"] for r in rows if not judge_config.prices.get(r["model"])}) if own else \
        ([] if judge_config.prices.get(judge_config.model) else [judge_config.model])
    return {
        "name": config.name, "source": source, **totals, "model": judge_config.model,
        "requests_per_minute": judge_config.requests_per_minute, "tokens_per_minute": judge_config.tokens_per_minute,
        "metrics": rows, "calls": calls, "calls_per_provider": providers, "tokens": tokens,
        "minutes_at_quota": minutes,
        "cost": sum(r["cost"] for r in known) if known else None,
        "cost_batch": sum(r["cost_batch"] for r in known) if known else None,
        "priced": not unpriced, "unpriced_models": unpriced,
    }


def judge_settings_of(config: EvalConfig) -> dict:
    """judge_usage entry -> JudgeSettings, for every template judge metric: a metric's own judge,
    a juror, or the run's judge, each with its share of a quota several of them draw on
    (metrics.judge.asks.share_quotas), as the run calls them."""
    specs = config.template_judge_specs()
    if not specs:
        return {}
    plans, settings = share_quotas(plan_judges(specs, config.judge), config.judge)
    return {j.label: j.settings for p in plans for j in p.judges(settings)}
