"""ADK's LLM-judge criteria, rendered and read by google-adk's own evaluators.

For a criterion listed in ADK_JUDGE_CRITERIA, evalbeam asks the judge what ADK
would ask and reads the answer as ADK reads it, by calling the installed
google-adk (the `agent` extra) on the workers:

  prompt      per turn, the evaluator's own `format_auto_rater_prompt(actual,
              expected)`, on ADK Invocation objects rebuilt from the trace turn
              (metrics.rows.adk_invocation), sent as free text (no response schema,
              as ADK sends it);
  answer      each sample's text through the evaluator's own
              `convert_auto_rater_response_to_score` (ADK's label parsing);
  aggregate   the evaluator's own `aggregate_per_invocation_samples` over a
              turn's samples (a turn whose judge call failed after retries is
              NOT_EVALUATED, as ADK does with a sample that raised), then its
              `aggregate_invocation_results` over the turns.

The call itself is evalbeam's (the one judge layer: quota, retries, cache,
accounting); `num_samples` is judge.sampling_count (configs.adk_expansion.judge_options
maps a test_config's judge_model_options onto it), one request per sample, as
ADK sends num_samples identical requests per invocation.

An AdkJudge is what the metric's factory returns: a small picklable value (the
criterion's name and fields); the evaluator is built lazily in each process.
The multi-turn trajectory criterion is an AdkJudge judged once, on the last turn,
after the evaluator has read the whole dialogue. hallucinations_v1 asks two
dependent questions per response step: AdkHallucinations, run by the rubric
stage's two stages (transforms.rubrics). ADK's criteria that Vertex's
hosted evaluation service scores (HOSTED_CRITERIA) are refused by name.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import statistics
import threading
import warnings
from typing import Any, Mapping

import pydantic

from evalbeam.metrics.rows.adk_invocation import adk_invocation
from evalbeam.metrics.judge.agent_views import Unit
from evalbeam.metrics.registry import refuse, register
from evalbeam.metrics.rows.trace import trace_of

# criterion -> (the module of google.adk.evaluation holding its evaluator, the evaluator class,
# the criterion class of eval_metrics)
ADK_JUDGE_CRITERIA: dict[str, tuple[str, str, str]] = {
    "final_response_match_v2": ("final_response_match_v2", "FinalResponseMatchV2Evaluator", "LlmAsAJudgeCriterion"),
    "rubric_based_final_response_quality_v1": ("rubric_based_final_response_quality_v1",
                                               "RubricBasedFinalResponseQualityV1Evaluator", "RubricsBasedCriterion"),
    "rubric_based_tool_use_quality_v1": ("rubric_based_tool_use_quality_v1", "RubricBasedToolUseV1Evaluator",
                                         "RubricsBasedCriterion"),
    "rubric_based_multi_turn_trajectory_quality_v1": (
        "rubric_based_multi_turn_trajectory_evaluator", "RubricBasedMultiTurnTrajectoryEvaluator", "RubricsBasedCriterion"),
    "hallucinations_v1": ("hallucinations_v1", "HallucinationsV1Evaluator", "HallucinationsCriterion"),
}
RUBRIC_CRITERIA = ("rubric_based_final_response_quality_v1", "rubric_based_tool_use_quality_v1",
                   "rubric_based_multi_turn_trajectory_quality_v1")
# judged once on the last turn with the whole dialogue (ADK: the turns before it NOT_EVALUATED)
CONVERSATION_CRITERIA = ("rubric_based_multi_turn_trajectory_quality_v1",)
# ADK's judge criteria that ADK 2.13 has scored by Vertex's hosted evaluation service (safety_evaluator.py,
# response_evaluator.py through vertex_ai_eval_facade.py: agentplatform's evals.evaluate with a predefined
# metric, whose prompt and scoring the service keeps): evalbeam cannot give their score, and refuses the names
HOSTED_CRITERIA = {  # name -> (who scores it so, with what)
    "safety_v1": ("Vertex AI and ADK 2.13", "Vertex's predefined metric safety_v1"),
    "response_evaluation_score": ("ADK 2.13", "Vertex's predefined metric coherence"),
    # multi_turn_*_evaluator.py: _MultiTurnVertexiAiEvalFacade with vertexai.types.RubricMetric.MULTI_TURN_*
    "multi_turn_task_success_v1": ("Vertex AI and ADK 2.13", "Vertex's predefined metric multi_turn_task_success_v1"),
    "multi_turn_trajectory_quality_v1": ("Vertex AI and ADK 2.13",
                                         "Vertex's predefined metric multi_turn_trajectory_quality_v1"),
    "multi_turn_tool_use_quality_v1": ("Vertex AI and ADK 2.13",
                                       "Vertex's predefined metric multi_turn_tool_use_quality_v1"),
}
# evalbeam's own prompts for the same criteria stay available under these names
EVALBEAM_NAMES = {name: f"evalbeam_{name}" for name in (*ADK_JUDGE_CRITERIA, *HOSTED_CRITERIA)}
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
        case's turns are rendered, then its answers read, in one thread (metrics.judge.verdicts.adk_row)."""
        cache = _PER_THREAD.__dict__.setdefault("evaluators", {})
        key = (self.name, self.include_intermediate_responses_in_final, self.rubrics)
        if key not in cache:
            cache[key] = _evaluator(*key)
        return cache[key]

    # ------------------------------------------------------------ prompts

    def invocations(self, fields: Mapping[str, Any]) -> tuple[list, list | None]:
        return adk_invocations(fields)

    def judged(self, fields: Mapping[str, Any]) -> tuple[list, list | None]:
        """The invocations ADK's LLM judge is asked about, and their expected ones: every turn; for a
        conversation criterion the last one only, after the evaluator has read the whole dialogue (its own
        _assemble_dialogue_history, as its evaluate_invocations does first)."""
        actual, expected = self.invocations(fields)
        if self.name not in CONVERSATION_CRITERIA:
            return actual, expected
        if not actual:
            raise ValueError("the case has no turn (ADK evaluates nothing)")
        self.evaluator()._assemble_dialogue_history(actual)
        return actual[-1:], None if expected is None else expected[-1:]

    def prompts(self, fields: Mapping[str, Any]) -> list[str]:
        """The prompt of each judged turn, by ADK's format_auto_rater_prompt. Raises ValueError as ADK's
        evaluator would refuse the case (e.g. final_response_match_v2 with no expected invocation)."""
        actual, expected = self.judged(fields)
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
        """Each judged turn's sample scores (None for a turn whose judgment failed) -> (ADK's overall score,
        each turn's score), by the evaluator's own aggregation over samples and then over invocations (a
        conversation criterion: over its last turn; the turns before it are not evaluated, None)."""
        from google.adk.evaluation.eval_metrics import EvalStatus
        from google.adk.evaluation.evaluator import PerInvocationResult
        from google.adk.evaluation.llm_as_judge_utils import get_eval_status

        actual, expected = self.judged(fields)
        before = len(trace_of(fields)) - len(actual)
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
        return overall.overall_score, [None] * before + [r.score for r in results]


