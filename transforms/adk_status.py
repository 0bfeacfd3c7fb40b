"""The ADK case verdict: one `adk_case_status` result row per instance, from its ADK criteria rows.

score 1 (PASSED) or 0 (FAILED), `passed` the same, `explanation` the status;
a case with no criterion evaluated is NOT_EVALUATED: no score, and an error
saying so. With the threshold 1, the summary's pass rate of `adk_case_status`
is ADK's pass rate over the evaluated cases (per eval set, in its slice).
"""
from __future__ import annotations

from evalbeam.metrics.adk import CASE_STATUS, NOT_EVALUATED, PASSED, case_status, criterion_status
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.transforms.score import JUDGE_COLUMNS_ABSENT, ScoredInstance

THRESHOLD = 1.0


def add_case_status(scored: ScoredInstance, run: RunKey, criteria: dict[str, str]) -> ScoredInstance:
    """criteria: output name -> ADK criterion name, for the criteria of the config."""
    statuses = [criterion_status(criteria[r["metric"]], r["error"], r["passed"])
                for r in scored.results if r["metric"] in criteria]
    status = case_status(statuses)
    evaluated = status != NOT_EVALUATED
    row = {
        **run.columns(),
        "instance_id": scored.instance.instance_id,
        "metric": CASE_STATUS,
        "score": (1.0 if status == PASSED else 0.0) if evaluated else None,
        "passed": status == PASSED if evaluated else None,
        "threshold": THRESHOLD,
        "explanation": status,
        "error": None if evaluated else "NOT_EVALUATED: no ADK criterion could be evaluated on this case",
        "extra": None,
        **JUDGE_COLUMNS_ABSENT,
    }
    return ScoredInstance(scored.instance, [*scored.results, row], scored.bleu_path)
