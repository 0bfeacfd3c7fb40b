"""configs/scenarios.py and its place in the config: what a scenarios: block may say, refused in one
line naming the field before anything runs (a count of 0, a grid of a million cells, an input beside
it, no eval set file); and, without google-adk, `evalbeam generate` refused in one line."""
from __future__ import annotations

import importlib.util

import pydantic
import pytest
import yaml

from evalbeam.configs import format_errors, validate_config
from tests.helpers import evalbeam

AGENT = {"description": {"instruction": "You answer questions about the weather.", "tools": ["get_weather"]}}


def _config(scenarios=None, **extra):
    return {"name": "gen", "scenarios": {**AGENT, "goals": ["ask for a forecast"], **(scenarios or {})},
            "output": {"parquet": "out", "eval_set": "out/gen.evalset.json"}, **extra}


def _error(data) -> str:
    with pytest.raises(pydantic.ValidationError) as caught:
        validate_config(data)
    return format_errors(caught.value)


def test_a_scenarios_config_needs_no_metrics_and_its_input_is_the_eval_set_sliced_by_the_grid():
    config = validate_config(_config({"languages": ["en", "fr"]}))
    assert config.metrics == [] and config.scenarios.per_cell == 5 and config.scenarios.personas == ["NOVICE", "EXPERT"]
    assert (config.input.uri, config.input.inferred_format()) == ("out/gen.evalset.json", "adk_eval_set")
    assert config.input.slice_columns == ["goal", "persona", "difficulty", "language"]
    assert config.generates_scenarios() and config.calls_a_model()
    # an agent run on them gets ADK's default user simulator, as over any eval set of scenarios
    run = validate_config({**_config(), "inference": {"function": "tests.simulation_app:scripted_agent"},
                           "metrics": ["tool_call_count_v1"]})
    assert run.simulates_users()


@pytest.mark.parametrize("scenarios, extra, message", [
    ({"per_cell": 0}, {}, "scenarios.per_cell: Input should be greater than or equal to 1"),
    ({"per_cell": 51}, {}, "scenarios.per_cell: Input should be less than or equal to 50"),
    ({"goals": [f"goal {i}" for i in range(1000)], "difficulties": [f"d{i}" for i in range(1000)]}, {},
     "the grid has 2,000,000 cells (1000 goals x 2 personas x 1000 difficulties x 1 languages), 10,000,000 scenarios "
     "at per_cell 5; at most 20,000 cells and 100,000 scenarios a run"),
    ({"goals": []}, {}, "scenarios.goals: give at least one goal"),
    ({"agent": "my_pkg.agent:root"}, {}, "give exactly one of agent (MODULE:ATTR), a2a (URL) and description"),
    ({"agent": "not a path"}, {}, "scenarios.agent: String should match pattern"),
    ({"personas": [{"description": "no id"}]}, {}, "a persona object needs an id"),
    ({"digest": "a" * 64}, {}, "scenarios.digest: give pinned_from"),
    ({}, {"input": {"uri": "x.jsonl"}}, "input: a config with scenarios: evaluates the scenarios it generates"),
])
def test_a_bad_scenarios_block_is_refused_in_one_line_naming_its_field(scenarios, extra, message):
    text = _error({**_config(scenarios), **extra})
    assert message in text and len(text.strip().splitlines()) == 1, text


def test_the_eval_set_file_is_asked_for_and_belongs_to_scenarios():
    data = _config()
    del data["output"]["eval_set"]
    assert "output.eval_set: scenarios: are written as an ADK eval set: give its file" in _error(data)
    text = _error({"name": "x", "input": {"uri": "a.jsonl"}, "metrics": ["exact_match"],
                   "output": {"parquet": "o", "eval_set": "s.evalset.json"}})
    assert "output.eval_set: the generated scenarios' file: it needs a scenarios: block" in text


def test_a_pinned_set_needs_no_agent_or_grid():
    config = validate_config({"name": "gen", "scenarios": {"pinned_from": "out/", "digest": "b" * 64},
                              "output": {"parquet": "out", "eval_set": "s.evalset.json"}})
    assert config.scenarios.pinned and not config.generates_scenarios() and config.scenarios.pinned_from == ["out/"]


@pytest.mark.skipif(importlib.util.find_spec("google.adk") is not None, reason="google-adk is installed here")
def test_generate_without_google_adk_is_refused_in_one_line_before_any_call(tmp_path):
    path = tmp_path / "gen.yaml"
    path.write_text(yaml.safe_dump(_config()))
    result = evalbeam("generate", path, check=False)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("evalbeam: scenarios: needs google-adk's user simulation") and "evalbeam[agent]" in line
    assert not (tmp_path / "out").exists()