def adk_invocations(fields: Mapping[str, Any]) -> tuple[list, list | None]:
    """ADK's actual and expected Invocations of the instance's turns (expected: None when no turn has one,
    as ADK's runner passes them). Raises ValueError when only some turns have one."""
    from google.adk.evaluation.eval_case import Invocation

    turns = trace_of(fields)
    actual = [Invocation.model_validate(_with_case_details(
        adk_invocation(t.get("prompt"), t, t.get("invocation_id"), t.get("prompt_parts")), t)) for t in turns]
    with_expected = [t for t in turns if isinstance(t.get("expected"), dict)]
    if not with_expected:
        return actual, None
    if len(with_expected) != len(turns):
        raise ValueError(f"{len(with_expected)} of {len(turns)} turns have an expected response: ADK needs one "
                         "for every turn or none")
    return actual, [Invocation.model_validate(adk_invocation(t.get("prompt"), t["expected"], None,
                                                             t.get("prompt_parts"))) for t in turns]


@dataclasses.dataclass(frozen=True)
class AdkHallucinations:
    """ADK's hallucinations_v1 as configured: what the rubric stage (transforms.rubrics) asks in its two
    dependent steps, each rendered and read by google-adk's HallucinationsV1Evaluator, as its
    _evaluate_nl_response does for every step its _get_steps_to_evaluate finds:

      segment    per step (a natural-language response and the context before it), the evaluator's
                 segmenter_prompt; the answer's sentences by ADK's _parse_sentences;
      validate   the evaluator's sentence_validator_prompt with the step's context and those sentences;
                 the answer's blocks by ADK's _parse_validation_results, each label scored as ADK does;
                 the step's score is their mean (None: no label, no sentence, or a failed call);
      aggregate  each turn the mean of its steps' scores (None when none), then the evaluator's own
                 _aggregate_invocation_results over the turns.

    Free text, no response schema and one request per step and stage, as ADK asks (it does not sample)."""

    name: str = "hallucinations_v1"
    evaluate_intermediate_nl_responses: bool = False
    kind = "adk_segmented"
    unit = "step"

    def samples(self, sampling_count: int) -> int:
        return 1

    def evaluator(self):
        cache = _PER_THREAD.__dict__.setdefault("evaluators", {})
        key = (self.name, False, "[]", self.evaluate_intermediate_nl_responses)
        if key not in cache:
            cache[key] = _evaluator(*key)
        return cache[key]

    def units(self, fields: Mapping[str, Any]) -> list:
        """One Unit per step ADK evaluates (fields: the step's response and context), and one skipped Unit
        for a turn with none (ADK: NOT_EVALUATED). Raises ValueError as ADK refuses the case."""
        actual, _ = adk_invocations(fields)
        evaluator = self.evaluator()
        units = []
        for t, invocation in enumerate(actual):
            steps = evaluator._get_steps_to_evaluate(invocation)
            if not steps:
                units.append(Unit(t, None, {}, skip="no response to check (ADK: not evaluated)"))
            units += [Unit(t, s, {"nl_response": step.nl_response, "context": step.context})
                      for s, step in enumerate(steps)]
        return units

    def render_generation(self, fields: Mapping[str, Any]) -> str:
        return self.evaluator().segmenter_prompt.format(response=fields["nl_response"])

    def generation_key(self, prompt: str) -> str:
        """Never an earlier run's pinned rubrics: ADK segments every time."""
        return "adk:" + hashlib.sha256(prompt.encode("utf-8")).hexdigest()

    def sentences(self, answer: str) -> list[str]:
        return _hallucinations_module()._parse_sentences(answer)

    def render_validation(self, fields: Mapping[str, Any], sentences: list[str]) -> str:
        listed = "\n".join(f"<sentence>{s}</sentence>" for s in sentences)  # as _evaluate_nl_response lists them
        return self.evaluator().sentence_validator_prompt.format(context=fields["context"], sentences=listed)

    def read_validation(self, answer: str) -> tuple[float | None, list[dict[str, Any]]]:
        """The step's score as ADK reads the validator's answer (None: no block with a label ADK knows), and
        the blocks ADK parsed ({sentence, label, rationale, ...})."""
        module = _hallucinations_module()
        results = module._parse_validation_results(answer)
        scores = []
        for result in results:
            label = (result.get("label") or "").strip().lower()
            if label in module._POSITIVE_LABELS:
                scores.append(1)
            elif label in module._NEGATIVE_LABELS:
                scores.append(0)
        return (statistics.mean(scores) if scores else None), results

    def aggregate(self, fields: Mapping[str, Any], step_scores: list[tuple[int, float | None]]
                  ) -> tuple[float | None, list[float | None]]:
        """(turn, step score) of every step -> (ADK's overall score, each turn's score)."""
        from google.adk.evaluation.eval_metrics import EvalStatus
        from google.adk.evaluation.evaluator import PerInvocationResult

        actual, expected = adk_invocations(fields)
        results = []
        for t, invocation in enumerate(actual):
            scores = [s for turn, s in step_scores if turn == t and s is not None]
            score = statistics.mean(scores) if scores else None  # as evaluate_invocations averages a turn's steps
            results.append(PerInvocationResult(
                actual_invocation=invocation, expected_invocation=None if expected is None else expected[t],
                score=score, eval_status=EvalStatus.NOT_EVALUATED if score is None else EvalStatus.PASSED))
        overall = self.evaluator()._aggregate_invocation_results(results)
        return overall.overall_score, [r.score for r in results]


