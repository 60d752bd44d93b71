"""The shape every built-in tool shares: a workspace, settings, an argument model, and blocking
work done in a worker thread whose refusals become error results."""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

from pydantic import BaseModel

from ..cancel import CancelToken
from ..errors import ToolError
from ._workspace import Workspace
from .base import ToolContext, ToolResult, validate_arguments

__all__ = ["Root", "WorkspaceTool"]

Root = str | os.PathLike[str] | Workspace | None


class WorkspaceTool:
    """A built-in tool: ``execute`` checks the arguments, then :meth:`run` does the work —
    by default :meth:`work` in a worker thread (file I/O never blocks the event loop), with a
    refused path, a :class:`ToolError` or an ``OSError`` turned into an error result."""

    name: str
    arguments: ClassVar[type[BaseModel]]
    settings_type: ClassVar[type[BaseModel]]
    timeout: float | None = None  # each tool keeps its own (capped) time budget

    def __init__(
        self, root: Root = None, settings: Any = None, *, needs_approval: bool = False
    ) -> None:
        self.workspace = root if isinstance(root, Workspace) else Workspace(root)
        self.settings = settings if settings is not None else self.settings_type()
        self.needs_approval = needs_approval
        self.parameters: dict[str, Any] = self.arguments.model_json_schema()
        self.parameters.pop("title", None)
        self.description = self.describe()

    def describe(self) -> str:
        raise NotImplementedError

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        parsed = validate_arguments(self.arguments, args, self.name, self.parameters)
        if isinstance(parsed, ToolResult):
            return parsed
        return await self.run(parsed, ctx)

    async def run(self, args: Any, ctx: ToolContext) -> ToolResult:
        try:
            result: ToolResult = await asyncio.to_thread(self.work, args, ctx.cancel)
        except ToolError as exc:  # PathError included
            return ToolResult.error(str(exc))
        except OSError as exc:
            return ToolResult.error(f"{exc.strerror or exc} ({type(exc).__name__}).")
        return result

    def work(self, args: Any, cancel: CancelToken) -> ToolResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.workspace.root!r})"
