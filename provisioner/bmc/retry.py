"""Bounded waiting: retries with exponential backoff and full jitter for transient BMC
errors, and polling until a condition holds or a deadline passes."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from provisioner.errors import BmcError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay_s(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        """Full jitter (AWS architecture blog): uniform in [0, min(max, base * 2^attempt)]."""
        cap: float = min(self.max_delay_s, self.base_delay_s * (2 ** attempt))
        return rng() * cap


def retry(fn: Callable[[], T], policy: RetryPolicy, *,
          sleep: Callable[[float], None] = time.sleep,
          deadline: float | None = None,
          on_retry: Callable[[int, BmcError], None] | None = None,
          only: Callable[[BmcError], bool] | None = None) -> T:
    """Call fn; on a transient BmcError wait and try again, at most policy.attempts times.

    Non-transient errors (auth, unsupported, 4xx other than 409) are raised at once, and so
    are those `only` turns down (a request that is not safe to send twice). A `deadline`
    (time.monotonic() value) stops retrying when the next wait would pass it.
    """
    for attempt in range(policy.attempts):
        try:
            return fn()
        except BmcError as exc:
            last = attempt == policy.attempts - 1
            if not exc.transient or last or (only is not None and not only(exc)):
                raise
            wait = policy.delay_s(attempt)
            if deadline is not None and time.monotonic() + wait > deadline:
                raise
            if on_retry is not None:
                on_retry(attempt + 1, exc)
            sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


def poll_until(read: Callable[[], T], done: Callable[[T], bool], until: float, *,
               interval_s: float, max_interval_s: float,
               sleep: Callable[[float], None] = time.sleep) -> T:
    """Call `read` until `done(value)` or the monotonic clock passes `until`; the wait grows
    by half each time up to max_interval_s and never runs past `until`. Returns the last
    value read (check it with `done` to tell success from the deadline)."""
    interval = interval_s
    while True:
        value = read()
        if done(value) or time.monotonic() >= until:
            return value
        sleep(min(interval, max(0.0, until - time.monotonic())))
        interval = min(interval * 1.5, max_interval_s)
