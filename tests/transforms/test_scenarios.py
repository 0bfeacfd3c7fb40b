"""transforms/scenarios.py: each cell's decisions from the generator's answer (ADK's check handed in: the
real one runs in tests/e2e/test_generate.py, in .agent/), and the eval set merged from parts, in eval_id
order, the same bytes whatever the order and bundles the kept cases come in, in a real pipeline."""
from __future__ import annotations

import datetime as dt
import json
import random

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline

from evalbeam.metrics.judge.client import JudgeResponse
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.rows.tables import RunKey, TABLES
from evalbeam.metrics.scenarios import Grid, Persona, axis_values, describe_given, scenario_digest, set_digest
from evalbeam.transforms import scenarios as ts

PERSONA = Persona("own", "own: a user", {"id": "own", "description": "a user", "behaviors": []})


def _plan(per_cell: int = 4) -> ts.GenerationPlan:
    grid = Grid(axis_values(["weather"], "goals"), (PERSONA,), axis_values(["typical"], "difficulties"), (None,), per_cell)
    return ts.GenerationPlan(grid, describe_given("help", [{"name": "get_weather"}]), (), JudgeSettings(), 0, 0.7, "set")


def _item(words: str, tools=()) -> dict:
    return {"starting_prompt": f"hello {words}", "conversation_plan": f"You want {words} " * 3, "tools": list(tools)}


def test_a_cells_answer_is_one_decision_per_scenario_asked():
    plan = _plan(5)
    cell = plan.grid.cell(0)
    items = [_item("rain in oslo tomorrow morning please"), _item("rain in oslo tomorrow morning please"),
             _item("snow in rome", ["cancel"]), _item("fog in lima at noon today"), "junk"]
    refused = {scenario_digest({"starting_prompt": items[3]["starting_prompt"],
                                "conversation_plan": items[3]["conversation_plan"], "user_persona": PERSONA.value})}
    response = JudgeResponse("k", "scenarios:generation", json.dumps(items))
    outcomes = ts.cell_outcomes(plan, cell, response, validate=lambda eval_id, s: (
        "ADK's EvalCase refuses it: no" if scenario_digest(s) in refused else None))
    assert [(o.position, o.decision, o.field) for o in outcomes] == [
        (0, "kept", None), (1, "near_duplicate", None), (2, "dead_letter", "tools"),
        (3, "dead_letter", "conversation_scenario"), (4, "dead_letter", "scenario")]
    assert outcomes[1].duplicate_of == outcomes[0].eval_id and outcomes[0].eval_id.startswith("weather.own.typical.")
    assert outcomes[3].reason == "ADK's EvalCase refuses it: no"

    fewer = ts.cell_outcomes(plan, cell, JudgeResponse("k", "m", json.dumps(items[:1])), validate=lambda *_: None)
    assert [o.decision for o in fewer] == ["kept"] + ["dead_letter"] * 4
    assert fewer[1].reason == "not generated: the generator returned 1 of the 5 scenarios asked"
    failed = ts.cell_outcomes(plan, cell, JudgeResponse("k", "m", error="judge failed after 6 attempts; last: 503"))
    assert [(o.decision, o.reason) for o in failed] == [("dead_letter", "generation failed: judge failed after 6 "
                                                                        "attempts; last: 503")] * 5


def test_every_scenarios_row_has_the_tables_columns():
    plan = _plan(1)
    cell = plan.grid.cell(0)
    response = JudgeResponse("k", "m", json.dumps([_item("a b c d")]))
    [outcome] = ts.cell_outcomes(plan, cell, response, validate=lambda *_: None)
    row = ts.scenario_row(RunKey("r", dt.date(2026, 1, 1)), plan, cell, outcome, response, "k")
    assert set(row) == {c.name for c in TABLES["scenarios"]}
    assert json.loads(row["conversation_scenario"])["user_persona"] == PERSONA.value


def _cases(n: int, seed: int) -> list:
    cases = []
    for i in range(n):
        scenario = {"starting_prompt": f"hi {i}", "conversation_plan": f"plan {i} \u00e9\u4e2d", "user_persona": "NOVICE"}
        eval_id = f"g.novice.typical.{scenario_digest(scenario)[:10]}"
        cases.append((eval_id, ts.eval_case(eval_id, scenario), {}))
    random.Random(seed).shuffle(cases)
    return cases


def _write(tmp_path, cases, name: str, bundles: int) -> bytes:
    path = tmp_path / f"{name}.evalset.json"
    with TestPipeline() as p:
        parts = [p | f"Part{b}" >> beam.Create(cases[b::bundles]) for b in range(bundles)]
        kept = tuple(parts) | beam.Flatten()
        done = kept | ts.WriteEvalSet(str(path), "set", "the set")
        done | beam.Map(lambda d, n: None if d["cases"] == n else 1 / 0, len(cases))
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(f".{name}.")]  # the parts are gone
    return path.read_bytes()


def test_the_eval_set_is_the_kept_cases_in_eval_id_order_the_same_bytes_however_they_come(tmp_path, monkeypatch):
    cases = _cases(300, 1)
    monkeypatch.setattr(ts, "MERGE_FAN_IN", 3)  # more parts than are read at once: merged in groups first
    monkeypatch.setattr(ts, "PART_LINES", 16)  # parts of a bundle's first cases, before its end
    first = _write(tmp_path, cases, "a", 7)
    second = _write(tmp_path, _cases(300, 2), "b", 2)
    assert first == second
    data = json.loads(first)
    assert [c["eval_id"] for c in data["eval_cases"]] == sorted(c[0] for c in cases)
    digest = set_digest(scenario_digest(c["conversation_scenario"]) for c in data["eval_cases"])
    assert data["description"].endswith(f"300 scenario(s), set digest {digest}")
    assert first.count(b"\n") == 5 + 300 + 3  # the header, a case a line, the end


def test_an_empty_set_is_an_eval_set_with_no_case(tmp_path):
    data = json.loads(_write(tmp_path, [], "empty", 1))
    assert data["eval_cases"] == [] and data["eval_set_id"] == "set"
