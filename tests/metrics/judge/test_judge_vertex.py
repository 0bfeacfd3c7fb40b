"""The judge on `backend: vertex_ai`: Application Default Credentials, project and
location, driven through the real google-auth and google-genai clients against the
local stand-in. The credentials are a real service account file (a key generated
here) whose token_uri is the stand-in's OAuth token endpoint, so google.auth.default()
loads it, google-auth signs the JWT grant and the stand-in checks its signature."""
import json
import urllib.error
import urllib.request

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from evalbeam.metrics.judge.client import JudgeSettings, judge_stream
from tests.credentials import CLIENT_EMAIL, service_account_file
from tests.helpers import evalbeam, table
from tests.servers.judge_server import JudgeServer
from tests.metrics.judge.test_judge import KEY, ROWS, judge_config, requests_for, write_data

PROJECT, LOCATION, MODEL = "evalbeam-vertex-test", "europe-west4", "gemini-2.5-flash"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


@pytest.fixture
def key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def vertex_env(monkeypatch):
    """Nothing from the machine decides the project, location or backend; an API key in the
    environment (a user may have one) must not be sent to Vertex."""
    for name in ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_GENAI_USE_VERTEXAI",
                 "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_GENAI_API_VERSION", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    return monkeypatch


def vertex_judge(**more):
    return {"backend": "vertex_ai", "project": PROJECT, "location": LOCATION, "model": MODEL, **more}


@pytest.mark.slow
def test_vertex_ai_end_to_end_with_application_default_credentials(tmp_path, key, vertex_env):
    # f: the endpoint repeats the bearer token in its error; the client must scrub it
    leaky = {**ROWS[0], "id": "f", "response": "leaky #echo_key=400", "baseline_model_response": "hi"}
    data = write_data(tmp_path, ROWS + [leaky])
    with JudgeServer() as server:
        token_uri = f"{server.url}/token"
        adc, pem = service_account_file(tmp_path, token_uri, key)
        server.trust(CLIENT_EMAIL, key.public_key())
        vertex_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        config = judge_config(tmp_path, data, server.url, ["fluency", "pairwise_fluency", "exact_match"],
                              **vertex_judge())
        run = evalbeam("run", config)
        stats = server.stats
    assert "read 6 = scored 6 + dead-lettered 0; metric errors 4" in run.stdout
    out = tmp_path / "out" / "j1"
    rows = {(r["instance_id"], r["metric"]): r for r in table(out, "metric_results")}
    assert len(rows) == 6 * 3
    # the scores the markers dictate, as on the gemini_api backend
    assert [rows[(i, "fluency")]["score"] for i in "abde"] == [5.0, 2.0, 5.0, 5.0]
    assert [rows[(i, "pairwise_fluency")]["pairwise_choice"] for i in "abde"] == ["CANDIDATE", "BASELINE", "TIE", "CANDIDATE"]
    assert rows[("a", "fluency")]["explanation"] == "Judged score 5 from the inputs."
    assert rows[("a", "fluency")]["judge_model"] == MODEL
    for metric in ("fluency", "pairwise_fluency"):
        assert rows[("c", metric)]["error"].startswith("judge failed after 3 attempts; last: HTTP 503")
        assert rows[("f", metric)]["error"] == "HTTP 400: The credential [redacted] was refused. (not retried)"
    assert stats.echoed == 3  # f: fluency, and pairwise in both orders

    # every call went to Vertex's route for the config's project, location and model, with a
    # bearer token the token endpoint issued; none to the Gemini API's route, no API key sent
    assert set(stats.vertex_resources) == {(PROJECT, LOCATION, MODEL)}
    assert sum(stats.vertex_resources.values()) == stats.requests > 0
    assert stats.unauthorized == 0 and stats.bearer_tokens and stats.bearer_tokens <= stats.issued_tokens
    assert stats.api_keys == {None}
    [runs] = table(out, "runs")
    assert runs["judge_calls"] == stats.requests
    # google-auth asked the file's token_uri for a token, with a JWT grant signed by the file's key
    # (the stand-in checked the signature) for the cloud-platform scope. (The grant's audience is
    # Google's token endpoint whatever the token_uri: google-auth writes it so.)
    assert len(stats.token_requests) == 1  # one shard, one client: one token for the whole run
    for claims in stats.token_requests:
        assert claims["iss"] == CLIENT_EMAIL and claims["aud"] == "https://oauth2.googleapis.com/token"
        assert CLOUD_PLATFORM in claims["scope"].split()

    # no credential is written anywhere or printed
    secrets = [*stats.issued_tokens, KEY, pem.splitlines()[1]]
    assert not any(s in run.stdout + run.stderr for s in secrets)
    for path in out.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert not any(s.encode() in content for s in secrets), path


