"""The built-in coding tools and the tool registry (study §4.12), working inside a workspace."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from phi_core.errors import UserError
from phi_core.tools import (
    BashTool,
    EditFileTool,
    ListFilesTool,
    ReadFileTool,
    SearchTool,
    ToolRegistry,
    ToolResult,
    WriteFileTool,
    default_tools,
)

from .helpers import run, text


async def test_bash_reports_exit_codes_and_runs_in_the_workspace(tmp_path: Path) -> None:
    bash = BashTool(tmp_path)
    ok = await run(bash, command="echo hello; pwd")
    assert "hello" in text(ok) and "Exit code: 0" in text(ok) and not ok.is_error
    assert bash.workspace.root in text(ok)
    failing = await run(bash, command="echo oops >&2; exit 3")
    assert "Exit code: 3" in text(failing) and "STDERR:\noops" in text(failing)
    assert not failing.is_error and failing.details["exit_code"] == 3


async def test_bash_blocks_destructive_commands_and_times_out(tmp_path: Path) -> None:
    bash = BashTool(tmp_path)
    blocked = await run(bash, command="rm -rf / --no-preserve-root")
    assert blocked.is_error and "refused by the safety policy" in text(blocked)
    slow = await run(bash, command="sleep 5", timeout=0.2)
    assert slow.is_error and "timed out" in text(slow)


async def test_write_then_read_round_trips_with_line_numbers(tmp_path: Path) -> None:
    written = await run(
        WriteFileTool(tmp_path),
        path="deep/dir/f.txt",
        content="\n".join(f"line{i}" for i in range(1, 11)),
    )
    assert text(written) == "Wrote 60 bytes to deep/dir/f.txt"
    read = ReadFileTool(tmp_path)
    window = text(await run(read, path="deep/dir/f.txt", offset=5, limit=3))
    assert "line5" in window and "line7" in window and "line8" not in window
    assert window.startswith("[Lines 5-7 of 10]") and "continue with offset=8" in window
    whole = text(await run(read, path=str(tmp_path / "deep/dir/f.txt")))
    assert whole.startswith("[10 lines]") and "   1 | line1" in whole
    missing = await run(read, path="nope.txt")
    assert missing.is_error and "File not found" in text(missing)


async def test_images_come_back_as_image_blocks(tmp_path: Path) -> None:
    raw = b"\x89PNG\r\n\x1a\nfake"
    (tmp_path / "x.png").write_bytes(raw)
    result = await run(ReadFileTool(tmp_path), path="x.png")
    block = result.content[0]
    assert block.type == "image" and block.mime_type == "image/png"  # type: ignore[union-attr]
    assert base64.b64decode(block.data) == raw  # type: ignore[union-attr]


async def test_edit_replaces_a_unique_match_and_explains_misses(tmp_path: Path) -> None:
    f = tmp_path / "a.py"
    f.write_text("x = 1\ny = 2\n")
    f.chmod(0o751)
    edit = EditFileTool(tmp_path)
    assert "Replaced" in text(await run(edit, path="a.py", old_text="y = 2", new_text="y = 3"))
    assert f.read_text() == "x = 1\ny = 3\n"
    assert f.stat().st_mode & 0o777 == 0o751  # the file is replaced, its mode kept
    miss = await run(edit, path="a.py", old_text="y = 4", new_text="z")
    assert miss.is_error and "Did you mean" in text(miss)
    twice = await run(edit, path="a.py", old_text="=", new_text="==")
    assert twice.is_error and "occurs 2 times" in text(twice)


async def test_search_and_list(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\nbeta\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("gamma\nBETA\n")
    search = SearchTool(tmp_path)
    found = text(await run(search, pattern="bet"))
    assert found == "1 matches:\na.txt:2: beta"
    folded = text(await run(search, pattern="bet", case_sensitive=False, include="*.md"))
    assert folded == "1 matches:\nsub/b.md:2: BETA"
    assert "No matches" in text(await run(search, pattern="zzz"))
    bad = await run(search, pattern="(")
    assert bad.is_error and "Invalid regular expression" in text(bad)
    listing = text(await run(ListFilesTool(tmp_path)))
    assert listing.splitlines() == ["a.txt", "sub/b.md"]
    only_md = text(await run(ListFilesTool(tmp_path), pattern="*.md"))
    assert only_md == "sub/b.md"


async def test_invalid_arguments_are_an_error_result_naming_the_problem(tmp_path: Path) -> None:
    result = await run(ReadFileTool(tmp_path), path="a", limit=0)
    assert (
        result.is_error and "limit" in text(result) and "greater than or equal to 1" in text(result)
    )
    extra = await run(BashTool(tmp_path), command="ls", shell="zsh")
    assert extra.is_error and "shell" in text(extra)


def test_registry_resolves_defaults_for_a_root_and_rejects_unknown_names(tmp_path: Path) -> None:
    assert [t.name for t in default_tools(tmp_path)] == [
        "bash",
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "search",
    ]
    registry = ToolRegistry()
    tools: list[Any] = registry.resolve(["bash", "edit_file"], root=tmp_path)
    assert [t.name for t in tools] == ["bash", "edit_file"]
    assert all(t.workspace.root == str(tmp_path.resolve()) for t in tools)
    with pytest.raises(UserError, match="Unknown tool 'bashh'"):
        registry.resolve(["bashh"])
    assert ToolRegistry(with_defaults=False).resolve([]) == []
    with pytest.raises(UserError, match="not an existing directory"):
        default_tools(tmp_path / "missing")


def test_a_registered_tool_replaces_a_builtin_of_the_same_name(tmp_path: Path) -> None:
    class Mine:
        def __init__(self) -> None:
            self.name = "bash"
            self.description = "mine"
            self.parameters: dict[str, Any] = {"type": "object", "properties": {}}

        async def execute(self, args: dict[str, Any], ctx: Any) -> ToolResult:
            return ToolResult.text("mine")

    registry = ToolRegistry()
    registry.register("bash", Mine())
    assert registry.resolve(["bash"])[0].description == "mine"
