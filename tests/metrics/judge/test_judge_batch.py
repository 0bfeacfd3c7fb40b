"""judge.mode: batch -- Gemini Batch jobs through google-genai's own
client.batches and client.files, against the local server's batch protocol
(create, state, inline results or a result file, per-item failures)."""
import json

import pytest

from evalbeam.configs import ConfigError, load_config
from evalbeam.metrics.judge.batch import judge_batch
from evalbeam.metrics.judge.client import JudgeSettings
from tests.helpers import evalbeam, table
from tests.servers.judge_server import Behaviour, JudgeServer
from tests.metrics.judge.test_judge import FOLLOWS, KEY, ROWS, judge_config, requests_for, write_data
from tests.metrics.judge.test_judge_vertex import key, vertex_env  # noqa: F401 - fixtures

PRICE = {"input_per_million": 0.3, "output_per_million": 2.5}


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)


def settings(server, **extra):
    base = dict(model="m", base_url=server.url, mode="batch", batch_poll_seconds=0.05, batch_poll_max_seconds=0.1,
                max_attempts=3, requests_per_minute=6000)
    return JudgeSettings(**{**base, **extra})


@pytest.mark.slow
@pytest.mark.parametrize("inline_max_bytes", [10_000_000, 0], ids=["inline", "file"])
def test_batch_jobs_split_join_by_key_and_retry_failed_items_online(api_key, inline_max_bytes):
    prompts = [f"p{i} #score={i % 5 + 1}" for i in range(9)] + ["p9 #score=2 #batchfail=1", "p10 #fail"]
    with JudgeServer(Behaviour(batch_seconds=0.2)) as server:
        s = settings(server, batch_max_requests=4, batch_inline_max_bytes=inline_max_bytes)
        requests = requests_for(prompts, s)
        got = {r.key: r for _, r in judge_batch(s, requests, lambda r: r)}
    assert set(got) == {r.key for r in requests}  # every judgment answered or failed, none lost
    source = "inline" if inline_max_bytes else "file"
    assert [(j["source"], j["requests"]) for j in server.stats.batch_jobs] == [(source, 4), (source, 4), (source, 3)]
    assert len(server.stats.uploads) == server.stats.downloads == (0 if inline_max_bytes else 3)
    for i, request in enumerate(requests[:9]):
        r = got[request.key]
        assert (r.verdict, r.attempts, r.error) == (str(i % 5 + 1), 1, None)
        assert r.batch_prompt_tokens == r.prompt_tokens == len(request.prompt) // 4 > 0
    # an item the batch failed is asked again online, and answered there at the online price
    retried = got[requests[9].key]
    assert (retried.verdict, retried.attempts, retried.batch_prompt_tokens) == ("2", 2, 0) and retried.prompt_tokens > 0
    down = got[requests[10].key]
    assert down.verdict is None and down.attempts == 3
    assert down.error.startswith("judge failed after 3 attempts (the first in a batch job, batch item failed: 13: ")
    assert server.stats.requests == 1 + 2  # online: the retried item once, the failing one twice
    assert server.stats.api_keys == {KEY}


@pytest.mark.slow
def test_a_failed_batch_job_is_retried_in_a_follow_up_batch(api_key):
    prompts = [f"q{i} #score={i % 5 + 1}" for i in range(6)] + ["q6 #score=3 #batchfail=1"]
    with JudgeServer(Behaviour(batch_seconds=0.1, batch_fail_jobs=1)) as server:
        s = settings(server, batch_max_requests=4, batch_retry="batch")
        requests = requests_for(prompts, s)
        got = {r.key: r for _, r in judge_batch(s, requests, lambda r: r)}
    assert server.stats.requests == 0  # nothing online
    # job 1 (4 items) failed as a whole and was sent again; job 2's failed item went in a job of its own.
    # The two follow-ups' order depends on which first job is polled done first: not asserted.
    jobs = [j["requests"] for j in server.stats.batch_jobs]
    assert jobs[:2] == [4, 3] and sorted(jobs[2:]) == [1, 4]
    assert [got[r.key].verdict for r in requests] == [str(i % 5 + 1) for i in range(6)] + ["3"]
    assert [got[r.key].attempts for r in requests] == [2, 2, 2, 2, 1, 1, 2]
    assert all(got[r.key].error is None and got[r.key].batch_output_tokens > 0 for r in requests)


