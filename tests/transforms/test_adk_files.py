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

from evalbeam.metrics.rows.trace import camel_case
from evalbeam.transforms.adk_models import MODELS, forbidden_keys
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


@pytest.mark.adk
def test_the_key_table_is_adks(adk_reference):
    """evalbeam's table of ADK's models (transforms/adk_models.py) equals the one the installed
    reference's pydantic models give: every model, its extra policy, each field, alias and type."""
    reference = json.loads(run_adk("adk_models.py"))
    ours = {}
    for name, entry in reference.items():
        # ADK's and google.genai's alias generator is to_camel; evalbeam derives the alias with camel_case (metrics.rows.trace). A model
        # without one (EvalSet, ADK's CacheMetadata) has no alias at all
        camel = not any(info["alias"] is None and camel_case(field) != field for field, info in entry["fields"].items())
        for field, info in entry["fields"].items():
            assert info["alias"] == (None if camel_case(field) == field or not camel else camel_case(field)), \
                (name, field, info["alias"])
        ours[name] = (entry["extra"], camel, {field: _tuple(info["type"]) for field, info in entry["fields"].items()})
    assert {"EvalSet", "EvalSetResult", "EvalCaseResult", "EvalMetricResult", "Session"} <= set(ours)
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
                other = camel_case(key) if camel_case(key) != key else None
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


@pytest.mark.adk
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


def mutated_results(seed: int, count: int):
    """Small EvalSetResult documents (tests.adk_cases' generated results, some in camelCase), most with
    one or two keys added anywhere: where ADK forbids them (a metric result, an invocation, a part) and
    where it ignores them (EvalSetResult's and EvalCaseResult's own keys, inside args or state)."""
    from tests.adk_cases import camel, eval_set_result

    rng = random.Random(seed)
    docs = []
    for n in range(count):
        doc = eval_set_result(seed * 1000 + n, f"res_{n}", rng.randint(1, 2))
        if rng.random() < 0.3:
            doc = camel(doc)
        for _ in range(rng.choice([0, 1, 1, 1, 2])):
            path, target = rng.choice([(p, o) for p, o in _objects(doc) if not p.endswith(("agent_details", "agentDetails"))])
            if rng.random() < 0.15 and target:  # the other spelling of a key already there
                key = rng.choice(list(target))
                if camel_case(key) != key:
                    target[camel_case(key)] = copy.deepcopy(target[key])
            else:
                target[rng.choice(MISTAKES)] = rng.choice([1, "x", {"text": "y"}, [], None])
        docs.append(doc)
    return docs


@pytest.mark.adk
def test_forbidden_keys_in_result_files_are_refused_exactly_as_adk_refuses_them(tmp_path, adk_reference):
    """Issue 32: result files were not checked for keys ADK forbids. On hundreds of generated
    *.evalset_result.json files, evalbeam refuses exactly those EvalSetResult.model_validate_json refuses,
    for a key ADK reports as extra_forbidden at the same path; every other one ADK accepts, and so does
    evalbeam."""
    docs = mutated_results(32, 300)
    paths = []
    for i, doc in enumerate(docs):
        paths.append(tmp_path / f"r{i}.evalset_result.json")
        paths[-1].write_text(json.dumps(doc))
    adk = adk_reference(tmp_path, eval_results=paths)["eval_results"]
    refused = 0
    for doc, path in zip(docs, paths):
        result = adk[str(path)]
        ours = forbidden_keys(doc, "EvalSetResult")
        assert all(t == "extra_forbidden" for _, t, _ in result["errors"]), result["errors"]
        assert (not ours) == result["accepted"], (path, ours, result["errors"])
        assert set(ours) <= {_normal(loc) for loc, _, _ in result["errors"]}, (ours, result["errors"])
        refused += bool(ours)
        # and the run reads it so: refused whole, or every case scored
        records, dead, _ = parsed(path, "adk_eval_result")
        cases = doc.get("eval_case_results") or doc.get("evalCaseResults")
        assert (len(records), len(dead)) == ((0, len(cases)) if ours else (len(cases), 0)), (path, dead[:1])
    assert 100 < refused < 250  # both outcomes are well covered


