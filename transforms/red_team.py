"""Red teaming in the pipeline (metrics.red_team: the attacks and their checks).

    instances -> each case as it is (its twin) and one attacked run per attack and target
                 (ExpandAttacks; the attacks a side input: built in, a file, pinned, or generated
                 by the judge layer first, GenerateAttacks)
              -> inference as for any case (transforms.inference.Infer); attacks in a tool's
                 responses run through InferUnderAttack, which plants them while the agent runs
                 (metrics.agents.red_team); a response with nothing at the attacked path
                 dead-letters that attacked run, naming the tool, path and what it held
    scores    -> per attacked run: its attack_success row (the goal reached or not, and why), the
                 attack's columns on each of its rows, and per family, tool, path and slice the
                 attack success rate and utility beside the twins (AttackOutcomes)
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from evalbeam.metrics.agents.inference import infer_all, scenario_of
from evalbeam.metrics.agents.red_team import AttackingInferrer, function_agent
from evalbeam.metrics.judge.client import JudgeRequest, request_key
from evalbeam.metrics.judge.verdicts import cache_row
from evalbeam.metrics.red_team import (
    BUILTIN, GENERATION, GENERATION_FIELD, TOOL_RESPONSE, USER_TURN, AttackError, AttackSet, Target, attacked_id,
    attacks_from_rows, attacks_from_yaml, builtin_attacks, delivered, deterministic_success, generated_attacks,
    generation_prompt, generation_schema, tool_calls, twin_id, with_user_turn,
)
from evalbeam.metrics.rows.instance import Instance, case_id, run_number
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.metrics.statistics.red_team import AttackMoments, CaseOutcome, example_rank
from evalbeam.metrics.statistics.summary import OVERALL
from evalbeam.transforms.failure_modes import earlier_table_rows
from evalbeam.transforms.inference import run_copies
from evalbeam.transforms.judge import AnswerJudgeRequests, UsageFn
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.transforms.records import DeadLetter
from evalbeam.transforms.score import ScoredInstance

UNDELIVERED = "undelivered"
ATTACK_SUCCESS = "attack_success"  # the metric_results row of an attacked run's verdict


# ----------------------------------------------------------------------------------- the attacks

def targets_of(red_team) -> list[Target]:
    """Where the config plants attacks: each tool's each path, then the user's turn."""
    targets = [Target(TOOL_RESPONSE, t.name, p) for t in red_team.tools for p in t.json_paths]
    return targets + ([Target(USER_TURN)] if red_team.user_turn else [])


def attack_set_of(red_team) -> AttackSet | None:
    """The attacks a built-in name, a file or a pinned generated set names; None when the judge is to
    generate them in the pipeline. Raises AttackError."""
    attacks = red_team.attacks
    if attacks == BUILTIN:
        return builtin_attacks()
    if isinstance(attacks, str):
        try:
            with FileSystems.open(attacks, mime_type="application/octet-stream") as f:
                text = f.read().decode("utf-8")
        except (IOError, OSError, UnicodeDecodeError) as e:
            raise AttackError(f"red_team.attacks: cannot read {attacks}: {e}") from None
        return dataclasses.replace(attacks_from_yaml(text, f"red_team.attacks: {attacks}"), source=attacks)
    generate = attacks.generate
    if not generate.attacks_from:
        return None
    return pinned_attacks(generate.attacks_from, generate.digest)


def pinned_attacks(locations: list[str], digest: str | None) -> AttackSet:
    """The earliest generated attack set (by run date, then run_id) in earlier runs' attacks tables, or the
    one of `digest`. Raises AttackError when there is none: a run never generates again in its place."""
    found = []
    for location in locations:
        try:
            found += [r for r in earlier_table_rows(location) if r.get("origin") == "generated"]
        except Exception as e:  # noqa: BLE001 - any failure to read is said, naming the location
            raise AttackError(f"red_team.attacks.generate.attacks_from: cannot read {location}: {e}") from None
    if digest:
        found = [r for r in found if r.get("set_digest") == digest]
    if not found:
        what = f"generated attack set of digest {digest}" if digest else "generated attack set"
        raise AttackError(f"red_team.attacks.generate.attacks_from: no {what} in {', '.join(locations)} (evalbeam "
                          "does not generate a new one in its place: remove attacks_from to generate one)")
    first = min(found, key=lambda r: (str(r["run_date"]), r["run_id"]))
    rows = [r for r in found if (r["run_id"], r["set_digest"]) == (first["run_id"], first["set_digest"])]
    return dataclasses.replace(attacks_from_rows(rows, f"generated in run {first['source']}"),
                               source=first["source"])


def attack_rows(attack_set: AttackSet, targets: list[Target], run: RunKey) -> list[dict[str, Any]]:
    """The attacks table: one row per attack and target (an attacked run of every case)."""
    source = run.run_id if attack_set.origin == "generated" and attack_set.source == "" else attack_set.source
    return [{**run.columns(), "attack_id": p.id, "family": p.attack.family, "delivery": p.target.delivery,
             "tool": p.target.tool, "path": p.target.path, "template_digest": p.attack.template_digest,
             "template": p.attack.template, "goal": json.dumps(p.attack.goal_json(), sort_keys=True),
             "origin": p.attack.origin, "set_digest": attack_set.digest, "source": source}
            for p in attack_set.planned(targets)]


def generation_ask(description: str, settings, count: int):
    prompt = generation_prompt(description, count)
    schema_json = json.dumps(generation_schema(), sort_keys=True)
    key = request_key(settings, prompt, schema_json, 0)
    yield key, (JudgeRequest(key, GENERATION, prompt, schema_json, GENERATION_FIELD, ()), None)


def answered_attacks(answers: list) -> AttackSet:
    """The generation's answer -> the AttackSet (source "": this run). A generation that failed after the
    judge layer's retries fails the run, saying why: a red-team run without its attacks measures nothing."""
    if not answers or answers[0][0].error:
        error = answers[0][0].error if answers else "no answer"
        raise RuntimeError(f"red_team.attacks.generate: the judge could not write the attacks: {error}")
    return generated_attacks(answers[0][0].verdict, "")


