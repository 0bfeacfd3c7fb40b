"""ADK files read exactly as google-adk 2.13.0 reads them (issue 22, item 3).

The reference runs in its own environment (.adk/, `make adk-env`): the tests
that use the `adk_reference` fixture are in the `adk` tier.
"""
from __future__ import annotations

import copy
import json
import random
import subprocess

import pytest

from evalbeam.transforms.adk_models import MODELS, _camel, forbidden_keys
from evalbeam.transforms.read import parse_file
from evalbeam.transforms.records import DeadLetter, Record, SourceLines
from tests.adk_cases import eval_set_sets
from tests.helpers import ROOT

ADK_PYTHON = ROOT / ".adk" / "bin" / "python"


def run_adk(script: str, *args: str) -> str:
    if not ADK_PYTHON.exists():
        pytest.fail("the ADK reference environment is missing: run `make adk-env`: google-adk 2.13.0 in .adk/")
    result = subprocess.run([str(ADK_PYTHON), str(ROOT / "tests" / "adk_env" / script), *args],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def adk_reference():
    """Runs the reference: adk_reference(eval_sets=[paths], test_files=[paths]) -> what ADK loads."""
    def load(tmp, **request):
        path = tmp / "request.json"
        path.write_text(json.dumps({k: [str(p) for p in v] for k, v in request.items()}))
        return json.loads(run_adk("adk_load.py", str(path)))
    return load


def parsed(path, fmt="adk_eval_set", **options):
    items = list(parse_file(str(path), fmt, **options))
    return ([i for i in items if isinstance(i, Record)], [i for i in items if isinstance(i, DeadLetter)],
            [i for i in items if isinstance(i, SourceLines)])


# --- forbidden keys -----------------------------------------------------------


def _tuple(value):
    return tuple(_tuple(v) for v in value) if isinstance(value, list) else value


def test_the_key_table_is_adks(adk_reference):
    """evalbeam's table of ADK's models (transforms/adk_models.py) equals the one the installed
    reference's pydantic models give: every model, its extra policy, each field, alias and type."""
    reference = json.loads(run_adk("adk_models.py"))
    ours = {}
    for name, entry in reference.items():
        for field, info in entry["fields"].items():
            # ADK's and google.genai's alias generator is to_camel; evalbeam derives the alias with _camel
            assert info["alias"] == (None if _camel(field) == field or name == "EvalSet" else _camel(field)), \
                (name, field, info["alias"])
        ours[name] = (entry["extra"], name != "EvalSet",
                      {field: _tuple(info["type"]) for field, info in entry["fields"].items()})
    assert ours == MODELS


def _objects(value, path=""):
    """(path, object) of every JSON object in a document, the document first."""
    if isinstance(value, dict):
        yield path, value
        for key, item in value.items():
            yield from _objects(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _objects(item, f"{path}[{i}]")


# keys a writer of an eval set gets wrong: typos, a legacy turn's keys inside an invocation, other casings
MISTAKES = ["final_respone", "expected_tool_use", "reference", "query", "tool_input", "tool_name", "Text",
            "user_contents", "finalresponse", "conversation_plans", "rubric", "evalId2", "notes", "_comment"]


def mutated_eval_sets(seed: int, count: int):
    """Small eval sets cut from the generated one, most with one or two keys added anywhere
    (some where ADK allows or ignores them: an EvalCase's or SessionInput's own keys, an
    InvocationEvent's, inside tool args or state), some both spellings of a field."""
    rng = random.Random(seed)
    base = eval_set_sets()["generated.evalset.json"]["eval_cases"]
    docs = []
    for n in range(count):
        cases = copy.deepcopy(rng.sample(base, rng.randint(1, 3)))
        for case in cases:
            if rng.random() < 0.3 and case.get("conversation"):  # the events form of intermediate_data
                for inv in case["conversation"]:
                    calls = (inv.get("intermediate_data") or {}).get("tool_uses") or []
                    inv["intermediate_data"] = {"invocation_events": [
                        {"author": "agent", "content": {"role": "model", "parts": [{"function_call": c}]}}
                        for c in calls]}
        doc = {"eval_set_id": f"set_{n}", "eval_cases": cases}
        for _ in range(rng.choice([0, 1, 1, 1, 2])):
            # not into a map of agent name -> AgentDetails, whose values must be objects
            path, target = rng.choice([(p, o) for p, o in _objects(doc) if not p.endswith(("agent_details", "agentDetails"))])
            roll = rng.random()
            if roll < 0.15 and target:  # the other spelling of a key already there
                key = rng.choice(list(target))
                other = _camel(key) if _camel(key) != key else None
                if other:
                    target[other] = copy.deepcopy(target[key])
            else:
                target[rng.choice(MISTAKES)] = rng.choice([1, "x", {"text": "y"}, [], None])
        docs.append(doc)
    return docs


def _normal(loc: list) -> str:
    """A pydantic loc as evalbeam's path: indices in brackets, union member names left out."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in MODELS:
            out += f".{part}" if out else part
    return out


def test_forbidden_keys_are_refused_exactly_as_adk_refuses_them(tmp_path, adk_reference):
    """On hundreds of generated eval sets, evalbeam refuses exactly the files ADK refuses, for a key
    ADK reports as extra_forbidden at the same path; everything else ADK accepts, and so does evalbeam."""
    docs = mutated_eval_sets(22, 400)
    paths = []
    for i, doc in enumerate(docs):
        paths.append(tmp_path / f"s{i}.evalset.json")
        paths[-1].write_text(json.dumps(doc))
    adk = adk_reference(tmp_path, eval_sets=paths)["eval_sets"]
    refused = 0
    for doc, path in zip(docs, paths):
        result = adk[str(path)]
        ours = forbidden_keys(doc)
        assert all(t == "extra_forbidden" for _, t, _ in result["errors"]), result["errors"]
        assert (not ours) == result["accepted"], (path, ours, result["errors"])
        adk_paths = {_normal(loc) for loc, _, _ in result["errors"]}
        assert set(ours) <= adk_paths, (ours, adk_paths)
        for loc, _, msg in result["errors"]:
            assert msg == "Extra inputs are not permitted"
        refused += bool(ours)
    assert 150 < refused < 350  # both outcomes are well covered


def test_a_refused_eval_set_is_dead_lettered_whole_and_counts_reconcile(tmp_path):
    doc = eval_set_sets()["generated.evalset.json"]
    doc = {"eval_set_id": "refused", "eval_cases": [c for c in doc["eval_cases"] if c.get("conversation")][:4]}
    doc["eval_cases"][2]["conversation"][0]["final_respone"] = {"parts": [{"text": "typo"}]}
    path = tmp_path / "refused.evalset.json"
    path.write_text(json.dumps(doc, indent=2))
    records, dead, lines = parsed(path)
    assert not records and len(dead) == 4
    eval_id = doc["eval_cases"][2].get("eval_id") or doc["eval_cases"][2]["evalId"]
    culprit = dead[2]
    assert culprit.reason.startswith(f"eval case {eval_id!r}: eval_cases[2].conversation[0].final_respone: "
                                     "Extra inputs are not permitted")
    assert culprit.field == "eval_cases[2].conversation[0].final_respone" and culprit.origin == str(path)
    assert all("ADK refuses the whole eval set" in d.reason for d in dead)
    # every line of the file is a dead case's or a line of the file's own punctuation
    assert sum(d.line_count for d in dead) + lines[0].skipped == lines[0].lines
