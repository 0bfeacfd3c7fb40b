"""Rubric-based metrics: the templates, the two stages' prompts, schemas and
parsing, the scoring rules, and the metrics in real pipelines (the `evalbeam`
command against the local generateContent server, driven through the real
google-genai client)."""
import json

import pytest
import yaml

from evalbeam.metrics.rows.fields import CANONICAL_FIELDS
from evalbeam.metrics.judge.rubrics import (
    BUILTIN_RUBRIC_METRICS,
    IMPORTANCE_WEIGHT,
    Rubric,
    RubricVerdict,
    builtin_rubric_templates,
    claim_verdicts,
    given_rubrics,
    majority_verdicts,
    parse_stage_answer,
    resolve_aliases,
    score_verdicts,
)
from evalbeam.metrics.judge.templates import InvalidJudgment, parse_answer
from evalbeam.metrics.catalog import get_metric
from evalbeam.metrics.registry import MetricError
from tests.helpers import evalbeam, table
from tests.servers.judge_server import Behaviour, JudgeServer

KEY = "AIzaSy-test-key-rubrics-0123456789"
FIELDS = {f: f"<{f} text>" for f in CANONICAL_FIELDS}
FIELDS.update(history=[{"role": "user", "text": "<first turn>"}, {"role": "model", "text": "<first reply>"}])
THREE = (Rubric("r1", "Is short.", "format", "HIGH"), Rubric("r2", "Is kind.", "style", "LOW"),
         Rubric("r3", "Is right.", "accuracy", None))
TEMPLATES = builtin_rubric_templates()


# ---------------------------------------------------------------- templates, prompts, schemas


@pytest.mark.parametrize("name", sorted(n for n, t in TEMPLATES.items()
                                        if t.kind in ("adaptive", "given", "static", "claims") and not t.inputs_any))
def test_every_rubric_metric_renders_its_stages_and_parses_their_answers(name):
    # (the agent judges' units and stages: tests/metrics/judge/test_agent_judges.py)
    t = TEMPLATES[name]
    definition = get_metric(f"evalbeam_{name}")  # every prompt of the library is evalbeam's
    assert definition.kind == "rubric" and definition.inputs == t.input_alternatives()
    if t.kind == "adaptive":
        prompt = t.render_generation(FIELDS)
        for v in t.generation.input_variables:
            assert f"## {v}\n" in prompt
        assert "## response" not in prompt.lower()  # rubrics depend on the prompt only, never on the response
        schema = t.generation_schema()["properties"]["rubrics"]
        assert schema["maxItems"] == t.generation.max_rubrics and schema["minItems"] == 1
        assert schema["items"]["properties"]["importance"]["enum"] == list(IMPORTANCE_WEIGHT)
        answer = {"rubrics": [{"text": "The response is a haiku.", "type": "format", "importance": "HIGH"},
                              {"text": "The response is about autumn.", "type": "content", "importance": "LOW"}]}
        rubrics_json, _ = parse_answer(json.dumps(answer), "rubrics", ())
        assert [r["rubric_id"] for r in json.loads(rubrics_json)] == ["r1", "r2"]
        # the generation key depends on the metric and the generation inputs, not on the response
        assert t.generation_key(FIELDS) == t.generation_key({**FIELDS, "response": "another"})
        assert t.generation_key(FIELDS) != t.generation_key({**FIELDS, "prompt": "another"})
    rubrics = t.static_rubrics() or THREE
    prompt = t.render_validation(FIELDS, rubrics)
    for v in t.validation.input_variables:
        assert f"## {v}\n" in prompt
    assert prompt.rstrip().endswith(".") and "## Response\n<response text>" in prompt
    schema = t.validation_schema(rubrics)
    if t.kind == "claims":
        assert schema["properties"]["claims"]["items"]["properties"]["label"]["enum"] == [
            "supported", "unsupported", "contradicted", "no_rad"]
        return
    ids = [r.rubric_id for r in rubrics]
    for r in rubrics:
        assert f"- {r.rubric_id}: {r.text}" in prompt
    # the shape ties each verdict to its rubric: one required property per id, no other
    assert list(schema["properties"]) == ids and schema["required"] == ids
    good = {i: {"reasoning": "because", "verdict": "yes"} for i in ids}
    verdicts, explanation = parse_answer(json.dumps(good), "verdicts", tuple(ids))
    assert json.loads(verdicts) == good and explanation == f"{len(ids)} of {len(ids)} rubrics met"
    skipped = {i: good[i] for i in ids[:-1]}
    with pytest.raises(InvalidJudgment, match=f"missing: {ids[-1]}"):
        parse_answer(json.dumps(skipped), "verdicts", tuple(ids))
    with pytest.raises(InvalidJudgment, match="not asked: r99"):
        parse_answer(json.dumps({**good, "r99": good[ids[0]]}), "verdicts", tuple(ids))


