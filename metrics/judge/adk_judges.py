"""ADK's LLM-judge criteria, rendered and read by google-adk's own evaluators.

For a criterion listed in ADK_JUDGE_CRITERIA, evalbeam asks the judge what ADK
would ask and reads the answer as ADK reads it, by calling the installed
google-adk (the `agent` extra) on the workers:

  prompt      per turn, the evaluator's own `format_auto_rater_prompt(actual,
              expected)`, on ADK Invocation objects rebuilt from the trace turn
              (metrics.adk_invocation), sent as free text (no response schema,
              as ADK sends it);
  answer      each sample's text through the evaluator's own
              `convert_auto_rater_response_to_score` (ADK's label parsing);
  aggregate   the evaluator's own `aggregate_per_invocation_samples` over a
              turn's samples (a turn whose judge call failed after retries is
              NOT_EVALUATED, as ADK does with a sample that raised), then its
              `aggregate_invocation_results` over the turns.

The call itself is evalbeam's (the one judge layer: quota, retries, cache,
accounting); `num_samples` is judge.sampling_count (metrics.adk.judge_options
maps a test_config's judge_model_options onto it), one request per sample, as
ADK sends num_samples identical requests per invocation.

An AdkJudge is what the metric's factory returns: a small picklable value (the
criterion's name and fields); the evaluator is built lazily in each process.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import threading
import warnings
from typing import Any, Mapping

import pydantic

from evalbeam.metrics.adk_invocation import adk_invocation
from evalbeam.metrics.registry import register
from evalbeam.metrics.trace import trace_of

# criterion -> (the module of google.adk.evaluation holding its evaluator, the evaluator class,
# the criterion class of eval_metrics)
ADK_JUDGE_CRITERIA: dict[str, tuple[str, str, str]] = {
    "final_response_match_v2": ("final_response_match_v2", "FinalResponseMatchV2Evaluator", "LlmAsAJudgeCriterion"),
    "rubric_based_final_response_quality_v1": ("rubric_based_final_response_quality_v1",
                                               "RubricBasedFinalResponseQualityV1Evaluator", "RubricsBasedCriterion"),
    "rubric_based_tool_use_quality_v1": ("rubric_based_tool_use_quality_v1", "RubricBasedToolUseV1Evaluator",
                                         "RubricsBasedCriterion"),
}
RUBRIC_CRITERIA = ("rubric_based_final_response_quality_v1", "rubric_based_tool_use_quality_v1")
# evalbeam's own prompts for the same criteria stay available under these names
EVALBEAM_NAMES = {name: f"evalbeam_{name}" for name in ADK_JUDGE_CRITERIA}
AGENT_EXTRA = "pip install 'evalbeam[agent]'"


class AdkJudgesUnavailable(ValueError):
    """google-adk (evalbeam's `agent` extra) cannot be imported here."""


def require_adk(names) -> None:
    """Raises AdkJudgesUnavailable naming the criteria among `names` that need google-adk, when it is missing."""
    needing = sorted(n for n in names if n in ADK_JUDGE_CRITERIA)
    if not needing:
        return
    try:
        importlib.import_module("google.adk.evaluation.eval_metrics")
    except ImportError as e:
        own = ", ".join(EVALBEAM_NAMES[n] for n in needing)
        raise AdkJudgesUnavailable(
            f"{', '.join(needing)}: rendered and scored by google-adk's own evaluator, which cannot be imported "
            f"here ({e}); install the agent extra ({AGENT_EXTRA}) where the pipeline is built and on the workers, "
            f"or use evalbeam's own prompt ({own})") from None


def check_evaluators(names) -> None:
    """Builds ADK's evaluator of each ADK judge criterion among `names` (preflight): raises
    AdkJudgesUnavailable when google-adk is missing or its evaluator cannot be built here."""
    require_adk(names)
    for name in sorted(n for n in names if n in ADK_JUDGE_CRITERIA):
        try:
            _evaluator(name, False)  # a rubric criterion's own rubrics are checked by its params
        except Exception as e:  # noqa: BLE001 - whatever stops ADK's evaluator is what the user must fix
            raise AdkJudgesUnavailable(f"{name}: google-adk's evaluator cannot be built here "
                                       f"({type(e).__name__}: {e}); evalbeam was written for google-adk 2.13") from None


@dataclasses.dataclass(frozen=True)
class AdkJudge:
    """One ADK judge criterion as configured: what the judge stage renders and scores (transforms.judge)."""

    name: str
    include_intermediate_responses_in_final: bool = False
    rubrics: str = "[]"  # rubric criteria: the criterion's own rubrics (ADK Rubric objects, as JSON)
    per_turn = True  # judged turn by turn (plans read this of every judge template)

    def samples(self, sampling_count: int) -> int:
        return sampling_count

    def evaluator(self):
        """ADK's evaluator, one per thread: a rubric evaluator keeps the effective rubrics of the turn it
        last rendered, and reads every answer against them (as ADK does within one evaluation), so a
        case's turns are rendered, then its answers read, in one thread (transforms.judge.adk_row)."""
        cache = _PER_THREAD.__dict__.setdefault("evaluators", {})
        key = (self.name, self.include_intermediate_responses_in_final, self.rubrics)
        if key not in cache:
            cache[key] = _evaluator(*key)
        return cache[key]

    # ------------------------------------------------------------ prompts

    def invocations(self, fields: Mapping[str, Any]) -> tuple[list, list | None]:
        """ADK's actual and expected Invocations of the instance's turns (expected: None when no turn has one,
        as ADK's runner passes them). Raises ValueError when only some turns have one."""
        from google.adk.evaluation.eval_case import Invocation

        turns = trace_of(fields)
        actual = [Invocation.model_validate(_with_case_details(adk_invocation(t.get("prompt"), t, t.get("invocation_id")), t))
                  for t in turns]
        with_expected = [t for t in turns if isinstance(t.get("expected"), dict)]
        if not with_expected:
            return actual, None
        if len(with_expected) != len(turns):
            raise ValueError(f"{len(with_expected)} of {len(turns)} turns have an expected response: ADK needs one "
                             "for every turn or none")
        return actual, [Invocation.model_validate(adk_invocation(t.get("prompt"), t["expected"], None)) for t in turns]

    def prompts(self, fields: Mapping[str, Any]) -> list[str]:
        """The prompt of each turn, by ADK's format_auto_rater_prompt. Raises ValueError as ADK's evaluator
        would refuse the case (e.g. final_response_match_v2 with no expected invocation)."""
        actual, expected = self.invocations(fields)
        evaluator = self.evaluator()
        if expected is None and evaluator._expected_invocations_required:  # ADK's own flag (LlmAsJudge)
            raise ValueError(f"{self.name} needs the expected response of every turn (ADK: expected_invocations "
                             "is needed by this metric)")
        return [evaluator.format_auto_rater_prompt(a, None if expected is None else expected[i])
                for i, a in enumerate(actual)]

    # ------------------------------------------------------------ answers

    def score_answer(self, text: str):
        """One sample's answer text -> ADK's AutoRaterScore by its convert_auto_rater_response_to_score (score
        None: ADK read no label; rubric criteria: rubric_scores too, read against the effective rubrics of
        the turn last rendered in this thread, as ADK reads every answer of a case after rendering all)."""
        from google.adk.models.llm_response import LlmResponse
        from google.genai import types

        response = LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))
        return self.evaluator().convert_auto_rater_response_to_score(response)

    def aggregate(self, fields: Mapping[str, Any], turns: list[list | None],
                  threshold: float | None) -> tuple[float | None, list[float | None]]:
        """Each turn's sample scores (None for a turn whose judgment failed) -> (ADK's overall score, each
        turn's score), by the evaluator's own aggregation over samples and then over invocations."""
        from google.adk.evaluation.eval_metrics import EvalStatus
        from google.adk.evaluation.evaluator import PerInvocationResult
        from google.adk.evaluation.llm_as_judge_utils import get_eval_status

        actual, expected = self.invocations(fields)
        evaluator = self.evaluator()
        limit = threshold if threshold is not None else 0.5  # the status only; evalbeam applies its own threshold
        results = []
        for i, samples in enumerate(turns):
            exp = None if expected is None else expected[i]
            if samples is None:
                results.append(PerInvocationResult(actual_invocation=actual[i], expected_invocation=exp, score=None,
                                                   eval_status=EvalStatus.NOT_EVALUATED))
                continue
            per_sample = [PerInvocationResult(actual_invocation=actual[i], expected_invocation=exp, score=s.score,
                                              eval_status=get_eval_status(s.score, limit),
                                              rubric_scores=s.rubric_scores) for s in samples]
            results.append(evaluator.aggregate_per_invocation_samples(per_sample))
        overall = evaluator.aggregate_invocation_results(results)
        return overall.overall_score, [r.score for r in results]


