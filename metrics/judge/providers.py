"""The model APIs behind the one judge layer: one small class per judge.provider, each
calling its provider's official client (google-genai, openai, anthropic) for one answer.

metrics.judge.client.JudgeClient does everything else the same way for all of them: the
quota, retries (on 429 with its Retry-After, 408, 5xx, timeouts, transport errors and
malformed answers), hedging, accounting. A provider only
    - builds its client (API key from the settings' api_key_env variable, or ADC on Vertex AI),
      with the client's own retries off (the layer's are paced by the limiter);
    - asks for an answer in the request's JSON schema its own way (Gemini: response_schema;
      OpenAI: response_format json_schema; Anthropic: a tool the model must call);
    - returns the answer's text and tokens (Reply), or raises ProviderError for an HTTP error,
      with the status and Retry-After;
    - knows its secrets, for `scrub`.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import re
import os
from typing import Any

from evalbeam.metrics.judge.settings import JudgeSettings
from evalbeam.metrics.retry import retry_after

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# The tool an Anthropic judge answers through (its input is the answer), and the name
# OpenAI's json_schema response format gives the schema.
ANSWER_TOOL = "record_judgment"
# Anthropic requires max_tokens; used when judge.max_output_tokens is null
ANTHROPIC_MAX_TOKENS = 4096
# a server that takes no key (vLLM, Ollama) still gets one from the openai client: this
NO_KEY = "unused"


class JudgeCredentialsError(RuntimeError):
    """No usable credentials for the configured provider; the message says what to set."""


@dataclasses.dataclass
class Reply:
    text: str | None  # the answer: JSON of the request's schema, or free text
    prompt_tokens: int = 0
    output_tokens: int = 0


class ProviderError(Exception):
    """An HTTP error from a provider's API: status code, message, seconds to Retry-After."""

    def __init__(self, code: int, message: str, retry_after: float | None = None):
        super().__init__(f"HTTP {code}: {message}")
        self.code, self.message, self.retry_after = code, message, retry_after


