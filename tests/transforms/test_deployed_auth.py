"""Authenticated A2A (inference.auth, metrics.agents.deployed.A2AAuth): ADK's own `to_a2a` server
(tests/agent_env/serve_a2a.py) behind a check of every request's Authorization header, which verifies
Google ID tokens with google-auth's own verifier (signature against the local token endpoint's
certificates, audience, expiry). The ID tokens are minted by google-auth from Application Default
Credentials: a real service account key file made here, its token_uri the local token endpoint
(tests/judge_server.py), which answers the JWT-bearer grant with an ID token as Google's does."""
from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import urllib.error
import urllib.request

import pytest

from evalbeam.metrics.agents.deployed import A2AAuth, A2AInferrer, Calls, reachable
from evalbeam.metrics.agents.inference import infer_all
from tests.a2a_agent import A2AServer
from tests.judge_server import JudgeServer
from tests.transforms.test_deployed import cases_of
from tests.transforms.test_inference import AGENT_SET

SERVICE_ACCOUNT = "evalbeam-runner@adc-file-project.iam.gserviceaccount.com"
BEARER = "static-bearer-0123456789abcdef"


@pytest.fixture
def adc(tmp_path, monkeypatch):
    with service_account_adc(tmp_path, monkeypatch) as tokens:
        yield tokens


@contextlib.contextmanager
def service_account_adc(tmp_path, monkeypatch):
    """Application Default Credentials: a service account key file (a key made here) whose token_uri is
    the local token endpoint, which trusts it. Yields that endpoint (a JudgeServer: its stats list the
    ID tokens it issued)."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.metrics.judge.test_judge_vertex import service_account_file

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with JudgeServer() as tokens:
        tokens.trust(SERVICE_ACCOUNT, key.public_key())
        path, _ = service_account_file(tmp_path, f"{tokens.url}/token", key)
        info = json.loads(path.read_text())
        path.write_text(json.dumps({**info, "client_email": SERVICE_ACCOUNT}))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
        yield tokens


def guarded(model_url: str, check) -> A2AServer:
    """ADK's to_a2a server behind the credential check `check` (serve_a2a.py's EVALBEAM_TEST_A2A_AUTH), or
    check(url) for one that depends on the server's URL (an ID token's audience)."""
    server = A2AServer(model_url)
    server._env["EVALBEAM_TEST_A2A_AUTH"] = json.dumps(check(server.url) if callable(check) else check)
    return server


def id_token_check(tokens, audience: str, **more) -> dict:
    return {"id_token": {"audience": audience, "certs_url": f"{tokens.url}/oauth2/v1/certs", **more.pop("id", {})},
            **more}


def auth_log(url: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/_evalbeam_auth_log", timeout=10) as response:
        return json.loads(response.read())


def a2a_cases(tmp_path):
    eval_set = copy.deepcopy(AGENT_SET)
    for case in eval_set["eval_cases"]:
        case.pop("session_input", None)  # A2A cannot set a conversation's state
    return cases_of(tmp_path, eval_set)


def over_a2a(url, cases, auth, max_concurrency=4):
    made = []

    def make():
        made.append(Calls(None, 3, 60))
        return A2AInferrer(url, made[-1], max_concurrency, auth)

    return dict(infer_all(make, cases, max_concurrency, 120)), made[0]


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
            calls = Calls(None, 3, 60)
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


def test_wrong_audience_401_and_403_fail_preflight_in_one_line_naming_the_credential(tmp_path, adc, monkeypatch):
    """A token for another audience (401), no credential where the card declares one (401), a wrong static
    bearer token (401), and a valid token of an identity the agent does not allow (403): preflight fails in
    one line that names the credential tried, never its value; the run's cases fail the same way."""
    from tests.helpers import ROOT, evalbeam

    tokens = adc
    monkeypatch.setenv("AGENT_TOKEN", BEARER)
    with JudgeServer() as model:
        # a gateway guarding the agent's endpoint only: the card (and its securitySchemes) can be read
        with guarded(model.url, lambda url: {**id_token_check(tokens, url), "public_card": True}) as url:
            wrong = reachable("a2a", url, auth={"google_id_token": {"audience": "https://elsewhere.example"}})
            assert wrong == (f"inference.a2a: the agent's endpoint {url} answered HTTP 401 to a Google ID token for "
                             f"audience https://elsewhere.example ({SERVICE_ACCOUNT}) from Application Default "
                             "Credentials; its agent card declares securitySchemes: bearer (httpAuth bearer JWT)"), wrong
            assert "audience" in auth_log(url)[-1]["reason"].lower()
            none = reachable("a2a", url)
            assert none.endswith("answered HTTP 401 to no credential (inference.auth is not set); its agent card "
                                 "declares securitySchemes: bearer (httpAuth bearer JWT)"), none
            assert reachable("a2a", url, auth={"google_id_token": {}}) is None  # the right audience passes
            # in a run: every case fails with the same words, none is sent (the gateway refused)
            done, calls = over_a2a(url, a2a_cases(tmp_path)[:2], {"google_id_token": {"audience": "https://elsewhere.example"}})
            errors = {k: v.get("inference_error") for k, v in done.items()}
            assert all(e and "answered HTTP 401 to a Google ID token for audience https://elsewhere.example" in e
                       for e in errors.values()), errors
        with guarded(model.url, {"bearer": "the-right-one"}) as url:
            line = reachable("a2a", url, auth={"bearer_env": "AGENT_TOKEN"})
            assert line == (f"inference.a2a: the agent card at {url}/.well-known/agent-card.json answered HTTP 401 "
                            "to the bearer token in $AGENT_TOKEN"), line
        with guarded(model.url, {"headers": {"X-Api-Key": BEARER}}) as url:
            assert reachable("a2a", url, auth={"headers": {"X-Api-Key": "AGENT_TOKEN"}}) is None
            assert reachable("a2a", url, auth={"headers": {"X-Other": "AGENT_TOKEN"}}).endswith(
                "answered HTTP 401 to the header(s) X-Other (from $AGENT_TOKEN)")
        only_another = {"allowed": ["someone-else@x.iam.gserviceaccount.com"]}
        with guarded(model.url, lambda url: id_token_check(tokens, url, id=only_another)) as url:
            # `evalbeam validate` and `run`: status 2, one line, nothing written
            for command in ("validate", "run"):
                refused = evalbeam(command, ROOT / "configs" / "agent_a2a.yaml", "--set", f"inference.a2a={url}",
                                   "--set", "inference.auth=google_id_token", "--set",
                                   f"output.parquet={tmp_path / 'out'}", check=False)
                assert refused.returncode == 2, refused.stdout + refused.stderr
                last = refused.stderr.strip().splitlines()[-1]
                assert last == (f"evalbeam: inference.a2a: the agent card at {url}/.well-known/agent-card.json "
                                f"answered HTTP 403 to a Google ID token for audience {url} ({SERVICE_ACCOUNT}) from "
                                "Application Default Credentials"), refused.stderr
                assert not (tmp_path / "out").exists()
            assert [e["status"] for e in auth_log(url)][-2:] == [403, 403]  # (before: the readiness probe)
    for token in tokens.stats.issued_id_tokens:
        assert token not in refused.stdout + refused.stderr


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
    assert auth.audience == "http://agent.example/a2a"
    with pytest.raises(Exception, match="are a user's, which cannot mint an ID token for another audience"):
        auth.headers()
    line = reachable("a2a", "http://agent.example/a2a", auth={"google_id_token": {}})
    assert line.startswith("inference.auth.google_id_token: no ID token for audience http://agent.example/a2a "
                           "(DefaultCredentialsError: the Application Default Credentials at ")


