"""Every request to a deployed agent (no Beam): paced by the job's quota share (the judge layer's one rate
limiter, metrics.judge.ratelimit.AdaptiveRateLimiter), timed out, retried by metrics.retry's policy, and
never sent again when the agent may have run it (a conversation's turn that timed out or whose stream
broke off: its message would be in the conversation twice). The A2A and Agent Engine clients send every
request through one Calls."""
from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Awaitable, Callable

from evalbeam.metrics.agents.inference import InferenceError
from evalbeam.metrics.judge.ratelimit import AdaptiveRateLimiter
from evalbeam.metrics.retry import RetryPolicy, Transient


@dataclasses.dataclass
class CallStats:
    requests: int = 0  # every request sent, retries included
    retries: int = 0
    rate_limited: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0


class Calls:
    """Every request to a deployed agent: paced by the job's quota share, timed out,
    retried on transient failures by `policy` (metrics.retry). One per inferrer (one asyncio loop)."""

    def __init__(self, requests_per_minute: float | None, policy: RetryPolicy, request_timeout: float,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.limiter = AdaptiveRateLimiter(requests_per_minute, sleep=sleep) if requests_per_minute else None
        self.policy = policy
        self.request_timeout = request_timeout
        self.stats = CallStats()
        self._sleep = sleep

    async def call(self, what: str, send: Callable[[], Awaitable[Any]], classify: Callable[[BaseException], Transient | None],
                   resend: bool = True) -> Any:
        """send() until it succeeds; `classify` says which failures are transient. resend=False (a
        conversation's turn): a failure after which the agent may have run the request (a timeout, a
        stream broken off) is final, as sending it again would put the message twice into the
        conversation and run its tools twice; only refusals and requests never sent are retried."""
        last = ""
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            if self.limiter is not None:
                await self.limiter.acquire()
            self.stats.requests += 1
            self.stats.retries += attempt > 1
            self.stats.in_flight += 1
            self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.stats.in_flight)
            try:
                result = await asyncio.wait_for(send(), self.request_timeout)
            except (asyncio.TimeoutError, TimeoutError):
                failure: Transient | None = Transient(f"no answer within {self.request_timeout:g}s", maybe_ran=True)
            except Exception as e:  # noqa: BLE001 - classified below: transient ones are retried
                failure = classify(e)
                if failure is None:
                    raise
            else:
                if self.limiter is not None:
                    self.limiter.on_success()
                return result
            finally:
                self.stats.in_flight -= 1
            last = str(failure)
            if failure.maybe_ran and not resend:
                raise InferenceError(f"{what}: {last}; not sent again (the agent may have run it); if the agent "
                                     "needs longer, raise inference.request_timeout_seconds")
            if failure.rate_limited:
                self.stats.rate_limited += 1
                if self.limiter is not None:
                    self.limiter.on_rate_limited(failure.retry_after)
            wait = self.policy.wait(attempt, failure.retry_after)
            if not self.policy.attempts_left(attempt, started, wait):
                break
            await self._sleep(wait)
        raise InferenceError(f"{what} failed after {attempt} attempts; last: {last}")

    async def resend(self) -> None:
        """A request sent once more within one send (with a new token, after a 401): it waits for the quota
        and is counted as every request is."""
        if self.limiter is not None:
            await self.limiter.acquire()
        self.stats.requests += 1
        self.stats.retries += 1
