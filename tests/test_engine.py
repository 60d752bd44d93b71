"""The shared engine: one outcome, one budget (by reservation), one meter, one request identity,
one call path — as loops, races, bandit races, judges and selection see them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.errors import RateLimitedError, UserError
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.metering import Budget, Meter, metering
from phi_core.parallel import PickFirstEvaluation, agent_loop_parallel
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.providers.call import CachedResponse, ModelCall, request_key
from phi_core.providers.openai_chat import _usage
from phi_core.providers.retry import RetryPolicy
from phi_core.testing import Fail, Hang, Reply, ScriptedProvider
from phi_core.types import AssistantMessage, Pricing, Usage, UserMessage


def config(provider: ScriptedProvider, *, pricing: Pricing | None = None, **kw) -> AgentLoopConfig:
    model = ModelConfig(
        provider="test", id=provider.name, api="scripted", pricing=pricing or Pricing()
    )
    return AgentLoopConfig(model=model, provider=provider, **kw)


# ---------------------------------------------------------------------------- budget


async def test_a_call_whose_worst_case_exceeds_the_dollar_budget_is_refused_before_it_is_sent():
    provider = ScriptedProvider(default="never sent", name="dear")
    # $1 per token in and out: with max_tokens=6 one call may cost about $6.
    dear = config(provider, pricing=Pricing(input=1e6, output=1e6), max_tokens=6)
    meter = Meter(Budget(max_cost_usd=0.5))
    with metering(meter):
        result = await agent_loop("hi", AgentContext(), dear)
    assert provider.calls == 0
    assert result.reason == "limit" and result.error_kind == "budget"
    assert "dollar budget $0.5" in (result.error or "")
    assert meter.spent == 0.0 and meter.calls_sent == 0
    assert [c.error_kind for c in meter.calls] == ["budget"]  # the refusal is on record


async def test_a_token_budget_lowers_each_calls_limit_so_a_race_ends_within_it():
    providers = [ScriptedProvider(default="word " * 100, name=f"b{i}") for i in range(3)]
    result = await agent_loop_parallel(
        "q?",
        AgentContext(),
        [config(p) for p in providers],
        PickFirstEvaluation(),
        budget=Budget(max_tokens=60),
    )
    assert result.total_usage.total <= 60
    assert all(r.max_tokens is not None for p in providers for r in p.requests)


async def test_concurrent_calls_cannot_jointly_overshoot_a_dollar_budget():
    providers = [
        ScriptedProvider(
            default=Reply("ok", delay=0.05, usage=Usage(input=1, output=1)), name=f"c{i}"
        )
        for i in range(10)
    ]
    price = Pricing(input=10_000.0, output=10_000.0)  # worst case $0.03 a call (1-2 in, 1 out)
    configs = [config(p, pricing=price, max_tokens=1) for p in providers]
    result = await agent_loop_parallel(
        "q", AgentContext(), configs, PickFirstEvaluation(), budget=Budget(max_cost_usd=0.1)
    )
    sent = sum(p.calls for p in providers)
    assert 1 <= sent < 10
    assert result.cost_usd <= 0.1
    assert {o.status for o in result.outcomes} == {"ok", "over_budget"}


async def test_the_wall_clock_budget_stops_a_race_with_status_timeout(strict_loop):
    providers = [ScriptedProvider(default=Hang("partial"), name=f"h{i}") for i in range(2)]
    result = await agent_loop_parallel(
        "q", AgentContext(), [config(p) for p in providers], PickFirstEvaluation(),
        budget=Budget(max_wall_s=0.2),
    )  # fmt: skip
    assert result.status == "timeout" and not result.cancelled
    assert {o.status for o in result.outcomes} == {"timeout"}
    assert all(o.usage.output > 0 for o in result.outcomes)


def test_budget_values_are_checked():
    with pytest.raises(UserError, match="max_tokens must be > 0"):
        Budget(max_tokens=0)
    with pytest.raises(UserError, match="must be a number"):
        Budget(max_cost_usd="5")  # type: ignore[arg-type]
    assert Budget().unlimited and not Budget(max_calls=1).unlimited


# ---------------------------------------------------------------------------- outcomes


async def test_a_timed_out_branch_reports_the_tokens_it_streamed(strict_loop):
    slow = ScriptedProvider(default=Hang("twelve chars" * 10), name="slow")
    fast = ScriptedProvider(default="done", name="fast")
    result = await agent_loop_parallel(
        "q", AgentContext(), [config(slow), config(fast)], PickFirstEvaluation(),
        branch_timeout=0.2,
    )  # fmt: skip
    timed_out = result.outcomes[0]
    assert timed_out.status == "timeout" and timed_out.error_kind == "timeout"
    assert timed_out.usage.output == (120 + 2) // 3  # estimated from what streamed
    assert timed_out.usage.input > 0
    assert result.total_usage.total >= timed_out.usage.total


async def test_the_classified_provider_error_survives_into_the_loop_result_and_outcomes():
    limited = ScriptedProvider(
        default=Fail(RateLimitedError("slow down", status=429, retry_after=7.0)), name="lim"
    )
    loop = await agent_loop("q", AgentContext(), config(limited, retry=RetryPolicy.none()))
    assert loop.reason == "error" and loop.error_kind == "rate_limited"
    assert loop.retry_after == 7.0
    race = await agent_loop_parallel(
        "q", AgentContext(), [config(limited, retry=RetryPolicy.none())], PickFirstEvaluation()
    )
    (outcome,) = race.outcomes
    assert outcome.status == "error" and outcome.error_kind == "rate_limited"
    assert outcome.retry_after == 7.0


async def test_cancelling_mid_stream_counts_the_streamed_usage(strict_loop):
    from phi_core.cancel import CancelToken

    provider = ScriptedProvider(default=Hang("x" * 30), name="h")
    token = CancelToken()
    meter = Meter()

    async def cancel_soon() -> None:
        await asyncio.sleep(0.1)
        token.cancel()

    with metering(meter):
        canceller = asyncio.create_task(cancel_soon())
        result = await agent_loop("q", AgentContext(), config(provider), cancel=token)
        await canceller
    assert result.reason == "cancelled"
    assert result.usage.output == 10 and meter.usage.output == 10
    assert meter.calls[0].estimated and meter.calls[0].error_kind == "cancelled"


# ---------------------------------------------------------------------------- identity, cache


def request(**changes) -> StreamRequest:
    base = dict(
        model=ModelConfig(provider="test", id="m", api="scripted"),
        messages=[UserMessage.text("hello")],
        system_prompt="be brief",
        max_tokens=100,
        temperature=0.5,
    )
    base.update(changes)
    return StreamRequest(**base)  # type: ignore[arg-type]


def test_the_request_identity_covers_everything_sent_and_the_sample_index():
    key = request_key(request())
    assert key == request_key(request(messages=[UserMessage.text("hello")]))  # timestamps aside
    variants = [
        request(system_prompt="be long"),
        request(max_tokens=101),
        request(temperature=0.6),
        request(top_p=0.9),
        request(seed=1),
        request(thinking="low"),
        request(extra={"stop": ["x"]}),
        request(model=ModelConfig(provider="test", id="other", api="scripted")),
    ]
    keys = {request_key(v) for v in variants} | {key, request_key(request(), sample=1)}
    assert len(keys) == len(variants) + 2


class DictCache:
    def __init__(self, *, broken_put: bool = False) -> None:
        self.data: dict[str, CachedResponse] = {}
        self.broken_put = broken_put

    async def get(self, key: str) -> CachedResponse | None:
        return self.data.get(key)

    async def put(self, key: str, message: AssistantMessage, latency: float) -> None:
        if self.broken_put:
            raise OSError(28, "No space left on device")
        self.data[key] = CachedResponse(message, latency)


async def drain(call: ModelCall) -> AssistantMessage | None:
    final = None
    async for item in call.stream():
        final = getattr(item, "message", final)
    return final


async def test_a_cache_hit_is_free_and_recorded_as_cached():
    provider = ScriptedProvider(default=Reply("hi", usage=Usage(input=5, output=2)), name="m")
    cache = DictCache()
    meter = Meter(Budget(max_calls=1))
    with metering(meter):
        await drain(ModelCall(provider, request(), cache=cache))
        second = await drain(ModelCall(provider, request(), cache=cache))
    assert provider.calls == 1 and second is not None and second.text == "hi"
    assert [c.cached for c in meter.calls] == [False, True]
    assert meter.calls_sent == 1  # the hit used none of the one-call budget


async def test_a_cache_that_cannot_be_written_never_fails_a_call_already_paid_for(caplog):
    provider = ScriptedProvider(default="paid answer", name="m")
    message = await drain(ModelCall(provider, request(), cache=DictCache(broken_put=True)))
    assert message is not None and message.text == "paid answer"
    assert "response cache write failed" in caplog.text


async def test_a_caller_that_stops_reading_early_closes_the_provider_stream_at_once(
    strict_loop,
) -> None:
    """Closing the call's stream after the first delta closes the provider's stream before
    ``aclose()`` returns (not later, in a task of the event loop's async-generator finaliser)
    and counts what streamed."""
    closed: list[bool] = []

    class Tracked(ScriptedProvider):
        async def stream(self, request):  # type: ignore[no-untyped-def, override]
            try:
                async for item in super().stream(request):
                    yield item
            finally:
                closed.append(True)

    provider = Tracked(default=Reply("one two three four", usage=Usage(input=5, output=4)))
    meter = Meter()
    with metering(meter):
        stream = ModelCall(provider, request(), retry=RetryPolicy.none()).stream()
        async for _item in stream:
            break
        await stream.aclose()
        assert closed == [True]
    assert len(meter.calls) == 1 and meter.calls[0].usage.total > 0


# ---------------------------------------------------------------------------- the command


def test_timeout_is_honoured_under_the_bandit_strategy(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "scripted:slow": {"default": {"text": "late", "delay": 5}},
                "scripted:slower": {"default": {"text": "later", "delay": 5}},
            }
        )
    )
    result = CliRunner().invoke(
        app,
        [
            "race", "Q?", "-m", "scripted:slow", "-m", "scripted:slower",
            "--strategy", "bandit", "--timeout", "0.3", "--script", str(script),
            "--state", str(tmp_path / "s.sqlite"), "--json",
        ],
    )  # fmt: skip
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.exit_code == 1, result.output
    assert payload["status"] == "all_failed"
    assert {b["status"] for b in payload["branches"]} == {"timeout"}
    assert payload["wall_time_s"] < 4


async def test_a_loop_answered_from_the_response_cache_pays_nothing():
    provider = ScriptedProvider(default=Reply("hi", usage=Usage(input=10, output=5)), name="p")
    cache = DictCache()
    priced = config(provider, pricing=Pricing(input=1.0, output=1.0), response_cache=cache)
    first = await agent_loop("q", AgentContext(), priced)
    second = await agent_loop("q", AgentContext(), priced)
    assert provider.calls == 1 and second.cached_calls == 1
    assert first.cost_usd > 0 and second.cost_usd == 0.0
    assert second.usage.total == first.usage.total  # the tokens are still reported


def test_impossible_token_counts_are_refused_and_a_cache_larger_than_the_prompt_is_zero() -> None:
    """Negative usage would refund a budget and win a token-efficient race; a server that
    reports more cached tokens than prompt tokens leaves no uncached input, not a negative one."""
    with pytest.raises(ValueError, match=r"cannot be negative \(output=-3\)"):
        Usage(input=5, output=-3)
    assert _usage({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}}).input == 0
    with pytest.raises(ValueError, match="cannot be negative"):
        _usage({"prompt_tokens": 5, "completion_tokens": -200000})
