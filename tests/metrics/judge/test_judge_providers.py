"""judge.provider: openai_compatible and anthropic through the one judge layer, against the
local stand-ins of tests/servers/provider_servers.py (the OpenAI Chat Completions and Anthropic
Messages protocols), driven through the real `openai` and `anthropic` clients."""
import datetime as dt
import json
import logging
import time

import apache_beam as beam
import pydantic
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from evalbeam.configs import MetricSpec
from evalbeam.metrics.rows.instance import Instance
from evalbeam.metrics.judge.client import JudgeRequest, judge_stream, request_key
from evalbeam.metrics.judge.providers import json_schema
from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.judge.templates import builtin_templates
from evalbeam.transforms.judge import JudgeInstances
from evalbeam.transforms.judge_context import JudgeContext
from evalbeam.transforms.runs import judge_totals
from evalbeam.metrics.rows.tables import RunKey
from tests.helpers import evalbeam, table
from tests.servers.provider_servers import Behaviour, ProviderServer

SECRET = "sk-test-provider-key-do-not-leak-9f8e7d6c"
KEY_ENV = "EVALBEAM_TEST_PROVIDER_KEY"
PROVIDERS = ("openai_compatible", "anthropic")


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)


def settings_for(provider: str, server: ProviderServer, **more) -> JudgeSettings:
    base_url = server.url + "/v1" if provider == "openai_compatible" else server.url
    return JudgeSettings(provider=provider, model=f"{provider}-judge", base_url=base_url, api_key_env=KEY_ENV,
                         **{"requests_per_minute": 6000, "max_attempts": 4, "timeout_seconds": 5, **more})


def requests_for(prompts, settings):
    t = builtin_templates()["fluency"]
    schema = json.dumps(t.pointwise_schema())
    return [JudgeRequest(request_key(settings, p, schema, 0), "fluency", p, schema, "score", tuple(t.rating_rubric))
            for p in prompts]


# ---------------------------------------------------------------- settings


def test_a_provider_has_its_own_backend_key_variable_and_needs_a_model():
    claude = JudgeSettings(provider="anthropic", model="claude-sonnet-4-5")
    assert (claude.backend, claude.api_key_env) == ("anthropic_api", "ANTHROPIC_API_KEY")
    gpt = JudgeSettings.model_validate({"provider": "openai_compatible", "model": "gpt-5-mini"})
    assert (gpt.backend, gpt.api_key_env) == ("openai_api", "OPENAI_API_KEY")
    assert JudgeSettings().backend == "gemini_api" and JudgeSettings().provider == "gemini"
    assert JudgeSettings(provider="anthropic", model="m", mode="batch").mode == "batch"  # Message Batches
    assert JudgeSettings(provider="openai_compatible", model="m", mode="batch").mode == "batch"  # the Batch API
    vertex_claude = JudgeSettings(provider="anthropic", model="claude-sonnet-4-5", backend="vertex_ai",
                                  project="p", location="us-east5")
    assert vertex_claude.backend == "vertex_ai"
    for bad, reason in [({"provider": "anthropic"}, "needs judge.model"),
                        ({"provider": "openai_compatible", "model": "m", "backend": "vertex_ai"}, "not one of provider"),
                        ({"backend": "anthropic_api"}, "not one of provider gemini"),
                        ({"provider": "anthropic", "model": "m", "mode": "batch", "backend": "vertex_ai"},
                         "mode batch is not supported"),
                        ({"provider": "openai_compatible", "model": "m", "base_url": "http://u:pw@host/v1"},
                         "credentials in the URL"),
                        ({"provider": "mistral", "model": "m"}, "provider")]:
        with pytest.raises(pydantic.ValidationError, match=reason):
            JudgeSettings.model_validate(bad)


def test_the_request_key_names_the_provider_and_model_and_keeps_gemini_keys():
    import hashlib

    gemini = JudgeSettings(model="same-name")
    # a gemini key is what it was before providers existed: judge.cache tables written then still match
    material = json.dumps({"generation": {"model": "same-name", "temperature": 0.0, "max_output_tokens": 2048},
                           "schema": "s", "prompt": "p", "sample": 0}, sort_keys=True, ensure_ascii=False)
    assert request_key(gemini, "p", "s", 0) == hashlib.sha256(material.encode()).hexdigest()
    keys = {request_key(JudgeSettings(provider=p, model=m), "p", "s", 0)
            for p in PROVIDERS for m in ("same-name", "other")} | {request_key(gemini, "p", "s", 0)}
    assert len(keys) == 5  # no two judges share a cache entry