@pytest.mark.slow
def test_vertex_ai_credentials_the_token_endpoint_refuses_fail_each_judgment(tmp_path, key, vertex_env):
    # The file's key is not the one the service account has (the stand-in trusts another):
    # every judgment fails with the token endpoint's reason, and nothing reaches the model.
    with JudgeServer() as server:
        adc, _ = service_account_file(tmp_path, f"{server.url}/token", key)
        server.trust(CLIENT_EMAIL, rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key())
        vertex_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        settings = JudgeSettings(model=MODEL, backend="vertex_ai", project=PROJECT, location=LOCATION,
                                 base_url=server.url, max_attempts=2)
        [(_, response)] = judge_stream(settings, requests_for(["x #score=3"], settings), lambda r: r)
    assert response.verdict is None and response.attempts == 2
    assert response.error.startswith("judge failed after 2 attempts; last: RefreshError")
    assert "Invalid JWT Signature" in response.error
    assert server.stats.requests == 0 and not server.stats.issued_tokens
    assert len(server.stats.token_requests) == 2 and all(g.get("invalid") for g in server.stats.token_requests)


@pytest.mark.slow
def test_vertex_ai_client_scrubs_the_access_token_a_server_echoes(tmp_path, key, vertex_env):
    with JudgeServer() as server:
        adc, _ = service_account_file(tmp_path, f"{server.url}/token", key)
        server.trust(CLIENT_EMAIL, key.public_key())
        vertex_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
        settings = JudgeSettings(model=MODEL, backend="vertex_ai", project=PROJECT, location=LOCATION,
                                 base_url=server.url, max_attempts=2)
        prompts = ["bad #echo_key=400", "down #echo_key=503", "fine #score=2"]
        results = {r.prompt: resp for r, resp in judge_stream(settings, requests_for(prompts, settings), lambda r: r)}
    [token] = server.stats.issued_tokens
    assert server.stats.bearer_tokens == {token} and server.stats.echoed == 1 + 2
    assert results["bad #echo_key=400"].error == "HTTP 400: The credential [redacted] was refused. (not retried)"
    assert results["down #echo_key=503"].error == (
        "judge failed after 2 attempts; last: HTTP 503: The credential [redacted] was refused.")
    assert results["fine #score=2"].verdict == "2" and results["fine #score=2"].error is None


@pytest.mark.slow
def test_vertex_ai_without_credentials_or_project_fails_before_the_pipeline(tmp_path, vertex_env):
    data = write_data(tmp_path, ROWS[:1])
    vertex_env.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    no_adc = judge_config(tmp_path, data, "http://127.0.0.1:9", ["fluency"], **vertex_judge())
    result = evalbeam("validate", no_adc, check=False)
    assert result.returncode == 2
    assert "judge.backend vertex_ai needs Application Default Credentials" in result.stderr
    no_project = judge_config(tmp_path, data, "http://127.0.0.1:9", ["fluency"], run_id="j2",
                              **vertex_judge(project=None))
    result = evalbeam("validate", no_project, check=False)
    assert result.returncode == 2 and "judge.backend vertex_ai needs judge.project and judge.location" in result.stderr


def test_the_stand_in_refuses_vertex_calls_without_a_token_it_issued():
    # what makes the bearer assertions above mean something
    with JudgeServer() as server:
        url = f"{server.url}/v1beta1/projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/{MODEL}:generateContent"
        body = json.dumps({"contents": [{"parts": [{"text": "x"}], "role": "user"}]}).encode()
        for headers in ({}, {"Authorization": "Bearer ya29.made-up"}, {"x-goog-api-key": KEY}):
            request = urllib.request.Request(url, body, {"Content-Type": "application/json", **headers})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 401
        assert server.stats.unauthorized == 3 and server.stats.requests == 0
