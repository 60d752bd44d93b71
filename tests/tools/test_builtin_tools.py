"""The built-in coding tools and the tool registry (study §4.12)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from phi_core.cancel import CancelToken
from phi_core.errors import UserError
from phi_core.tools import ToolContext, ToolRegistry, ToolResult, default_tools
from phi_core.tools.builtin import bash, edit_file, list_files, read_file, search, write_file


def ctx() -> ToolContext:
    return ToolContext(tool_call_id="c", tool_name="t", loop_id="l", cancel=CancelToken())


async def run(tool: Any, **args: Any) -> ToolResult:
    """Execute like the loop does: errors raised by the tool become error results."""
    try:
        value = await tool.execute(args, ctx())
    except Exception as exc:
        return ToolResult.error(str(exc))
    if isinstance(value, ToolResult):
        return value
    return ToolResult.text(str(value))


def text(result: ToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


async def test_bash_reports_exit_codes_and_blocks_destructive_commands() -> None:
    ok = await run(bash, command="echo hello")
    assert "hello" in text(ok) and "Exit code: 0" in text(ok) and not ok.is_error
    failing = await run(bash, command="exit 1")
    assert "Exit code: 1" in text(failing) and not failing.is_error
    blocked = await run(bash, command="rm -rf / --no-preserve-root")
    assert blocked.is_error and "blocked" in text(blocked)
    slow = await run(bash, command="sleep 5", timeout=0.2)
    assert slow.is_error and "timed out" in text(slow)


async def test_write_then_read_round_trips_with_line_numbers(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "dir" / "f.txt"
    written = await run(
        write_file, path=str(target), content="\n".join(f"line{i}" for i in range(1, 11))
    )
    assert text(written).startswith("Wrote ")
    window = text(await run(read_file, path=str(target), offset=5, limit=3))
    assert "line5" in window and "line7" in window and "line8" not in window
    assert "[Lines 5-7 of 10]" in window
    whole = text(await run(read_file, path=str(target)))
    assert "   1 | line1" in whole
    missing = await run(read_file, path=str(tmp_path / "nope.txt"))
    assert missing.is_error


async def test_images_come_back_as_image_blocks(tmp_path: Path) -> None:
    png = tmp_path / "x.png"
    raw = b"\x89PNG\r\n\x1a\nfake"
    png.write_bytes(raw)
    result = await run(read_file, path=str(png))
    block = result.content[0]
    assert block.type == "image" and block.mime_type == "image/png"  # type: ignore[union-attr]
    assert base64.b64decode(block.data) == raw  # type: ignore[union-attr]


async def test_edit_replaces_a_unique_match_and_explains_misses(tmp_path: Path) -> None:
    f = tmp_path / "a.py"
    f.write_text("x = 1\ny = 2\n")
    assert "Replaced" in text(await run(edit_file, path=str(f), old_text="y = 2", new_text="y = 3"))
    assert f.read_text() == "x = 1\ny = 3\n"
    miss = await run(edit_file, path=str(f), old_text="y = 4", new_text="z")
    assert miss.is_error and "Did you mean" in text(miss)


async def test_search_and_list(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\nbeta\n")
    (tmp_path / "b.md").write_text("gamma\n")
    found = text(await run(search, pattern="bet", path=str(tmp_path)))
    assert "matches" in found and "a.txt:2" in found
    assert "No matches" in text(await run(search, pattern="zzz", path=str(tmp_path)))
    listing = text(await run(list_files, path=str(tmp_path)))
    assert "a.txt" in listing and "b.md" in listing


def test_registry_resolves_defaults_and_rejects_unknown_names() -> None:
    assert {t.name for t in default_tools()} == {
        "bash",
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "search",
    }
    registry = ToolRegistry()
    assert [t.name for t in registry.resolve(["bash", "edit_file"])] == ["bash", "edit_file"]
    with pytest.raises(UserError, match="Unknown tool 'bashh'"):
        registry.resolve(["bashh"])
    assert ToolRegistry(with_defaults=False).resolve([]) == []
