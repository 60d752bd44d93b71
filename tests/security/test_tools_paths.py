"""Path escapes: no built-in file tool reads, writes, lists or searches outside its workspace.

Every escape is an error *result* (the run goes on), and the outside file's content never shows
up in what the model would see; writes never change anything outside.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from phi_core.errors import PathError
from phi_core.tools import (
    BashSettings,
    BashTool,
    EditFileTool,
    ListFilesTool,
    ReadFileTool,
    SearchTool,
    Workspace,
    WriteFileTool,
)
from phi_core.tools._workspace import Resolved

from ..tools.helpers import run, text
from .conftest import Layout


def escapes(layout: Layout) -> dict[str, str]:
    """Paths that name the outside secret (or other places) from inside the workspace."""
    ws = layout.workspace
    (ws / "file_link").symlink_to(layout.secret_file)
    (ws / "dir_link").symlink_to(layout.outside)
    (ws / "proc_root").symlink_to("/proc/self/root")
    (ws / "loop").symlink_to(ws / "loop")
    return {
        "dotdot": "../outside/secret.txt",
        "dotdot deep": "notes.txt/../../outside/secret.txt",
        "absolute": str(layout.secret_file),
        "etc passwd": "/etc/passwd",
        "file symlink": "file_link",
        "dir symlink": "dir_link/secret.txt",
        "proc environ": "/proc/self/environ",
        "proc self root": f"/proc/self/root{layout.secret_file}",
        "symlink to proc root": f"proc_root{layout.secret_file}",
        "dev zero": "/dev/zero",
        "nul byte": "notes.txt\x00../../outside/secret.txt",
        "very long": "a/" * 3000 + "x",
        "tilde": "~/secret.txt",
        "symlink loop": "loop",
    }


@pytest.mark.parametrize(
    "case",
    [
        "dotdot", "dotdot deep", "absolute", "etc passwd", "file symlink", "dir symlink",
        "proc environ", "proc self root", "symlink to proc root", "dev zero", "nul byte",
        "very long", "tilde", "symlink loop",
    ],
)  # fmt: skip
async def test_read_file_refuses_every_escape_with_an_error_result(
    layout: Layout, case: str
) -> None:
    path = escapes(layout)[case]
    result = await run(ReadFileTool(layout.workspace), path=path)
    assert result.is_error, text(result)
    assert layout.marker not in text(result) and "root:" not in text(result)


@pytest.mark.parametrize("case", ["dotdot", "absolute", "file symlink", "dir symlink", "tilde"])
async def test_write_and_edit_never_change_anything_outside(layout: Layout, case: str) -> None:
    path = escapes(layout)[case]
    before = layout.secret_file.read_text()
    written = await run(WriteFileTool(layout.workspace), path=path, content="pwned")
    edited = await run(
        EditFileTool(layout.workspace), path=path, old_text=layout.marker, new_text="pwned"
    )
    assert written.is_error and edited.is_error
    assert layout.secret_file.read_text() == before
    assert sorted(p.name for p in layout.outside.iterdir()) == ["secret.txt"]


async def test_a_new_file_through_a_directory_symlink_is_not_created_outside(
    layout: Layout,
) -> None:
    (layout.workspace / "dir_link").symlink_to(layout.outside)
    result = await run(WriteFileTool(layout.workspace), path="dir_link/new/evil.txt", content="x")
    assert result.is_error and "outside the workspace" in text(result)
    assert not (layout.outside / "new").exists()


async def test_writing_a_hard_linked_file_replaces_it_inside_and_leaves_the_outside_copy(
    layout: Layout,
) -> None:
    os.link(layout.secret_file, layout.workspace / "hard")
    result = await run(WriteFileTool(layout.workspace), path="hard", content="new")
    assert not result.is_error
    assert (layout.workspace / "hard").read_text() == "new"
    assert layout.secret_file.read_text() == layout.marker + "\n"


async def test_links_inside_the_workspace_still_work(layout: Layout) -> None:
    (layout.workspace / "alias.txt").symlink_to(layout.workspace / "notes.txt")
    (layout.workspace / "sub").mkdir()
    (layout.workspace / "sub_alias").symlink_to(layout.workspace / "sub")
    read = await run(ReadFileTool(layout.workspace), path="alias.txt")
    assert "inside" in text(read) and not read.is_error
    written = await run(WriteFileTool(layout.workspace), path="sub_alias/new.txt", content="ok")
    assert not written.is_error and (layout.workspace / "sub" / "new.txt").read_text() == "ok"


async def test_listing_and_search_do_not_follow_links_out_of_the_workspace(
    layout: Layout,
) -> None:
    (layout.workspace / "dir_link").symlink_to(layout.outside)
    (layout.workspace / "file_link").symlink_to(layout.secret_file)
    listing = text(await run(ListFilesTool(layout.workspace), max_depth=5))
    assert "secret.txt" not in listing
    assert "dir_link (symbolic link)" in listing and "file_link (symbolic link)" in listing
    found = await run(SearchTool(layout.workspace), pattern="OUTSIDE")
    assert layout.marker not in text(found) and "No matches" in text(found)
    for path in ("dir_link", "..", str(layout.outside), "/proc/self"):
        for tool, args in (
            (ListFilesTool(layout.workspace), {"path": path}),
            (SearchTool(layout.workspace), {"pattern": "OUTSIDE", "path": path}),
        ):
            result = await run(tool, **args)
            assert result.is_error and layout.marker not in text(result), (path, text(result))


def test_a_folder_swapped_for_a_link_after_the_check_is_not_followed(layout: Layout) -> None:
    """TOCTOU: the path is checked, then a folder on it becomes a link out; the open fails."""
    workspace = Workspace(layout.workspace)
    sub = layout.workspace / "sub"
    sub.mkdir()
    (sub / "secret.txt").write_text("inside\n")
    checked: Resolved = workspace.resolve("sub/secret.txt")
    sub.rename(layout.workspace / "old")
    sub.symlink_to(layout.outside)  # the attacker's swap, between check and open
    original = workspace.resolve
    workspace.resolve = lambda path: checked  # type: ignore[method-assign]
    try:
        with pytest.raises(PathError, match="changed while it was opened"):
            workspace.open_file("sub/secret.txt")
        with pytest.raises(PathError, match="changed while it was opened"):
            workspace.write_file("sub/secret.txt", b"pwned", max_bytes=100)
    finally:
        workspace.resolve = original  # type: ignore[method-assign]
    assert layout.secret_file.read_text() == layout.marker + "\n"


async def test_fifos_sockets_and_devices_are_refused_without_blocking(layout: Layout) -> None:
    ws = layout.workspace
    os.mkfifo(ws / "pipe")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(ws / "sock"))
    try:
        tools: list[tuple[Any, dict[str, Any]]] = [
            (ReadFileTool(ws), {"path": "pipe"}),
            (ReadFileTool(ws), {"path": "sock"}),
            (EditFileTool(ws), {"path": "pipe", "old_text": "a", "new_text": "b"}),
            (WriteFileTool(ws), {"path": "pipe", "content": "x"}),
            (SearchTool(ws), {"pattern": "x", "path": "pipe"}),
        ]
        for tool, args in tools:
            result = await run(tool, **args)
            assert result.is_error, (tool.name, args, text(result))
            assert "FIFO" in text(result) or "socket" in text(result) or "regular" in text(result)
        assert stat.S_ISFIFO(os.stat(ws / "pipe").st_mode)  # not replaced by a regular file
    finally:
        server.close()


async def test_a_device_node_inside_the_workspace_is_not_read(layout: Layout) -> None:
    try:
        os.mknod(layout.workspace / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("creating device nodes needs CAP_MKNOD")
    result = await run(ReadFileTool(layout.workspace), path="zero")
    assert result.is_error and "device" in text(result)


def test_the_workspace_must_exist(tmp_path: Path) -> None:
    from phi_core.errors import UserError

    with pytest.raises(UserError, match="not an existing directory"):
        Workspace(tmp_path / "nope")


async def test_pseudo_filesystems_are_refused_even_inside_a_root_of_slash() -> None:
    for path in ("/proc/self/environ", "/proc/1/cmdline", "/sys/kernel", "/dev/zero"):
        result = await run(ReadFileTool("/"), path=path)
        assert result.is_error and "which the tools never touch" in text(result), path


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")
async def test_with_filesystem_isolation_even_an_opaque_script_cannot_write_outside(
    layout: Layout,
) -> None:
    """The policy cannot read a script; the kernel stops what it does."""
    script = f"open({str(layout.secret_file)!r}, 'w').write('pwned')\n"
    (layout.workspace / "evil.py").write_text(script)
    bash = BashTool(layout.workspace, BashSettings(isolate="filesystem"))
    result = await run(bash, command="python3 evil.py; echo inside > ok.txt")
    assert "Read-only file system" in text(result) or "No such file" in text(
        result
    )  # /tmp is private
    assert layout.secret_file.read_text() == layout.marker + "\n"
    assert (layout.workspace / "ok.txt").read_text() == "inside\n"  # the workspace is writable
