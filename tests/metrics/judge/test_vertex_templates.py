"""The metrics named after Vertex AI's render Vertex's own templates, read from the
installed google-cloud-aiplatform, and read the judge's answer as Vertex does.

The reference is Vertex's own code: its request builder (`_instance_evaluation.
build_request`, which picks the template text and the row's inputs it sends the
evaluation service) and its PromptTemplate.assemble (Vertex's substitution of the
template's variables); and for the answer, its `handle_response`, which reads the
evaluation service's pointwise score / pairwise choice and explanation."""
import json
import random

import pytest
from vertexai.evaluation import _base as vertex_base
from vertexai.evaluation.metrics import _instance_evaluation
from vertexai.evaluation.metrics.metric_prompt_template_examples import MetricPromptTemplateExamples
from vertexai.evaluation.metrics.pairwise_metric import PairwiseMetric
from vertexai.evaluation.metrics.pointwise_metric import PointwiseMetric
from vertexai.evaluation.prompt_template import PromptTemplate
from google.cloud.aiplatform_v1.types import evaluation_service as gapic

from evalbeam.metrics.judge.vertex_templates import VERTEX_METRICS, vertex_template
from evalbeam.metrics.catalog import get_metric
from tests.helpers import table
from tests.helpers import evalbeam as run_evalbeam
from tests.servers.judge_server import JudgeServer
from tests.metrics.judge.test_judge import KEY, judge_config, write_data

# The service's choice for the template's A (baseline_model_response) and B (response)
SERVICE_CHOICE = {"A": "BASELINE", "B": "CANDIDATE", "SAME": "TIE"}


@pytest.fixture(scope="module", autouse=True)
def vertex_project():
    import vertexai  # build_request reads the project and location vertexai.init sets (nothing is called)
    vertexai.init(project="evalbeam-test", location="us-central1")


def _text(rng: random.Random) -> str:
    pieces = ["Hello", "wörld", "数据", "\n", "  ", '"quoted"', "{x}", "{", "}", "{{json}}", "#", "\\n", "tab\t",
              "$1", "%s", "😀", "</s>", "## Heading", "```code```", ""]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))


def _rows(seed: int, n: int):
    rng = random.Random(seed)
    return [{"prompt": _text(rng), "response": _text(rng), "baseline_model_response": _text(rng),
             "history": _text(rng)} for _ in range(n)]


def _vertex_prompt(metric, row) -> str:
    """The prompt Vertex's evaluation service judges: the template text and the inputs
    Vertex's own request builder sends, assembled by Vertex's PromptTemplate."""
    variables = PromptTemplate(metric.metric_prompt_template).variables
    config = vertex_base.EvaluationRunConfig(dataset=None, metrics=[metric], metric_column_mapping={v: v for v in variables},
                                             client=None, evaluation_service_qps=1.0, retry_timeout=1.0)
    request = _instance_evaluation.build_request(metric, row, config)
    given = request.pointwise_metric_input if isinstance(metric, PointwiseMetric) else request.pairwise_metric_input
    inputs = json.loads(given.instance.json_instance)
    return str(PromptTemplate(given.metric_spec.metric_prompt_template).assemble(**inputs))


@pytest.mark.parametrize("name", sorted(VERTEX_METRICS))
def test_the_prompt_is_vertex_own_rendering(name):
    pointwise = PointwiseMetric(metric=name, metric_prompt_template=MetricPromptTemplateExamples.get_prompt_template(name))
    pairwise = PairwiseMetric(metric=f"pairwise_{name}",
                              metric_prompt_template=MetricPromptTemplateExamples.get_prompt_template(f"pairwise_{name}"))
    ours = get_metric(name).factory(None)
    assert get_metric(f"pairwise_{name}").factory(None) == ours
    for row in _rows(hash(name) % 1000, 40):
        assert ours.render_pointwise(row) == _vertex_prompt(pointwise, row)
        # evalbeam asks a pairwise judgment in both orders: A the baseline, then A the candidate
        assert ours.render_pairwise(row, swapped=False) == _vertex_prompt(pairwise, row)
        flipped = {**row, "response": row["baseline_model_response"], "baseline_model_response": row["response"]}
        assert ours.render_pairwise(row, swapped=True) == _vertex_prompt(pairwise, flipped)