def test_registered_names_versions_and_the_names_taken_by_template_judges():
    assert get_metric("evalbeam_general_quality").factory(get_metric("evalbeam_general_quality").params()).name == "general_quality_v1"
    assert get_metric("evalbeam_final_response_match").factory(get_metric("evalbeam_final_response_match").params()).name == "final_response_match_v2"
    for name in ("evalbeam_grounding", "evalbeam_multi_turn_general_quality", "evalbeam_multi_turn_text_quality", "evalbeam_final_response_reference_free"):
        assert get_metric(name).kind == get_metric(f"{name}_v1").kind == "rubric"
    # these names keep their template-judge meaning; the rubric forms are pinned by version
    for name in ("safety", "text_quality", "instruction_following"):
        rubric_form = f"evalbeam_{name}_v1"
        assert get_metric(name).kind == "pointwise" and get_metric(rubric_form).kind == "rubric"
    # safety_v1 is Vertex's (and ADK's) hosted metric: refused, evalbeam's rubric form is evalbeam_safety_v1
    with pytest.raises(KeyError, match="safety_v1: .*evalbeam_safety_v1"):
        get_metric("safety_v1")
    # Vertex's predefined rubric metrics are scored on its hosted service: refused, naming evalbeam's prompt
    for name in ("general_quality", "text_quality_v1", "grounding", "final_response_match", "multi_turn_task_success_v1"):
        with pytest.raises(KeyError, match=rf"^.{name}: .*is evalbeam_{name} \("):
            get_metric(name)
    assert get_metric("evalbeam_final_response_reference_free").inputs == (("response", "prompt", "rubric_groups"),)
    assert get_metric("evalbeam_multi_turn_general_quality").inputs == (("response", "history", "prompt"),)
    assert get_metric("evalbeam_final_response_match").inputs == (("response", "prompt", "reference"), ("invocations",))
    group = get_metric("evalbeam_general_quality").params(rubric_group="mine")
    assert get_metric("evalbeam_general_quality").factory(group).group == "mine"


def test_hallucinations_v1_is_hallucination_v1s_prompts_under_adks_name():
    """One prompt written once (alias_of): ADK's name renders the same two stages, keeps its own
    inputs' order, description and ADK flag, and every name stays registered."""
    alias, base = TEMPLATES["hallucinations_v1"], TEMPLATES["hallucination_v1"]
    raw = yaml.safe_load(BUILTIN_RUBRIC_METRICS.read_text(encoding="utf-8"))
    assert raw["hallucinations_v1"]["alias_of"] == "hallucination_v1" and "generation" not in raw["hallucinations_v1"]
    assert alias.generation == base.generation and alias.validation == base.validation
    fields = {**FIELDS, "step_context": "<the step's context>"}
    sentences = (Rubric("s1", "It is sunny.", "sentence"), Rubric("s2", "Bring a hat.", "sentence"))
    assert alias.render_generation(fields) == base.render_generation(fields)
    assert alias.render_validation(fields, sentences) == base.render_validation(fields, sentences)
    assert "<the step's context>" in alias.render_validation(fields, sentences)
    assert (alias.kind, alias.unit, alias.aggregate, alias.single_sample) == (
        base.kind, base.unit, base.aggregate, base.single_sample)
    assert (alias.adk, base.adk) == (True, False) and alias.description != base.description
    assert alias.input_alternatives() == (("invocations",), ("response",))
    assert base.input_alternatives() == (("response",), ("invocations",))
    for name in ("evalbeam_hallucination", "evalbeam_hallucination_v1", "evalbeam_hallucinations_v1", "hallucinations_v1"):
        assert get_metric(name).kind == "rubric", name
    assert get_metric("evalbeam_hallucinations_v1").inputs == alias.input_alternatives()


def test_an_alias_names_an_entry_that_holds_its_prompts():
    raw = {"a_v1": {"kind": "static", "description": "A"},
           "b_v1": {"alias_of": "a_v1", "description": "B"}}
    assert resolve_aliases(raw) == {"a_v1": raw["a_v1"], "b_v1": {"kind": "static", "description": "B"}}
    with pytest.raises(ValueError, match=r"^c_v1: alias_of 'b_v1', itself an alias of 'a_v1': name the entry"):
        resolve_aliases({**raw, "c_v1": {"alias_of": "b_v1"}})
    with pytest.raises(ValueError, match=r"^d_v1: alias_of 'nothing_v1': no entry of that name"):
        resolve_aliases({**raw, "d_v1": {"alias_of": "nothing_v1"}})

def test_stage_answers_that_do_not_fit_are_invalid():
    cases = [
        ("rubrics", "not json", "not JSON"),
        ("rubrics", '{"rubrics": []}', "non-empty list"),
        ("rubrics", '{"rubrics": [{"text": "x", "type": "t", "importance": "URGENT"}]}', "importance 'URGENT'"),
        ("rubrics", '{"rubrics": [{"text": " ", "type": "t", "importance": "LOW"}]}', "text is not a non-empty text"),
        ("verdicts", '{"r1": {"reasoning": "x", "verdict": "maybe"}}', "not yes or no"),
        ("verdicts", '{"r1": {"verdict": "yes"}}', "reasoning is not a non-empty text"),
        ("claims", '{"claims": [{"claim": "c", "label": "true", "reasoning": "r"}]}', "label is not one of"),
        ("claims", '[]', "not a JSON object"),
    ]
    for kind, text, reason in cases:
        with pytest.raises(InvalidJudgment, match=reason):
            parse_answer(text, kind, ("r1",))
    claims, explanation = parse_stage_answer(
        '{"claims": [{"claim": "a", "label": "supported", "reasoning": "r", "excerpt": "e"},'
        ' {"claim": "b", "label": "no_rad", "reasoning": "r"}, {"claim": "c", "label": "contradicted", "reasoning": "r"}]}',
        "claims", ())
    assert explanation == "2 of 3 claims supported or needing no support"
    assert [v.verdict for v in claim_verdicts(json.loads(claims))] == [True, True, False]


