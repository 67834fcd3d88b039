"""The retry policy of every caller that sends an API call again: which failures are
worth another try, and how long to wait before it (`retrying`, on tenacity).

Pure apart from the waiting tenacity does: `retryable` decides from a `intent.kube.KubeError`
alone, `wait_retry_after` honours the ``Retry-After`` the adapter read from a 429 or 503.
The controller's informers, its DRA discovery, the ``certs`` command's reads and the
demo's watches use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_never,
    wait_random_exponential,
)
from tenacity.stop import stop_base

from intent.kube import KubeError

__all__ = ["MAX_BACKOFF", "MIN_BACKOFF", "retryable", "retrying", "wait_retry_after"]

#: The first backoff window and the cap of every wait (seconds), `retrying`'s defaults.
MIN_BACKOFF: Final = 0.5
MAX_BACKOFF: Final = 30.0


def retryable(error: BaseException) -> bool:
    """Whether a failed call is worth sending again: a `KubeError` with no answer
    (status 0: connection refused or lost, timeout; not a kubeconfig that would not
    load, verb ``config``), 429 Too Many Requests or a 5xx. Never another 4xx (403,
    404, 409 Conflict, 410 Gone, 422 Invalid...): sent again, it fails again, or the
    caller must read and decide again. Pure."""
    if not isinstance(error, KubeError) or error.verb == "config":
        return False
    return error.status in (0, 429) or error.status >= 500


class wait_retry_after:
    """A tenacity wait: a failure's ``Retry-After`` (`KubeError.retry_after`, a 429 or
    503's) when it carries one, at most ``max_wait``; else ``backoff``'s wait."""

    def __init__(self, backoff: Callable[[RetryCallState], float], max_wait: float) -> None:
        self.backoff = backoff
        self.max_wait = max_wait

    def __call__(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, KubeError) and error.retry_after is not None:
            return min(error.retry_after, self.max_wait)
        return float(self.backoff(state))


def retrying(
    *,
    attempts: int | None = 5,
    min_backoff: float = MIN_BACKOFF,
    max_backoff: float = MAX_BACKOFF,
    retry: Callable[[BaseException], bool] = retryable,
    wait: Callable[[RetryCallState], float] | None = None,
    sleep: Callable[[float], Any] = asyncio.sleep,
    before_sleep: Callable[[RetryCallState], Any] | None = None,
) -> AsyncRetrying:
    """The retry policy of API calls, as a tenacity ``AsyncRetrying``::

        async for attempt in retrying():
            with attempt:
                served = await kube.serves(RESOURCESLICES)

    - retried: what ``retry`` accepts, by default `retryable` (no answer, 429, 5xx);
      anything else is raised at once;
    - waits: the failure's ``Retry-After`` when it has one (capped at ``max_backoff``),
      else "full jitter" exponential backoff (`tenacity.wait_random_exponential`:
      uniformly random up to ``min(max_backoff, min_backoff * 2**(n-1))`` before the
      n-th retry, so clients failing together do not retry in step; AWS Architecture
      Blog, "Exponential Backoff And Jitter", as client-go's backoff manager);
    - gives up after ``attempts`` calls (None: never), raising the last error as it is
      (``reraise``), not a ``RetryError``;
    - ``before_sleep``: called before each wait (log there: ``state.upcoming_sleep``,
      ``state.outcome.exception()``); ``wait``/``sleep`` replace the waits and how they
      are slept (tests: no real sleeping).
    """
    stop: stop_base = stop_after_attempt(attempts) if attempts is not None else stop_never
    return AsyncRetrying(
        retry=retry_if_exception(retry),
        wait=wait
        or wait_retry_after(
            wait_random_exponential(multiplier=min_backoff, max=max_backoff), max_backoff
        ),
        stop=stop,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
