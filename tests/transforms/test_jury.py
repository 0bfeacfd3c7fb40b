"""Juries (a metric judged by several models) and a metric's own judge: the config, the
aggregation, the jurors' calls through the one judge layer against the local Gemini stand-in
(which answers per model: #score@MODEL=N, #down@MODEL), the jurors' alpha against the
`krippendorff` package, plan's counts, and one `evalbeam run`."""
from __future__ import annotations

import datetime as dt
import json
import pickle
import random

import apache_beam as beam
import krippendorff
import numpy as np
import pydantic
import pytest
import yaml
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from evalbeam.configs import EvalConfig
from evalbeam.metrics.statistics.agreement import IntervalAlpha
from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.judge.jury import JuryRule, aggregate_jury
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.transforms.judge import JudgeInstances
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.metrics.rows.tables import RunKey
from evalbeam.transforms.score import ScoredInstance
from evalbeam.transforms.summary import SummarizeScores
from tests.helpers import evalbeam, table
from tests.servers.judge_server import Behaviour, JudgeServer

KEY = "jury-test-key-0123456789"
RUN = RunKey("jr", dt.date(2026, 11, 27))
PRO, FLASH, LITE = "gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)


def config_of(metrics, **judge) -> EvalConfig:
    return EvalConfig.model_validate({"name": "j", "input": {"uri": "x.jsonl"}, "output": {"parquet": "o"},
                                      "metrics": metrics, "judge": judge})


# ---------------------------------------------------------------- the config


def test_a_juror_is_a_partial_judge_laid_over_the_runs_and_checked_as_one():
    config = config_of([{"name": "evalbeam_fluency", "judges": [{"model": PRO}, {"model": LITE, "temperature": 0.7,
                                                                                  "name": "lite"}]}],
                       requests_per_minute=60, max_attempts=2)
    [(pro, pro_settings), (lite, lite_settings)] = config.metrics[0].jurors(config.judge)
    assert (pro, lite) == ("gemini_2_5_pro", "lite")
    assert (pro_settings.model, pro_settings.requests_per_minute, pro_settings.max_attempts) == (PRO, 60, 2)
    assert (lite_settings.temperature, pro_settings.temperature) == (0.7, 0.0)
    assert JudgeSettings().overridden({"model": PRO}).model == PRO
    # a stage running beside another holds half the quotas: a juror's own quota is halved too
    half = JudgeContext(config.judge).share(0.5)
    assert half.juror_settings({"model": PRO}).requests_per_minute == 30
    assert half.juror_settings({"model": PRO, "requests_per_minute": 100}).requests_per_minute == 50

    def refused(metric, **judge):
        with pytest.raises(pydantic.ValidationError) as e:
            config_of([metric], **judge)
        return str(e.value)

    assert "metrics.0.judges.1.modle: Extra inputs are not permitted" in refused(
        {"name": "evalbeam_fluency", "judges": [{"model": PRO}, {"modle": LITE}]})
    assert "metrics.0.judge.temperature: Input should be less than or equal to 2" in refused(
        {"name": "evalbeam_fluency", "judge": {"temperature": 3}})
    assert "two jurors judge with the same model" in refused(
        {"name": "evalbeam_fluency", "judges": [{"model": PRO}, {"model": PRO, "name": "again"}]})
    assert "two jurors are named 'x'" in refused(
        {"name": "evalbeam_fluency", "judges": [{"model": PRO, "name": "x"}, {"model": LITE, "name": "x"}]})
    assert "shards: set for the whole run" in refused({"name": "evalbeam_fluency", "judge": {"shards": 2}})
    assert "exact_match is not one" in refused({"name": "exact_match", "judge": {"model": PRO}})
    assert "jury.quorum: 3 is more than the 2 jurors" in refused(
        {"name": "evalbeam_fluency", "judges": [{"model": PRO}, {"model": LITE}], "jury": {"quorum": 3}})
    assert "give judge (one judge for this metric) or judges" in refused(
        {"name": "evalbeam_fluency", "judge": {"model": PRO}, "judges": [{"model": PRO}, {"model": LITE}]})
    assert "jury: applies to a jury" in refused({"name": "evalbeam_fluency", "jury": {"aggregate": "max"}})
    assert "at least 2 items" in refused({"name": "evalbeam_fluency", "judges": [{"model": PRO}]})


