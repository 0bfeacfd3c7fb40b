"""ADK evaluation criteria, with google-adk 2.13.0's exact semantics.

A case is one instance; its turns are its trace (`metrics.rows.trace.trace_of`:
the `invocations` field, else the flat row as one turn). Each criterion is
computed per turn and aggregated per case as ADK does it; the per-turn values
go to the result's `extra`. Where ADK reports no score (a metric that raised,
an efficiency value that is n/a), the row carries an error saying why.

Re-implemented here rather than imported: google-adk weighs about a gigabyte
with its dependencies and would have to be on every worker. The fidelity test
(tests/metrics/test_adk_fidelity.py) compares these with ADK's own evaluators, run in a
separate environment, on generated cases covering every rule.
"""
from __future__ import annotations

import unicodedata
from typing import Any, Callable, Literal, Mapping, Optional

import pydantic

from evalbeam.metrics.registry import MetricError, MetricValue, register
from evalbeam.metrics.rows.trace import trace_of

# Reported by ADK on every eval; they never pass or fail, and ADK refuses a threshold on them.
INFORMATIONAL_CRITERIA = ("tool_call_count_v1", "token_usage_v1", "inference_call_count_v1", "invocation_duration_v1")
AGENT_INPUTS = (("invocations",),)


MATCH_TYPES = ("EXACT", "IN_ORDER", "ANY_ORDER")  # ToolTrajectoryCriterion.MatchType, values 0, 1, 2


class TrajectoryCriterionParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    match_type: Literal["EXACT", "IN_ORDER", "ANY_ORDER"] = "EXACT"
    ignore_args: bool = False

    @pydantic.field_validator("match_type", mode="before")
    @classmethod
    def _coerce(cls, value: Any) -> Any:
        # As ToolTrajectoryCriterion._coerce_match_type: case-insensitive, '-' and ' ' as '_';
        # and ADK's enum values 0, 1, 2.
        if isinstance(value, str):
            return value.strip().upper().replace("-", "_").replace(" ", "_")
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 3:
            return MATCH_TYPES[value]
        return value


# --- pairing turns ----------------------------------------------------------


def _actual(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in turns if "tool_calls" in t]


