"""Real Google credentials for the tests, made here: a service account key file (Application Default
Credentials) whose token_uri is the local token endpoint (tests/servers/judge_server.py), which trusts the
key and answers the JWT-bearer grant with an access token or an ID token as Google's does; and ADK's
`to_a2a` server (tests/agent_env/serve_a2a.py) behind a check of every request's credential."""
from __future__ import annotations

import contextlib
import json
import urllib.request

from cryptography.hazmat.primitives import serialization

from tests.servers.a2a_agent import A2AServer

CLIENT_EMAIL = "judge@adc-file-project.iam.gserviceaccount.com"
SERVICE_ACCOUNT = "evalbeam-runner@adc-file-project.iam.gserviceaccount.com"
BEARER = "static-bearer-0123456789abcdef"  # a static credential of inference.auth (bearer_env, headers)


def service_account_file(tmp_path, token_uri, key):
    """An ADC service account file as the Cloud console issues one, its token_uri the stand-in's."""
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path = tmp_path / "adc.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "adc-file-project",  # not the config's: the config's must win
        "private_key_id": "0123456789abcdef", "private_key": pem.decode(), "client_email": CLIENT_EMAIL,
        "client_id": "123456789012345678901", "token_uri": token_uri,
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
    }))
    return path, pem.decode()


@contextlib.contextmanager
def service_account_adc(tmp_path, monkeypatch):
    """Application Default Credentials: a service account key file (a key made here) whose token_uri is
    the local token endpoint, which trusts it. Yields that endpoint (a JudgeServer: its stats list the
    ID tokens it issued)."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.servers.judge_server import JudgeServer

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