# ---------------------------------------------------------------- the aggregation


def test_jury_aggregates_state_ties_splits_and_missing_quorums():
    mean, majority, unanimous = JuryRule(), JuryRule(aggregate="majority"), JuryRule(aggregate="unanimous")
    assert aggregate_jury("pointwise", mean, 3, [(5.0, None), (4.0, None), (3.0, None)])[:2] == ("mean", 4.0)
    assert aggregate_jury("pointwise", JuryRule(aggregate="median"), 4,
                          [(1.0, None), (5.0, None), (4.0, None), (2.0, None)])[:2] == ("median", 3.0)
    assert aggregate_jury("pointwise", JuryRule(aggregate="min"), 2, [(1.0, None), (5.0, None)])[1] == 1.0
    assert aggregate_jury("pointwise", majority, 3, [(5.0, None), (1.0, None), (5.0, None)]) == (
        "majority", 5.0, None, 2 / 3, None)
    # a tie is an outcome of its own, never a silent pick
    outcome, score, _, _, error = aggregate_jury("pointwise", majority, 2, [(5.0, None), (1.0, None)])
    assert (outcome, score, error) == ("tie", None, "jury tie: 1 x1, 5 x1 (aggregate majority)")
    assert aggregate_jury("pointwise", unanimous, 2, [(5.0, None), (4.0, None)])[0::4] == (
        "split", "jury split: 4 x1, 5 x1 (aggregate unanimous)")
    # pairwise: the majority of the jurors' choices by default; a tie of choices is a TIE (score 0.5)
    assert aggregate_jury("pairwise", mean, 3, [(1.0, "CANDIDATE"), (0.0, "BASELINE"), (1.0, "CANDIDATE")])[:3] == (
        "majority", 1.0, "CANDIDATE")
    assert aggregate_jury("pairwise", mean, 2, [(1.0, "CANDIDATE"), (0.0, "BASELINE")])[:3] == ("tie", 0.5, "TIE")
    # a juror missing: no verdict below the quorum (default: all of them)
    assert aggregate_jury("pointwise", mean, 3, [(5.0, None), (4.0, None)])[0::4] == (
        "no_quorum", "jury: 2 of 3 jurors answered, fewer than its quorum of 3")
    assert aggregate_jury("pointwise", JuryRule(quorum=2), 3, [(5.0, None), (4.0, None)])[:2] == ("mean", 4.5)


def test_interval_alpha_equals_the_krippendorff_package():
    rng = np.random.default_rng(7)
    for trial in range(200):
        raters, units = int(rng.integers(2, 6)), int(rng.integers(2, 40))
        scale = [1.0, 2.0, 3.0, 4.0, 5.0] if trial % 2 else [0.0, 0.5, 1.0]
        truth = rng.choice(scale, size=units)
        data = np.where(rng.random((raters, units)) < 0.3, rng.choice(scale, size=(raters, units)),
                        np.broadcast_to(truth, (raters, units))).astype(float)
        data[rng.random((raters, units)) < 0.2] = np.nan  # jurors that did not answer
        parts = [IntervalAlpha(), IntervalAlpha()]
        for u in range(units):
            parts[u % 2].add([float(v) for v in data[:, u] if not np.isnan(v)])
        alpha, why = parts[0].merge(parts[1]).value()
        pairable = (~np.isnan(data)).sum(axis=0) >= 2
        values = data[:, pairable]
        if not pairable.any() or np.nanmax(values) == np.nanmin(values):
            assert alpha is None and why
            continue
        want = krippendorff.alpha(reliability_data=data, level_of_measurement="interval")
        assert alpha == pytest.approx(want, abs=1e-9), trial


