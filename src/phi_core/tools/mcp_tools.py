"""MCP tools as agent tools: :class:`McpToolAdapter`, one per tool a server offers.

The model sees the server's name, description and input schema. A name the providers would
refuse (their rule is ``^[a-zA-Z0-9_-]{1,64}$``) is rewritten — other characters become ``_``, an
over-long name is cut and given a short hash — and ``remote_name`` keeps the server's own name for
the call. With ``prefix``, names read ``{prefix}__{name}`` (the book's namespace form).

Results: text and images map to our content; audio, resource links and embedded resources become
text that says what they are (an embedded image becomes an image); structured output is kept in
``details["structured_content"]`` (and sent as JSON text when the tool sent nothing else);
``isError`` becomes an error result; a server that fails, times out or goes away becomes an error
result that says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import McpError, UserError
from ..types import Content, ImageContent, TextContent
from .base import ToolContext, ToolResult
from .toolset import TOOL_NAME_PATTERN

if TYPE_CHECKING:
    from mcp.types import CallToolResult, Tool

    from .mcp import McpClient

__all__ = ["McpToolAdapter", "adapters_for", "check_prefix", "mcp_tool_name"]

_PREFIX = re.compile(r"^[a-zA-Z0-9_-]{1,40}$")


def check_prefix(prefix: str) -> None:
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise UserError(
            f"A tool name prefix must be 1-40 letters, digits, '_' or '-', got {prefix!r}; "
            "for example prefix='github'."
        )


def mcp_tool_name(remote: str, prefix: str | None = None) -> str:
    """The name the model sees for the server's tool ``remote`` (see the module docstring)."""
    base = re.sub(r"[^a-zA-Z0-9_-]", "_", remote) or "tool"
    name = f"{prefix}__{base}" if prefix else base
    if len(name) > 64:
        digest = hashlib.sha1(remote.encode()).hexdigest()[:8]
        name = f"{name[:55]}_{digest}"
    return name


def adapters_for(client: McpClient, tools: Sequence[Tool]) -> list[McpToolAdapter]:
    """One adapter per tool; two server names that map to one name get distinct names."""
    adapters: list[McpToolAdapter] = []
    taken: set[str] = set()
    for info in tools:
        name = mcp_tool_name(info.name, client.prefix)
        if name in taken:
            digest = hashlib.sha1(info.name.encode()).hexdigest()[:8]
            name = f"{name[:55]}_{digest}"
        assert TOOL_NAME_PATTERN.match(name), name
        taken.add(name)
        adapters.append(McpToolAdapter(client, info, name=name))
    return adapters


class McpToolAdapter:
    """One tool of an MCP server, callable by the agent loop (see the module docstring)."""

    def __init__(self, client: McpClient, tool: Tool, *, name: str | None = None) -> None:
        self.client = client
        self.tool = tool
        self.remote_name = tool.name
        self.name = name or mcp_tool_name(tool.name, client.prefix)
        self.description = (
            tool.description or tool.title or f"Tool {tool.name!r} of MCP server {client.name!r}."
        )
        self.parameters = _parameters(tool.input_schema)
        # The client's per-request timeout applies (and cancels the call on the server); the
        # loop's own tool timeout, if set, still applies on top.
        self.timeout: float | None = None

    def __repr__(self) -> str:
        return f"McpToolAdapter({self.name!r}, server={self.client.name!r})"

    @classmethod
    async def from_client(cls, client: McpClient) -> list[McpToolAdapter]:
        """The server's tools as adapters (the book's ``McpToolAdapter::from_client``)."""
        return await client.get_tools()

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
            ctx.progress(f"{message} ({amount})" if message else amount)

        try:
            result = await self.client.call_tool(self.remote_name, args, progress=on_progress)
        except McpError as exc:
            return ToolResult.error(str(exc))
        except RuntimeError as exc:  # the SDK: structured output does not match its schema
            return ToolResult.error(
                f"MCP tool {self.remote_name!r} of server {self.client.name!r} returned output "
                f"that does not match its declared output schema: {exc}"
            )
        return result_of(result, server=self.client.name, tool=self.remote_name)


def result_of(result: CallToolResult, *, server: str, tool: str) -> ToolResult:
    """Our :class:`ToolResult` for an MCP ``CallToolResult`` (see the module docstring)."""
    content = [c for item in result.content if (c := _content(item)) is not None]
    structured = result.structured_content
    if not content and structured is not None:
        content = [TextContent(text=json.dumps(structured, ensure_ascii=False))]
    if not content:
        content = [
            TextContent(
                text=f"MCP tool {tool!r} reported an error without a message."
                if result.is_error
                else ""
            )
        ]
    details: dict[str, Any] = {"mcp_server": server, "mcp_tool": tool}
    if structured is not None:
        details["structured_content"] = structured
    return ToolResult(content, is_error=bool(result.is_error), details=details)


def _content(item: Any) -> Content | None:
    kind = getattr(item, "type", None)
    if kind == "text":
        return TextContent(text=item.text)
    if kind == "image":
        return ImageContent(data=item.data, mime_type=item.mime_type)
    if kind == "audio":
        return TextContent(
            text=f"[audio ({item.mime_type}, {len(item.data) * 3 // 4} bytes) not shown]"
        )
    if kind == "resource_link":
        about = f" - {item.description}" if item.description else ""
        return TextContent(text=f"[resource {item.name}: {item.uri}]{about}")
    if kind == "resource":
        resource = item.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return TextContent(text=f"[resource {resource.uri}]\n{text}")
        mime = resource.mime_type or "application/octet-stream"
        if mime.startswith("image/"):
            return ImageContent(data=resource.blob, mime_type=mime)
        return TextContent(
            text=f"[resource {resource.uri} ({mime}, {len(resource.blob) * 3 // 4} bytes) "
            "not shown]"
        )
    return TextContent(text=f"[MCP content of type {kind!r} not shown]") if kind else None


def _parameters(schema: Any) -> dict[str, Any]:
    params = dict(schema) if isinstance(schema, dict) else {}
    params.setdefault("type", "object")
    if params.get("type") == "object":
        params.setdefault("properties", {})
    return params
