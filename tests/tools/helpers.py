"""Running a tool the way the agent loop does, for the tool tests."""

from __future__ import annotations

from typing import Any

from phi_core.cancel import CancelToken
from phi_core.tools import Approver, ToolContext, ToolError, ToolResult
from phi_core.tools._results import finish_result, to_tool_result


def ctx(approver: Approver | None = None, args: dict[str, Any] | None = None) -> ToolContext:
    return ToolContext(
        tool_call_id="c",
        tool_name="t",
        loop_id="l",
        cancel=CancelToken(),
        approver=approver,
        arguments=dict(args or {}),
    )


async def run(
    tool: Any,
    approver: Approver | None = None,
    max_bytes: int | None = 256 * 1024,
    **args: Any,
) -> ToolResult:
    """Execute like the loop does: a raised ToolError becomes an error result, and the result
    is finished (Unicode, secrets, size cap) as it would be before reaching the model."""
    try:
        value = await tool.execute(args, ctx(approver, args))
    except ToolError as exc:
        return ToolResult.error(str(exc))
    return finish_result(to_tool_result(value), max_bytes)


def text(result: ToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)
