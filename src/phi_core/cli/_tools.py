"""``phi run --tools``: the built-in tools in a workspace, and a y/N prompt for approvals.

The prompt is asked on the terminal (``/dev/tty``), never on standard input (which may carry the
prompt text), one question at a time. Without a terminal every approval is refused, with a
message saying so. Reading the answer happens on a daemon thread, so Ctrl-C during a question
stops the run at once and the process can exit.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ..errors import UserError
from ..events import ToolExecutionEnd, ToolExecutionStart
from ..tools import ApprovalDecision, ApprovalRequest, Approver, default_tools

__all__ = ["builtin_tools", "describe_tool_event", "open_terminal", "terminal_approver"]


def builtin_tools(enabled: bool, workspace: Path | None) -> list[Any]:
    """The built-in tools for ``phi run --tools [--workspace DIR]`` (none without ``--tools``)."""
    if not enabled:
        if workspace is not None:
            raise UserError("--workspace only matters with --tools; add --tools to use it.")
        return []
    return list(default_tools(workspace))


def open_terminal() -> tuple[TextIO, TextIO] | None:
    """(reader, writer) on the controlling terminal, or None when there is none."""
    try:
        reader = open("/dev/tty", encoding="utf-8")  # noqa: SIM115 - closed by the caller
    except OSError:
        return None
    try:
        writer = open("/dev/tty", "w", encoding="utf-8")  # noqa: SIM115 - closed by the caller
    except OSError:
        reader.close()
        return None
    return reader, writer


def _summary(request: ApprovalRequest) -> str:
    args = request.arguments
    if request.tool_name == "bash" and isinstance(args.get("command"), str):
        return f"$ {args['command']}"
    text = json.dumps(args, ensure_ascii=False, default=str)
    return text if len(text) <= 400 else text[:400] + "…"


def _ask(
    request: ApprovalRequest, terminal: Callable[[], tuple[TextIO, TextIO] | None]
) -> ApprovalDecision:
    opened = terminal()
    if opened is None:
        return ApprovalDecision.deny(
            "there is no terminal to ask for approval (run phi in a terminal to be asked)"
        )
    reader, writer = opened
    try:
        writer.write(
            f"\n{request.tool_name} needs your approval: {request.reason}\n"
            f"  {_summary(request)}\nAllow? [y/N] "
        )
        writer.flush()
        answer = reader.readline().strip().lower()
    finally:
        reader.close()
        writer.close()
    if answer in ("y", "yes"):
        return ApprovalDecision.allow()
    return ApprovalDecision.deny("the user declined")


def terminal_approver(
    terminal: Callable[[], tuple[TextIO, TextIO] | None] | None = None,
) -> Approver:
    """An approver that asks y/N on the terminal (``open_terminal`` unless given another),
    one question at a time."""
    lock: asyncio.Lock | None = None

    async def approve(request: ApprovalRequest) -> ApprovalDecision:
        nonlocal lock
        lock = lock or asyncio.Lock()
        async with lock:
            loop = asyncio.get_running_loop()
            answer: asyncio.Future[ApprovalDecision] = loop.create_future()

            def worker() -> None:
                try:
                    decision = _ask(request, terminal or open_terminal)
                except Exception as exc:  # reported to the model as a refusal
                    decision = ApprovalDecision.deny(f"asking failed: {exc}")
                loop.call_soon_threadsafe(_settle, answer, decision)

            threading.Thread(target=worker, name="phi-approval", daemon=True).start()
            return await answer

    return approve


def _settle(future: asyncio.Future[ApprovalDecision], decision: ApprovalDecision) -> None:
    if not future.done():  # the run may have been cancelled meanwhile
        future.set_result(decision)


def describe_tool_event(event: Any) -> str | None:
    """A one-line account of a tool call for the terminal, or None for other events."""
    if isinstance(event, ToolExecutionStart):
        args = event.args if isinstance(event.args, dict) else {}
        request = ApprovalRequest(tool_name=event.tool_name, arguments=args, reason="")
        return f"→ {event.tool_name}: {_summary(request)}"
    if isinstance(event, ToolExecutionEnd) and event.is_error:
        text = "".join(getattr(c, "text", "") for c in event.result.content)
        first = text.strip().splitlines()[0] if text.strip() else "error"
        return f"✗ {event.tool_name}: {first[:300]}"
    return None