@pytest.mark.adk
def test_a_result_file_with_a_forbidden_key_is_dead_lettered_whole_with_adks_reason_and_the_path(
        tmp_path, adk_reference):
    from tests.adk_cases import eval_set_result

    doc = eval_set_result(3, "res", 3)
    metric = {"metric_name": "response_match_score", "threshold": 0.8, "score": 1.0, "eval_status": 1,
              "scroe": 1.0}  # a typo ADK's EvalMetricResult forbids
    doc["eval_case_results"][0]["eval_metric_result_per_invocation"][1]["eval_metric_results"] = [metric]
    doc["eval_case_results"][2]["notes"] = "EvalCaseResult ignores its unknown keys, as ADK does"
    path = tmp_path / "app.evalset_result.json"
    path.write_text(json.dumps(doc, indent=2))
    fixed = tmp_path / "fixed.evalset_result.json"
    fixed.write_text(json.dumps(doc, indent=2).replace('"scroe": 1.0', '"details": {}'))
    adk = adk_reference(tmp_path, eval_results=[path, fixed])["eval_results"]
    where = "eval_case_results[0].eval_metric_result_per_invocation[1].eval_metric_results[0].scroe"
    assert [(_normal(loc), msg) for loc, _, msg in adk[str(path)]["errors"]] == [(where, "Extra inputs are not permitted")]
    assert adk[str(fixed)]["accepted"]

    records, dead, lines = parsed(path, "adk_eval_result")
    assert not records and len(dead) == 3
    eval_id = doc["eval_case_results"][0]["eval_id"]
    assert dead[0].reason == (f"eval case {eval_id!r}: {where}: Extra inputs are not permitted; ADK's models "
                              "forbid the key, so ADK refuses the whole eval set result")
    assert dead[0].field == where and dead[0].origin == str(path)
    assert dead[2].reason.endswith(f"not scored: ADK refuses the whole eval set result, which holds a key its "
                                   f"models forbid ({where}: Extra inputs are not permitted)")
    assert sum(d.line_count for d in dead) + lines[0].skipped == lines[0].lines
    # the file ADK accepts: every case read (the key EvalCaseResult ignores included)
    records, dead, _ = parsed(fixed, "adk_eval_result")
    assert len(records) == 3 and not dead


# --- legacy files -------------------------------------------------------------


@pytest.mark.adk
def test_legacy_initial_session_becomes_the_session_input_as_adk_makes_it(tmp_path, adk_reference):
    rng = random.Random(5)
    sessions = [{}, {"app_name": "dice", "user_id": "u7", "state": {"day": "Monday", "n": 3}},
                {"app_name": "dice"}, {"state": {"nested": {"k": [1, 2]}}}, {"user_id": "only"}]
    cases = []
    for i in range(25):
        case = {"name": f"case_{i}", "data": [{"query": f"q{i}", "expected_tool_use": [], "reference": "r"}]}
        session = rng.choice(sessions + [None])
        if session is not None:
            case["initial_session"] = session
        cases.append(case)
    path = tmp_path / "older.json"
    path.write_text(json.dumps(cases, indent=1))
    adk = adk_reference(tmp_path, eval_sets=[path])["eval_sets"][str(path)]
    records, dead, _ = parsed(path)
    assert not dead
    ours = {r.data["eval_id"]: r.data["adk_case"].get("session_input") for r in records}
    for case in adk["cases"]:
        expected = case["session_input"]
        if expected is not None:
            assert expected.pop("session_id") is None
        assert ours[case["eval_id"]] == expected, case["eval_id"]
    assert sum(v is not None for v in ours.values()) > 10


def _flat(query: str) -> list:
    return [{"query": query, "expected_tool_use": [{"tool_name": "t", "tool_input": {"q": query}}], "reference": "r"}]