def _hallucinations_module():
    return importlib.import_module("google.adk.evaluation.hallucinations_v1")


def _with_case_details(invocation: dict[str, Any], turn: Mapping[str, Any]) -> dict[str, Any]:
    """The turn's ADK rubrics and app_details on its Invocation (what ADK's rubric judges read)."""
    for key in ("rubrics", "app_details"):
        if turn.get(key):
            invocation[key] = turn[key]
    return invocation


_PER_THREAD = threading.local()


def _evaluator(name: str, include_intermediate: bool, rubrics: str = "[]", intermediate_steps: bool = False):
    """ADK's evaluator of the criterion (its judge model is never called: evalbeam makes the calls)."""
    require_adk([name])
    from google.adk.evaluation import eval_metrics

    module, evaluator_class, criterion_class = ADK_JUDGE_CRITERIA[name]
    evaluator_type = getattr(importlib.import_module(f"google.adk.evaluation.{module}"), evaluator_class)
    fields: dict[str, Any] = {"threshold": 0.5, "include_intermediate_responses_in_final": include_intermediate}
    if name in RUBRIC_CRITERIA:
        fields["rubrics"] = json.loads(rubrics)
    if name == "hallucinations_v1":
        fields["evaluate_intermediate_nl_responses"] = intermediate_steps
    criterion = getattr(eval_metrics, criterion_class).model_validate(fields)
    with warnings.catch_warnings():  # ADK marks its judges [EXPERIMENTAL] on every construction
        warnings.simplefilter("ignore", UserWarning)
        return evaluator_type(eval_metrics.EvalMetric(metric_name=name, threshold=0.5, criterion=criterion))