class GenerateAttacks(beam.PTransform):
    """pipeline -> (the generated AttackSet, one element; judge_cache rows; usage): one request to the judge
    layer, cached by judge.cache and accounted as any judgment."""

    def __init__(self, description: str, count: int, context: JudgeContext, run: RunKey):
        super().__init__()
        self._description, self._count, self._context, self._run = description, count, context, run

    def expand(self, pipeline):
        settings = self._context.settings
        answered = (pipeline | "Description" >> beam.Create([self._description])
                    | "Ask" >> beam.FlatMap(generation_ask, settings, self._count)
                    | "AskJudge" >> AnswerJudgeRequests(self._context))
        attacks = (pipeline | "Once" >> beam.Create([None])
                   | "Attacks" >> beam.Map(lambda _, a: answered_attacks(a), beam.pvalue.AsList(answered)))
        cache_rows = answered | "CacheRows" >> beam.FlatMap(
            lambda a, r, m: [cache_row(r, m, a[0])] if a[0].error is None else [], self._run, settings.model)
        usage = answered | "Usage" >> beam.CombineGlobally(UsageFn())
        return attacks, cache_rows, usage


# ----------------------------------------------------------------------------------- attacked runs

def expand_case(instance: Instance, attack_set: AttackSet, targets: list[Target]):
    """A case -> itself (the twin) and an attacked run per attack and target. A scenario case is attacked
    in its user's turn only (its tools run under the user simulator, out of this path); a case with no user
    message to attack is dead-lettered for that attack."""
    yield instance
    scenario = scenario_of(instance.fields) is not None
    for planned in attack_set.planned(targets):
        if scenario and planned.target.delivery == TOOL_RESPONSE:
            continue
        attack = planned.for_case(instance.instance_id)
        fields = instance.fields
        if planned.target.delivery == USER_TURN:
            try:
                fields = with_user_turn(fields, attack["text"])
            except AttackError as e:
                yield beam.pvalue.TaggedOutput(UNDELIVERED, undelivered(instance, attack, f"red_team.user_turn: {e}"))
                continue
        yield dataclasses.replace(instance, instance_id=attacked_id(instance.instance_id, planned.id),
                                  fields=dict(fields), attack=attack)


