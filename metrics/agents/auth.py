"""inference.auth for A2A (no Beam): the headers a request to the agent carries (a Google ID token minted
and refreshed by google-auth from Application Default Credentials, a bearer token or headers from
environment variables), sent to the agent's origin only; a refusal (401, 403) in words; and every value of
the credential kept out of errors."""
from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from evalbeam.metrics.agents.a2a_card import a2a_card, origin, origin_url
from evalbeam.metrics.agents.inference import InferenceError
from evalbeam.metrics.judge.providers import scrub_secrets
from evalbeam.metrics.names import looks_like_a_secret

if TYPE_CHECKING:
    from evalbeam.metrics.agents.calls import Calls

REFUSED_STATUS = (401, 403)
MIN_SECRET = 8  # a credential shorter than this is refused: scrubbing it would garble every error ("10.0.0.[redacted]")
ISSUED_KEPT = 256  # the ID tokens of a run kept for scrubbing (one an hour; a refusal may ask for more)


def _variable(name: str) -> str:
    """An environment variable's name for an error, unless it looks like a secret pasted in its place."""
    if looks_like_a_secret(name):
        return f"named there (not shown: its {len(name)} characters look like a secret, not a variable's name)"
    return name


class AuthUnavailable(InferenceError):
    """inference.auth's credential cannot be had here (no ADC, a variable unset); the message says why."""


class A2AAuth:
    """inference.auth (configs.schema.A2AAuthConfig as plain data): the headers A2A requests carry.

        google_id_token  a Google ID token, its audience the agent's origin (scheme://host[:port] of the
                         agent's URL, as Cloud Run expects) unless given, minted by google-auth from
                         Application Default Credentials (a service account key, an impersonated service
                         account, or the metadata server: id_token_credentials) and refreshed by google-auth's
                         own rule (Credentials.before_request: when less than its REFRESH_THRESHOLD, 3 min 45 s,
                         of the token's life is left), so a run longer than a token's hour never sends an
                         expired one; a 401 answered to a token makes it fetch a new one (once for all the
                         requests refused that token) and send the request once more (a refusal: the agent
                         ran nothing)
        bearer_env       `Authorization: Bearer <the variable's value>`
        headers          {NAME: VAR}: each header with its variable's value

    The credential goes only to the agent's origin (scheme, host and port of inference.a2a): never to another
    host an agent card names, never over http when inference.a2a is https. The values are read where the
    requests are sent (the launcher for preflight, each worker for the run), never written to the config; a
    value shorter than MIN_SECRET is refused; `scrub` takes every one of them, and every ID token issued in
    the run, out of a text (errors)."""

    def __init__(self, auth: dict[str, Any], agent_url: str):
        import collections
        import os
        import threading

        self._kind = next(iter(auth))
        self._origin = origin(a2a_card(agent_url)[0])
        self._lock = threading.RLock()  # the cases of a shard share one token, refreshed once
        self._credentials = None
        self._issued: collections.OrderedDict[str, None] = collections.OrderedDict()  # every ID token held
        self._issued_lock = threading.Lock()  # held only to copy or add (scrub must not wait for a token fetch)
        self._static: dict[str, str] = {}
        if self._kind == "google_id_token":
            self.audience = (auth["google_id_token"] or {}).get("audience") or origin_url(a2a_card(agent_url)[0])
        elif self._kind == "bearer_env":
            name = auth["bearer_env"]
            if not os.environ.get(name):
                raise AuthUnavailable(f"inference.auth.bearer_env: the environment variable {_variable(name)} is "
                                      "not set here")
            self._static = {"Authorization": f"Bearer {os.environ[name]}"}
            self._too_short("bearer_env", {name: os.environ[name]})
        else:
            unset = [_variable(env) for env in auth["headers"].values() if not os.environ.get(env)]
            if unset:
                raise AuthUnavailable(f"inference.auth.headers: the environment variable(s) {', '.join(unset)} "
                                      "are not set here")
            self._static = {name: os.environ[env] for name, env in auth["headers"].items()}
            self._too_short("headers", {env: os.environ[env] for env in auth["headers"].values()})
        self._auth = auth

    @staticmethod
    def _too_short(key: str, values: dict[str, str]) -> None:
        short = [name for name, value in values.items() if len(value.strip()) < MIN_SECRET]
        if short:
            which = f"the value of ${short[0]} is" if len(short) == 1 else f"the values of ${', $'.join(short)} are"
            raise AuthUnavailable(f"inference.auth.{key}: {which} shorter than {MIN_SECRET} characters: too short to "
                                  "be a credential, or to be kept out of errors")

    def sends_to(self, url: Any) -> bool:
        """Whether a request to `url` carries the credential: only at the agent's own origin."""
        return origin(url) == self._origin

    def describe(self) -> str:
        """Which credential is sent, in words (never its value)."""
        if self._kind == "google_id_token":
            who = getattr(self._credentials, "service_account_email", None) or \
                getattr(getattr(self._credentials, "_target_credentials", None), "service_account_email", None)
            return f"a Google ID token for audience {self.audience}" + (f" ({who})" if who else "") + \
                " from Application Default Credentials"
        if self._kind == "bearer_env":
            return f"the bearer token in ${self._auth['bearer_env']}"
        return "the header(s) " + ", ".join(f"{n} (from ${v})" for n, v in self._auth["headers"].items())

    def headers(self, refused: str | None = None) -> dict[str, str]:
        """The headers to send (blocking: a token may be fetched). refused: the Authorization header the agent
        answered 401 to: a new token, unless another request refused the same one and already fetched it."""
        if self._kind != "google_id_token":
            return dict(self._static)
        import google.auth.transport.requests
        from google.auth import exceptions

        request = google.auth.transport.requests.Request()
        with self._lock:
            try:
                if self._credentials is None:
                    self._credentials = id_token_credentials(self.audience, request)
                if refused is not None and refused == f"Bearer {self._credentials.token}":
                    self._credentials.refresh(request)
                headers: dict[str, str] = {}
                self._credentials.before_request(request, "POST", self.audience, headers)
            except exceptions.GoogleAuthError as e:
                first = self.scrub(str(e).splitlines()[0][:300]) if str(e) else type(e).__name__
                raise AuthUnavailable(f"inference.auth.google_id_token: no ID token for audience {self.audience} "
                                      f"({type(e).__name__}: {first}); see docs/agents.md") from None
            token = self._credentials.token
            if token:
                with self._issued_lock:
                    self._issued[token] = None
                    self._issued.move_to_end(token)
                    while len(self._issued) > ISSUED_KEPT:
                        self._issued.popitem(last=False)
        return {"Authorization" if k.lower() == "authorization" else k: v for k, v in headers.items()}

    def secrets(self) -> list[str]:
        """Every value to keep out of a text: the static ones, every ID token held in the run (an error may
        quote one since refreshed); each at least MIN_SECRET long (a shorter one is refused)."""
        values = [v.removeprefix("Bearer ") for v in self._static.values()]
        with self._issued_lock:
            values += list(self._issued)
        token = getattr(self._credentials, "token", None)
        values += [token] if token else []
        return [v for v in dict.fromkeys(values) if v and len(v) >= MIN_SECRET]

    def scrub(self, text: str) -> str:
        return scrub_secrets(text, None, None, *self.secrets())

    def for_httpx(self, calls: "Calls | None" = None):
        """An httpx.Auth adding the headers to the requests of an httpx client (a2a-sdk's included) that go to
        the agent's origin, and to no other. calls: the run's Calls, whose quota a request sent again after a
        401 waits for too (as every request does); none in preflight."""
        import httpx

        outer = self

        class Auth(httpx.Auth):
            requires_request_body = True  # a refused request may be sent once more, with a new token

            async def async_auth_flow(self, request):
                if not outer.sends_to(request.url):
                    yield request
                    return
                sent = await asyncio.to_thread(outer.headers)
                request.headers.update(sent)
                response = yield request
                if response.status_code == 401 and outer._kind == "google_id_token":
                    request.headers.update(await asyncio.to_thread(outer.headers, sent.get("Authorization")))
                    if calls is not None:
                        await calls.resend()
                    yield request

            def sync_auth_flow(self, request):
                if not outer.sends_to(request.url):
                    yield request
                    return
                sent = outer.headers()
                request.headers.update(sent)
                response = yield request
                if response.status_code == 401 and outer._kind == "google_id_token":
                    request.headers.update(outer.headers(sent.get("Authorization")))
                    yield request

        return Auth()


