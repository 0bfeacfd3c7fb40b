"""Failure modes, the pure part (metrics.failure_modes): taxonomies, what counts as a
failure, the classification prompt, schema and answers, and the per-(metric, slice)
count against a direct computation."""
import json
import random

import numpy as np
import pytest

from evalbeam.configs.failure_modes import FailureModesConfig
from evalbeam.metrics.failure_modes import (
    ModeCounts,
    assigned_mode,
    classification_prompt,
    classification_schema,
    example_rank,
    instance_failure,
    rubric_failure,
)
from evalbeam.metrics.taxonomy import OTHER, TASK_SUCCESS, TOOL_USE, TaxonomyError, taxonomy_from_yaml
from evalbeam.metrics.judge.templates import InvalidJudgment, parse_answer
from evalbeam.metrics.statistics.summary import bootstrap_weight_matrix


def test_builtin_taxonomies_have_unique_ids_an_other_mode_and_a_stable_digest():
    for t in (TASK_SUCCESS, TOOL_USE):
        assert len(set(t.ids)) == len(t.ids) >= 10 and OTHER in t.ids
        assert all(m.name and m.description.endswith(".") for m in t.modes)
    assert TASK_SUCCESS.digest != TOOL_USE.digest and len(TASK_SUCCESS.digest) == 16
    # the digest is the modes' content, not the name or origin
    again = taxonomy_from_yaml(json.dumps([{"id": m.id, "name": m.name, "description": m.description}
                                           for m in TOOL_USE.modes]), "mine")
    assert again.digest == TOOL_USE.digest and again.origin == "file"


def test_a_users_taxonomy_two_levels_other_added_and_bad_files_refused():
    t = taxonomy_from_yaml("""
- {id: billing, name: Billing, description: Money matters.}
- {id: refund_wrong, name: Wrong refund, description: Refunded the wrong amount., parent: billing}
""", "mine")
    assert t.ids == ("billing", "refund_wrong", OTHER) and t.modes[1].parent == "billing"
    assert "- refund_wrong [under billing]: Wrong refund. Refunded the wrong amount." in classification_prompt(
        instance_failure("i", {"prompt": "p", "response": "r"}, {"metric": "m", "passed": False, "score": 0.0}), {}, t)
    bad = [
        ("[]", "non-empty list"),
        ("- {id: A, name: x, description: y}", "lowercase"),
        ("- {id: a, name: x, description: y}\n- {id: a, name: z, description: w}", "repeated"),
        ("- {id: a, name: x}", "needs a description"),
        ("- {id: a, name: x, description: y, parent: zz}", "parent 'zz'"),
        ("- {id: a, name: x, description: y, colour: red}", "unknown keys"),
        ("- {id: a, name: x, description: y}\n- {id: b, name: x, description: y, parent: a}\n"
         "- {id: c, name: x, description: y, parent: b}", "two levels"),
        ("- [unclosed", "not valid YAML"),
    ]
    for text, reason in bad:
        with pytest.raises(TaxonomyError, match=reason):
            taxonomy_from_yaml(text, "bad")


def test_config_section_names_builtins_discover_or_a_yaml_file():
    assert FailureModesConfig(metrics=["m"], taxonomy="some/folder/tool_use").taxonomy == "tool_use"
    assert FailureModesConfig(metrics=["m"], taxonomy="t.yaml").taxonomy == "t.yaml"
    with pytest.raises(ValueError, match="taxonomy file ending"):
        FailureModesConfig(metrics=["m"], taxonomy="tool-use")
    with pytest.raises(ValueError, match="listed twice"):
        FailureModesConfig(metrics=["m", "m"])


def test_what_counts_as_a_failure():
    fields = {"prompt": "p", "response": "r"}
    assert instance_failure("i", fields, {"metric": "m", "passed": True, "score": 1.0}) is None
    assert instance_failure("i", fields, {"metric": "m", "passed": None, "score": 0.3}) is None  # no threshold
    # a metric that could not score is not a failure of the output; a failed agent run is
    assert instance_failure("i", fields, {"metric": "m", "error": "judge failed"}) is None
    run_failed = instance_failure("i", {**fields, "inference_error": "boom"}, {"metric": "m", "error": "boom"})
    assert run_failed.rubric_id is None and "boom" in run_failed.what
    failed = instance_failure("i", fields, {"metric": "m", "passed": False, "score": 0.25, "threshold": 0.5,
                                            "explanation": "too short"})
    assert failed.what == ("The metric m did not pass: score 0.25 (threshold 0.5).\n"
                           "The evaluator's explanation: too short")
    rubric = {"instance_id": "i", "metric": "gq", "rubric_id": "r2", "rubric": "Is kind.", "verdict": False,
              "reasoning": "It is rude.", "turn": 1}
    f = rubric_failure(rubric)
    assert (f.rubric_id, f.metric) == ("r2", "gq") and "(turn 2)" in f.what and "It is rude." in f.what
    assert rubric_failure({**rubric, "verdict": None}) is None and rubric_failure({**rubric, "verdict": True}) is None


