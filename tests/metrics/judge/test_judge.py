"""The LLM-judge engine: templates, the client layer against the local
generateContent server (driven through the real google-genai client), and the
judge metrics in real pipelines through the `evalbeam` command."""
import json
import logging
import os
import time

import apache_beam as beam
import pytest
import yaml

from evalbeam.metrics.rows.fields import CANONICAL_FIELDS
from evalbeam.metrics.judge.client import JudgeRequest, JudgeSettings, judge_stream, request_key
from evalbeam.metrics.judge.templates import (
    InvalidJudgment,
    JudgeTemplate,
    aggregate_pairwise,
    aggregate_pointwise,
    builtin_templates,
    pairwise_verdict,
    parse_answer,
)
from tests.helpers import evalbeam, table
from tests.servers.judge_server import Behaviour, JudgeServer
from evalbeam.transforms.judge import CallJudgeFn
from evalbeam.transforms.judge_context import JudgeContext

KEY = "AIzaSy-test-key-do-not-leak-0123456789"
FIELDS = {f: f"<{f} text>" for f in CANONICAL_FIELDS}
FIELDS.update(predicted_trajectory=[{"tool_name": "get", "tool_input": {"id": 1}}], history=[{"role": "user", "text": "hi"}])


# ---------------------------------------------------------------- templates


@pytest.mark.parametrize("name", sorted(builtin_templates()))
def test_every_builtin_template_renders_and_parses(name):
    t = builtin_templates()[name]
    prompt = t.render_pointwise(FIELDS)
    for criterion in t.criteria:
        assert f"- {criterion}: " in prompt
    for score in t.rating_rubric:
        assert f"- {score}: " in prompt
    for variable in t.input_variables:
        assert f"## {variable}\n" in prompt
    assert prompt.index("## Response\n<response text>") > max([prompt.index(f"## {v}\n") for v in t.input_variables] or [0])
    assert t.pointwise_schema()["properties"]["score"]["enum"] == list(t.rating_rubric)
    best = max(t.rating_rubric, key=float)
    assert parse_answer(json.dumps({"explanation": "ok", "score": best}), "score", tuple(t.rating_rubric)) == (best, "ok")
    with pytest.raises(InvalidJudgment):
        parse_answer(json.dumps({"explanation": "ok", "score": "7"}), "score", tuple(t.rating_rubric))

    normal, swapped = t.render_pairwise(FIELDS, swapped=False), t.render_pairwise(FIELDS, swapped=True)
    assert "## Response A\n<baseline_model_response text>" in normal and "## Response B\n<response text>" in normal
    assert "## Response A\n<response text>" in swapped and "## Response B\n<baseline_model_response text>" in swapped


def test_a_pairwise_template_uses_its_own_rubric():
    own = JudgeTemplate(criteria={"Tone": "polite"}, rating_rubric={"A": "A is politer", "B": "B is politer", "SAME": "equally polite"})
    prompt = own.render_pairwise(FIELDS, swapped=False)
    assert "- A: A is politer" in prompt and "- SAME: equally polite" in prompt
    assert "- A: Response A is better" in builtin_templates()["fluency"].render_pairwise(FIELDS, swapped=False)


def test_parse_answer_rejects_what_is_not_a_judgment():
    allowed = ("1", "0")
    assert parse_answer('{"explanation": "fine", "score": 1}', "score", allowed) == ("1", "fine")
    for text, reason in [("not json", "not JSON"), ("[1]", "not a JSON object"), ('{"score": "1"}', "no explanation"),
                         ('{"explanation": "x", "score": true}', "not one of"), (None, "not JSON")]:
        with pytest.raises(InvalidJudgment, match=reason):
            parse_answer(text, "score", allowed)


