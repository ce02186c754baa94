"""The kit's rate-limit buckets learnt from a platform's headers (chatkernel.sdk.receiving.buckets):
a bucket per route and major parameter, shared by the routes the platform says share it,
a 429 blocking its bucket or the whole account, the global window."""

from __future__ import annotations

import anyio
import pytest

from chatkernel.channels import RouteBuckets
from chatkernel.testing import ManualClock

pytestmark = pytest.mark.anyio
SEND = "POST /channels/{channel_id}/messages"


def headers(remaining: int, reset_after: float, *, bucket: str = "b1", limit: int = 5):
    return {"X-RateLimit-Bucket": bucket, "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset-After": str(reset_after)}


async def test_an_empty_bucket_holds_its_route_and_major_until_it_resets():
    clock = ManualClock()
    buckets = RouteBuckets(clock)
    slot = await buckets.acquire(SEND, "c1")
    slot.learn(headers(0, 2.5), 200)
    assert buckets.delay(SEND, "c1") == pytest.approx(2.5)
    assert buckets.delay(SEND, "c2") == 0  # another channel: its own bucket
    async with anyio.create_task_group() as tg:
        tg.start_soon(buckets.acquire, SEND, "c1")
        assert await clock.sleeper() == pytest.approx(clock.now() + 2.5)
        clock.advance(2.5)
    assert buckets.waits == 1


async def test_routes_the_platform_names_one_bucket_share_its_count():
    clock = ManualClock()
    buckets = RouteBuckets(clock)
    (await buckets.acquire(SEND, "c1")).learn(headers(0, 1.0, bucket="shared"), 200)
    edit = "PATCH /channels/{channel_id}/messages/{message_id}"
    (await buckets.acquire(edit, "c2")).learn(headers(3, 1.0, bucket="shared"), 200)
    # The edit route is now known to be in SEND's bucket, whose count in c1 is spent.
    assert buckets.delay(edit, "c1") == pytest.approx(1.0)
    assert buckets.delay(edit, "c2") == 0


async def test_answers_out_of_order_never_raise_the_count_within_a_window():
    clock = ManualClock()
    buckets = RouteBuckets(clock)
    (await buckets.acquire(SEND, "c1")).learn(headers(4, 5.0), 200)
    first, second = await buckets.acquire(SEND, "c1"), await buckets.acquire(SEND, "c1")
    second.learn(headers(2, 4.0), 200)
    first.learn(headers(3, 4.5), 200)  # older news, arriving later
    # Two left, as the newer answer said: two go at once, a third waits for the reset.
    await buckets.acquire(SEND, "c1")
    await buckets.acquire(SEND, "c1")
    assert buckets.delay(SEND, "c1") == pytest.approx(5.0)  # the latest reset announced


async def test_a_429_blocks_its_bucket_or_with_global_everything():
    clock = ManualClock()
    buckets = RouteBuckets(clock)
    (await buckets.acquire(SEND, "c1")).learn({"Retry-After": "3"}, 429, retry_after=3.0)
    assert buckets.delay(SEND, "c1") == pytest.approx(3.0)
    assert buckets.delay(SEND, "c2") == 0
    (await buckets.acquire("GET /users/@me")).learn({"X-RateLimit-Global": "true"}, 429,
                                                    retry_after=1.5)
    assert buckets.delay("GET /gateway/bot") == pytest.approx(1.5)
    clock.advance(3.0)
    assert buckets.delay(SEND, "c1") == 0 and buckets.delay(SEND, "c2") == 0


async def test_the_global_window_counts_each_request_until_its_answer_and_after():
    clock = ManualClock()
    buckets = RouteBuckets(clock, global_limit=(2, 1.0))
    first = await buckets.acquire("GET /a")
    second = await buckets.acquire("GET /b")
    assert buckets.delay("GET /c") == float("inf")  # both out, no answer yet
    clock.advance(5.0)
    first.learn({}, 200)  # answered now: counts for a second from here
    assert buckets.delay("GET /c") == pytest.approx(1.0)
    second.release(reached=False)  # never left: counts no more
    assert buckets.delay("GET /c") == 0
