"""output.adk_eval_history: one EvalSetResult JSON per eval set, in ADK's own format and file naming,
so `adk web` and other ADK tooling can open evalbeam's results.

For each eval set, `<folder>/<name>_<eval_set_id>_<started_at epoch>.evalset_result.json` (as
ADK names them, `/` replaced by `_`), snake_case keys and int statuses as ADK writes them: each
case's actual and expected invocations (rebuilt from the trace), its ADK criteria as
`overall_eval_metric_results` (and per invocation where known) and its verdict as
`final_eval_status`. Cases are grouped per eval set by the runner; one eval set's cases meet in
one worker (ADK writes an eval set as one file too).
"""
from __future__ import annotations

import json
from typing import Any, Iterable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from evalbeam.metrics.rows.adk_invocation import adk_invocation
from evalbeam.metrics.adk import CASE_STATUS, FAILED, INFORMATIONAL, INFORMATIONAL_CRITERIA, NOT_EVALUATED, PASSED, criterion_status
from evalbeam.transforms.score import ScoredInstance

STATUS_CODES = {PASSED: 1, FAILED: 2, NOT_EVALUATED: 3, INFORMATIONAL: 4}  # ADK's EvalStatus


def case_result(scored: ScoredInstance, criteria: dict[str, tuple[str, float | None]]) -> tuple[str, dict[str, Any]] | None:
    """(eval_set_id, EvalCaseResult JSON) of a scored ADK instance; None for another instance.
    criteria: output name -> (ADK criterion name, threshold)."""
    instance = scored.instance
    case = instance.fields.get("adk_case")
    if not isinstance(case, dict) or not case.get("eval_set_id"):
        return None
    rows = {r["metric"]: r for r in scored.results}
    overall, per_turn_results = [], []
    turns = instance.fields.get("invocations", [])
    for output, (name, threshold) in criteria.items():
        row = rows.get(output)
        if row is None:
            continue
        threshold = row.get("threshold", threshold)  # the case's own (its file's test_config.json), where set
        status = criterion_status(name, row["error"], row["passed"])
        overall.append({"metric_name": name, "threshold": threshold, "score": row["score"],
                        "eval_status": STATUS_CODES[status]})
        extra = json.loads(row["extra"]) if row.get("extra") else {}
        per_turn = extra.get("per_invocation") or ([row["score"]] if len(turns) == 1 else None)
        per_turn_results.append((name, threshold, per_turn))
    entries = []
    for i, turn in enumerate(turns):
        results = []
        for name, threshold, per_turn in per_turn_results:
            if per_turn is not None and i < len(per_turn):
                score = per_turn[i]
                if name in INFORMATIONAL_CRITERIA or score is None:
                    status = INFORMATIONAL if name in INFORMATIONAL_CRITERIA else NOT_EVALUATED
                else:
                    status = PASSED if threshold is not None and score >= threshold else FAILED
                results.append({"metric_name": name, "threshold": threshold, "score": score,
                                "eval_status": STATUS_CODES[status]})
        actual = adk_invocation(turn.get("prompt"), turn, turn.get("invocation_id"), turn.get("prompt_parts"))
        entry: dict[str, Any] = {"actual_invocation": actual, "eval_metric_results": results}
        if "expected" in turn:
            entry["expected_invocation"] = adk_invocation(turn.get("prompt"), turn["expected"], None,
                                                          turn.get("prompt_parts"))
        entries.append(entry)
    verdict = rows.get(CASE_STATUS)
    final = verdict["explanation"] if verdict and verdict.get("explanation") in STATUS_CODES else NOT_EVALUATED
    result = {"eval_set_file": case["eval_set_id"], "eval_set_id": case["eval_set_id"], "eval_id": case.get("eval_id", ""),
              "final_eval_status": STATUS_CODES[final], "overall_eval_metric_results": overall,
              "eval_metric_result_per_invocation": entries, "session_id": case.get("session_id") or "",
              "user_id": case.get("user_id")}
    return case["eval_set_id"], result


def _write(element, folder: str, app_name: str, timestamp: float) -> Iterable[str]:
    eval_set_id, cases = element
    result_id = f"{app_name}_{eval_set_id}_{timestamp}".replace("/", "_")
    document = {"eval_set_result_id": result_id, "eval_set_result_name": result_id, "eval_set_id": eval_set_id,
                "eval_case_results": sorted(cases, key=lambda c: (c["eval_id"], c["session_id"])),
                "creation_timestamp": timestamp}
    path = FileSystems.join(folder, f"{result_id}.evalset_result.json")
    with FileSystems.create(path, mime_type="application/json") as f:
        f.write(json.dumps(document, ensure_ascii=False).encode("utf-8"))
    yield path


class WriteEvalHistory(beam.PTransform):
    """ScoredInstances of an ADK input -> one EvalSetResult file per eval set (the paths written)."""

    def __init__(self, folder: str, app_name: str, timestamp: float, criteria: dict[str, tuple[str, float | None]]):
        super().__init__()
        self._folder = folder
        self._app_name = app_name
        self._timestamp = timestamp
        self._criteria = criteria

    def expand(self, scored):
        return (scored
                | "CaseResults" >> beam.FlatMap(lambda s, c: [r] if (r := case_result(s, c)) else [], self._criteria)
                | "ByEvalSet" >> beam.GroupByKey()
                | "WriteEvalSetResults" >> beam.FlatMap(_write, self._folder, self._app_name, self._timestamp))