@pytest.mark.slow
def test_a_batch_job_not_done_in_time_is_cancelled_and_its_judgments_asked_online(api_key):
    with JudgeServer(Behaviour(batch_seconds=60)) as server:
        s = settings(server, batch_timeout_hours=0.5 / 3600)
        requests = requests_for([f"t{i} #score=4" for i in range(3)], s)
        got = [r for _, r in judge_batch(s, requests, lambda r: r)]
    assert server.stats.cancelled == 1 and server.stats.batch_items == 0 and server.stats.requests == 3
    assert [(r.verdict, r.attempts, r.batch_prompt_tokens) for r in got] == [("4", 2, 0)] * 3


@pytest.mark.slow
def test_batch_mode_end_to_end_scores_as_online_at_half_the_price(tmp_path, api_key):
    data = write_data(tmp_path, ROWS)
    metrics = ["fluency", "pairwise_fluency", FOLLOWS]
    runs, scores, caches = {}, {}, {}
    for mode in ("online", "batch"):
        extra = dict(mode="batch", batch_max_requests=4, batch_inline_max_bytes=0, batch_poll_seconds=0.05,
                     batch_poll_max_seconds=0.2) if mode == "batch" else {}
        with JudgeServer(Behaviour(batch_seconds=0.2)) as server:  # a fresh server: #malformed counts per server
            result = evalbeam("run", judge_config(tmp_path, data, server.url, metrics, run_id=mode, **extra))
            stats = server.stats
        out = tmp_path / "out" / mode
        [runs[mode]] = table(out, "runs")
        scores[mode] = {(r["instance_id"], r["metric"]): (r["score"], r["explanation"], r["pairwise_choice"],
                                                          r["attempts"], r["prompt_tokens"])
                        for r in table(out, "metric_results")}
        caches[mode] = {(c["request_key"], c["verdict"]) for c in table(out, "judge_cache")}
        assert "read 5 = scored 5 + dead-lettered 0; metric errors 3" in result.stdout
        assert KEY not in result.stdout + result.stderr
    assert scores["batch"] == scores["online"] and caches["batch"] == caches["online"]

    # 14 distinct judgments in jobs of at most 4, each sent as an uploaded JSONL file
    assert [j["requests"] for j in stats.batch_jobs] == [4, 4, 4, 2] and len(stats.uploads) == stats.downloads == 4
    assert stats.batch_items == 14
    # online: only what the batch could not answer -- row c (#fail, 4 judgments, 2 more tries each)
    # and row b's (#malformed=2: the batch answer and the first online one are invalid)
    assert stats.requests == 4 * 2 + 4 * 2
    b, o = runs["batch"], runs["online"]
    assert b["judge_calls"] == o["judge_calls"] == stats.requests + stats.batch_items
    assert (b["judge_prompt_tokens"], b["judge_output_tokens"]) == (o["judge_prompt_tokens"], o["judge_output_tokens"])
    usage = json.loads(b["judge_usage"])
    batch_in = sum(m["batch_prompt_tokens"] for m in usage.values())
    batch_out = sum(m["batch_output_tokens"] for m in usage.values())
    assert 0 < batch_in < b["judge_prompt_tokens"] and 0 < batch_out < b["judge_output_tokens"]
    # the tokens of batch answers at half price, the rest at the online price
    assert b["judge_estimated_cost"] == pytest.approx(
        o["judge_estimated_cost"] - (batch_in * PRICE["input_per_million"] + batch_out * PRICE["output_per_million"]) / 2e6)
    assert b["judge_estimated_cost"] < 0.75 * o["judge_estimated_cost"]


