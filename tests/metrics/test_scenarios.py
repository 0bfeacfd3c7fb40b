"""metrics/scenarios.py: the grid, the generator's prompt and answer, each item's checks, the MinHash
near-duplicates (against the exact Jaccard similarity of the shingles) and the set digest. Pure
Python: no google-adk needed (ADK's own check is handed in; it runs in tests/e2e/test_generate.py)."""
from __future__ import annotations

import itertools
import json
import random

import pytest

from evalbeam.metrics.scenarios import (
    Axis,
    Grid,
    Persona,
    ScenarioConfigError,
    axis_values,
    check_item,
    describe_agent_card,
    describe_given,
    generation_prompt,
    generation_schema,
    near_duplicates,
    parse_generation,
    seed_conversations,
    set_digest,
    shingles,
)

NOVICE = Persona("NOVICE", "NOVICE: new to this", "NOVICE")


def _grid(languages=(None,)) -> Grid:
    goals = axis_values(["Book a flight", {"id": "refund", "description": "Get a refund"}], "goals")
    personas = (NOVICE, Persona("own", "own: a persona of the user's", {"id": "own", "description": "d", "behaviors": []}))
    return Grid(goals, personas, axis_values(["easy", "hard", "adversarial"], "difficulties"), languages, 3)


def test_a_cell_is_computed_from_its_number_in_the_grids_order():
    for languages in ((None,), ("en", "fr")):
        grid = _grid(languages)
        expected = list(itertools.product(grid.goals, grid.personas, grid.difficulties, grid.languages))
        assert grid.size == len(expected) == 2 * 2 * 3 * len(languages)
        for n, (goal, persona, difficulty, language) in enumerate(expected):
            cell = grid.cell(n)
            assert (cell.number, cell.goal, cell.persona, cell.difficulty, cell.language) == \
                (n, goal, persona, difficulty, language)
        slugs = [c.slug() for c in grid.cells()]
        assert len(set(slugs)) == len(slugs)  # every cell its own part of the eval ids
    assert _grid().cell(0).slug() == "book-a-flight.novice.easy"


def test_ids_keep_the_words_of_any_script():
    assert [a.id for a in axis_values(["Réserver un vol", "天気を聞く", "Ask: the_weather!"], "goals")] == \
        ["réserver-un-vol", "天気を聞く", "ask-the-weather"]


def test_goals_of_one_id_are_refused_naming_both():
    with pytest.raises(ScenarioConfigError, match=r"entries 0 and 2 have the same id 'book-a-flight'"):
        axis_values(["Book a flight", "Cancel", "book a FLIGHT!"], "goals")


def test_the_prompt_says_the_cell_the_count_and_the_agent_in_evalbeams_words():
    agent = describe_given("You book flights.", [{"name": "search_flights", "description": "find flights",
                                                  "parameters": {"type": "object"}}], "travel")
    cell = _grid(("pt-BR",)).cell(0)
    prompt = generation_prompt(agent, cell, 3, ["user: hi\nagent: hello"])
    for text in ("You book flights.", "search_flights: find flights", "The user's goal: Book a flight",
                 "NOVICE: new to this", "Difficulty: easy", "the user writes in pt-BR", "Write 3 scenarios",
                 "Conversation 1:\nuser: hi", 'a list of exactly 3 objects'):
        assert text in prompt
    schema = generation_schema(3)
    assert schema["properties"]["scenarios"]["maxItems"] == 3
    assert agent.tools == ("search_flights",)


def test_an_agent_card_gives_its_skills_as_the_tools_a_scenario_may_name():
    card = {"name": "Weather", "description": "Forecasts", "skills": [
        {"id": "forecast", "name": "Forecast", "description": "a city's forecast", "examples": ["rain in Oslo?"]}]}
    agent = describe_agent_card(card, "http://a")
    assert agent.tools == ("forecast", "Forecast") and "rain in Oslo?" in agent.text and agent.source == "a2a"


@pytest.mark.parametrize("text, reason", [
    ("not json", "is not JSON"), ('{"scenarios": []}', 'has no "scenarios" list'), ('[1, 2]', 'has no "scenarios"'),
    ('{"other": [1]}', 'has no "scenarios" list')])