# ---------------------------------------------------------------- in a pipeline, against the stand-in


def instance(i, response, baseline=None, group="g"):
    fields = {"prompt": "Greet", "response": response}
    if baseline is not None:
        fields["baseline_model_response"] = baseline
    return Instance(i, fields, {"group": group}, f"t:{i}")


def _keep(path):
    """A matcher that keeps what a PCollection holds in a file (the runner pickles matchers: a
    closure's list would be filled in a copy)."""
    def keep(got):
        with open(path, "wb") as f:
            pickle.dump(list(got), f)
    return keep


def _kept(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def judged(tmp_path, instances, metrics, *, stream=False, server=None, judge=None, checkpoint=None):
    config = config_of(metrics, base_url=server.url, max_attempts=2, timeout_seconds=10, **(judge or {}))
    with TestPipeline() as p:
        items = p | beam.Create(instances)
        if stream:
            items = items | beam.Map(lambda i: ScoredInstance(i, []))
        scored, cache_rows, usage = items | JudgeInstances(RUN, config.template_judge_specs(),
                                                           JudgeContext(config.judge, checkpoint=checkpoint),
                                                           stream=stream)
        for name, pcoll in (("scored", scored), ("cache", cache_rows), ("usage", usage)):
            assert_that(pcoll, _keep(tmp_path / name), label=f"Keep{name}")
    rows = [r for s in _kept(tmp_path / "scored") for r in s.results]
    return {(r["instance_id"], r["metric"]): r for r in rows}, _kept(tmp_path / "cache"), _kept(tmp_path / "usage")[0]


JURY = {"name": "evalbeam_fluency", "judges": [{"model": PRO, "name": "pro"}, {"model": LITE, "name": "lite"}]}


# the two judge paths (shards for Dataflow; a local run's stream), and batch mode (each model's own jobs)
PATHS = {"shards": (False, {}), "stream": (True, {}),
         "batch": (False, {"mode": "batch", "batch_poll_seconds": 0.05, "batch_poll_max_seconds": 0.1})}


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_each_juror_calls_its_own_model_and_its_judgment_stays_on_the_row(tmp_path, api_key, path):
    stream, judge = PATHS[path]
    rows_in = [instance("a", f"Hello #score@{PRO}=5 #score@{LITE}=3"),
               instance("b", f"Hi #score@{PRO}=4 #score@{LITE}=4"),
               instance("c", f"Hey #score@{PRO}=2 #down@{LITE}"),
               instance("d", f"Yo #score@{PRO}=1 #score@{LITE}=5")]
    own = {"name": "evalbeam_coherence", "judge": {"model": PRO}}
    with JudgeServer(Behaviour(latency_median=0.02, latency_sigma=0.5)) as server:
        rows, cache, usage = judged(tmp_path, rows_in, [JURY, own], stream=stream, server=server, judge=judge)
        jobs = sorted((job["model"], job["requests"]) for job in server.stats.batch_jobs)
    # batch mode: one job per settings (the pro juror and coherence's own judge have the same: one job; the
    # run's judge has nothing to ask here); the failed juror's item retried online
    assert jobs == ([] if path != "batch" else [(LITE, 4), (PRO, 8)])
    assert len(rows) == 8  # no row lost, the failed juror's included
    a = rows[("a", "evalbeam_fluency")]
    assert (a["score"], a["jury_outcome"], a["jury_answered"], a["error"]) == (4.0, "mean", 2, None)
    jurors = json.loads(a["jurors"])
    assert [(j["name"], j["model"], j["score"]) for j in jurors] == [("pro", PRO, 5.0), ("lite", LITE, 3.0)]
    assert jurors[0]["explanation"] == "Judged score 5 from the inputs." and jurors[1]["error"] is None
    assert a["explanation"] == "[pro: 5] Judged score 5 from the inputs.\n[lite: 3] Judged score 3 from the inputs."
    assert a["judge_model"] == f"{PRO},{LITE}" and a["attempts"] == 2
    # a juror failing after its retries: its error on the row; below the quorum (all), no verdict
    c = rows[("c", "evalbeam_fluency")]
    assert (c["score"], c["jury_outcome"], c["jury_answered"]) == (None, "no_quorum", 1)
    assert c["error"].startswith("jury: 1 of 2 jurors answered, fewer than its quorum of 2 (lite: judge failed after "
                                 "2 attempts") and "last: HTTP 503" in c["error"]
    failed = json.loads(c["jurors"])[1]
    assert failed["score"] is None and failed["error"].startswith("judge failed after 2 attempts")
    # the metric with its own judge: one judge, its model; no jury columns
    coherence = rows[("a", "evalbeam_coherence")]
    assert coherence["judge_model"] == PRO and coherence["jurors"] is None and coherence["jury_outcome"] is None
    # accounting per juror (each its model's entry), cache rows under each juror's model
    assert {m: u["requests"] for m, u in usage.items()} == {
        "evalbeam_fluency:pro": 4, "evalbeam_fluency:lite": 4, "evalbeam_coherence": 4}
    assert usage["evalbeam_fluency:lite"]["failures"] == 1
    assert sorted((c["metric"], c["model"]) for c in cache) == sorted(
        [("evalbeam_fluency:pro", PRO)] * 4 + [("evalbeam_fluency:lite", LITE)] * 3 + [("evalbeam_coherence", PRO)] * 4)


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["shards", "stream"])
def test_a_jurors_answers_reused_from_checkpoints_keep_its_model(tmp_path, api_key, stream):
    # a re-run of one run_id reuses its checkpointed answers, which keep no model: each is priced at
    # the model of the juror that asked it, not the run's judge's
    rows_in = [instance("a", f"Hello #score@{PRO}=5 #score@{LITE}=3"), instance("b", f"Hi #score@{PRO}=4 #score@{LITE}=2")]
    checkpoint = str(tmp_path / "checkpoints")
    with JudgeServer() as server:
        judged(tmp_path, rows_in, [JURY], stream=stream, server=server, checkpoint=checkpoint)
        asked = server.stats.requests
        rows, _, usage = judged(tmp_path, rows_in, [JURY], stream=stream, server=server, checkpoint=checkpoint)
        assert server.stats.requests == asked == 4
    assert rows[("a", "evalbeam_fluency")]["score"] == 4.0 and rows[("b", "evalbeam_fluency")]["score"] == 3.0
    assert {m: (u["checkpoint_reused"], u["model"]) for m, u in usage.items()} == {
        "evalbeam_fluency:pro": (2, PRO), "evalbeam_fluency:lite": (2, LITE)}


