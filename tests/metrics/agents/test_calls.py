"""Every request to a deployed agent (metrics/agents/calls.py) on scripted outcomes: which failures are sent
again, after how long, how many times; Retry-After honoured and the shared limiter slowed by a 429."""
from __future__ import annotations

from evalbeam.metrics.agents.calls import Calls
from evalbeam.metrics.retry import RetryPolicy


def test_calls_retry_only_transient_failures_and_honour_retry_after():
    """metrics.agents.calls.Calls on scripted outcomes: transient failures (429 with Retry-After, 5xx, a
    timeout) are retried with backoff, up to max_attempts; anything else is raised at once."""
    import asyncio

    from evalbeam.metrics.retry import transient_for_status

    def run(outcomes, max_attempts=4, timeout=5.0):
        waits, sent = [], []

        async def sleep(seconds):
            waits.append(seconds)

        calls = Calls(600, RetryPolicy(max_attempts=max_attempts), timeout, sleep=sleep)

        async def send():
            outcome = outcomes[len(sent)]
            sent.append(outcome)
            if outcome == "hang":
                await asyncio.sleep(3600)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        def classify(e):
            return transient_for_status(getattr(e, "status", None), str(e), getattr(e, "headers", None))

        async def main():
            return await calls.call("turn 1", send, classify)

        try:
            return asyncio.run(main()), sent, waits, calls
        except Exception as e:  # noqa: BLE001
            return e, sent, waits, calls

    class Status(Exception):
        def __init__(self, status, headers=None):
            super().__init__(f"status {status}")
            self.status, self.headers = status, headers or {}

    result, sent, waits, calls = run([Status(429, {"retry-after": "7"}), Status(503), "answer"])
    assert result == "answer" and len(sent) == 3 and waits[0] >= 7 and calls.stats.rate_limited == 1
    assert calls.limiter.rate < calls.limiter.max_rate  # the 429 slowed the pace
    result, sent, waits, calls = run([Status(400), "answer"])
    assert isinstance(result, Status) and len(sent) == 1 and waits == []  # not transient: no retry
    result, sent, _, calls = run([Status(500)] * 4, max_attempts=4)
    assert str(result) == "turn 1 failed after 4 attempts; last: HTTP 500: status 500" and len(sent) == 4
    result, sent, _, _ = run(["hang", "answer"], timeout=0.05)
    assert result == "answer" and len(sent) == 2


def test_calls_wait_and_give_up_as_the_policy_says():
    """Calls asks metrics.retry's policy: the first retry waits U(0, base) (the judge's numbers: no longer
    1 s or more), each later bound doubles; 501 and 505 to 511 are retried now, as the judge retries them;
    a deadline ends the retries before max_attempts does."""
    import asyncio

    from evalbeam.metrics.agents.a2a import A2AInferrer

    class Status(Exception):
        def __init__(self, status):
            super().__init__(f"status {status}")
            self.status_code = status

    def run(outcomes, policy):
        waits, sent = [], []

        async def sleep(seconds):
            waits.append(seconds)

        async def send():
            sent.append(outcomes[len(sent)])
            if isinstance(sent[-1], BaseException):
                raise sent[-1]
            return sent[-1]

        calls = Calls(None, policy, 5.0, sleep=sleep)
        try:
            return asyncio.run(calls.call("turn 1", send, A2AInferrer.classify)), sent, waits
        except Exception as e:  # noqa: BLE001
            return e, sent, waits

    result, sent, waits = run([Status(501), Status(505), Status(511), "answer"], RetryPolicy(max_attempts=4, base=0.5))
    assert result == "answer" and len(sent) == 4
    assert 0 <= waits[0] <= 0.5 and 0 <= waits[1] <= 1.0 and 0 <= waits[2] <= 2.0
    result, sent, waits = run([Status(503)] * 3, RetryPolicy(max_attempts=3, base=0.5))
    assert str(result) == "turn 1 failed after 3 attempts; last: HTTP 503: status 503" and len(waits) == 2
    result, sent, waits = run([Status(503)] * 3, RetryPolicy(max_attempts=3, base=5.0, deadline=0.0))
    assert str(result) == "turn 1 failed after 1 attempts; last: HTTP 503: status 503" and waits == []
