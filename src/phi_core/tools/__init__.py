"""Tools: the ``AgentTool`` protocol, the ``@tool`` decorator and the tool executor.

Execution strategies (sequential, parallel, batched), timeouts and every failure of a tool call
become tool results the model can read; nothing a tool does crashes the loop.
"""

from .base import AgentTool, FunctionTool, ToolContext, ToolError, ToolResult, tool

__all__ = ["AgentTool", "FunctionTool", "ToolContext", "ToolError", "ToolResult", "tool"]
