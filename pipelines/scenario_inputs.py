"""What a scenarios: block needs resolved where the pipeline is built, before any call: the agent read
(imported, or its A2A card), ADK's personas, the seed conversations and the generator's settings, made
into plain data the workers get (transforms.scenarios.GenerationPlan); or, pinned, the earlier set found
by its digest. Each failure is a ConfigError in one line. Used by preflight, plan and the scenarios stage."""
from __future__ import annotations

import json
from typing import Any

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
from evalbeam.pipelines.results import match_files, read_rows
from evalbeam.transforms.scenarios import GenerationPlan


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

    from evalbeam.metrics.agents.a2a_card import a2a_card

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
    glob = any(c in location for c in "*?[") or location.endswith(".parquet")
    paths = match_files(location if glob else location.rstrip("/") + "/*.parquet")
    if not paths and not glob:  # an output folder: its runs' scenarios tables
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