def test_an_override_naming_another_provider_inherits_no_connection():
    run_judge = JudgeSettings.model_validate({"model": "gemini-2.5-pro", "backend": "vertex_ai", "project": "p",
                                              "location": "europe-west4", "requests_per_minute": 120,
                                              "prices": {"claude-sonnet-4-5": {"input_per_million": 3}}})
    claude = run_judge.overridden({"provider": "anthropic", "model": "claude-sonnet-4-5"})
    assert (claude.provider, claude.model, claude.backend, claude.api_key_env, claude.project) == (
        "anthropic", "claude-sonnet-4-5", "anthropic_api", "ANTHROPIC_API_KEY", None)
    assert claude.requests_per_minute == 120 and claude.prices == run_judge.prices  # the rest is inherited
    same = run_judge.overridden({"model": "gemini-2.5-flash"})
    assert (same.backend, same.project, same.location) == ("vertex_ai", "p", "europe-west4")
    with pytest.raises(pydantic.ValidationError, match="needs judge.model"):
        run_judge.overridden({"provider": "anthropic"})


def test_response_schemas_become_json_schema():
    t = builtin_templates()["fluency"]
    schema, strict = json_schema(t.pointwise_schema())
    assert schema == {"type": "object", "properties": {"explanation": {"type": "string"},
                                                       "score": {"type": "string", "enum": list(t.rating_rubric)}},
                      "required": ["explanation", "score"], "additionalProperties": False}
    assert strict
    loose, strict = json_schema({"type": "OBJECT", "properties": {"a": {"type": "STRING", "nullable": True},
                                                                  "b": {"type": "ARRAY", "items": {"type": "INTEGER"}}},
                                 "required": ["a"]})
    assert not strict and "additionalProperties" not in loose
    assert loose["properties"] == {"a": {"type": ["string", "null"]}, "b": {"type": "array", "items": {"type": "integer"}}}


# ---------------------------------------------------------------- the client layer, per provider


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.parametrize("provider", PROVIDERS)
def test_client_honours_429_retry_after_and_loses_nothing(key, provider):
    # the client believes it has 1200 a minute; the server grants 300 (10 per 2 s)
    with ProviderServer(Behaviour(quota=10, window_seconds=2.0)) as server:
        settings = settings_for(provider, server, requests_per_minute=1200, max_attempts=8)
        start = time.monotonic()
        results = list(judge_stream(settings, requests_for([f"q{i} #score=2" for i in range(30)], settings), lambda r: r))
        elapsed = time.monotonic() - start
    assert sorted(r.verdict for _, r in results) == ["2"] * 30
    assert server.stats.rate_limited > 0
    assert sum(r.rate_limited for _, r in results) == server.stats.rate_limited
    assert server.stats.accepted == 30 and server.protocols == {provider.split("_")[0]: 30}
    assert elapsed >= 4.0  # Retry-After was honoured: 30 requests at 10 per 2 s
    assert server.credentials == {SECRET}  # the real client sent the key


