"""One retry policy for every request evalbeam sends (pure Python: no Beam, no other evalbeam import).

    RetryPolicy          which HTTP statuses are retried (408, 429, 5xx), how long to wait before the
                         next attempt (exponential backoff with full jitter, at least the server's
                         Retry-After), how many attempts a request gets, and optionally a deadline
                         for all of them
    retry_after          the seconds a response asks to wait: retry-after-ms, Retry-After in seconds
                         or as an HTTP date
    Transient            a failure that may pass when the request is sent again
    transient_for_status an HTTP error -> a Transient, or None when it is final
    call_retried         a synchronous call retried by the policy (the batch APIs' requests)

The loops stay in their clients, which ask the policy whether to retry and how long to wait: the judge
client (metrics.judge.client.JudgeClient, which holds the quota, token estimates, parsing and hedged
copies, and through which the user simulator's model calls go), the deployed agents' requests
(metrics.agents.calls.Calls, which never sends again a request the agent may have run) and batch mode
(metrics.judge.batch: google-genai's own retries configured from the policy; the anthropic and openai
clients' requests through `call_retried`).
"""
from __future__ import annotations

import dataclasses
import email.utils
import random
import time
from typing import Any, Callable, TypeVar

T = TypeVar("T")
# 408 (request timeout), 429 (rate limited) and every 5xx (Anthropic's 529 "overloaded" included): an
# answer that may differ when the request is sent again. Any other status is final.
RETRYABLE_STATUSES = (408, 429, *range(500, 600))


def retryable_status(status: int | None) -> bool:
    return status in RETRYABLE_STATUSES


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """When to retry a request and how long to wait.

    Every retry also waits for its place with the rate limiter of its client (paced within the quota,
    paused by a 429's Retry-After), so the backoff only spreads retries after transient errors: its base
    is short, as a long first wait idles the quota at the end of a run, where the last retries are."""

    max_attempts: int = 6  # attempts in all, the first included
    base: float = 0.25  # seconds: the first retry waits U(0, base); each later one's bound doubles
    cap: float = 60.0  # the bound's ceiling
    deadline: float | None = None  # seconds from the first attempt within which a retry may start; None: no limit

    def __post_init__(self):
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {self.max_attempts}")

    def retryable(self, status: int | None) -> bool:
        return retryable_status(status)

    def backoff(self, attempt: int, rng: Any = random) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based): exponential backoff with full jitter,
        uniform in [0, min(cap, base * 2^(attempt - 1))]."""
        return rng.uniform(0, min(self.cap, self.base * 2 ** (attempt - 1)))

    def wait(self, attempt: int, retry_after: float | None = None, rng: Any = random) -> float:
        """The wait before the next attempt: the backoff, or the server's Retry-After when longer."""
        return max(self.backoff(attempt, rng), retry_after or 0.0)

    def attempts_left(self, attempt: int, started: float, wait: float = 0.0, now: float | None = None) -> bool:
        """Whether failed attempt `attempt` may be followed by another, `wait` seconds from now: fewer than
        max_attempts were made and, with a deadline, the next one starts within it (`started` and `now`:
        time.monotonic() of the first attempt and of now)."""
        if attempt >= self.max_attempts:
            return False
        if self.deadline is None:
            return True
        return (time.monotonic() if now is None else now) + wait - started <= self.deadline


def retry_after(headers: Any, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from a response's headers: retry-after-ms (OpenAI), Retry-After in seconds or as an
    HTTP date (RFC 9110), else None."""
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    try:
        if value is not None:
            return max(0.0, float(value) / 1000)
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - now())
    except (TypeError, ValueError):
        return None


class Transient(Exception):
    """A request that may succeed when sent again (429, 5xx, a timeout, no connection)."""

    def __init__(self, message: str, retry_after: float | None = None, rate_limited: bool = False,
                 maybe_ran: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.rate_limited = rate_limited
        # the request reached the server and may have run to the end (a timeout, a stream broken off),
        # as opposed to refused (429, 5xx) or never sent (connection refused)
        self.maybe_ran = maybe_ran


DEFAULT = RetryPolicy()


def transient_for_status(status: int | None, message: str, headers: Any = None,
                         policy: RetryPolicy = DEFAULT) -> Transient | None:
    """An HTTP error status -> a Transient carrying the response's Retry-After, or None when the policy
    does not retry that status (the error is final)."""
    if policy.retryable(status):
        return Transient(f"HTTP {status}: {message}"[:500], retry_after(headers), rate_limited=status == 429)
    return None


def call_retried(fn: Callable[[], T], classify: Callable[[BaseException], Transient | None], policy: RetryPolicy,
         sleep: Callable[[float], None] = time.sleep, resend: bool = True) -> T:
    """fn() until it succeeds, for a synchronous client whose own retries are off. `classify` says which
    failures are transient; any other is raised at once, and the last transient one once the policy
    allows no more attempts (the client's own exception, so its callers read it as before).
    resend=False (a request that creates something): a failure after which the request may have run (a
    timeout, a connection dropped before the answer) is raised, not sent again, so that nothing is
    created twice; refusals and requests never sent are still retried."""
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - classified: only transient failures are retried
            failure = classify(e)
            if failure is None or (failure.maybe_ran and not resend):
                raise
            wait = policy.wait(attempt, failure.retry_after)
            if not policy.attempts_left(attempt, started, wait):
                raise
        sleep(wait)
