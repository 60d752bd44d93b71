"""Faults of ``phi mcp serve`` found by an audit, each pinned by a behaviour test: models naming
an endpoint or a file, the keys' limits and ``[gateway]`` settings over HTTP, cancelled races in
the run log, the ``Host`` check on every address, and the tools' argument errors."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

from phi_core.errors import UserError
from phi_core.gateway._service import Caller
from phi_core.mcp_server import _CALLER, RaceTools, load_config, load_profiles, mcp_server
from phi_core.runlog import RunLog
from phi_core.testing import Hang, ScriptedProvider

from .conftest import Setup, phi_command
from .test_race_tools import JUDGED
from .test_race_tools import scripted as race_models


def scripted() -> dict[str, ScriptedProvider]:
    """The race tools' scripted models, and one that never finishes."""
    hang = ScriptedProvider(default=Hang("partial"), name="scripted:hang")
    return {**race_models(), "scripted:hang": hang}


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


# --------------------------------------------------------------------------- 1. models


async def test_a_caller_cannot_point_the_server_at_an_endpoint_or_probe_its_files(
    tmp_path: Path, strict_loop: list[Any]
) -> None:
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("TOPSECRET-CONTENT\n", encoding="utf-8")
    missing = tmp_path / "nope" / "model.gguf"
    tools = RaceTools(providers=scripted())
    async with Client(mcp_server(tools)) as client:
        endpoint = await client.call_tool(
            "race", {"prompt": "hi", "models": ["openai-compat:m@http://127.0.0.1:9/v1"]}
        )
        judge_endpoint = await client.call_tool(
            "race",
            {"prompt": "hi", "models": ["scripted:a"], "judge": "openai-compat:j@http://x/v1"},
        )
        existing = await client.call_tool(
            "race", {"prompt": "hi", "models": [f"local:{secret_file}"]}
        )
        absent = await client.call_tool("route", {"prompt": "hi", "models": [f"local:{missing}"]})
    assert endpoint.is_error and "names its own endpoint" in text_of(endpoint)
    assert judge_endpoint.is_error and "names its own endpoint" in text_of(judge_endpoint)
    assert existing.is_error and absent.is_error
    assert "TOPSECRET" not in text_of(existing) and "starts with" not in text_of(existing)
    # The same answer whether the file exists or not: nothing is learned about the disk.
    assert text_of(existing).replace(str(secret_file), "P") == text_of(absent).replace(
        str(missing), "P"
    ).replace("tool route", "tool race")
    assert "names a local model file" in text_of(existing)


def test_offered_models_may_be_named_and_passthrough_off_refuses_the_rest(tmp_path: Path) -> None:
    listed = "openai-compat:m@http://127.0.0.1:9/v1"
    gateway = tmp_path / "gateway.toml"
    gateway.write_text(
        f'[gateway]\npassthrough = false\nmodels = ["{listed}"]\n\n{JUDGED}', encoding="utf-8"
    )
    loaded = load_config([gateway])
    assert (loaded.passthrough, loaded.models) == (False, (listed,))
    tools = RaceTools(loaded.profiles, models=loaded.models, passthrough=loaded.passthrough)
    tools.check_model(listed)  # listed in the config: served
    tools.check_model("scripted:a@temperature=0.1")  # a profile's model, with settings
    tools.check_model("a", tools.profiles["judged"].spec.branches or [])  # a branch name
    tools.check_model("local:smollm2")  # bundled: no file named by the caller
    with pytest.raises(UserError, match="not offered by this server"):
        tools.check_model("openai:gpt-4o")
    open_tools = RaceTools(loaded.profiles)
    open_tools.check_model("openai:gpt-4o")  # passthrough on: catalogue names are fine
    with pytest.raises(UserError, match="names its own endpoint"):
        open_tools.check_model("ollama:llama3@http://10.0.0.1:11434")


# --------------------------------------------------------------------------- 5. arguments