@pytest.mark.slow
def test_a_tie_a_quorum_and_a_pairwise_jury(tmp_path, api_key):
    rows_in = [instance("t", f"Hello #score@{PRO}=5 #score@{LITE}=1 #quality@{PRO}=5 #quality@{LITE}=1",
                        baseline=f"hi #quality@{PRO}=1 #quality@{LITE}=5"),
               instance("m", f"Hey #score@{PRO}=2 #down@{LITE} #quality@{PRO}=5",
                        baseline=f"hi #quality@{PRO}=1")]
    majority = {**JURY, "as": "fluency_majority", "jury": {"aggregate": "majority", "quorum": 1}}
    pairwise = {"name": "pairwise_evalbeam_fluency", "judges": JURY["judges"]}
    with JudgeServer() as server:
        rows, _, _ = judged(tmp_path, rows_in, [majority, pairwise], server=server)
    tie = rows[("t", "fluency_majority")]
    assert (tie["score"], tie["jury_outcome"], tie["error"]) == (None, "tie", "jury tie: 1 x1, 5 x1 (aggregate majority)")
    # with a quorum of 1, the juror that answered decides
    quorate = rows[("m", "fluency_majority")]
    assert (quorate["score"], quorate["jury_outcome"], quorate["jury_answered"]) == (2.0, "majority", 1)
    assert json.loads(quorate["jurors"])[1]["error"].startswith("judge failed after 2 attempts")
    # pairwise: pro prefers the candidate, lite the baseline: a tie of the jury, stated, a TIE choice
    split = rows[("t", "pairwise_evalbeam_fluency")]
    assert (split["pairwise_choice"], split["score"], split["jury_outcome"]) == ("TIE", 0.5, "tie")
    assert [j["pairwise_choice"] for j in json.loads(split["jurors"])] == ["CANDIDATE", "BASELINE"]