def test_aggregation_of_samples_and_orders():
    five = JudgeTemplate(criteria={"c": "x"}, rating_rubric={str(i): str(i) for i in range(1, 6)})
    # mean; confidence: the share of samples equal to the rubric score nearest the mean
    assert aggregate_pointwise(five, [(4.0, "a"), (4.0, "b"), (3.0, "c")]) == (pytest.approx(11 / 3), "a", pytest.approx(2 / 3))
    assert aggregate_pointwise(five, [(4.0, "a"), (4.0, "b"), (2.0, "c")])[2] == 0.0  # none said 3
    binary = JudgeTemplate(criteria={"c": "x"}, rating_rubric={"1": "y", "0": "n"})
    assert binary.resolved_aggregation() == "majority"
    assert aggregate_pointwise(binary, [(1.0, "y1"), (0.0, "n"), (1.0, "y2")]) == (1.0, "y1", pytest.approx(2 / 3))
    assert aggregate_pointwise(binary, [(1.0, "y"), (0.0, "n")])[0] == 0.0  # a tie goes to the lower score
    assert pairwise_verdict("B", "A") == "CANDIDATE" and pairwise_verdict("A", "B") == "BASELINE"
    assert pairwise_verdict("A", "A") == "TIE" and pairwise_verdict("SAME", "SAME") == "TIE"
    assert aggregate_pairwise([("CANDIDATE", "x"), ("TIE", "y"), ("CANDIDATE", "z")]) == ("CANDIDATE", "x", pytest.approx(2 / 3))
    assert aggregate_pairwise([("CANDIDATE", "x"), ("BASELINE", "y")])[0] == "TIE"


# ---------------------------------------------------------------- the client layer


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)


def requests_for(prompts, settings):
    t = builtin_templates()["fluency"]
    schema = json.dumps(t.pointwise_schema())
    return [JudgeRequest(request_key(settings, p, schema, 0), "fluency", p, schema, "score", tuple(t.rating_rubric))
            for p in prompts]


@pytest.mark.timing
@pytest.mark.slow
def test_client_stays_under_the_quota(api_key):
    # 20 requests per 2 s is 600 a minute; the client is set to 80% of it. It paces
    # the starts of requests (arrivals can bunch a little), so it is never refused.
    with JudgeServer(Behaviour(quota=20, window_seconds=2.0, latency_median=0.05, latency_sigma=0.5)) as server:
        settings = JudgeSettings(model="m", base_url=server.url, requests_per_minute=480, max_concurrency=32)
        start = time.monotonic()
        results = list(judge_stream(settings, requests_for([f"p{i} #score=3" for i in range(50)], settings), lambda r: r))
        elapsed = time.monotonic() - start
    assert len(results) == 50 and all(r.verdict == "3" and r.attempts == 1 + r.hedged for _, r in results)
    assert server.stats.rate_limited == 0
    assert elapsed >= 49 / 8 - 0.2  # paced at 8 a second, not sent at once


@pytest.mark.timing
@pytest.mark.slow
def test_client_adapts_to_429_and_loses_nothing(api_key):
    # the client believes it has 1200 a minute; the server grants 300 (10 per 2 s)
    with JudgeServer(Behaviour(quota=10, window_seconds=2.0)) as server:
        settings = JudgeSettings(model="m", base_url=server.url, requests_per_minute=1200, max_attempts=8)
        start = time.monotonic()
        results = list(judge_stream(settings, requests_for([f"q{i} #score=2" for i in range(30)], settings), lambda r: r))
        elapsed = time.monotonic() - start
    assert sorted(r.verdict for _, r in results) == ["2"] * 30
    assert server.stats.rate_limited > 0
    assert sum(r.rate_limited for _, r in results) == server.stats.rate_limited
    assert server.stats.accepted == 30  # every admitted request was answered once
    assert elapsed >= 4.0  # Retry-After was honoured: 30 requests at 10 per 2 s


@pytest.mark.slow
def test_client_retries_errors_timeouts_and_malformed_output(api_key):
    with JudgeServer(Behaviour(error_rate=0.2, timeout_rate=0.1, timeout_delay=1.5, seed=3)) as server:
        settings = JudgeSettings(model="m", base_url=server.url, requests_per_minute=6000, max_attempts=8,
                                 timeout_seconds=0.5)
        prompts = [f"r{i} #score=4" for i in range(30)] + ["bad #score=5 #malformed=2", "worse #score=1 #invalid=1"]
        results = {r.prompt: resp for r, resp in judge_stream(settings, requests_for(prompts, settings), lambda r: r)}
    assert all(resp.error is None for resp in results.values())
    assert results["bad #score=5 #malformed=2"].verdict == "5" and results["bad #score=5 #malformed=2"].attempts >= 3
    assert results["worse #score=1 #invalid=1"].verdict == "1" and results["worse #score=1 #invalid=1"].attempts >= 2
    assert server.stats.errors > 0 and server.stats.timeouts > 0
    assert sum(resp.attempts for resp in results.values()) > len(prompts)


