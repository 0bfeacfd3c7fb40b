"""evalbeam's ADK criteria against google-adk 2.13.0 itself: 100% agreement.

Hundreds of generated eval cases (tests/adk_cases.py: every match type and
spelling, ignore_args, Python equality of arguments, empty lists, mismatched
turn counts, both intermediate_data shapes, Unicode text, token usage and
durations present or not), written as ADK EvalSetResult files in snake_case,
camelCase and the legacy double-encoded form, are scored twice:
- by ADK's own evaluators, in the separate ADK environment (`make adk-env`,
  tests/adk_env/requirements.lock), through tests/adk_env/adk_scores.py;
- by evalbeam: its adk_eval_result reader, instance model and criteria (the
  production scoring code in-process for every test_config, and one real
  `evalbeam run` for one of them).
Every case's score and status for every criterion, and its case verdict, must be equal.
"""
from __future__ import annotations

import collections
import datetime as dt
import json
import subprocess

import pytest

from evalbeam.configs import MetricSpec
from evalbeam.configs.adk_expansion import read_test_config
from evalbeam.metrics.adk import CASE_STATUS, criterion_status
from evalbeam.metrics.rows.instance import RowSpec, build_instance
from tests.adk_cases import CONFIGS, camel, eval_set_result, eval_set_sets
from tests.helpers import ROOT, evalbeam, table
from evalbeam.transforms.adk_status import add_case_status
from evalbeam.transforms.read import parse_file
from evalbeam.transforms.records import Record
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.transforms.score import plan_metrics, score_instance

pytestmark = pytest.mark.adk

ADK_PYTHON = ROOT / ".adk" / "bin" / "python"
RUN = RunKey("fidelity", dt.date(2026, 11, 23))


@pytest.fixture(scope="module")
def adk_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("adk_results")
    snake = eval_set_result(1, "snake_set", 160)
    camel_doc = camel(eval_set_result(2, "camel_set", 100))
    encoded = eval_set_result(3, "encoded_set", 60)
    files = {
        "snake": folder / "app_snake_set_1700000000.0.evalset_result.json",
        "camel": folder / "app_camel_set_1700000000.0.evalset_result.json",
        "encoded": folder / "app_encoded_set_1700000000.0.evalset_result.json",
    }
    files["snake"].write_text(json.dumps(snake, indent=2, ensure_ascii=False), encoding="utf-8")
    files["camel"].write_text(json.dumps(camel_doc, ensure_ascii=False), encoding="utf-8")
    files["encoded"].write_text(json.dumps(json.dumps(encoded)), encoding="utf-8")
    return folder, files


