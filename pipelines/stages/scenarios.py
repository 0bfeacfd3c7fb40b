"""The scenarios stage: conversation scenarios generated for an agent (transforms.scenarios) through
the one judge layer, or a set generated earlier reused by its digest (scenarios.pinned_from), written
as an ADK eval set (output.eval_set) and a scenarios table; the kept ones are the run's input, in place
of the read stage, as an ADK eval set's conversation_scenario cases are read.

What the generation needs from the launcher (the agent imported or its A2A card read, ADK's personas,
the seed conversations) is resolved here once, into plain data the workers get
(transforms.scenarios.GenerationPlan); each failure is a ConfigError in one line."""
from __future__ import annotations

import json
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from evalbeam.configs import ConfigError, EvalConfig
from evalbeam.configs.scenarios import ScenariosConfig
from evalbeam.metrics.agents.simulator import SimulatorUnavailable, require_adk
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.scenarios import (
    KEPT,
    TOKENS_PER_SCENARIO,
    AgentDescription,
    Grid,
    ScenarioConfigError,
    axis_values,
    describe_adk_agent,
    describe_agent_card,
    describe_given,
    resolve_personas,
    scenario_digest,
    seed_conversations,
    set_digest,
)
from evalbeam.pipelines.stages import Stage
from evalbeam.pipelines.stages.read import row_spec
from evalbeam.transforms.judge import ReadJudgeCache
from evalbeam.transforms.scenarios import (
    GenerateScenarios,
    GenerationPlan,
    WriteEvalSet,
    eval_case,
    record_data,
    scenario_records,
)
from evalbeam.transforms.records import SourceLines
from evalbeam.transforms.validate import ToInstances


def require_google_adk() -> None:
    """Scenarios are checked by ADK's own models and name ADK's personas: google-adk must import here."""
    try:
        require_adk("scenarios")
    except SimulatorUnavailable as e:
        raise ConfigError(str(e)) from None


def agent_description(scenarios: ScenariosConfig) -> AgentDescription:
    """The agent the scenarios are for, read where the pipeline is built: an ADK agent object, an A2A agent
    card, or the config's description. ConfigError in one line when it cannot be read."""
    if scenarios.description is not None:
        d = scenarios.description
        return describe_given(d.instruction, [t.model_dump(exclude_none=True) for t in d.tools], d.name)
    if scenarios.agent is not None:
        from evalbeam.metrics.agents.inference import load_target
        from evalbeam.metrics.custom import path_hint

        try:
            agent = load_target(scenarios.agent, "scenarios.agent")
            from google.adk.agents.base_agent import BaseAgent  # optional dependency: google-adk (the agent extra)

            if not isinstance(agent, BaseAgent):
                raise TypeError(f"{type(agent).__name__} is not an ADK agent (google.adk.agents.BaseAgent)")
            return describe_adk_agent(agent, scenarios.agent)
        except Exception as e:  # noqa: BLE001 - whatever stops the import is what the user must fix
            hint = path_hint(scenarios.agent.partition(":")[0], e)
            raise ConfigError(f"scenarios.agent: cannot load {scenarios.agent!r}: {type(e).__name__}: {e}{hint}") from None
    return describe_agent_card(_agent_card(scenarios.a2a), scenarios.a2a)