def undelivered(instance: Instance, attack: dict[str, Any], reason: str) -> DeadLetter:
    where = "user_turn" if attack["delivery"] == USER_TURN else f"tool_response {attack['tool']} {attack['path']}"
    record = {"instance_id": instance.instance_id, "attack_id": attack["id"], "family": attack["family"],
              "delivery": attack["delivery"], "tool": attack["tool"], "path": attack["path"]}
    return DeadLetter(source=f"{instance.instance_id} (red_team attack {attack['id']})", reason=reason,
                      raw_record=json.dumps(record, sort_keys=True), field=f"red_team {where}",
                      origin=instance.source, line_count=0)


class ExpandAttacks(beam.PTransform):
    """instances, the AttackSet (a one-element PCollection) -> (twins and attacked runs, dead letters)."""

    def __init__(self, attack_set, targets: list[Target]):
        super().__init__()
        self._attack_set, self._targets = attack_set, targets

    def expand(self, instances):
        out = instances | "Expand" >> beam.FlatMap(expand_case, beam.pvalue.AsSingleton(self._attack_set),
                                                   self._targets).with_outputs(UNDELIVERED, main="cases")
        return out.cases, out[UNDELIVERED]


class AttackInferFn(beam.DoFn):
    """[instance] -> instances filled by an in-process agent whose attacked runs have the attack planted in
    their tool's responses; an attacked run whose response could not hold it -> a dead letter (UNDELIVERED)."""

    def __init__(self, kind: str, target: str, max_concurrency: int, timeout_seconds: float, tools: dict[str, str]):
        self._kind, self._target, self._tools = kind, target, tools
        self._max_concurrency, self._timeout = max_concurrency, timeout_seconds
        self._cases = Metrics.counter("evalbeam", "inference_cases")
        self._failures = Metrics.counter("evalbeam", "inference_failures")
        self._undelivered = Metrics.counter("evalbeam", "red_team_undelivered")

    def setup(self):
        if self._kind == "function":  # fail the worker at once, with the reason, when it cannot run
            function_agent(self._target)

    def process(self, batch):
        by_id = {i.instance_id: i for i in batch}
        items = [(i.instance_id, dict(i.fields)) for i in batch]
        plan = {id(fields): (by_id[key].attack, run_number(key)) for key, fields in items}
        made: list[AttackingInferrer] = []

        def make():
            made.append(AttackingInferrer(self._kind, self._target, self._max_concurrency, self._tools, plan))
            return made[-1]

        fields_of = {key: id(fields) for key, fields in items}
        for instance_id, fields in infer_all(make, items, self._max_concurrency, self._timeout):
            instance = by_id[instance_id]
            planting = made[0].plantings.get(fields_of[instance_id]) if made else None
            if planting is not None and planting.refused:
                self._undelivered.inc()
                yield beam.pvalue.TaggedOutput(UNDELIVERED, undelivered(instance, instance.attack, planting.refused))
                continue
            self._cases.inc()
            self._failures.inc("inference_error" in fields)
            yield dataclasses.replace(instance, fields=fields)


class InferUnderAttack(beam.PTransform):
    """Cases (twins and attacked runs) of an in-process function or ADK agent -> (inferred, dead letters):
    each run copied inference.num_runs times, batched, and run with its attack planted as it runs."""

    def __init__(self, inference, tools: dict[str, str]):
        super().__init__()
        self._inference, self._tools = inference, tools

    def expand(self, cases):
        inference = self._inference
        out = (cases
               | "Runs" >> beam.FlatMap(run_copies, inference.num_runs)
               | "Spread" >> beam.Reshuffle()
               | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=max(16, 4 * inference.max_concurrency))
               | "Infer" >> beam.ParDo(AttackInferFn(inference.kind, inference.target, inference.max_concurrency,
                                                     inference.timeout_seconds, self._tools)).with_outputs(
                   UNDELIVERED, main="inferred"))
        return out.inferred, out[UNDELIVERED]


def plan_counts(instance: Instance, tool_targets: int, user_turn: bool, attacks: int) -> dict[str, int]:
    """What a case adds to `evalbeam plan`: the case, its attacked runs (per run), and its user turns (each a
    request to a deployed agent), as expand_case would make them."""
    scenario = scenario_of(instance.fields) is not None
    reached = 0 if scenario else tool_targets
    if user_turn:
        try:
            with_user_turn(instance.fields, "")
            reached += 1
        except AttackError:
            pass
    turns = len(instance.fields.get("invocations") or []) or 1
    return {"cases": 1, "scenarios": int(scenario), "attacked": attacks * reached, "turns": turns,
            "attacked_turns": attacks * reached * turns}


