"""The one retry policy (metrics/retry.py): the statuses retried, the backoff and its jitter, Retry-After,
max_attempts and the deadline, and the synchronous helper the batch clients' API calls go through."""
from __future__ import annotations

import email.utils
import random
import time

import pytest

from evalbeam.metrics.retry import (
    RETRYABLE_STATUSES,
    RetryPolicy,
    Transient,
    call_retried,
    retry_after,
    retryable_status,
    transient_for_status,
)


def test_retries_after_transient_errors_start_short_and_grow():
    policy = RetryPolicy()
    first = [policy.backoff(1) for _ in range(2000)]
    assert max(first) <= 0.25  # a transient 503 is retried within a quarter second
    fifth = [policy.backoff(5) for _ in range(2000)]
    assert 2.0 < max(fifth) <= 4.0 and min(fifth) < 1.0  # exponential, with full jitter
    assert max(policy.backoff(20) for _ in range(200)) <= policy.cap


def test_retry_after_in_seconds_milliseconds_or_a_date():
    assert retry_after({"retry-after": "7"}) == 7.0
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < retry_after({"retry-after": later}) <= 30
    assert retry_after({"retry-after": "soon"}) is None and retry_after({}) is None


def test_an_http_error_is_transient_with_its_retry_after():
    """transient_for_status carries the response's Retry-After, as an HTTP date or OpenAI-style
    retry-after-ms: the one parser the judge and the deployed agents share."""
    assert isinstance(Transient("x"), Exception)
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 20 < transient_for_status(429, "slow down", {"retry-after": later}).retry_after <= 30
    assert transient_for_status(429, "slow down", {"retry-after-ms": "1500"}).retry_after == 1.5
    assert transient_for_status(503, "down", {"retry-after": "soon"}).retry_after is None


def test_which_statuses_are_retried():
    """408, 429 and every 5xx (the judge's rule, now the agents' too: 501 and 505-511 included); no other
    status, and no status at all."""
    retried = [s for s in range(100, 700) if retryable_status(s)]
    assert retried == [408, 429, *range(500, 600)] == list(RETRYABLE_STATUSES)
    for status in (None, 400, 401, 403, 404, 409, 499, 600):
        assert not RetryPolicy().retryable(status) and transient_for_status(status, "no") is None
    limited = transient_for_status(429, "slow down", {"retry-after": "3"})
    assert (str(limited), limited.retry_after, limited.rate_limited, limited.maybe_ran) == (
        "HTTP 429: slow down", 3.0, True, False)
    for status in (501, 505, 511, 529):
        failure = transient_for_status(status, "x" * 1000)
        assert failure is not None and not failure.rate_limited and len(str(failure)) == 500


def test_the_wait_is_the_backoff_or_the_servers_retry_after_when_longer():
    policy = RetryPolicy(base=1.0, cap=8.0)
    assert policy.wait(3, None, random.Random(7)) == random.Random(7).uniform(0, 4.0)  # U(0, base * 2^(n-1))
    assert policy.wait(3, 30.0) == 30.0  # Retry-After beyond the backoff's bound and cap: waited in full
    assert 0.5 <= policy.wait(1, 0.5) <= 1.0
    assert max(policy.wait(10) for _ in range(500)) <= 8.0 < 2 ** 9


def test_attempts_and_the_deadline_bound_the_retries():
    assert [RetryPolicy(max_attempts=3).attempts_left(n, started=0.0, now=1e9) for n in (1, 2, 3, 4)] == [
        True, True, False, False]  # no deadline: attempts only
    policy = RetryPolicy(max_attempts=10, deadline=5.0)
    assert policy.attempts_left(1, started=100.0, wait=1.0, now=103.0)  # the retry starts at 4 s
    assert policy.attempts_left(1, started=100.0, wait=2.0, now=103.0)  # at 5 s: within it
    assert not policy.attempts_left(1, started=100.0, wait=2.5, now=103.0)  # at 5.5 s: past it
    assert not policy.attempts_left(10, started=100.0, now=100.0)  # attempts spent, whatever the time
    with pytest.raises(ValueError, match="max_attempts must be at least 1"):
        RetryPolicy(max_attempts=0)


class Refused(Exception):
    def __init__(self, status, maybe_ran=False, headers=None):
        super().__init__(f"status {status}")
        self.status, self.maybe_ran, self.headers = status, maybe_ran, headers


def classify(error):
    if not isinstance(error, Refused):
        return None
    if error.status is None:  # a timeout: the request may have run
        return Transient("timed out", maybe_ran=error.maybe_ran)
    return transient_for_status(error.status, str(error), error.headers)


def scripted(outcomes):
    sent = []

    def fn():
        outcome = outcomes[len(sent)]
        sent.append(outcome)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return fn, sent


def test_call_retried_sends_again_only_what_the_policy_allows():
    """The synchronous helper (the anthropic and openai batch clients' API calls): transient failures sent
    again after the policy's wait (Retry-After honoured), a final one raised at once, the last transient
    one raised once the attempts are spent; resend=False (a create) is not sent again after a failure
    that may have run, but is after a refusal."""
    waits = []
    fn, sent = scripted([Refused(429, headers={"retry-after": "7"}), Refused(503), "created"])
    assert call_retried(fn, classify, RetryPolicy(max_attempts=3), waits.append) == "created"
    assert len(sent) == 3 and waits[0] == 7.0 and 0 <= waits[1] <= 0.5

    waits.clear()
    fn, sent = scripted([Refused(400), "never"])
    with pytest.raises(Refused, match="status 400"):
        call_retried(fn, classify, RetryPolicy(), waits.append)
    assert len(sent) == 1 and waits == []

    fn, sent = scripted([Refused(503), Refused(502), "never"])
    with pytest.raises(Refused, match="status 502"):  # the client's own exception, the last one
        call_retried(fn, classify, RetryPolicy(max_attempts=2), waits.append)
    assert len(sent) == 2 and len(waits) == 1

    fn, sent = scripted([Refused(None, maybe_ran=True), "twice"])
    with pytest.raises(Refused):
        call_retried(fn, classify, RetryPolicy(), waits.append, resend=False)
    assert len(sent) == 1  # it may have been created: not created twice
    fn, sent = scripted([Refused(None, maybe_ran=True), "again"])
    assert call_retried(fn, classify, RetryPolicy(), lambda s: None) == "again" and len(sent) == 2
    fn, sent = scripted([Refused(None, maybe_ran=False), Refused(503), "created once"])
    assert call_retried(fn, classify, RetryPolicy(), lambda s: None, resend=False) == "created once"

    fn, sent = scripted([Refused(503, headers={"retry-after": "2"})] * 5)
    with pytest.raises(Refused):  # the next attempt would start past the deadline: none, whatever max_attempts says
        call_retried(fn, classify, RetryPolicy(max_attempts=5, deadline=1.0), lambda s: None)
    assert len(sent) == 1
