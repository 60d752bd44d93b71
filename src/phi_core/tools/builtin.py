"""Built-in coding tools (bash, read_file, write_file, edit_file, list_files, search) and a
name → tool registry, so configs can name tools (``tools = ["bash", "read_file"]``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import difflib
import fnmatch
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import UserError
from ..types import ImageContent, TextContent
from .base import AgentTool, ToolContext, ToolError, ToolResult, tool

__all__ = ["ToolRegistry", "default_tools"]

_MAX_OUTPUT = 256 * 1024
_MAX_TEXT_FILE = 1024 * 1024
_MAX_IMAGE = 20 * 1024 * 1024
_IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
}
_DENY = ("rm -rf /", "rm -rf /*", "mkfs", "dd if=", ":(){ :|:& };:")
_SKIP_DIRS = {".git", "target", "node_modules", "__pycache__", ".venv"}


def _truncate(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    if len(data) > _MAX_OUTPUT:
        return text[:_MAX_OUTPUT] + f"\n[... output truncated at {_MAX_OUTPUT} bytes ...]"
    return text


@tool
async def bash(
    command: str,
    ctx: ToolContext,
    timeout: float = 120.0,  # noqa: ASYNC109 - the model chooses the command's time limit
) -> ToolResult:
    """Run a shell command with bash and return its exit code and output.

    Args:
        command: The command line to run.
        timeout: Seconds before the command is killed.
    """
    if any(bad in command for bad in _DENY):
        raise ToolError("Command blocked by safety policy (it matches a destructive pattern).")
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(timeout):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        _kill(process)
        await process.wait()
        raise ToolError(f"Command timed out after {timeout:g}s.") from None
    except asyncio.CancelledError:
        _kill(process)
        with contextlib.suppress(ProcessLookupError):
            await process.wait()
        raise
    code = process.returncode
    out, err = _truncate(stdout), _truncate(stderr)
    if err.strip():
        text = f"Exit code: {code}\nSTDOUT:\n{out}\nSTDERR:\n{err}"
    else:
        text = f"Exit code: {code}\n{out}"
    return ToolResult.text(text, details={"exit_code": code, "success": code == 0})


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 9)


@tool
def read_file(path: str, offset: int = 1, limit: int | None = None) -> ToolResult:
    """Read a text file (with line numbers) or an image.

    Args:
        path: The file to read.
        offset: The first line to show (1-based).
        limit: How many lines to show at most.
    """
    file = Path(path)
    if not file.is_file():
        raise ToolError(f"File not found: {path}")
    mime = _IMAGE_TYPES.get(file.suffix.lower())
    size = file.stat().st_size
    if mime:
        if size > _MAX_IMAGE:
            raise ToolError(f"Image {path} is {size} bytes; the limit is {_MAX_IMAGE}.")
        data = base64.b64encode(file.read_bytes()).decode()
        return ToolResult([ImageContent(data=data, mime_type=mime)])
    if size > _MAX_TEXT_FILE and limit is None:
        raise ToolError(
            f"File {path} is {size} bytes (over 1 MB); read it in parts with offset and limit."
        )
    lines = file.read_text(errors="replace").splitlines()
    start = max(offset, 1)
    end = len(lines) if limit is None else min(len(lines), start - 1 + max(limit, 0))
    body = "\n".join(f"{n:>4} | {lines[n - 1]}" for n in range(start, end + 1))
    header = (
        f"[Lines {start}-{end} of {len(lines)}]"
        if (start > 1 or end < len(lines))
        else (f"[{len(lines)} lines]")
    )
    return ToolResult([TextContent(text=f"{header}\n{body}")])


@tool
def write_file(path: str, content: str) -> str:
    """Create or overwrite a file (parent folders are created).

    Args:
        path: The file to write.
        content: The full new content.
    """
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode()
    file.write_bytes(data)
    return f"Wrote {len(data)} bytes to {path}"


@tool
def edit_file(path: str, old_text: str, new_text: str) -> str:
    """Replace one exact, unique occurrence of ``old_text`` in a file.

    Args:
        path: The file to edit.
        old_text: The exact text to replace; it must occur exactly once.
        new_text: The replacement.
    """
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ToolError(f"Cannot read {path} ({exc}); use write_file to create it.") from None
    count = text.count(old_text)
    if count == 0:
        hint = difflib.get_close_matches(old_text, text.splitlines(), n=1, cutoff=0.5)
        suffix = f" Did you mean: {hint[0]!r}?" if hint else ""
        raise ToolError(f"old_text was not found in {path}.{suffix}")
    if count > 1:
        raise ToolError(f"old_text occurs {count} times in {path}; include more context.")
    file.write_text(text.replace(old_text, new_text, 1))
    return (
        f"Replaced {old_text.count(chr(10)) + 1} line(s) with "
        f"{new_text.count(chr(10)) + 1} line(s) in {path}"
    )


def _walk(root: Path, max_depth: int) -> Iterable[Path]:
    base_depth = len(root.parts)
    for current, dirs, files in os.walk(root):
        depth = len(Path(current).parts) - base_depth
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        if depth >= max_depth:
            dirs[:] = []
        for name in sorted(files):
            yield Path(current) / name


@tool
def list_files(path: str = ".", pattern: str | None = None, max_depth: int = 3) -> str:
    """List files under a folder (skipping .git, node_modules and the like), 200 at most.

    Args:
        path: The folder to list.
        pattern: A glob the file names must match, e.g. "*.py".
        max_depth: How many folder levels to descend.
    """
    root = Path(path)
    if not root.is_dir():
        raise ToolError(f"Not a folder: {path}")
    found = [
        str(p)
        for p in _walk(root, max_depth)
        if pattern is None or fnmatch.fnmatch(p.name, pattern)
    ]
    if not found:
        return "No files found."
    shown = found[:200]
    more = f"\n[... {len(found) - 200} more ...]" if len(found) > 200 else ""
    return "\n".join(shown) + more


@tool
def search(
    pattern: str, path: str = ".", include: str | None = None, case_sensitive: bool = True
) -> str:
    """Search file contents for a regular expression (50 matches at most).

    Args:
        pattern: The regular expression.
        path: The file or folder to search.
        include: A glob file names must match, e.g. "*.py".
        case_sensitive: Whether case matters.
    """
    try:
        regex = re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)
    except re.error as exc:
        raise ToolError(f"Invalid regular expression {pattern!r}: {exc}") from None
    root = Path(path)
    files = [root] if root.is_file() else list(_walk(root, 50))
    matches: list[str] = []
    for file in files:
        if include and not fnmatch.fnmatch(file.name, include):
            continue
        try:
            lines = file.read_text(errors="strict").splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(lines, 1):
            if regex.search(line):
                matches.append(f"{file}:{number}: {line}")
                if len(matches) >= 50:
                    return f"{len(matches)} matches (limit reached):\n" + "\n".join(matches)
    if not matches:
        return f"No matches found for {pattern!r}"
    return f"{len(matches)} matches:\n" + "\n".join(matches)


_BUILTINS: dict[str, AgentTool] = {
    t.name: t for t in (bash, read_file, write_file, edit_file, list_files, search)
}


def default_tools() -> list[AgentTool]:
    """The six built-in tools."""
    return list(_BUILTINS.values())


class ToolRegistry:
    """Name → tool factory. ``resolve(names)`` raises :class:`UserError` on an unknown name,
    listing the known ones (phi-core skipped unknown names silently, hiding config typos)."""

    def __init__(self, *, with_defaults: bool = True) -> None:
        self._factories: dict[str, Callable[[], AgentTool]] = {}
        if with_defaults:
            for name, builtin in _BUILTINS.items():
                self.register(name, builtin)

    def register(self, name: str, factory: Callable[[], AgentTool] | AgentTool) -> None:
        """Register a tool instance or a zero-argument factory under ``name``."""
        if isinstance(factory, AgentTool):
            instance: AgentTool = factory
            self._factories[name] = lambda: instance
        else:
            self._factories[name] = factory

    @property
    def names(self) -> list[str]:
        return sorted(self._factories)

    def resolve(self, names: Iterable[str]) -> list[AgentTool]:
        out: list[AgentTool] = []
        for name in names:
            factory = self._factories.get(name)
            if factory is None:
                raise UserError(
                    f"Unknown tool {name!r}. Known tools: {', '.join(self.names) or 'none'}."
                )
            out.append(factory())
        return out