def test_client_gives_up_after_max_attempts_with_the_reason(api_key):
    with JudgeServer() as server:
        settings = JudgeSettings(model="m", base_url=server.url, requests_per_minute=6000, max_attempts=3)
        [(_, response)] = judge_stream(settings, requests_for(["down #fail"], settings), lambda r: r)
    assert response.verdict is None and response.attempts == 3
    assert response.error == "judge failed after 3 attempts; last: HTTP 503: The service is currently unavailable."
    assert server.stats.requests == 3
    assert KEY in server.stats.api_keys  # the real client sent the key, in its header


@pytest.mark.slow
def test_client_scrubs_the_key_a_server_echoes_in_its_errors(api_key):
    # The stand-in repeats the key it received in its error message, so the key really reaches
    # the error text the client builds, on the path not retried (400) and after retries (503).
    with JudgeServer() as server:
        settings = JudgeSettings(model="m", base_url=server.url, requests_per_minute=6000, max_attempts=3)
        results = {r.prompt: resp for r, resp in judge_stream(
            settings, requests_for(["bad #echo_key=400", "down #echo_key=503"], settings), lambda r: r)}
    assert server.stats.echoed == 1 + 3 and server.stats.api_keys == {KEY}
    bad, down = results["bad #echo_key=400"], results["down #echo_key=503"]
    assert (bad.verdict, bad.attempts) == (None, 1)
    assert bad.error == "HTTP 400: The credential [redacted] was refused. (not retried)"
    assert (down.verdict, down.attempts) == (None, 3)
    assert down.error == "judge failed after 3 attempts; last: HTTP 503: The credential [redacted] was refused."


# ---------------------------------------------------------------- pipelines


def write_data(tmp_path, rows):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def judge_config(tmp_path, data, server_url, metrics, run_id="j1", **judge):
    config = {
        "name": "judged", "run_id": run_id,
        "input": {"uri": str(data), "id_column": "id"},
        "metrics": metrics,
        "judge": {"base_url": server_url, "requests_per_minute": 6000, "max_attempts": 3, "timeout_seconds": 10,
                  "prices": {"gemini-2.5-flash": {"input_per_million": 0.3, "output_per_million": 2.5}}, **judge},
        "output": {"parquet": str(tmp_path / "out")},
    }
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


FOLLOWS = {
    "name": "response_follows_trajectory",
    "pointwise": {
        "criteria": {"Backed by its actions": "The final response is justified by the tool calls the agent made."},
        "rating_rubric": {"1": "Backed by the agent's actions", "0": "Claims something the actions do not support"},
        "input_variables": ["prompt", "predicted_trajectory"],
    },
}
ROWS = [
    {"id": "a", "prompt": "Greet", "reference": "Hello!", "response": "Hello! #score=1 #score=5 #quality=4", "baseline_model_response": "hi #quality=2",
     "predicted_trajectory": [{"tool_name": "greet", "tool_input": {}}]},
    {"id": "b", "prompt": "Greet", "reference": "Hello!", "response": "hullo #score=0 #score=2 #malformed=2 #quality=1", "baseline_model_response": "hi #quality=3",
     "predicted_trajectory": []},
    {"id": "c", "prompt": "Greet", "reference": "Hello!", "response": "down #fail", "baseline_model_response": "hi", "predicted_trajectory": []},
    {"id": "d", "prompt": "Greet", "reference": "Hello!", "response": "Hello! #score=1 #score=5 #quality=4", "baseline_model_response": "hi #quality=2 #bias",
     "predicted_trajectory": [{"tool_name": "greet", "tool_input": {}}]},
    {"id": "e", "prompt": "Greet", "reference": "Hello!", "response": "Hello! #score=1 #score=5 #quality=4", "baseline_model_response": "hi #quality=2",
     "predicted_trajectory": [{"tool_name": "greet", "tool_input": {}}]},  # the same content as "a"
]