def test_batch_config_is_checked(tmp_path):
    def check(judge):
        path = tmp_path / "c.yaml"
        path.write_text(json.dumps({"name": "x", "input": {"uri": "d.jsonl"}, "metrics": ["fluency"],
                                    "judge": judge, "output": {"parquet": "out"}}))
        with pytest.raises(ConfigError) as e:
            load_config(path)
        return str(e.value)

    assert "judge.batch_staging: batch mode on vertex_ai reads and writes Cloud Storage: set judge.batch_staging" in check(
        {"mode": "batch", "backend": "vertex_ai", "project": "p", "location": "us-central1"})
    assert "judge.batch_staging: String should match pattern" in check({"batch_staging": "/tmp/x"})
    assert "judge.mode: Input should be 'online' or 'batch'" in check({"mode": "offline"})
    assert "judge.checkpoint_seconds: Input should be less than or equal to 30" in check({"checkpoint_seconds": 60})
    assert "judge.batch_inline_max_bytes: Input should be less than or equal to 20000000" in check(
        {"batch_inline_max_bytes": 30_000_000})
    assert "judge.batch_retry: Input should be 'online' or 'batch'" in check({"batch_retry": "never"})
    assert "judge.prices.m.batch_input_per_million: Input should be greater than or equal to 0" in check(
        {"prices": {"m": {"batch_input_per_million": -1}}})


@pytest.mark.emulators
def test_vertex_ai_batch_prediction_through_cloud_storage(cloud, tmp_path, key, vertex_env):
    """backend vertex_ai: batch prediction jobs whose input and output files are in
    Cloud Storage (the storage emulator), with Application Default Credentials."""
    from tests.emulators.control import BUCKET
    from tests.credentials import CLIENT_EMAIL, service_account_file
    from tests.metrics.judge.test_judge_vertex import vertex_judge
    from evalbeam.transforms.local_cloud import storage_client

    data = write_data(tmp_path, [r for r in ROWS if r["id"] != "c"])
    staging = f"gs://{BUCKET}/vertex-batch/{tmp_path.name}"
    with JudgeServer(Behaviour(batch_seconds=0.3)) as server:
        adc, _ = service_account_file(tmp_path, f"{server.url}/token", key)
        server.trust(CLIENT_EMAIL, key.public_key())
        vertex_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        config = judge_config(tmp_path, data, server.url, ["fluency", "pairwise_fluency"], run_id="vb", **vertex_judge(
            mode="batch", batch_staging=staging, batch_max_requests=5, batch_poll_seconds=0.05, batch_poll_max_seconds=0.2))
        result = evalbeam("run", config)
        stats = server.stats
    assert "read 4 = scored 4 + dead-lettered 0; metric errors 0" in result.stdout
    rows = {(r["instance_id"], r["metric"]): r for r in table(tmp_path / "out" / "vb", "metric_results")}
    assert [rows[(i, "fluency")]["score"] for i in "abde"] == [5.0, 2.0, 5.0, 5.0]
    assert [rows[(i, "pairwise_fluency")]["pairwise_choice"] for i in "abde"] == ["CANDIDATE", "BASELINE", "TIE", "CANDIDATE"]
    # 2 + 6 distinct judgments in jobs of at most 5, read from and written to Cloud Storage
    assert [(j["source"], j["requests"]) for j in stats.batch_jobs] == [("gcs", 5), ("gcs", 3)]
    assert stats.unauthorized == 0 and stats.bearer_tokens <= stats.issued_tokens
    # b's answers are #malformed=2: its batch answers were invalid, and were asked again online
    assert stats.requests == 3 * 2 and rows[("b", "fluency")]["attempts"] == 3
    names = [b.name for b in storage_client().list_blobs(BUCKET, prefix=f"vertex-batch/{tmp_path.name}/")]
    assert sum(n.endswith("/input.jsonl") for n in names) == 2
    assert sum(n.endswith("/predictions.jsonl") for n in names) == 2
    [runs] = table(tmp_path / "out" / "vb", "runs")
    usage = json.loads(runs["judge_usage"])
    assert sum(m["batch_prompt_tokens"] for m in usage.values()) > 0