@pytest.mark.slow
def test_the_summary_reports_the_jurors_alpha_per_metric_and_slice(tmp_path):
    rng = random.Random(3)
    scored, matrix = [], {"overall": [], "group=x": [], "group=y": []}
    for i in range(60):
        truth = rng.randint(1, 5)
        scores = [None if rng.random() < 0.15 else float(truth if rng.random() < 0.7 else rng.randint(1, 5))
                  for _ in range(3)]
        answered = [s for s in scores if s is not None]
        row = {"metric": "f", "score": sum(answered) / len(answered) if answered else None,
               "error": None if answered else "jury: 0 of 3", "passed": None, "jury_answered": len(answered),
               "jurors": json.dumps([{"name": n, "score": s, "error": None if s is not None else "down"}
                                     for n, s in zip("pqr", scores)])}
        group = "xy"[i % 2]
        scored.append(ScoredInstance(Instance(f"i{i}", {}, {"group": group}, "t"), [row]))
        column = [np.nan if s is None else s for s in scores]
        matrix["overall"].append(column)
        matrix[f"group={group}"].append(column)
    with TestPipeline() as p:
        summary = p | beam.Create(scored) | SummarizeScores(RUN, {"f": None})
        assert_that(summary, _keep(tmp_path / "summary"))
    got = {r["slice"]: r for r in _kept(tmp_path / "summary")}
    for name, columns in matrix.items():
        data = np.array(columns).T
        want = krippendorff.alpha(reliability_data=data, level_of_measurement="interval")
        assert got[name]["jury_alpha"] == pytest.approx(want, abs=1e-9)
        assert got[name]["jury_alpha_units"] == int(((~np.isnan(data)).sum(axis=0) >= 2).sum())


@pytest.mark.slow
def test_plan_counts_each_jurors_calls_and_prices_each_at_its_model(tmp_path):
    from evalbeam.pipelines.plan import plan

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"i{i}", "prompt": "Greet", "response": f"Hello {i % 3}"}) + "\n"
                            for i in range(6)))
    config = EvalConfig.model_validate({
        "name": "planned", "input": {"uri": str(data), "id_column": "id"}, "output": {"parquet": str(tmp_path / "o")},
        "metrics": [JURY, "evalbeam_coherence"],
        "judge": {"requests_per_minute": 60, "prices": {PRO: {"input_per_million": 1.25, "output_per_million": 10},
                                                         FLASH: {"input_per_million": 0.3, "output_per_million": 2.5}}}})
    planned = plan(config)
    by_metric = {r["metric"]: r for r in planned["metrics"]}
    # 6 rows, 3 distinct responses: each juror asks its 3 distinct judgments
    assert {m: (r["asked"], r["to_call"], r["model"]) for m, r in by_metric.items()} == {
        "evalbeam_fluency:pro": (6, 3, PRO), "evalbeam_fluency:lite": (6, 3, LITE), "evalbeam_coherence": (6, 3, FLASH)}
    assert planned["calls"] == 9 and by_metric["evalbeam_fluency:lite"]["cost"] is None
    assert planned["unpriced_models"] == [LITE] and not planned["priced"]
    assert by_metric["evalbeam_fluency:pro"]["cost"] > by_metric["evalbeam_coherence"]["cost"] > 0
    # each model at its own quota, all at once: the slowest one's time, not the sum
    assert planned["minutes_at_quota"] == pytest.approx(3 / 60)


