"""The cost plan (`evalbeam plan`, pipelines.plan) as people read it: the judge calls, tokens, time
and cost per metric, and the labels a corrected CI of a given width needs."""
from __future__ import annotations

from evalbeam.transforms.failure_modes import DISCOVERY  # a judge label; `plan` runs Beam anyway
from evalbeam.pipelines.reports.text import format_sample, format_table


def _money(value) -> str:
    return "-" if value is None else f"${value:,.4f}"


def format_plan(plan: dict) -> str:
    if "red_team" in plan:
        return format_red_team_plan(plan)
    lines = [f"plan for {plan['name']}: input {plan['source']}"
             + (f", input.since: last_run: the cases that ended in {plan['window']}" if plan.get("window") else ""),
             f"read {plan['read']:,} = {plan['instances']:,} valid + {plan['dead_lettered']:,} dead-lettered",
             f"judge {plan['model']}, quota {plan['requests_per_minute']:,g} requests/min"
             + (f", {plan['tokens_per_minute']:,g} tokens/min" if plan["tokens_per_minute"] else "")]
    if "scenarios_evaluation" in plan:  # a scenarios: config: its generation (instances: the scenarios asked)
        lines[1] = f"scenarios asked {plan['instances']:,}: one generation request per grid cell"
        if plan["scenarios_evaluation"]:
            lines.append("the evaluation of the generated scenarios (inference, metrics) is not estimated: its "
                         "prompts depend on the scenarios and the agent's answers")
    if plan.get("sample"):  # input.sample: what the counts below are over
        lines.insert(1, format_sample(plan["sample"]))
    uncounted = [f"failure classifications of {m} (a rubric metric: one per failed rubric, not known before "
                 "its rubrics are judged) are not counted" for m in plan.get("uncounted_failure_modes", [])]
    if not plan["metrics"]:
        return "\n".join(lines + ["no judge metric: nothing to call"] + uncounted)
    cells = []
    for r in plan["metrics"]:
        mark = "<=" if r["upper_bound"] else ""
        cells.append((r["metric"], f"{r['asked']:,}", "-" if r["distinct"] is None else f"{r['distinct']:,}",
                      "-" if r["cached"] is None else f"{r['cached']:,}", mark + f"{r['to_call']:,}",
                      "-" if r["prompt_tokens"] is None else f"{r['prompt_tokens']:,}",
                      ("<=" if r["output_tokens_from"] == "max_output_tokens" else "") + f"{r['output_tokens']:,}",
                      _money(r["cost"]), _money(r["cost_batch"])))
    lines += ["", format_table(("metric", "asked", "distinct", "cached", "to call", "prompt tok", "output tok", "online",
                                "batch"), cells, right=tuple(range(1, 9)))]
    minutes = plan["minutes_at_quota"]
    per_provider = plan.get("calls_per_provider") or {}
    lines += ["", f"{plan['calls']:,} judge calls, about {plan['tokens']:,} tokens; "
                  f"{minutes:,.1f} min at the quota ({minutes / 60:,.2f} h)"
              + (f"; calls per provider: {', '.join(f'{p} {n:,}' for p, n in sorted(per_provider.items()))}"
                 if len(per_provider) > 1 else ""),
              f"estimated cost: online {_money(plan['cost'])}, batch {_money(plan['cost_batch'])}"
              + ("" if plan["priced"] else
                 f" (no judge.prices for {', '.join(plan.get('unpriced_models') or [plan['model']])})")]
    discovers = any(r["metric"] == DISCOVERY for r in plan["metrics"])
    if discovers:
        lines.append("failure_modes: discover: the taxonomy is not proposed yet, so each failure's classification "
                     "(<=) is counted without its tokens or the cache (a judge metric's: one per instance; a "
                     "rubric metric's, one per failed rubric, not counted)")
    elif any(r["metric"].endswith(":failure_modes") and r["upper_bound"] for r in plan["metrics"]):
        lines.append("failure classifications of judge metrics (<=) are counted one per instance and metric: "
                     "which instances fail is the judge's to say; a rubric metric's (one per failed rubric) "
                     "are not counted")
    lines += uncounted
    if any(r["metric"].endswith(":validation") for r in plan["metrics"]):
        lines.append("rubric validations (<=) are counted one per instance, metric and sample: their prompts and "
                     "cache keys depend on the rubrics generated, so their tokens and cost are not estimated")
    learnt = sorted({r["output_tokens_from"] for r in plan["metrics"] if r["output_tokens_from"] != "max_output_tokens"})
    if learnt:
        lines.append(f"output tokens learnt from real answers: {', '.join(learnt)} (the mean answer of each metric)")
    if any(r["output_tokens_from"] == "max_output_tokens" for r in plan["metrics"]):
        lines.append("output tokens marked <= (and so the tokens, the time and the costs) are UPPER BOUNDS, not "
                     "estimates: judge.max_output_tokens per call (neither the judge cache nor an earlier run of "
                     "this eval has answers of the metric to learn from); a real run uses far fewer")
    return "\n".join(lines)


