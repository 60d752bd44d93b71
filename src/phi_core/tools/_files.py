"""``read_file``, ``write_file``, ``edit_file`` and ``list_files``, confined to a :class:`Workspace`.

Reads stream a window of lines (``offset``/``limit``) without loading the file: memory stays
bounded by the window whatever the file's size, a line longer than ``max_line_chars`` is cut
(its rest skipped, not read into memory), the text returned is capped at ``max_bytes``, and a
binary file (NUL bytes, or mostly undecodable) is reported as such instead of as mojibake. The
blocking file work runs in a worker thread that stops early when the call is cancelled.
"""

from __future__ import annotations

import base64
import difflib
import fnmatch
import os
import time
from collections.abc import Callable, Iterator
from typing import IO

from pydantic import BaseModel, ConfigDict, Field

from ..cancel import CancelToken
from ..types import ImageContent, TextContent
from ._results import is_image
from ._settings import ListSettings, ReadSettings, WriteSettings
from ._tool import WorkspaceTool
from .base import ToolError, ToolResult

__all__ = [
    "EditFileTool",
    "ListFilesTool",
    "ReadFileTool",
    "WriteFileTool",
    "iter_lines",
    "looks_binary",
]

_IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
}
_CHUNK = 64 * 1024
_CONTROL = set(range(32)) - {9, 10, 12, 13, 27, 8}


def looks_binary(sample: bytes) -> bool:
    """Whether ``sample`` (the start of a file or stream) is binary rather than text."""
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    text = sample.decode("utf-8", errors="replace")
    # the sample may end inside a multi-byte character: ignore a replacement at the very end
    bad = text[:-3].count("\ufffd") + sum(1 for b in sample if b in _CONTROL)
    return bad > max(len(sample) // 10, 2)


def iter_lines(
    handle: IO[bytes], max_bytes: int, check: Callable[[], None] | None = None
) -> Iterator[tuple[bytes, int]]:
    """Lines of at most ``max_bytes`` bytes, each with the number of bytes cut from its end.
    ``check`` is called before every line and every chunk of a long line skipped (a sparse
    file can hold one line of terabytes): it raises to stop the reading."""
    while True:
        if check is not None:
            check()
        raw = handle.readline(max_bytes)
        if not raw:
            return
        dropped = 0
        if len(raw) >= max_bytes and not raw.endswith(b"\n"):
            while more := handle.readline(_CHUNK):
                if check is not None:
                    check()
                dropped += len(more)
                if more.endswith(b"\n"):
                    dropped -= 1  # the line break is not part of the line
                    break
        yield raw, dropped


def render_line(raw: bytes, dropped: int, max_chars: int) -> str:
    """One line for the model: decoded, binary bits summarised, long lines cut with a note."""
    line = raw.rstrip(b"\n").rstrip(b"\r")
    if b"\x00" in line:
        return f"[binary data, {len(line) + dropped} bytes]"
    text = line.decode("utf-8", errors="replace")
    if len(text) > max_chars or dropped:
        cut = len(text[max_chars:].encode("utf-8", errors="replace")) + dropped
        return f"{text[:max_chars]} [... line cut: {cut} more bytes]"
    return text


def _count_lines(handle: IO[bytes], cancel: CancelToken) -> int:
    count = 0
    last = b"\n"
    while chunk := handle.read(1024 * 1024):
        count += chunk.count(b"\n")
        last = chunk[-1:]
        if cancel.cancelled:
            raise ToolError("Cancelled.")
    return count + (0 if last == b"\n" else 1)


# --------------------------------------------------------------------------- read_file


class _ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="The file to read, relative to the workspace.")
    offset: int = Field(default=1, description="The first line to show (1-based).")
    limit: int | None = Field(default=None, ge=1, description="How many lines to show at most.")


