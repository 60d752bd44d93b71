"""``phi mcp serve`` driven by the official ``mcp`` SDK's client, over stdio and streamable HTTP,
racing against a fake OpenAI upstream on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

from phi_core.config import EMBEDDED_DEFAULT_STRATEGY
from phi_core.providers.pricing import price_for
from phi_core.runlog import RunLog
from phi_core.types import Usage
from tests.providers.fakes import Stream
from tests.providers.fakes.openai_wire import chat_stream, chunk

from .conftest import (
    COMPLETION_TOKENS,
    JUDGE,
    PROMPT_TOKENS,
    SECRET,
    Setup,
    answer_of,
    phi_command,
)

pytestmark = pytest.mark.server


def cost_of(model: str) -> float:
    pricing = price_for("openai", model)
    assert pricing is not None
    return Usage(input=PROMPT_TOKENS, output=COMPLETION_TOKENS).cost(pricing)


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


@asynccontextmanager
async def stdio_client(setup: Setup, *extra: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=phi_command(),
        args=["mcp", "serve", "--config", str(setup.race_file), *extra],
        env=setup.env,
    )
    async with Client(params) as client:
        yield client


@asynccontextmanager
async def http_server(
    setup: Setup, *extra: str, env: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """``phi mcp serve --http --port 0`` in a subprocess; yields the URL it announces on
    stderr. The server is stopped (SIGTERM, then awaited) on the way out."""
    process = await asyncio.create_subprocess_exec(
        phi_command(), "mcp", "serve", "--http", "--port", "0",
        "--config", str(setup.race_file), *extra,
        env={**os.environ, **setup.env, **(env or {})},
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        line = (await asyncio.wait_for(process.stderr.readline(), 60)).decode()
        assert "listening on http://127.0.0.1:" in line, line
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), 30)


@asynccontextmanager
async def http_client(setup: Setup, *extra: str) -> AsyncIterator[Client]:
    async with http_server(setup, *extra) as url, Client(url) as client:
        yield client


async def test_stdio_race_returns_the_judged_winner_with_every_branch_cost(
    setup: Setup, strict_loop: list[Any]
) -> None:
    async with stdio_client(setup) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool(
            "race", {"prompt": "What is the capital of France?", "profile": "capitals"}
        )
    assert set(listed) == {"race", "route", "models"}
    assert set(listed["race"].input_schema["properties"]) == {
        "prompt", "profile", "models", "strategy", "judge", "max_tokens", "max_cost_usd",
    }  # fmt: skip
    assert listed["race"].input_schema["required"] == ["prompt"]
    assert not result.is_error, text_of(result)
    race = result.structured_content
    assert race is not None
    # The fake judge names the second answer: branch `big` (openai:gpt-4o).
    assert race["winner"] == "big"
    assert race["text"] == answer_of("gpt-4o")
    assert race["strategy"] == "judge"
    assert "judge chose response 2" in race["rationale"]
    branches = {b["name"]: b for b in race["branches"]}
    assert branches["mini"]["cost_usd"] == pytest.approx(cost_of("gpt-4o-mini"))
    assert branches["big"]["cost_usd"] == pytest.approx(cost_of("gpt-4o"))
    assert branches["big"]["usage"]["input"] == PROMPT_TOKENS
    total = cost_of("gpt-4o-mini") + cost_of("gpt-4o") + cost_of(JUDGE)
    assert race["cost_usd"] == pytest.approx(total)
    assert race["usage"]["input"] == 3 * PROMPT_TOKENS
    # Both branches and the judge really reached the upstream, with the key we gave.
    assert sorted(setup.branch_requests()) == ["gpt-4o", "gpt-4o-mini"]
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in setup.upstream.requests)
    assert SECRET not in json.dumps(race)
    # The race is in the run log, as `phi logs show` reads it.
    with RunLog() as log:
        record = log.get_run(race["run_id"])
    assert (record.source, record.winner, record.status) == ("mcp", "big", "ok")
    assert record.cost_usd == pytest.approx(total)


async def test_stdio_bad_input_is_a_tool_error_and_the_server_keeps_serving(
    setup: Setup, strict_loop: list[Any]
) -> None:
    async with stdio_client(setup) as client:
        unknown_profile = await client.call_tool("race", {"prompt": "hi", "profile": "nope"})
        unknown_model = await client.call_tool(
            "race", {"prompt": "hi", "models": ["nosuchprovider:model-x"]}
        )
        empty_prompt = await client.call_tool("race", {"prompt": "  ", "profile": "capitals"})
        bad_strategy = await client.call_tool(
            "race", {"prompt": "hi", "profile": "capitals", "strategy": "judgee"}
        )
        missing_prompt = await client.call_tool("race", {"profile": "capitals"})
        listing = await client.call_tool("models", {})
    assert unknown_profile.is_error
    assert "Unknown profile 'nope'" in text_of(unknown_profile)
    assert "capitals" in text_of(unknown_profile) and "default" in text_of(unknown_profile)
    assert unknown_model.is_error and "nosuchprovider" in text_of(unknown_model)
    assert empty_prompt.is_error and "prompt is empty" in text_of(empty_prompt)
    assert bad_strategy.is_error and "Did you mean 'judge'" in text_of(bad_strategy)
    assert missing_prompt.is_error and "prompt" in text_of(missing_prompt)
    # None of that reached the upstream, and the server still answers afterwards.
    assert setup.upstream.requests == []
    assert not listing.is_error
    data = listing.structured_content
    assert data is not None
    profiles = {p["name"]: p for p in data["profiles"]}
    assert profiles["capitals"]["branches"] == [
        {"name": "mini", "model": "openai:gpt-4o-mini"},
        {"name": "big", "model": "openai:gpt-4o"},
    ]
    assert profiles["capitals"]["judge"] == f"openai:{JUDGE}"
    assert "default" in profiles
    openai_rows = [m for m in data["models"] if m["provider"] == "openai"]
    assert openai_rows and all(m["key_set"] is True for m in openai_rows)
    assert SECRET not in json.dumps(data)


async def test_a_race_without_a_winner_is_a_tool_error_naming_each_cause(
    setup: Setup, strict_loop: list[Any]
) -> None:
    from tests.providers.fakes import Respond
    from tests.providers.fakes.openai_wire import error_body

    setup.upstream.default = Respond(401, error_body(f"bad key {SECRET}", "invalid_api_key"))
    async with stdio_client(setup) as client:
        result = await client.call_tool("race", {"prompt": "hi", "profile": "capitals"})
    assert result.is_error
    text = text_of(result)
    assert "no winner" in text and "mini:" in text and "big:" in text
    assert SECRET not in text


async def test_an_abandoned_call_closes_every_upstream_stream_and_the_server_goes_on(
    setup: Setup, strict_loop: list[Any]
) -> None:
    """The client gives up (its timeout sends `notifications/cancelled`): the race is cancelled,
    so both branches' streams to the upstream are closed, unfinished, well before they end."""
    slow = [chunk({"role": "assistant", "content": ""})] + [
        chunk({"content": f" w{i}"}) for i in range(120)
    ]
    setup.upstream.default = Stream(chat_stream(*slow), interval=0.25)  # 30 s per answer
    async with stdio_client(setup) as client:
        with pytest.raises(MCPError, match="timed out"):
            await client.call_tool(
                "race", {"prompt": "hi", "profile": "capitals"}, read_timeout_seconds=3
            )
        closed = await within(10, lambda: len(setup.upstream.requests) == 2 and all(
            r.ended_at is not None for r in setup.upstream.requests))  # fmt: skip
        listing = await client.call_tool("models", {})
    assert closed, [(r.json["model"], r.ended_at) for r in setup.upstream.requests]
    assert not any(r.completed for r in setup.upstream.requests)
    assert not listing.is_error


