"""The response cache under a token budget that lowers a call's output limit.

The cache is looked up under the request as asked; the budget may send a copy with a lower
``max_tokens`` (which depends on what remains of the budget). A reply that ended on its own is
found by the same run repeated; a reply cut by the lowered limit is never served later."""

from __future__ import annotations

from pathlib import Path

import pytest

from phi_core.metering import Budget, Meter
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.providers.call import CachedResponse, ModelCall, request_key
from phi_core.providers.retry import RetryPolicy
from phi_core.select import MeteredModel, ModelSelector, ResponseCache
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import AssistantMessage, Pricing, Usage, UserMessage

PRICE = Pricing(input=1_000_000.0, output=2_000_000.0)  # $1 an input token, $2 an output token
MODEL = ModelConfig(provider="scripted", id="m", api="scripted", pricing=PRICE)
LONG = "word " * 400  # 2000 characters: 500 output tokens for the scripted provider


class DictCache:
    """An in-memory :class:`~phi_core.providers.call.CallCache`."""

    def __init__(self) -> None:
        self.entries: dict[str, CachedResponse] = {}

    async def get(self, key: str) -> CachedResponse | None:
        return self.entries.get(key)

    async def put(self, key: str, message: AssistantMessage, latency: float) -> None:
        self.entries[key] = CachedResponse(message, latency)


async def call_once(
    cache: DictCache, reply: Reply, *, budget: Budget | None, max_tokens: int | None
) -> tuple[int, float, ModelCall]:
    """One call through the shared path: (calls the provider got, dollars spent, the call)."""
    provider = ScriptedProvider(name="m", default=reply)
    request = StreamRequest(
        model=MODEL, messages=[UserMessage.text("question")], max_tokens=max_tokens
    )
    meter = Meter(budget)
    call = ModelCall(
        provider, request, retry=RetryPolicy.none(), limiter=None, cache=cache, meters=(meter,)
    )
    async for _ in call.stream():
        pass
    return provider.calls, meter.spent, call


@pytest.mark.parametrize(
    ("budget", "max_tokens"),
    [(Budget(max_tokens=3000), None), (Budget(max_tokens=1000), 2000)],
    ids=["no-handle-limit", "handle-limit-above-budget"],
)
async def test_a_complete_reply_under_a_lowered_limit_is_served_to_the_same_call_again(
    budget: Budget, max_tokens: int | None
) -> None:
    cache = DictCache()
    reply = Reply("right", usage=Usage(input=5, output=5))
    calls, spent, first = await call_once(cache, reply, budget=budget, max_tokens=max_tokens)
    assert calls == 1 and spent == 15.0
    assert first.sent is not None and first.sent.max_tokens != max_tokens  # the budget lowered it
    assert first.message is not None and first.message.stop_reason == "stop"

    calls, spent, second = await call_once(cache, reply, budget=budget, max_tokens=max_tokens)
    assert (calls, spent) == (0, 0.0)
    assert second.cached and second.message is not None and second.message.text == "right"


async def test_a_reply_cut_by_the_lowered_limit_is_never_served_for_a_higher_limit() -> None:
    cache = DictCache()
    reply = Reply(LONG)
    calls, _, cut = await call_once(cache, reply, budget=Budget(max_tokens=100), max_tokens=None)
    assert calls == 1
    assert cut.message is not None and cut.message.stop_reason == "length"
    assert len(cut.message.text) < len(LONG)
    asked = request_key(cut.request)
    assert asked not in cache.entries  # only under the lowered request's own key
    assert cut.sent is not None and request_key(cut.sent) in cache.entries

    calls, _, whole = await call_once(cache, reply, budget=None, max_tokens=None)
    assert calls == 1 and not whole.cached
    assert whole.message is not None and whole.message.text == LONG
    assert whole.message.stop_reason == "stop"


async def test_a_budgeted_selection_repeated_over_its_cache_pays_nothing(tmp_path: Path) -> None:
    data = [(f"question {i}", "right") for i in range(3)]

    async def agent(models: dict[str, MeteredModel], question: str) -> str:
        return str(await models["solver"].complete(question))

    async def once() -> tuple[int, float]:
        provider = ScriptedProvider(
            name="m", default=Reply("right", usage=Usage(input=5, output=5))
        )
        handle = MeteredModel(MODEL, provider=provider)
        selector = ModelSelector(
            agent,
            {"solver": [handle]},
            data,
            lambda expected, answer: expected == answer,
            algorithm="brute_force",
            budget=Budget(max_tokens=3000),
            cache=ResponseCache(tmp_path / "cache.sqlite"),
            journal=False,
            max_concurrent=1,
            seed=1,
        )
        result = await selector.select_best()
        return provider.calls, result.cost_usd

    assert await once() == (3, 45.0)
    assert await once() == (0, 0.0)
