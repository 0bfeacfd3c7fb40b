"""An asyncio rate limiter for judge calls: requests per minute and,
optionally, tokens per minute; and how many calls may be in flight
(InFlightWindow) and when a slow one gets a copy at the end of a run (TailHedge).

Requests are paced, not burst: a request may start 1/rate seconds after the
previous one, so no window of any length sees more than its share plus one.
The rate adapts: a 429 multiplies it by DECREASE and pauses every caller until
the Retry-After the server gave; each success adds back INCREASE of the
configured rate, never above it. This is hand-written because the rate limiting
libraries on PyPI are either thread-based, or fixed-rate without adaptation to
429s and Retry-After.
"""
from __future__ import annotations

import asyncio
import collections
import math
import time

DECREASE = 0.7
INCREASE = 0.02
MIN_SHARE = 0.05  # never slower than this share of the configured rate


class AdaptiveRateLimiter:
    def __init__(self, requests_per_minute: float, tokens_per_minute: float | None = None,
                 clock=time.monotonic, sleep=asyncio.sleep):
        if requests_per_minute <= 0:
            raise ValueError("requests_per_minute must be positive")
        self.max_rate = requests_per_minute / 60.0
        self.rate = self.max_rate
        self.tokens_per_second = tokens_per_minute / 60.0 if tokens_per_minute else None
        self._clock = clock
        self._sleep = sleep
        self._next_start = 0.0  # when the next request may start
        self._paused_until = 0.0
        self._token_debt_until = 0.0  # when the tokens spent so far are paid back
        self._lock = asyncio.Lock()
        self.rate_limited = 0  # 429s seen

    async def acquire(self, estimated_tokens: int = 0) -> None:
        """Wait for this request's turn, then reserve its place."""
        async with self._lock:
            now = self._clock()
            start = max(now, self._next_start, self._paused_until)
            if self.tokens_per_second:
                # A bucket holding one minute's tokens, as debt: the tokens reserved so
                # far are paid back by _token_debt_until; a request may start once
                # that is no more than a minute ahead.
                self._token_debt_until = max(self._token_debt_until, now) + estimated_tokens / self.tokens_per_second
                start = max(start, self._token_debt_until - 60.0)
            self._next_start = start + 1.0 / self.rate
        delay = start - self._clock()
        if delay > 0:
            await self._sleep(delay)

    def backlog(self) -> float:
        """Seconds until a request asking now could start (0: the pace has room now)."""
        return max(0.0, self._next_start - self._clock(), self._paused_until - self._clock())

    def correct_tokens(self, estimated: int, actual: int) -> None:
        """Settle a request's token reservation with what it really used."""
        if self.tokens_per_second:
            self._token_debt_until += (actual - estimated) / self.tokens_per_second

    def on_success(self) -> None:
        self.rate = min(self.max_rate, self.rate + INCREASE * self.max_rate)

    def on_rate_limited(self, retry_after: float | None) -> None:
        self.rate_limited += 1
        self.rate = max(self.max_rate * MIN_SHARE, self.rate * DECREASE)
        now = self._clock()
        if retry_after:
            self._paused_until = max(self._paused_until, now + retry_after)
        self._next_start = max(self._next_start, now + 1.0 / self.rate)


class InFlightWindow:
    """How many judge calls may be in flight at once: by Little's law, the rate
    at which they may start times how long one takes. A window fixed in advance
    either starves a large quota (100 requests a second at 1.4 s each need about
    140 in flight) or holds needless memory for a small one. The latency is
    estimated as TCP estimates its retransmission timeout (RFC 6298): a smoothed
    mean plus four smoothed mean deviations, so that a long tail does not stall
    the pace. Never fewer than `floor` nor more than `cap` (the memory bound)."""

    ALPHA = 1 / 8  # RFC 6298's gains
    BETA = 1 / 4
    RECENT = 256  # the calls whose durations give the quantiles (TailHedge's delay)

    def __init__(self, cap: int, initial_latency: float = 2.0, floor: int = 4):
        self.cap = cap
        self.floor = min(floor, cap)
        self.initial_latency = initial_latency
        self.smoothed: float | None = None
        self.deviation = 0.0
        self.in_flight = 0
        self.peak = 0
        self._recent: collections.deque = collections.deque(maxlen=self.RECENT)
        self._changed = asyncio.Condition()

    def latency(self) -> float:
        return self.initial_latency if self.smoothed is None else self.smoothed + 4 * self.deviation

    def limit(self, rate_per_second: float) -> int:
        return max(self.floor, min(self.cap, math.ceil(rate_per_second * self.latency())))

    def quantile(self, q: float) -> float:
        """The q-quantile of the recent calls' durations (the initial guess before any)."""
        if not self._recent:
            return self.initial_latency
        ordered = sorted(self._recent)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def observe(self, seconds: float) -> None:
        """One call's duration (an HTTP attempt, not the waits around it)."""
        self._recent.append(seconds)
        if self.smoothed is None:
            self.smoothed, self.deviation = seconds, seconds / 2
        else:
            self.deviation = (1 - self.BETA) * self.deviation + self.BETA * abs(self.smoothed - seconds)
            self.smoothed = (1 - self.ALPHA) * self.smoothed + self.ALPHA * seconds

    async def acquire(self, rate_per_second) -> None:
        """Wait for a place; `rate_per_second` is read each time (the limiter's rate adapts)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < self.limit(rate_per_second()))
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    async def release(self) -> None:
        async with self._changed:
            self.in_flight -= 1
            self._changed.notify_all()


class TailHedge:
    """When a slow call gets a second, identical copy (a hedged request, as in
    Dean and Barroso's "The Tail at Scale"). A run ends with its slowest calls:
    one admitted in its last second that fails after a tail latency is retried
    seconds after every other call has finished, while the quota sits idle. So,
    once the input has ended and the pace has room (a copy never delays a first
    call or a retry), a call that has run longer than the QUANTILE of recent
    calls gets a copy, and the first answer wins. A copy is a call like any
    other: paced by the limiter, counted in the judgment's attempts, and in all
    no more than `share` of the calls made (0: never)."""

    QUANTILE = 0.75
    COPIES = 2  # per attempt: a copy, and one more if a copy fails while the call is still slow

    def __init__(self, window: InFlightWindow, limiter: AdaptiveRateLimiter, share: float):
        self.window = window
        self.limiter = limiter
        self.share = share
        self.calls = 0  # every call sent, copies included
        self.hedges = 0
        self._ended = asyncio.Event()

    def end_of_input(self) -> None:
        self._ended.set()

    def delay(self) -> float:
        """How long a call runs before it may get a copy."""
        return self.window.quantile(self.QUANTILE)

    async def turn(self, delay: float, estimated_tokens: int, wanted) -> bool:
        """Wait until a call sent now may get its copy: after `delay`, at the end
        of the input, when nothing waits for the pace; then, if `wanted()` still
        and the budget allows, count the copy and take its place with the limiter
        (True). Checking and taking the place do not yield, so copies take only
        places nobody else wants: a retry coming later is not queued behind them."""
        await asyncio.sleep(delay)
        await self._ended.wait()
        while (wait := self.limiter.backlog()) > 0:
            await asyncio.sleep(wait)
        if not wanted() or self.hedges + 1 > self.share * self.calls:
            return False
        self.hedges += 1
        await self.limiter.acquire(estimated_tokens)
        return True