# A local run in one process judges rows as they stream by (StreamJudgeFn); with two
# workers it takes Dataflow's path: shards of the quota, joined back by id (AnswerJudgeRequests).
PATHS = {"stream": [], "shards": ["--direct_num_workers=2", "--direct_running_mode=multi_threading"]}


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_judge_metrics_end_to_end(tmp_path, api_key, path):
    data = write_data(tmp_path, ROWS)
    with JudgeServer(Behaviour(latency_median=0.01)) as server:
        config = judge_config(tmp_path, data, server.url, ["fluency", "pairwise_fluency", FOLLOWS, "exact_match"])
        run = evalbeam("run", config, *PATHS[path])
        requests_made = server.stats.requests
    assert "read 5 = scored 5 + dead-lettered 0; metric errors 3" in run.stdout
    out = tmp_path / "out" / "j1"
    rows = {(r["instance_id"], r["metric"]): r for r in table(out, "metric_results")}
    assert len(rows) == 5 * 4  # no row lost, failures included

    assert [rows[(i, "fluency")]["score"] for i in "abde"] == [5.0, 2.0, 5.0, 5.0]
    assert [rows[(i, "response_follows_trajectory")]["score"] for i in "abde"] == [1.0, 0.0, 1.0, 1.0]
    assert [rows[(i, "pairwise_fluency")]["pairwise_choice"] for i in "abde"] == ["CANDIDATE", "BASELINE", "TIE", "CANDIDATE"]
    assert [rows[(i, "pairwise_fluency")]["score"] for i in "abde"] == [1.0, 0.0, 0.5, 1.0]
    for metric in ("fluency", "pairwise_fluency", "response_follows_trajectory"):
        failed = rows[("c", metric)]
        assert failed["score"] is None and failed["error"].startswith("judge failed after 3 attempts; last: HTTP 503")
    good = rows[("a", "fluency")]
    assert good["explanation"] == "Judged score 5 from the inputs." and good["confidence"] == 1.0
    assert good["judge_model"] == "gemini-2.5-flash" and good["prompt_tokens"] > 0 and good["attempts"] == 1
    assert good["cache_hit"] is False and rows[("b", "fluency")]["attempts"] == 3  # two malformed answers retried
    assert rows[("a", "exact_match")]["judge_model"] is None

    summary = {(s["metric"], s["slice"]): s for s in table(out, "summary")}
    pairwise = summary[("pairwise_fluency", "overall")]
    assert (pairwise["valid_count"], pairwise["error_count"]) == (4, 1)
    assert pairwise["candidate_model_win_rate"] == 0.5 and pairwise["baseline_model_win_rate"] == 0.25
    assert summary[("fluency", "overall")]["candidate_model_win_rate"] is None

    [runs] = table(out, "runs")
    # deduplicated: a, d and e show a pointwise judge the same thing (d differs in its baseline only),
    # so 3 distinct judgments per pointwise metric; pairwise, a and e are the same: 4 x 2 orders
    usage = json.loads(runs["judge_usage"])
    assert {m: u["requests"] for m, u in usage.items()} == {"fluency": 3, "response_follows_trajectory": 3, "pairwise_fluency": 8}
    assert runs["judge_requests"] == 14 and runs["judge_cache_hits"] == 0 and runs["judge_failures"] == 4
    assert runs["judge_calls"] == requests_made
    expected_cost = (runs["judge_prompt_tokens"] * 0.3 + runs["judge_output_tokens"] * 2.5) / 1e6
    assert runs["judge_estimated_cost"] == pytest.approx(expected_cost) and expected_cost > 0
    cache = table(out, "judge_cache")
    assert len(cache) == 14 - 4 and all(c["model"] == "gemini-2.5-flash" for c in cache)

    # the key went to the server, and nowhere else
    assert KEY not in run.stdout + run.stderr
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_a_key_echoed_in_judge_errors_is_redacted_end_to_end(tmp_path, api_key):
    rows = [{"id": "k1", "prompt": "Greet", "response": "bad #echo_key=400", "baseline_model_response": "hi"},
            {"id": "k2", "prompt": "Greet", "response": "down #echo_key=503", "baseline_model_response": "hi"},
            {"id": "k3", "prompt": "Greet", "response": "fine #score=4", "baseline_model_response": "hi"}]
    data = write_data(tmp_path, rows)
    with JudgeServer() as server:
        run = evalbeam("run", judge_config(tmp_path, data, server.url, ["fluency", "pairwise_fluency"]))
    # 3 judgments per row (fluency, pairwise in both orders): k1's once each (not retried), k2's 3 times
    assert server.stats.echoed == 3 * 1 + 3 * 3 and server.stats.api_keys == {KEY}
    assert "read 3 = scored 3 + dead-lettered 0; metric errors 4" in run.stdout
    out = tmp_path / "out" / "j1"
    got = {(r["instance_id"], r["metric"]): r for r in table(out, "metric_results")}
    for metric in ("fluency", "pairwise_fluency"):
        assert got[("k1", metric)]["score"] is None
        assert got[("k1", metric)]["error"] == "HTTP 400: The credential [redacted] was refused. (not retried)"
        assert got[("k2", metric)]["score"] is None
        assert got[("k2", metric)]["error"] == (
            "judge failed after 3 attempts; last: HTTP 503: The credential [redacted] was refused.")
    assert got[("k3", "fluency")]["score"] == 4.0 and got[("k3", "fluency")]["error"] is None
    assert KEY not in run.stdout + run.stderr
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_a_rerun_with_the_cache_makes_no_call(tmp_path, api_key, path):
    data = write_data(tmp_path, [r for r in ROWS if r["id"] != "c"])
    with JudgeServer() as server:
        first = judge_config(tmp_path, data, server.url, ["fluency", "pairwise_fluency"], run_id="first")
        evalbeam("run", first, *PATHS[path])
        calls_before = server.stats.requests
        cache = str(tmp_path / "out" / "first" / "judge_cache")
        second = judge_config(tmp_path, data, server.url, ["fluency", "pairwise_fluency"], run_id="second", cache=cache)
        evalbeam("run", second, *PATHS[path])
        assert server.stats.requests == calls_before  # zero calls
    score = lambda run: {(r["instance_id"], r["metric"]): (r["score"], r["explanation"])  # noqa: E731
                         for r in table(tmp_path / "out" / run, "metric_results")}
    assert score("first") == score("second")
    [runs] = table(tmp_path / "out" / "second", "runs")
    assert runs["judge_cache_hits"] == runs["judge_requests"] == 2 + 6 and runs["judge_calls"] == 0
    assert all(r["cache_hit"] and r["attempts"] == 0 for r in table(tmp_path / "out" / "second", "metric_results"))


