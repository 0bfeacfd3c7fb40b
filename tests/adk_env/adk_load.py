"""Load eval set files as google-adk 2.13.0 loads them (run in the ADK venv).

    .adk/bin/python tests/adk_env/adk_load.py request.json > loaded.json

request.json: {"eval_sets": [paths], "test_files": [paths]}.
- eval_sets: each file through `EvalSet.model_validate_json` (what
  load_eval_set_from_file and AgentEvaluator._load_eval_set_from_file try
  first); a list document through ADK's legacy conversion
  (convert_eval_set_to_pydantic_schema, as load_eval_set_from_file falls back).
  Output per path: {"accepted": bool, "errors": [[loc, type, msg]], "cases":
  [{eval_id, session_input}]}; a loc is a list of keys and indices.
- eval_results: each file through `EvalSetResult.model_validate_json` (what
  LocalEvalSetResultsManager.get_eval_set_result reads a result file with; a
  legacy double-encoded file, a JSON string, through its string):
  {path: {"accepted": bool, "errors": [[loc, type, msg]]}}.
- test_files: the criteria AgentEvaluator.find_config_for_test_file finds for
  each: {path: {criterion: threshold or criterion object}}.
- agent_evaluator_files: each loaded as AgentEvaluator.evaluate loads a test file
  (_load_eval_set_from_file with the config find_config_for_test_file finds):
  {path: {"accepted": bool, "error": message or null}}.
"""
import json
import sys

import pydantic
from google.adk.evaluation.agent_evaluator import AgentEvaluator
from google.adk.evaluation.eval_result import EvalSetResult
from google.adk.evaluation.eval_set import EvalSet
from google.adk.evaluation.local_eval_sets_manager import convert_eval_set_to_pydantic_schema


def load(path):
    text = open(path, encoding="utf-8").read()
    value = json.loads(text)
    if isinstance(value, list):
        eval_set = convert_eval_set_to_pydantic_schema("legacy", value)
        errors = []
    else:
        try:
            eval_set = EvalSet.model_validate_json(text)
            errors = []
        except pydantic.ValidationError as e:
            return {"accepted": False, "errors": [[list(x["loc"]), x["type"], x["msg"]] for x in e.errors()],
                    "cases": []}
    cases = [{"eval_id": c.eval_id,
              "session_input": c.session_input.model_dump(mode="json") if c.session_input else None}
             for c in eval_set.eval_cases]
    return {"accepted": True, "errors": errors, "cases": cases}


def load_result(path):
    text = open(path, encoding="utf-8").read()
    value = json.loads(text)
    if isinstance(value, str):  # the legacy double-encoded file
        text = value
    try:
        EvalSetResult.model_validate_json(text)
    except pydantic.ValidationError as e:
        return {"accepted": False, "errors": [[list(x["loc"]), x["type"], x["msg"]] for x in e.errors()]}
    return {"accepted": True, "errors": []}


def agent_evaluator_load(path):
    try:
        AgentEvaluator._load_eval_set_from_file(path, AgentEvaluator.find_config_for_test_file(path), {})
    except Exception as e:  # noqa: BLE001 - what AgentEvaluator raises is the refusal
        return {"accepted": False, "error": f"{type(e).__name__}: {e}"}
    return {"accepted": True, "error": None}


def main(request_path):
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    out = {"eval_sets": {p: load(p) for p in request.get("eval_sets", [])},
           "eval_results": {p: load_result(p) for p in request.get("eval_results", [])},
           "test_files": {p: AgentEvaluator.find_config_for_test_file(p).model_dump(mode="json")["criteria"]
                          for p in request.get("test_files", [])},
           "agent_evaluator_files": {p: agent_evaluator_load(p) for p in request.get("agent_evaluator_files", [])}}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