@pytest.mark.slow
@pytest.mark.parametrize("provider", PROVIDERS)
def test_client_retries_5xx_timeouts_and_malformed_output_then_gives_up_with_the_reason(key, provider):
    with ProviderServer(Behaviour(error_rate=0.2, timeout_rate=0.1, timeout_delay=1.5, seed=3)) as server:
        settings = settings_for(provider, server, max_attempts=8, timeout_seconds=0.5)
        prompts = [f"r{i} #score=4" for i in range(20)] + ["bad #score=5 #malformed=2", "worse #score=1 #invalid=1"]
        results = {r.prompt: resp for r, resp in judge_stream(settings, requests_for(prompts, settings), lambda r: r)}
    assert all(resp.error is None for resp in results.values())
    assert results["bad #score=5 #malformed=2"].verdict == "5" and results["bad #score=5 #malformed=2"].attempts >= 3
    assert results["worse #score=1 #invalid=1"].verdict == "1" and results["worse #score=1 #invalid=1"].attempts >= 2
    assert server.stats.errors > 0 and server.stats.timeouts > 0
    # tokens: what the server counted for the answers given (len // 4 of prompt and answer)
    assert all(r.prompt_tokens >= len(p) // 4 > 0 and r.output_tokens > 0 for p, r in results.items())

    with ProviderServer() as server:
        settings = settings_for(provider, server, max_attempts=3)
        got = {r.prompt: resp for r, resp in judge_stream(
            settings, requests_for(["down #fail", "junk #malformed=9", "bad #echo_key=400", "down #echo_key=503"],
                                   settings), lambda r: r)}
    assert got["down #fail"].error == "judge failed after 3 attempts; last: HTTP 503: The service is overloaded."
    assert got["junk #malformed=9"].error.startswith("judge failed after 3 attempts; last: invalid judge output: ")
    # the stand-in repeats the key it was sent in its error: scrubbed, retried or not
    assert got["bad #echo_key=400"].error == "HTTP 400: The credential [redacted] was refused. (not retried)"
    assert got["down #echo_key=503"].error == \
        "judge failed after 3 attempts; last: HTTP 503: The credential [redacted] was refused."
    assert server.stats.requests == 3 + 3 + 1 + 3


@pytest.mark.slow
@pytest.mark.parametrize("provider", PROVIDERS)
def test_structured_answers_use_the_providers_own_mechanism(key, provider):
    with ProviderServer() as server:
        settings = settings_for(provider, server)
        list(judge_stream(settings, requests_for(["one #score=3"], settings), lambda r: r))
    [(protocol, body)] = server.bodies
    schema, _ = json_schema(builtin_templates()["fluency"].pointwise_schema())
    if provider == "openai_compatible":
        assert body["response_format"] == {"type": "json_schema",
                                           "json_schema": {"name": "record_judgment", "schema": schema, "strict": True}}
        assert body["model"] == "openai_compatible-judge" and body["max_tokens"] == 2048
    else:
        assert body["tools"][0]["input_schema"] == schema
        assert body["tool_choice"] == {"type": "tool", "name": body["tools"][0]["name"]}
        assert body["model"] == "anthropic-judge" and body["max_tokens"] == 2048


# ---------------------------------------------------------------- in a pipeline


def instance(i, response):
    return Instance(i, {"prompt": "Greet", "response": response}, {}, f"data:{i}")


@pytest.mark.slow
def test_two_judges_of_different_providers_in_one_pipeline(key):
    """Two judge stages of one pipeline, one per provider, each with its own client, quota and
    cache keys; a judgment failing after retries is an error on its row, never a lost row."""
    run = RunKey("r1", dt.date(2026, 11, 27))
    instances = [instance("a", "Hello! #score=5"), instance("b", "hullo #score=2 #malformed=2"),
                 instance("c", "down #fail"), instance("d", "Hello! #score=5")]  # d asks what a asks
    with ProviderServer() as openai_server, ProviderServer() as claude_server:
        gpt, claude = settings_for("openai_compatible", openai_server), settings_for("anthropic", claude_server)
        with TestPipeline() as p:
            given = p | beam.Create(instances)
            for name, settings in (("OpenAI", gpt), ("Claude", claude)):
                scored, cache_rows, usage = given | name >> JudgeInstances(
                    run, [MetricSpec(name="fluency")], JudgeContext(settings))
                assert_that(scored | f"{name}Rows" >> beam.FlatMap(lambda s: [
                    (r["instance_id"], r["judge_model"], r["score"], r["error"]) for r in s.results]),
                    equal_to([("a", settings.model, 5.0, None), ("b", settings.model, 2.0, None),
                              ("c", settings.model, None, "judge failed after 4 attempts; last: HTTP 503: The service "
                                                          "is overloaded."), ("d", settings.model, 5.0, None)]),
                    label=f"{name}Scored")
                assert_that(usage | f"{name}Usage" >> beam.Map(lambda u: {
                    k: u["fluency"][k] for k in ("requests", "failures", "model")}),
                    equal_to([{"requests": 3, "failures": 1, "model": settings.model}]), label=f"{name}Accounting")
                assert_that(cache_rows | f"{name}Cache" >> beam.Map(lambda r: r["model"]),
                            equal_to([settings.model] * 2), label=f"{name}CacheRows")
    assert openai_server.protocols["openai"] == 2 + 2 and claude_server.protocols["anthropic"] == 2 + 2  # b: 2 malformed
    assert not claude_server.protocols["openai"] and not openai_server.protocols["anthropic"]


def test_cost_is_priced_per_model():
    usage = {"fluency": {"requests": 2, "prompt_tokens": 1_000_000, "output_tokens": 100_000, "model": "claude"},
             "safety": {"requests": 2, "prompt_tokens": 2_000_000, "output_tokens": 0},  # the run's judge model
             "jury": {"requests": 4, "prompt_tokens": 2_000_000, "output_tokens": 200_000,
                      "models": {"claude": {"prompt_tokens": 1_000_000, "output_tokens": 100_000},
                                 "gpt": {"prompt_tokens": 1_000_000, "output_tokens": 100_000}}}}
    prices = {"claude": {"input_per_million": 3, "output_per_million": 15},
              "gpt": {"input_per_million": 1, "output_per_million": 10},
              "gemini-2.5-flash": {"input_per_million": 0.3, "output_per_million": 2.5}}
    totals = judge_totals(usage, prices, "gemini-2.5-flash")
    per_metric = json.loads(totals["judge_usage"])
    assert per_metric["fluency"]["estimated_cost"] == pytest.approx(3 + 1.5)
    assert per_metric["safety"]["estimated_cost"] == pytest.approx(0.6)
    assert per_metric["jury"]["estimated_cost"] == pytest.approx(3 + 1.5 + 1 + 1)
    assert totals["judge_estimated_cost"] == pytest.approx(4.5 + 0.6 + 6.5)
    unpriced = judge_totals(usage, {k: v for k, v in prices.items() if k != "gpt"}, "gemini-2.5-flash")
    assert unpriced["judge_estimated_cost"] is None  # a model without a price: no total, rather than a wrong one
    assert "estimated_cost" not in json.loads(unpriced["judge_usage"])["jury"]


# ---------------------------------------------------------------- end to end


@pytest.mark.slow
@pytest.mark.parametrize("provider", PROVIDERS)
def test_evalbeam_run_with_a_provider_counts_tokens_and_cost_and_never_shows_the_key(tmp_path, provider, caplog):
    rows = [{"id": "a", "prompt": "Greet", "response": "Hello! #score=5"},
            {"id": "b", "prompt": "Greet", "response": "hullo #score=2 #malformed=1"},
            {"id": "c", "prompt": "Greet", "response": "leaky #echo_key=401"},
            {"id": "d", "prompt": "Greet", "response": "down #fail"}]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    model = f"{provider}-judge"
    with ProviderServer(Behaviour(quota=3, window_seconds=1.0)) as server:
        config = {"name": "judged", "run_id": "p1", "input": {"uri": str(data), "id_column": "id"},
                  "metrics": ["fluency"], "output": {"parquet": str(tmp_path / "out")},
                  "judge": {"provider": provider, "model": model, "api_key_env": KEY_ENV,
                            "base_url": server.url + ("/v1" if provider == "openai_compatible" else ""),
                            "requests_per_minute": 6000, "max_attempts": 4, "timeout_seconds": 10,
                            "prices": {model: {"input_per_million": 2.0, "output_per_million": 8.0}}}}
        path = tmp_path / "p1.yaml"
        path.write_text(json.dumps(config))
        with caplog.at_level(logging.DEBUG):
            result = evalbeam("run", path, env={KEY_ENV: SECRET})
    assert server.credentials == {SECRET}
    got = {r["instance_id"]: r for r in table(tmp_path / "out" / "p1", "metric_results")}
    assert (got["a"]["score"], got["b"]["score"], got["a"]["judge_model"]) == (5.0, 2.0, model)
    assert got["c"]["error"] == "HTTP 401: The credential [redacted] was refused. (not retried)"
    assert got["d"]["error"].startswith("judge failed after 4 attempts") and got["d"]["score"] is None
    [runs] = table(tmp_path / "out" / "p1", "runs")
    assert (runs["read_count"], runs["scored_count"], runs["dead_letter_count"]) == (4, 4, 0)
    assert runs["judge_rate_limited"] == server.stats.rate_limited > 0  # 3 a second: some 429s
    assert runs["judge_prompt_tokens"] == sum(r["prompt_tokens"] for r in got.values()) > 0
    assert runs["judge_output_tokens"] == sum(r["output_tokens"] for r in got.values()) > 0
    assert runs["judge_estimated_cost"] == pytest.approx(
        (runs["judge_prompt_tokens"] * 2.0 + runs["judge_output_tokens"] * 8.0) / 1e6)
    assert json.loads(runs["judge_usage"])["fluency"]["model"] == model
    # the key: in no output file, log or message
    leaked = [str(f) for f in tmp_path.rglob("*") if f.is_file() and SECRET.encode() in f.read_bytes()]
    assert leaked == [] and SECRET not in result.stdout + result.stderr + caplog.text


def test_claude_on_vertex_ai_with_application_default_credentials(tmp_path, monkeypatch):
    """backend vertex_ai: AnthropicVertex with the ADC google-auth loads (a service account file
    whose token endpoint is the stand-in's), the project and region in the path; the bearer
    token the endpoint echoes is scrubbed."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.credentials import CLIENT_EMAIL, service_account_file

    for name in ("GOOGLE_CLOUD_PROJECT", "CLOUD_ML_REGION", "ANTHROPIC_VERTEX_PROJECT_ID", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    signing_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with ProviderServer() as server:
        adc, _ = service_account_file(tmp_path, f"{server.url}/token", signing_key)
        server.trust(CLIENT_EMAIL, signing_key.public_key())
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        settings = JudgeSettings(provider="anthropic", model="claude-judge", backend="vertex_ai", project="proj-1",
                                 location="us-east5", base_url=server.url + "/v1", requests_per_minute=6000,
                                 max_attempts=2)
        got = {r.prompt: resp for r, resp in judge_stream(
            settings, requests_for(["one #score=4", "leaky #echo_key=400"], settings), lambda r: r)}
    assert got["one #score=4"].verdict == "4" and got["one #score=4"].error is None, got["one #score=4"].error
    assert server.protocols == {"anthropic_vertex": 1} and server.stats.unauthorized == 0
    # (two calls at once may each refresh the token: every token presented was issued here)
    assert server.stats.issued_tokens and server.stats.bearer_tokens <= server.stats.issued_tokens
    assert got["leaky #echo_key=400"].error == "HTTP 400: The credential [redacted] was refused. (not retried)"
    assert not any(token in (r.error or "") for token in server.stats.issued_tokens for r in got.values())
    assert all(body.get("anthropic_version") and "model" not in body for _, body in server.bodies)


def test_usages_of_several_stages_merge_with_their_models():
    """The run's usage merges each stage's (pipelines.stages.summary), in any grouping: counts
    summed, a metric answered by two models keeps each one's tokens."""
    from evalbeam.metrics.judge.usage import merge_usage

    a = {"fluency": {"requests": 2, "calls": 2, "prompt_tokens": 10, "output_tokens": 4, "model": "gpt"},
         "safety": {"requests": 1, "calls": 1, "prompt_tokens": 5, "output_tokens": 1, "model": "gpt"}}
    b = {"fluency": {"requests": 1, "calls": 3, "prompt_tokens": 7, "output_tokens": 2, "model": "claude"},
         "safety": {"requests": 1, "calls": 1, "prompt_tokens": 6, "output_tokens": 2, "model": "gpt"}}
    once = merge_usage([a, b])
    assert merge_usage([merge_usage([a]), merge_usage([b])]) == once == merge_usage([merge_usage([a, b])])
    assert (once["safety"]["model"], once["safety"]["prompt_tokens"], once["safety"]["requests"]) == ("gpt", 11, 2)
    assert once["fluency"]["prompt_tokens"] == 17 and "model" not in once["fluency"]
    assert once["fluency"]["models"] == {
        "gpt": {"prompt_tokens": 10, "output_tokens": 4, "batch_prompt_tokens": 0, "batch_output_tokens": 0},
        "claude": {"prompt_tokens": 7, "output_tokens": 2, "batch_prompt_tokens": 0, "batch_output_tokens": 0}}


@pytest.mark.slow
@pytest.mark.parametrize("provider", PROVIDERS)
def test_batch_mode_through_each_providers_batch_api(key, provider):
    """judge.mode batch: OpenAI's Batch API (an uploaded JSONL file) or Anthropic's Message Batches,
    through the real clients, each request's custom_id its key; an item the batch failed is asked
    again online; the batch answers' tokens are counted at the batch price."""
    from evalbeam.metrics.judge.batch import judge_batch

    prompts = [f"q{i} #score={i % 5 + 1}" for i in range(6)] + ["again #score=2 #batchfail=1", "down #fail"]
    protocol = provider.split("_")[0]
    with ProviderServer(Behaviour(batch_seconds=0.1)) as server:
        settings = settings_for(provider, server, mode="batch", batch_max_requests=4, batch_poll_seconds=0.05,
                                max_attempts=3)
        requests = requests_for(prompts, settings)
        got = {r.key: r for _, r in judge_batch(settings, requests, lambda r: r, sleep=time.sleep)}
    assert set(got) == {r.key for r in requests}  # none lost
    assert [(j["source"], j["requests"]) for j in server.stats.batch_jobs] == [(protocol, 4), (protocol, 4)]
    assert len(server.stats.uploads) == (2 if protocol == "openai" else 0)
    for i, request in enumerate(requests[:6]):
        r = got[request.key]
        assert (r.verdict, r.attempts, r.error, r.model) == (str(i % 5 + 1), 1, None, settings.model)
        assert r.batch_prompt_tokens == r.prompt_tokens == len(request.prompt) // 4 > 0
    again, down = got[requests[6].key], got[requests[7].key]
    assert (again.verdict, again.attempts, again.batch_prompt_tokens) == ("2", 2, 0) and again.prompt_tokens > 0
    assert down.verdict is None and down.attempts == 3
    batch_error = "batch item errored: api_error: Internal server error" if protocol == "anthropic" else \
        "batch item failed: HTTP 500: The server had an error while processing your request."
    assert down.error.startswith(f"judge failed after 3 attempts (the first in a batch job, {batch_error}); "
                                 "last: HTTP 503")
    assert server.protocols == {protocol: 1} and server.stats.requests == 1 + 2  # online: the retries only
    assert server.credentials == {SECRET}


@pytest.mark.slow
@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_batch_apis_calls_are_retried_by_the_policy_and_a_create_is_never_sent_twice(key, provider):
    """The anthropic and openai clients' own retries are off in batch mode; their API calls are retried by
    metrics.retry's policy: a create refused with 503, a poll answered 429 (Retry-After 1) and a read of
    the results answered 500 are each sent again (the poll after at least its Retry-After), and the run
    loses nothing. A create whose connection closed after the batch was made is not sent again (it would
    be paid for twice): its error is raised, one batch made."""
    import re

    from evalbeam.metrics.judge.batch import judge_batch

    protocol = provider.split("_")[0]
    create = "/v1/messages/batches" if protocol == "anthropic" else "/v1/batches"
    results = "/v1/messages/batches/[^/]+/results" if protocol == "anthropic" else "/v1/files/[^/]+/content"
    waits = []

    def sleep(seconds):
        waits.append(seconds)
        time.sleep(min(seconds, 0.05))

    with ProviderServer(Behaviour(batch_seconds=0.1)) as server:
        server.batch_faults = [("POST", create, (503, None)), ("GET", create + "/[^/]+", (429, 1)),
                               ("GET", results, (500, None))]
        settings = settings_for(provider, server, mode="batch", batch_poll_seconds=0.05, max_attempts=3)
        requests = requests_for([f"q{i} #score={i + 1}" for i in range(3)], settings)
        got = {r.key: r for _, r in judge_batch(settings, requests, lambda r: r, sleep=sleep)}
        assert server.batch_faults == []  # each fault met its request
        assert [(r.verdict, r.attempts, r.error) for r in (got[q.key] for q in requests)] == [
            ("1", 1, None), ("2", 1, None), ("3", 1, None)]
        assert len(server.stats.batch_jobs) == 1
        assert [c for c in server.batch_calls if c[0] == "POST" and re.fullmatch(create, c[1])] == [("POST", create)] * 2
        assert max(waits) >= 1.0  # the 429's Retry-After

        server.batch_faults = [("POST", create, "drop")]
        with pytest.raises(Exception) as lost:
            list(judge_batch(settings, requests_for(["lost #score=1"], settings), lambda r: r, sleep=sleep))
        assert type(lost.value).__name__ == "APIConnectionError", lost.value
        assert len(server.stats.batch_jobs) == 2  # made once, and not sent again


@pytest.mark.slow
def test_batch_jobs_are_held_to_each_providers_batch_limits(key, monkeypatch):
    """OpenAI's Batch API takes 50,000 requests / 200 MB per job and Anthropic's Message Batches
    100,000 / 256 MB: the defaults (Gemini's 1 GB) are capped so that a large run is split into
    more jobs; a value above the provider's limit is a config error naming it."""
    from evalbeam.metrics.judge import settings as settings_module
    from evalbeam.metrics.judge.batch import judge_batch

    openai = JudgeSettings(provider="openai_compatible", model="gpt", mode="batch")
    anthropic = JudgeSettings(provider="anthropic", model="claude", mode="batch")
    gemini = JudgeSettings(mode="batch")
    assert openai.batch_limits() == (10000, 200_000_000)
    assert anthropic.batch_limits() == (10000, 256_000_000)
    assert gemini.batch_limits() == (10000, 1_000_000_000)
    assert JudgeSettings(provider="anthropic", model="c", mode="batch", batch_max_requests=100_000).batch_limits() \
        == (100_000, 256_000_000)
    for provider, field, value, cap in (("openai_compatible", "batch_max_requests", 50_001, "50000"),
                                        ("openai_compatible", "batch_max_bytes", 300_000_000, "200000000"),
                                        ("anthropic", "batch_max_bytes", 257_000_000, "256000000")):
        with pytest.raises(pydantic.ValidationError, match=f"{field} {value} is above provider {provider}'s "
                                                           f"batch limit of {cap}"):
            JudgeSettings(provider=provider, model="m", mode="batch", **{field: value})
    # the limit splits a run into more jobs, though batch_max_requests allows more
    monkeypatch.setitem(settings_module.BATCH_LIMITS, "anthropic", (3, 256_000_000))
    prompts = [f"q{i} #score={i % 5 + 1}" for i in range(7)]
    with ProviderServer(Behaviour(batch_seconds=0.05)) as server:
        settings = settings_for("anthropic", server, mode="batch", batch_poll_seconds=0.05)
        requests = requests_for(prompts, settings)
        got = {r.key: r for _, r in judge_batch(settings, requests, lambda r: r, sleep=time.sleep)}
    assert {r.key for r in requests} == set(got) and all(r.error is None for r in got.values())
    assert [j["requests"] for j in server.stats.batch_jobs] == [3, 3, 1]


def test_every_token_the_credentials_held_is_scrubbed_not_only_the_current_one():
    """Two calls at once may each refresh the token, so an error can repeat a token the credentials no
    longer hold (test_claude_on_vertex_ai_with_application_default_credentials failed so about one run in
    four, the token in the error): every token held is scrubbed, and anything shaped like a Google token."""
    from google.auth import credentials as ga_credentials

    from evalbeam.metrics.judge.providers import remember_tokens, scrub_secrets

    class Rotating(ga_credentials.Credentials):
        def __init__(self):
            super().__init__()
            self.n = 0

        def refresh(self, request):
            self.n += 1
            self.token = f"tok-secret-{self.n:04d}"

    credentials = remember_tokens(Rotating())
    credentials.refresh(None)
    first = credentials.token
    credentials.before_request(None, "POST", "http://x", {})  # valid: no refresh
    credentials.refresh(None)
    assert credentials.token != first
    text = f"refused {first} and {credentials.token}; also ya29.c.b0AXv0zTOther-_x.y and eyJhbGciOi.eyJzdWIi.c2ln"
    assert scrub_secrets(text, None, credentials) == "refused [redacted] and [redacted]; also [redacted] and [redacted]"
    assert remember_tokens(credentials) is credentials  # wrapped once
    assert scrub_secrets("nothing secret: 10.0.0.1", None, None) == "nothing secret: 10.0.0.1"