def test_auth_config():
    from evalbeam.configs import InferenceConfig

    assert InferenceConfig(a2a="http://a", auth="google_id_token").auth.plain() == {"google_id_token": {}}
    assert InferenceConfig(a2a="http://a", auth={"google_id_token": None}).auth.plain() == {"google_id_token": {}}
    assert InferenceConfig(a2a="http://a", auth={"google_id_token": {"audience": "https://x"}}).auth.plain() == {
        "google_id_token": {"audience": "https://x"}}
    assert InferenceConfig(a2a="http://a", auth={"bearer_env": "T"}).auth.plain() == {"bearer_env": "T"}
    assert InferenceConfig(a2a="http://a", auth={"headers": {"X-Key": "K"}}).auth.plain() == {"headers": {"X-Key": "K"}}
    for bad, reason in [({"auth": {"bearer_env": "T", "headers": {"X": "Y"}}}, "exactly one of"),
                        ({"auth": {}}, "exactly one of"),
                        ({"auth": {"bearer_env": "not a name"}}, "should match pattern"),
                        ({"auth": {"headers": {"X-Key": "secret value!"}}}, "is not an environment variable name"),
                        ({"auth": {"headers": {"Bad Header": "K"}}}, "is not an HTTP header name"),
                        ({"auth": {"token": "abc"}}, "Extra inputs"),
                        ({"a2a": None, "function": "a.b:c", "auth": "google_id_token"}, "inference.auth is for inference.a2a")]:
        with pytest.raises(Exception, match=reason):
            InferenceConfig(**{"a2a": "http://a", **bad})



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

    from evalbeam.metrics.agents.deployed import id_token_credentials

    credentials = id_token_credentials("https://agent.example", google.auth.transport.requests.Request())
    assert isinstance(credentials, impersonated_credentials.IDTokenCredentials)
    assert credentials._target_credentials.service_account_email == "agent-caller@p.iam.gserviceaccount.com"


def test_security_schemes_of_a2a_1_0_and_0_3_cards_in_words():
    from evalbeam.metrics.agents.deployed import security_schemes

    v1 = {"securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "bearer", "bearerFormat": "JWT"}},
                              "key": {"apiKeySecurityScheme": {"name": "X-Api-Key", "location": "header"}},
                              "oidc": {"openIdConnectSecurityScheme": {"openIdConnectUrl": "https://x"}}}}
    assert security_schemes(v1) == "bearer (httpAuth bearer JWT), key (apiKey X-Api-Key header), oidc (openIdConnect)"
    v03 = {"securitySchemes": {"gcp": {"type": "http", "scheme": "bearer"}, "key": {"type": "apiKey", "name": "k",
                                                                                   "in": "header"}}}
    assert security_schemes(v03) == "gcp (http bearer), key (apiKey k header)"
    assert security_schemes({"name": "open"}) == security_schemes({"securitySchemes": {}}) == ""
