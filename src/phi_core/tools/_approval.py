"""Human-in-the-loop approval of tool calls.

An *approver* is a callable (sync or async) that receives an :class:`ApprovalRequest` — the
tool's name, the call's arguments and the reason approval is needed — and returns ``True``/
``False`` or an :class:`ApprovalDecision` (with a message for the model). Approval is asked

* per tool: a tool whose ``needs_approval`` attribute is true (``@tool(needs_approval=True)``)
  or a callable that returns a reason for the given arguments;
* per call: a tool asks itself with :meth:`ToolContext.request_approval` — the ``bash`` tool does
  when its command policy cannot tell whether a command is safe.

Without an approver, a call that needs approval is refused (fail closed), and the model is told
why. An approver that raises or returns something else also refuses, with the reason (a
``CancelledError`` it raises while nothing cancels the run included; a real cancellation of the
run propagates).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from .._logging import get_logger
from .._tasks import is_real_cancellation

__all__ = ["ApprovalDecision", "ApprovalRequest", "Approver", "ask_approval"]

logger = get_logger("phi_core.tools")


@dataclass(frozen=True)
class ApprovalRequest:
    """What an approver is asked: which tool, with which arguments, and why."""

    tool_name: str
    arguments: dict[str, Any]
    reason: str
    tool_call_id: str = ""
    loop_id: str = ""


@dataclass(frozen=True)
class ApprovalDecision:
    """An approver's answer; ``message`` goes to the model with a refusal (or an approval)."""

    approved: bool
    message: str | None = None

    @classmethod
    def allow(cls, message: str | None = None) -> ApprovalDecision:
        return cls(True, message)

    @classmethod
    def deny(cls, message: str | None = None) -> ApprovalDecision:
        return cls(False, message)


Approver: TypeAlias = Callable[
    [ApprovalRequest], "bool | ApprovalDecision | Awaitable[bool | ApprovalDecision]"
]


_NO_APPROVER = (
    "pass an approver (AgentLoopConfig(approver=...)) or, on the command line, run in a terminal "
    "to be asked"
)


async def ask_approval(approver: Approver | None, request: ApprovalRequest) -> ApprovalDecision:
    """Ask ``approver``; refuse when there is none, when it raises, or when it answers nonsense."""
    if approver is None:
        return ApprovalDecision.deny(
            f"this call needs approval ({request.reason}) and no approver is configured: "
            f"{_NO_APPROVER}"
        )
    try:
        answer: Any = approver(request)
        if inspect.isawaitable(answer):
            answer = await answer
    except (Exception, asyncio.CancelledError) as exc:
        if is_real_cancellation(exc):
            raise
        kind = type(exc).__name__
        logger.warning("the approver raised %s", kind, exc_info=True)
        return ApprovalDecision.deny(
            f"the approver raised {kind}: {exc}" if str(exc) else f"the approver raised {kind}"
        )
    if isinstance(answer, ApprovalDecision):
        return answer
    if isinstance(answer, bool):
        return ApprovalDecision(answer)
    return ApprovalDecision.deny(
        f"the approver returned {answer!r}; it must return True, False or an ApprovalDecision"
    )