def test_an_answer_that_is_no_list_of_scenarios_is_malformed(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_generation(text)


def test_an_answer_is_kept_as_its_items_json_each_checked_later():
    items = [{"starting_prompt": "hi", "conversation_plan": "plan", "tools": []}, "junk"]
    assert json.loads(parse_generation(json.dumps({"scenarios": items}))) == items


@pytest.mark.parametrize("item, reason, field", [
    ("junk", "the generator's item is not an object", "scenario"),
    ({"starting_prompt": " ", "conversation_plan": "p", "tools": []}, "starting_prompt is empty", "starting_prompt"),
    ({"starting_prompt": "hi", "conversation_plan": "", "tools": []}, "conversation_plan is empty", "conversation_plan"),
    ({"starting_prompt": "hi", "tools": []}, "conversation_plan is missing", "conversation_plan"),
    ({"starting_prompt": "hi", "conversation_plan": "p", "tools": ["search", "cancel_order"]},
     "names tool(s) the agent does not have: cancel_order (its tools: search)", "tools"),
])
def test_an_item_that_is_empty_or_names_a_tool_the_agent_lacks_says_why(item, reason, field):
    checked = check_item(item, NOVICE, ("search",))
    assert checked.reason.startswith(reason) and checked.field == field


def test_an_item_that_passes_is_a_scenario_with_the_cells_persona():
    item = {"starting_prompt": "hi", "conversation_plan": "You want a seat.", "tools": ["search"]}
    kept = check_item(item, NOVICE, ("search",))
    assert kept.reason is None and kept.tools == ("search",)
    assert kept.scenario == {"starting_prompt": "hi", "conversation_plan": "You want a seat.", "user_persona": "NOVICE"}


def _jaccard(a: str, b: str) -> float:
    x, y = shingles(a), shingles(b)
    return len(x & y) / len(x | y)


def test_near_duplicates_agree_with_the_exact_jaccard_of_their_shingles_away_from_the_threshold():
    """On 300 generated pairs (a text and an edit of it: a few words changed, or most), datasketch's MinHash
    decision equals the exact Jaccard's wherever the exact value is 0.15 or more from the threshold."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(400)]
    compared = 0
    for _ in range(300):
        base = [rng.choice(words) for _ in range(rng.randint(20, 60))]
        edited = list(base)
        for _ in range(rng.choice([0, 1, 2, 4, 8, 16, 40])):
            edited[rng.randrange(len(edited))] = rng.choice(words)
        a, b = " ".join(base), " ".join(edited)
        exact = _jaccard(a, b)
        if abs(exact - 0.7) < 0.15:
            continue
        compared += 1
        assert (near_duplicates([a, b], 0.7)[1] == 0) == (exact >= 0.7), (exact, a, b)
    assert compared > 150


def test_the_first_of_a_group_is_kept_and_the_later_ones_point_at_it():
    a = "You want to fly from Oslo to Rome on Friday morning with one bag and an aisle seat please"
    b = a.replace("Friday", "Saturday")
    c = "Completely different: you ask for a refund of an order that never arrived last month at all"
    assert near_duplicates([a, c, a, b, c], 0.5) == [None, None, 0, 0, 1]
    assert near_duplicates([a, b], 1.0) == [None, None]  # only an identical text at threshold 1


def test_the_set_digest_is_of_the_scenarios_whatever_their_order():
    digests = [f"{random.Random(i).getrandbits(256):064x}" for i in range(50)]
    assert set_digest(digests) == set_digest(reversed(digests)) == set_digest(sorted(digests))
    assert set_digest(digests) != set_digest(digests[:-1])
    assert set_digest(digests) != set_digest(digests[:-1] + [digests[0]])
    assert set_digest([]) != set_digest(["0" * 64])


def test_seed_conversations_are_the_recorded_turns_first_five_cut_short():
    turn = {"user_content": {"parts": [{"text": "hi"}]}, "final_response": {"parts": [{"text": "x" * 3000}]}}
    cases = [{"eval_id": str(i), "conversation": [turn]} for i in range(7)] + [{"eval_id": "s", "conversation_scenario": {}}]
    found = seed_conversations({"eval_cases": cases})
    assert len(found) == 5 and found[0].startswith("user: hi\nagent: xxx") and len(found[0]) == 2000


def test_an_axis_entry_object_keeps_its_id_and_description():
    assert axis_values([{"id": "hard", "description": "The user withholds a detail"}], "difficulties") == \
        (Axis("hard", "The user withholds a detail"),)