def is_attacked(item) -> bool:
    instance = item.instance if isinstance(item, ScoredInstance) else item
    return instance.attack is not None


# ----------------------------------------------------------------------------------- outcomes

def attack_columns(attack: dict[str, Any] | None) -> dict[str, Any]:
    return {"attack_id": attack["id"] if attack else None, "attack_family": attack["family"] if attack else None}


def with_attack_columns(scored: ScoredInstance) -> ScoredInstance:
    columns = attack_columns(scored.instance.attack)
    return dataclasses.replace(scored, results=[{**r, **columns} for r in scored.results])


def _passed(parts: Iterable[ScoredInstance], metric: str | None) -> tuple[bool | None, str | None]:
    """A metric's verdict among an instance's parts: (passed, None), or (None, why there is none)."""
    if metric is None:
        return None, "no utility metric"
    for part in parts:
        for row in part.results:
            if row["metric"] == metric:
                if row.get("error") is not None:
                    return None, row["error"]
                return (None, "no threshold") if row.get("passed") is None else (bool(row["passed"]), None)
    return None, f"no {metric} row"


def success_row(run: RunKey, instance: Instance, parts: list[ScoredInstance]) -> dict[str, Any]:
    """An attacked run's attack_success row: score 1 when its attack reached its goal, 0 when not; an error
    when that cannot be told (the goal's metric has no verdict; the run failed before reaching it)."""
    attack, fields = instance.attack, instance.fields
    kind, value = next(iter(attack["goal"].items()))
    score, explanation, error = None, None, None
    if kind == "judge":
        passed, why = _passed(parts, value)
        if passed is None:
            error = f"the goal's metric {value} has no verdict: {why}"
        else:
            score, explanation = float(passed), f"{value} {'passed' if passed else 'did not pass'}"
    else:
        reached, explanation = deterministic_success(attack, fields)
        if reached or "inference_error" not in fields:
            score = float(reached)
        else:
            error, explanation = f"the attacked run failed before reaching the goal: {fields['inference_error']}", None
    return {**run.columns(), "instance_id": instance.instance_id, "metric": ATTACK_SUCCESS, "score": score,
            "passed": None, "explanation": explanation, "error": error,
            "extra": json.dumps({"goal": attack["goal"], "delivery": attack["delivery"], "tool": attack["tool"],
                                 "path": attack["path"], "delivered": delivered(attack, fields)}, sort_keys=True),
            **attack_columns(attack)}


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """What the attack summary needs of one run (attacked or twin): utility, goal verdicts, slices."""

    instance_id: str
    slices: dict
    utility: bool | None
    attack: dict | None = None
    succeeded: bool | None = None
    delivered: bool = False
    fields_tools: tuple = ()  # the tools the run called (a twin's, for tool goals)
    metric_passes: tuple = ()  # ((metric, passed), ...) (a twin's, for judge goals)


def attacked_outcomes(element, run: RunKey, utility: str | None):
    """(attacked instance id, its parts) -> its parts with the attack's columns, its attack_success part, and
    (twin id, RunOutcome) tagged "outcome"."""
    instance_id, parts = element
    parts = list(parts)
    instance = parts[0].instance
    row = success_row(run, instance, parts)
    for part in parts:
        yield with_attack_columns(part)
    yield ScoredInstance(instance, [row])
    passed, _ = _passed(parts, utility)
    yield beam.pvalue.TaggedOutput("outcome", (twin_id(instance_id), RunOutcome(
        instance_id, dict(instance.slices), passed, instance.attack,
        None if row["score"] is None else row["score"] == 1.0, delivered(instance.attack, instance.fields))))


def twin_outcome(element, utility: str | None):
    instance_id, parts = element
    parts = list(parts)
    instance = parts[0].instance
    passed, _ = _passed(parts, utility)
    tools = tuple(sorted({str(c.get("tool_name")) for c in tool_calls(instance.fields)}))
    passes = tuple((r["metric"], r.get("passed")) for p in parts for r in p.results if r.get("passed") is not None)
    return instance_id, RunOutcome(instance_id, dict(instance.slices), passed, fields_tools=tools, metric_passes=passes)


