"""An A2A agent card and the origins it names (httpx only, no Beam): where inference.a2a's card is, the
endpoints the card names for the agent, whether one is at another origin than inference.a2a's (where
inference.auth's credential is never sent), and the securitySchemes it declares, in words."""
from __future__ import annotations

from typing import Any

CARD_PATH = ".well-known/agent-card.json"  # a2a-sdk's AGENT_CARD_WELL_KNOWN_PATH
DEFAULT_PORTS = {"http": 80, "https": 443}


def a2a_card(url: str) -> tuple[str, str]:
    """inference.a2a -> (the agent's base URL, its card's path under it). The agent's URL (with or
    without a trailing slash, under a path or not): its card at <url>/.well-known/agent-card.json.
    A URL ending in .json is the card's own (pasted from a browser, or an A2A 0.2 server's
    /.well-known/agent.json)."""
    url = url.rstrip("/")
    if not url.endswith(".json"):
        return url, CARD_PATH
    if "/.well-known/" in url:
        base, _, rest = url.rpartition("/.well-known/")
        return base, ".well-known/" + rest
    base, _, name = url.rpartition("/")
    return base, name


def origin(url: Any) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a URL, the port given even when it is the scheme's default: the origin a
    credential is sent to (RFC 6454)."""
    import httpx

    url = httpx.URL(str(url))
    return url.scheme, url.host, url.port or DEFAULT_PORTS.get(url.scheme)


def origin_url(url: str) -> str:
    """scheme://host[:port] of a URL (its port only when not the scheme's default): a Cloud Run service's URL."""
    scheme, host, port = origin(url)
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port != DEFAULT_PORTS.get(scheme) else "")


def card_endpoints(card: Any) -> list[str]:
    """The http(s) URLs an agent card (JSON) names for the agent's interfaces (A2A 1.0's supportedInterfaces,
    0.3's url and additionalInterfaces), in the card's order."""
    if not isinstance(card, dict):
        return []
    named = [i.get("url") for key in ("supportedInterfaces", "additionalInterfaces")
             for i in card.get(key) or [] if isinstance(i, dict)] + [card.get("url")]
    return list(dict.fromkeys(u for u in named if isinstance(u, str) and u.startswith(("http://", "https://"))))


def foreign_endpoint(card: Any, target: str) -> str | None:
    """With inference.auth: why the agent card cannot be used, in words, when it names an endpoint at another
    origin than inference.a2a's (the credential is sent to that origin only, so the agent could not be
    called; and a stale or hostile card must not collect it), else None."""
    import httpx

    ours = origin(target)
    for endpoint in card_endpoints(card):
        try:
            theirs = origin(endpoint)
        except httpx.InvalidURL:
            theirs = None
        if theirs == ours:
            continue
        if theirs and ours[0] == "https" and theirs[0] == "http":
            why = "over plain http, where inference.a2a is https: inference.auth's credential is never sent over http"
        else:
            which = "port" if theirs and theirs[:2] == ours[:2] else "host"
            why = (f"another {which} than inference.a2a ({origin_url(target)}): inference.auth's credential is sent "
                   "to inference.a2a's origin only")
        return f"names {endpoint} as the agent's endpoint, {why}; serve the agent with the URL it is reached at in its card"
    return None


def security_schemes(card: Any) -> str:
    """The securitySchemes an agent card (JSON) declares, in words: 'bearer (http bearer JWT)', or ''."""
    schemes = card.get("securitySchemes") if isinstance(card, dict) else None
    if not isinstance(schemes, dict) or not schemes:
        return ""
    described = []
    for name, scheme in schemes.items():
        if not isinstance(scheme, dict):
            continue
        if "type" not in scheme and len(scheme) == 1:  # A2A 1.0's JSON: {httpAuthSecurityScheme: {...}}
            kind, scheme = next(iter(scheme.items()))
            kind = kind.removesuffix("SecurityScheme")
            scheme = scheme if isinstance(scheme, dict) else {}
        else:  # A2A 0.3's (OpenAPI's): {type: http, scheme: bearer}
            kind = scheme.get("type", "?")
        details = " ".join(str(scheme[k]) for k in ("scheme", "bearerFormat", "name", "location", "in")
                           if scheme.get(k))
        described.append(f"{name} ({kind}{' ' + details if details else ''})")
    return ", ".join(described)