async def within(seconds: float, condition: Callable[[], bool]) -> bool:
    """Another process's doings are not awaitable from here: look for a bounded time."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_http_race_route_and_learning(setup: Setup, strict_loop: list[Any]) -> None:
    state = str(setup.race_file.with_name("router.sqlite"))
    async with http_client(setup, "--state", state) as client:
        raced = await client.call_tool(
            "race",
            {"prompt": "Capital of France?", "profile": "capitals", "strategy": "pick-first"},
        )
        before = await client.call_tool(
            "route", {"prompt": "Capital of France?", "profile": "capitals", "dry_run": True}
        )
        requests_before_route = len(setup.upstream.requests)
        routed = await client.call_tool(
            "route", {"prompt": "Capital of France?", "profile": "capitals"}
        )
        after = await client.call_tool(
            "route", {"prompt": "Capital of France?", "profile": "capitals", "dry_run": True}
        )
        bad = await client.call_tool("route", {"prompt": "hi", "profile": "capitals",
                                               "max_cost_usd": -1})  # fmt: skip
    assert not raced.is_error, text_of(raced)
    first = raced.structured_content
    assert first is not None and first["strategy"] == "pick-first"
    assert first["winner"] in {"mini", "big"}
    assert first["text"] == answer_of({"mini": "gpt-4o-mini", "big": "gpt-4o"}[first["winner"]])
    # A dry run ranks without calling a model; the router has seen nothing yet.
    ranking = before.structured_content
    assert ranking is not None and not before.is_error
    assert sorted(ranking["order"]) == ["big", "mini"]
    assert all(a["n"] == 0 for a in ranking["arms"])
    # The real route answers, pays, and learns: the state now has observations.
    assert not routed.is_error, text_of(routed)
    route = routed.structured_content
    assert route is not None
    assert route["strategy"] == "bandit" and route["winner"] in {"mini", "big"}
    assert route["text"] == answer_of({"mini": "gpt-4o-mini", "big": "gpt-4o"}[route["winner"]])
    assert route["cost_usd"] > 0 and route["branches"]
    assert len(setup.upstream.requests) > requests_before_route
    learned = after.structured_content
    assert learned is not None
    assert sum(a["n"] for a in learned["arms"]) > 0
    # the profile learns apart, in the namespace `phi serve` gives the same profile's route
    assert learned["namespace"] == "hashed-v1:dim=64:len=2000|route=capitals"
    assert bad.is_error and "max_cost_usd" in text_of(bad)


@pytest.mark.local_model
async def test_stdio_default_profile_races_the_embedded_model(
    setup: Setup, strict_loop: list[Any]
) -> None:
    """llama.cpp runs inside the stdio server: nothing it prints may corrupt the protocol."""
    setup.env.update(PHI_LOCAL_THREADS="1", PHI_LOCAL_POOL_SIZE="1")
    async with stdio_client(setup) as client:
        result = await client.call_tool(
            "race", {"prompt": "Name one primary color.", "max_tokens": 12}
        )
    assert not result.is_error, text_of(result)
    race = result.structured_content
    assert race is not None
    # the default profile is phi race's default: three local branches, the measured default
    assert race["profile"] == "default" and race["strategy"] == EMBEDDED_DEFAULT_STRATEGY
    assert race["winner"] in {"precise", "teacher", "storyteller"}
    assert race["text"].strip()
    assert [b["model"] for b in race["branches"]] == ["local:smollm2"] * 3
    assert race["usage"]["output"] > 0 and race["cost_usd"] == 0


async def test_http_with_keys_refuses_callers_without_one_and_serves_those_with_one(
    setup: Setup, strict_loop: list[Any]
) -> None:
    key = "sk-mcp-test-key-0123"
    async with http_server(setup, env={"PHI_GATEWAY_KEYS": f"other-key,{key}"}) as url:
        async with httpx2.AsyncClient() as raw:
            refused = await raw.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            wrong = await raw.post(
                url, json={}, headers={"Authorization": "Bearer sk-mcp-test-key-0124"}
            )
        with pytest.raises(ExceptionGroup) as no_key:  # the SDK client cannot even initialize
            async with Client(url) as client:
                await client.list_tools()
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            httpx2.AsyncClient(headers=headers) as keyed,
            Client(streamable_http_client(url, http_client=keyed)) as client,
        ):
            models = await client.call_tool("models", {})
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert refused.json()["error"]["code"] == "missing_api_key"
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert key not in wrong.text
    assert no_key.group_contains(MCPError, match="error response")
    assert not models.is_error and models.structured_content is not None
    assert not setup.upstream.requests  # nothing refused reached a model
