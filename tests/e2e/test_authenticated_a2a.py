"""Authenticated A2A (inference.auth) through preflight and `evalbeam validate` and `run`: a credential the agent
refuses (another audience, none, a wrong bearer token, an identity it does not allow) fails in one line naming
the credential tried, never its value. ADK's own `to_a2a` server behind a check of every request's credential
(tests/credentials.py); the ID tokens minted by google-auth from a service account key file made here."""
from __future__ import annotations

import pytest

from evalbeam.metrics.agents.probe import reachable
from tests.agent_cases import a2a_cases, over_a2a
from tests.credentials import BEARER, SERVICE_ACCOUNT, auth_log, guarded, id_token_check, service_account_adc
from tests.servers.judge_server import JudgeServer


@pytest.fixture
def adc(tmp_path, monkeypatch):
    with service_account_adc(tmp_path, monkeypatch) as tokens:
        yield tokens


@pytest.mark.agent
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
