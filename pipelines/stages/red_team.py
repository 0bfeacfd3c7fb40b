"""Red teaming's stages (transforms.red_team), around the run the agent already gets:

    RedTeamInferenceStage   in place of the inference stage: each case and its attacked runs inferred
                            (attacks planted in the user's turn before inference, in tools' responses
                            while it runs)
    RedTeamSplitStage       after scoring and judging: the attacked runs set apart, so that the summary,
                            failure modes, calibration, the comparison and ADK's history see the twins only
    RedTeamResultsStage     last: the attacked runs' verdicts and the attack summary, and every run back
                            in the tables that are written
"""
from __future__ import annotations

import apache_beam as beam

from evalbeam.configs import ConfigError, EvalConfig
from evalbeam.metrics.agents.inference import load_target, scenario_of
from evalbeam.metrics.agents.red_team import agent_tools, describe_agent, describe_function, function_agent
from evalbeam.metrics.red_team import AttackError, check_goals
from evalbeam.pipelines.stages import Stage
from evalbeam.pipelines.stages.inference import InferenceStage
from evalbeam.pipelines.stages.score import adk_verdicts
from evalbeam.pipelines.stages.summary import thresholds
from evalbeam.transforms.red_team import (
    AttackOutcomes, ExpandAttacks, GenerateAttacks, InferUnderAttack, attack_rows, attack_set_of, is_attacked,
    targets_of,
)
from evalbeam.transforms.score import with_thresholds

ATTACKED = "attacked"  # the named PCollections of the attacked runs' scores: attacked/<part>


def utility_metric(config: EvalConfig) -> str | None:
    """The metric whose pass is a case's utility: red_team.utility, else ADK's case verdict where there is
    one, else the config's first metric with a threshold; None when no metric passes or fails."""
    found = thresholds(config)
    if config.red_team.utility:
        return config.red_team.utility
    if adk_verdicts(config):
        return "adk_case_status"
    return next((s.output_name for s in config.metrics if found.get(s.output_name) is not None), None)


def tool_functions(config: EvalConfig) -> dict[str, str]:
    """inference.function's tools: name -> 'package.module:name' (none for an ADK agent's own)."""
    return {t.name: t.function for t in config.red_team.tools if t.function}


def description_of(config: EvalConfig) -> str:
    """What the judge generating attacks is told of the agent: red_team.attacks.generate.description, else
    read from the in-process agent."""
    generate = config.red_team.attacks.generate
    if generate.description:
        return generate.description
    inference = config.inference
    if inference.kind == "agent":
        return describe_agent(load_target(inference.target, "inference.agent"))
    if inference.kind == "function":
        return describe_function(inference.target, tool_functions(config))
    raise ConfigError(f"red_team.attacks.generate.description: evalbeam cannot read a description of "
                      f"inference.{inference.kind}'s agent: give one (what it does, which tools it has)")


def check_red_team(config: EvalConfig) -> None:
    """Before any work: the attacks readable and well formed, their goals metrics and tools that exist, the
    attacked tools the agent's, a function agent able to take its tools. Raises ConfigError in one line."""
    red_team = config.red_team
    if red_team is None:
        return
    found = thresholds(config)
    metrics = {name: threshold is not None for name, threshold in found.items()}
    if red_team.utility is not None and not metrics.get(red_team.utility):
        raise ConfigError(f"red_team.utility: {red_team.utility!r} is not a metric of this config with a threshold "
                          f"(those with one: {', '.join(n for n, t in metrics.items() if t) or 'none'})")
    inference = config.inference
    tools = None
    try:
        if inference.kind == "agent":
            agent = load_target(inference.target, "inference.agent")
            names, toolsets = agent_tools(agent)
            for i, tool in enumerate(red_team.tools):
                if tool.name not in names and not toolsets:
                    raise ConfigError(f"red_team.tools.{i}.name: the agent has no tool {tool.name!r} (its tools: "
                                      f"{', '.join(sorted(names)) or 'none'})")
            tools = None if toolsets else names
        elif inference.kind == "function" and red_team.tools:
            function_agent(inference.target)
            for i, tool in enumerate(red_team.tools):
                load_target(tool.function, f"red_team.tools.{i}.function")
            # the function may call tools of its own besides those evalbeam gives it: a tool goal is not checked
        attack_set = attack_set_of(red_team)
        if attack_set is not None:
            check_goals(attack_set, metrics, tools)
        else:
            description_of(config)
    except ConfigError:
        raise
    except AttackError as e:
        raise ConfigError(str(e)) from None
    except Exception as e:  # noqa: BLE001 - whatever stops the import is what the user must fix
        raise ConfigError(f"red_team: {type(e).__name__}: {e}") from None


