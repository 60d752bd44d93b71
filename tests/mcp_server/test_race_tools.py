"""The MCP server's profiles, limits and tools in-process (the SDK's client connected directly),
with scripted providers; the transports are covered in ``test_mcp_serve.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from phi_core.config import EMBEDDED_DEFAULT_STRATEGY, RaceSpec, plan_race
from phi_core.errors import ConfigError, UserError
from phi_core.mcp_server import DEFAULT_PROFILE, RaceTools, load_profiles, mcp_server
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import Usage

JUDGED = """\
[profiles.judged]
strategy = "judge"
judge = "scripted:judge"
[[profiles.judged.branches]]
name = "a"
model = "scripted:a"
[[profiles.judged.branches]]
name = "b"
model = "scripted:b"
"""

GATEWAY_FILE = (
    """\
[gateway]
state = "{state}"

[profiles.fast]
strategy = "pick-first"
[[profiles.fast.branches]]
model = "scripted:a"

"""
    + JUDGED
)


def scripted() -> dict[str, ScriptedProvider]:
    return {
        "scripted:a": ScriptedProvider(
            default=Reply("answer A", usage=Usage(input=7, output=3)), name="scripted:a"
        ),
        "scripted:b": ScriptedProvider(
            default=Reply("answer B", usage=Usage(input=9, output=4)), name="scripted:b"
        ),
        "scripted:judge": ScriptedProvider(default="2", name="scripted:judge"),
    }


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_profiles_come_from_gateway_files_and_race_files(tmp_path: Path) -> None:
    gateway = write(tmp_path, "gateway.toml", GATEWAY_FILE.format(state=tmp_path / "s.sqlite"))
    race = write(tmp_path, "solo.toml", '[[branches]]\nmodel = "scripted:b"\n')
    profiles, state = load_profiles([gateway, race])
    assert set(profiles) == {"fast", "judged", "solo", DEFAULT_PROFILE}
    assert state == str(tmp_path / "s.sqlite")
    assert profiles["solo"].source == str(race)
    assert profiles["judged"].describe() == {
        "name": "judged",
        "source": str(gateway),
        "strategy": "judge",
        "branches": [{"name": "a", "model": "scripted:a"}, {"name": "b", "model": "scripted:b"}],
        "judge": "scripted:judge",
    }
    # The built-in profile races the default configurations of the embedded model.
    default = profiles[DEFAULT_PROFILE].describe()
    assert {b["model"] for b in default["branches"]} == {"local:smollm2"}
    # the strategy it really races with, not "judge" (three local branches, no judge)
    assert default["strategy"] == plan_race(RaceSpec()).strategy == EMBEDDED_DEFAULT_STRATEGY
    assert profiles["solo"].describe()["strategy"] == plan_race(profiles["solo"].spec).strategy


def test_two_files_offering_one_profile_and_a_bad_file_are_errors(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = write(tmp_path / "a", "same.toml", '[[branches]]\nmodel = "scripted:a"\n')
    two = write(tmp_path / "b", "same.toml", '[[branches]]\nmodel = "scripted:b"\n')
    with pytest.raises(UserError, match="Two config files offer the profile 'same'"):
        load_profiles([one, two])
    bad = write(tmp_path, "bad.toml", 'strategy = "judge"\n[[branches]]\ntemperature = 0.2\n')
    with pytest.raises(ConfigError, match=r"bad\.toml") as caught:
        load_profiles([bad])
    assert "model" in str(caught.value)


def test_a_caller_may_spend_less_than_the_server_cap_never_more() -> None:
    tools = RaceTools(providers=scripted(), max_cost_usd=0.01)
    generous = tools.plan(models=["scripted:a", "scripted:b"], max_cost_usd=5.0)
    frugal = tools.plan(models=["scripted:a", "scripted:b"], max_cost_usd=0.001)
    unasked = tools.plan(models=["scripted:a", "scripted:b"])
    assert generous.budget is not None and generous.budget.max_cost_usd == 0.01
    assert frugal.budget is not None and frugal.budget.max_cost_usd == 0.001
    assert unasked.budget is not None and unasked.budget.max_cost_usd == 0.01
    with pytest.raises(UserError, match="max_cost_usd must be > 0"):
        tools.plan(models=["scripted:a"], max_cost_usd=0)


async def test_in_process_race_returns_the_judged_winner_and_usage(
    tmp_path: Path, strict_loop: list[Any]
) -> None:
    gateway = write(tmp_path, "gateway.toml", GATEWAY_FILE.format(state=tmp_path / "s.sqlite"))
    profiles, state = load_profiles([gateway])
    tools = RaceTools(profiles, state=state, providers=scripted())
    progress: list[tuple[float, float | None, str | None]] = []

    async def heard(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with Client(mcp_server(tools)) as client:
        result = await client.call_tool(
            "race", {"prompt": "Which?", "profile": "judged"}, progress_callback=heard
        )
        fast = await client.call_tool("race", {"prompt": "Which?", "profile": "fast"})
    # Each model call that ended was reported: two branches, then the judge.
    assert [(d, t) for d, t, _ in progress] == [(1, 3), (2, 3), (3, 3)]
    assert progress[-1][2] == "3 of up to 3 model calls finished"
    assert not result.is_error
    race = result.structured_content
    assert race is not None
    assert (race["winner"], race["text"]) == ("b", "answer B")
    assert race["rationale"] == "the judge chose response 2 (branch 1)"
    usage = {b["name"]: b["usage"] for b in race["branches"]}
    assert (usage["a"]["input"], usage["b"]["output"]) == (7, 4)
    assert fast.structured_content is not None
    assert fast.structured_content["text"] == "answer A"


async def test_unknown_profile_lists_the_offered_ones(strict_loop: list[Any]) -> None:
    async with Client(mcp_server(RaceTools(providers=scripted()))) as client:
        result = await client.call_tool("route", {"prompt": "hi", "profile": "nope"})
    assert result.is_error
    text = "".join(c.text for c in result.content if isinstance(c, TextContent))
    assert "Unknown profile 'nope'" in text and "offers: default" in text


def test_cli_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.toml", "strategy = 'judgee'\n")
    phi = Path(sys.executable).with_name("phi")
    done = subprocess.run(
        [str(phi), "mcp", "serve", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "bad.toml" in done.stderr and "judge" in done.stderr


async def test_http_connections_get_tcp_nodelay(strict_loop: list[Any]) -> None:
    """The socket `serve_http` listens on (phi view's) must say TCP, or asyncio leaves Nagle on
    and every streamed reply waits ~40 ms for the client's delayed ACK."""
    import asyncio
    import socket

    from phi_core._net import listening_socket

    seen: list[int] = []

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("socket").getsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY))  # fmt: skip
        writer.close()
        await writer.wait_closed()

    sock = listening_socket("127.0.0.1", 0)
    server = await asyncio.start_server(accepted, sock=sock)
    async with server:
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        assert await reader.read() == b""  # the server closed it after looking
        writer.close()
        await writer.wait_closed()
    assert seen == [1]


