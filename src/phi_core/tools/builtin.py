"""The built-in coding tools (bash, read_file, write_file, edit_file, list_files, search), each
confined to a workspace root, and a name → tool registry, so configs can name tools
(``tools = ["bash", "read_file"]``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..errors import UserError
from ._bash import BashTool
from ._files import EditFileTool, ListFilesTool, ReadFileTool, WriteFileTool
from ._search import SearchTool
from ._settings import BuiltinToolSettings
from ._tool import Root, WorkspaceTool
from ._workspace import Workspace
from .base import AgentTool

__all__ = ["BUILTIN_NAMES", "ToolRegistry", "builtin_tool", "default_tools"]

_CLASSES: dict[str, tuple[type[WorkspaceTool], str]] = {
    "bash": (BashTool, "bash"),
    "read_file": (ReadFileTool, "read_file"),
    "write_file": (WriteFileTool, "write_file"),
    "edit_file": (EditFileTool, "write_file"),
    "list_files": (ListFilesTool, "list_files"),
    "search": (SearchTool, "search"),
}  # name -> (class, its section of BuiltinToolSettings)
BUILTIN_NAMES = tuple(_CLASSES)


def builtin_tool(
    name: str, root: Root = None, settings: BuiltinToolSettings | None = None
) -> AgentTool:
    """One built-in tool by name, confined to ``root`` (default: the current directory)."""
    if name not in _CLASSES:
        raise UserError(
            f"Unknown built-in tool {name!r}. Built-in tools: {', '.join(BUILTIN_NAMES)}."
        )
    cls, section = _CLASSES[name]
    return cls(root, getattr(settings or BuiltinToolSettings(), section))


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