@pytest.mark.slow
def test_sampling_aggregates_with_confidence(tmp_path, api_key):
    rows = [{"id": "s1", "prompt": "Write", "response": "x #samples=4,4,3"}, {"id": "s2", "prompt": "Write", "response": "y #samples=1,1,1"},
            {"id": "s3", "prompt": "Write", "response": "z #samples=0,1,0"}]
    data = write_data(tmp_path, rows)
    with JudgeServer() as server:
        evalbeam("run", judge_config(tmp_path, data, server.url, ["fluency", "safety"], sampling_count=3, temperature=1.0))
    got = {(r["instance_id"], r["metric"]): r for r in table(tmp_path / "out" / "j1", "metric_results")}
    assert got[("s1", "fluency")]["score"] == pytest.approx(11 / 3)  # the mean of 4, 4, 3
    assert got[("s1", "fluency")]["confidence"] == pytest.approx(2 / 3)  # two samples said 4, nearest the mean
    assert got[("s2", "fluency")]["score"] == 1.0 and got[("s2", "fluency")]["confidence"] == 1.0
    assert got[("s3", "safety")]["score"] == 0.0  # majority of 0, 1, 0
    assert got[("s3", "safety")]["confidence"] == pytest.approx(2 / 3)


@pytest.mark.slow
def test_missing_credentials_fail_before_the_pipeline(tmp_path, monkeypatch):
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    data = write_data(tmp_path, ROWS[:1])
    config = judge_config(tmp_path, data, "http://127.0.0.1:9", ["fluency"])
    for command in ("validate", "run"):
        result = evalbeam(command, config, check=False)
        assert result.returncode == 2
        assert "judge metrics with backend gemini_api need an API key: set the environment variable GOOGLE_API_KEY" in result.stderr
    assert not (tmp_path / "out").exists()
    # a config without judge metrics needs no key
    no_judge = judge_config(tmp_path, data, "http://127.0.0.1:9", [{"name": "w", "function": "evalbeam.metrics.examples:word_count"}])
    assert "config ok" in evalbeam("validate", no_judge).stdout


