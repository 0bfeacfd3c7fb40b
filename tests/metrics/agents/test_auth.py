"""Authenticated A2A (inference.auth, metrics/agents/auth.py): ADK's own `to_a2a` server
(tests/agent_env/serve_a2a.py) behind a check of every request's Authorization header, which verifies
Google ID tokens with google-auth's own verifier (signature against the local token endpoint's
certificates, audience, expiry). The ID tokens are minted by google-auth from Application Default
Credentials: a real service account key file made here, its token_uri the local token endpoint
(tests/servers/judge_server.py), which answers the JWT-bearer grant with an ID token as Google's does."""
from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request

import pytest

from evalbeam.metrics.agents.a2a import A2AInferrer
from evalbeam.metrics.agents.a2a_card import foreign_endpoint
from evalbeam.metrics.agents.auth import A2AAuth
from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.agents.probe import reachable
from evalbeam.metrics.retry import RetryPolicy
from tests.agent_cases import a2a_cases, over_a2a
from tests.credentials import BEARER, SERVICE_ACCOUNT, auth_log, guarded, id_token_check
from tests.servers.judge_server import JudgeServer


@pytest.mark.timing
@pytest.mark.agent
def test_id_tokens_from_adc_are_verified_by_the_agent_and_refreshed_as_they_expire(tmp_path, adc):
    """inference.auth google_id_token: every request (the agent card's, each turn's) carries an ID token for
    the agent's URL that google-auth's verifier accepts. A token lasts: one is minted for a whole run. Short-
    lived tokens expire mid-run: the later turns carry new ones (the verifier refuses an expired token, as
    shown by sending the first one again), and no request is refused."""
    tokens = adc
    cases = a2a_cases(tmp_path)
    with JudgeServer() as model:
        with guarded(model.url, lambda url: id_token_check(tokens, url)) as url:
            ready = len(auth_log(url))  # A2AServer's readiness probes (no credential, refused)
            done, calls = over_a2a(url, cases, {"google_id_token": {}})
            log = auth_log(url)[ready:]
            assert done["agent:two_turns"]["failure"] == 0, done["agent:two_turns"].get("inference_error")
            assert done["agent:raises"]["failure"] == 1  # its tool raises: the agent's failure, not a refusal
            assert {e["status"] for e in log} == {200} and len(log) >= 1 + 5
            assert {e["aud"] for e in log} == {url} and {e["email"] for e in log} == {SERVICE_ACCOUNT}
            assert len(tokens.stats.id_tokens) == 1  # an hour-long token: minted once for the run

            # tokens of 5 s: one case, a pause past the token's expiry, another case in the same run
            tokens.id_token_lifetime = 5
            before = len(auth_log(url))
            calls = Calls(None, RetryPolicy(max_attempts=3), 60)
            inferrer = A2AInferrer(url, calls, 4, {"google_id_token": {}})
            first_token = {}

            async def run():
                first = await inferrer.infer(dict(cases[1][1]))
                first_token["header"] = inferrer._auth.headers()["Authorization"]
                await asyncio.sleep(6)
                second = await inferrer.infer(dict(cases[0][1]))
                await inferrer.close()
                return first, second

            first, second = asyncio.run(run())
            assert first[0]["response"] and [t["response"] for t in second][1]
            log = auth_log(url)[before:]
            assert {e["status"] for e in log} == {200}  # no request carried an expired token
            expiries = sorted({e["exp"] for e in log})
            assert len(expiries) >= 2 and expiries[-1] - expiries[0] >= 6  # refreshed after the pause
            assert calls.stats.retries == 0
            # the first token, sent again now that it has expired: refused by the verifier
            request = urllib.request.Request(f"{url}/.well-known/agent-card.json",
                                             headers={"Authorization": first_token["header"]})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 401
            assert "expired" in auth_log(url)[-1]["reason"].lower()


