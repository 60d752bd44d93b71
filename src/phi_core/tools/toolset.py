"""Toolsets: tools that come from somewhere else (an MCP server, an OpenAPI spec at a URL).

A :class:`Toolset` produces its tools when a run starts (connecting or fetching on first use),
may hold a connection that must be closed, and can make an independent copy of itself for each
branch of a race, so concurrently running branches never share a session::

    async with toolset:                           # or: await toolset.aclose()
        tools = await merge_tools(my_tools, [toolset])
        await agent_loop("...", AgentContext(tools=tools), config)

    async with branch_tool_factory(my_tools, [toolset], len(configs)) as factory:
        await agent_loop_parallel("...", base, configs, strategy, tool_factory=factory)

``BasicAgent`` does both for the toolsets added with ``with_mcp_server_*`` / ``with_openapi_*``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import UserError

__all__ = [
    "TOOL_NAME_PATTERN",
    "Toolset",
    "branch_tool_factory",
    "close_toolsets",
    "merge_tools",
]

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""The tool-name rule every provider accepts (OpenAI, Anthropic and Gemini agree on it)."""


@runtime_checkable
class Toolset(Protocol):
    """A source of tools with a lifetime; see the module docstring."""

    name: str

    async def get_tools(self) -> list[Any]:
        """The current tools (connects or fetches on first use)."""
        ...

    def for_branch(self) -> Toolset:
        """An independent copy for one race branch (its own session, opened on first use)."""
        ...

    async def aclose(self) -> None:
        """Release whatever the toolset holds (a subprocess, a session); idempotent."""
        ...


async def merge_tools(tools: Sequence[Any], toolsets: Sequence[Toolset]) -> list[Any]:
    """``tools`` followed by every toolset's tools; two tools with one name are refused.

    Raises:
        UserError: two tools share a name; the message names both sources and the fix.
    """
    merged = list(tools)
    owners = {t.name: "the agent's own tools" for t in merged}
    for toolset in toolsets:
        for agent_tool in await toolset.get_tools():
            owner = owners.get(agent_tool.name)
            if owner is not None:
                raise UserError(
                    f"Tool name {agent_tool.name!r} from {toolset.name!r} is already taken by "
                    f"{owner}; give {toolset.name!r} a prefix (prefix='{_slug(toolset.name)}' "
                    "names its tools like "
                    f"'{_slug(toolset.name)}__{agent_tool.name}') or drop one of the two."
                )
            owners[agent_tool.name] = repr(toolset.name)
            merged.append(agent_tool)
    return merged


async def close_toolsets(toolsets: Sequence[Toolset]) -> None:
    """Close every toolset, even when closing one of them fails (the first failure is raised)."""
    failure: BaseException | None = None
    for toolset in toolsets:
        try:
            await toolset.aclose()
        except BaseException as exc:  # keep closing the rest; re-raised below
            failure = failure or exc
    if failure is not None:
        raise failure


@contextlib.asynccontextmanager
async def branch_tool_factory(
    tools: Sequence[Any], toolsets: Sequence[Toolset], branches: int
) -> AsyncIterator[Any]:
    """A ``tool_factory`` for ``agent_loop_parallel``: branch ``i`` gets ``tools`` plus its own
    copy of every toolset (a session of its own, opened on the branch's first call). The copies
    are closed when the block ends."""
    copies = [[toolset.for_branch() for toolset in toolsets] for _ in range(branches)]
    try:
        per_branch = [await merge_tools(tools, branch_sets) for branch_sets in copies]

        def factory(index: int, _config: Any) -> list[Any]:
            return list(per_branch[index])

        yield factory
    finally:
        await close_toolsets([t for branch_sets in copies for t in branch_sets])


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9_-]+", "_", name).strip("_")
    return slug[:20] or "server"
