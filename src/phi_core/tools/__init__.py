"""Tools: the ``AgentTool`` protocol, the ``@tool`` decorator and the tool executor.

Execution strategies (sequential, parallel, batched), timeouts and every failure of a tool call
become tool results the model can read; nothing a tool does crashes the loop.
"""

from .base import AgentTool, FunctionTool, ToolContext, ToolError, ToolResult, tool
from .builtin import ToolRegistry, default_tools

__all__ = [
    "AgentTool",
    "FunctionTool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "default_tools",
    "tool",
]