class ReadFileTool(WorkspaceTool):
    """Read a text file (a window of numbered lines) or an image inside the workspace."""

    name = "read_file"
    arguments = _ReadArgs
    settings_type = ReadSettings
    settings: ReadSettings

    def describe(self) -> str:
        return (
            "Read a text file (numbered lines) or an image inside the workspace "
            f"({self.workspace.root}). Returns at most {self.settings.max_lines} lines per call; "
            "use offset and limit for longer files. Binary files are reported, not shown."
        )

    def work(self, args: _ReadArgs, cancel: CancelToken) -> ToolResult:
        return self._read(args.path, args.offset, args.limit, cancel)

    def _read(self, path: str, offset: int, limit: int | None, cancel: CancelToken) -> ToolResult:
        s = self.settings
        fd, info, resolved = self.workspace.open_file(path)
        shown = self.workspace.relative(resolved.real)
        with os.fdopen(fd, "rb") as handle:
            mime = _IMAGE_TYPES.get(os.path.splitext(resolved.real)[1].lower())
            if mime and not is_image(handle.read(16), mime):
                mime = None  # named as an image, but its bytes are not one: read as any file
            handle.seek(0)
            if mime:
                if info.st_size > s.max_image_bytes:
                    raise ToolError(
                        f"The image {shown} is {info.st_size} bytes; the limit is "
                        f"{s.max_image_bytes}."
                    )
                data = handle.read(s.max_image_bytes + 1)[: s.max_image_bytes]
                return ToolResult(
                    [ImageContent(data=base64.b64encode(data).decode(), mime_type=mime)],
                    details={"path": shown, "bytes": len(data)},
                )
            if looks_binary(handle.read(8192)):
                return ToolResult.text(
                    f"{shown} is a binary file ({info.st_size} bytes); its content is not shown. "
                    f"Inspect it with bash, e.g. `file {shown}` or `xxd {shown} | head`.",
                    details={"path": shown, "binary": True, "bytes": info.st_size},
                )
            total: int | None = None
            if info.st_size <= s.count_lines_up_to:
                handle.seek(0)
                total = _count_lines(handle, cancel)
            handle.seek(0)
            return self._window(handle, shown, offset, limit, total, info.st_size, cancel)

    def _window(
        self,
        handle: IO[bytes],
        shown: str,
        offset: int,
        limit: int | None,
        total: int | None,
        size: int,
        cancel: CancelToken,
    ) -> ToolResult:
        s = self.settings
        start = max(offset, 1)
        wanted = min(limit or s.max_lines, s.max_lines)
        lines: list[str] = []
        used = 0
        number = 0
        stopped_by_bytes = more = False
        deadline = time.monotonic() + s.timeout

        def check() -> None:
            if cancel.cancelled:
                raise ToolError("Cancelled.")
            if time.monotonic() > deadline:
                raise ToolError(
                    f"read_file stopped after {s.timeout:g}s in {shown} (it reached line "
                    f"{number + 1}; a line may be gigabytes long). Look at it with bash, e.g. "
                    f"`head -c 2000 {shown}` or `wc -l {shown}`."
                )

        for number, (raw, dropped) in enumerate(
            iter_lines(handle, s.max_line_chars * 4 + 4, check), 1
        ):
            if number < start:
                continue
            if len(lines) >= wanted:
                more = True
                break
            line = f"{number:>4} | {render_line(raw, dropped, s.max_line_chars)}"
            cost = len(line.encode("utf-8")) + 1
            if used + cost > s.max_bytes and lines:
                stopped_by_bytes = more = True
                break
            lines.append(line)
            used += cost
        if not lines:
            count = total if total is not None else number
            return ToolResult.text(
                f"[{shown} has {count} lines; offset {start} is past the end]"
                if count
                else f"[{shown} is empty]"
            )
        end = start + len(lines) - 1
        of = f"of {total}" if total is not None else f"of a {size}-byte file"
        if start == 1 and not more:
            header = f"[{len(lines)} lines]"
        else:
            header = f"[Lines {start}-{end} {of}]"
        notes: list[str] = []
        if limit is not None and limit > s.max_lines:
            notes.append(f"[limit capped at {s.max_lines} lines]")
        if stopped_by_bytes:
            notes.append(f"[output cut at {s.max_bytes} bytes]")
        if more:
            notes.append(f"[more follows: continue with offset={end + 1}]")
        body = "\n".join(lines)
        footer = ("\n" + " ".join(notes)) if notes else ""
        return ToolResult(
            [TextContent(text=f"{header}\n{body}{footer}")],
            details={"path": shown, "start": start, "end": end, "total_lines": total},
        )


# --------------------------------------------------------------------------- write/edit


class _WriteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="The file to write, relative to the workspace.")
    content: str = Field(description="The full new content.")


def _encode(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(
            f"The {what} contains invalid Unicode (a lone surrogate at index {exc.start})."
        ) from None


class WriteFileTool(WorkspaceTool):
    """Create or replace a file inside the workspace (parent folders are created)."""

    name = "write_file"
    arguments = _WriteArgs
    settings_type = WriteSettings
    settings: WriteSettings

    def describe(self) -> str:
        return (
            f"Create or overwrite a file inside the workspace ({self.workspace.root}); parent "
            "folders are created."
        )

    def work(self, args: _WriteArgs, cancel: CancelToken) -> ToolResult:
        return self._write(args.path, args.content)

    def _write(self, path: str, content: str) -> ToolResult:
        data = _encode(content, "content")
        resolved = self.workspace.write_file(path, data, max_bytes=self.settings.max_bytes)
        return ToolResult.text(
            f"Wrote {len(data)} bytes to {self.workspace.relative(resolved.real)}"
        )


class _EditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="The file to edit, relative to the workspace.")
    old_text: str = Field(description="The exact text to replace; it must occur exactly once.")
    new_text: str = Field(description="The replacement.")


