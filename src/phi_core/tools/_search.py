"""``search``: a regular expression over the files of the workspace, on a budget.

Only regular files are read (FIFOs, sockets and devices are skipped without being opened, and a
file that turns into one is refused by ``fstat`` after an ``O_NONBLOCK`` open), symbolic links are
not followed, binary files and files above ``max_file_bytes`` are skipped, lines are streamed with
a length cap, and the search stops at ``max_results`` matches or after ``timeout`` seconds —
including inside one pathological match, since the ``regex`` engine takes a time limit — and
says so in the result.
"""

from __future__ import annotations

import fnmatch
import os
import time
from typing import Any

import regex
from pydantic import BaseModel, ConfigDict, Field

from ..cancel import CancelToken
from ..errors import PathError
from ._files import iter_lines, looks_binary, render_line
from ._settings import SearchSettings
from ._tool import WorkspaceTool
from .base import ToolError, ToolResult

__all__ = ["SearchTool"]

_LINE_SECONDS = 0.2  # a line that takes longer is a pathological pattern: the search stops


class _SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pattern: str = Field(min_length=1, description="The regular expression (Python syntax).")
    path: str = Field(default=".", description="The file or folder to search, in the workspace.")
    include: str | None = Field(
        default=None, description='A glob file names must match, e.g. "*.py".'
    )
    case_sensitive: bool = Field(default=True, description="Whether case matters.")


class SearchTool(WorkspaceTool):
    """Search file contents in the workspace for a regular expression."""

    name = "search"
    arguments = _SearchArgs
    settings_type = SearchSettings
    settings: SearchSettings

    def describe(self) -> str:
        return (
            f"Search the contents of files in the workspace ({self.workspace.root}) for a "
            f"regular expression; returns up to {self.settings.max_results} matching lines as "
            "path:line: text. Symbolic links are not followed; binary files are skipped."
        )

    def work(self, args: _SearchArgs, cancel: CancelToken) -> ToolResult:
        flags = regex.VERSION0 | (0 if args.case_sensitive else regex.IGNORECASE)
        try:
            compiled = regex.compile(args.pattern, flags)
        except (regex.error, ValueError, OverflowError) as exc:
            raise ToolError(f"Invalid regular expression {args.pattern!r}: {exc}") from None
        return self._search(compiled, args.path, args.include, cancel)

    def _search(
        self, compiled: Any, path: str, include: str | None, cancel: CancelToken
    ) -> ToolResult:
        s = self.settings
        deadline = time.monotonic() + s.timeout
        matches: list[str] = []
        skipped_large: list[str] = []
        stopped = ""
        files = 0
        target = self.workspace.relative(self.workspace.resolve(path).real)
        for entry in self.workspace.walk(path, 64, s.skip_dirs):
            if entry.kind != "file":
                if entry.kind != "dir" and entry.path == target:
                    raise PathError(f"{path!r} is a {entry.kind}, not a regular file or folder.")
                continue
            if include is not None and not fnmatch.fnmatch(entry.name, include):
                continue
            opened = entry.open()
            if opened is None:
                continue
            fd, info = opened
            with os.fdopen(fd, "rb") as handle:
                if info.st_size > s.max_file_bytes:
                    skipped_large.append(entry.path)
                    continue
                if looks_binary(handle.read(8192)):
                    continue
                handle.seek(0)
                files += 1
                stopped = self._scan(handle, entry.path, compiled, matches, deadline, cancel)
            if stopped:
                break
        text = self._report(compiled.pattern, matches, files, skipped_large, stopped)
        return ToolResult.text(text, details={"matches": len(matches), "files": files})

    def _scan(
        self,
        handle: Any,
        shown: str,
        compiled: Any,
        matches: list[str],
        deadline: float,
        cancel: CancelToken,
    ) -> str:
        s = self.settings
        for number, (raw, dropped) in enumerate(iter_lines(handle, 64 * 1024), 1):
            if cancel.cancelled:
                raise ToolError("Cancelled.")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return f"[search stopped after {s.timeout:g}s]"
            line = raw.decode("utf-8", errors="replace")
            try:
                # The engine checks its clock only now and then (it overran a 1 s limit by 4 s
                # on a backtracking pattern here), so no line gets more than a short slice.
                found = compiled.search(line, timeout=min(remaining, _LINE_SECONDS))
            except TimeoutError:
                return f"[search stopped after {s.timeout:g}s (the pattern is slow on {shown})]"
            if found:
                matches.append(f"{shown}:{number}: {render_line(raw, dropped, s.max_line_chars)}")
                if len(matches) >= s.max_results:
                    return f"[limit of {s.max_results} matches reached]"
        return ""

    @staticmethod
    def _report(
        pattern: str, matches: list[str], files: int, skipped: list[str], stopped: str
    ) -> str:
        notes = [stopped] if stopped else []
        if skipped:
            shown = ", ".join(skipped[:5]) + (" …" if len(skipped) > 5 else "")
            notes.append(f"[skipped {len(skipped)} large file(s): {shown}]")
        tail = ("\n" + "\n".join(notes)) if notes else ""
        if not matches:
            return f"No matches found for {pattern!r} in {files} file(s).{tail}"
        return f"{len(matches)} matches:\n" + "\n".join(matches) + tail