class AdkCriterionParams(pydantic.BaseModel):
    """The fields of ADK's LlmAsAJudgeCriterion that change what is judged (judge_model_options map onto
    judge settings: configs.adk_expansion.judge_options)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    include_intermediate_responses_in_final: bool = pydantic.Field(
        False, description="judge the turn's intermediate natural-language text joined with its final response "
                           "(ADK's BaseCriterion field), for the response and the reference alike")


def _refuse_hosted() -> None:
    for name, (who, metric) in HOSTED_CRITERIA.items():
        refuse(name, f"{who} score it with {metric}, on Vertex's hosted evaluation service: "
                     "the service's own prompt and scoring, which it does not publish and evalbeam's judge layer "
                     "cannot ask for, so evalbeam cannot give its score under this name. evalbeam's own prompt for "
                     f"it is {EVALBEAM_NAMES[name]} (not ADK's score)")


def _register_all() -> None:
    # rubric criteria and hallucinations_v1: metrics.judge.rubric_library
    for name in (n for n in ADK_JUDGE_CRITERIA if n not in RUBRIC_CRITERIA and n != "hallucinations_v1"):
        # google.adk is imported when the factory's judge is used (configs.MetricSpec checks it is there)
        register(name, kind="pointwise", inputs=(("response", "prompt", "reference"), ("invocations",)),
                 params=AdkCriterionParams, score_range="0..1",
                 description=f"ADK's {name}: google-adk's own evaluator renders each turn's prompt and reads the "
                             "answers (the agent extra); the case is ADK's aggregate over samples, then turns")(
            lambda p, name=name: AdkJudge(name, p.include_intermediate_responses_in_final))


_refuse_hosted()
_register_all()
