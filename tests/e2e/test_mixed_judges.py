"""One run whose metrics are judged by different providers: the run's Gemini judge, a metric's own
OpenAI-compatible judge, and a jury of a Gemini and an Anthropic juror, each against its own
stand-in (tests/servers/judge_server.py, tests/servers/provider_servers.py), through the real clients."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.helpers import evalbeam, table
from tests.servers.judge_server import JudgeServer
from tests.servers.provider_servers import ProviderServer

FLASH, PRO, GPT, CLAUDE = "gemini-2.5-flash", "gemini-2.5-pro", "gpt-judge", "claude-judge"
# a distinct fake key per provider: each stand-in must see only its own, and no output any of them
KEYS = {"GOOGLE_API_KEY": "g-key-mixed-0123456789abcdef", "MIXED_OPENAI_KEY": "sk-mixed-openai-9876543210",
        "MIXED_ANTHROPIC_KEY": "sk-ant-mixed-5555aaaa7777"}
PRICES = {FLASH: (0.3, 2.5), PRO: (1.25, 10.0), GPT: (2.0, 8.0), CLAUDE: (3.0, 15.0)}


@pytest.mark.slow
def test_metrics_judged_by_three_providers_in_one_run(tmp_path):
    # every row says what each model answers (#score@MODEL=N); each stand-in answers for its own models
    scores = {"a": {FLASH: 2, GPT: 4, PRO: 5, CLAUDE: 3}, "b": {FLASH: 3, GPT: 1, PRO: 2, CLAUDE: 2},
              "c": {FLASH: 5, GPT: 5, PRO: 4, CLAUDE: 1}}
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": i, "prompt": "Greet", "response": "Hello " + " ".join(
        f"#score@{m}={n}" for m, n in s.items())}) + "\n" for i, s in scores.items()))
    with JudgeServer() as gemini, ProviderServer() as openai, ProviderServer() as anthropic:
        config = {
            "name": "mixed", "run_id": "m1", "input": {"uri": str(data), "id_column": "id"},
            "output": {"parquet": str(tmp_path / "out")},
            "metrics": [
                "evalbeam_fluency",  # A: the run's judge (Gemini)
                {"name": "evalbeam_coherence",  # B: its own judge, another provider
                 "judge": {"provider": "openai_compatible", "base_url": openai.url + "/v1", "model": GPT,
                           "api_key_env": "MIXED_OPENAI_KEY"}},
                {"name": "evalbeam_fluency", "as": "fluency_jury",  # C: a Gemini and an Anthropic juror
                 "judges": [{"model": PRO}, {"provider": "anthropic", "base_url": anthropic.url, "model": CLAUDE,
                                             "api_key_env": "MIXED_ANTHROPIC_KEY"}]},
            ],
            "judge": {"model": FLASH, "base_url": gemini.url, "max_attempts": 2, "timeout_seconds": 10,
                      "prices": {m: {"input_per_million": i, "output_per_million": o}
                                 for m, (i, o) in PRICES.items()}},
        }
        path = tmp_path / "mixed.yaml"
        path.write_text(yaml.safe_dump(config))
        first = evalbeam("run", path, env=KEYS)
        asked = (gemini.stats.requests, openai.stats.requests, anthropic.stats.requests)
        # A: 3 rows at the Gemini stand-in, C's Gemini juror 3 more; B: 3 OpenAI calls; C's Claude juror 3
        assert asked == (6, 3, 3)
        assert openai.protocols == {"openai": 3} and anthropic.protocols == {"anthropic": 3}
        assert gemini.stats.api_keys == {KEYS["GOOGLE_API_KEY"]}
        assert openai.credentials == {KEYS["MIXED_OPENAI_KEY"]}
        assert anthropic.credentials == {KEYS["MIXED_ANTHROPIC_KEY"]}
        # a re-run over the first run's judge_cache asks no stand-in anything
        again = evalbeam("run", path, "--set", "run_id=m2", "--set",
                         f"judge.cache={tmp_path / 'out' / 'm1' / 'judge_cache'}", env=KEYS)
        assert (gemini.stats.requests, openai.stats.requests, anthropic.stats.requests) == asked
    results = {(r["instance_id"], r["metric"]): r for r in table(tmp_path / "out" / "m1", "metric_results")}
    for i, s in scores.items():
        assert (results[(i, "evalbeam_fluency")]["score"], results[(i, "evalbeam_fluency")]["judge_model"]) == \
            (s[FLASH], FLASH)
        assert (results[(i, "evalbeam_coherence")]["score"], results[(i, "evalbeam_coherence")]["judge_model"]) == \
            (s[GPT], GPT)
        jury = results[(i, "fluency_jury")]
        assert jury["score"] == (s[PRO] + s[CLAUDE]) / 2 and jury["jury_answered"] == 2
        assert [(j["model"], j["score"]) for j in json.loads(jury["jurors"])] == [(PRO, s[PRO]), (CLAUDE, s[CLAUDE])]
    cached = {(r["instance_id"], r["metric"]): r for r in table(tmp_path / "out" / "m2", "metric_results")}
    assert all(r["cache_hit"] for r in cached.values()) and len(cached) == 9
    assert {k: r["score"] for k, r in cached.items()} == {k: r["score"] for k, r in results.items()}
    [runs] = table(tmp_path / "out" / "m1", "runs")
    usage = json.loads(runs["judge_usage"])
    models = {"evalbeam_fluency": FLASH, "evalbeam_coherence": GPT, f"fluency_jury:{PRO.replace('-', '_').replace('.', '_')}": PRO,
              "fluency_jury:claude_judge": CLAUDE}
    assert {m: (u["model"], u["requests"]) for m, u in usage.items()} == {m: (model, 3) for m, model in models.items()}
    for metric, model in models.items():
        u, (i, o) = usage[metric], PRICES[model]
        assert u["prompt_tokens"] > 0 and u["estimated_cost"] == pytest.approx((u["prompt_tokens"] * i + u["output_tokens"] * o) / 1e6)
    assert runs["judge_estimated_cost"] == pytest.approx(sum(u["estimated_cost"] for u in usage.values()))
    # no key in any output file, nor in what either run printed
    written = [f for f in tmp_path.rglob("*") if f.is_file() and f.name != "mixed.yaml"]
    for key in KEYS.values():
        assert not [str(f) for f in written if key.encode() in f.read_bytes()], key
        assert key not in first.stdout + first.stderr + again.stdout + again.stderr


def test_only_the_judges_a_run_calls_need_credentials(tmp_path, monkeypatch):
    from evalbeam.configs import ConfigError, EvalConfig
    from evalbeam.pipelines.preflight import judge_credentials_problem, preflight

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "prompt": "Greet", "response": "Hi"}) + "\n")
    for name in ("GOOGLE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)

    def config(*metrics):
        return EvalConfig.model_validate({"name": "creds", "input": {"uri": str(data), "id_column": "id"},
                                          "output": {"parquet": str(tmp_path / "o")}, "metrics": list(metrics)})

    gpt = {"name": "evalbeam_coherence", "judge": {"provider": "openai_compatible", "model": GPT}}
    jury = {"name": "evalbeam_fluency", "judges": [{"provider": "openai_compatible", "model": GPT},
                                                   {"provider": "anthropic", "model": CLAUDE}]}
    with pytest.raises(ConfigError, match=r"^metrics.0.judge \(evalbeam_coherence\): judge.provider openai_compatible "
                                          r"\(gpt-judge\): .* set the environment variable OPENAI_API_KEY"):
        preflight(config(gpt, jury))
    # `evalbeam validate` names the same missing key (it checked only the run's judge before)
    assert "metrics.0.judge (evalbeam_coherence)" in judge_credentials_problem(config(gpt, jury))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-o")
    with pytest.raises(ConfigError, match=r"^metrics.1.judges.1 \(evalbeam_fluency\): .*ANTHROPIC_API_KEY"):
        preflight(config(gpt, jury))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-a")
    preflight(config(gpt, jury))  # no metric on the run's (Gemini) judge: its key is not asked for
    assert judge_credentials_problem(config(gpt, jury)) is None
    with pytest.raises(ConfigError, match="GOOGLE_API_KEY"):
        preflight(config(gpt, jury, "fluency"))  # a metric on the run's judge: its key is asked for


@pytest.mark.slow
def test_batch_mode_sends_each_providers_judgments_to_its_own_batch_api(tmp_path, monkeypatch):
    """judge.mode batch with metrics on three providers: each settings' judgments in its own batch
    jobs at its own server (Gemini Batch, OpenAI's Batch API, Anthropic's Message Batches)."""
    import datetime as dt
    import pickle

    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that

    from evalbeam.configs import EvalConfig
    from evalbeam.metrics.rows.instance import Instance
    from evalbeam.transforms.judge import JudgeInstances
    from evalbeam.transforms.judge_context import JudgeContext
    from evalbeam.metrics.rows.tables import RunKey

    for name, key in KEYS.items():
        monkeypatch.setenv(name, key)
    scores = {"a": {FLASH: 2, GPT: 4, PRO: 5, CLAUDE: 3}, "b": {FLASH: 3, GPT: 1, PRO: 2, CLAUDE: 2}}
    instances = [Instance(i, {"prompt": "Greet", "response": "Hello " + " ".join(
        f"#score@{m}={n}" for m, n in s.items())}, {}, f"t:{i}") for i, s in scores.items()]
    kept = tmp_path / "rows.pickle"

    def keep(got):
        with open(kept, "wb") as f:
            pickle.dump([r for s in got for r in s.results], f)

    with JudgeServer() as gemini, ProviderServer() as openai, ProviderServer() as anthropic:
        config = EvalConfig.model_validate({
            "name": "b", "input": {"uri": "x.jsonl"}, "output": {"parquet": "o"},
            "metrics": ["evalbeam_fluency",
                        {"name": "evalbeam_coherence", "judge": {
                            "provider": "openai_compatible", "base_url": openai.url + "/v1", "model": GPT,
                            "api_key_env": "MIXED_OPENAI_KEY"}},
                        {"name": "evalbeam_fluency", "as": "fluency_jury", "judges": [
                            {"model": PRO}, {"provider": "anthropic", "base_url": anthropic.url, "model": CLAUDE,
                                             "api_key_env": "MIXED_ANTHROPIC_KEY"}]}],
            "judge": {"model": FLASH, "base_url": gemini.url, "max_attempts": 2, "mode": "batch",
                      "batch_poll_seconds": 0.05, "batch_poll_max_seconds": 0.1}})
        with TestPipeline() as p:
            scored, _, _ = p | beam.Create(instances) | JudgeInstances(
                RunKey("b1", dt.date(2026, 11, 27)), config.template_judge_specs(), JudgeContext(config.judge))
            assert_that(scored, keep)
        jobs = {name: sorted((j["model"], j["requests"]) for j in server.stats.batch_jobs)
                for name, server in (("gemini", gemini), ("openai", openai), ("anthropic", anthropic))}
        online = (gemini.stats.requests, openai.stats.requests, anthropic.stats.requests)
    assert jobs == {"gemini": [(FLASH, 2), (PRO, 2)], "openai": [(GPT, 2)], "anthropic": [(CLAUDE, 2)]}
    assert online == (0, 0, 0)  # every judgment answered in a batch
    with open(kept, "rb") as f:
        rows = {(r["instance_id"], r["metric"]): r for r in pickle.load(f)}
    for i, s in scores.items():
        assert rows[(i, "evalbeam_fluency")]["score"] == s[FLASH]
        assert rows[(i, "evalbeam_coherence")]["score"] == s[GPT]
        assert rows[(i, "fluency_jury")]["score"] == (s[PRO] + s[CLAUDE]) / 2
