"""The built-in model-based metrics, registered in the one metric registry:
every template of metrics/judge/data/judge_metrics.yaml (evalbeam's own prompts) as
evalbeam_<name> (pointwise) and pairwise_evalbeam_<name>. Where Vertex AI
publishes a template of the same name, <name> renders Vertex's
(metrics.judge.vertex_templates); where Vertex's service scores the name with
a prompt it does not publish, <name> is refused. Their factories return the
JudgeTemplate to render."""
from __future__ import annotations

import pydantic

from evalbeam.metrics.judge.templates import builtin_templates
from evalbeam.metrics.judge.vertex_templates import VERTEX_METRICS, vertex_template
from evalbeam.metrics.registry import NoParams, refuse, register


class UseReferenceParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    use_reference: bool = True


def _without_reference(template):
    variables = [v for v in template.input_variables if v != "reference"]
    return template.model_copy(update={"input_variables": variables})


# Vertex's evaluation-service metrics with no published prompt (google-cloud-aiplatform's EvaluateInstancesRequest
# has a <name>_input for each; MetricPromptTemplateExamples has no template of them): the service's own prompt
# and scoring, so evalbeam refuses these names and keeps its prompts as evalbeam_<name>
VERTEX_HOSTED_TEMPLATES = ("fulfillment", "summarization_helpfulness", "summarization_verbosity",
                           "question_answering_relevance", "question_answering_helpfulness",
                           "question_answering_correctness")


def _register_all() -> None:
    for own_name in VERTEX_HOSTED_TEMPLATES:
        refuse(own_name, "Vertex AI scores it on Vertex's hosted evaluation service, with the service's own prompt "
                         f"and scoring (the {own_name}_input of EvaluateInstancesRequest), which it does not publish, "
                         "so evalbeam "
                         f"cannot give its score under this name. evalbeam's own prompt for it is evalbeam_{own_name} "
                         f"(pairwise: pairwise_evalbeam_{own_name}), not Vertex's score")
    for own_name, template in builtin_templates().items():
        # every template of the library is evalbeam's; <name> without the prefix is Vertex's metric (rendered
        # from Vertex's own prompt below, or refused above)
        name = f"evalbeam_{own_name}"
        takes_reference = own_name == "question_answering_correctness"
        params = UseReferenceParams if takes_reference else NoParams
        scale = "/".join(template.rating_rubric) if len(template.rating_rubric) == 2 else \
            f"{min(template.scores().values()):g}..{max(template.scores().values()):g}"

        def factory(p, template=template, takes_reference=takes_reference):
            return _without_reference(template) if takes_reference and not p.use_reference else template

        def inputs_for(p, template=template, extra=()):
            variables = [v for v in template.input_variables if v != "reference" or getattr(p, "use_reference", True)]
            return (("response", *extra, *variables),)

        base_inputs = ("response", *template.input_variables)
        # verbosity ratings run -2..2 with 0 the right length (METRICS.md): better is closer to 0
        direction = "closer_to_zero" if name.endswith("verbosity") else "higher"
        register(name, kind="pointwise", inputs=base_inputs, params=params, score_range=scale,
                 description=f"LLM judge (evalbeam's prompt): {template.metric_definition or name}",
                 inputs_for=inputs_for,
                 direction=direction)(factory)
        register(f"pairwise_{name}", kind="pairwise", inputs=("response", "baseline_model_response", *template.input_variables),
                 params=params, score_range="CANDIDATE=1/TIE=0.5/BASELINE=0",
                 description=f"LLM judge (evalbeam's prompt), baseline (A) against candidate (B), both orders: {name}",
                 inputs_for=lambda p, f=inputs_for: f(p, extra=("baseline_model_response",)))(factory)

    for name, (variables, scale) in VERTEX_METRICS.items():
        # the text is read from google-cloud-aiplatform when the factory runs: where the pipeline
        # is built (configs.MetricSpec.judge_template), never on import, so workers need no vertexai
        register(name, kind="pointwise", inputs=("response", *variables), score_range=scale,
                 description=f"LLM judge (Vertex AI's published prompt, MetricPromptTemplateExamples '{name}')",
                 direction="closer_to_zero" if name == "verbosity" else "higher")(
            lambda p, name=name: vertex_template(name))
        register(f"pairwise_{name}", kind="pairwise", inputs=("response", "baseline_model_response", *variables),
                 score_range="CANDIDATE=1/TIE=0.5/BASELINE=0",
                 description=f"LLM judge (Vertex AI's published prompt 'pairwise_{name}'), baseline (A) against "
                             "candidate (B), both orders")(lambda p, name=name: vertex_template(name))

    coherence = builtin_templates()["coherence"].model_copy(update={"per_turn": True, "single_sample": True})
    # ADK's response_evaluation_score is Vertex's hosted coherence metric: refused under ADK's name
    # (metrics.judge.adk_judges.HOSTED_CRITERIA); evalbeam's prompt, aggregated as ADK does, keeps this name
    register("evalbeam_response_evaluation_score", kind="pointwise", inputs=(("response",), ("invocations",)),
             score_range="1..5",
             description="evalbeam's coherence prompt (1..5) on each turn's final response, then the mean over the "
                         "turns judged, as ADK aggregates its response_evaluation_score (not ADK's score)")(
        lambda p, t=coherence: t)


_register_all()