def _with_case_details(invocation: dict[str, Any], turn: Mapping[str, Any]) -> dict[str, Any]:
    """The turn's ADK rubrics and app_details on its Invocation (what ADK's rubric judges read)."""
    for key in ("rubrics", "app_details"):
        if turn.get(key):
            invocation[key] = turn[key]
    return invocation


_PER_THREAD = threading.local()


def _evaluator(name: str, include_intermediate: bool, rubrics: str = "[]"):
    """ADK's evaluator of the criterion (its judge model is never called: evalbeam makes the calls)."""
    require_adk([name])
    from google.adk.evaluation import eval_metrics

    module, evaluator_class, criterion_class = ADK_JUDGE_CRITERIA[name]
    evaluator_type = getattr(importlib.import_module(f"google.adk.evaluation.{module}"), evaluator_class)
    fields: dict[str, Any] = {"threshold": 0.5, "include_intermediate_responses_in_final": include_intermediate}
    if name in RUBRIC_CRITERIA:
        fields["rubrics"] = json.loads(rubrics)
    criterion = getattr(eval_metrics, criterion_class).model_validate(fields)
    with warnings.catch_warnings():  # ADK marks its judges [EXPERIMENTAL] on every construction
        warnings.simplefilter("ignore", UserWarning)
        return evaluator_type(eval_metrics.EvalMetric(metric_name=name, threshold=0.5, criterion=criterion))



class AdkCriterionParams(pydantic.BaseModel):
    """The fields of ADK's LlmAsAJudgeCriterion that change what is judged (judge_model_options map onto
    judge settings: metrics.adk.judge_options)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    include_intermediate_responses_in_final: bool = pydantic.Field(
        False, description="judge the turn's intermediate natural-language text joined with its final response "
                           "(ADK's BaseCriterion field), for the response and the reference alike")


def _register_all() -> None:
    for name in (n for n in ADK_JUDGE_CRITERIA if n not in RUBRIC_CRITERIA):  # those: metrics.judge.rubric_library
        # google.adk is imported when the factory's judge is used (configs.MetricSpec checks it is there)
        register(name, kind="pointwise", inputs=(("response", "prompt", "reference"), ("invocations",)),
                 params=AdkCriterionParams, score_range="0..1",
                 description=f"ADK's {name}: google-adk's own evaluator renders each turn's prompt and reads the "
                             "answers (the agent extra); the case is ADK's aggregate over samples, then turns")(
            lambda p, name=name: AdkJudge(name, p.include_intermediate_responses_in_final))


_register_all()
