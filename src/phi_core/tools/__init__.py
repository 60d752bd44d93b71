"""Tools: the ``AgentTool`` protocol, the ``@tool`` decorator, the tool executor, and the
built-in coding tools confined to a workspace (with their command policy and approval hook).

Execution strategies (sequential, parallel, batched), timeouts, refused approvals and every
failure of a tool call become tool results the model can read; nothing a tool does crashes the
loop. Results are sent as valid JSON and Unicode, without secret values, and capped in size.
Tools can also come from elsewhere: an MCP server (:class:`McpClient`) or an OpenAPI spec
(:class:`OpenApiToolAdapter`), both :class:`Toolset`\\ s with a lifetime and a copy per race
branch.
"""

from ._approval import ApprovalDecision, ApprovalRequest, Approver
from ._bash import BashTool
from ._files import EditFileTool, ListFilesTool, ReadFileTool, WriteFileTool
from ._policy import CommandPolicy, PolicyVerdict
from ._search import SearchTool
from ._settings import (
    BashSettings,
    BuiltinToolSettings,
    ListSettings,
    ReadSettings,
    SearchSettings,
    WriteSettings,
)
from ._validate import check_tools
from ._workspace import Workspace
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
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "BashSettings",
    "BashTool",
    "BuiltinToolSettings",
    "CommandPolicy",
    "EditFileTool",
    "FunctionTool",
    "ListFilesTool",
    "ListSettings",
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
    "PolicyVerdict",
    "ReadFileTool",
    "ReadSettings",
    "SearchSettings",
    "SearchTool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "Toolset",
    "Workspace",
    "WriteFileTool",
    "WriteSettings",
    "branch_tool_factory",
    "check_tools",
    "default_tools",
    "merge_tools",
    "tool",
]
