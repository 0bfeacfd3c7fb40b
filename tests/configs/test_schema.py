"""The config model (configs/schema.py): inference's blocks for deployed agents (inference.a2a,
inference.agent_engine, inference.auth), their checks and their error messages."""
from __future__ import annotations

import pytest

from tests.agent_cases import ENGINE


def test_inference_config_for_deployed_agents():
    from evalbeam.configs import InferenceConfig

    a2a = InferenceConfig(a2a="http://agent:8000", requests_per_minute=120, shards=4)
    assert a2a.kind == "a2a" and a2a.deployed and a2a.quota_share() == 30
    engine = InferenceConfig(agent_engine=ENGINE, base_url="http://127.0.0.1:1")
    assert engine.kind == "agent_engine" and engine.quota_share() is None
    for bad, reason in [({"a2a": "agent:8000"}, "should match pattern"),
                        ({"agent_engine": "projects/p/reasoningEngines/1"}, "should match pattern"),
                        ({"a2a": "http://a", "agent_engine": ENGINE}, "exactly one of"),
                        ({"a2a": "http://a", "base_url": "http://b"}, "base_url is for inference.agent_engine")]:
        with pytest.raises(Exception, match=reason):
            InferenceConfig(**bad)


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


def test_a2a_url_with_credentials_is_refused_before_they_are_recorded():
    """user:password@ in inference.a2a would be sent only to the card (the messages go to the endpoint the
    card names, without them) and would be written with the config to the runs table: refused, without
    echoing the password."""
    import pydantic

    from evalbeam.configs import InferenceConfig, format_errors

    with pytest.raises(pydantic.ValidationError) as refused:
        InferenceConfig(a2a="https://evaluator:s3cr3t-token@agent.example.com/")
    shown = format_errors(refused.value)  # what `evalbeam validate/run` print
    assert "a2a: credentials in the URL are not supported" in shown and "s3cr3t-token" not in shown, shown
    assert InferenceConfig(a2a="https://agent.example.com/a@b").a2a  # an @ in the path is no credential
