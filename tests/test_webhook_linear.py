"""Review time is linear in the request, and no review takes over 100 ms, up to the 7 MiB
body limit.

Each shape (`bench.webhook_bodies.SHAPES`) is a pod that fills a body with one long list
(GPU names, affinity values or terms, containers, claims, annotations, node selector keys),
at a quarter of the limit and at the limit. The review proper (`admit` of the decoded
body) must take under 100 ms at either size and grow no faster than the body: four times
the body may take at most ten times as long (a quadratic step would take sixteen), plus
2 ms for timer noise. CPU seconds of this thread, the least of three runs with the
collector paused (`bench.webhook_bodies.cpu_seconds`). Decoding the JSON is orjson's and
grows a little faster than the body as the objects outgrow the CPU caches;
``python -m bench.webhook_bodies`` prints it beside the review.
"""

from __future__ import annotations

import pytest

from bench.webhook_bodies import SHAPES, body_of, cpu_seconds
from webhook.server import CLIENT_MAX_SIZE

#: The longest a review may take, seconds (Gatekeeper's p99 target for a whole webhook
#: call, REFERENCE section 5).
REVIEW_SECONDS = 0.1


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_review_time_is_linear_in_the_body_and_under_100_ms(shape: str) -> None:
    _, quarter = cpu_seconds(body_of(shape, CLIENT_MAX_SIZE // 4))
    _, whole = cpu_seconds(body_of(shape, CLIENT_MAX_SIZE))
    assert quarter < REVIEW_SECONDS and whole < REVIEW_SECONDS, (quarter, whole)
    assert whole <= 10 * quarter + 0.002, (
        f"{shape}: {quarter * 1000:.2f} ms at a quarter of the limit, {whole * 1000:.2f} ms at the limit"
    )
