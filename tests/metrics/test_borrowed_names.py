"""No metric is named after one of Vertex's or ADK's unless it gives their score (issue 27).

The names Vertex AI and ADK use are read from the installed packages: the vertexai SDK of the
main environment (its Metric names, its published prompt templates, the metrics of the
evaluation service's EvaluateInstancesRequest) and, in .adk/, agentplatform's predefined
metrics and google-adk 2.13's PrebuiltMetrics. A registered metric whose name is one of them
must be in ALLOWED, mapped to the test that proves it gives the reference's score; every other
borrowed name is registered as evalbeam_<name> and the borrowed one refused (docs/metrics.md,
"Names shared with Vertex AI and ADK").
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import subprocess

import pytest

from evalbeam.metrics.catalog import all_metrics, get_metric
from evalbeam.metrics.registry import _REFUSED
from tests.helpers import ROOT

ADK_PYTHON = ROOT / ".adk" / "bin" / "python"
ADK_STAMP = ROOT / ".adk" / ".installed"  # the Makefile's: .adk/ is complete

_VERTEX_TEMPLATES = ("coherence", "fluency", "safety", "groundedness", "instruction_following", "verbosity",
                     "text_quality", "summarization_quality", "question_answering_quality",
                     "multi_turn_chat_quality", "multi_turn_safety")
_VERTEX_PROOF = "tests/metrics/judge/test_vertex_templates.py::test_a_run_sends_vertex_prompts_and_scores_as_vertex_parses"
_ADK_PROOF = "tests/metrics/test_adk_fidelity.py::test_every_case_and_criterion_agrees_with_adk"
_ADK_JUDGE_PROOF = "tests/metrics/judge/test_adk_judges.py::test_adks_own_prompts_answers_and_aggregation"
# Vertex's service computes these and publishes no code: METRICS.md (the project's contract where the
# service's behaviour is not public) defines them, and these tests check evalbeam against it (BLEU and ROUGE
# against sacrebleu and rouge-score, which METRICS.md names)
_SPEC_TEXT = "tests/metrics/test_text.py"
_SPEC_TRAJECTORY = "tests/metrics/test_trajectory.py::test_trajectory_metrics_table"
_SPEC_TOOL_CALL = "tests/metrics/test_tool_call.py"

# name -> the test that proves it gives the reference's score (a test file, or file::function)
ALLOWED: dict[str, str] = {
    # Vertex's published pointwise and pairwise prompts (vertexai's MetricPromptTemplateExamples)
    **{name: _VERTEX_PROOF for name in _VERTEX_TEMPLATES},
    **{f"pairwise_{name}": _VERTEX_PROOF for name in _VERTEX_TEMPLATES},
    # ADK's computed criteria
    "tool_trajectory_avg_score": _ADK_PROOF,
    "response_match_score": _ADK_PROOF,
    "tool_call_count_v1": _ADK_PROOF,
    "inference_call_count_v1": _ADK_PROOF,
    "token_usage_v1": _ADK_PROOF,
    "invocation_duration_v1": _ADK_PROOF,
    # ADK's judge criteria, rendered and scored by google-adk's own evaluators
    "final_response_match_v2": _ADK_JUDGE_PROOF,
    "rubric_based_final_response_quality_v1": _ADK_JUDGE_PROOF,
    "rubric_based_tool_use_quality_v1": _ADK_JUDGE_PROOF,
    "rubric_based_multi_turn_trajectory_quality_v1": _ADK_JUDGE_PROOF,
    "hallucinations_v1": _ADK_JUDGE_PROOF,
    "per_turn_user_simulator_quality_v1":
        "tests/metrics/agents/test_simulator.py::test_per_turn_user_simulator_quality_equals_adks",
    # Vertex's computation-based metrics, by METRICS.md's contract (see above)
    "exact_match": f"{_SPEC_TEXT}::test_exact_match_is_character_exact",
    "bleu": f"{_SPEC_TEXT}::test_bleu_is_bit_identical_to_sacrebleu_on_hard_texts",
    "rouge": f"{_SPEC_TEXT}::test_rouge_is_bit_identical_to_rouge_score_on_hard_texts",
    "rouge_1": f"{_SPEC_TEXT}::test_rouge_shorthands_match_rouge",
    "rouge_2": f"{_SPEC_TEXT}::test_rouge_shorthands_match_rouge",
    "rouge_l": f"{_SPEC_TEXT}::test_rouge_shorthands_match_rouge",
    "rouge_l_sum": f"{_SPEC_TEXT}::test_rouge_shorthands_match_rouge",
    "trajectory_exact_match": _SPEC_TRAJECTORY,
    "trajectory_in_order_match": _SPEC_TRAJECTORY,
    "trajectory_any_order_match": _SPEC_TRAJECTORY,
    "trajectory_precision": _SPEC_TRAJECTORY,
    "trajectory_recall": _SPEC_TRAJECTORY,
    "trajectory_single_tool_use": "tests/metrics/test_trajectory.py::test_single_tool_use",
    "tool_call_valid": f"{_SPEC_TOOL_CALL}::test_tool_call_valid",
    "tool_name_match": f"{_SPEC_TOOL_CALL}::test_tool_name_match_is_ordered",
    "tool_parameter_key_match": f"{_SPEC_TOOL_CALL}::test_parameter_key_match_pairs_by_position_with_matching_names",
    "tool_parameter_kv_match": f"{_SPEC_TOOL_CALL}::test_parameter_kv_match_strict_and_lenient",
    # the recorded values, passed through (no computation of evalbeam's)
    "latency_in_seconds": "tests/metrics/rows/test_instance.py::test_csv_cells_hold_json_and_numbers",
    "failure": "tests/metrics/rows/test_instance.py::test_csv_cells_hold_json_and_numbers",
}

# Read in .adk/: agentplatform's predefined metrics (the names its RubricMetric resolves, versioned and
# not) and google-adk's PrebuiltMetrics
_ADK_SCRIPT = r"""
import json, re
from agentplatform._genai import _evals_constant as c
from agentplatform._genai._evals_metric_loaders import PrebuiltMetricLoader
from google.adk.evaluation.eval_metrics import PrebuiltMetrics
vertex = set(c.SUPPORTED_PREDEFINED_METRICS) | set(c.METRIC_LATEST_SPEC_NAME)
vertex |= {re.sub(r"_v\d+$", "", n) for n in c.SUPPORTED_PREDEFINED_METRICS}
vertex |= {n.lower() for n, v in vars(PrebuiltMetricLoader).items() if isinstance(v, property)}
print(json.dumps({"vertex": sorted(vertex), "adk": sorted(m.value for m in PrebuiltMetrics)}))
"""


def _vertexai_names() -> set[str]:
    """Vertex's metric names in the main environment's google-cloud-aiplatform (vertexai SDK)."""
    from google.cloud.aiplatform_v1beta1.types import EvaluateInstancesRequest
    from vertexai.evaluation import constants
    from vertexai.evaluation.metrics.metric_prompt_template_examples import MetricPromptTemplateExamples

    # vertexai.preview.evaluation's package imports scikit-learn, which the main environment lacks: its
    # constants module alone is read (it imports nothing)
    path = pathlib.Path(constants.__file__).parent.parent / "preview" / "evaluation" / "constants.py"
    spec = importlib.util.spec_from_file_location("vertexai_preview_evaluation_constants", path)
    preview_constants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(preview_constants)

    names = {v for module in (constants, preview_constants) for k, v in vars(module.Metric).items()
             if not k.startswith("_") and isinstance(v, str)}
    names |= set(MetricPromptTemplateExamples.list_example_metric_names())
    names |= {f[:-len("_input")] for f in EvaluateInstancesRequest.meta.fields if f.endswith("_input")}
    return names


@pytest.fixture(scope="module")
def adk_names() -> dict[str, list[str]]:
    if not ADK_STAMP.exists():  # as the other tests of the `adk` tier: a missing environment fails
        pytest.fail("the ADK reference environment is missing: run `make adk-env` (or `make test`): google-adk 2.13.0 "
                    "and agentplatform in .adk/, whose metric names this test reads")
    result = subprocess.run([str(ADK_PYTHON), "-c", _ADK_SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _borrowed(reference: set[str]) -> list[str]:
    return sorted(d.name for d in all_metrics() if d.name in reference and d.name not in ALLOWED)


def test_no_registered_name_is_vertexs_but_those_proven():
    names = _vertexai_names()
    assert {"bleu", "coherence", "fulfillment", "trajectory_recall"} <= names  # the package was read
    assert _borrowed(names) == []


@pytest.mark.adk
def test_no_registered_name_is_agentplatforms_or_adks_but_those_proven(adk_names):
    vertex, adk = set(adk_names["vertex"]), set(adk_names["adk"])
    assert {"general_quality_v1", "multi_turn_task_success", "coherence"} <= vertex
    assert {"multi_turn_task_success_v1", "safety_v1", "tool_trajectory_avg_score"} <= adk
    assert _borrowed(vertex) == []
    assert _borrowed(adk) == []


def test_the_allow_list_names_registered_metrics_and_existing_tests():
    for name, proof in ALLOWED.items():
        get_metric(name)
        path, _, function = proof.partition("::")
        text = (ROOT / path).read_text()
        assert not function or re.search(rf"^def {function}\(", text, re.M), (name, proof)


def test_a_refused_name_names_evalbeams_own_metric():
    assert {"general_quality", "grounding_v1", "fulfillment", "multi_turn_task_success_v1",
            "multi_turn_trajectory_quality_v1", "multi_turn_tool_use_quality_v1", "safety_v1"} <= set(_REFUSED)
    for name in _REFUSED:
        with pytest.raises(KeyError) as e:
            get_metric(name)
        own = re.findall(r"\bevalbeam_\w+", str(e.value))
        assert own and all(get_metric(o) for o in own), (name, str(e.value))
