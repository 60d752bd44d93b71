"""``[[tools.instances]]``: MCP servers and OpenAPI specs declared in a config file.

::

    [[tools.instances]]
    name = "files"
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]

    [[tools.instances]]
    name = "remote"
    url = "https://tools.example.com/mcp"
    headers = { Authorization = "Bearer ${TOOLS_TOKEN}" }

    [[tools.instances]]
    name = "pets"
    type = "openapi"
    spec = "petstore.yaml"          # a file (relative to the workspace) or a URL
    bearer_token = "${PETS_TOKEN}"
    tags = ["pets"]

Relative ``cwd`` and ``spec`` paths are taken from the agent's workspace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UserError
from ..tools.mcp import DEFAULT_MCP_TIMEOUT, McpClient
from ..tools.mcp_servers import McpHttpServer, McpStdioServer
from ..tools.openapi import OpenApiAuth, OpenApiConfig, OperationFilter
from ..tools.openapi_tools import OpenApiToolAdapter, OpenApiToolset
from ..tools.toolset import Toolset
from ._schema import ToolInstance
from ._source import ConfigSource

__all__ = ["tool_instance"]


def tool_instance(
    entry: ToolInstance, workspace: Path, source: ConfigSource, index: int
) -> Toolset:
    """The toolset an entry declares; a wrong entry is a ConfigError naming its key."""
    path: tuple[str | int, ...] = ("tools", "instances", index)
    try:
        if entry.type == "openapi":
            return _openapi(entry, workspace)
        return _mcp(entry, workspace)
    except UserError as exc:
        raise source.error(str(exc), path) from None


def _mcp(entry: ToolInstance, workspace: Path) -> McpClient:
    if (entry.command is None) == (entry.url is None):
        raise UserError(
            "an MCP tool instance needs either `command` (a server to start, with `args`) or "
            "`url` (a streamable-HTTP server), not both and not neither."
        )
    server: McpStdioServer | McpHttpServer
    if entry.command is not None:
        cwd = str(workspace / entry.cwd) if entry.cwd else None
        server = McpStdioServer(entry.command, entry.args, entry.env, cwd, entry.name)
    else:
        assert entry.url is not None
        server = McpHttpServer(entry.url, entry.headers, entry.name)
    timeout = entry.timeout if entry.timeout is not None else DEFAULT_MCP_TIMEOUT
    return McpClient(server, prefix=entry.prefix, timeout=timeout)


def _openapi(entry: ToolInstance, workspace: Path) -> OpenApiToolset:
    if not entry.spec:
        raise UserError("an OpenAPI tool instance needs `spec`: a file path or a URL.")
    auth: OpenApiAuth | None = None
    if entry.bearer_token:
        auth = OpenApiAuth.bearer(entry.bearer_token)
    elif entry.api_key:
        auth = OpenApiAuth.api_key(
            entry.api_key_name or "", entry.api_key, location=entry.api_key_in
        )
    elif entry.password is not None:
        auth = OpenApiAuth.basic(entry.username or "", entry.password)
    options: dict[str, Any] = {"headers": entry.headers, "name_prefix": entry.prefix}
    if entry.timeout is not None:
        options["timeout"] = entry.timeout
    if entry.max_response_bytes is not None:
        options["max_response_bytes"] = entry.max_response_bytes
    config = OpenApiConfig(base_url=entry.base_url, auth=auth, **options)
    chosen = OperationFilter(
        tags=frozenset(entry.tags),
        operation_ids=frozenset(entry.operation_ids),
        methods=frozenset(entry.methods),
        paths=frozenset(entry.paths),
        exclude_tags=frozenset(entry.exclude_tags),
        exclude_operation_ids=frozenset(entry.exclude_operation_ids),
        exclude_methods=frozenset(entry.exclude_methods),
        exclude_paths=frozenset(entry.exclude_paths),
    )
    if entry.spec.startswith(("http://", "https://")):
        return OpenApiToolset(url=entry.spec, config=config, filter=chosen, name=entry.name)
    tools = OpenApiToolAdapter.from_file(workspace / entry.spec, config, chosen)
    return OpenApiToolset(tools=tools, name=entry.name)
