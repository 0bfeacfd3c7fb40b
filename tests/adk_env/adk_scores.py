"""Score ADK eval result files with google-adk's own evaluators (run in the ADK venv).

    .adk/bin/python tests/adk_env/adk_scores.py request.json > scores.json

request.json: {"files": [paths of *.evalset_result.json], "configs": [test_config.json objects]}.
For every config and every case of every file, as ADK's LocalEvalService does it:
the metrics from get_eval_metrics_from_config (efficiency metrics included), each
evaluator from the default registry, a metric that raises recorded as
NOT_EVALUATED, and the case verdict from _generate_final_eval_status. The actual
turns are each per-invocation entry's actual_invocation; the expected ones its
expected_invocation (None when no entry has one).

Output: {"scores": [{"<eval_set_id>:<eval_id>:<session_id>": {"metrics": {name: [score, status]}, "status": status}}],
"eval_sets": {path: [case]}}: one mapping per config, statuses by name (PASSED, FAILED, NOT_EVALUATED,
INFORMATIONAL); and for each of the request's "eval_sets" files, its cases as ADK loads them (EvalSet, else
the older [{name, data}] list, else a flat *.test.json list of turns): {eval_id, scenario, turns: [{prompt,
response, tool_calls: [[name, args]]}]}.
"""
import inspect
import asyncio
import json
import logging
import sys

from google.adk.evaluation._eval_set_results_manager_utils import parse_eval_set_result_json
from google.adk.evaluation.eval_case import get_all_tool_calls
from google.adk.evaluation.eval_config import EvalConfig, get_eval_metrics_from_config
from google.adk.evaluation.eval_set import EvalSet
from google.adk.evaluation.final_response_match_v1 import _get_text_from_content
from google.adk.evaluation.local_eval_sets_manager import convert_eval_set_to_pydantic_schema
from google.adk.evaluation.eval_metrics import EvalMetricResult, EvalStatus
from google.adk.evaluation.evaluator import EvaluationResult
from google.adk.evaluation.local_eval_service import LocalEvalService
from google.adk.evaluation.metric_evaluator_registry import DEFAULT_METRIC_EVALUATOR_REGISTRY

logging.disable(logging.CRITICAL)  # ADK logs every metric that raises, with its traceback


def evaluate(metric, actual, expected):
    try:
        evaluator = DEFAULT_METRIC_EVALUATOR_REGISTRY.get_evaluator(metric)
        result = evaluator.evaluate_invocations(actual, expected, None)
        if inspect.isawaitable(result):
            result = asyncio.run(result)
        return result
    except Exception:  # noqa: BLE001 - as LocalEvalService: the metric is NOT_EVALUATED
        return EvaluationResult(overall_eval_status=EvalStatus.NOT_EVALUATED)


def main(request_path):
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    results = [parse_eval_set_result_json(open(p, encoding="utf-8").read()) for p in request["files"]]
    output = []
    for criteria in request["configs"]:
        metrics = get_eval_metrics_from_config(EvalConfig.model_validate(criteria))
        scores = {}
        for result in results:
            for case in result.eval_case_results:
                actual = [p.actual_invocation for p in case.eval_metric_result_per_invocation]
                expected = [p.expected_invocation for p in case.eval_metric_result_per_invocation
                            if p.expected_invocation is not None] or None
                metric_results = []
                per_metric = {}
                for metric in metrics:
                    r = evaluate(metric, actual, expected)
                    metric_results.append(EvalMetricResult(score=r.overall_score, eval_status=r.overall_eval_status,
                                                           **metric.model_dump()))
                    per_metric[metric.metric_name] = [r.overall_score, r.overall_eval_status.name]
                status = LocalEvalService._generate_final_eval_status(None, metric_results)
                key = f"{case.eval_set_id or case.eval_set_file or result.eval_set_id}:{case.eval_id}:{case.session_id}"
                scores[key] = {"metrics": per_metric, "status": status.name}
        output.append(scores)
    eval_sets = {path: load_eval_set(path) for path in request.get("eval_sets", [])}
    json.dump({"scores": output, "eval_sets": eval_sets}, sys.stdout)


def load_eval_set(path):
    """As ADK loads an eval set file: EvalSet JSON first, else one of the legacy lists."""
    text = open(path, encoding="utf-8").read()
    try:
        eval_set = EvalSet.model_validate_json(text)
    except Exception:  # noqa: BLE001 - ADK falls back to the legacy formats on a validation error
        data = json.loads(text)
        if all("data" in case for case in data):  # local_eval_sets_manager.load_eval_set_from_file
            eval_set = convert_eval_set_to_pydantic_schema("legacy", data)
        else:  # AgentEvaluator._get_eval_set_from_old_format
            eval_set = convert_eval_set_to_pydantic_schema("legacy", [{"name": path, "data": data, "initial_session": {}}])
    cases = []
    for case in eval_set.eval_cases:
        turns = [{"prompt": _get_text_from_content(inv.user_content),
                  "response": _get_text_from_content(inv.final_response),
                  "tool_calls": [[c.name, c.args] for c in get_all_tool_calls(inv.intermediate_data)]}
                 for inv in case.conversation or []]
        cases.append({"eval_id": case.eval_id, "scenario": case.conversation_scenario is not None, "turns": turns})
    return cases


if __name__ == "__main__":
    main(sys.argv[1])