def _agent_card(url: str) -> dict[str, Any]:
    import httpx  # start-up time: only for scenarios.a2a (a2a-sdk's HTTP client)

    from evalbeam.metrics.agents.deployed import a2a_card

    base, path = a2a_card(url)
    card_url = f"{base}/{path}"
    try:
        response = httpx.get(card_url, timeout=30, follow_redirects=True)
        response.raise_for_status()
        card = response.json()
    except (httpx.HTTPError, ValueError) as e:
        raise ConfigError(f"scenarios.a2a: cannot read the agent card at {card_url} ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None
    if not isinstance(card, dict):
        raise ConfigError(f"scenarios.a2a: {card_url} is not an agent card (a JSON object)")
    return card


def grid_of(scenarios: ScenariosConfig) -> Grid:
    try:
        return Grid(axis_values([g if isinstance(g, str) else g.model_dump() for g in scenarios.goals], "goals"),
                    resolve_personas(scenarios.personas),
                    axis_values([d if isinstance(d, str) else d.model_dump() for d in scenarios.difficulties],
                                "difficulties"),
                    tuple(scenarios.languages) or (None,), scenarios.per_cell)
    except ScenarioConfigError as e:
        raise ConfigError(str(e)) from None


def examples_of(config: EvalConfig) -> tuple[str, ...]:
    """The recorded conversations of scenarios.seeds (an ADK eval set), as the generator is shown them."""
    path = config.scenarios.seeds
    if path is None:
        return ()
    try:
        with FileSystems.open(path, mime_type="application/octet-stream") as f:
            value = json.loads(f.read().decode("utf-8-sig"))
    except Exception as e:  # noqa: BLE001 - any failure to read it is said, naming the file
        raise ConfigError(f"scenarios.seeds: cannot read {path!r}{config.path_note('scenarios.seeds')}: "
                          f"{type(e).__name__}: {str(e)[:200]}") from None
    found = seed_conversations(value) if isinstance(value, dict) else []
    if not found:
        raise ConfigError(f"scenarios.seeds: {path!r} holds no recorded conversation (an ADK eval set whose cases "
                          "have turns: conversation[].user_content, final_response)")
    return tuple(found)


def generator_settings(config: EvalConfig) -> JudgeSettings:
    """judge: with scenarios.judge laid over it; a temperature of 1.0 and 500 output tokens a scenario asked
    unless scenarios.judge names them (generation wants variety; the seed pins it)."""
    partial = dict(config.scenarios.judge or {})
    partial.setdefault("temperature", 1.0)
    partial.setdefault("max_output_tokens", TOKENS_PER_SCENARIO * config.scenarios.per_cell)
    try:
        return config.judge.overridden(partial)
    except Exception as e:  # noqa: BLE001 - pydantic's ValidationError, naming the field
        raise ConfigError(f"scenarios.judge: {e}") from None


def eval_set_id(config: EvalConfig) -> str:
    return config.name


def generation_plan(config: EvalConfig) -> GenerationPlan:
    """Everything the generation needs, resolved here (ConfigError in one line on what cannot be)."""
    scenarios = config.scenarios
    require_google_adk()
    return GenerationPlan(grid_of(scenarios), agent_description(scenarios), examples_of(config),
                          generator_settings(config), scenarios.seed, scenarios.near_duplicate_threshold,
                          eval_set_id(config))


# --- a set pinned by digest -------------------------------------------------------------------------------


def _scenario_rows(location: str) -> list[dict[str, Any]]:
    """The kept rows of an earlier scenarios table: a Parquet folder or glob (an output folder: every run's),
    or bq://project.dataset.table."""
    if location.startswith("bq://"):
        from evalbeam.transforms.local_cloud import bigquery_client  # start-up time: Google Cloud clients only where used

        table = location.removeprefix("bq://")
        client = bigquery_client(table.split(".")[0])
        return [dict(r.items()) for r in client.query(f"SELECT * FROM `{table}` WHERE decision = '{KEPT}'").result()]
    from evalbeam.pipelines.preflight import parquet_glob
    from evalbeam.pipelines.results import match_files, read_rows

    paths = match_files(parquet_glob(location))
    if not paths and not any(c in location for c in "*?["):  # an output folder: its runs' scenarios tables
        paths = match_files(location.rstrip("/") + "/*/scenarios/*.parquet")
    return [r for r in read_rows(paths) if r.get("decision") == KEPT]


def pinned_set(scenarios: ScenariosConfig) -> tuple[str, list[dict[str, Any]]]:
    """(digest, kept rows) of the set scenarios.pinned_from names: the one of scenarios.digest, else the
    earliest run's. ConfigError when there is none (a run never generates in its place)."""
    by_run: dict[tuple, list[dict[str, Any]]] = {}
    for location in scenarios.pinned_from:
        try:
            rows = _scenario_rows(location)
        except Exception as e:  # noqa: BLE001 - any failure to read is said, naming the location
            raise ConfigError(f"scenarios.pinned_from: cannot read {location}: {type(e).__name__}: {e}") from None
        for r in rows:
            by_run.setdefault((str(r["run_date"]), r["run_id"]), []).append(r)
    sets = {key: set_digest(scenario_digest(json.loads(r["conversation_scenario"])) for r in rows)
            for key, rows in by_run.items()}
    chosen = [key for key in sorted(sets) if scenarios.digest in (None, sets[key])]
    if not chosen:
        what = f"scenario set of digest {scenarios.digest}" if scenarios.digest else "scenario set"
        found = f" (found: {', '.join(sorted(set(sets.values())))})" if sets else ""
        raise ConfigError(f"scenarios.pinned_from: no {what} in {', '.join(scenarios.pinned_from)}{found}; evalbeam "
                          "does not generate a new one in its place: remove pinned_from to generate")
    key = chosen[0]
    return sets[key], sorted(by_run[key], key=lambda r: r["eval_id"])


def pinned_outputs(row: dict[str, Any], run):
    """An earlier kept row -> (this run's scenarios row, (eval_id, case line, record data))."""
    scenario = json.loads(row["conversation_scenario"])
    columns = {k: row.get(k) for k in ("goal", "persona", "difficulty", "language")}
    out = {**row, **run.columns(), "cache_hit": True}
    return out, (row["eval_id"], eval_case(row["eval_id"], scenario), record_data(row["eval_set_id"], row["eval_id"],
                                                                                 scenario, columns))


class ScenariosStage(Stage):
    """PBegin -> records, unparseable, source_lines, instances, invalid, dead_letters (as the read stage
    makes them, of the kept scenarios), scenarios (rows), eval_set (its writing done), [cached],
    judge_cache/scenarios and usage/scenarios."""

    def expand(self, pbegin):
        context = self._context
        config = context.config
        scenarios = config.scenarios
        pipeline = pbegin.pipeline
        out: dict[str, Any] = {}
        if config.judge.cache:
            from evalbeam.pipelines.preflight import parquet_glob

            parquet = [parquet_glob(p) for p in config.judge.cache if not p.startswith("bq://")]
            out["cached"] = pipeline | "ReadJudgeCache" >> ReadJudgeCache(parquet, list(context.cache_plans))
        if scenarios.pinned:
            _, rows = pinned_set(scenarios)
            pinned = pipeline | "PinnedScenarios" >> beam.Create(rows) | "Reuse" >> beam.Map(pinned_outputs, context.run)
            rows_out = pinned | "Rows" >> beam.Map(lambda p: p[0])
            kept = pinned | "Kept" >> beam.Map(lambda p: p[1])
            set_id = rows[0]["eval_set_id"]
        else:
            plan = generation_plan(config)
            judge_context = context.judge_context(out)
            rows_out, kept, cache_rows, usage = pbegin | "Generate" >> GenerateScenarios(
                context.run, plan, judge_context)
            out.update({"judge_cache/scenarios": cache_rows, "usage/scenarios": usage})
            set_id = plan.eval_set_id
        written = kept | "WriteEvalSet" >> WriteEvalSet(config.output.eval_set, set_id, config.name)
        records = kept | "Records" >> beam.Map(scenario_records, config.output.eval_set)
        instances, invalid = records | "Validate" >> ToInstances(row_spec(config))
        unparseable = pipeline | "NoUnparseable" >> beam.Create([])
        out.update({"records": records, "unparseable": unparseable,
                    # each case is one line of the eval set file: the lines reconcile as a file input's do
                    "source_lines": records | "SourceLines" >> beam.Map(lambda r: SourceLines(r.origin, 1, 0)),
                    "instances": instances,
                    "invalid": invalid,
                    "dead_letters": (unparseable, invalid) | "AllDeadLetters" >> beam.Flatten(),
                    "scenarios": rows_out, "eval_set": written})
        return out