def summary_keys(element):
    """(twin id, {twin: [RunOutcome], attacked: [RunOutcome, ...]}) -> ((family, delivery, tool, path, slice),
    case id), CaseOutcome for each attacked run, "overall" and each of its slices."""
    twin_key, groups = element
    twins = list(groups["twin"])
    twin = twins[0] if twins else None
    for outcome in groups["attacked"]:
        attack = outcome.attack
        kind, value = next(iter(attack["goal"].items()))
        case = CaseOutcome()
        if outcome.succeeded is None:
            case.errors = 1
        else:
            case.attacked, case.succeeded = 1, int(outcome.succeeded)
        case.delivered = int(outcome.delivered)
        if twin is not None:
            if kind == "tool_called":
                case.twin_goal_known, case.twin_goal = 1, int(value in twin.fields_tools)
            elif kind == "judge":
                verdict = dict(twin.metric_passes).get(value)
                if verdict is not None:
                    case.twin_goal_known, case.twin_goal = 1, int(bool(verdict))
            if outcome.utility is not None and twin.utility is not None:
                case.paired, case.utility_attacked, case.utility_benign = 1, int(outcome.utility), int(twin.utility)
        dropped = twin is not None and twin.utility is True and outcome.utility is False
        case.examples = [(example_rank(outcome.instance_id, outcome.succeeded, dropped), outcome.instance_id,
                          twin_key if twin is not None else None)]
        group = (attack["family"], attack["delivery"], attack["tool"], attack["path"])
        the_case = case_id(twin_key)
        yield (group + (OVERALL,), the_case), case
        for column, value_ in outcome.slices.items():
            yield (group + (f"{column}={'(missing)' if value_ is None else value_}",), the_case), case


class CaseOutcomeFn(beam.CombineFn):
    def create_accumulator(self):
        return CaseOutcome()

    def add_input(self, accumulator, outcome):
        return accumulator.add(outcome)

    def merge_accumulators(self, accumulators):
        merged = CaseOutcome()
        for a in accumulators:
            merged.add(a)
        return merged

    def extract_output(self, accumulator):
        return accumulator


class AttackMomentsFn(beam.CombineFn):
    def create_accumulator(self):
        return AttackMoments()

    def add_input(self, accumulator, case):
        return accumulator.add(*case)

    def merge_accumulators(self, accumulators):
        merged = AttackMoments()
        for a in accumulators:
            merged.merge(a)
        return merged

    def extract_output(self, accumulator):
        return accumulator.statistics()


def summary_row(element, run: RunKey, utility: str | None) -> dict[str, Any]:
    (family, delivery, tool, path, slice_name), stats = element
    examples = stats.pop("examples")
    return {**run.columns(), "family": family, "delivery": delivery, "tool": tool, "path": path, "slice": slice_name,
            **stats, "utility_metric": utility, "examples": json.dumps(examples, sort_keys=True)}


class AttackOutcomes(beam.PTransform):
    """(attacked ScoredInstance parts, the twins' ScoredInstance parts) -> (the attacked parts with the attack's
    columns and their attack_success rows, attack_summary rows)."""

    def __init__(self, run: RunKey, utility: str | None):
        super().__init__()
        self._run, self._utility = run, utility

    def expand(self, inputs):
        attacked, benign = inputs
        run, utility = self._run, self._utility
        judged = (attacked
                  | "AttackedById" >> beam.Map(lambda s: (s.instance.instance_id, s))
                  | "AttackedParts" >> beam.GroupByKey()
                  | "Verdicts" >> beam.FlatMap(attacked_outcomes, run, utility).with_outputs("outcome", main="scored"))
        twins = (benign
                 | "TwinById" >> beam.Map(lambda s: (s.instance.instance_id, s))
                 | "TwinParts" >> beam.GroupByKey()
                 | "TwinOutcome" >> beam.Map(twin_outcome, utility))
        summary = ({"twin": twins, "attacked": judged.outcome}
                   | "Pair" >> beam.CoGroupByKey()
                   | "SummaryKeys" >> beam.FlatMap(summary_keys)
                   | "PerCase" >> beam.CombinePerKey(CaseOutcomeFn())
                   | "ByGroup" >> beam.Map(lambda kv: (kv[0][0], (kv[0][1], kv[1])))
                   | "Summarize" >> beam.CombinePerKey(AttackMomentsFn())
                   | "SummaryRows" >> beam.Map(summary_row, run, utility))
        return judged.scored, summary