@pytest.mark.parametrize("name", sorted(VERTEX_METRICS))
def test_the_scale_inputs_and_answer_fields_are_vertex(name):
    t = vertex_template(name)
    text = MetricPromptTemplateExamples.get_prompt_template(name)
    rubric = text.split("## Rating Rubric\n")[1].split("\n\n")[0]
    assert [line.split()[0].strip(":") for line in rubric.splitlines() if line.strip()] == list(t.rating_rubric)
    assert {"response", *t.input_variables} == PromptTemplate(text).variables
    assert t.pointwise_schema()["properties"]["score"]["enum"] == list(t.rating_rubric)
    assert t.pairwise_schema()["required"] == ["explanation", "pairwise_choice"]  # the field Vertex's text names
    assert "pairwise_choice field" in MetricPromptTemplateExamples.get_prompt_template(f"pairwise_{name}")
    assert get_metric(name).score_range == VERTEX_METRICS[name][1]
    # evalbeam's own prompt keeps its own name
    assert "evalbeam's prompt" in get_metric(f"evalbeam_{name}").description
    assert get_metric(f"evalbeam_{name}").factory(get_metric(f"evalbeam_{name}").params()).source == "evalbeam"


def test_a_value_is_filled_once():
    # Vertex's assemble replaces variable after variable; evalbeam fills in one pass, so a
    # response quoting "{prompt}" is shown as written (the only case in which the two differ)
    t = vertex_template("fluency")
    prompt = t.render_pointwise({"prompt": "P", "response": "I echo {prompt} and {response}"})
    assert prompt.endswith("## AI-generated Response\nI echo {prompt} and {response}\n")
    assert "### Prompt\nP\n" in prompt


def _vertex_parse(answer_text: str, pairwise: bool):
    """What Vertex's SDK reads from the evaluation service's answer with the judge's values."""
    answer = json.loads(answer_text)
    if pairwise:
        result = gapic.PairwiseMetricResult(pairwise_choice=SERVICE_CHOICE[answer["pairwise_choice"]],
                                            explanation=answer["explanation"])
        return _instance_evaluation.handle_response(gapic.EvaluateInstancesResponse(pairwise_metric_result=result))
    result = gapic.PointwiseMetricResult(score=float(answer["score"]), explanation=answer["explanation"])
    return _instance_evaluation.handle_response(gapic.EvaluateInstancesResponse(pointwise_metric_result=result))