def test_each_flat_test_file_is_its_own_eval_set_and_ids_hold_when_the_folder_moves(tmp_path):
    from evalbeam.configs import validate_config
    from evalbeam.pipelines.stages.read import adk_reading

    first = tmp_path / "first" / "evals"
    for agent in ("agent_a", "agent_b"):
        (first / agent).mkdir(parents=True)
        (first / agent / "simple.test.json").write_text(json.dumps(_flat(agent)))

    def ids(folder):
        config = validate_config({"name": "x", "input": {"uri": f"{folder}/*/*.test.json"},
                                 "output": {"parquet": str(tmp_path / "out")}})
        reading = adk_reading(config)
        assert reading.base == f"{folder}/"
        found = {}
        for path in sorted(folder.glob("*/*.test.json")):
            records, dead, _ = parsed(path, adk=reading)
            assert not dead and len(records) == 1
            found[records[0].data["instance_id"]] = records[0].data["eval_set_id"]
        return found

    before = ids(first)
    assert before == {"agent_a/simple:agent_a/simple.test.json": "agent_a/simple",
                      "agent_b/simple:agent_b/simple.test.json": "agent_b/simple"}
    moved = tmp_path / "elsewhere" / "deeper" / "evals"
    moved.parent.mkdir(parents=True)
    (tmp_path / "first" / "evals").rename(moved)
    assert ids(moved) == before


# --- each file's own test_config.json -------------------------------------------

FOLDER_CRITERIA = {
    "a": {"criteria": {"tool_trajectory_avg_score": 0.5, "response_match_score": 0.3}},
    "b": {"criteria": {"response_match_score": 0.09}},
    "c": None,  # no test_config.json: ADK's defaults
    "d": {"criteria": {"tool_trajectory_avg_score": {"threshold": 1.0}, "response_match_score": 0.95}},
}