async def test_argument_errors_name_the_argument_and_its_range(
    tmp_path: Path, strict_loop: list[Any]
) -> None:
    gateway = tmp_path / "gateway.toml"
    gateway.write_text(JUDGED, encoding="utf-8")
    profiles, _ = load_profiles([gateway])
    tools = RaceTools(profiles, providers=scripted())
    calls = {
        "inf": {"max_cost_usd": "inf"},
        "nan": {"max_cost_usd": "NaN"},
        "huge_tokens": {"max_tokens": 10**30},
        "zero_tokens": {"max_tokens": 0},
        "extra": {"extra_arg": 1},
        "models_type": {"models": "scripted:a"},
        "too_many_models": {"models": ["scripted:a"] * 300},
    }
    async with Client(mcp_server(tools)) as client:
        results = {
            name: await client.call_tool("race", {"prompt": "hi", "profile": "judged", **args})
            for name, args in calls.items()
        }
        number_prompt = await client.call_tool("race", {"prompt": 123})
        listing = await client.call_tool("models", {"x": 1})
        picked = await client.call_tool(
            "race", {"prompt": "hi", "profile": "judged", "strategy": "pick-first"}
        )
        voted = await client.call_tool(
            "race", {"prompt": "hi", "profile": "judged", "strategy": "vote"}
        )
    texts = {name: text_of(r) for name, r in results.items()}
    assert all(r.is_error for r in results.values()), texts
    assert all("pydantic" not in t for t in texts.values()), texts
    for name in ("inf", "nan"):
        assert "`max_cost_usd` must be a finite number of dollars > 0" in texts[name]
    for name in ("huge_tokens", "zero_tokens"):
        assert "`max_tokens` must be a whole number from 1 to 1,000,000" in texts[name]
    assert "Unknown argument 'extra_arg'" in texts["extra"] and "`max_tokens`" in texts["extra"]
    for name in ("models_type", "too_many_models"):
        assert "`models` must be a list of up to 16 model strings" in texts[name]
    assert number_prompt.is_error and "`prompt` must be a string" in text_of(number_prompt)
    assert listing.is_error and "`models` takes no arguments" in text_of(listing)
    # The profile's judge is not the caller's doing: no warning about it.
    for result in (picked, voted):
        assert not result.is_error, text_of(result)
        assert result.structured_content is not None
        assert result.structured_content["warnings"] == []
    with pytest.raises(UserError, match="max_tokens must be from 1 to 1,000,000"):
        tools.plan(profile="judged", max_tokens=10**30)
    with pytest.raises(UserError, match=r"max_cost_usd must be > 0 \(a finite number"):
        tools.plan(profile="judged", max_cost_usd=float("inf"))


# --------------------------------------------------------------------------- 3. cancellation


async def test_a_cancelled_race_is_stopped_and_logged_once_as_cancelled(
    tmp_path: Path, strict_loop: list[Any]
) -> None:
    log = RunLog(tmp_path / "logs.db")
    tools = RaceTools(providers=scripted(), run_log=log)
    async with Client(mcp_server(tools)) as client:
        with pytest.raises(MCPError, match=r"(?i)timed out"):
            await client.call_tool(
                "race",
                {"prompt": "slow", "models": ["scripted:a", "scripted:hang"]},
                read_timeout_seconds=1,
            )
        for _ in range(100):  # the record is written as the race stops, just after the cancel
            if log.list_runs():
                break
            await asyncio.sleep(0.05)
        still = await client.call_tool("models", {})
    runs = log.list_runs()
    log.close()
    assert not still.is_error
    assert len(runs) == 1, runs
    record = runs[0]
    assert (record.source, record.status) == ("mcp", "cancelled")
    assert any("cancelled" in w for w in record.warnings)
    statuses = {b.label: b.status for b in record.branches}
    assert statuses["scripted:hang"] == "cancelled"
    assert record.input_tokens > 0  # the usage the branches caused before the cancel


# --------------------------------------------------------------------------- HTTP servers


@asynccontextmanager
async def http_server(
    config: Path, env: dict[str, str], *extra: str, host: str = "127.0.0.1"
) -> AsyncIterator[str]:
    """``phi mcp serve --http --port 0 --host HOST``; yields the URL it announces."""
    process = await asyncio.create_subprocess_exec(
        phi_command(), "mcp", "serve", "--http", "--port", "0", "--host", host,
        "--config", str(config), *extra,
        env={**os.environ, **env}, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        line = ""
        while "listening on http" not in line:
            line = (await asyncio.wait_for(process.stderr.readline(), 60)).decode()
            assert line, "the server exited before listening"
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), 30)


KEYED = """\
[gateway]
run_log = false

[[gateway.keys]]
name = "limited"
key = "k-limited-1"
requests_per_minute = 2
models = ["race:cheap"]

[[gateway.keys]]
name = "open"
key = "k-open-1"

[profiles.cheap]
strategy = "pick-first"
[[profiles.cheap.branches]]
model = "openai:gpt-4o-mini"

[profiles.pricey]
strategy = "pick-first"
[[profiles.pricey.branches]]
model = "openai:gpt-4o"
"""