def id_token_credentials(audience: str, request):
    """google-auth's ID-token credentials for `audience` from Application Default Credentials, by
    google.oauth2.id_token.fetch_id_token_credentials (GOOGLE_APPLICATION_CREDENTIALS: a service account
    key or an impersonated service account; else the metadata server). That function reads no gcloud ADC
    file, so one made by `gcloud auth application-default login --impersonate-service-account` (the way a
    person gets ID tokens) is loaded here with the same google-auth classes; user credentials themselves
    cannot mint an ID token for another audience: said so, with the ways that can."""
    import os

    from google.auth import _cloud_sdk, environment_vars, exceptions
    from google.oauth2 import id_token

    given = os.environ.get(environment_vars.CREDENTIALS)
    # Private to google-auth, for want of a public way: where gcloud keeps its ADC file (CLOUDSDK_CONFIG or
    # the platform's default). tests/metrics/agents/test_auth.py fails when google-auth changes it.
    path = given or _cloud_sdk.get_application_default_credentials_path()
    try:
        with open(path) as f:
            info = json.load(f)
    except (OSError, ValueError):
        info = {}  # google-auth says what is wrong with a file it was given
    kind = info.get("type") if isinstance(info, dict) else None
    if kind == "authorized_user":
        raise exceptions.DefaultCredentialsError(
            f"the Application Default Credentials at {path} are a user's, which cannot mint an ID token for "
            "another audience: use a service account (its key, or `gcloud auth application-default login "
            "--impersonate-service-account=SA`), or inference.auth.bearer_env with the output of "
            "`gcloud auth print-identity-token`")
    if not given and kind == "impersonated_service_account":
        from google.auth import impersonated_credentials

        target = impersonated_credentials.Credentials.from_impersonated_service_account_info(info)
        return impersonated_credentials.IDTokenCredentials(target, target_audience=audience, include_email=True)
    if not given and kind == "service_account":
        from google.oauth2 import service_account

        return service_account.IDTokenCredentials.from_service_account_info(info, target_audience=audience)
    return id_token.fetch_id_token_credentials(audience, request)


def refused_status(error: BaseException) -> int | None:
    """401 or 403 when the error (or one it was raised from) is the agent refusing the credential."""
    import httpx

    seen = 0
    while error is not None and seen < 10:
        status = error.response.status_code if isinstance(error, httpx.HTTPStatusError) else \
            getattr(error, "status_code", None)
        if status in REFUSED_STATUS:
            return status
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None
