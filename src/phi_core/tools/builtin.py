"""The built-in coding tools (bash, read_file, write_file, edit_file, list_files, search), each
confined to a workspace root, and a name → tool registry, so configs can name tools
(``tools = ["bash", "read_file"]``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from ..errors import UserError
from ._bash import BashTool
from ._files import EditFileTool, ListFilesTool, ReadFileTool, WriteFileTool
from ._search import SearchTool
from ._settings import BuiltinToolSettings
from ._workspace import Workspace
from .base import AgentTool

__all__ = ["BUILTIN_NAMES", "ToolRegistry", "builtin_tool", "default_tools"]

BUILTIN_NAMES = ("bash", "read_file", "write_file", "edit_file", "list_files", "search")

Root = str | os.PathLike[str] | Workspace | None


def builtin_tool(
    name: str, root: Root = None, settings: BuiltinToolSettings | None = None
) -> AgentTool:
    """One built-in tool by name, confined to ``root`` (default: the current directory)."""
    s = settings or BuiltinToolSettings()
    workspace = root if isinstance(root, Workspace) else Workspace(root)
    if name == "bash":
        return BashTool(workspace, s.bash)
    if name == "read_file":
        return ReadFileTool(workspace, s.read_file)
    if name == "write_file":
        return WriteFileTool(workspace, s.write_file)
    if name == "edit_file":
        return EditFileTool(workspace, s.write_file)
    if name == "list_files":
        return ListFilesTool(workspace, s.list_files)
    if name == "search":
        return SearchTool(workspace, s.search)
    raise UserError(f"Unknown built-in tool {name!r}. Built-in tools: {', '.join(BUILTIN_NAMES)}.")


def default_tools(
    root: Root = None, settings: BuiltinToolSettings | None = None
) -> list[AgentTool]:
    """The six built-in tools, confined to ``root`` (default: the current directory)."""
    workspace = root if isinstance(root, Workspace) else Workspace(root)
    return [builtin_tool(name, workspace, settings) for name in BUILTIN_NAMES]


class ToolRegistry:
    """Name → tool factory. ``resolve(names)`` raises :class:`UserError` on an unknown name,
    listing the known ones (phi-core skipped unknown names silently, hiding config typos).

    The built-in tools are made for the ``root`` given to :meth:`resolve` (an agent's workspace),
    else the registry's own ``root``, else the current directory.
    """

    def __init__(
        self,
        *,
        with_defaults: bool = True,
        root: Root = None,
        settings: BuiltinToolSettings | None = None,
    ) -> None:
        self._factories: dict[str, Callable[[], AgentTool]] = {}
        self._builtins: set[str] = set(BUILTIN_NAMES) if with_defaults else set()
        self.root = root
        self.settings = settings

    def register(self, name: str, factory: Callable[[], AgentTool] | AgentTool) -> None:
        """Register a tool instance or a zero-argument factory under ``name``."""
        self._builtins.discard(name)
        if isinstance(factory, AgentTool):
            instance: AgentTool = factory
            self._factories[name] = lambda: instance
        else:
            self._factories[name] = factory

    @property
    def names(self) -> list[str]:
        return sorted(self._builtins | set(self._factories))

    def resolve(
        self,
        names: Iterable[str],
        *,
        root: Root = None,
        settings: BuiltinToolSettings | None = None,
    ) -> list[AgentTool]:
        out: list[AgentTool] = []
        for name in names:
            if name in self._builtins:
                chosen = root if root is not None else self.root
                out.append(builtin_tool(name, chosen, settings or self.settings))
                continue
            factory = self._factories.get(name)
            if factory is None:
                raise UserError(
                    f"Unknown tool {name!r}. Known tools: {', '.join(self.names) or 'none'}."
                )
            out.append(factory())
        return out