@pytest.mark.server
async def test_http_keys_limits_and_run_log_setting_apply_to_tool_calls(
    setup: Setup, tmp_path: Path, strict_loop: list[Any]
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(KEYED, encoding="utf-8")

    async def calls(url: str, key: str, *arguments: dict[str, Any]) -> list[CallToolResult]:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            httpx2.AsyncClient(headers=headers) as keyed,
            Client(streamable_http_client(url, http_client=keyed)) as client,
        ):
            return [await client.call_tool("race", {"prompt": "hi", **a}) for a in arguments]

    async with http_server(config, setup.env) as url:
        pricey, direct, first, second, third = await calls(
            url, "k-limited-1",
            {"profile": "pricey"}, {"models": ["openai:gpt-4o"]},
            {"profile": "cheap"}, {"profile": "cheap"}, {"profile": "cheap"},
        )  # fmt: skip
        (unlimited,) = await calls(url, "k-open-1", {"profile": "pricey"})
    assert pricey.is_error and "may not call 'race:pricey'" in text_of(pricey)
    assert direct.is_error and "may not call 'openai:gpt-4o'" in text_of(direct)
    assert not first.is_error and not second.is_error, (text_of(first), text_of(second))
    assert third.is_error and "limit of 2 requests per minute" in text_of(third)
    assert not unlimited.is_error, text_of(unlimited)
    # Refused calls reached no model: cheap twice, pricey once (the unlimited key).
    assert sorted(setup.branch_requests()) == ["gpt-4o", "gpt-4o-mini", "gpt-4o-mini"]
    # [gateway] run_log = false: nothing recorded.
    with RunLog() as log:
        assert log.list_runs() == []


@pytest.mark.server
@pytest.mark.parametrize("host", ["127.0.0.2", "0.0.0.0"])
async def test_http_host_check_on_every_address(
    setup: Setup, host: str, strict_loop: list[Any]
) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    accept = {"Accept": "application/json, text/event-stream"}
    async with http_server(setup.race_file, setup.env, host=host) as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        target = f"http://127.0.0.1:{port}/mcp" if host == "0.0.0.0" else url
        async with httpx2.AsyncClient() as raw:
            evil = await raw.post(
                target, json=init, headers={**accept, "Host": f"evil.example:{port}"}
            )
            by_address = await raw.post(target, json=init, headers=accept)
            by_name = await raw.post(
                target, json=init, headers={**accept, "Host": f"localhost:{port}"}
            )
    assert evil.status_code == 400, evil.text
    assert "evil.example" in evil.json()["error"]["message"]
    assert by_address.status_code == 200, by_address.text
    assert by_name.status_code == 200, by_name.text


def test_the_models_tool_lists_only_what_the_callers_key_and_the_server_allow(
    tmp_path: Path,
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(KEYED, encoding="utf-8")
    loaded = load_config([config])
    tools = RaceTools(loaded.profiles)
    limited, unlimited = (Caller(k.name, k) for k in loaded.api_keys)

    def listing(caller: Caller | None, of: RaceTools = tools) -> tuple[set[str], set[str]]:
        token = _CALLER.set(caller)
        try:
            shown = of.models()
        finally:
            _CALLER.reset(token)
        return {p["name"] for p in shown["profiles"]}, {m["model"] for m in shown["models"]}

    assert listing(limited) == ({"cheap"}, set())  # its key lists race:cheap only
    everything = listing(unlimited)
    assert everything[0] >= {"cheap", "pricey"} and "openai:gpt-4o" in everything[1]
    assert listing(None) == everything  # stdio: no key
    closed = RaceTools(loaded.profiles, passthrough=False)
    assert "openai:gpt-4o" in listing(None, closed)[1]  # a profile's model
    assert listing(None, closed)[1] <= closed.offered
    assert "anthropic:claude-sonnet-4" not in listing(None, closed)[1]


@pytest.mark.server
async def test_http_bodies_past_max_body_bytes_get_a_413(
    setup: Setup, tmp_path: Path, strict_loop: list[Any]
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f"[gateway]\nmax_body_bytes = 2048\n\n{JUDGED}", encoding="utf-8")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t" * 10_000, "version": "1"}}}  # fmt: skip
    accept = {"Accept": "application/json, text/event-stream"}
    async with http_server(config, setup.env) as url, httpx2.AsyncClient() as raw:
        big = await raw.post(url, json=init, headers=accept)
        init["params"]["clientInfo"] = {"name": "t", "version": "1"}  # type: ignore[index]
        small = await raw.post(url, json=init, headers=accept)
    assert big.status_code == 413, big.text
    assert "2,048 bytes" in big.json()["error"]["message"]
    assert small.status_code == 200, small.text