def _pairs(fields: Mapping[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(actual turn, expected side) pairs; ADK 2.13 refuses cases whose counts differ."""
    turns = trace_of(fields)
    actual = _actual(turns)
    expected = [t["expected"] for t in turns if "expected" in t]
    if not expected:
        raise MetricError("the case has no expected turns, which this criterion compares with")
    if not actual:
        raise MetricError("the case has no actual turns: an eval set holds the expected conversation only, "
                          "the actual one comes from running the agent (e.g. `adk eval`, whose result file "
                          "evalbeam reads as adk_eval_result)")
    if len(actual) != len(expected):
        raise MetricError("actual_invocations and expected_invocations must have the same length; "
                          f"got {len(actual)} and {len(expected)}.")
    for i, turn in enumerate(turns):
        if ("tool_calls" in turn) != ("expected" in turn):
            raise MetricError(f"turn {i} has an {'actual' if 'tool_calls' in turn else 'expected'} side only")
    return [(t, t["expected"]) for t in turns]


def _case(per_turn: list[float]) -> MetricValue:
    """ADK's case score: the arithmetic mean over turns, summed in order."""
    if not per_turn:
        raise MetricError("the case has no turns to evaluate")
    total = 0.0
    for value in per_turn:
        total += value
    return MetricValue(total / len(per_turn), extra={"per_invocation": per_turn} if len(per_turn) > 1 else None)


# --- tool_trajectory_avg_score (trajectory_evaluator.py) ---------------------
# Calls compare by name and args with Python ==, as ADK compares
# genai FunctionCall.args: 1 == 1.0 and True == 1, "1" != 1, absent args != {}.


def _same(actual: dict, expected: dict, ignore_args: bool) -> bool:
    return actual["tool_name"] == expected["tool_name"] and (
        ignore_args or actual.get("tool_input") == expected.get("tool_input"))


def exact_match(actual: list, expected: list, ignore_args: bool) -> bool:
    if len(actual) != len(expected):
        return False
    return all(_same(a, e, ignore_args) for a, e in zip(actual, expected))


def in_order_match(actual: list, expected: list, ignore_args: bool) -> bool:
    if not expected:
        return True
    if not actual:
        return False
    expected_it = iter(expected)
    current = next(expected_it)
    for call in actual:
        if _same(call, current, ignore_args):
            current = next(expected_it, None)
            if current is None:
                return True
    return False


def any_order_match(actual: list, expected: list, ignore_args: bool) -> bool:
    if not expected:
        return True
    if not actual:
        return False
    remaining = list(actual)
    for want in expected:
        for i, call in enumerate(remaining):
            if _same(call, want, ignore_args):
                remaining.pop(i)
                break
        else:
            return False
    return True


_MATCHERS: dict[str, Callable[[list, list, bool], bool]] = {
    "EXACT": exact_match, "IN_ORDER": in_order_match, "ANY_ORDER": any_order_match,
}


@register(
    "tool_trajectory_avg_score",
    kind="adk",
    inputs=(("predicted_trajectory", "reference_trajectory"), ("invocations",)),
    params=TrajectoryCriterionParams,
    score_range="0..1",
    default_threshold=1.0,
    description="ADK: per turn 1 if the actual tool calls match the expected ones (match_type EXACT | IN_ORDER | "
                "ANY_ORDER, ignore_args), mean per case",
)
def _tool_trajectory_avg_score(params: TrajectoryCriterionParams):
    match = _MATCHERS[params.match_type]

    def score(fields):
        return _case([1.0 if match(a["tool_calls"], e.get("tool_calls", []), params.ignore_args) else 0.0
                      for a, e in _pairs(fields)])

    return score


# --- response_match_score (final_response_match_v1.py) -----------------------


# Unicode blocks, as (first, last) code points. Each character of the first kind is a word of its
# own; in the second, a word starts at each character that is not a combining mark.
_ONE_CHARACTER_WORDS = ((0x3040, 0x309F), (0x30A0, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF))  # kana, CJK, Hangul
_CLUSTER_WORDS = ((0x0E00, 0x0E7F), (0x0E80, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF))  # Thai, Lao, Myanmar, Khmer


def _in_blocks(code: int, blocks: tuple[tuple[int, int], ...]) -> bool:
    return any(first <= code <= last for first, last in blocks)


class UnicodeAwareTokenizer:
    """The tokens ADK 2.13's response_match_score (final_response_match_v1) gives rouge-score:
    the text NFKC-normalised and lower-cased is cut into words, which are runs of letters, digits
    and combining marks; a kana, CJK or Hangul character is a word by itself, and in Thai, Lao,
    Myanmar and Khmer text each character but a combining mark begins a new word. An ASCII word
    then goes through rouge-score's own tokenizer (Porter stemmer, [a-z0-9] only); any other word
    is a token as it is. Here because ADK is not a dependency of the workers (see the module
    docstring); tests/metrics/test_adk_fidelity.py compares the scores with ADK's own."""

    def __init__(self, use_stemmer: bool = True):
        from rouge_score import tokenizers  # start-up time: rouge-score (and NLTK) only for response_match_score

        self._ascii_words = tokenizers.DefaultTokenizer(use_stemmer)

    @staticmethod
    def words(text: str) -> list[str]:
        words: list[str] = []
        word = ""
        for char in unicodedata.normalize("NFKC", text).lower():
            code = ord(char)
            is_mark = unicodedata.category(char).startswith("M")
            if _in_blocks(code, _ONE_CHARACTER_WORDS):
                words += [word, char] if word else [char]
                word = ""
            elif _in_blocks(code, _CLUSTER_WORDS) and not is_mark:
                if word:
                    words.append(word)
                word = char
            elif is_mark or char.isalnum():
                word += char
            elif word:
                words.append(word)
                word = ""
        return words + [word] if word else words

    def tokenize(self, text: str) -> list[str]:
        tokens: list[str] = []
        for word in self.words(text):
            if word.isascii():
                tokens += self._ascii_words.tokenize(word)
            else:
                tokens.append(word)
        return tokens


def make_adk_rouge1():
    """(reference, candidate) -> ROUGE-1 F-measure, as ADK's RougeEvaluator scores a turn."""
    from rouge_score import rouge_scorer  # start-up time: rouge-score (and NLTK) only for response_match_score

    scorer = rouge_scorer.RougeScorer(["rouge1"], tokenizer=UnicodeAwareTokenizer(use_stemmer=True))
    return lambda reference, candidate: scorer.score(reference, candidate)["rouge1"].fmeasure


@register(
    "response_match_score",
    kind="adk",
    inputs=(("response", "reference"), ("invocations",)),
    score_range="0..1",
    default_threshold=0.8,
    description="ADK: ROUGE-1 F-measure of each turn's final response against the expected one, with ADK's "
                "Unicode-aware stemming tokenizer, mean per case",
)
def _response_match_score(_params):
    rouge1 = make_adk_rouge1()

    def score(fields):
        values = []
        for i, (actual, expected) in enumerate(_pairs(fields)):
            response, reference = actual.get("response"), expected.get("response")
            if response is None or reference is None:
                raise MetricError(f"invocation {i} has no {'response' if response is None else 'reference'}")
            values.append(rouge1(reference, response))
        return _case(values)

    return score


# --- efficiency criteria (_efficiency_evaluators.py): informational ----------


def _actual_turns(fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    turns = _actual(trace_of(fields))
    if not turns:
        raise MetricError("n/a: the case has no actual turns")
    return turns


def _mean_of_present(per_turn: list[Optional[float]], what: str) -> MetricValue:
    values = [v for v in per_turn if v is not None]
    if not values:
        raise MetricError(f"n/a: no turn {what}")
    return MetricValue(sum(values) / len(values), extra={"per_invocation": per_turn} if len(per_turn) > 1 else None)


def _efficiency(name: str, description: str, inputs=AGENT_INPUTS):
    return register(name, kind="adk", inputs=inputs, score_range=">=0", direction="lower",
                    description=f"ADK (informational, no threshold): {description}")


@_efficiency("tool_call_count_v1", "tool calls per turn, mean per case",
             inputs=(("invocations",), ("predicted_trajectory",)))
def _tool_call_count(_params):
    return lambda fields: _mean_of_present(
        [float(len(t["tool_calls"])) for t in _actual_turns(fields)], "has tool calls")


def _is_model_call(event: dict[str, Any]) -> bool:
    return "usage" in event or "model_version" in event


@_efficiency("inference_call_count_v1",
             "model calls per turn (events with usage metadata or a model version), mean per case")
def _inference_call_count(_params):
    def score(fields):
        per_turn = [float(sum(_is_model_call(e) for e in t["events"])) if "events" in t else None
                    for t in _actual_turns(fields)]
        return _mean_of_present(per_turn, "recorded its events (invocation_events)")

    return score


def _add(total: Optional[int], count: Optional[int]) -> Optional[int]:
    return total if count is None else (total or 0) + count


def turn_token_usage(turn: dict[str, Any]) -> dict[str, Optional[int]]:
    """A turn's token counts summed over its model calls, ADK's TokenUsageDetails
    (a count no call reported stays None)."""
    totals: dict[str, Optional[int]] = dict.fromkeys(
        ("input_tokens", "prompt_tokens", "cached_tokens", "tool_use_tokens", "output_tokens", "candidates_tokens",
         "reasoning_tokens", "total_tokens"))
    for event in turn.get("events", []):
        usage = event.get("usage")
        if usage is None:
            continue
        prompt, tool = usage.get("prompt_token_count"), usage.get("tool_use_prompt_token_count")
        candidates, thoughts = usage.get("candidates_token_count"), usage.get("thoughts_token_count")
        input_tokens = None if prompt is None and tool is None else (prompt or 0) + (tool or 0)
        output_tokens = None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
        for key, count in (("input_tokens", input_tokens), ("prompt_tokens", prompt),
                           ("cached_tokens", usage.get("cached_content_token_count")), ("tool_use_tokens", tool),
                           ("output_tokens", output_tokens), ("candidates_tokens", candidates),
                           ("reasoning_tokens", thoughts)):
            totals[key] = _add(totals[key], count)
    if totals["input_tokens"] is not None or totals["output_tokens"] is not None:
        totals["total_tokens"] = (totals["input_tokens"] or 0) + (totals["output_tokens"] or 0)
    return totals


@_efficiency("token_usage_v1", "tokens per turn (input + output over its model calls), mean per case")
def _token_usage(_params):
    def score(fields):
        details = [turn_token_usage(t) for t in _actual_turns(fields)]
        # ADK averages each count over every turn, a turn not reporting it counting 0
        averaged = {}
        for key in details[0]:
            present = [d[key] for d in details if d[key] is not None]
            averaged[key] = sum(present) / len(details) if present else None
        if averaged["total_tokens"] is None:
            raise MetricError("n/a: no turn recorded token usage (usage_metadata)")
        extra = {"token_usage": {k: v for k, v in averaged.items() if v is not None}}
        if len(details) > 1:
            extra["per_invocation"] = [d["total_tokens"] for d in details]
        return MetricValue(averaged["total_tokens"], extra=extra)

    return score


@_efficiency("invocation_duration_v1", "seconds per turn where measured, mean per case (rounded to ms, as ADK)")
def _invocation_duration(_params):
    def score(fields):
        per_turn = [t.get("duration", {}).get("total") for t in _actual_turns(fields)]
        present = [v for v in per_turn if v is not None]
        if not present:
            raise MetricError("n/a: no turn has a measured duration")
        return MetricValue(round(sum(present) / len(present), 3),
                           extra={"per_invocation": per_turn} if len(per_turn) > 1 else None)

    return score


# --- the case verdict (local_eval_service.py _generate_final_eval_status) ------

PASSED, FAILED, NOT_EVALUATED, INFORMATIONAL = "PASSED", "FAILED", "NOT_EVALUATED", "INFORMATIONAL"
CASE_STATUS = "adk_case_status"


def criterion_status(name: str, error: Any, passed: Optional[bool]) -> str:
    """ADK's EvalStatus of one criterion's result on a case."""
    if name in INFORMATIONAL_CRITERIA:
        return INFORMATIONAL
    if error is not None or passed is None:
        return NOT_EVALUATED
    return PASSED if passed else FAILED


def case_status(statuses: list[str]) -> str:
    """Any FAILED fails the case; else any PASSED passes it; a case with no
    criterion evaluated (all errored or informational) is NOT_EVALUATED."""
    if FAILED in statuses:
        return FAILED
    return PASSED if PASSED in statuses else NOT_EVALUATED


# --- per_turn_user_simulator_quality_v1 (simulation/per_turn_user_simulator_quality_v1.py) ----------


class SimulatorQualityParams(pydantic.BaseModel):
    """LlmBackedUserSimulatorCriterion's own field (judge_model_options become judge settings)."""
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    stop_signal: str = "</finished>"


@register("per_turn_user_simulator_quality_v1", kind="simulator_quality", inputs=AGENT_INPUTS,
          params=SimulatorQualityParams,
          description="ADK: whether the simulated user of a conversation_scenario case kept to the scenario: the "
                      "first turn is the starting prompt, each later user turn and the conversation's end are "
                      "judged by an LLM with ADK's verifier prompt (majority of judge.sampling_count samples); the "
                      "share of turns that passed")
def _per_turn_user_simulator_quality(params: SimulatorQualityParams):
    return params  # judged in its own stage (transforms.simulator_quality), through the judge layer