def test_given_rubrics_in_the_forms_a_row_carries():
    vertex = {"rubrics": [{"rubric_id": "a", "content": {"property": {"description": "Is polite."}},
                           "importance": "high", "type": "tone"}]}
    assert given_rubrics({"g": vertex}, "g") == (Rubric("a", "Is polite.", "tone", "HIGH"),)
    assert given_rubrics({"g": ["Is short.", {"text": "Is kind.", "id": 7}]}, "g") == (
        Rubric("r1", "Is short."), Rubric("7", "Is kind."))
    assert given_rubrics({"other": ["x"]}, "g") is None and given_rubrics(None, "g") is None
    for groups, reason in [("text", "must be an object"), ({"g": []}, "non-empty list"),
                           ({"g": [{"type": "x"}]}, r"rubric_groups.g.0: has no text"),
                           ({"g": [{"text": "x", "importance": "VITAL"}]}, "importance 'VITAL'"),
                           ({"g": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, r"rubric ids repeat \(a\)"),
                           ({"g": [{"id": "a b", "text": "x"}]}, "rubric_id 'a b'")]:
        with pytest.raises(ValueError, match=reason):
            given_rubrics(groups, "g")


# ---------------------------------------------------------------- scoring


def test_majority_per_rubric_a_tie_is_no_and_confidence():
    samples = [{"r1": ("yes", "a"), "r2": ("yes", "b"), "r3": ("no", "c")},
               {"r1": ("yes", "d"), "r2": ("no", "e"), "r3": ("no", "f")}]
    verdicts, confidence = majority_verdicts(THREE, samples)
    assert [v.verdict for v in verdicts] == [True, False, False]  # r2: one yes, one no: a tie is no
    assert [v.reasoning for v in verdicts] == ["a", "e", "c"]  # the reasoning of an agreeing sample
    assert confidence == pytest.approx(5 / 6)
    three = samples + [{"r1": ("no", "g"), "r2": ("yes", "h"), "r3": ("no", "i")}]
    assert [v.verdict for v in majority_verdicts(THREE, three)[0]] == [True, True, False]
    # a rubric no sample judged is not judged
    verdicts, _ = majority_verdicts(THREE, [{"r1": ("no", "x")}])
    assert [v.verdict for v in verdicts] == [False, None, None]


def test_score_is_the_share_of_judged_rubrics_and_the_weighted_share_weighs_importance():
    t = TEMPLATES["general_quality_v1"]
    verdicts = (RubricVerdict(THREE[0], True, "a"), RubricVerdict(THREE[1], False, "b"),
                RubricVerdict(THREE[2], None, None))
    scored = score_verdicts(t, verdicts, 1.0)
    assert (scored.score, scored.met, scored.judged) == (0.5, 1, 2)  # the unjudged rubric is not counted
    assert scored.weighted_score == pytest.approx(3 / (3 + 1))  # HIGH met, LOW not
    assert scored.explanation == "1 of 2 rubrics met. Not met: r2 (Is kind.): b"
    # no importance weighs as MEDIUM (2)
    assert score_verdicts(t, (RubricVerdict(THREE[0], False, "a"), RubricVerdict(THREE[2], True, "c")),
                          1.0).weighted_score == pytest.approx(2 / 5)
    with pytest.raises(MetricError, match="no rubric was judged"):
        score_verdicts(t, (RubricVerdict(THREE[0], None, None),), 1.0)
    safety = TEMPLATES["safety_v1"]
    all_met = tuple(RubricVerdict(r, True, "ok") for r in safety.static_rubrics())
    assert score_verdicts(safety, all_met, 1.0).score == 1.0
    one_violated = all_met[:-1] + (RubricVerdict(safety.static_rubrics()[-1], False, "explicit"),)
    assert score_verdicts(safety, one_violated, 1.0).score == 0.0
    with pytest.raises(MetricError, match="no claim"):
        score_verdicts(TEMPLATES["grounding_v1"], (), 1.0)


# ---------------------------------------------------------------- pipelines


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)