@pytest.mark.adk
def test_each_file_is_judged_with_its_own_test_config_as_adks_agent_evaluator_judges_it(tmp_path, adk_reference):
    """Result files in folders with different test_config.json (and one with none), read with no
    criteria in the config: each case's criteria, scores, thresholds and verdict are those ADK's
    evaluators give with the criteria AgentEvaluator.find_config_for_test_file finds for its file;
    the summary's pass rates are the share of cases passing by their own thresholds."""
    from tests.adk_cases import eval_set_result
    from tests.helpers import evalbeam, table

    data = tmp_path / "data"
    files = {}
    for seed, (name, criteria) in enumerate(FOLDER_CRITERIA.items(), start=40):
        (data / name).mkdir(parents=True)
        if criteria is not None:
            (data / name / "test_config.json").write_text(json.dumps(criteria))
        files[name] = data / name / f"app_{name}_set_1700000000.0.evalset_result.json"
        files[name].write_text(json.dumps(eval_set_result(seed, f"{name}_set", 30), indent=1))
    found = adk_reference(tmp_path, test_files=list(files.values()))["test_files"]
    # ADK's scores of each file under the criteria found for it: one ADK process scores every file under every
    # folder's criteria (adk_scores.py's request), and each file's cases are read from its own folder's
    request = tmp_path / "scores.json"
    request.write_text(json.dumps({"files": [str(p) for p in files.values()],
                                   "configs": [{"criteria": found[str(p)]} for p in files.values()]}))
    scored = json.loads(run_adk("adk_scores.py", str(request)))["scores"]
    adk = {name: {k: v for k, v in scores.items() if k.startswith(f"{name}_set:")}
           for name, scores in zip(files, scored)}
    assert all(len(cases) == 30 for cases in adk.values()), {name: len(cases) for name, cases in adk.items()}

    config = tmp_path / "eval.yaml"
    config.write_text(f"name: per-file\nrun_id: per-file\ninput: {{uri: '{data}/*/*.evalset_result.json'}}\n"
                      f"output: {{parquet: {tmp_path}/out}}\n")
    evalbeam("run", config)
    run_dir = tmp_path / "out" / "per-file"
    rows: dict[str, dict] = {}
    for row in table(run_dir, "metric_results"):
        rows.setdefault(row["instance_id"], {})[row["metric"]] = row
    outcomes = set()
    for name, cases in adk.items():
        thresholds = {k: (v if isinstance(v, (int, float)) else v["threshold"])
                      for k, v in found[str(files[name])].items()}
        for instance_id, expected in cases.items():
            ours = rows[instance_id]
            assert set(ours) - {"adk_case_status", "latency_in_seconds", "failure"} == set(expected["metrics"])
            for metric, (score, status) in expected["metrics"].items():
                row = ours[metric]
                assert row["threshold"] == thresholds.get(metric), (name, metric)
                our_status = ("INFORMATIONAL" if row["threshold"] is None else
                              "NOT_EVALUATED" if row["error"] is not None or row["passed"] is None else
                              "PASSED" if row["passed"] else "FAILED")
                assert (row["score"], our_status) == (score, status), (instance_id, metric, row)
                outcomes.add((name, metric, status))
            assert ours["adk_case_status"]["explanation"] == expected["status"], instance_id
    # the thresholds decide: the same scores pass in one folder and fail in another
    assert {("a", "response_match_score", "PASSED"), ("d", "response_match_score", "FAILED"),
            ("b", "response_match_score", "PASSED"), ("c", "tool_trajectory_avg_score", "FAILED")} <= outcomes
    summary = {(r["metric"], r["slice"]): r for r in table(run_dir, "summary")}
    for name, cases in adk.items():
        evaluated = [c["status"] for c in cases.values() if c["status"] != "NOT_EVALUATED"]
        row = summary[("adk_case_status", f"eval_set_id={name}_set")]
        assert row["pass_rate"] == pytest.approx(evaluated.count("PASSED") / len(evaluated))
        statuses = [c["metrics"]["response_match_score"][1] for c in cases.values()]
        judged = [s for s in statuses if s != "NOT_EVALUATED"]
        row = summary[("response_match_score", f"eval_set_id={name}_set")]
        assert row["pass_rate"] == pytest.approx(judged.count("PASSED") / len(judged))
        assert row["threshold"] == {"a": 0.3, "b": 0.09, "c": 0.8, "d": 0.95}[name]
    assert summary[("response_match_score", "overall")]["threshold"] is None  # the files' thresholds differ
    runs = table(run_dir, "runs")[0]
    assert runs["read_count"] == runs["scored_count"] == 120 and runs["dead_letter_count"] == 0


# --- validate -----------------------------------------------------------------


@pytest.mark.slow
def test_validate_reports_what_run_would_dead_letter_and_fails_when_nothing_is_usable(tmp_path):
    from tests.helpers import evalbeam, table

    base = eval_set_sets()["generated.evalset.json"]
    cases = [c for c in base["eval_cases"] if c.get("conversation")]
    data = tmp_path / "data"
    data.mkdir()
    (data / "good.evalset.json").write_text(json.dumps({"eval_set_id": "good", "eval_cases": cases[:5] + [
        {"eval_id": "simulated", "conversation_scenario": {"starting_prompt": "hi", "conversation_plan": "ask"}}]}))
    refused = copy.deepcopy(cases[5:8])
    refused[1]["conversation"][0]["expected_tool_use"] = []
    (data / "refused.evalset.json").write_text(json.dumps({"eval_set_id": "refused", "eval_cases": refused}))
    config = tmp_path / "eval.yaml"
    config.write_text(f"name: v\nrun_id: v\ninput: {{uri: '{data}/*.evalset.json'}}\nmetrics: [response_match_score]\n"
                      f"output: {{parquet: {tmp_path}/out}}\n")
    result = evalbeam("validate", config)
    assert "input 2 file(s): 5 case(s) to score, 4 `run` would dead-letter; the first reasons:" in result.stdout
    assert "eval_cases[1].conversation[0].expected_tool_use: Extra inputs are not permitted" in result.stdout
    assert "conversation_scenario" in result.stdout
    evalbeam("run", config, check=False)
    runs = table(tmp_path / "out" / "v", "runs")[0]
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (9, 5, 4)
    # nothing usable: status 2, with the reasons
    config.write_text(config.read_text().replace("*.evalset.json", "refused.evalset.json"))
    result = evalbeam("validate", config, check=False)
    assert result.returncode == 2
    assert "no case of the ADK files (1 file(s)) can be scored: `run` would dead-letter 3; the first reasons:" \
        in result.stderr