@pytest.mark.slow
def test_a_jury_end_to_end(tmp_path, api_key):
    data = tmp_path / "data.jsonl"
    rows = [{"id": "a", "prompt": "Greet", "response": f"Hello #score@{PRO}=5 #score@{LITE}=4", "team": "x"},
            {"id": "b", "prompt": "Greet", "response": f"Hey #score@{PRO}=2 #score@{LITE}=2", "team": "y"},
            {"id": "c", "prompt": "Greet", "response": f"Hi #score@{PRO}=4 #down@{LITE}", "team": "x"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with JudgeServer() as server:
        config = {"name": "jury", "run_id": "j1", "input": {"uri": str(data), "id_column": "id", "slice_columns": ["team"]},
                  "metrics": [{**JURY, "jury": {"quorum": 1}}],
                  "judge": {"base_url": server.url, "max_attempts": 2, "timeout_seconds": 10,
                            "prices": {PRO: {"input_per_million": 1.25, "output_per_million": 10},
                                       LITE: {"input_per_million": 0.1, "output_per_million": 0.4}}},
                  "output": {"parquet": str(tmp_path / "out")}}
        path = tmp_path / "jury.yaml"
        path.write_text(yaml.safe_dump(config))
        run = evalbeam("run", path)
        before = server.stats.requests
        # a re-run over this run's judge_cache: each juror's answers are found under its own model's keys; only
        # the failed judgment (not cached) is asked again, its 2 attempts
        again = evalbeam("run", path, "--set", "run_id=j2", "--set",
                         f"judge.cache={tmp_path / 'out' / 'j1' / 'judge_cache'}")
        assert "metric errors 0" in again.stdout and server.stats.requests - before == 2
    cached = {r["instance_id"]: r for r in table(tmp_path / "out" / "j2", "metric_results")}
    assert [(cached[i]["score"], cached[i]["cache_hit"]) for i in "abc"] == [(4.5, True), (2.0, True), (4.0, False)]
    assert "read 3 = scored 3 + dead-lettered 0; metric errors 0" in run.stdout
    assert "jury agreement (Krippendorff's alpha" in run.stdout
    out = tmp_path / "out" / "j1"
    results = {r["instance_id"]: r for r in table(out, "metric_results")}
    assert [results[i]["score"] for i in "abc"] == [4.5, 2.0, 4.0]
    assert [results[i]["jury_answered"] for i in "abc"] == [2, 2, 1]
    summary = {s["slice"]: s for s in table(out, "summary")}
    # units a and b (c has one answer): pro 5, 2; lite 4, 2
    want = krippendorff.alpha(reliability_data=[[5.0, 2.0], [4.0, 2.0]], level_of_measurement="interval")
    assert summary["overall"]["jury_alpha"] == pytest.approx(want) and summary["overall"]["jury_alpha_units"] == 2
    assert summary["team=y"]["jury_alpha"] is None and summary["team=y"]["jury_alpha_units"] == 1
    [runs] = table(out, "runs")
    usage = json.loads(runs["judge_usage"])
    assert {m: (u["model"], u["requests"]) for m, u in usage.items()} == {
        "evalbeam_fluency:pro": (PRO, 3), "evalbeam_fluency:lite": (LITE, 3)}
    pro, lite = usage["evalbeam_fluency:pro"], usage["evalbeam_fluency:lite"]
    assert pro["estimated_cost"] == pytest.approx((pro["prompt_tokens"] * 1.25 + pro["output_tokens"] * 10) / 1e6)
    assert runs["judge_estimated_cost"] == pytest.approx(pro["estimated_cost"] + lite["estimated_cost"])


def test_a_jurors_own_credentials_are_checked_before_anything_runs(tmp_path, api_key, monkeypatch):
    from evalbeam.configs import ConfigError
    from evalbeam.pipelines.preflight import preflight

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "prompt": "Greet", "response": "Hi"}) + "\n")
    monkeypatch.delenv("OTHER_KEY", raising=False)
    config = EvalConfig.model_validate({
        "name": "creds", "input": {"uri": str(data), "id_column": "id"}, "output": {"parquet": str(tmp_path / "o")},
        "metrics": [{"name": "evalbeam_fluency", "judges": [{"model": PRO}, {"model": LITE, "api_key_env": "OTHER_KEY"}]}]})
    with pytest.raises(ConfigError) as e:
        preflight(config)
    assert str(e.value).startswith("metrics.0.judges.1 (evalbeam_fluency): judge metrics with backend gemini_api need "
                                   "an API key: set the environment variable OTHER_KEY")
    monkeypatch.setenv("OTHER_KEY", "another-key")
    preflight(config)  # both jurors' keys set: no error