def test_agent_cases_are_rendered_with_their_tool_calls():
    fields = {"invocations": [{"prompt": "Refund order 7", "response": "Done",
                               "tool_calls": [{"tool_name": "refund", "tool_input": {"order": 7}, "response": "ok"}]}]}
    failure = instance_failure("i", fields, {"metric": "tool_trajectory_avg_score", "passed": False, "score": 0.0})
    prompt = classification_prompt(failure, fields, TOOL_USE)
    assert "USER TURN 1: Refund order 7" in prompt and 'tool_calls: [{"args": {"order": 7}, "name": "refund"}]' in prompt
    assert "AGENT RESPONSE 1: Done" in prompt and "- bad_arguments: " in prompt


def test_answers_an_unknown_mode_is_kept_and_counted_as_other():
    schema = classification_schema(TOOL_USE)
    assert schema["properties"]["mode"]["enum"] == list(TOOL_USE.ids) and schema["required"] == ["mode", "rationale"]
    mode, rationale = parse_answer('{"mode": "wrong_tool", "rationale": "used search"}', "mode", TOOL_USE.ids)
    assert (assigned_mode(mode, TOOL_USE), rationale) == ("wrong_tool", "used search")
    mode, _ = parse_answer('{"mode": "cosmic_rays", "rationale": "?"}', "mode", TOOL_USE.ids)
    assert mode == "cosmic_rays" and assigned_mode(mode, TOOL_USE) == OTHER
    for junk, reason in (("Probably a tool problem", "not JSON"), ('{"mode": "", "rationale": "x"}', "names no mode"),
                         ('{"mode": "wrong_tool"}', "no rationale")):
        with pytest.raises(InvalidJudgment, match=reason):
            parse_answer(junk, "mode", TOOL_USE.ids)


def direct_rows(failures, modes):
    """The share, its bootstrap CI and examples computed directly from every failure."""
    ids = [i for i, _ in failures]
    w = bootstrap_weight_matrix(ids)
    total = w.sum(axis=0)
    out = {}
    for mode in modes:
        mask = np.array([m == mode for _, m in failures])
        count = int(mask.sum())
        shares = w[mask].sum(axis=0)[total > 0] / total[total > 0]
        low, high = np.percentile(shares, [2.5, 97.5])
        examples = [i for _, i in sorted({(example_rank(i), i) for i, m in failures if m == mode})[:5]]
        out[mode] = (count, count / len(failures), low, high, examples)
    return out


def test_mode_counts_merged_in_chunks_equal_a_direct_computation():
    rng = random.Random(7)
    modes = list(TOOL_USE.ids)
    # instances with several failures each (so the CI must resample instances, not failures)
    failures = [(f"case-{rng.randrange(400)}", rng.choice(modes[:5] + [None])) for _ in range(3000)]
    parts = [ModeCounts() for _ in range(7)]
    for n, (i, m) in enumerate(failures):
        parts[n % 7].add(i, m)
    merged = parts[-1]
    for p in reversed(parts[:-1]):
        merged.merge(p)
    rows = {r["mode"]: r for r in merged.rows(TOOL_USE)}
    assert list(rows) == modes  # every mode, count 0 included
    classified = [(i, m) for i, m in failures if m is not None]
    unclassified = len(failures) - len(classified)
    direct = direct_rows(failures, modes)
    for mode in modes:
        count, share, low, high, examples = direct[mode]
        r = rows[mode]
        assert (r["count"], r["failures"], r["unclassified"]) == (count, 3000, unclassified)
        assert r["share"] == pytest.approx(share) and r["examples"] == examples
        assert (r["share_ci_low"], r["share_ci_high"]) == (pytest.approx(low), pytest.approx(high))
    assert sum(r["count"] for r in rows.values()) + unclassified == 3000
    assert rows[modes[0]]["share_ci_low"] < rows[modes[0]]["share"] < rows[modes[0]]["share_ci_high"]
    assert rows["repeated_call"]["count"] == 0 and rows["repeated_call"]["share_ci_high"] == 0.0


def test_mode_counts_hold_no_failure():
    counts = ModeCounts()
    for n in range(20_000):
        counts.add(f"i{n}", TOOL_USE.ids[n % 3])
    counts.flush()
    # bounded by the modes: replicate sums per mode, five examples each, nothing per failure
    assert len(counts.boot) == 3 and all(len(e) == 5 for e in counts.examples.values()) and not counts.pending


def test_a_bad_taxonomy_file_or_metric_is_refused_before_any_work(tmp_path):
    import yaml

    from evalbeam.configs import ConfigError, load_config
    from evalbeam.pipelines.preflight import preflight

    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "response": "x", "reference": "y"}\n')
    (tmp_path / "mine.yaml").write_text("- {id: slow, name: Slow}\n")

    def config(**failure_modes):
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump({
            "name": "t", "input": {"uri": str(data), "id_column": "id"},
            "metrics": [{"name": "exact_match", "threshold": 1.0}, "bleu"],
            "failure_modes": {"metrics": ["exact_match"], **failure_modes}, "output": {"parquet": str(tmp_path / "o")}}))
        return path

    with pytest.raises(ConfigError, match="mine.yaml: mode slow: needs a description"):
        preflight(load_config(config(taxonomy="mine.yaml")), credentials=False)  # relative to the config's folder
    with pytest.raises(ConfigError, match="'bleu' never fails: give it a threshold"):
        load_config(config(metrics=["bleu"]))
    with pytest.raises(ConfigError, match="'nope' is not a metric of this config"):
        load_config(config(metrics=["nope"]))
    with pytest.raises(ConfigError, match="pin a discovered taxonomy: set taxonomy: discover"):
        load_config(config(taxonomies_from=["x"]))
