"""The adapter's retry policy (`intent.retry.retrying`): Retry-After honoured, only what
may pass retried, jittered exponential backoff up to the attempt limit. No real sleeping:
the waits are recorded by an injected ``sleep``."""

from __future__ import annotations

import random

import pytest

from intent.kube import KubeError
from intent.retry import retryable, retrying


def error(status: int, retry_after: float | None = None, verb: str = "get") -> KubeError:
    return KubeError("reading thing x", status, "Reason", "", retry_after=retry_after, verb=verb)


class Flaky:
    """A call failing with ``errors`` in turn, then answering ``"ok"``."""

    def __init__(self, *errors: KubeError) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


async def run(call: Flaky, **kwargs: object) -> tuple[str, list[float]]:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async for attempt in retrying(sleep=sleep, **kwargs):  # type: ignore[arg-type]
        with attempt:
            return await call(), waits
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("status", "verb", "expected"),
    [
        (0, "get", True),  # no answer
        (429, "list", True),
        (500, "create", True),
        (503, "watch", True),
        (400, "patch", False),
        (403, "get", False),
        (404, "get", False),
        (409, "update", False),
        (410, "watch", False),
        (422, "patch", False),
        (0, "config", False),  # a kubeconfig that would not load
    ],
)
def test_only_no_answer_429_and_5xx_are_retryable(status: int, verb: str, expected: bool) -> None:
    assert retryable(error(status, verb=verb)) is expected
    assert not retryable(ValueError("not an API error"))


async def test_retry_after_is_the_wait() -> None:
    call = Flaky(error(429, retry_after=7.0), error(503, retry_after=2.5))
    assert await run(call) == ("ok", [7.0, 2.5])
    assert call.calls == 3


async def test_retry_after_is_capped_at_max_backoff() -> None:
    assert await run(Flaky(error(429, retry_after=600.0)), max_backoff=30.0) == ("ok", [30.0])


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
async def test_non_retryable_statuses_raise_at_once(status: int) -> None:
    call = Flaky(error(status, retry_after=1.0))
    with pytest.raises(KubeError) as raised:
        await run(call)
    assert raised.value.status == status and call.calls == 1


async def test_retryable_failures_back_off_with_jitter_up_to_the_limit() -> None:
    random.seed(25)
    call = Flaky(*(error(500) for _ in range(10)))
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    with pytest.raises(KubeError) as raised:
        async for attempt in retrying(attempts=4, min_backoff=1.0, max_backoff=3.0, sleep=sleep):
            with attempt:
                await call()
    # The last error itself (not a RetryError), after 4 calls and 3 waits, each uniformly
    # random below its window: 1, 2, then 4 capped at 3.
    assert raised.value.status == 500 and call.calls == 4 and len(waits) == 3
    for wait, window in zip(waits, [1.0, 2.0, 3.0], strict=True):
        assert 0.0 <= wait <= window
    assert len(set(waits)) == 3  # jittered, not in step


async def test_the_wait_and_the_stop_are_injectable() -> None:
    call = Flaky(error(0), error(502), error(504))
    result, waits = await run(call, wait=lambda _state: 0.125, attempts=None)
    assert (result, waits) == ("ok", [0.125] * 3)