@pytest.fixture(scope="module")
def eval_set_files(tmp_path_factory):
    """Eval sets made of the generated expected turns: an EvalSet (nested keys in both cases, a few
    user-simulation cases), the older [{name, data}] list and a flat *.test.json list of turns."""
    folder = tmp_path_factory.mktemp("adk_eval_sets")
    sets = eval_set_sets()
    paths = {}
    for name, doc in sets.items():
        paths[name] = folder / name
        paths[name].write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def adk_output(adk_files, eval_set_files, tmp_path_factory):
    if not ADK_PYTHON.exists():
        pytest.fail("the ADK reference environment is missing: run `make adk-env` (or `make test`): google-adk 2.13.0 in .adk/")
    _, files = adk_files
    request = tmp_path_factory.mktemp("adk_request") / "request.json"
    request.write_text(json.dumps({"files": [str(p) for p in files.values()], "configs": CONFIGS,
                                   "eval_sets": [str(p) for p in eval_set_files.values()]}))
    result = subprocess.run([str(ADK_PYTHON), str(ROOT / "tests" / "adk_env" / "adk_scores.py"), str(request)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def adk_scores(adk_output):
    return adk_output["scores"]


def evalbeam_scores(files, config) -> dict[str, dict[str, dict]]:
    """instance_id -> metric -> metric_results row, as the pipeline's scoring computes them."""
    specs = [MetricSpec.model_validate(s) for s in read_test_config(json.dumps(config))]
    plans = plan_metrics(specs)
    scorers = [(plan, plan.build(), plan.name if i >= len(specs) else None) for i, plan in enumerate(plans)]
    criteria = {s.output_name: s.name for s in specs}
    spec = RowSpec(column_mapping={}, id_column="instance_id", slice_columns=(), requirements=())
    out = {}
    for path in files:
        for item in parse_file(str(path), "adk_eval_result"):
            if isinstance(item, Record):
                instance = build_instance(item.data, spec, item.source)
                scored = add_case_status(score_instance(RUN, instance, scorers), RUN, criteria)
                out[instance.instance_id] = {r["metric"]: r for r in scored.results}
            else:
                assert not hasattr(item, "reason"), f"dead-lettered: {item}"
    return out


def disagreements(adk: dict, ours: dict) -> list[str]:
    problems = []
    assert set(adk) == set(ours), set(adk) ^ set(ours)
    for instance_id, expected in adk.items():
        rows = ours[instance_id]
        for metric, (score, status) in expected["metrics"].items():
            row = rows[metric]
            our_status = criterion_status(metric, row["error"], row["passed"])
            if row["score"] != score or our_status != status:
                problems.append(f"{instance_id} {metric}: ADK {score!r} {status}, evalbeam {row['score']!r} "
                                f"{our_status} ({row['error'] or ''})")
        if rows[CASE_STATUS]["explanation"] != expected["status"]:
            problems.append(f"{instance_id} case: ADK {expected['status']}, evalbeam {rows[CASE_STATUS]['explanation']}")
    return problems


def test_every_case_and_criterion_agrees_with_adk(adk_files, adk_scores):
    _, files = adk_files
    coverage = collections.Counter()
    for config, adk in zip(CONFIGS, adk_scores):
        ours = evalbeam_scores(files.values(), config)
        problems = disagreements(adk, ours)
        assert not problems, f"{len(problems)} disagreements with ADK for {config}:\n" + "\n".join(problems[:30])
        for expected in adk.values():
            coverage[("case", expected["status"])] += 1
            for metric, (score, status) in expected["metrics"].items():
                coverage[(metric, status if score is not None or status != "INFORMATIONAL" else "n/a")] += 1
    assert len(adk_scores[0]) == 320
    # the generated cases reach every outcome of every criterion
    for key in [("case", "PASSED"), ("case", "FAILED"), ("case", "NOT_EVALUATED"),
                ("tool_trajectory_avg_score", "PASSED"), ("tool_trajectory_avg_score", "FAILED"),
                ("tool_trajectory_avg_score", "NOT_EVALUATED"), ("response_match_score", "PASSED"),
                ("response_match_score", "FAILED"), ("response_match_score", "NOT_EVALUATED"),
                *[(m, s) for m in ("tool_call_count_v1", "token_usage_v1", "inference_call_count_v1",
                                   "invocation_duration_v1") for s in ("INFORMATIONAL", "n/a")]]:
        assert coverage[key] > 0, f"no case reaches {key}"


def test_scores_hit_partial_values(adk_scores):
    """Means over turns and ROUGE fractions, not only 0 and 1."""
    scores = {m: {s for case in adk_scores[2].values() for name, (s, _) in case["metrics"].items() if name == m}
              for m in ("tool_trajectory_avg_score", "response_match_score", "token_usage_v1")}
    assert any(s is not None and 0 < s < 1 for s in scores["tool_trajectory_avg_score"])
    assert len({s for s in scores["response_match_score"] if s is not None and 0 < s < 1}) > 20
    assert any(s is not None and s != int(s) for s in scores["token_usage_v1"])


def test_a_real_run_agrees_with_adk(adk_files, adk_scores, tmp_path):
    """The whole pipeline (reading, validation, scoring, the case verdict) on the three files, for one config."""
    folder, _ = adk_files
    index = 2
    test_config = tmp_path / "test_config.json"
    test_config.write_text(json.dumps(CONFIGS[index]))
    config = tmp_path / "eval.yaml"
    config.write_text(f"""
name: adk-fidelity
run_id: adk-fidelity
input:
  uri: {folder}/*.evalset_result.json
  adk_criteria: {test_config}
output:
  parquet: {tmp_path}/out
  adk_eval_history: {tmp_path}/history
""")
    evalbeam("run", config)
    run_dir = tmp_path / "out" / "adk-fidelity"
    rows = collections.defaultdict(dict)
    for row in table(run_dir, "metric_results"):
        rows[row["instance_id"]][row["metric"]] = row
    assert not disagreements(adk_scores[index], rows)
    runs = table(run_dir, "runs")[0]
    assert runs["read_count"] == runs["scored_count"] == 320 and runs["dead_letter_count"] == 0
    assert runs["lines_read"] == runs["lines_skipped"] + runs["lines_scored"]
    summary = {(r["metric"], r["slice"]): r for r in table(run_dir, "summary")}
    for eval_set in ("snake_set", "camel_set", "encoded_set"):
        cases = [c for key, c in adk_scores[index].items() if key.startswith(eval_set + ":")]
        evaluated = [c for c in cases if c["status"] != "NOT_EVALUATED"]
        passed = sum(c["status"] == "PASSED" for c in evaluated)
        row = summary[(CASE_STATUS, f"eval_set_id={eval_set}")]
        assert row["pass_rate"] == pytest.approx(passed / len(evaluated))
        assert row["error_count"] == len(cases) - len(evaluated)

    # the eval history evalbeam wrote is ADK's own format: ADK reads it back and scores it the same
    written = sorted((tmp_path / "history").glob("adk-fidelity_*.evalset_result.json"))
    assert [p.name.split("_")[1] for p in written] == ["camel", "encoded", "snake"]
    request = tmp_path / "history_request.json"
    request.write_text(json.dumps({"files": [str(p) for p in written], "configs": [CONFIGS[index]]}))
    result = subprocess.run([str(ADK_PYTHON), str(ROOT / "tests" / "adk_env" / "adk_scores.py"), str(request)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    rescored = json.loads(result.stdout)["scores"][0]
    assert rescored == adk_scores[index]
    for path in written:  # and the verdicts and scores evalbeam recorded in it are ADK's
        for case in json.loads(path.read_text())["eval_case_results"]:
            expected = adk_scores[index][f"{case['eval_set_id']}:{case['eval_id']}:{case['session_id']}"]
            assert case["final_eval_status"] == {"PASSED": 1, "FAILED": 2, "NOT_EVALUATED": 3}[expected["status"]]
            recorded = {m["metric_name"]: m["score"] for m in case["overall_eval_metric_results"]}
            assert recorded == {m: score for m, (score, _) in expected["metrics"].items()}


def test_eval_sets_read_as_adk_reads_them(eval_set_files, adk_output):
    """Every case's expected turns (user text, final response, tool calls) as ADK loads the file;
    the user-simulation cases with no turns, their scenario kept for inference."""
    for name, path in eval_set_files.items():
        adk_cases = adk_output["eval_sets"][str(path)]
        items = list(parse_file(str(path), "adk_eval_set"))
        records = [i for i in items if isinstance(i, Record)]
        dead = [i for i in items if hasattr(i, "reason")]
        assert len(records) == len(adk_cases) and not dead
        scenarios = {r.data["eval_id"] for r in records if "conversation_scenario" in r.data["adk_case"]}
        assert scenarios == {c["eval_id"] for c in adk_cases if c["scenario"]}
        ours = {r.data["eval_id"]: r.data.get("invocations") for r in records}
        for case in adk_cases:
            if case["scenario"]:
                continue
            # a flat *.test.json file: ADK's eval_id is the path as given, evalbeam's relative to the input's base
            eval_id = path.name if case["eval_id"] == str(path) else case["eval_id"]
            turns = [{"prompt": t["prompt"], "response": t["expected"]["response"],
                      "tool_calls": [[c["tool_name"], c.get("tool_input")] for c in t["expected"]["tool_calls"]]}
                     for t in ours[eval_id]]
            assert turns == case["turns"], (name, case["eval_id"])
