from __future__ import annotations

import asyncio
import contextlib

import pytest

from phi_core.errors import UserError
from phi_core.providers.base import ModelConfig, StreamDone, StreamRequest
from phi_core.providers.limiter import Limiter
from phi_core.providers.openai_chat import OpenAIChatProvider
from phi_core.providers.retry import RetryPolicy, stream_with_retry
from phi_core.testing import ScriptedProvider
from phi_core.types import UserMessage

from .fakes import FakeServer, Recorded, Respond, Stream
from .fakes.openai_wire import error_body, text_reply

SERVER_LIMIT = 8


async def test_fifty_concurrent_calls_converge_under_a_server_limit_of_eight_without_failures() -> (
    None
):
    rejected = 0
    arrivals: list[int] = []

    async def handler(record: Recorded) -> Respond | Stream:
        nonlocal rejected
        arrivals.append(server.in_flight)
        if server.in_flight > SERVER_LIMIT:
            rejected += 1
            return Respond(
                429,
                error_body("Too many requests in flight", "requests"),
                headers={"retry-after-ms": "5"},
            )
        await asyncio.sleep(0.01)  # simulated generation latency
        return Stream(text_reply("ok"))

    limiter = Limiter(per_provider=64, per_model=32)
    async with FakeServer(default=handler) as server:
        model = ModelConfig(
            provider="openai",
            id="gpt-4o-mini",
            base_url=f"{server.url}/v1",
            api_key="sk-limit-test-key",
        )  # type: ignore[arg-type]
        provider = OpenAIChatProvider(model)
        policy = RetryPolicy(max_retries=30, base_delay=0.005, max_total=60)

        async def one(n: int) -> str:
            request = StreamRequest(model, [UserMessage.text(f"q{n}")])
            async for item in stream_with_retry(provider, request, policy, limiter=limiter):
                if isinstance(item, StreamDone):
                    return item.message.text
            raise AssertionError("no StreamDone")

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(n)) for n in range(50)]
    results = [t.result() for t in tasks]
    gate = limiter.gate_stats("model:openai:gpt-4o-mini")
    assert gate is not None
    assert results == ["ok"] * 50  # no failed call
    # The cap came down from 32 to the server's neighbourhood. How far above 8 it ends depends on
    # how the transport batches the first burst (aiohttp sends it in waves, so the server rejects
    # fewer calls); what must hold is what the server sees, checked below.
    assert SERVER_LIMIT / 2 <= gate.cap <= SERVER_LIMIT * 1.5
    assert gate.in_flight == 0 and gate.waiting == 0  # every slot released
    assert rejected == gate.rate_limited and rejected < 50  # far fewer 429s than calls
    # Once the cap was cut down the server rejects less: fewer calls over its limit arrive in
    # the last third than in the first. (Not "at most two": the fake server shares the test's
    # event loop, so on a loaded machine it counts a finished call as in flight a little longer
    # and sees more arrivals over its limit than the limiter let through.)
    third = len(arrivals) // 3
    early = sum(1 for n in arrivals[:third] if n > SERVER_LIMIT)
    late = sum(1 for n in arrivals[-third:] if n > SERVER_LIMIT)
    assert late < early


async def test_cap_halves_once_per_burst_and_never_drops_below_one() -> None:
    limiter = Limiter(per_provider=4, per_model=4)
    for _ in range(10):
        async with limiter.slot("p", "p:m") as slot:
            slot.rate_limited()
    stats = limiter.gate_stats("model:p:m")
    assert stats is not None and stats.cap == 1.0
    # Two calls in flight together, both rejected: one cut, not two.
    limiter = Limiter(per_provider=8, per_model=8)
    async with limiter.slot("p", "p:m") as a, limiter.slot("p", "p:m") as b:
        a.rate_limited()
        b.rate_limited()
    stats = limiter.gate_stats("model:p:m")
    assert stats is not None and stats.cap == 4.0


async def test_successes_while_the_gate_is_full_raise_the_cap_again_up_to_its_maximum() -> None:
    limiter = Limiter(per_provider=4, per_model=4)
    async with limiter.slot("p", "p:m") as slot:
        slot.rate_limited()
    async with limiter.slot("p", "p:m") as slot:
        slot.success()  # one call in flight under a cap of 2: not the constraint, no growth
    assert limiter.gate_stats("model:p:m").cap == 2.0  # type: ignore[union-attr]
    for _ in range(20):
        async with contextlib.AsyncExitStack() as stack:
            cap = int(limiter.gate_stats("model:p:m").cap)  # type: ignore[union-attr]
            slots = [await stack.enter_async_context(limiter.slot("p", "p:m")) for _ in range(cap)]
            for held in slots:
                held.success()
    assert limiter.gate_stats("model:p:m").cap == 4.0  # type: ignore[union-attr]


async def test_a_cancelled_waiter_does_not_leak_a_slot() -> None:
    limiter = Limiter(per_provider=1, per_model=1)
    entered = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with limiter.slot("p", "p:m"):
            entered.set()
            await release.wait()

    async with asyncio.TaskGroup() as group:
        group.create_task(holder())
        await entered.wait()
        waiter = group.create_task(_take(limiter))
        await asyncio.sleep(0)  # let the waiter queue up
        waiter.cancel()
        release.set()
    assert waiter.cancelled()
    await asyncio.wait_for(_take(limiter), timeout=5)
    stats = limiter.gate_stats("provider:p")
    assert stats is not None and stats.in_flight == 0 and stats.waiting == 0


async def _take(limiter: Limiter) -> None:
    async with limiter.slot("p", "p:m"):
        pass


async def test_max_queued_overflow_is_a_clear_error() -> None:
    limiter = Limiter(per_provider=1, per_model=1, max_queued=0)
    async with limiter.slot("p", "p:m"):
        with pytest.raises(UserError, match="max_queued"):
            await _take(limiter)


def test_invalid_caps_are_rejected_with_the_value() -> None:
    with pytest.raises(UserError, match="got per_provider=0"):
        Limiter(per_provider=0)


async def test_stream_with_retry_uses_the_process_wide_limiter_by_default(
    fresh_limiter: Limiter,
) -> None:
    provider = ScriptedProvider(["hi"])
    model = ModelConfig(provider="scripted", id="m", api="scripted")
    items = [
        i async for i in stream_with_retry(provider, StreamRequest(model, [UserMessage.text("x")]))
    ]
    assert isinstance(items[-1], StreamDone)
    stats = fresh_limiter.gate_stats("model:scripted:m")
    assert stats is not None and stats.successes == 1
    # limiter=None: no limiting at all
    provider.push("again")
    [
        i
        async for i in stream_with_retry(
            provider, StreamRequest(model, [UserMessage.text("x")]), limiter=None
        )
    ]
    assert fresh_limiter.gate_stats("model:scripted:m").successes == 1  # type: ignore[union-attr]
