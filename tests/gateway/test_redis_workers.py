"""Two ``phi serve`` workers sharing a real ``redis-server``: 4 clients × 200 ``route:``
requests, each scored through ``/v1/feedback``; the router statistics in Redis equal the sum of
every update the workers reported (the races' own rewards plus the feedback), per arm."""

from __future__ import annotations

import asyncio
import shutil
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from phi_core.routing.stores import open_state_store

from ..providers.fakes import FakeServer
from .process import free_port, phi_serve

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
    pytest.mark.timeout(300),
]

CLIENTS, REQUESTS = 4, 200


@pytest.fixture
async def redis_url(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no", "--dir", str(tmp_path),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        client = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                if await asyncio.to_thread(client.ping):
                    break
            except redis.ConnectionError:
                await asyncio.sleep(0.05)
        client.close()
        yield url
    finally:
        process.terminate()
        await process.wait()


async def test_two_workers_share_router_statistics_through_redis(
    strict_loop: Any, upstream: FakeServer, redis_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    arms = "\n".join(
        f'[[profiles.duo.branches]]\nname = "{n}"\nmodel = "openai-compat:{n}@{upstream.url}/v1"'
        for n in ("alpha", "beta")
    )
    config.write_text(
        f'[gateway]\nretries = 0\nstate = "{redis_url}"\nrun_log = false\n\n'
        f'[profiles.duo]\nstrategy = "bandit"\n{arms}\n'
    )
    weights: dict[str, float] = defaultdict(float)
    rewards: dict[str, float] = defaultdict(float)
    actions: dict[str, int] = defaultdict(int)

    async def client(number: int, url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for i in range(REQUESTS):
                body = {"model": "route:duo",
                        "messages": [{"role": "user", "content": f"client {number} query {i}"}]}  # fmt: skip
                reply = (await http.post("/v1/chat/completions", json=body)).json()
                phi = reply["phi"]
                actions[phi["action"]] += 1
                for update in phi["rewards"]:
                    weights[update["arm"]] += update["weight"]
                    rewards[update["arm"]] += update["weight"] * update["reward"]
                score = (i % 5) / 4
                feedback = await http.post("/v1/feedback", json={"id": reply["id"], "score": score})
                assert feedback.status_code == 200, feedback.text
                weights[phi["winner"]] += 1.0
                rewards[phi["winner"]] += score

    async with phi_serve(config, "--workers", "2") as (url, _), asyncio.TaskGroup() as group:
        for number in range(CLIENTS):
            group.create_task(client(number, url))
    store = open_state_store(redis_url)
    [namespace] = store.namespaces()
    stats = store.load(namespace)
    assert sum(actions.values()) == CLIENTS * REQUESTS
    assert set(stats) == set(weights)
    for arm, expected in weights.items():
        assert stats[arm].n == pytest.approx(expected)
        assert stats[arm].reward_sum == pytest.approx(rewards[arm])
    # the races' own updates are there too, not only the feedback
    assert sum(weights.values()) > CLIENTS * REQUESTS


async def test_daily_spend_is_shared_by_workers(
    strict_loop: Any, upstream: FakeServer, redis_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[gateway]\nretries = 0\nstate = "{redis_url}"\nrun_log = false\n\n'
        '[[gateway.keys]]\nname = "cheap"\nkey = "sk-cheap"\ndaily_usd = 0.000006\n'
    )
    env = {"OPENAI_BASE_URL": f"{upstream.url}/v1", "OPENAI_API_KEY": "sk-upstream-test"}
    # room for one call's worst case (its input and 5 output tokens), not for two
    body = {
        "model": "openai:gpt-4o-mini",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    statuses = []
    async with phi_serve(config, "--workers", "2", env=env) as (url, _):
        for _ in range(6):  # a new connection each time: the kernel spreads them over workers
            async with httpx.AsyncClient(headers={"Authorization": "Bearer sk-cheap"}) as client:
                statuses.append(
                    (await client.post(f"{url}/v1/chat/completions", json=body)).status_code
                )
    # the first answer spends the day's dollars for every worker, not only the one that served it
    assert statuses == [200, 429, 429, 429, 429, 429]
    assert len(upstream.requests) == 1


async def test_not_ready_while_redis_is_unreachable(strict_loop: Any, upstream: FakeServer) -> None:
    from phi_core.gateway import Gateway

    from .helpers import gateway_config

    gone = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    gateway = Gateway(gateway_config(upstream.url, state=gone), run_log=None)
    await gateway.start()
    try:
        why = await gateway.check_ready()
    finally:
        await gateway.close()
    assert why is not None and "redis unreachable" in why