LEGACY_CONFIGS = {
    "defaults": None,
    "response_only": {"criteria": {"response_match_score": 0.5}},
    "trajectory": {"criteria": {"tool_trajectory_avg_score": {"threshold": 0.5, "match_type": "IN_ORDER"}}},
    "judge_v2": {"criteria": {"final_response_match_v2": 0.5, "response_match_score": 0.2}},
}  # AgentEvaluator also allows safety_v1, which evalbeam refuses (Vertex's hosted metric): a config error


@pytest.mark.adk
def test_a_flat_test_file_is_refused_where_adks_agent_evaluator_refuses_it(tmp_path, adk_reference):
    """With each file's own criteria, AgentEvaluator checks a legacy test file against them: only
    its four criteria may judge one, and tool_trajectory_avg_score needs expected_tool_use in the
    first turn. Files in folders of every kind, with and without that key: evalbeam keeps exactly
    the files ADK loads."""
    from evalbeam.transforms.read_adk import AdkReading

    paths = []
    for name, config in LEGACY_CONFIGS.items():
        folder = tmp_path / name
        folder.mkdir()
        if config is not None:
            (folder / "test_config.json").write_text(json.dumps(config))
        for variant in ("with", "without"):
            turns = [{"query": "hi", "reference": "hello"}, {"query": "again", "expected_tool_use": []}]
            if variant == "with":
                turns[0]["expected_tool_use"] = [{"tool_name": "t", "tool_input": {}}]
            paths.append(folder / f"{variant}.test.json")
            paths[-1].write_text(json.dumps(turns))
    adk = adk_reference(tmp_path, agent_evaluator_files=paths)["agent_evaluator_files"]
    outcomes = set()
    for path in paths:
        records, dead, _ = parsed(path, adk=AdkReading(f"{tmp_path}/", criteria_per_file=True))
        assert len(records) + len(dead) == 1
        expected = adk[str(path)]
        assert bool(records) == expected["accepted"], (path, expected, dead)
        if dead:
            message = expected["error"].split(": ", 1)[1]
            key = "Invalid criteria key" if "Invalid criteria key" in message else "expected_tool_use"
            assert key in dead[0].reason and key in message, (dead[0].reason, message)
        outcomes.add(expected["accepted"])
    assert outcomes == {True, False}
    # read with criteria the config names, a test file is read as it is (this one its own criteria refuse)
    records, dead, _ = parsed(tmp_path / "trajectory" / "without.test.json", adk=AdkReading(f"{tmp_path}/"))
    assert records and not dead


@pytest.mark.parametrize("threshold", ["NaN", "Infinity", "-Infinity", "9" * 400, '{"threshold": NaN, "match_type": "IN_ORDER"}'])
def test_a_test_config_with_a_non_finite_threshold_is_refused_naming_it(tmp_path, threshold):
    """json (and ADK's EvalConfig) take NaN and Infinity; with a NaN threshold ADK fails every
    case, and evalbeam once dead-lettered every case with 'adk_case: holds a non-finite number'
    (the threshold column would hold NaN): the test_config.json is refused, naming the criterion."""
    from evalbeam.configs import validate_config
    from evalbeam.configs.adk_expansion import read_test_config
    text = f'{{"criteria": {{"tool_trajectory_avg_score": {threshold}, "response_match_score": 0.5}}}}'
    with pytest.raises(ValueError, match=r"criteria\.tool_trajectory_avg_score: .*not a finite number"):
        read_test_config(text)
    (tmp_path / "test_config.json").write_text(text)
    (tmp_path / "a.evalset.json").write_text(json.dumps({"eval_set_id": "a", "eval_cases": []}))
    with pytest.raises(ValueError, match=r"test_config\.json: criteria\.tool_trajectory_avg_score"):
        validate_config({"name": "n", "input": {"uri": str(tmp_path / "*.evalset.json")},
                        "output": {"parquet": str(tmp_path / "out")}})