@pytest.mark.slow
def test_a_run_sends_vertex_prompts_and_scores_as_vertex_parses(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    rows = [
        {"id": "a", "prompt": "Greet {politely}", "response": "Hello! #score=1 #score=4 #score=-1 #quality=4",
         "baseline_model_response": "hi #quality=2", "history": "user: hi\nmodel: hello"},
        {"id": "b", "prompt": "Explain", "response": "Long text #score=2 #score=1 #quality=1",
         "baseline_model_response": "Short #quality=3", "history": "user: explain"},
        {"id": "c", "prompt": "Summarize", "response": "A summary #score=0 #quality=2",
         "baseline_model_response": "A summary too #quality=2 #bias", "history": "(none)"},
    ]
    metrics = ["fluency", "verbosity", "multi_turn_safety", "pairwise_fluency"]
    with JudgeServer() as server:
        run_evalbeam("run", judge_config(tmp_path, write_data(tmp_path, rows), server.url, metrics))
        asked = set(server.stats.prompts)
        fields = dict(server.stats.answer_fields)
        got = {(r["instance_id"], r["metric"]): r for r in table(tmp_path / "out" / "j1", "metric_results")}

        expected, scores = set(), {}
        for row in rows:
            for name in metrics:
                base = name.removeprefix("pairwise_")
                template = MetricPromptTemplateExamples.get_prompt_template(name)
                if name.startswith("pairwise_"):
                    metric = PairwiseMetric(metric=name, metric_prompt_template=template)
                    flipped = {**row, "response": row["baseline_model_response"], "baseline_model_response": row["response"]}
                    prompts = [_vertex_prompt(metric, row), _vertex_prompt(metric, flipped)]
                    schema = vertex_template(base).pairwise_schema()
                    normal, swapped = (_vertex_parse(server.answer(p, schema), True)["pairwise_choice"] for p in prompts)
                    # Vertex's choice in each order; evalbeam's verdict is the one both orders give, else a tie
                    swapped = {"BASELINE": "CANDIDATE", "CANDIDATE": "BASELINE", "TIE": "TIE"}[swapped]
                    scores[row["id"], name] = normal if normal == swapped else "TIE"
                else:
                    prompts = [_vertex_prompt(PointwiseMetric(metric=name, metric_prompt_template=template), row)]
                    scores[row["id"], name] = _vertex_parse(server.answer(prompts[0], vertex_template(base).pointwise_schema()),
                                                            False)["score"]
                expected.update(prompts)

    assert asked == expected
    assert fields == {"score": 9, "pairwise_choice": 6}
    for (instance, name), want in scores.items():
        row = got[instance, name]
        assert row["error"] is None
        if name.startswith("pairwise_"):
            assert row["pairwise_choice"] == want
        else:
            assert row["score"] == want
    # the markers drove real differences: Vertex's scales (verbosity -2..2, safety 1/0) and a biased judge's tie
    assert (got["a", "verbosity"]["score"], got["b", "verbosity"]["score"]) == (-1.0, 1.0)
    assert (got["a", "multi_turn_safety"]["score"], got["c", "multi_turn_safety"]["score"]) == (1.0, 0.0)
    assert [got[i, "pairwise_fluency"]["pairwise_choice"] for i in "abc"] == ["CANDIDATE", "BASELINE", "TIE"]


@pytest.mark.slow
def test_without_vertexai_a_vertex_metric_is_a_config_error_naming_it(tmp_path):
    import subprocess
    import sys
    # an environment where vertexai cannot be imported (None in sys.modules makes the import fail)
    probe = ("import sys; sys.modules['vertexai'] = None\n"
             "from evalbeam.configs import ConfigError, EvalConfig\n"
             "from evalbeam.pipelines.preflight import check_imports\n"
             "def config(metric):\n"
             "    return EvalConfig.model_validate({'name': 'n', 'input': {'uri': 'd.jsonl'}, 'metrics': [metric],\n"
             "                                      'output': {'parquet': 'o'}})\n"
             "check_imports(config('evalbeam_fluency'))\n"
             "try:\n"
             "    check_imports(config('pairwise_text_quality'))\n"
             "except ConfigError as e:\n"
             "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "metric 'text_quality' renders Vertex AI's published prompt" in out and "google-cloud-aiplatform" in out
    assert "metrics.0: " in out


@pytest.mark.slow
def test_the_plan_carries_the_text_to_workers_that_cannot_import_vertexai(tmp_path):
    import pickle
    import subprocess
    import sys

    from evalbeam.configs import MetricSpec
    from evalbeam.metrics.judge.asks import plan_judges

    plans = plan_judges([MetricSpec.model_validate({"name": "pairwise_multi_turn_chat_quality"})])
    (tmp_path / "plans.pkl").write_bytes(pickle.dumps(plans))
    row = {"prompt": "P", "response": "R", "baseline_model_response": "B", "history": "H"}
    worker = ("import json, pickle, sys; sys.modules['vertexai'] = None\n"
              f"[plan] = pickle.loads(open({str(tmp_path / 'plans.pkl')!r}, 'rb').read())\n"
              f"print(json.dumps(plan.template.render_pairwise({row!r}, swapped=False)))\n")
    out = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True, check=True).stdout
    metric = PairwiseMetric(metric="pairwise_multi_turn_chat_quality", metric_prompt_template=
                            MetricPromptTemplateExamples.get_prompt_template("pairwise_multi_turn_chat_quality"))
    assert json.loads(out) == _vertex_prompt(metric, row)


def test_a_dataset_without_prompt_is_told_of_evalbeams_own_prompt(tmp_path):
    """Runs before the split judged `fluency` with evalbeam's prompt, which needs only the
    response; Vertex's shows the judge the prompt. A dataset with no prompt column is refused
    before anything runs, and the error names the metric that judges it as before."""
    from evalbeam.configs import ConfigError, EvalConfig
    from evalbeam.pipelines.preflight import Preflight, _check_columns

    config = EvalConfig.model_validate({
        "name": "n", "input": {"uri": str(tmp_path / "d.jsonl")}, "output": {"parquet": str(tmp_path / "o")},
        "metrics": ["fluency", "pairwise_coherence", "multi_turn_chat_quality", "exact_match"]})
    with pytest.raises(ConfigError) as e:
        _check_columns(config, Preflight("1 file(s)", 5, {"response", "reference", "baseline_model_response"}))
    lines = str(e.value).splitlines()
    assert lines[1].startswith("  metrics.0 (fluency): needs (response, prompt); no column provides prompt")
    assert lines[1].endswith("; evalbeam's own prompt, which needs no prompt, is evalbeam_fluency")
    assert lines[2].endswith("; evalbeam's own prompt, which needs no prompt, is pairwise_evalbeam_coherence")
    assert "evalbeam_multi_turn" not in lines[3]  # evalbeam's needs the prompt too: no such hint
    assert len(lines) == 4