def json_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A response schema as the judge templates write it (Gemini's OpenAPI subset: upper-case
    types, propertyOrdering, nullable) -> (standard JSON Schema, whether it fits OpenAI's strict
    mode: every object's properties all required; those objects get additionalProperties false)."""
    strict = True

    def convert(node):
        nonlocal strict
        if isinstance(node, list):
            return [convert(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key == "propertyOrdering":
                continue
            if key == "type" and isinstance(value, str):
                out["type"] = value.lower()
            elif key == "properties":
                out["properties"] = {name: convert(sub) for name, sub in value.items()}
            elif key == "nullable":
                continue
            else:
                out[key] = convert(value)
        if node.get("nullable") and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if out.get("type") == "object" and "properties" in out:
            if set(out.get("required", [])) == set(out["properties"]):
                out["additionalProperties"] = False
            else:
                strict = False
        return out

    converted = convert(copy.deepcopy(schema))
    return converted, strict


def api_key(settings: JudgeSettings) -> str | None:
    return os.environ.get(settings.api_key_env) or None


def check_credentials(settings: JudgeSettings) -> None:
    """Raise JudgeCredentialsError, saying what to set, if the judge cannot authenticate."""
    # gemini's words are those of the releases before providers (scripts may match them)
    who = "" if settings.provider == "gemini" else f"judge.provider {settings.provider} ({settings.model}): "
    if settings.backend == "vertex_ai":
        if not settings.project or not settings.location:
            raise JudgeCredentialsError(f"{who}judge.backend vertex_ai needs judge.project and judge.location")
        try:
            import google.auth  # start-up time: google-auth only when a judge runs

            google.auth.default()
        except Exception as e:  # noqa: BLE001 - any failure means no usable credentials
            raise JudgeCredentialsError(
                f"{who}judge.backend vertex_ai needs Application Default Credentials: run "
                "`gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS "
                f"({type(e).__name__})"
            ) from None
        return
    if api_key(settings):
        return
    if settings.provider == "openai_compatible" and settings.base_url:
        return  # a self-hosted server may take no key
    hint = {"gemini": " (or set judge.backend: vertex_ai to use Application Default Credentials)",
            "anthropic": " (or set judge.backend: vertex_ai for Claude on Vertex AI)",
            "openai_compatible": " (a server at judge.base_url that takes no key needs none)"}[settings.provider]
    raise JudgeCredentialsError(f"{who}judge metrics with backend {settings.backend} need an API key: set the "
                                f"environment variable {settings.api_key_env}{hint}")


def vertex_credentials():
    """Application Default Credentials, held by the caller so that scrub knows the bearer tokens sent."""
    import google.auth  # start-up time: google-auth only when a judge runs

    credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    return remember_tokens(credentials)


_HELD = "_evalbeam_tokens_held"


def remember_tokens(credentials):
    """The credentials, keeping every token they hold from now on (on themselves, for tokens_held): a
    response may repeat the token of its request after another call at once refreshed it, so scrub
    removes each token sent, not only the current one. Credentials whose refresh cannot be wrapped
    keep the current token and the patterns of scrub_secrets."""
    if credentials is None or hasattr(credentials, _HELD):
        return credentials
    held: set[str] = set()
    refresh = credentials.refresh

    def refresh_and_remember(request):
        refresh(request)
        if credentials.token:
            held.add(credentials.token)

    try:
        setattr(credentials, _HELD, held)
        credentials.refresh = refresh_and_remember
    except AttributeError:  # a credentials class with __slots__
        return credentials
    if getattr(credentials, "token", None):
        held.add(credentials.token)
    return credentials


def tokens_held(credentials) -> tuple[str, ...]:
    """The credentials' current token and every one remember_tokens kept."""
    if credentials is None:
        return ()
    return (getattr(credentials, "token", None) or "", *getattr(credentials, _HELD, ()))


# What a Google bearer token looks like, should one not be known here (a token minted by a library's
# own refresh): an OAuth access token (ya29.), an ID token or any JWT (three base64url parts, eyJ...).
TOKEN_PATTERN = re.compile(r"\bya29\.[0-9A-Za-z_.\-]+|\beyJ[0-9A-Za-z_\-]+\.[0-9A-Za-z_\-]+\.[0-9A-Za-z_\-]*")


def build_genai_client(settings: JudgeSettings, http):
    """(google-genai Client, the API key or None, the ADC credentials or None) for
    the configured backend; the key and the credentials' token are what scrub removes."""
    from google import genai  # start-up time: google-genai only when a judge runs

    if settings.backend == "gemini_api":
        secret = os.environ[settings.api_key_env]
        return genai.Client(api_key=secret, http_options=http), secret, None
    credentials = vertex_credentials()
    client = genai.Client(vertexai=True, project=settings.project, location=settings.location,
                          credentials=credentials, http_options=http)
    return client, None, credentials


def scrub_secrets(text: str, secret: str | None, credentials, *more: str) -> str:
    """The text with the API key, every token the credentials held (tokens_held) and any `more` secrets
    (a deployed agent's bearer token or header values: metrics.agents.auth.A2AAuth) replaced by
    [redacted], the longest first (a secret containing another is removed whole); then anything
    shaped like a Google bearer token (TOKEN_PATTERN)."""
    for value in sorted({secret, *tokens_held(credentials), *more} - {None}, key=lambda v: -len(v)):
        if value and value != NO_KEY:
            text = text.replace(value, "[redacted]")
    return TOKEN_PATTERN.sub("[redacted]", text)


class Provider:
    """One judge's API: `generate` one answer; `scrub` its secrets from a text."""

    _secret: str | None = None
    _credentials: Any = None

    def scrub(self, text: str) -> str:
        return scrub_secrets(text, self._secret, self._credentials)

    async def generate(self, request) -> Reply:  # request: metrics.judge.client.JudgeRequest
        raise NotImplementedError

    async def close(self) -> None:
        pass


class GeminiProvider(Provider):
    """Gemini API or Vertex AI, through google-genai: generateContent with response_schema."""

    def __init__(self, settings: JudgeSettings):
        from google.genai import types  # start-up time: google-genai only when a judge runs

        self.settings, self._types = settings, types
        http = types.HttpOptions(
            base_url=settings.base_url,
            timeout=int(settings.timeout_seconds * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),  # retries are the layer's, with the limiter's feedback
        )
        self._client, self._secret, self._credentials = build_genai_client(settings, http)

    async def generate(self, request) -> Reply:
        from google.genai import errors  # start-up time: google-genai only when a judge runs

        config = self._types.GenerateContentConfig(
            temperature=self.settings.temperature, seed=request.seed,
            max_output_tokens=self.settings.max_output_tokens, **structured_output(request))
        try:
            answer = await self._client.aio.models.generate_content(
                model=self.settings.model, contents=request.prompt, config=config)
        except errors.APIError as e:
            headers = getattr(getattr(e, "response", None), "headers", None)
            raise ProviderError(e.code, e.message or e.status or "error", retry_after(headers)) from None
        usage = answer.usage_metadata
        return Reply(answer.text, (usage.prompt_token_count or 0) if usage else 0,
                     (usage.candidates_token_count or 0) if usage else 0)

    async def close(self) -> None:
        await self._client.aio.aclose()


def structured_output(request) -> dict[str, Any]:
    """The GenerateContentConfig fields asking for JSON of the request's schema (none for free text)."""
    if not request.schema_json:
        return {}
    return {"response_mime_type": "application/json", "response_schema": json.loads(request.schema_json)}


class OpenAIProvider(Provider):
    """OpenAI's Chat Completions API, or a server speaking it (vLLM, TGI, Ollama) at base_url,
    through the `openai` client: the schema as response_format json_schema (strict when it allows)."""

    def __init__(self, settings: JudgeSettings):
        import openai  # start-up time: openai only when such a judge runs

        self.settings, self._openai = settings, openai
        self._secret = api_key(settings)
        self._client = openai.AsyncOpenAI(api_key=self._secret or NO_KEY, base_url=settings.base_url,
                                          timeout=settings.timeout_seconds, max_retries=0)

    async def generate(self, request) -> Reply:
        openai, settings = self._openai, self.settings
        try:
            completion = await self._client.chat.completions.create(**openai_params(settings, request))
        except openai.APIStatusError as e:
            raise ProviderError(e.status_code, _message(e), retry_after(e.response.headers)) from None
        except openai.APITimeoutError:
            raise TimeoutError(f"no answer within {settings.timeout_seconds:g}s") from None
        return openai_reply(completion)

    async def close(self) -> None:
        await self._client.close()


class AnthropicProvider(Provider):
    """The Anthropic Messages API, or Claude on Vertex AI (backend vertex_ai), through the
    `anthropic` client: the schema as the input schema of a tool the model is told to call."""

    def __init__(self, settings: JudgeSettings):
        import anthropic  # start-up time: anthropic only when such a judge runs

        self.settings, self._anthropic = settings, anthropic
        common = dict(timeout=settings.timeout_seconds, max_retries=0, base_url=settings.base_url)
        if settings.backend == "vertex_ai":
            self._credentials = vertex_credentials()
            self._client = anthropic.AsyncAnthropicVertex(
                project_id=settings.project, region=settings.location, credentials=self._credentials, **common)
        else:
            self._secret = os.environ[settings.api_key_env]
            self._client = anthropic.AsyncAnthropic(api_key=self._secret, **common)

    async def generate(self, request) -> Reply:
        anthropic, settings = self._anthropic, self.settings
        try:
            message = await self._client.messages.create(**anthropic_params(settings, request))
        except anthropic.APIStatusError as e:
            raise ProviderError(e.status_code, _message(e), retry_after(e.response.headers)) from None
        except anthropic.APITimeoutError:
            raise TimeoutError(f"no answer within {settings.timeout_seconds:g}s") from None
        return anthropic_reply(message, request)

    async def close(self) -> None:
        await self._client.close()


def openai_params(settings: JudgeSettings, request) -> dict[str, Any]:
    """A Chat Completions request (chat.completions.create's arguments, a batch line's body): the
    schema as response_format json_schema, strict when every field is required."""
    params: dict[str, Any] = {"model": settings.model, "messages": [{"role": "user", "content": request.prompt}],
                              "temperature": settings.temperature}
    if request.schema_json:
        schema, strict = json_schema(json.loads(request.schema_json))
        params["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": ANSWER_TOOL, "schema": schema, "strict": strict}}
    if request.seed is not None:
        params["seed"] = request.seed
    if settings.max_output_tokens is not None:
        # max_tokens, not max_completion_tokens: the one every OpenAI-compatible server takes
        # (OpenAI's reasoning models refuse it: max_output_tokens null leaves it out)
        params["max_tokens"] = settings.max_output_tokens
    return params


def openai_reply(completion) -> Reply:
    """A ChatCompletion -> its answer and tokens (a refusal is not an answer of the schema: retried)."""
    usage = completion.usage
    tokens = ((usage.prompt_tokens or 0), (usage.completion_tokens or 0)) if usage else (0, 0)
    message = completion.choices[0].message if completion.choices else None
    if message is not None and getattr(message, "refusal", None):
        return Reply(f"refused: {message.refusal}", *tokens)
    return Reply(message.content if message else None, *tokens)


def anthropic_params(settings: JudgeSettings, request) -> dict[str, Any]:
    """A Messages API request (messages.create's arguments, a batch request's params): the
    schema as the input schema of a tool the model must call. No temperature: the Messages API
    of anthropic 2.10 takes no sampling parameters."""
    params: dict[str, Any] = {"model": settings.model, "max_tokens": settings.max_output_tokens or ANTHROPIC_MAX_TOKENS,
                              "messages": [{"role": "user", "content": request.prompt}]}
    if request.schema_json:
        schema, _ = json_schema(json.loads(request.schema_json))
        params["tools"] = [{"name": ANSWER_TOOL, "description": "Record the judgment, in the fields asked for.",
                            "input_schema": schema}]
        params["tool_choice"] = {"type": "tool", "name": ANSWER_TOOL}
    return params


def anthropic_reply(message, request) -> Reply:
    """A Message -> its answer: the tool's input as JSON, else its text (free text, or a model
    that answered in text instead of calling the tool: not JSON of the schema, so an invalid
    judgment, retried), with the tokens."""
    usage = message.usage
    tokens = ((usage.input_tokens or 0), (usage.output_tokens or 0)) if usage else (0, 0)
    if request.schema_json:
        called = [b for b in message.content if b.type == "tool_use" and b.name == ANSWER_TOOL]
        if called:
            return Reply(json.dumps(called[0].input, ensure_ascii=False), *tokens)
    return Reply("".join(b.text for b in message.content if b.type == "text"), *tokens)


def _message(error) -> str:
    """An official client's APIStatusError -> the API's own message (the body's error.message)."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(getattr(error, "message", None) or type(error).__name__)


PROVIDERS = {"gemini": GeminiProvider, "openai_compatible": OpenAIProvider, "anthropic": AnthropicProvider}


def provider_for(settings: JudgeSettings) -> Provider:
    """The API client of this judge's provider (credentials checked first)."""
    check_credentials(settings)
    return PROVIDERS[settings.provider](settings)