def write_data(tmp_path, rows, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def rubric_config(tmp_path, data, server_url, metrics, run_id="r1", output=None, **judge):
    config = {
        "name": "rubrics", "run_id": run_id,
        "input": {"uri": str(data), "id_column": "id"},
        "metrics": metrics,
        "judge": {"base_url": server_url, "requests_per_minute": 6000, "max_attempts": 3, "timeout_seconds": 10, **judge},
        "output": output or {"parquet": str(tmp_path / "out")},
    }
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def results(out, run_id):
    return {(r["instance_id"], r["metric"]): r for r in table(out / run_id, "metric_results")}


def rubric_table(out, run_id):
    rows = table(out / run_id, "rubrics")
    by = {}
    for r in rows:
        by.setdefault((r["instance_id"], r["metric"]), []).append(r)
    return {k: sorted(v, key=lambda r: r["rubric_id"]) for k, v in by.items()}


P1 = "Write a haiku about rain #rubrics=4 #importance=HML"
P2 = "List two primes #rubrics=2"
ROWS = [
    {"id": "a", "prompt": P1, "response": "Rain on the roof #verdicts=yyny", "context": "It rains.",
     "reference": "r", "rubric_groups": {"unrelated": ["x"]}},
    {"id": "b", "prompt": P1, "response": "Drops #verdicts=nnnn", "context": "It rains.", "reference": "r"},
    {"id": "c", "prompt": P1, "response": "Grey sky #verdicts=yyyy #claims=supported,unsupported,no_rad",
     "context": "It rains.", "reference": "r"},
    {"id": "d", "prompt": P2, "response": "2 and 3 #verdicts=ny #claims=contradicted", "context": "Primes.", "reference": "r"},
    {"id": "e", "prompt": "Anything #rubrics=5", "response": "given #verdicts=yn", "context": "c", "reference": "r",
     "rubric_groups": {"general_quality": ["Is brief.", {"rubric_id": "warm", "text": "Is warm.", "importance": "HIGH"}]}},
    {"id": "f", "prompt": "Generation fails #fail", "response": "x #verdicts=y", "context": "c", "reference": "r"},
    {"id": "g", "prompt": P2, "response": "Retried #verdicts=yy #malformed=1 #invalid=2", "context": "c", "reference": "r"},
]


@pytest.mark.slow
def test_rubric_metrics_end_to_end(tmp_path, api_key):
    data = write_data(tmp_path, ROWS)
    with JudgeServer(Behaviour(latency_median=0.01)) as server:
        metrics = ["evalbeam_general_quality", "evalbeam_safety_v1", "evalbeam_grounding", "evalbeam_final_response_match"]
        run = evalbeam("run", rubric_config(tmp_path, data, server.url, metrics))
        stages, requests = dict(server.stats.stages), server.stats.requests
    out = tmp_path / "out"
    got = results(out, "r1")
    assert len(got) == 7 * 4  # one row per instance and metric, failures included
    # one generation per distinct prompt: P1 for a, b and c, P2 for d and g (f's is refused with 503s,
    # before any answer); e gives its rubrics
    assert stages["generation"] == 2
    gq = {i: got[(i, "evalbeam_general_quality")] for i in "abcdefg"}
    assert [gq[i]["score"] for i in "abcdeg"] == [0.75, 0.0, 1.0, 0.5, 0.5, 1.0]
    assert gq["f"]["score"] is None and gq["f"]["error"].startswith(
        "rubric generation failed: judge failed after 3 attempts; last: HTTP 503")
    extra = json.loads(gq["a"]["extra"])
    # HML -> weights 3, 2, 1, 1 (the last letter repeats); a met r1, r2, r4
    assert extra["weighted_score"] == pytest.approx((3 + 2 + 1) / 7)
    assert (extra["rubrics_met"], extra["rubrics_judged"], extra["rubric_count"]) == (3, 4, 4)
    assert extra["rubric_source"] == "generated" and len(extra["generation_key"]) == 64
    assert json.loads(gq["e"]["extra"])["rubric_source"] == "given"
    assert json.loads(gq["e"]["extra"])["weighted_score"] == pytest.approx(2 / (2 + 3))  # "Is brief." (MEDIUM) met, "warm" (HIGH) not
    assert gq["g"]["attempts"] == 3  # a malformed answer, then one skipping a rubric, then a good one
    assert got[("g", "evalbeam_safety_v1")]["attempts"] == 3 and got[("g", "evalbeam_grounding")]["attempts"] == 3
    assert gq["a"]["judge_model"] == "gemini-2.5-flash" and gq["a"]["confidence"] == 1.0

    safety = {i: got[(i, "evalbeam_safety_v1")] for i in "abcdeg"}
    assert [safety[i]["score"] for i in "abcdeg"] == [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert json.loads(safety["a"]["extra"])["violated"] == ["dangerous_content"]  # a: y y n y -> the third policy
    assert json.loads(safety["d"]["extra"])["violated"] == ["pii_and_demographics"]  # n then y repeated
    grounding = {i: got[(i, "evalbeam_grounding")] for i in "abcdeg"}
    assert grounding["c"]["score"] == pytest.approx(2 / 3) and grounding["d"]["score"] == 0.0
    assert json.loads(grounding["c"]["extra"])["labels"] == {"supported": 1, "unsupported": 1, "no_rad": 1}
    assert [got[(i, "evalbeam_final_response_match")]["score"] for i in "abcdeg"] == [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    for metric in ("evalbeam_safety_v1", "evalbeam_grounding", "evalbeam_final_response_match"):
        assert got[("f", metric)]["error"].startswith("judge failed after 3 attempts")

    rubrics = rubric_table(out, "r1")
    a = rubrics[("a", "evalbeam_general_quality")]
    assert [(r["rubric_id"], r["importance"], r["verdict"], r["source"]) for r in a] == [
        ("r1", "HIGH", True, "generated"), ("r2", "MEDIUM", True, "generated"),
        ("r3", "LOW", False, "generated"), ("r4", "LOW", True, "generated")]
    # a, b and c share the one generation: the same rubrics, the same key
    assert [r["rubric"] for r in rubrics[("b", "evalbeam_general_quality")]] == [r["rubric"] for r in a]
    assert {r["generation_key"] for k in "abc" for r in rubrics[(k, "evalbeam_general_quality")]} == {a[0]["generation_key"]}
    assert [(r["rubric_id"], r["rubric"], r["source"]) for r in rubrics[("e", "evalbeam_general_quality")]] == [
        ("r1", "Is brief.", "given"), ("warm", "Is warm.", "given")]
    assert ("f", "evalbeam_general_quality") not in rubrics  # no rubrics to list
    assert [r["verdict"] for r in rubrics[("f", "evalbeam_safety_v1")]] == [None] * 5  # listed, not judged
    assert [r["label"] for r in rubrics[("c", "evalbeam_grounding")]] == ["supported", "unsupported", "no_rad"]
    assert sum(len(v) for v in rubrics.values()) == len(table(out / "r1", "rubrics"))

    [runs] = table(out / "r1", "runs")
    usage = json.loads(runs["judge_usage"])
    assert usage["evalbeam_general_quality:generation"]["requests"] == 3 and usage["evalbeam_general_quality:generation"]["failures"] == 1
    assert usage["evalbeam_general_quality:validation"]["requests"] == 6
    assert usage["evalbeam_safety_v1:validation"]["requests"] == 7
    assert runs["judge_calls"] == requests
    assert "read 7 = scored 7 + dead-lettered 0; metric errors 4" in run.stdout
    summary = {(s["metric"], s["slice"]): s for s in table(out / "r1", "summary")}
    assert summary[("evalbeam_general_quality", "overall")]["mean"] == pytest.approx((0.75 + 0 + 1 + 0.5 + 0.5 + 1) / 6)
    assert KEY not in run.stdout + run.stderr


@pytest.mark.slow
def test_a_row_lacking_a_rubric_metrics_input_loses_that_metric_only(tmp_path, api_key):
    """As for a computation metric: the rubric metric's row carries the missing input, the
    row's other metrics are scored, nothing is asked for it, and nothing is dead-lettered."""
    rows = [{"id": "ok", "prompt": "Fine #rubrics=1", "response": "#verdicts=y", "reference": "#verdicts=y"},
            {"id": "noprompt", "response": "same", "reference": "same"}]
    data = write_data(tmp_path, rows, "partial.jsonl")
    with JudgeServer() as server:
        run = evalbeam("run", rubric_config(tmp_path, data, server.url, ["evalbeam_general_quality", "exact_match"], run_id="r3"))
        assert server.stats.stages["generation"] == 1 and server.stats.stages["validation"] == 1  # ok's only
    got = results(tmp_path / "out", "r3")
    assert got[("ok", "evalbeam_general_quality")]["score"] == 1.0
    assert (got[("noprompt", "evalbeam_general_quality")]["score"], got[("noprompt", "evalbeam_general_quality")]["error"]) == (
        None, "missing input prompt")
    assert got[("noprompt", "exact_match")]["score"] == 1.0 and got[("ok", "exact_match")]["score"] == 1.0
    assert "read 2 = scored 2 + dead-lettered 0; metric errors 1" in run.stdout


@pytest.mark.slow
def test_given_rubrics_skip_generation_and_a_missing_group_is_a_row_error(tmp_path, api_key):
    groups = {"final_response_reference_free": ["Cites a source.", "Is under 50 words."],
              "general_quality": [{"rubric_id": "q", "text": "Answers the question."}]}
    rows = [{"id": "u1", "prompt": "Q #rubrics=4", "response": "A #verdicts=yn", "rubric_groups": groups},
            {"id": "u2", "prompt": "Q #rubrics=4", "response": "B #verdicts=yy", "rubric_groups": groups},
            {"id": "u3", "prompt": "Q #rubrics=4", "response": "C", "rubric_groups": {"other": ["x"]}},
            {"id": "u4", "prompt": "Q #rubrics=4", "response": "D", "rubric_groups": {"general_quality": []}},
            {"id": "u5", "prompt": "Q", "response": "no groups at all"}]
    data = write_data(tmp_path, rows)
    with JudgeServer() as server:
        run = evalbeam("run", rubric_config(tmp_path, data, server.url, [
            "evalbeam_final_response_reference_free", {"name": "evalbeam_general_quality", "params": {"rubric_group": "general_quality"}}]))
        stages = dict(server.stats.stages)
    # u5: no rubric_groups for the metric that needs them: that metric's row says so (issue 21: missing
    # inputs are per metric; it used to dead-letter the row)
    assert "read 5 = scored 5 + dead-lettered 0" in run.stdout
    got = results(tmp_path / "out", "r1")
    assert stages.get("generation", 0) == 2  # u3 and u5: u1 and u2 give general_quality's rubrics; u4's are bad
    assert [got[(i, "evalbeam_final_response_reference_free")]["score"] for i in ("u1", "u2")] == [0.5, 1.0]
    assert [got[(i, "evalbeam_general_quality")]["score"] for i in ("u1", "u2")] == [1.0, 1.0]
    assert got[("u3", "evalbeam_final_response_reference_free")]["error"] == (
        "needs the row's rubric_groups to give the group 'final_response_reference_free' (this metric does not generate rubrics)")
    assert got[("u3", "evalbeam_general_quality")]["error"] is None  # generated for u3
    assert got[("u4", "evalbeam_general_quality")]["error"] == "bad rubric_groups: rubric_groups.general_quality must be a non-empty list of rubrics"
    assert got[("u5", "evalbeam_final_response_reference_free")]["error"] == "missing input rubric_groups"
    assert got[("u5", "evalbeam_general_quality")]["error"] is None  # generated for u5, which is no longer dead-lettered
    assert table(tmp_path / "out" / "r1", "dead_letter") == []


@pytest.mark.slow
def test_pinned_rubrics_and_the_cache_skip_the_judge(tmp_path, api_key):
    rows = [{"id": f"p{i}", "prompt": f"Prompt {i % 2} #rubrics={3 + i % 2}", "response": f"R{i} #verdicts=yny"}
            for i in range(4)]
    data = write_data(tmp_path, rows)
    out = tmp_path / "out"
    with JudgeServer() as server:
        evalbeam("run", rubric_config(tmp_path, data, server.url, ["evalbeam_general_quality", "evalbeam_text_quality_v1"], run_id="first"))
        assert server.stats.stages["generation"] == 2 * 2  # two prompts, two metrics
        # pinned: another judge model, the first run's rubrics, no generation
        server.stats.stages.clear()
        evalbeam("run", rubric_config(tmp_path, data, server.url, ["evalbeam_general_quality", "evalbeam_text_quality_v1"], run_id="pinned",
                                      model="gemini-2.5-pro", rubrics_from=str(out / "first" / "rubrics")))
        assert server.stats.stages.get("generation", 0) == 0 and server.stats.stages["validation"] == 4 * 2
        # cached: the same settings again, every judgment of both stages from judge.cache: no call at all
        before = server.stats.requests
        evalbeam("run", rubric_config(tmp_path, data, server.url, ["evalbeam_general_quality", "evalbeam_text_quality_v1"], run_id="cached",
                                      cache=str(out / "first" / "judge_cache")))
        assert server.stats.requests == before
    first, pinned, cached = (rubric_table(out, r) for r in ("first", "pinned", "cached"))
    for key, listed in first.items():
        assert [(r["rubric_id"], r["rubric"], r["generation_key"]) for r in pinned[key]] == [
            (r["rubric_id"], r["rubric"], r["generation_key"]) for r in listed]
        assert {r["source"] for r in pinned[key]} == {"pinned"} and {r["source"] for r in listed} == {"generated"}
        assert cached[key] and [r["verdict"] for r in cached[key]] == [r["verdict"] for r in listed]
    assert [len(first[(f"p{i}", "evalbeam_general_quality")]) for i in range(4)] == [3, 4, 3, 4]
    scores = lambda run_id: {k: r["score"] for k, r in results(out, run_id).items()}  # noqa: E731
    assert scores("first") == scores("pinned") == scores("cached")
    assert {r["judge_model"] for r in results(out, "pinned").values()} == {"gemini-2.5-pro"}
    [runs] = table(out / "cached", "runs")
    assert runs["judge_calls"] == 0 and runs["judge_cache_hits"] == runs["judge_requests"] == 2 * 2 + 4 * 2
    assert all(r["cache_hit"] for r in results(out, "cached").values())
    # a pinned run's table pins the next one as well (its rows keep the generation key)
    assert {r["generation_key"] for v in pinned.values() for r in v} == {r["generation_key"] for v in first.values() for r in v}


@pytest.mark.slow
def test_samples_majority_per_rubric_a_tie_is_no(tmp_path, api_key):
    rows = [{"id": "m1", "prompt": "P #rubrics=3", "response": "#verdicts=yyn/ynn/nyy"},   # 3 samples: y y n
            {"id": "m2", "prompt": "P #rubrics=3", "response": "#verdicts=yyy/nnn/nnn"},   # n n n
            {"id": "m3", "prompt": "P #rubrics=3", "response": "#verdicts=yyy/yyy/yyy"}]
    data = write_data(tmp_path, rows)
    with JudgeServer() as server:
        evalbeam("run", rubric_config(tmp_path, data, server.url, ["evalbeam_general_quality"],
                                      sampling_count=3, temperature=1.0, run_id="three"))
        assert server.stats.stages["generation"] == 1  # generated once, whatever the samples
        even = [{"id": "t1", "prompt": "P #rubrics=2", "response": "#verdicts=yy/ny", "reference": "r"}]
        evalbeam("run", rubric_config(tmp_path, write_data(tmp_path, even, "even.jsonl"), server.url,
                                      ["evalbeam_general_quality", "evalbeam_final_response_match"], sampling_count=2, run_id="two"))
    out = tmp_path / "out"
    got = results(out, "three")
    assert [got[(i, "evalbeam_general_quality")]["score"] for i in ("m1", "m2", "m3")] == [pytest.approx(2 / 3), 0.0, 1.0]
    assert got[("m1", "evalbeam_general_quality")]["confidence"] == pytest.approx(6 / 9)
    assert [r["verdict"] for r in rubric_table(out, "three")[("m1", "evalbeam_general_quality")]] == [True, True, False]
    two = results(out, "two")
    # r1: yes and no -> a tie is no; r2: yes twice
    assert two[("t1", "evalbeam_general_quality")]["score"] == 0.5
    assert two[("t1", "evalbeam_final_response_match")]["score"] == 0.0  # one valid of two samples: a tie is invalid


@pytest.mark.slow
def test_judge_faults_are_retried_and_failures_stay_on_their_rows(tmp_path, api_key):
    rows = [{"id": f"q{i}", "prompt": f"Prompt {i} #rubrics=2", "response": "#verdicts=yy"} for i in range(12)]
    data = write_data(tmp_path, rows)
    # 429s with Retry-After, 503s and answers slower than the timeout along the way: nothing lost
    behaviour = Behaviour(quota=8, window_seconds=1.0, error_rate=0.2, timeout_rate=0.15, timeout_delay=3.0, seed=7)
    with JudgeServer(behaviour) as server:
        run = evalbeam("run", rubric_config(tmp_path, data, server.url, ["evalbeam_general_quality"], max_attempts=10,
                                            timeout_seconds=1.5))
    assert server.stats.rate_limited > 0 and server.stats.errors > 0 and server.stats.timeouts > 0
    got = results(tmp_path / "out", "r1")
    assert [got[(f"q{i}", "evalbeam_general_quality")]["score"] for i in range(12)] == [1.0] * 12
    assert "read 12 = scored 12 + dead-lettered 0; metric errors 0" in run.stdout

    # answers that never fit the schema: the error on the rows, after the retries
    rows = [{"id": "bad", "prompt": "Always wrong #rubrics=2", "response": "#verdicts=yy #invalid=9"},
            {"id": "badgen", "prompt": "Never valid #rubrics=2 #invalid=9", "response": "#verdicts=yy"},
            {"id": "badgen2", "prompt": "Never valid #rubrics=2 #invalid=9", "response": "#verdicts=nn"},
            {"id": "ok", "prompt": "Fine #rubrics=1", "response": "#verdicts=y"}]
    data = write_data(tmp_path, rows, "bad.jsonl")
    with JudgeServer() as server:
        run = evalbeam("run", rubric_config(tmp_path, data, server.url, ["evalbeam_general_quality"], run_id="r2"))
        assert server.stats.stages["generation"] == 1 + 3 + 1  # bad's, ok's, then badgen's and badgen2's one generation, 3 attempts
    got = results(tmp_path / "out", "r2")
    assert got[("bad", "evalbeam_general_quality")]["error"] == (
        "judge failed after 3 attempts; last: invalid judge output: the verdicts do not match the rubrics asked; "
        "missing: r2; not asked: not_asked")
    for i in ("badgen", "badgen2"):
        assert got[(i, "evalbeam_general_quality")]["error"] == (
            "rubric generation failed: judge failed after 3 attempts; last: invalid judge output: "
            "rubric 0: importance 'URGENT' is not one of HIGH, MEDIUM, LOW")
    assert got[("ok", "evalbeam_general_quality")]["score"] == 1.0
    assert "read 4 = scored 4 + dead-lettered 0; metric errors 3" in run.stdout


@pytest.mark.slow
def test_multi_turn_metrics_read_the_history(tmp_path, api_key):
    history = [{"role": "user", "text": "My name is Ada."}, {"role": "model", "text": "Hello Ada!"}]
    rows = [{"id": "t1", "history": history, "prompt": "What is my name? #rubrics=2", "response": "Ada. #verdicts=yn"},
            {"id": "t2", "history": history, "prompt": "What is my name? #rubrics=2", "response": "Bob. #verdicts=nn"}]
    data = write_data(tmp_path, rows)
    with JudgeServer() as server:
        evalbeam("run", rubric_config(tmp_path, data, server.url, ["evalbeam_multi_turn_general_quality", "evalbeam_multi_turn_text_quality"]))
        generation_prompts = [p for p in server.stats.prompts if "## history" in p and "## Response" not in p]
    assert len(generation_prompts) == 2 and all("Hello Ada!" in p for p in generation_prompts)  # one per metric
    got = results(tmp_path / "out", "r1")
    assert [got[(i, "evalbeam_multi_turn_general_quality")]["score"] for i in ("t1", "t2")] == [0.5, 0.0]
    assert [got[(i, "evalbeam_multi_turn_text_quality")]["score"] for i in ("t1", "t2")] == [0.5, 0.0]


@pytest.mark.emulators
def test_rubrics_table_in_bigquery_and_pinned_from_it(cloud, tmp_path, api_key):
    from tests.emulators.control import PROJECT
    from evalbeam.transforms.local_cloud import bigquery_client

    dataset = f"{PROJECT}.evals_rubrics"
    rows = [{"id": f"b{i}", "prompt": f"P{i % 2} #rubrics=2 #importance=HL", "response": "#verdicts=yn"} for i in range(4)]
    data = write_data(tmp_path, rows)
    output = {"parquet": str(tmp_path / "out"), "bigquery": dataset}
    with JudgeServer() as server:
        evalbeam("run", rubric_config(tmp_path, data, server.url, ["evalbeam_general_quality"], run_id="bq1", output=output))
        assert server.stats.stages["generation"] == 2
        server.stats.stages.clear()
        evalbeam("run", rubric_config(tmp_path, data, server.url, ["evalbeam_general_quality"], run_id="bq2", output=output,
                                      rubrics_from=f"bq://{dataset}.rubrics"))
        assert server.stats.stages.get("generation", 0) == 0 and server.stats.stages["validation"] == 2  # b0, b2 alike
    client = bigquery_client(PROJECT)
    got = [dict(r.items()) for r in client.query(
        f"SELECT run_id, instance_id, rubric_id, importance, verdict, source, generation_key FROM `{dataset}.rubrics` "
        "ORDER BY run_id, instance_id, rubric_id").result()]
    assert len(got) == 2 * 4 * 2
    assert [(r["rubric_id"], r["importance"], r["verdict"]) for r in got[:2]] == [("r1", "HIGH", True), ("r2", "LOW", False)]
    assert {r["source"] for r in got if r["run_id"] == "bq1"} == {"generated"}
    assert {r["source"] for r in got if r["run_id"] == "bq2"} == {"pinned"}
    assert len({r["generation_key"] for r in got}) == 2
    table_ = client.get_table(f"{dataset}.rubrics")
    assert table_.time_partitioning.field == "run_date" and table_.clustering_fields == ["metric", "run_id"]


@pytest.mark.slow
def test_demo_rubrics_config_runs_and_its_pinned_rerun_generates_nothing(tmp_path, api_key):
    rows = [json.loads(line) for line in open("configs/data/agents.jsonl")]
    prompts = {r["prompt"] for r in rows}
    with JudgeServer() as server:
        common = ["--set", f"judge.base_url={server.url}", "--set", f"output.parquet={tmp_path}"]
        out = evalbeam("run", "configs/demo_rubrics.yaml", *common, "--set", "run_id=demo1").stdout
        assert server.stats.stages["generation"] == 2 * len(prompts) < 2 * len(rows)  # two adaptive metrics
        server.stats.stages.clear()
        evalbeam("run", "configs/demo_rubrics.yaml", *common, "--set", "run_id=demo2",
                 "--set", "judge.model=gemini-2.5-pro", "--set", f"judge.rubrics_from={tmp_path}/demo1/rubrics")
        assert server.stats.stages.get("generation", 0) == 0
    assert f"read {len(rows)} = scored {len(rows)} + dead-lettered 0; metric errors 0" in out
    judged = {s["metric"] for s in table(tmp_path / "demo1", "summary") if s["slice"] == "overall"}
    assert {"evalbeam_general_quality", "evalbeam_instruction_following_v1", "evalbeam_final_response_match", "evalbeam_safety_v1"} <= judged
    first, pinned = rubric_table(tmp_path, "demo1"), rubric_table(tmp_path, "demo2")
    assert {k: [r["rubric"] for r in v] for k, v in first.items()} == {k: [r["rubric"] for r in v] for k, v in pinned.items()}


def test_runs_prices_each_metric_and_stage():
    from evalbeam.transforms.runs import judge_totals

    usage = {"evalbeam_general_quality:generation": {"requests": 3, "prompt_tokens": 1_000_000, "output_tokens": 200_000},
             "evalbeam_general_quality:validation": {"requests": 6, "prompt_tokens": 2_000_000, "output_tokens": 100_000,
                                            "batch_prompt_tokens": 2_000_000, "batch_output_tokens": 100_000}}
    totals = judge_totals(usage, {"m": {"input_per_million": 0.3, "output_per_million": 2.5}}, "m")
    per_stage = json.loads(totals["judge_usage"])
    assert per_stage["evalbeam_general_quality:generation"]["estimated_cost"] == pytest.approx(0.3 + 0.5)
    assert per_stage["evalbeam_general_quality:validation"]["estimated_cost"] == pytest.approx((0.6 + 0.25) / 2)  # batch: half
    assert totals["judge_estimated_cost"] == pytest.approx(sum(u["estimated_cost"] for u in per_stage.values()))
    unpriced = json.loads(judge_totals(usage, {}, "m")["judge_usage"])
    assert all("estimated_cost" not in u for u in unpriced.values())
