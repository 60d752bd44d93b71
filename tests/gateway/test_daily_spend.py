"""A key's ``daily_usd`` is a budget, not a check: every call of its requests reserves its worst
case against what is left of the day (so a request never spends past it, and concurrent requests
do not each spend the same remainder), and a refused call answers 429 naming the limit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from phi_core.errors import ConfigError
from phi_core.gateway import Gateway
from phi_core.gateway._config import load_gateway_config
from phi_core.gateway._limits import day_window

from ..providers.fakes import FakeServer, Recorded, Stream
from ..providers.fakes.openai_wire import text_reply
from .helpers import gateway_config, live_gateway

MODEL = "openai:gpt-4o-mini"  # priced: $0.15 / $0.60 per million input / output tokens
ONE_REPLY_USD = (10 * 0.15 + 5 * 0.60) / 1e6  # what one answer of the fake upstream costs


def slow_reply(record: Recorded) -> Stream:
    """10 input and 5 output tokens, slowly (so requests overlap)."""
    return Stream(text_reply(f"{record.json['model']} says hi", prompt=10, completion=5),
                  interval=0.3)  # fmt: skip


async def spent(gateway: Gateway, key: str) -> float:
    return await gateway.counters.spend(key, day_window()[0], 0.0, 86_400)


def body(max_tokens: int) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
    }


@pytest.fixture
async def slow_upstream(monkeypatch: pytest.MonkeyPatch) -> Any:
    async with FakeServer(default=slow_reply) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-test")
        yield server


def keyed_gateway(upstream: FakeServer, daily_usd: float) -> Gateway:
    keys = [{"name": "cheap", "key": "sk-cheap", "daily_usd": daily_usd}]
    return Gateway(gateway_config(upstream.url, keys=keys), run_log=None)


async def test_a_call_that_could_spend_past_the_daily_limit_is_refused_with_429(
    strict_loop: Any, slow_upstream: FakeServer
) -> None:
    # one answer costs $0.0000045 > $0.000001: before, it was sent and the key ended over its
    # limit; now its reservation (its worst case) does not fit, so it is never sent
    gateway = keyed_gateway(slow_upstream, 0.000001)
    async with (
        live_gateway(gateway) as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer sk-cheap"}) as client,
    ):
        refused = await client.post("/v1/chat/completions", json=body(5))
        streamed = await client.post("/v1/chat/completions", json={**body(5), "stream": True})
        key_spent = await spent(gateway, "cheap")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "daily_spend_exceeded" and error["type"] == "insufficient_quota"
    assert "'cheap'" in error["message"] and "daily_usd" in error["message"]
    assert int(refused.headers["retry-after"]) >= 1
    assert streamed.status_code == 429 and "daily_spend_exceeded" in streamed.text
    assert slow_upstream.requests == []  # nothing was sent upstream
    assert key_spent == 0.0 <= 0.000001


async def test_race_whose_calls_the_daily_limit_refuses_is_a_429(
    strict_loop: Any, slow_upstream: FakeServer
) -> None:
    keys = [{"name": "cheap", "key": "sk-cheap", "daily_usd": 0.000001}]
    config = gateway_config(slow_upstream.url, keys=keys)
    branches = [{"name": "mini", "model": MODEL}, {"name": "big", "model": "openai:gpt-4o"}]
    config.profiles["paid"] = type(config.profiles["first"]).model_validate(
        {"strategy": "pick-first", "branches": branches}
    )
    gateway = Gateway(config, run_log=None)
    async with (
        live_gateway(gateway) as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer sk-cheap"}) as client,
    ):
        refused = await client.post("/v1/chat/completions", json={**body(5), "model": "race:paid"})
        key_spent = await spent(gateway, "cheap")
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "daily_spend_exceeded"
    assert slow_upstream.requests == [] and key_spent == 0.0


async def test_concurrent_requests_of_a_key_reserve_from_one_remainder(
    strict_loop: Any, slow_upstream: FakeServer
) -> None:
    # a call with max_tokens=1000 may cost up to ~$0.0006; $0.001 fits one such call in flight,
    # not two: the second request must not spend the remainder the first one holds
    gateway = keyed_gateway(slow_upstream, 0.001)
    async with (
        live_gateway(gateway) as url,
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": "Bearer sk-cheap"}, timeout=30
        ) as client,
    ):
        first, second = await asyncio.gather(
            client.post("/v1/chat/completions", json=body(1000)),
            client.post("/v1/chat/completions", json=body(1000)),
        )
        after = await client.post("/v1/chat/completions", json=body(1000))  # nothing in flight
        key_spent = await spent(gateway, "cheap")
    statuses = sorted([first.status_code, second.status_code])
    assert statuses == [200, 429]
    refused = first if first.status_code == 429 else second
    assert refused.json()["error"]["code"] == "daily_spend_exceeded"
    assert after.status_code == 200  # the first request's hold was released when it ended
    assert len(slow_upstream.requests) == 2
    assert key_spent == pytest.approx(2 * ONE_REPLY_USD) and key_spent <= 0.001
    assert gateway._held == {}  # no request holds the key's allowance any more


async def test_spend_stays_within_the_limit_over_many_requests(
    strict_loop: Any, slow_upstream: FakeServer
) -> None:
    daily = 0.00002  # max_tokens=5: each call reserves a few millionths of a dollar
    gateway = keyed_gateway(slow_upstream, daily)
    async with (
        live_gateway(gateway) as url,
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": "Bearer sk-cheap"}, timeout=30
        ) as client,
    ):
        answers = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=body(5)) for _ in range(8))
        )
        key_spent = await spent(gateway, "cheap")
    statuses = [a.status_code for a in answers]
    assert 200 in statuses and 429 in statuses and set(statuses) == {200, 429}
    assert key_spent <= daily
    assert key_spent == pytest.approx(statuses.count(200) * ONE_REPLY_USD)


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1", "1e308", "-inf"])
def test_daily_usd_must_be_a_finite_positive_sensible_number(tmp_path: Path, value: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f'[[gateway.keys]]\nname = "k"\nkey = "sk-1"\ndaily_usd = {value}\n')
    with pytest.raises(ConfigError) as refused:
        load_gateway_config(path)
    message = str(refused.value)
    assert f"{path}:4" in message and "gateway.keys[0].daily_usd" in message
    assert "finite" in message


def test_a_sensible_daily_usd_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[[gateway.keys]]\nname = "k"\nkey = "sk-1"\ndaily_usd = 5\n')
    assert load_gateway_config(path).gateway.keys[0].daily_usd == 5.0
