"""Preflight's check of a deployed agent (no Beam): whether its endpoint answers, before any work, in one
line saying why not. A2A: the agent card, read with inference.auth's credential, and the endpoint it names
(at inference.a2a's origin when a credential is set); Agent Engine: the regional endpoint, and Application
Default Credentials."""
from __future__ import annotations

from typing import Any

from evalbeam.metrics.agents.a2a_card import a2a_card, foreign_endpoint, security_schemes
from evalbeam.metrics.agents.agent_engine import engine_endpoint
from evalbeam.metrics.agents.auth import REFUSED_STATUS, A2AAuth, AuthUnavailable
from evalbeam.metrics.judge.providers import CLOUD_PLATFORM_SCOPE


def reachable(kind: str, target: str, base_url: str | None = None, timeout: float = 10.0,
              auth: dict[str, Any] | None = None) -> str | None:
    """None when the endpoint answers, else one line saying why not (preflight). a2a: with inference.auth's
    credential (auth: its plain data), whose refusal (401, 403) is a line naming the credential tried."""
    import httpx

    if kind == "a2a":
        try:
            credential = A2AAuth(auth, target) if auth else None
            if credential is not None:
                credential.headers()  # a token can be had (not sent: httpx asks for it per request)
        except AuthUnavailable as e:
            return str(e)
        tried = credential.describe() if credential is not None else "no credential (inference.auth is not set)"
        scrub = credential.scrub if credential is not None else (lambda text: text)
        client = httpx.Client(timeout=timeout, auth=credential.for_httpx() if credential is not None else None)
        with client:
            return scrub(_a2a_reachable(client, target, tried, credential is not None) or "") or None
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    endpoint = engine_endpoint(target, base_url)
    try:
        httpx.get(endpoint, timeout=timeout)  # any HTTP answer: the host is there (the calls need credentials)
    except httpx.HTTPError as e:
        return f"inference.agent_engine: {endpoint} is unreachable ({type(e).__name__}: {str(e)[:200]})"
    try:
        google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except DefaultCredentialsError as e:
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        return f"inference.agent_engine: no Application Default Credentials ({first}); see docs/agents.md"
    return None


def _a2a_reachable(client, target: str, tried: str, authenticated: bool = False) -> str | None:
    import httpx

    url = "/".join(a2a_card(target))
    try:
        response = client.get(url)
    except httpx.HTTPError as e:
        return f"inference.a2a: the agent card at {url} is unreachable ({type(e).__name__}: {str(e)[:200]})"
    if response.status_code in REFUSED_STATUS:
        return f"inference.a2a: the agent card at {url} answered HTTP {response.status_code} to {tried}"
    if response.status_code != 200:
        return f"inference.a2a: the agent card at {url} answered HTTP {response.status_code}"
    # the card names the agent's endpoint, which the client then calls: often the address the agent
    # was started with (0.0.0.0, localhost in a container), not the one it is reached at
    try:
        card = response.json()
        named = [i.get("url") for i in card.get("supportedInterfaces") or [] if isinstance(i, dict)] or [card.get("url")]
    except (ValueError, AttributeError):
        return f"inference.a2a: the agent card at {url} is not a JSON agent card"
    foreign = foreign_endpoint(card, target) if authenticated else None
    if foreign:  # checked before the endpoint is called: it would be called without the credential
        return f"inference.a2a: the agent card at {url} {foreign}"
    endpoint = next((u for u in named if isinstance(u, str) and u.startswith(("http://", "https://"))), None)
    if endpoint is not None:
        try:
            answer = client.get(endpoint)  # any HTTP answer but a refusal: it is there, and takes the credential
        except httpx.ReadTimeout:
            return None  # connected: an endpoint may leave a GET unanswered (its messages are POSTs)
        except httpx.HTTPError as e:
            return (f"inference.a2a: the agent card at {url} names {endpoint} as the agent's endpoint, which is "
                    f"unreachable ({type(e).__name__}: {str(e)[:200]}); serve the agent with the URL it is "
                    "reached at in its card")
        if answer.status_code in REFUSED_STATUS:
            schemes = security_schemes(card)
            return (f"inference.a2a: the agent's endpoint {endpoint} answered HTTP {answer.status_code} to {tried}"
                    + (f"; its agent card declares securitySchemes: {schemes}" if schemes else ""))
    return None
