"""Budgets and execution limits hold what they promise: unbounded intercepted calls are reserved
at a conservative allowance, every limit is validated when built (the same way on every path),
a run deadline's stop reason names the limit that fired, and a Budget is per run unless its runs
share one Meter."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import openai
import pytest

import phi_core.metering as metering_module
from phi_core.config import bandit_race_from_plan, plan_race
from phi_core.context.limits import ExecutionLimits
from phi_core.errors import BudgetExceededError, UserError
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.metering import Budget, Meter, metering, reserve
from phi_core.parallel import PickFirstEvaluation, agent_loop_parallel
from phi_core.providers.base import ModelConfig
from phi_core.providers.catalog import MODEL_INFO
from phi_core.race import BanditOptions, build_bandit_race
from phi_core.select._intercept import InterceptScope, intercepting
from phi_core.testing import Hang, Reply, ScriptedProvider
from phi_core.types import Pricing, Usage
from tests.providers.fakes.server import FakeServer, Recorded, Respond

# $1 per token in, $2 per token out
PRICE = Pricing(input=1_000_000.0, output=2_000_000.0)


def config(
    provider: ScriptedProvider, *, limits: ExecutionLimits | None = None, **kw: Any
) -> AgentLoopConfig:
    model = ModelConfig(provider="test", id=provider.name, api="scripted", pricing=PRICE)
    return AgentLoopConfig(model=model, provider=provider, limits=limits, **kw)


def reply(text: str, inp: int, out: int, **kw: Any) -> Reply:
    return Reply(text, usage=Usage(input=inp, output=out), **kw)


# --------------------------------------------------------------------------- 1. unbounded output


def test_the_allowance_is_the_largest_output_any_catalogued_model_allows() -> None:
    assert (
        max(info.max_tokens for info in MODEL_INFO.values())
        == metering_module.UNBOUNDED_OUTPUT_ALLOWANCE
    )


def test_a_dollar_budget_reserves_an_unbounded_call_at_the_allowance() -> None:
    meter = Meter(Budget(max_cost_usd=50))
    with pytest.raises(BudgetExceededError, match="output tokens are assumed"):
        reserve(
            input_tokens=3,
            max_output=None,
            model_max_output=None,
            pricing=Pricing(input=1e6, output=1e6),
            meters=(meter,),
        )
    roomy = Meter(Budget(max_cost_usd=1.0))
    held = reserve(
        input_tokens=10,
        max_output=None,
        model_max_output=None,
        pricing=Pricing(input=1.0, output=1.0),  # $1 per million tokens
        meters=(roomy,),
    )
    assert held.max_output is None  # the request is not given a limit for it
    assert held.cost_usd == pytest.approx((10 + metering_module.UNBOUNDED_OUTPUT_ALLOWANCE) / 1e6)


def _chat_reply(output_tokens: int, delay: float = 0.0) -> Any:
    async def answer(record: Recorded) -> Respond:
        body = record.json or {}
        limit = body.get("max_tokens")
        out = output_tokens if limit is None else min(output_tokens, limit)
        await asyncio.sleep(delay)
        return Respond(
            200,
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "right"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": 3,
                    "completion_tokens": out,
                    "total_tokens": 3 + out,
                },
            },
        )

    return answer


async def test_an_unbounded_intercepted_call_to_an_unknown_model_is_budgeted() -> None:
    prices = {"my-model": {"input_price": 1e6, "output_price": 1e6}}  # $1 per token
    async with FakeServer(default=_chat_reply(1000)) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        try:
            with (
                intercepting(InterceptScope(limiter=None, model_prices=prices)),
                metering(Meter(Budget(max_cost_usd=50))) as meter,
                pytest.raises(openai.APIStatusError) as refused,
            ):
                await client.chat.completions.create(
                    model="my-model", messages=[{"role": "user", "content": "q"}]
                )
        finally:
            await client.close()
    assert refused.value.status_code == 402
    assert server.requests == []  # refused before it was sent, not billed $1,003
    assert meter.spent <= 50


async def test_in_flight_unbounded_calls_hold_their_allowance_and_go_out_unchanged() -> None:
    # $1 per million tokens: one unbounded call reserves about $0.128, so $0.2 fits one at a time
    prices = {"my-model": {"input_price": 1.0, "output_price": 1.0}}
    async with FakeServer(default=_chat_reply(1000, delay=0.3)) as server:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        try:
            with (
                intercepting(InterceptScope(limiter=None, model_prices=prices)),
                metering(Meter(Budget(max_cost_usd=0.2))),
            ):
                results = await asyncio.gather(
                    *(
                        client.chat.completions.create(
                            model="my-model", messages=[{"role": "user", "content": f"q{i}"}]
                        )
                        for i in range(2)
                    ),
                    return_exceptions=True,
                )
        finally:
            await client.close()
    refused = [r for r in results if isinstance(r, openai.APIStatusError)]
    assert len(refused) == 1 and refused[0].status_code == 402
    (sent,) = server.requests
    assert "max_tokens" not in sent.json and "max_completion_tokens" not in sent.json


# --------------------------------------------------------------------------- 2. ExecutionLimits

_HUGE = pytest.param(10**400, id="10**400")
_WHOLE_BAD = [0, -1, 2.5, math.nan, "5", True, pytest.param(10**15 + 1, id="10**15+1"), _HUGE]
_AMOUNT_BAD = [0, 0.0, -1.0, math.nan, math.inf, "5", True, _HUGE]


@pytest.mark.parametrize("value", _WHOLE_BAD)
@pytest.mark.parametrize("field", ["max_turns", "max_total_tokens"])
def test_execution_limits_refuse_a_bad_whole_number(field: str, value: Any) -> None:
    with pytest.raises(UserError, match=f"ExecutionLimits.{field} must .* got"):
        ExecutionLimits(**{field: value})


@pytest.mark.parametrize("value", _AMOUNT_BAD)
@pytest.mark.parametrize("field", ["max_duration", "max_cost"])
def test_execution_limits_refuse_a_bad_amount(field: str, value: Any) -> None:
    with pytest.raises(UserError, match=f"ExecutionLimits.{field} must .*> 0"):
        ExecutionLimits(**{field: value})


def test_execution_limits_accept_sane_values() -> None:
    ExecutionLimits()
    ExecutionLimits(max_turns=None, max_total_tokens=None, max_duration=None, max_cost=None)
    limits = ExecutionLimits(max_turns=1, max_total_tokens=10**15, max_duration=5, max_cost=0.01)
    assert limits.max_duration == 5


# --------------------------------------------------------------------------- 3. Budget


@pytest.mark.parametrize("value", _WHOLE_BAD)
@pytest.mark.parametrize("field", ["max_tokens", "max_calls"])
def test_a_budget_refuses_a_fractional_huge_or_non_int_count(field: str, value: Any) -> None:
    with pytest.raises(UserError, match=f"Budget.{field} must"):
        Budget(**{field: value})


@pytest.mark.parametrize("value", _AMOUNT_BAD)
@pytest.mark.parametrize("field", ["max_cost_usd", "max_wall_s"])
def test_a_budget_refuses_a_bad_amount(field: str, value: Any) -> None:
    with pytest.raises(UserError, match=f"Budget.{field} must"):
        Budget(**{field: value})


def test_a_budget_accepts_whole_counts_and_positive_amounts() -> None:
    budget = Budget(max_tokens=10**15, max_calls=1, max_cost_usd=1, max_wall_s=0.5)
    assert not budget.unlimited


# --------------------------------------------------------------------------- 4. bandit options


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_cost_usd", 0.0), ("max_calls", 0), ("max_total_tokens", 0), ("total_timeout_s", 0.0)],
)
def test_a_zero_bandit_limit_is_refused_on_the_plan_path_as_on_the_direct_one(
    tmp_path: Path, field: str, value: Any
) -> None:
    provider = ScriptedProvider(default="x", name="p")
    state = str(tmp_path / "router.sqlite")
    options = BanditOptions(preview_cache=False, state=state, **{field: value})
    with pytest.raises(UserError, match=f"BanditOptions.{field} must"):
        build_bandit_race(["p"], options, configs={"p": config(provider)})
    plan = plan_race(
        models=["scripted:p"], strategy="bandit", bandit=options, providers={"scripted:p": provider}
    )
    with pytest.raises(UserError, match=f"BanditOptions.{field} must"):
        bandit_race_from_plan(plan)


def test_unset_bandit_limits_still_take_the_plans_budget(tmp_path: Path) -> None:
    provider = ScriptedProvider(default="x", name="p")
    plan = plan_race(
        models=["scripted:p"],
        strategy="bandit",
        budget=Budget(max_calls=3, max_cost_usd=2.0),
        bandit=BanditOptions(
            preview_cache=False, state=str(tmp_path / "router.sqlite"), max_calls=5
        ),
        providers={"scripted:p": provider},
    )
    race = bandit_race_from_plan(plan)
    assert race.budget == Budget(max_calls=5, max_cost_usd=2.0)


# --------------------------------------------------------------------------- 5. deadline reason


async def test_a_budget_wall_mid_stream_names_the_budget_not_max_duration() -> None:
    provider = ScriptedProvider(default=Hang("partial text"), name="h")
    with metering(Meter(Budget(max_wall_s=0.2))):
        result = await agent_loop(
            "q", AgentContext(), config(provider, limits=ExecutionLimits(), max_tokens=50)
        )
    assert result.reason == "limit" and result.error_kind == "timeout"
    assert result.error is not None
    assert "max_wall_s" in result.error and "/0.2s" in result.error
    assert "600" not in result.error


async def test_a_budget_wall_mid_stream_ends_a_loop_without_execution_limits() -> None:
    provider = ScriptedProvider(default=Hang("partial text"), name="h")
    with metering(Meter(Budget(max_wall_s=0.2))):
        result = await agent_loop("q", AgentContext(), config(provider, limits=None, max_tokens=50))
    assert result.reason == "limit" and result.error is not None
    assert "max_wall_s" in result.error


async def test_max_duration_mid_stream_still_names_max_duration() -> None:
    provider = ScriptedProvider(default=Hang("partial text"), name="h")
    with metering(Meter(Budget(max_wall_s=30))):
        result = await agent_loop(
            "q",
            AgentContext(),
            config(provider, limits=ExecutionLimits(max_duration=0.2), max_tokens=50),
        )
    assert result.reason == "limit" and result.error is not None
    assert result.error.startswith("Max duration reached mid-stream") and "/0.2s" in result.error


# --------------------------------------------------------------------------- 6. per run / shared


def test_the_budget_docstring_says_it_is_per_run_and_how_to_share_one() -> None:
    doc = Budget.__doc__ or ""
    assert "Per run." in doc and "with metering(Meter(budget))" in doc
    assert "What a reservation assumes." in doc and "UNBOUNDED_OUTPUT_ALLOWANCE" in doc


async def test_one_budget_object_gives_each_concurrent_run_its_own_allowance() -> None:
    shared = Budget(max_calls=1)
    providers = [
        ScriptedProvider(default=reply("x", 1, 1, delay=0.05), name=f"r{i}") for i in range(2)
    ]

    async def race(provider: ScriptedProvider) -> Any:
        return await agent_loop_parallel(
            "q",
            AgentContext(),
            [config(provider, max_tokens=5)],
            PickFirstEvaluation(),
            budget=shared,
        )

    await asyncio.gather(*(race(p) for p in providers))
    assert sum(p.calls for p in providers) == 2  # one each: the allowance is not pooled


async def test_runs_under_one_meter_share_its_allowance() -> None:
    loops = [ScriptedProvider(default=reply("x", 1, 1, delay=0.05), name=f"l{i}") for i in range(2)]
    with metering(Meter(Budget(max_calls=1))):
        results = await asyncio.gather(
            *(agent_loop("q", AgentContext(), config(p, max_tokens=5)) for p in loops)
        )
    assert sum(p.calls for p in loops) == 1
    assert sorted(r.reason for r in results) == ["completed", "limit"]

    races = [ScriptedProvider(default=reply("x", 1, 1, delay=0.05), name=f"r{i}") for i in range(4)]

    async def race(pair: list[ScriptedProvider]) -> Any:
        return await agent_loop_parallel(
            "q",
            AgentContext(),
            [config(p, max_tokens=5) for p in pair],
            PickFirstEvaluation(),
            budget=Budget(max_calls=2),  # each race's own limit, inside the shared one
        )

    with metering(Meter(Budget(max_calls=3))) as meter:
        await asyncio.gather(race(races[:2]), race(races[2:]))
    assert sum(p.calls for p in races) == 3 == meter.calls_sent


async def test_a_budgets_wall_clock_also_stops_a_tool_still_running() -> None:
    """README: a `Budget(max_wall_s=...)` is a deadline for tools too, not only for calls."""
    from phi_core.testing import call
    from phi_core.tools import tool

    @tool
    async def slow() -> str:
        """Sleeps far past the budget."""
        await asyncio.sleep(30)
        return "done"

    provider = ScriptedProvider([Reply(tool_calls=[call("slow", {})]), Reply("final")])
    started = asyncio.get_running_loop().time()
    with metering(Meter(Budget(max_wall_s=0.3))):
        result = await agent_loop(
            "go", AgentContext(tools=[slow]), AgentLoopConfig(provider=provider)
        )
    assert asyncio.get_running_loop().time() - started < 5
    assert result.reason == "limit" and "max_wall_s" in (result.error or "")
    assert result.messages[-1].role == "tool_result"  # the stopped call has its result