def test_an_unreadable_test_config_dead_letters_its_files_cases_and_the_others_run(tmp_path):
    """docs/agents.md: an unreadable test_config.json dead-letters its file's cases (ADK cannot
    judge them). The config check once refused the whole run for one bad folder among many;
    now the run is configured from the readable ones, and the bad folder's files are
    dead-lettered naming their test_config.json. With no readable one the config is refused."""
    from evalbeam.configs import validate_config
    from evalbeam.transforms.read_adk import AdkReading, adk_base
    from evalbeam.configs.adk_expansion import criteria_of_file
    from tests.adk_cases import eval_set_result

    for name, config in (("good", {"criteria": {"response_match_score": 0.4}}), ("bad", None)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "test_config.json").write_text(
            json.dumps(config) if config else '{"criteria": {"response_match_score": 0.5,}')
        (tmp_path / name / f"app_{name}_1700000000.0.evalset_result.json").write_text(
            json.dumps(eval_set_result(7, f"{name}_set", 3), indent=1))
    criteria_of_file.cache_clear()
    uri = str(tmp_path / "*" / "*.evalset_result.json")
    config = validate_config({"name": "n", "input": {"uri": uri}, "output": {"parquet": str(tmp_path / "o")}})
    assert config.criteria_per_file
    assert {m.name: m.threshold for m in config.metrics}["response_match_score"] == 0.4
    reading = AdkReading(adk_base(uri), True)
    good = parsed(tmp_path / "good" / "app_good_1700000000.0.evalset_result.json", "adk_eval_result", adk=reading)
    bad = parsed(tmp_path / "bad" / "app_bad_1700000000.0.evalset_result.json", "adk_eval_result", adk=reading)
    assert len(good[0]) == 3 and not good[1]
    assert not bad[0] and len(bad[1]) == 1
    assert bad[1][0].reason.startswith(f"the file's test_config.json cannot be read: {tmp_path}/bad/test_config.json: "
                                       "not valid JSON")
    (tmp_path / "good" / "test_config.json").write_text("[")
    criteria_of_file.cache_clear()
    with pytest.raises(ValueError, match=r"test_config\.json: not valid JSON"):
        validate_config({"name": "n", "input": {"uri": uri}, "output": {"parquet": str(tmp_path / "o")}})


@pytest.mark.parametrize("bom", ["utf-16-le", "utf-16-be"])
def test_a_utf16_file_is_dead_lettered_saying_it_is_utf16(tmp_path, bom):
    """Windows tools (PowerShell's `>`) write UTF-16 with a byte order mark; ADK reads UTF-8
    only. The reason says what the file is, not just 'invalid start byte'; lines reconcile."""
    doc = {"eval_set_id": "w", "eval_cases": []}
    path = tmp_path / "w.evalset.json"
    path.write_bytes(("\ufeff" + json.dumps(doc, indent=1).replace("\n", "\r\n")).encode(bom))
    records, dead, lines = parsed(path)
    assert not records and len(dead) == 1
    assert "UTF-16" in dead[0].reason and "save it as UTF-8" in dead[0].reason
    assert dead[0].line_count + lines[0].skipped == lines[0].lines