class EditFileTool(WorkspaceTool):
    """Replace one exact, unique occurrence of ``old_text`` in a file inside the workspace."""

    name = "edit_file"
    arguments = _EditArgs
    settings_type = WriteSettings
    settings: WriteSettings

    def describe(self) -> str:
        return (
            "Replace one exact, unique occurrence of old_text with new_text in a file inside the "
            f"workspace ({self.workspace.root}). Include enough context to make old_text unique."
        )

    def work(self, args: _EditArgs, cancel: CancelToken) -> ToolResult:
        return self._edit(args.path, args.old_text, args.new_text)

    def _edit(self, path: str, old_text: str, new_text: str) -> ToolResult:
        if not old_text:
            raise ToolError("old_text is empty; give the exact text to replace.")
        limit = self.settings.max_bytes
        fd, info, resolved = self.workspace.open_file(path)
        shown = self.workspace.relative(resolved.real)
        with os.fdopen(fd, "rb") as handle:
            if info.st_size > limit:
                raise ToolError(
                    f"{shown} is {info.st_size} bytes; edit_file handles up to {limit}."
                )
            raw = handle.read(limit + 1)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{shown} is not UTF-8 text; edit it with bash instead.") from None
        count = text.count(old_text)
        if count == 0:
            hint = difflib.get_close_matches(old_text, text.splitlines(), n=1, cutoff=0.5)
            suffix = f" Did you mean: {hint[0]!r}?" if hint else ""
            raise ToolError(f"old_text was not found in {shown}.{suffix}")
        if count > 1:
            raise ToolError(f"old_text occurs {count} times in {shown}; include more context.")
        updated = text.replace(old_text, new_text, 1)
        self.workspace.write_file(path, _encode(updated, "new text"), max_bytes=limit)
        return ToolResult.text(
            f"Replaced {old_text.count(chr(10)) + 1} line(s) with "
            f"{new_text.count(chr(10)) + 1} line(s) in {shown}"
        )


# --------------------------------------------------------------------------- list_files


class _ListArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(default=".", description="The folder to list, relative to the workspace.")
    pattern: str | None = Field(
        default=None, description='A glob file names must match, e.g. "*.py".'
    )
    max_depth: int = Field(default=3, ge=1, description="How many folder levels to descend.")


class ListFilesTool(WorkspaceTool):
    """List the files under a folder of the workspace (skipping .git, node_modules, …)."""

    name = "list_files"
    arguments = _ListArgs
    settings_type = ListSettings
    settings: ListSettings

    def describe(self) -> str:
        return (
            f"List files under a folder of the workspace ({self.workspace.root}), skipping "
            f".git, node_modules and the like; {self.settings.max_results} at most. Symbolic "
            "links are shown, not followed."
        )

    def work(self, args: _ListArgs, cancel: CancelToken) -> ToolResult:
        return self._list(args.path, args.pattern, args.max_depth, cancel)

    def _list(
        self, path: str, pattern: str | None, max_depth: int, cancel: CancelToken
    ) -> ToolResult:
        s = self.settings
        deadline = time.monotonic() + s.timeout
        depth = min(max_depth, s.max_depth)
        found: list[str] = []
        stopped = ""
        for entry in self.workspace.walk(path, depth, s.skip_dirs):
            if cancel.cancelled:
                raise ToolError("Cancelled.")
            if time.monotonic() > deadline:
                stopped = f"[listing stopped after {s.timeout:g}s]"
                break
            if entry.kind == "dir":
                continue
            if pattern is not None and not fnmatch.fnmatch(entry.name, pattern):
                continue
            if len(found) >= s.max_results:
                stopped = f"[more than {s.max_results} files; narrow it with path or pattern]"
                break
            suffix = "" if entry.kind == "file" else f" ({entry.kind})"
            found.append(entry.path + suffix)
        if not found:
            return ToolResult.text("No files found." + (f" {stopped}" if stopped else ""))
        return ToolResult.text("\n".join(found) + (f"\n{stopped}" if stopped else ""))
