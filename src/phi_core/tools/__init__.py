"""Tools: the ``AgentTool`` protocol, the ``@tool`` decorator and the tool executor.

Execution strategies (sequential, parallel, batched), timeouts and every failure of a tool call
become tool results the model can read; nothing a tool does crashes the loop. Tools can also come
from elsewhere: an MCP server (:class:`McpClient`) or an OpenAPI spec (:class:`OpenApiToolAdapter`),
both :class:`Toolset`\\ s with a lifetime and a copy per race branch.
"""

from .base import AgentTool, FunctionTool, ToolContext, ToolError, ToolResult, tool
from .builtin import ToolRegistry, default_tools
from .mcp import DEFAULT_MCP_TIMEOUT, McpClient
from .mcp_servers import McpHttpServer, McpReconnect, McpStdioServer
from .mcp_tools import McpToolAdapter
from .openapi import OpenApiAuth, OpenApiConfig, OperationFilter
from .openapi_tools import OpenApiToolAdapter, OpenApiToolset
from .toolset import Toolset, branch_tool_factory, merge_tools

__all__ = [
    "DEFAULT_MCP_TIMEOUT",
    "AgentTool",
    "FunctionTool",
    "McpClient",
    "McpHttpServer",
    "McpReconnect",
    "McpStdioServer",
    "McpToolAdapter",
    "OpenApiAuth",
    "OpenApiConfig",
    "OpenApiToolAdapter",
    "OpenApiToolset",
    "OperationFilter",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "Toolset",
    "branch_tool_factory",
    "default_tools",
    "merge_tools",
    "tool",
]