async def test_gateway_retries_apply_to_every_branch_and_the_judge(
    tmp_path: Path, strict_loop: list[Any]
) -> None:
    """``[gateway] retries`` (the smallest a file sets) is the retry policy of every branch and
    judge, as in ``phi serve``: a branch rate-limited once answers with one retry and fails
    with none. A file that does not set it leaves each race's own policy."""
    from phi_core.errors import RateLimitedError
    from phi_core.mcp_server import load_config
    from phi_core.testing import Fail

    one = write(tmp_path, "one.toml", f"[gateway]\nretries = 3\n\n{JUDGED}")
    none = write(tmp_path, "none.toml", "[gateway]\nretries = 0\n")
    unset = write(tmp_path, "unset.toml", "[gateway]\nrun_log = true\n")
    assert load_config([one, none]).retries == 0
    assert load_config([one]).retries == 3
    assert load_config([unset]).retries is None
    assert RaceTools(load_config([unset]).profiles).retry is None

    def flaky() -> dict[str, ScriptedProvider]:
        providers = scripted()
        providers["scripted:a"] = ScriptedProvider(
            [Fail(RateLimitedError("slow down", retry_after=0.0)), Reply("answer A")],
            name="scripted:a",
        )
        return providers

    for retries, a_answers in ((1, True), (0, False)):
        tools = RaceTools(load_config([one]).profiles, providers=flaky(), retries=retries)
        plan = tools.plan(profile="judged")
        assert plan.judge_config is not None
        assert {c.retry.max_retries for c in [*plan.configs, plan.judge_config]} == {retries}
        race = await tools.race("Which?", profile="judged")
        status = {b["name"]: b["status"] for b in race["branches"]}
        assert (status["a"] == "ok") is a_answers, status
    with pytest.raises(UserError, match="retries must be a whole number"):
        RaceTools(retries=-1)


def test_the_models_listing_never_shows_a_token_in_an_endpoint_url(tmp_path: Path) -> None:
    secret = "hunter2hunter2"
    model = f"openai-compat:alpha@http://127.0.0.1:9/v1?api_key={secret}"
    path = write(
        tmp_path, "gateway.toml", f'[profiles.p]\n[[profiles.p.branches]]\nmodel = "{model}"\n'
    )
    profiles, _ = load_profiles([path])
    listing = RaceTools(profiles, models=[model], passthrough=False).models()
    assert secret not in repr(listing) and "api_key=[REDACTED]" in repr(listing)


def test_a_call_may_not_name_more_than_sixteen_models() -> None:
    with pytest.raises(UserError, match="at most 16"):
        RaceTools(providers=scripted()).plan(models=["scripted:a"] * 17)


async def test_route_on_a_malformed_redis_state_says_why(strict_loop: list[Any]) -> None:
    tools = RaceTools(state="redis://127.0.0.1:abc/0", providers=scripted())
    async with Client(mcp_server(tools)) as client:
        result = await client.call_tool(
            "route", {"prompt": "hi", "models": ["scripted:a", "scripted:b"]}
        )
    assert result.is_error
    text = "".join(c.text for c in result.content if isinstance(c, TextContent))
    assert "redis://127.0.0.1:abc/0 is not a valid Redis URL (Port could not be cast" in text