# ---------------------------------------------------------------- one provider quota, shared


def test_settings_calling_one_model_share_its_quota_unless_they_name_their_own():
    from evalbeam.metrics.judge.asks import plan_judges, share_quotas

    config = config_of([
        "evalbeam_coherence",  # the run's judge (FLASH)
        {"name": "evalbeam_fluency", "judge": {"temperature": 0.5}},  # FLASH again: the same quota
        {"name": "evalbeam_fluency", "as": "jury", "judges": [
            {"model": PRO, "name": "cold"}, {"model": PRO, "temperature": 0.7, "name": "warm"},
            {"model": PRO, "temperature": 1.0, "name": "own", "requests_per_minute": 50},  # its own: kept
            {"model": FLASH, "name": "flash", "base_url": "http://other.example/"},  # another endpoint
            {"provider": "anthropic", "model": PRO, "name": "claude"}]}],  # another provider, one name
        requests_per_minute=600, tokens_per_minute=90000)
    context = JudgeContext(config.judge).share(0.5)  # a stage beside another: half the job's quotas
    plans, shared = share_quotas(plan_judges(config.template_judge_specs(), context.settings, context.juror_settings),
                                 context.settings)
    got = {j.label: (j.settings.requests_per_minute, j.settings.tokens_per_minute) for p in plans for j in p.jurors}
    assert shared.requests_per_minute == 150 and shared.tokens_per_minute == 22500
    # "own" names its requests_per_minute (the stage's half of 50): taken out of the 300 cold and warm
    # split; it names no tokens_per_minute, so it splits that one with them
    assert got == {"evalbeam_fluency": (150, 22500), "jury:cold": (137.5, 15000), "jury:warm": (137.5, 15000),
                   "jury:own": (25, 15000), "jury:flash": (300, 45000), "jury:claude": (300, 45000)}
    # no metric on the run's judge: its share is not held back from the others
    alone = config_of([{"name": "evalbeam_fluency", "judge": {"temperature": 0.5}}], requests_per_minute=600)
    plans, shared = share_quotas(plan_judges(alone.template_judge_specs(), alone.judge), alone.judge)
    assert plans[0].jurors[0].settings.requests_per_minute == 600