SESSION_INPUTS = [
    None, {"app_name": "a", "user_id": "u"}, {"appName": "a", "userId": "u", "state": {"k": [1]}},
    {"app_name": "a", "user_id": "u", "session_id": "s", "extra_ok": 1}, {"app_name": "a", "user_id": "u", "session_id": None},
    {"user_id": "u"}, {"app_name": "a"}, {}, {"app_name": 5, "user_id": "u"}, {"app_name": "a", "user_id": None},
    {"app_name": "a", "user_id": "u", "state": [1]}, {"app_name": "a", "user_id": "u", "state": "x"},
    {"app_name": "a", "user_id": "u", "state": None}, {"app_name": "a", "user_id": "u", "session_id": 3},
    {"app_name": True, "user_id": "u"}, "x", [], 7,
]


@pytest.mark.adk
def test_a_session_input_adks_model_refuses_refuses_the_eval_set_as_adk_does(tmp_path, adk_reference):
    """ADK validates each case's session_input (SessionInput: app_name and user_id required
    strings, session_id an optional string, state an object) and refuses the whole eval set
    for one it cannot read. evalbeam once ignored a non-object session_input silently and let a
    bad state fail later, in inference. On generated sets, evalbeam refuses exactly the files
    ADK refuses, naming the field; every case is dead-lettered, and lines reconcile."""
    from evalbeam.transforms.adk_models import session_input_errors

    base = [c for c in eval_set_sets()["generated.evalset.json"]["eval_cases"] if c.get("conversation")][:3]
    rng = random.Random(11)
    docs, paths = [], []
    for i in range(60):
        cases = copy.deepcopy(base)
        for case in cases:
            case.pop("session_input", None), case.pop("sessionInput", None)
            choice = SESSION_INPUTS[i % len(SESSION_INPUTS)] if case is cases[1] else rng.choice(SESSION_INPUTS[:5])
            if choice is not None or rng.random() < 0.5:
                case["session_input"] = copy.deepcopy(choice)
        docs.append({"eval_set_id": f"s{i}", "eval_cases": cases})
        paths.append(tmp_path / f"s{i}.evalset.json")
        paths[-1].write_text(json.dumps(docs[-1], indent=1))
    adk = adk_reference(tmp_path, eval_sets=paths)["eval_sets"]
    refused = 0
    for doc, path in zip(docs, paths):
        accepted = adk[str(path)]["accepted"]
        ours = session_input_errors(doc)
        assert (not ours) == accepted, (doc["eval_cases"][1].get("session_input"), ours, adk[str(path)]["errors"])
        records, dead, lines = parsed(path)
        if accepted:
            assert len(records) == 3 and not dead
            loaded = {c["eval_id"]: c["session_input"] for c in adk[str(path)]["cases"]}
            for record in records:
                given = record.data["adk_case"].get("session_input")
                assert (given is None) == (loaded[record.data["eval_id"]] is None)
        else:
            refused += 1
            assert not records and len(dead) == 3
            eval_id = doc["eval_cases"][1].get("eval_id") or doc["eval_cases"][1]["evalId"]
            assert dead[1].reason.startswith(f"eval case {eval_id!r}: eval_cases[1].session_input")
            assert all("ADK refuses the whole eval set" in d.reason for d in dead)
            assert sum(d.line_count for d in dead) + lines[0].skipped == lines[0].lines
    assert 20 < refused < 50


@pytest.mark.parametrize("session, field", [
    ({"app_name": 5}, "initial_session.app_name"), ({"user_id": None}, "initial_session.user_id"),
    ({"state": [1, 2]}, "initial_session.state"), ({"state": "x"}, "initial_session.state"),
    ("x", "initial_session"), ([1], "initial_session")])