@pytest.mark.slow
def test_bad_judge_config_is_named(tmp_path, api_key):
    data = write_data(tmp_path, ROWS[:1])
    bad = judge_config(tmp_path, data, "http://127.0.0.1:9", [{"name": "x", "pointwise": {"criteria": {"a": "b"}, "rating_rubric": {"good": "g", "bad": "b"}}}])
    result = evalbeam("validate", bad, check=False)
    assert result.returncode == 2 and "metrics.0: rating_rubric key 'bad' is not a number" in result.stderr
    pairwise = judge_config(tmp_path, data, "http://127.0.0.1:9", [{"name": "x", "pairwise": {"criteria": {"a": "b"}, "rating_rubric": {"1": "g", "0": "b"}}}])
    result = evalbeam("validate", pairwise, check=False)
    assert result.returncode == 2 and "metrics.0: a pairwise rating_rubric has exactly the keys A, B and SAME" in result.stderr
    missing_cache = judge_config(tmp_path, data, "http://127.0.0.1:9", ["fluency"], cache=str(tmp_path / "nothing"))
    result = evalbeam("validate", missing_cache, check=False)
    assert result.returncode == 2 and "judge.cache.0: no judge_cache Parquet files" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("config", ["configs/demo_judge.yaml", "configs/demo_judge_qa.yaml"])
def test_demo_judge_configs_run(tmp_path, api_key, config):
    with JudgeServer() as server:
        out = evalbeam("run", config, "--set", f"judge.base_url={server.url}", "--set", f"output.parquet={tmp_path}",
                       "--set", "run_id=demo").stdout
    assert "dead-lettered 0; metric errors 0" in out
    summary = table(tmp_path / "demo", "summary")
    judged = {s["metric"] for s in summary if s["slice"] == "overall"}
    if config.endswith("qa.yaml"):
        assert {"pairwise_evalbeam_summarization_quality", "evalbeam_question_answering_correctness"} <= judged
        pairwise = next(s for s in summary if s["metric"] == "pairwise_evalbeam_summarization_quality"
                        and s["slice"] == "overall")
        assert pairwise["candidate_model_win_rate"] is not None
    else:
        assert {"response_follows_trajectory", "fluency", "safety"} <= judged


def test_in_flight_window_follows_latency_and_rate():
    import asyncio

    from evalbeam.metrics.judge.ratelimit import InFlightWindow

    window = InFlightWindow(cap=1000, initial_latency=2.0)
    assert window.limit(100) == 200  # before any call: the rate times the initial guess
    for _ in range(200):
        window.observe(1.0)  # steady 1 s calls: the deviation decays, the window tends to rate x 1 s
    assert 100 <= window.limit(100) <= 102
    for seconds in (0.2, 3.0) * 100:  # a wide spread needs room for the tail
        window.observe(seconds)
    assert window.limit(100) > 400 and window.limit(0.5) == window.floor
    assert InFlightWindow(cap=64).limit(100) == 64  # never above the memory bound

    async def holds_at_the_limit():
        w = InFlightWindow(cap=3)
        for _ in range(3):
            await w.acquire(lambda: 100.0)
        blocked = asyncio.create_task(w.acquire(lambda: 100.0))
        await asyncio.sleep(0.05)
        assert not blocked.done() and w.in_flight == 3
        await w.release()
        await asyncio.wait_for(blocked, 1)
        return w.in_flight, w.peak

    assert asyncio.run(holds_at_the_limit()) == (3, 3)


@pytest.mark.timing
@pytest.mark.slow
def test_calls_in_flight_grow_past_a_fixed_window_when_the_quota_needs_them(api_key):
    # 200 requests a second at 1 s each need about 200 calls in flight (Little's law):
    # more than the 128 a fixed window used to allow, fewer than the memory bound
    with JudgeServer(Behaviour(latency_median=1.0)) as server:
        settings = JudgeSettings(model="m", base_url=server.url, requests_per_minute=12000)
        results = list(judge_stream(settings, requests_for([f"w{i} #score=2" for i in range(700)], settings), lambda r: r))
    assert sorted(r.verdict for _, r in results) == ["2"] * 700
    assert 150 < server.stats.peak_in_flight < settings.max_concurrency


