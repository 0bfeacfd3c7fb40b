"""ADK's per_turn_user_simulator_quality_v1 in the pipeline: whether the simulated user of each
conversation_scenario case kept to its scenario (metrics.agents.simulator's quality_* functions call
google-adk's own prompt and answer parsing here, on the workers: the run needs the `agent` extra).

    instances -> per case: a verifier request per later user turn, and one for the conversation's
                 end (the stop signal as the next user message), judge.sampling_count samples each,
                 keyed by the content hash of the prompt (metrics.judge.client.request_key)
              -> answered by the judge layer's one composite (transforms.judge.AnswerJudgeRequests:
                 judge.cache, checkpoints, shards within the job's quota, retries)
              -> joined back to their case: one metric_results row per case, per-turn scores in extra.

The verifier answers free text (ADK reads its `"is_valid": ...` with a regex), so the requests
are FREE_TEXT and the label is read here, as ADK reads it.
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam

from evalbeam.metrics.agents.inference import scenario_of
from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.judge.client import FREE_TEXT, JudgeRequest, request_key
from evalbeam.metrics.agents.simulator import (
    ScenarioError,
    majority,
    parse_scenario,
    quality_first,
    quality_prompts,
    quality_result,
    quality_score,
)
from evalbeam.metrics.judge.verdicts import cache_row
from evalbeam.transforms.judge import AnswerJudgeRequests, UsageFn
from evalbeam.metrics.rows.tables import RunKey, blank_metric_row, to_json_text
from evalbeam.transforms.score import ScoredInstance

NO_THRESHOLD = "per_turn_user_simulator_quality_v1 needs a threshold (as ADK's criteria do)"


@dataclasses.dataclass(frozen=True)
class QualityPlan:
    output_name: str
    stop_signal: str
    threshold: float | None


def plan_quality(specs) -> list[QualityPlan]:
    return [QualityPlan(s.output_name, s.judge_template().stop_signal, s.effective_threshold()) for s in specs]


def _not_evaluated(instance: Instance, plan: QualityPlan) -> str | None:
    """Why a case is not evaluated (ADK: the evaluator raises, the metric is NOT_EVALUATED), or None."""
    if "inference_error" in instance.fields:
        return instance.fields["inference_error"]
    if plan.threshold is None:
        return NO_THRESHOLD
    if scenario_of(instance.fields) is None:
        return "conversation_scenario is needed by this metric."
    if not instance.fields.get("invocations"):
        return "the case has no turns: the simulated conversation ended before its first turn"
    return None


def quality_asks(instance: Instance, plans: list[QualityPlan], settings, samples: int):
    """instance -> (request_key, (request, (instance_id, metric, unit))) per later turn, the stop turn
    (unit len(turns)) and sample; tagged UNASKED: (instance_id, (metric, error)) for a case not evaluated."""
    for plan in plans:
        error = _not_evaluated(instance, plan)
        if error is None:
            try:
                scenario = parse_scenario(scenario_of(instance.fields))
            except ScenarioError as e:
                error = str(e)
        if error is not None:
            yield beam.pvalue.TaggedOutput("unasked", (instance.instance_id, (plan.output_name, error)))
            continue
        try:
            prompts = quality_prompts(scenario, instance.fields["invocations"], plan.stop_signal)
        except Exception as e:  # noqa: BLE001 - a template error is the case's error, never the run's
            yield beam.pvalue.TaggedOutput("unasked", (instance.instance_id, (plan.output_name, str(e))))
            continue
        for unit, prompt in enumerate(prompts, start=1):
            for sample in range(samples):
                key = request_key(settings, prompt, "", sample)
                request = JudgeRequest(key, plan.output_name, prompt, "", FREE_TEXT, (),
                                       seed=sample if samples > 1 else None)
                yield key, (request, (instance.instance_id, plan.output_name, unit))


def quality_rows(element, plans: list[QualityPlan], run: RunKey, model: str, samples: int):
    """(instance_id, {instance, answer: [(unit, metric, sample response)], unasked}) -> ScoredInstance."""
    _, groups = element
    [instance] = list(groups["instance"])
    unasked = dict(groups["unasked"])
    answers: dict[tuple[str, int], list] = {}
    for metric, unit, response in groups["answer"]:
        answers.setdefault((metric, unit), []).append(response)
    rows = []
    for plan in plans:
        row = blank_metric_row(run, instance.instance_id, plan.output_name, model)
        if plan.output_name in unasked:
            rows.append({**row, "error": unasked[plan.output_name]})
            continue
        turns = instance.fields["invocations"]
        scenario = parse_scenario(scenario_of(instance.fields))
        first = quality_first(scenario, turns)
        per_unit, errors = [], []
        for unit in range(1, len(turns) + 1):
            got = answers.get((plan.output_name, unit), [])
            for r in got:
                row["prompt_tokens"] += r.prompt_tokens
                row["output_tokens"] += r.output_tokens
                row["attempts"] += r.attempts
                if r.error:
                    errors.append(r.error)
            # a sample the judge could not answer after its retries has no label (ADK: no score)
            per_unit.append(majority([None if r.error else quality_score(r.verdict) for r in got] or [None]))
        if errors:
            rows.append({**row, "error": f"{len(errors)} of the verifier's calls failed; first: {errors[0]}"})
            continue
        score, per_turn = quality_result(first, per_unit[:-1], per_unit[-1], plan.threshold)
        rows.append({**row, "score": score, "passed": score >= plan.threshold,
                     "extra": to_json_text({"per_turn": per_turn, "stop_turn": per_unit[-1]})})
    return ScoredInstance(instance, rows)


class SimulatorQuality(beam.PTransform):
    """instances -> (ScoredInstances with the quality rows, judge_cache rows, usage per metric)."""

    def __init__(self, run: RunKey, specs, context):
        super().__init__()
        self._run, self._plans, self._context = run, plan_quality(specs), context

    def expand(self, instances):
        settings = self._context.settings
        samples = settings.sampling_count
        asks = instances | "Asks" >> beam.FlatMap(quality_asks, self._plans, settings, samples).with_outputs(
            "unasked", main="asks")
        answered = asks.asks | "Verify" >> AnswerJudgeRequests(self._context)
        fanned = answered | "ToCases" >> beam.FlatMap(
            lambda a: [(link[0], (link[1], link[2], a[0])) for link in a[1]])
        scored = (
            {"instance": instances | "ById" >> beam.Map(lambda i: (i.instance_id, i)), "answer": fanned,
             "unasked": asks.unasked}
            | "Join" >> beam.CoGroupByKey()
            | "Rows" >> beam.Map(quality_rows, self._plans, self._run, settings.model, samples)
        )
        cache_rows = answered | "CacheRows" >> beam.FlatMap(
            lambda a, r, m: [cache_row(r, m, a[0])] if a[0].error is None else [], self._run, settings.model)
        usage = answered | "Usage" >> beam.CombineGlobally(UsageFn())
        return scored, cache_rows, usage
