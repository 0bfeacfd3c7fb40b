"""An A2A agent card (metrics/agents/a2a_card.py): the securitySchemes it declares, in words. (Its origins:
tests/metrics/agents/test_auth.py, where the credential is sent; its URL forms: test_a2a.py.)"""
from __future__ import annotations


def test_security_schemes_of_a2a_1_0_and_0_3_cards_in_words():
    from evalbeam.metrics.agents.a2a_card import security_schemes

    v1 = {"securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "bearer", "bearerFormat": "JWT"}},
                              "key": {"apiKeySecurityScheme": {"name": "X-Api-Key", "location": "header"}},
                              "oidc": {"openIdConnectSecurityScheme": {"openIdConnectUrl": "https://x"}}}}
    assert security_schemes(v1) == "bearer (httpAuth bearer JWT), key (apiKey X-Api-Key header), oidc (openIdConnect)"
    v03 = {"securitySchemes": {"gcp": {"type": "http", "scheme": "bearer"}, "key": {"type": "apiKey", "name": "k",
                                                                                   "in": "header"}}}
    assert security_schemes(v03) == "gcp (http bearer), key (apiKey k header)"
    assert security_schemes({"name": "open"}) == security_schemes({"securitySchemes": {}}) == ""