@pytest.mark.slow
def test_a_judge_shard_logs_its_progress_from_the_worker(api_key, caplog, monkeypatch):
    # What a Dataflow user reads in the CallJudge step's worker logs: a line per interval
    # (here every judgment) and one when the shard ends, with failures counted.
    monkeypatch.setenv("EVALBEAM_JUDGE_LOG_SECONDS", "0")
    caplog.set_level(logging.INFO, logger="evalbeam.judge")
    with JudgeServer() as server:
        settings = JudgeSettings(model="m", base_url=server.url, requests_per_minute=600, max_attempts=1, shards=4)
        items = [(r, [r.prompt]) for r in requests_for(["a #score=2", "b #score=4", "c #fail"], settings)]
        with beam.Pipeline() as p:
            _ = p | beam.Create([(1, items)]) | beam.ParDo(CallJudgeFn(JudgeContext(settings)))
    lines = [r.getMessage() for r in caplog.records if r.name == "evalbeam.judge"]
    assert len(lines) == 4 and lines[-1].endswith("(shard finished)")
    assert lines[-1].startswith("judge shard 2/4: 3 judgments done (1 failed, 0 rate-limited answers) in 0:00:")
    assert "against this shard's quota of 150/min" in lines[-1]
    assert lines[0].startswith("judge shard 2/4: 1 judgments done")


def test_latency_quantile_and_the_tail_hedge_turn_and_budget():
    import asyncio

    from evalbeam.metrics.judge.ratelimit import AdaptiveRateLimiter, InFlightWindow, TailHedge

    window = InFlightWindow(cap=100, initial_latency=2.0)
    assert window.quantile(0.75) == 2.0  # before any call: the initial guess
    for seconds in range(1, 101):
        window.observe(float(seconds))
    assert window.quantile(0.75) == 76.0 and window.quantile(0.5) == 51.0
    for _ in range(InFlightWindow.RECENT):
        window.observe(0.5)
    assert window.quantile(0.75) == 0.5  # only recent calls count

    async def scenario():
        limiter = AdaptiveRateLimiter(600)  # a place every 0.1 s
        hedge = TailHedge(window, limiter, share=0.02)
        hedge.calls = 50
        order = []

        async def call(i):
            await limiter.acquire()
            order.append(f"call{i}")

        async def copy(name, wanted=True):
            order.append(f"{name}:{await hedge.turn(0.0, 0, lambda: wanted)}")

        first = asyncio.ensure_future(copy("copy1"))
        await asyncio.sleep(0.3)
        before_the_end = list(order)  # no copy while input remains
        calls = [asyncio.ensure_future(call(i)) for i in range(3)]
        await asyncio.sleep(0)
        hedge.end_of_input()
        await asyncio.gather(first, *calls)
        await copy("copy2")  # a second copy in 50 calls is more than 2%
        hedge.calls = 100
        await copy("copy3", wanted=False)  # the call answered meanwhile
        await copy("copy4")
        return before_the_end, order, hedge.hedges

    # the copy waits for the calls that wait for the pace
    assert asyncio.run(scenario()) == (
        [], ["call0", "call1", "call2", "copy1:True", "copy2:False", "copy3:False", "copy4:True"], 2)


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.parametrize("share", [0.1, 0.0])
def test_a_slow_call_at_the_end_gets_one_copy_counted_as_a_call(api_key, share):
    # 100 quick judgments; the first call of one takes 30 s (timeout 20 s). Once the input
    # has ended, it gets a copy, which answers: one hedge, two calls. With hedge_share 0
    # it waits for its timeout and is retried: two calls, no hedge.
    with JudgeServer() as server:
        settings = JudgeSettings(model="m", base_url=server.url, requests_per_minute=6000, timeout_seconds=20,
                                 hedge_share=share)
        prompts = ["late #score=5 #slow=30"] + [f"h{i} #score=3" for i in range(99)]
        results = {r.prompt: resp for r, resp in judge_stream(settings, requests_for(prompts, settings), lambda r: r)}
    late = results.pop("late #score=5 #slow=30")
    assert (late.verdict, late.error, late.attempts, late.hedged) == ("5", None, 2, 1 if share else 0)
    assert all((r.verdict, r.error) == ("3", None) for r in results.values())
    calls = late.attempts + sum(r.attempts for r in results.values())
    hedges = late.hedged + sum(r.hedged for r in results.values())
    assert calls == 100 + 1 + hedges - late.hedged  # every call counted: one each, the late one's second, copies
    assert hedges <= share * calls
    # beside the slow call on the server: its copy, or without one, its retry after the timeout
    assert 1 <= server.stats.duplicates <= (hedges if share else 1)
    assert server.stats.requests <= calls


