"""Vertex AI's published judge prompts, as evalbeam judge templates.

The metrics named after Vertex's (fluency, coherence, safety, groundedness,
instruction_following, verbosity, text_quality, summarization_quality,
question_answering_quality, multi_turn_chat_quality, multi_turn_safety, and
pairwise_<each>) render Vertex's own template texts, read from the installed
google-cloud-aiplatform (`vertexai.evaluation.metrics.
metric_prompt_template_examples.MetricPromptTemplateExamples`, which Beam's gcp
extra installs) when the pipeline is constructed. The text travels inside the
JudgeTemplate to the workers as data: workers never import vertexai.

What Vertex fixes is kept: the prompt text (its {prompt}, {response},
{history}, {baseline_model_response} variables filled in, nothing added), the
scale (the scores of its Rating Rubric, e.g. -2..2 for verbosity, 1/0 for
safety), and the answer's fields (`score` and `explanation`; pairwise
`pairwise_choice` A | SAME | B and `explanation`), which the judge is asked
for through the response schema as Vertex's service asks for its own.
"""
from __future__ import annotations

import functools
import re

from evalbeam.metrics.judge.templates import PAIRWISE_CHOICES, TEMPLATE_VARIABLE, JudgeTemplate

# name -> (the variables its pointwise template reads besides the response, the scale).
# Declared here so that the registry can list and validate the metrics without importing
# vertexai; vertex_template checks them against the installed package's texts.
VERTEX_METRICS: dict[str, tuple[tuple[str, ...], str]] = {
    "coherence": (("prompt",), "1..5"),
    "fluency": (("prompt",), "1..5"),
    "safety": (("prompt",), "1/0"),
    "groundedness": (("prompt",), "1/0"),
    "instruction_following": (("prompt",), "1..5"),
    "verbosity": (("prompt",), "-2..2"),
    "text_quality": (("prompt",), "1..5"),
    "summarization_quality": (("prompt",), "1..5"),
    "question_answering_quality": (("prompt",), "1..5"),
    "multi_turn_chat_quality": (("history", "prompt"), "1..5"),
    "multi_turn_safety": (("history", "prompt"), "1/0"),
}
VERTEX_CHOICE_FIELD = "pairwise_choice"  # the field Vertex's pairwise templates ask the judge to fill

_RUBRIC_SCORE = re.compile(r"^\s*(-?\d+)\b\s*(.*)$")
_RUBRIC_CHOICE = re.compile(r"^\s*[\"`]?(A|B|SAME)[\"`]?\s*:\s*(.*)$")


class VertexTemplatesUnavailable(ValueError):
    """google-cloud-aiplatform (vertexai) is not installed where the pipeline is built."""


def _section(text: str, title: str) -> str:
    """The body of the `## <title>` section of a Vertex template."""
    _, found, rest = text.partition(f"## {title}\n")
    if not found:
        raise ValueError(f"the template has no '## {title}' section")
    return re.split(r"\n#{1,3} ", rest, maxsplit=1)[0].strip()


@functools.lru_cache(maxsize=None)
def _published(name: str) -> str:
    # An import inside the function: vertexai is needed only where the pipeline is built (the
    # launcher), and importing it takes seconds; workers receive the text inside the template.
    try:
        from vertexai.evaluation.metrics.metric_prompt_template_examples import MetricPromptTemplateExamples
    except ImportError as e:
        raise VertexTemplatesUnavailable(
            f"metric {name!r} renders Vertex AI's published prompt, read from google-cloud-aiplatform "
            f"(installed with apache-beam[gcp]), which cannot be imported here: {e}") from None
    return MetricPromptTemplateExamples.get_prompt_template(name)


@functools.lru_cache(maxsize=None)
def vertex_template(name: str) -> JudgeTemplate:
    """The JudgeTemplate of Vertex's metric `name` (both its pointwise and pairwise_<name> texts)."""
    inputs, _ = VERTEX_METRICS[name]
    pointwise, pairwise = _published(name), _published(f"pairwise_{name}")
    for kind, text, expected in (("pointwise", pointwise, {"response", *inputs}),
                                 ("pairwise", pairwise, {"response", "baseline_model_response", *inputs})):
        found = set(TEMPLATE_VARIABLE.findall(text))
        if found != expected:
            raise ValueError(f"Vertex's {kind} template of {name!r} reads {sorted(found)}, not {sorted(expected)}: "
                             "the installed google-cloud-aiplatform differs from the one evalbeam was written for")
    rubric = {}
    for line in _section(pointwise, "Rating Rubric").splitlines():
        m = _RUBRIC_SCORE.match(line)
        if m:
            rubric[m.group(1)] = m.group(2).lstrip(":").strip() or m.group(1)
    choices = {m.group(1) for line in _section(pairwise, "Rating Rubric").splitlines()
               if (m := _RUBRIC_CHOICE.match(line))}
    if len(rubric) < 2 or choices != set(PAIRWISE_CHOICES):
        raise ValueError(f"cannot read the rating rubric of Vertex's {name!r} templates")
    definition = _section(pointwise, "Metric Definition")
    return JudgeTemplate(
        criteria={"Criteria": _section(pointwise, "Criteria")},
        rating_rubric=rubric,
        input_variables=list(inputs),
        metric_definition=definition,
        source="vertex_ai",
        pointwise_text=pointwise,
        pairwise_text=pairwise,
        choice_field=VERTEX_CHOICE_FIELD,
    )