def format_labels(labels: dict) -> str:
    """The labels part of a plan (--labels-for-width)."""
    head = (f"labels for a 95% CI at most {labels['width']:g} wide, over the {labels['instances']:,} instances, "
            f"from pilot run {labels['pilot']} (its labels' variances; the judge scores every instance):")
    if labels["unlabelled_in_pilot"]:
        return head + "\n  the pilot run has no calibration rows: it had no input.labels"
    lines = []
    for m in labels["metrics"]:
        lines.append((m["metric"], str(m["pilot_labelled"]),
                      "-" if m["labels_needed"] is None else f"{m['labels_needed']:,}",
                      "-" if m["lambda_at_needed"] is None else f"{m['lambda_at_needed']:.2f}",
                      "-" if m["labels_only_needed"] is None else f"{m['labels_only_needed']:,}"))
    notes = [f"  {m['metric']}: {m['note']}" for m in labels["metrics"] if m["note"]]
    return "\n".join([head, format_table(("metric", "pilot labels", "labels needed (corrected)", "lambda",
                                          "labels needed (labels alone)"), lines), *notes,
                      "the labelled instances must be a uniform random sample of the run (docs/judges.md, "
                      "Corrected estimates)"])


def format_red_team_plan(plan: dict) -> str:
    """A red-team run's plan: the runs of the agent (twins and attacked), its requests at the quota, the judge
    calls (upper bounds where the prompts hold what the agent answers)."""
    r = plan["red_team"]
    targets = ", ".join("the user's turn" if t["delivery"] == "user_turn" else f"{t['tool']} {t['path']}"
                        for t in r["targets"])
    lines = [f"plan for {plan['name']}: input {plan['source']}",
             f"read {plan['read']:,} = {plan['instances']:,} valid + {plan['dead_lettered']:,} dead-lettered",
             f"red_team: {'<=' if r['attacks_generated'] else ''}{r['attacks']:,} attack(s) "
             f"({'to be generated by the judge' if r['attacks_generated'] else r['attacks_source']}) at "
             f"{len(r['targets'])} target(s): {targets}",
             f"inference.{r['kind']}: {r['cases']:,} case(s) x {r['num_runs']} run(s): {r['twins']:,} twin run(s) + "
             f"{r['attacked_runs']:,} attacked run(s) = {r['agent_runs']:,} agent run(s) "
             f"({r['agent_runs'] / r['twins'] if r['twins'] else 0:,.1f}x an unattacked run)"]
    if r["scenario_cases"]:
        lines.append(f"{r['scenario_cases']:,} conversation_scenario case(s) are attacked in the user's turn only")
    if r["agent_requests"] is not None:
        lines.append(f"{r['agent_requests']:,} request(s) to the deployed agent (one per user turn)"
                     + (f": {r['minutes_at_quota']:,.1f} min at {r['requests_per_minute']:,g} requests/min"
                        if r["minutes_at_quota"] is not None else " (no requests_per_minute: no quota to time)"))
    calls = [f"{r['generation_calls']} to generate the attacks"] if r["generation_calls"] else []
    if r["model_calls"]:
        calls.append(f"{r['model_calls']:,} for inference.model (judge.cache may answer some)")
    calls += [f"<={j['at_most']:,} for {j['metric']}" for j in r["judge_metrics"]]
    lines.append(f"judge calls: at most {r['judge_calls_at_most']:,}" + (f" ({'; '.join(calls)})" if calls else "")
                 + ("; the judge metrics' prompts hold what the agent answers, so their tokens and the cache are not "
                    "counted" if r["judge_metrics"] else ""))
    if r["simulated_conversations_uncounted"]:
        lines.append("the user simulator's calls are not counted: a conversation's length is the simulator's to say")
    return "\n".join(lines)