@pytest.mark.timing
@pytest.mark.slow
def test_a_slow_call_whose_copy_fails_gets_one_more_copy(api_key):
    # "late": its copy fails at once; the call left is still slow, so a second copy goes,
    # and answers, rather than the client waiting for the slow call (here: its timeout).
    # "doomed": both copies fail; no third copy (it would fail too: #unavailable_at=4): the
    # attempt waits for the slow call, which answers within the timeout. (Not after a
    # timeout: the retry that would follow is a call like any other, and under CPU load
    # it runs longer than 3 in 4 of the calls before it and legitimately gets copies.)
    # The share leaves copies of every slow call within the budget, though under load
    # the last of the 98 others get copies too.
    with JudgeServer() as server:
        # a share past what a config may set (0.5): copies of every slow call, whatever the load
        settings = JudgeSettings(model="m", base_url=server.url, requests_per_minute=6000,
                                 timeout_seconds=20).model_copy(update={"hedge_share": 1.0})
        late, doomed = "late #score=5 #slow=30 #unavailable_at=2", "doomed #score=4 #slow=10 #unavailable_at=2,3,4"
        prompts = [late, doomed] + [f"h{i} #score=3" for i in range(98)]
        results = {r.prompt: resp for r, resp in judge_stream(settings, requests_for(prompts, settings), lambda r: r)}
    assert (results[late].verdict, results[late].error, results[late].attempts, results[late].hedged) == ("5", None, 3, 2)
    # calls: the slow one, which answers, and two failed copies
    assert (results[doomed].verdict, results[doomed].error, results[doomed].attempts, results[doomed].hedged) == \
        ("4", None, 3, 2)
    assert server.stats.errors == 1 + 2 and server.stats.prompts[doomed] == 1
    assert server.stats.requests <= sum(r.attempts for r in results.values())


@pytest.mark.parametrize("flags, overrides, streams", [
    ([], [], True),
    (["--direct_running_mode=multi_threading"], [], True),  # still one worker
    (["--direct_num_workers=2", "--direct_running_mode=multi_processing"], [], False),  # two would each take the quota
    (["--runner=DataflowRunner"], [], False),
    (["--runner=PrismRunner"], [], False),
    ([], ["judge.mode=batch"], False),
    ([], ["metrics=[fluency,evalbeam_general_quality]"], False),
])
def test_rows_stream_through_the_judge_only_where_one_process_keeps_the_quota(tmp_path, flags, overrides, streams):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from evalbeam.configs import load_config
    from evalbeam.pipelines.local import stream_judge

    data = write_data(tmp_path, ROWS)
    config = load_config(judge_config(tmp_path, data, "http://localhost:1", ["fluency"]), overrides)
    # (the options name the runner; the pipeline is only built, never run)
    assert stream_judge(beam.Pipeline(runner="DirectRunner", options=PipelineOptions(flags)), config) is streams


def _open_files() -> set[str]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed since
            pass
    return found


def test_the_answer_store_keeps_answers_on_disk_and_returns_them_whole():
    from evalbeam.metrics.judge.answers import COMMIT_EVERY, AnswerStore
    from evalbeam.metrics.judge.client import JudgeResponse

    before = _open_files()
    store = AnswerStore()
    answers = [JudgeResponse(key=f"{i:064x}", metric="fluency", verdict=str(i % 5 + 1),
                             explanation=f"why {i} \ud800?"[:7] + "." * 600,  # 4 MB in all: more than SQLite's cache
                             prompt_tokens=i, output_tokens=2 * i, attempts=1 + i % 3, error=None if i % 7 else "HTTP 503",
                             cache_hit=i % 11 == 0, checkpointed=i % 13 == 0)
               for i in range(3 * COMMIT_EVERY + 5)]  # across commits, and some not committed
    store.put_all(answers[:-1])
    store.put(answers[-1])
    assert all(store.get(a.key) == a for a in answers)
    assert store.get("f" * 64) is None
    store.put(JudgeResponse(key=answers[0].key, metric="other", verdict="2"))  # a later answer replaces
    assert store.get(answers[0].key).metric == "other"
    # on disk, in a file unlinked as it was opened: nothing is left behind, even after a SIGKILL
    opened = _open_files() - before
    assert opened and all(f.endswith("(deleted)") for f in opened), opened
    store.close()
    assert not _open_files() - before
