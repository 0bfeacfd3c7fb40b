"""evalbeam plan: what a run would ask the judge, checked against what the run then asks."""
import pytest
import json

from tests.helpers import evalbeam, table
from tests.servers.judge_server import JudgeServer
from tests.metrics.judge.test_judge import KEY, judge_config, write_data

ROWS = [
    {"id": "a", "prompt": "Greet the user", "response": "Hello! #score=4"},
    {"id": "b", "prompt": "Greet the user", "response": "Hello! #score=4"},  # the same content as "a"
    {"id": "c", "prompt": "Say goodbye", "response": "Bye. #score=2"},
    {"id": "d", "prompt": "Say goodbye", "response": "Farewell #score=5"},
    {"id": "e", "prompt": "Count to three", "response": "1 2 3 #score=3"},
    {"id": "f", "prompt": "Count to three"},  # no response: dead-lettered
]


def plan(config, monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    return json.loads(evalbeam("plan", config, "--json").stdout)


@pytest.mark.slow
def test_plan_counts_what_the_run_then_asks_and_the_cache_removes(tmp_path, monkeypatch):
    data = write_data(tmp_path, ROWS)
    with JudgeServer() as server:
        config = judge_config(tmp_path, data, server.url, ["fluency", "evalbeam_general_quality"], sampling_count=2)
        planned = plan(config, monkeypatch)
        assert server.stats.requests == 0  # plan calls nothing
        assert (planned["read"], planned["instances"], planned["dead_lettered"]) == (6, 5, 1)
        rows = {r["metric"]: r for r in planned["metrics"]}
        # fluency: 5 instances x 2 samples asked; "a" and "b" ask the same, so 4 x 2 distinct
        assert (rows["fluency"]["asked"], rows["fluency"]["distinct"], rows["fluency"]["to_call"]) == (10, 8, 8)
        # rubrics depend on the prompt only: three prompts, three generations
        gen = rows["evalbeam_general_quality:generation"]
        assert (gen["asked"], gen["distinct"], gen["to_call"], gen["upper_bound"]) == (5, 3, 3, False)
        val = rows["evalbeam_general_quality:validation"]
        assert (val["to_call"], val["upper_bound"], val["prompt_tokens"], val["cost"]) == (10, True, None, None)
        assert planned["calls"] == 8 + 3 + 10
        # the cost is the priced tokens (0.3 and 2.5 USD a million), batch at half
        assert planned["cost"] == (gen["cost"] + rows["fluency"]["cost"])
        fluency = rows["fluency"]
        assert fluency["cost"] == (fluency["prompt_tokens"] * 0.3 + fluency["output_tokens"] * 2.5) / 1e6
        assert abs(fluency["cost_batch"] - fluency["cost"] / 2) < 1e-12
        assert fluency["output_tokens"] == 8 * 2048 and fluency["output_tokens_from"] == "max_output_tokens"
        assert abs(planned["minutes_at_quota"] - 21 / 6000) < 1e-9

        evalbeam("run", config)
        calls = server.stats.accepted
        # exact for fluency and the generations (no failures or retries here); the validations
        # stay within their bound (8 of 10: "a" and "b" are validated once, being the same)
        assert (server.stats.stages["generation"], server.stats.stages["validation"], calls) == (3, 8, 8 + 3 + 8)

        cached = plan(judge_config(tmp_path, data, server.url, ["fluency", "evalbeam_general_quality"], run_id="j2",
                                   sampling_count=2, cache=[str(tmp_path / "out" / "j1" / "judge_cache")]), monkeypatch)
        rows = {r["metric"]: r for r in cached["metrics"]}
        assert (rows["fluency"]["cached"], rows["fluency"]["to_call"]) == (8, 0)
        assert (rows["evalbeam_general_quality:generation"]["cached"], rows["evalbeam_general_quality:generation"]["to_call"]) == (3, 0)
        # output tokens now learnt from the cached answers, not the max_output_tokens bound
        assert rows["fluency"]["output_tokens_from"] == "cached answers" and rows["fluency"]["output_tokens"] == 0
        assert server.stats.accepted == calls

        # issue 32, item 6: no cache, but an earlier run of the eval (j1) answered fluency: its output
        # tokens per answer, not the max_output_tokens bound (ten times a real run)
        monkeypatch.setenv("GOOGLE_API_KEY", KEY)
        [j1] = table(tmp_path / "out" / "j1", "runs")
        used = json.loads(j1["judge_usage"])["fluency"]
        per_answer = used["output_tokens"] / (used["calls"] - used["rate_limited"] - used["failures"])
        text = evalbeam("plan", judge_config(tmp_path, data, server.url, ["fluency"], run_id="j3", sampling_count=2)).stdout
        [line] = [line for line in text.splitlines() if line.startswith("fluency")]
        assert line.split()[6] == f"{round(per_answer * 8):,}", line  # output tok of 8 calls, unmarked: no bound
        assert "output tokens learnt from real answers: run j1 (the mean answer of each metric)" in text
        assert "UPPER BOUNDS" not in text
        # a new eval, never run: the bound, said plainly
        text = evalbeam("plan", judge_config(tmp_path, data, server.url, ["fluency"], run_id="j4", sampling_count=2),
                        "--set", "name=other-eval").stdout
        assert "<=16,384" in text and "are UPPER BOUNDS, not estimates" in text


@pytest.mark.slow
def test_plan_prints_a_table_and_checks_inputs_like_validate(tmp_path, monkeypatch):
    data = write_data(tmp_path, ROWS)
    config = judge_config(tmp_path, data, "http://127.0.0.1:9", ["fluency"])
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    out = evalbeam("plan", config).stdout
    assert "read 6 = 5 valid + 1 dead-lettered" in out
    assert [line.split()[:5] for line in out.splitlines() if line.startswith("fluency")] == [
        ["fluency", "5", "4", "0", "4"]]
    assert "4 judge calls" in out
    bad = judge_config(tmp_path, data, "http://127.0.0.1:9", ["bleu"], run_id="bad")
    failed = evalbeam("plan", bad, check=False)
    assert failed.returncode == 2 and "bleu" in failed.stderr and "reference" in failed.stderr


@pytest.mark.slow
def test_plan_without_a_key_plans_then_names_the_key_as_validate_and_run_do(tmp_path, monkeypatch):
    """plan calls nothing, so it makes its plan without the judge's API key; then, as validate
    (issue 42, item 3: every command reaches run's verdict), it names the key as what is left and
    exits 2; run refuses without one."""
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    data = write_data(tmp_path, ROWS)
    with JudgeServer() as server:
        config = judge_config(tmp_path, data, server.url, ["fluency"])
        result = evalbeam("plan", config, "--json", check=False)
        assert server.stats.requests == 0
    assert {r["metric"]: r["to_call"] for r in json.loads(result.stdout)["metrics"]} == {"fluency": 4}
    assert result.returncode == 2
    assert result.stderr.strip() == evalbeam("validate", config, check=False).stderr.strip()
    assert result.stderr.startswith("evalbeam: everything else checked; left: judge (called by metric fluency): ")
    run = evalbeam("run", config, check=False)
    assert run.returncode == 2 and "GOOGLE_API_KEY" in run.stderr


@pytest.mark.slow
def test_validate_checks_a_judge_config_without_a_key_and_names_the_key_as_what_is_left(tmp_path, monkeypatch):
    """Issue 32, item 4: validate refused a judge config without GOOGLE_API_KEY before checking its
    columns (plan works without one), and passed a label column no row has, which run fails on."""
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    data = write_data(tmp_path, ROWS)
    config = judge_config(tmp_path, data, "http://127.0.0.1:9", ["fluency"])
    result = evalbeam("validate", config, check=False)
    assert result.returncode == 2
    assert "config ok: 1 metrics; input 1 file(s); columns checked on 6 row(s)" in result.stdout
    assert result.stderr.strip() == (
        "evalbeam: everything else checked; left: judge (called by metric fluency): judge metrics with backend "
        "gemini_api need an API key: set the "
        "environment variable GOOGLE_API_KEY (or set judge.backend: vertex_ai to use Application Default Credentials)")
    # a column a metric needs is missing: that is said, not the key
    bad = judge_config(tmp_path, data, "http://127.0.0.1:9", ["bleu", "fluency"], run_id="bad")
    result = evalbeam("validate", bad, "--set", "input.labels={fluency: rating}", check=False)
    assert result.returncode == 2 and "GOOGLE_API_KEY" not in result.stderr
    assert "metrics.0 (bleu): needs (response, reference); no column provides reference" in result.stderr
    assert "input.labels.fluency: column 'rating' is not in the dataset" in result.stderr
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    assert evalbeam("validate", config).stderr == ""


@pytest.mark.slow
def test_plan_prices_each_judge_at_its_model_and_counts_calls_per_provider(tmp_path, monkeypatch):
    """Metrics judged by the run's Gemini judge, an OpenAI-compatible judge, and a jury of two
    Gemini jurors of one model (sharing its quota) and a Claude juror: each entry at its model's
    price, the calls per provider, and the time at the quotas as the run shares them."""
    from evalbeam.configs import EvalConfig
    from evalbeam.pipelines.plan import plan as plan_of
    from evalbeam.pipelines.reports.plan import format_plan

    data = write_data(tmp_path, ROWS)
    prices = {"gemini-2.5-flash": (0.3, 2.5), "gemini-2.5-pro": (1.25, 10.0), "gpt-judge": (2.0, 8.0),
              "claude-judge": (3.0, 15.0)}
    config = EvalConfig.model_validate({
        "name": "mixed", "input": {"uri": str(data), "id_column": "id"}, "output": {"parquet": str(tmp_path / "o")},
        "metrics": ["evalbeam_fluency",
                    {"name": "evalbeam_coherence", "judge": {"provider": "openai_compatible", "model": "gpt-judge"}},
                    {"name": "evalbeam_fluency", "as": "jury", "judges": [
                        {"model": "gemini-2.5-pro", "name": "cold"},
                        {"model": "gemini-2.5-pro", "temperature": 0.7, "name": "warm"},
                        {"provider": "anthropic", "model": "claude-judge", "name": "claude"}]}],
        "judge": {"requests_per_minute": 8, "prices": {m: {"input_per_million": i, "output_per_million": o}
                                                       for m, (i, o) in prices.items()}}})
    planned = plan_of(config)
    rows = {r["metric"]: r for r in planned["metrics"]}
    want = {"evalbeam_fluency": ("gemini", "gemini-2.5-flash"), "evalbeam_coherence": ("openai_compatible", "gpt-judge"),
            "jury:cold": ("gemini", "gemini-2.5-pro"), "jury:warm": ("gemini", "gemini-2.5-pro"),
            "jury:claude": ("anthropic", "claude-judge")}
    assert {m: (r["provider"], r["model"]) for m, r in rows.items()} == want
    for metric, (_, model) in want.items():
        r, (i, o) = rows[metric], prices[model]
        assert r["to_call"] == 4  # 5 instances, "a" and "b" alike
        assert r["cost"] == (r["prompt_tokens"] * i + r["output_tokens"] * o) / 1e6 > 0
    assert planned["calls_per_provider"] == {"gemini": 12, "openai_compatible": 4, "anthropic": 4}
    assert planned["priced"] and planned["cost"] == sum(r["cost"] for r in rows.values())
    # the two jurors of gemini-2.5-pro share its 8 a minute: 4 calls each at 4 a minute, 1 minute;
    # every other settings has its own 8 a minute (half a minute)
    assert planned["minutes_at_quota"] == 1.0
    assert "calls per provider: anthropic 4, gemini 12, openai_compatible 4" in format_plan(planned)