def test_quotas_named_on_a_shared_quota_are_taken_out_of_it_and_may_not_exhaust_it():
    from evalbeam.metrics.judge.asks import QuotaError, plan_judges, share_quotas

    def shared(jurors, **judge):
        config = config_of([{"name": "evalbeam_fluency", "as": "jury", "judges": jurors}], **judge)
        plans, _ = share_quotas(plan_judges(config.template_judge_specs(), config.judge), config.judge)
        return {j.label: (j.settings.requests_per_minute, j.settings.tokens_per_minute) for j in plans[0].jurors}

    got = shared([{"model": PRO, "name": "a", "requests_per_minute": 100, "tokens_per_minute": 1000},
                  {"model": PRO, "name": "b", "temperature": 0.5}, {"model": PRO, "name": "c", "temperature": 1}],
                 requests_per_minute=600, tokens_per_minute=9000)
    assert got == {"jury:a": (100, 1000), "jury:b": (250, 4000), "jury:c": (250, 4000)}
    assert sum(rpm for rpm, _ in got.values()) == 600 and sum(tpm for _, tpm in got.values()) == 9000
    with pytest.raises(QuotaError, match=r"requests_per_minute: the quotas named by jury:a, jury:b \(400 \+ 200\) "
                                          r"leave none of the 600 of model .*pro"):
        shared([{"model": PRO, "name": "a", "requests_per_minute": 400},
                {"model": PRO, "name": "b", "temperature": 0.5, "requests_per_minute": 200},
                {"model": PRO, "name": "c", "temperature": 1}], requests_per_minute=600)
    # all naming their own: no inherited quota to take them from, each keeps its own
    assert shared([{"model": PRO, "name": "a", "requests_per_minute": 400},
                   {"model": PRO, "name": "b", "temperature": 0.5, "requests_per_minute": 400}],
                  requests_per_minute=600) == {"jury:a": (400, None), "jury:b": (400, None)}



def test_quotas_that_leave_the_others_none_are_a_config_error_before_anything_runs(tmp_path, api_key):
    from evalbeam.configs import ConfigError
    from evalbeam.pipelines.preflight import preflight

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "prompt": "Greet", "response": "Hi"}) + "\n")
    config = EvalConfig.model_validate({
        "name": "quota", "input": {"uri": str(data), "id_column": "id"}, "output": {"parquet": str(tmp_path / "o")},
        "metrics": [{"name": "evalbeam_fluency", "as": "jury", "judges": [
            {"model": PRO, "name": "a", "requests_per_minute": 700}, {"model": PRO, "name": "b", "temperature": 0.5}]}],
        "judge": {"requests_per_minute": 600}})
    with pytest.raises(ConfigError, match=r"^judge\.requests_per_minute: the quotas named by jury:a \(700\) leave none "
                                          r"of the 600 of model gemini-2\.5-pro"):
        preflight(config)
    assert not (tmp_path / "o").exists()

@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["shards", "stream"])
def test_two_jurors_of_one_model_never_together_exceed_its_quota(tmp_path, api_key, stream):
    # 480 a minute is 8 a second; the stand-in grants 10 in any second. Sharing the quota, each juror
    # sends 4 a second; each at the whole quota, they would send 16 (the control below)
    rows_in = [instance(f"i{i}", f"Hi {i} #score=4") for i in range(12)]
    jurors = [{"model": PRO, "name": "cold"}, {"model": PRO, "temperature": 0.7, "name": "warm"}]
    with JudgeServer(Behaviour(quota=10, window_seconds=1.0)) as server:
        rows, _, _ = judged(tmp_path, rows_in, [{"name": "evalbeam_fluency", "judges": jurors}], server=server,
                            stream=stream, judge={"requests_per_minute": 480, "hedge_share": 0})
        times = sorted(server.stats.accepted_times)
    assert server.stats.rate_limited == 0 and len(times) == 24
    assert all(r["score"] == 4.0 and r["jury_answered"] == 2 for r in rows.values())
    assert max(sum(1 for t in times if start <= t < start + 1.0) for start in times) <= 10
    # the control: each juror naming the whole quota as its own sends more than the stand-in grants
    own = [{**j, "requests_per_minute": 480} for j in jurors]
    with JudgeServer(Behaviour(quota=10, window_seconds=1.0)) as server:
        judged(tmp_path, rows_in, [{"name": "evalbeam_fluency", "judges": own}], server=server, stream=stream,
               judge={"requests_per_minute": 480, "hedge_share": 0})
    assert server.stats.rate_limited > 0
