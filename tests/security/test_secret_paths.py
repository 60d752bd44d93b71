"""A key reaches none of the side doors: an image block (a text file renamed ``.png``), a tool's
update and progress events, a logged traceback, an unclassified provider error and a stored
session. (Found by a red-team pass; each test drives the real path a model or a tool takes.)"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest

from phi_core.events import ProgressMessage, ToolExecutionUpdate
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers import RetryPolicy
from phi_core.sessions import JsonFileSessionStore, SessionRecorder, SqliteSessionStore
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import ReadFileTool, ToolContext, tool
from phi_core.tools._results import finish_result
from phi_core.tools.base import ToolResult
from phi_core.types import ImageContent

from ..tools.helpers import run, text

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


def config(provider: ScriptedProvider) -> AgentLoopConfig:
    return AgentLoopConfig(provider=provider, retry=RetryPolicy.none())


async def test_a_text_file_renamed_as_an_image_is_read_as_text_and_redacted(
    tmp_path: Path, api_key: str
) -> None:
    (tmp_path / "leak.png").write_text(f"OPENAI_API_KEY={api_key}\n")
    (tmp_path / "real.png").write_bytes(PNG)
    leaked = await run(ReadFileTool(tmp_path), path="leak.png")
    real = await run(ReadFileTool(tmp_path), path="real.png")
    assert all(block.type == "text" for block in leaked.content)
    assert api_key not in text(leaked) and "[REDACTED]" in text(leaked)
    assert real.content[0].type == "image"  # a real image still comes back as one


def test_an_image_block_holding_a_key_or_not_an_image_is_left_out(api_key: str) -> None:
    def image(raw: bytes) -> ToolResult:
        block = ImageContent(data=base64.b64encode(raw).decode(), mime_type="image/png")
        return finish_result(ToolResult([block]), None)

    keyed = image(PNG + api_key.encode())
    fake = image(b"OPENAI_API_KEY=" + api_key.encode())
    kept = image(PNG)
    assert keyed.content[0].type == "text" and "hold a secret" in text(keyed)
    assert fake.content[0].type == "text" and "not a image/png image" in text(fake)
    assert kept.content[0].type == "image"


async def test_tool_updates_and_progress_lines_are_redacted_in_the_events(api_key: str) -> None:
    @tool
    async def deploy(ctx: ToolContext) -> str:
        """Deploy (a tool that echoes its configuration while it works)."""
        ctx.update(f"using OPENAI_API_KEY={api_key}")
        ctx.progress(f"authorising with {api_key}")
        return "deployed"

    events: list[Any] = []
    provider = ScriptedProvider([Reply(tool_calls=[call("deploy", {})]), Reply("done")])
    await agent_loop(
        "deploy it", AgentContext(tools=[deploy]), config(provider), events=events.append
    )
    shown = [e for e in events if isinstance(e, ToolExecutionUpdate | ProgressMessage)]
    assert len(shown) == 2 and all("[REDACTED]" in e.text for e in shown)
    assert all(api_key not in e.model_dump_json() for e in events)


async def test_a_tool_traceback_quoting_a_key_is_logged_redacted(
    api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    @tool
    async def weather(city: str) -> str:
        """Weather for a city (the key goes in the query string, as many APIs take it)."""
        raise RuntimeError(f"404 for https://api.example/weather?q={city}&appid={api_key}")

    provider = ScriptedProvider([Reply(tool_calls=[call("weather", {"city": "X"})]), Reply("ok")])
    with caplog.at_level(logging.WARNING, logger="phi_core"):
        await agent_loop("weather?", AgentContext(tools=[weather]), config(provider))
    [record] = [r for r in caplog.records if "weather" in r.getMessage()]
    formatted = logging.Formatter().format(record)
    assert "Traceback" in formatted and "RuntimeError" in formatted  # the traceback is kept
    assert api_key not in formatted and "[REDACTED]" in formatted


class _Broken(ScriptedProvider):
    """A custom provider that fails with an exception of its own (not a ProviderError)
    quoting the request's headers."""

    async def stream(self, request: Any) -> Any:  # type: ignore[override]
        raise RuntimeError(f"upstream refused: Authorization: {self.key}")
        yield  # pragma: no cover - makes this an async generator


async def test_an_unclassified_provider_error_quoting_a_key_is_redacted_in_the_events(
    api_key: str,
) -> None:
    provider = _Broken(["never"])
    provider.key = api_key  # type: ignore[attr-defined]
    events: list[Any] = []
    with pytest.raises(RuntimeError):  # a bug of the provider's: the run ends, it is raised
        await agent_loop("hi", AgentContext(), config(provider), events=events.append)
    ends = [e for e in events if e.type in ("message_end", "turn_end", "agent_end")]
    assert ends and all(api_key not in e.model_dump_json() for e in events)
    assert any("[REDACTED]" in e.model_dump_json() for e in ends)


def on_disk(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()]


@pytest.mark.parametrize("kind", ["json", "sqlite"])
async def test_a_stored_session_keeps_no_key(tmp_path: Path, api_key: str, kind: str) -> None:
    @tool
    async def show_env(ctx: ToolContext) -> str:
        """Show the environment."""
        ctx.progress(f"OPENAI_API_KEY={api_key}")
        return f"OPENAI_API_KEY={api_key}"

    recorder = SessionRecorder()
    provider = ScriptedProvider([Reply(tool_calls=[call("show_env", {})]), Reply("done")])
    context = AgentContext(tools=[show_env], agent_id="a", session_id="s", loop_id="s.c.1")
    prompt = f"my key is {api_key}, keep it safe"  # pasted by the user
    await agent_loop(prompt, context, config(provider), events=recorder)
    recorder.flush()
    [session] = recorder.drain_completed()
    store: Any = (
        JsonFileSessionStore(tmp_path / "sessions")
        if kind == "json"
        else SqliteSessionStore(tmp_path / "sessions.sqlite")
    )
    await store.save(session)
    stored = b"".join(path.read_bytes() for path in on_disk(tmp_path))
    assert api_key.encode() not in stored and b"[REDACTED]" in stored
    loaded = await store.load("s")
    assert loaded.loops and loaded.loops[0].loop_id == "s.c.1"  # still a loadable session