class RedTeamInferenceStage(Stage):
    """instances -> the twins and attacked runs inferred (instances), the attacks table's rows (attacks), the
    attacked runs that could not be attacked (red_team/undelivered), and what inference adds (judge_cache/...,
    usage/...; judge_cache/red_team and usage/red_team for a generated set)."""

    def expand(self, named):
        context = self._context
        config, run = context.config, context.run
        red_team, inference = config.red_team, config.inference
        pipeline = named["instances"].pipeline
        targets = targets_of(red_team)
        try:
            attack_set = attack_set_of(red_team)
        except AttackError as e:
            raise ConfigError(str(e)) from None
        out = {}
        if attack_set is None:
            generate = red_team.attacks.generate
            attack_set_pc, cache_rows, usage = pipeline | "GenerateAttacks" >> GenerateAttacks(
                description_of(config), generate.count, context.judge_context(named), run)
            out.update({"judge_cache/red_team": cache_rows, "usage/red_team": usage})
        else:
            attack_set_pc = pipeline | "AttackSet" >> beam.Create([attack_set])
        out["attacks"] = attack_set_pc | "AttackRows" >> beam.FlatMap(attack_rows, targets, run)
        cases, no_message = named["instances"] | "ExpandAttacks" >> ExpandAttacks(attack_set_pc, targets)
        undelivered = [no_message]
        if red_team.tools:  # tools' responses are planted in while the agent runs: in-process, batch by batch
            split = cases | "Scenarios" >> beam.Partition(lambda i, _: int(scenario_of(i.fields) is not None), 2)
            attacked, not_planted = split[0] | "InferUnderAttack" >> InferUnderAttack(inference, tool_functions(config))
            undelivered.append(not_planted)
            inferred = {**named, "instances": split[1]} | "Infer" >> InferenceStage(context)
            inferred["instances"] = (attacked, inferred["instances"]) | "AllInferred" >> beam.Flatten()
        else:
            inferred = {**named, "instances": cases} | "Infer" >> InferenceStage(context)
        out.update(inferred)
        out["red_team/undelivered"] = tuple(undelivered) | "Undelivered" >> beam.Flatten()
        return out


class RedTeamSplitStage(Stage):
    """scores/*, computed, instances -> the twins' (under the same names) and the attacked runs'
    (attacked/<part>, attacked_instances)."""

    def expand(self, named):
        out = {}
        for name, pcoll in named.items():
            if name.startswith("scores/") or name in ("computed", "instances"):
                label = name.replace("/", "_")
                split = pcoll | f"Split_{label}" >> beam.Partition(lambda item, _: int(is_attacked(item)), 2)
                out[name] = split[0]
                out[f"{ATTACKED}/{name}"] = split[1]
        return out


class RedTeamResultsStage(Stage):
    """attacked/*, scored, instances, dead_letters, red_team/undelivered -> scored and instances with the
    attacked runs back (their attack columns, their attack_success rows), dead letters with the attacked
    runs that could not be attacked, attack_summary."""

    def expand(self, named):
        context = self._context
        config, run = context.config, context.run
        attacked_scores = [p for n, p in named.items() if n.startswith(f"{ATTACKED}/scores/")]
        attacked = tuple(attacked_scores) | "AttackedScores" >> beam.Flatten() if len(attacked_scores) > 1 \
            else attacked_scores[0]
        attacked = attacked | "AttackedThresholds" >> beam.Map(with_thresholds, thresholds(config))
        scored, summary = (attacked, named["scored"]) | "AttackOutcomes" >> AttackOutcomes(run, utility_metric(config))
        return {
            "scored": (named["scored"], scored) | "EveryScore" >> beam.Flatten(),
            "instances": (named["instances"], named[f"{ATTACKED}/instances"]) | "EveryInstance" >> beam.Flatten(),
            "dead_letters": ((named["dead_letters"], named["red_team/undelivered"])
                             | "EveryDeadLetter" >> beam.Flatten()),
            "attack_summary": summary,
        }