def test_credentials_never_appear_in_errors_and_missing_ones_are_named(monkeypatch, tmp_path):
    """A2AAuth.scrub takes out every credential value (a static token, header values, the current ID
    token); an unset variable and user credentials (which cannot mint ID tokens) are said so."""
    monkeypatch.setenv("AGENT_TOKEN", BEARER)
    auth = A2AAuth({"bearer_env": "AGENT_TOKEN"}, "http://agent.example/a2a")
    assert auth.headers() == {"Authorization": f"Bearer {BEARER}"}
    assert auth.scrub(f"gateway said: bad Authorization: Bearer {BEARER}!") == \
        "gateway said: bad Authorization: Bearer [redacted]!"
    monkeypatch.delenv("AGENT_TOKEN")
    with pytest.raises(Exception, match=r"^inference.auth.bearer_env: the environment variable AGENT_TOKEN is not set here$"):
        A2AAuth({"bearer_env": "AGENT_TOKEN"}, "http://agent.example")
    user = tmp_path / "user.json"
    user.write_text(json.dumps({"type": "authorized_user", "client_id": "x", "client_secret": "y", "refresh_token": "z"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(user))
    auth = A2AAuth({"google_id_token": {}}, "http://agent.example/a2a/")
    assert auth.audience == "http://agent.example"  # the origin: the service's URL, not the agent's path
    with pytest.raises(Exception, match="are a user's, which cannot mint an ID token for another audience"):
        auth.headers()
    line = reachable("a2a", "http://agent.example/a2a", auth={"google_id_token": {}})
    assert line.startswith("inference.auth.google_id_token: no ID token for audience http://agent.example "
                           "(DefaultCredentialsError: the Application Default Credentials at ")


def test_gclouds_adc_file_is_where_google_auths_private_helper_says(monkeypatch, tmp_path):
    """id_token_credentials finds gcloud's ADC file by google-auth's private _cloud_sdk helper (no public
    function gives the path): a google-auth that renames it or moves the file fails here, not in a run."""
    from google.auth import _cloud_sdk

    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    assert _cloud_sdk.get_application_default_credentials_path() == str(tmp_path / "application_default_credentials.json")
    monkeypatch.delenv("CLOUDSDK_CONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _cloud_sdk.get_application_default_credentials_path() == str(
        tmp_path / ".config" / "gcloud" / "application_default_credentials.json")


@pytest.mark.slow
def test_an_id_token_from_gclouds_adc_file_is_google_auths_and_verifies(tmp_path, adc, monkeypatch):
    """Without GOOGLE_APPLICATION_CREDENTIALS, gcloud's ADC file (its config folder: CLOUDSDK_CONFIG) is read,
    which google-auth's fetch_id_token_credentials does not: a service account key there mints ID tokens
    that google-auth's verifier accepts for the audience; an impersonated service account there is taken
    as google-auth's impersonated ID-token credentials (not refreshed here: its IAM endpoint is Google's)."""
    import google.auth.transport.requests
    from google.oauth2 import id_token

    tokens = adc
    config = tmp_path / "gcloud"
    config.mkdir()
    key_file = json.loads(open(os.environ["GOOGLE_APPLICATION_CREDENTIALS"]).read())
    (config / "application_default_credentials.json").write_text(json.dumps(key_file))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(config))
    auth = A2AAuth({"google_id_token": {"audience": "https://agent.example"}}, "http://ignored")
    header = auth.headers()["Authorization"]
    claims = id_token.verify_token(header.removeprefix("Bearer "), google.auth.transport.requests.Request(),
                                   audience="https://agent.example", certs_url=f"{tokens.url}/oauth2/v1/certs")
    assert claims["email"] == SERVICE_ACCOUNT and tokens.stats.id_tokens[-1]["aud"] == "https://agent.example"
    assert auth.describe() == (f"a Google ID token for audience https://agent.example ({SERVICE_ACCOUNT}) from "
                               "Application Default Credentials")
    assert auth.headers()["Authorization"] == header  # held until it nears its expiry, not minted per request
    assert auth.scrub(f"echo {header}") == "echo Bearer [redacted]"
    (config / "application_default_credentials.json").write_text(json.dumps({
        "type": "impersonated_service_account", "delegates": [],
        "service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/"
                                             "agent-caller@p.iam.gserviceaccount.com:generateAccessToken",
        "source_credentials": {**key_file}}))
    from google.auth import impersonated_credentials

    from evalbeam.metrics.agents.auth import id_token_credentials

    credentials = id_token_credentials("https://agent.example", google.auth.transport.requests.Request())
    assert isinstance(credentials, impersonated_credentials.IDTokenCredentials)
    assert credentials._target_credentials.service_account_email == "agent-caller@p.iam.gserviceaccount.com"


CARD = "/.well-known/agent-card.json"


@pytest.mark.agent
def test_the_credential_goes_to_the_agents_origin_only_and_a_card_naming_another_fails(tmp_path, monkeypatch):
    """A card read at inference.a2a's origin that names another host for the agent's endpoint (stale, or
    hostile): preflight and every case fail in one line saying so, and the other host never gets the
    credential (it is not called at all). Here inference.a2a is http://localhost:P, whose card (ADK's to_a2a)
    names http://127.0.0.1:P/: the same server, so its log shows what reached the other origin."""
    monkeypatch.setenv("AGENT_TOKEN", BEARER)
    auth = {"bearer_env": "AGENT_TOKEN"}
    with JudgeServer() as model:
        with guarded(model.url, {"bearer": BEARER}) as url:
            port = url.rsplit(":", 1)[1]
            ours = f"http://localhost:{port}"
            ready = len(auth_log(url))
            line = reachable("a2a", ours, auth=auth)
            assert line == (f"inference.a2a: the agent card at {ours}{CARD} names {url} as the agent's endpoint, "
                            f"another host than inference.a2a ({ours}): inference.auth's credential is sent to "
                            "inference.a2a's origin only; serve the agent with the URL it is reached at in its card"), line
            done, _ = over_a2a(ours, a2a_cases(tmp_path)[:2], auth)
            assert {v.get("inference_error") for v in done.values()} == {f"inference failed: {line}"}, done
            log = auth_log(url)[ready:]
            # the card (at inference.a2a, with the credential), never the endpoint it names
            assert {e["path"] for e in log} == {CARD} and {e["status"] for e in log} == {200}, log
            assert len(log) == 2  # preflight's read and the run's (once for the shard's cases)

            # the client itself adds the credential to no request for another origin (the same server by IP)
            import httpx

            credential = A2AAuth(auth, ours)
            with httpx.Client(auth=credential.for_httpx(), timeout=10) as client:
                assert client.get(f"{ours}{CARD}").status_code == 200
                assert client.get(f"{url}{CARD}").status_code == 401
            assert [e["reason"] for e in auth_log(url)[-2:]] == ["ok", "wrong bearer token"]


def test_the_credential_is_added_for_the_configured_scheme_host_and_port_only(monkeypatch):
    """httpx's own requests through the auth flow: the credential for inference.a2a's origin (its default port
    written or not), none for another port, host or scheme; never over http when inference.a2a is https."""
    import httpx

    monkeypatch.setenv("AGENT_TOKEN", BEARER)
    flow = A2AAuth({"bearer_env": "AGENT_TOKEN"}, "https://agent.example/a2a/weather").for_httpx()
    for target, sent in [("https://agent.example/a2a/weather", True), ("https://AGENT.example:443/rpc", True),
                         ("http://agent.example/rpc", False), ("https://agent.example:8443/rpc", False),
                         ("https://agent.example.evil/rpc", False), ("http://127.0.0.1:18992/rpc", False)]:
        request = next(flow.sync_auth_flow(httpx.Request("POST", target)))
        assert ("authorization" in request.headers) is sent, target
    card = {"supportedInterfaces": [{"url": "https://agent.example/", "protocolBinding": "JSONRPC"},
                                    {"url": "http://agent.example/", "protocolBinding": "HTTP+JSON"}]}
    assert foreign_endpoint(card, "https://agent.example/a2a") == (
        "names http://agent.example/ as the agent's endpoint, over plain http, where inference.a2a is https: "
        "inference.auth's credential is never sent over http; serve the agent with the URL it is reached at in its card")
    assert "another port than inference.a2a (http://localhost:18991)" in foreign_endpoint(
        {"url": "http://localhost:18992/rpc"}, "http://localhost:18991")
    assert foreign_endpoint({"url": "https://agent.example:443/"}, "https://agent.example/a2a") is None


def test_a_secret_pasted_for_a_variable_name_is_never_echoed(tmp_path, monkeypatch):
    """A value where a variable's name belongs: the config error does not quote it; one that happens to be a
    valid name (a GitHub token) is set nowhere, and the preflight line says so without it."""
    from evalbeam.configs.load import load_config
    from evalbeam.configs.schema import ConfigError
    from tests.helpers import ROOT

    config = ROOT / "configs" / "agent_a2a.yaml"
    for override, where in [("inference.auth={headers: {X-Api-Key: 'sk-live-SECRET.xyz'}}",
                             "inference.auth.headers: headers.X-Api-Key: its value (not shown) is not an environment "
                             "variable name"),
                            ("inference.auth={headers: {'Bearer sk-live-SECRET.xyz': AGENT_TOKEN}}",
                             "inference.auth.headers: headers: header 1 of 1 has a name that is not an HTTP header "
                             "name (not shown)"),
                            ("inference.auth={bearer_env: 'sk-live-SECRET.xyz'}",
                             "inference.auth.bearer_env: String should match pattern")]:
        with pytest.raises(ConfigError) as error:
            load_config(config, [override])
        assert where in str(error.value) and "SECRET" not in str(error.value), str(error.value)

    token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    monkeypatch.delenv(token, raising=False)
    loaded = load_config(config, [f"inference.auth={{bearer_env: {token}}}"])  # a valid name: only preflight can tell
    line = reachable("a2a", "http://agent.example", auth=loaded.inference.auth.plain())
    assert line == ("inference.auth.bearer_env: the environment variable named there (not shown: its 40 characters "
                    "look like a secret, not a variable's name) is not set here"), line
    line = reachable("a2a", "http://agent.example", auth={"headers": {"X-Api-Key": "AKIAIOSFODNN7EXAMPLE",
                                                                      "X-Tenant": "AGENT_TENANT"}})
    assert "AKIA" not in line and line.endswith("not shown: its 20 characters look like a secret, not a variable's "
                                                "name), AGENT_TENANT are not set here"), line


def test_an_id_tokens_default_audience_is_the_agents_origin(tmp_path, adc):
    """Cloud Run takes the service's URL (scheme://host) as an ID token's audience, not the agent's path under it."""
    tokens = adc
    auth = A2AAuth({"google_id_token": {}}, "https://weather-abc123-uc.a.run.app/a2a/weather/")
    assert auth.audience == "https://weather-abc123-uc.a.run.app"
    auth.headers()
    assert tokens.stats.id_tokens[-1]["aud"] == "https://weather-abc123-uc.a.run.app"
    assert A2AAuth({"google_id_token": {}}, "http://127.0.0.1:8000/a2a").audience == "http://127.0.0.1:8000"
    given = A2AAuth({"google_id_token": {"audience": "https://custom.example/aud"}}, "https://x.a.run.app/a2a")
    assert given.audience == "https://custom.example/aud"


class RefusesTheFirstToken:
    """A local HTTP endpoint answering 401 to the first bearer token it sees (a token revoked while the client
    still holds it), once `refusals` requests carrying it have arrived (so they are refused together), and
    200 to any other; it records every Authorization header."""

    def __init__(self, refusals: int):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.seen: list[str] = []
        self.first = None
        lock, barrier = threading.Lock(), threading.Barrier(refusals, timeout=30)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                import time

                header = self.headers.get("Authorization", "")
                with lock:
                    endpoint.seen.append(header)
                    endpoint.first = endpoint.first or header
                    refused = header == endpoint.first
                if refused:
                    barrier.wait()
                    time.sleep(1.1)  # a new token is minted in a later second than the refused one (other claims)
                body = b"refused" if refused else b"ok"
                self.send_response(401 if refused else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()


@pytest.mark.timing
@pytest.mark.slow
def test_concurrent_401s_share_one_new_token_and_each_resend_waits_for_the_quota(adc):
    """Requests refused (401) with the same ID token: one new token for all of them (not one each), and each
    request sent again takes its place in the job's quota (Calls' limiter) like any request."""
    import httpx

    tokens = adc
    endpoint = RefusesTheFirstToken(refusals=5)
    calls = Calls(6000, RetryPolicy(max_attempts=3), 60)
    acquired = []
    acquire = calls.limiter.acquire

    async def counted(*args, **kwargs):
        acquired.append(1)
        return await acquire(*args, **kwargs)

    calls.limiter.acquire = counted
    auth = A2AAuth({"google_id_token": {}}, endpoint.url)

    async def run():
        async with httpx.AsyncClient(auth=auth.for_httpx(calls), timeout=60) as client:
            return await asyncio.gather(*(client.get(f"{endpoint.url}/rpc") for _ in range(5)))

    try:
        answers = asyncio.run(run())
    finally:
        endpoint.close()
    assert [a.status_code for a in answers] == [200] * 5
    assert len(tokens.stats.id_tokens) == 2  # the refused one, and one new one for the five
    assert len(set(endpoint.seen)) == 2 and len(endpoint.seen) == 10
    assert len(acquired) == 5 and calls.stats.requests == 5  # each re-send paced and counted


@pytest.mark.slow
def test_every_id_token_of_the_run_is_scrubbed(adc):
    """An error quoting an ID token since refreshed still has it taken out."""
    import time

    tokens = adc
    tokens.id_token_lifetime = 5  # within google-auth's refresh threshold: a new token per request
    auth = A2AAuth({"google_id_token": {}}, "http://agent.example")
    first = auth.headers()["Authorization"].removeprefix("Bearer ")
    time.sleep(1.1)  # a later iat: another token
    second = auth.headers()["Authorization"].removeprefix("Bearer ")
    assert first != second and len(tokens.stats.id_tokens) == 2
    assert auth.scrub(f"gateway: {first} was revoked; {second} ok") == "gateway: [redacted] was revoked; [redacted] ok"


def test_a_credential_shorter_than_8_characters_is_refused_naming_its_variable(monkeypatch):
    """Scrubbing a short value would garble every error ("10.0.0.[redacted]"): such a credential is refused,
    naming its variable, never its value; one of 8 or more is scrubbed and leaves the rest of a text alone."""
    monkeypatch.setenv("AGENT_TOKEN", "1")
    monkeypatch.setenv("AGENT_TENANT", "tenant-7")
    assert reachable("a2a", "http://agent.example", auth={"bearer_env": "AGENT_TOKEN"}) == (
        "inference.auth.bearer_env: the value of $AGENT_TOKEN is shorter than 8 characters: too short to be a "
        "credential, or to be kept out of errors")
    with pytest.raises(Exception, match=r"^inference.auth.headers: the value of \$AGENT_TOKEN is shorter than 8 "):
        A2AAuth({"headers": {"X-Tenant": "AGENT_TENANT", "X-Key": "AGENT_TOKEN"}}, "http://agent.example")
    auth = A2AAuth({"headers": {"X-Tenant": "AGENT_TENANT"}}, "http://agent.example")
    assert auth.scrub("turn 1: 10.0.0.1 said tenant-7 is unknown") == "turn 1: 10.0.0.1 said [redacted] is unknown"
