"""Serve an ADK agent over A2A with ADK's own `to_a2a` (google-adk 2.13.0 with its a2a extra), in the
agent venv (.agent/): python serve_a2a.py AGENT PORT. AGENT is 'package.module:agent' (its model: the local
Gemini-protocol server at $EVALBEAM_TEST_MODEL_URL, tests/inference_agent.py). Prints 'ready' once the
agent card is served; stops on SIGTERM.

$EVALBEAM_TEST_A2A_AUTH (JSON), when set, puts the app behind a check of every request's credential, as
Cloud Run's IAM or a gateway does (to_a2a itself enforces none), and declares it in the card's
securitySchemes:
    {"id_token": {"audience": A, "certs_url": U, "allowed": [email, ...]}}
        `Authorization: Bearer <ID token>` verified by google-auth's own verifier
        (google.oauth2.id_token.verify_token: RS256 signature against the certificates at U, audience A,
        expiry, no clock skew): else 401; a valid token of an identity not in `allowed` (when given): 403
    {"bearer": TOKEN}                 `Authorization: Bearer TOKEN`, else 401
    {"headers": {NAME: VALUE, ...}}   every header with its value, else 401
    "public_card": true               the agent card is served without a credential (a gateway guarding
                                      only the agent's endpoint)
GET /_evalbeam_auth_log (never guarded) answers what the check decided, request by request:
[{"path", "status", "reason", "aud", "exp", "email"}], never a credential."""
import json
import os
import sys

import uvicorn
from google.adk.a2a.utils.agent_to_a2a import to_a2a

from evalbeam.metrics.agents.inference import load_target

LOG_PATH = "/_evalbeam_auth_log"
CARD_PATH = "/.well-known/agent-card.json"


class CredentialCheck:
    """A pure ASGI middleware (streams pass through untouched) refusing requests without the credential."""

    def __init__(self, app, auth: dict):
        self.app, self.auth, self.log = app, auth, []

    def decide(self, headers: dict) -> tuple[int, str, dict]:
        """-> (status: 200 to let through, 401 or 403; the reason; the verified claims)."""
        authorization = headers.get("authorization", "")
        bearer = authorization[len("Bearer "):] if authorization.startswith("Bearer ") else None
        if "id_token" in self.auth:
            import google.auth.transport.requests
            from google.oauth2 import id_token

            wanted = self.auth["id_token"]
            if bearer is None:
                return 401, "no bearer token", {}
            try:
                claims = id_token.verify_token(bearer, google.auth.transport.requests.Request(),
                                               audience=wanted["audience"], certs_url=wanted["certs_url"])
            except Exception as e:  # noqa: BLE001 - google-auth's reasons: signature, audience, expiry
                return 401, f"{type(e).__name__}: {str(e).split(':')[0]}", {}
            if wanted.get("allowed") and claims.get("email") not in wanted["allowed"]:
                return 403, "identity not allowed", claims
            return 200, "ok", claims
        if "bearer" in self.auth:
            return (200, "ok", {}) if bearer == self.auth["bearer"] else (401, "wrong bearer token", {})
        missing = [n for n, v in self.auth.get("headers", {}).items() if headers.get(n.lower()) != v]
        return (401, f"wrong or missing {missing}", {}) if missing else (200, "ok", {})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == LOG_PATH:
            return await self._answer(send, 200, json.dumps(self.log).encode())
        if scope["path"] == CARD_PATH and self.auth.get("public_card"):
            return await self.app(scope, receive, send)
        from starlette.concurrency import run_in_threadpool

        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        status, reason, claims = await run_in_threadpool(self.decide, headers)
        self.log.append({"path": scope["path"], "status": status, "reason": reason, "aud": claims.get("aud"),
                         "exp": claims.get("exp"), "email": claims.get("email")})
        if status != 200:
            return await self._answer(send, status, json.dumps({"error": reason}).encode())
        return await self.app(scope, receive, send)

    @staticmethod
    async def _answer(send, status: int, body: bytes):
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


agent_path, port = sys.argv[1], int(sys.argv[2])
auth = json.loads(os.environ.get("EVALBEAM_TEST_A2A_AUTH") or "null")
schemes = None
if auth:
    from a2a.types import APIKeySecurityScheme, HTTPAuthSecurityScheme, SecurityScheme

    if "headers" in auth:
        schemes = {name: SecurityScheme(api_key_security_scheme=APIKeySecurityScheme(name=name, location="header"))
                   for name in auth["headers"]}
    else:
        schemes = {"bearer": SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="bearer", bearer_format="JWT" if "id_token" in auth else ""))}
app = to_a2a(load_target(agent_path, "agent"), host="127.0.0.1", port=port, security_schemes=schemes)
if auth:
    app = CredentialCheck(app, auth)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