def test_a_legacy_initial_session_adks_session_input_refuses_is_dead_lettered_naming_the_field(tmp_path, session, field):
    """ADK makes SessionInput(app_name=..., user_id=..., state=...) of a legacy initial_session,
    which refuses a non-string app_name/user_id or a non-object state (and .get fails on a non-object).
    evalbeam took them, and the bad state failed later, in inference: the case is dead-lettered
    naming the field; the file's other cases are kept."""
    cases = [{"name": "bad", "data": [{"query": "q", "expected_tool_use": [], "reference": "r"}],
              "initial_session": session},
             {"name": "good", "data": [{"query": "q", "expected_tool_use": [], "reference": "r"}],
              "initial_session": {"app_name": "a", "state": {"k": 1}}}]
    path = tmp_path / "older.json"
    path.write_text(json.dumps(cases, indent=1))
    records, dead, lines = parsed(path)
    assert [r.data["eval_id"] for r in records] == ["good"]
    assert len(dead) == 1 and dead[0].field == field and dead[0].reason.startswith(f"eval case 'bad': {field} ")
    assert sum(d.line_count for d in dead) + sum(r.line_count for r in records) + lines[0].skipped == lines[0].lines


@pytest.mark.parametrize("name, doc, format_", [
    ("weather.json", {"eval_set_id": "w", "eval_cases": []}, "adk_eval_set"),
    ("run.json", {"eval_set_id": "w", "eval_case_results": []}, "adk_eval_result"),
    ("row.json", {"prompt": "p", "response": "r"}, None)])
def test_an_adk_file_named_json_is_refused_saying_which_format_to_set(tmp_path, name, doc, format_):
    """A `.json` file is read as JSON Lines; an ADK eval set (or any indented JSON document)
    under that name made every line a dead letter ('invalid JSON: Extra data'). Before anything
    runs, the error says the file is one JSON document and which input.format reads it."""
    from evalbeam.configs import ConfigError, EvalConfig
    from evalbeam.pipelines.preflight import _check_files

    (tmp_path / name).write_text(json.dumps(doc, indent=2))
    config = EvalConfig.model_validate({"name": "n", "input": {"uri": str(tmp_path / "*.json")},
                                        "metrics": ["response_match_score"], "output": {"parquet": str(tmp_path / "o")}})
    with pytest.raises(ConfigError, match=f"input.uri: {tmp_path / name} is one JSON document, not JSON Lines") as e:
        _check_files(config)
    if format_:
        assert f"set input.format: {format_}" in str(e.value)
    else:
        assert "one object a line" in str(e.value)
    (tmp_path / name).write_text(json.dumps(doc) + "\n")  # one line: JSON Lines it is
    assert _check_files(config).checked_rows == 1


LAX_THRESHOLDS = ["0.5", " 1e-1 ", True, False, 1, "2", {"threshold": "0.9", "match_type": "IN_ORDER"},
                  {"threshold": True}, {"threshold": " 0.25"}]


@pytest.mark.adk
def test_thresholds_adk_reads_leniently_are_read_as_adk_reads_them(tmp_path, adk_reference):
    """ADK's EvalConfig reads thresholds in pydantic's lax mode: "0.5" and true are thresholds 0.5
    and 1.0. evalbeam refused such a test_config.json ('expected a threshold (number)'); it now
    reads the same thresholds ADK's AgentEvaluator.find_config_for_test_file finds."""
    from evalbeam.configs.adk_expansion import criteria_of_file

    files = []
    for i, value in enumerate(LAX_THRESHOLDS):
        folder = tmp_path / f"f{i}"
        folder.mkdir()
        name = "tool_trajectory_avg_score" if isinstance(value, dict) else "response_match_score"
        (folder / "test_config.json").write_text(json.dumps({"criteria": {name: value}}))
        files.append(folder / "x.evalset_result.json")
    criteria_of_file.cache_clear()
    found = adk_reference(tmp_path, test_files=files)["test_files"]
    for path in files:
        [(name, adk)] = found[str(path)].items()
        ours = {spec["name"]: spec for spec in criteria_of_file(str(path))}[name]
        assert ours["threshold"] == (adk["threshold"] if isinstance(adk, dict) else adk), path
        if isinstance(adk, dict) and adk.get("match_type"):
            assert ours["params"]["match_type"] == adk["match_type"]
