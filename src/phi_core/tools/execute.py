"""Running the tool calls of one assistant message: sequential, parallel or batched.

Every call produces exactly one :class:`ToolResultMessage`, whatever happens: unknown tool,
malformed arguments, a veto, a raising hook, a refused approval, a tool that raises or returns
unsendable data, a timeout, or cancellation of the run (the unfinished calls get "Cancelled"
results so the conversation stays valid for a later continuation; a call cancelled after its
``ToolExecutionStart`` still gets its one ``ToolExecutionEnd``, and every such result its
message events). A tool that raises ``SystemExit``, ``KeyboardInterrupt`` or ``GeneratorExit``
gets an error result too; the exception is kept in :attr:`ToolRunner.fatal` for the loop to
re-raise after its ``AgentEnd``. Every result is made fit to send (:func:`finish_result`: valid
Unicode, no secret values, text capped at ``max_result_bytes``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._logging import get_logger
from .._tasks import being_cancelled, is_real_cancellation
from ..cancel import CancelToken
from ..context.limits import LimitsLeft
from ..errors import redact
from ..events import (
    Emitter,
    MessageEnd,
    MessageStart,
    ProgressMessage,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    Warning,
)
from ..types import AgentMessage, TextContent, ToolCall, ToolResultMessage, Usage
from ._approval import ApprovalRequest, Approver, ask_approval
from ._results import DEFAULT_MAX_RESULT_BYTES, finish_result, to_tool_result
from .base import ToolContext, ToolResult, tool_timeout

__all__ = ["ToolRunner"]

logger = get_logger("phi_core.tools")

HookCaller = Callable[..., Awaitable[Any]]


@dataclass
class ToolRunner:
    """Executes tool calls for one loop; created per run by the agent loop."""

    tools: Sequence[Any]
    loop_id: str
    emitter: Emitter
    cancel: CancelToken
    strategy: Any  # "parallel" | "sequential" | Batched
    default_timeout: float | None
    call_hook: Callable[[str, Any, tuple[Any, ...]], Awaitable[tuple[Any, str | None]]]
    poll_steering: Callable[[], Awaitable[list[AgentMessage]]]
    messages: Sequence[AgentMessage] = ()
    details: dict[str, Any] = field(default_factory=dict)
    """Each finished call's ``ToolResult.details`` by tool call id (never sent to the model)."""
    usage: list[tuple[Usage, float]] = field(default_factory=list)
    """Usage (and cost) tools reported through ``ToolContext.add_usage``."""
    approver: Approver | None = None
    max_result_bytes: int | None = DEFAULT_MAX_RESULT_BYTES
    limits_left: Callable[[], LimitsLeft | None] = lambda: None
    """What the run's limits have left, asked when each call starts (the loop takes off what
    earlier calls of the turn spent, reported through ``ToolContext.add_usage``)."""
    caller_tools: frozenset[str] = frozenset()
    """Names of tools the caller executes (``AgentLoopConfig.caller_tools``). A turn that calls
    only these never reaches the runner; in a turn that mixes them with the run's own tools,
    the own calls run and each caller call gets an error result asking the model to call it
    again on its own (the caller can only be handed a turn that calls nothing but its tools)."""
    _shares: dict[str, LimitsLeft] = field(default_factory=dict)
    """By tool call id: its share of what the run's limits had left when its batch started,
    for calls of one batch that spend the run's limits at once (tools with ``spends_limits``,
    such as sub-agents): equal shares, so together they stay within it. A call run on its own
    (sequentially, or alone in its batch) gets what is left when it starts instead."""
    fatal: BaseException | None = None
    """A SystemExit/KeyboardInterrupt/GeneratorExit a tool raised; the loop re-raises it."""
    _interrupted: dict[str, ToolResultMessage] = field(default_factory=dict)
    """Results of started calls the cancellation of the run interrupted ("Cancelled", or the
    call's own result when it had finished), each with its events already emitted."""

    async def run(
        self, calls: list[ToolCall]
    ) -> tuple[list[ToolResultMessage], list[AgentMessage]]:
        """Results in call order, plus steering messages that arrived during execution."""
        results: dict[int, ToolResultMessage] = {}
        steering: list[AgentMessage] = []
        try:
            if self.strategy == "sequential":
                for i, tc in enumerate(calls):
                    results[i] = await self._execute(tc)
                    steering = [] if self.fatal else await self.poll_steering()
                    if steering or self.fatal:
                        for j in range(i + 1, len(calls)):
                            results[j] = self._skipped(calls[j])
                        break
            elif self.strategy == "parallel":
                await self._run_batch(calls, range(len(calls)), results)
                steering = [] if self.fatal else await self.poll_steering()
            else:
                size = self.strategy.size
                for start in range(0, len(calls), size):
                    await self._run_batch(
                        calls, range(start, min(start + size, len(calls))), results
                    )
                    steering = [] if self.fatal else await self.poll_steering()
                    if steering or self.fatal:
                        for j in range(start + size, len(calls)):
                            results[j] = self._skipped(calls[j])
                        break
        except asyncio.CancelledError:
            # Keep the conversation valid: every call gets a result even when the run stops. A
            # call that had started has had its ToolExecutionEnd and message events (see
            # _execute); one that never started gets its result's message events here.
            emit = self.emitter.emit
            for i, tc in enumerate(calls):
                if i in results:
                    continue
                message = self._interrupted.pop(tc.id, None)
                if message is None:
                    message = self._result_message(tc, ToolResult.error("Cancelled"))
                    emit(MessageStart(loop_id=self.loop_id, message=message))
                    emit(MessageEnd(loop_id=self.loop_id, message=message))
                results[i] = message
            self._interrupted.clear()
            self._pending_results = [results[i] for i in range(len(calls))]
            raise
        return [results[i] for i in range(len(calls))], steering

    _pending_results: list[ToolResultMessage] | None = None

    def take_partial_results(self) -> list[ToolResultMessage]:
        """After a cancelled :meth:`run`: one result per call (finished or "Cancelled")."""
        out, self._pending_results = self._pending_results or [], None
        return out

    async def _run_batch(
        self, calls: list[ToolCall], indices: range, results: dict[int, ToolResultMessage]
    ) -> None:
        if len(indices) == 1:
            results[indices[0]] = await self._execute(calls[indices[0]])
            return

        async def one(i: int) -> None:
            results[i] = await self._execute(calls[i])

        # calls that spend the run's limits side by side split what is left between them, so
        # together they stay within it
        spenders = [
            calls[i].id
            for i in indices
            if getattr(self._find(calls[i].name), "spends_limits", False)
        ]
        left = self.limits_left() if len(spenders) > 1 else None
        if left is not None:
            self._shares.update(dict.fromkeys(spenders, left.split(len(spenders))))
        try:
            async with asyncio.TaskGroup() as group:
                for i in indices:
                    group.create_task(one(i))
        except BaseExceptionGroup as errors:
            # GeneratorExit thrown into a task skips the handlers inside it (PEP 380 closes the
            # awaited chain): keep the bare exception for the loop, and a result for every call.
            fatal = _first_fatal(errors)
            if fatal is None:
                raise
            self.fatal = self.fatal or fatal
            for i in indices:
                if i not in results:
                    results[i] = self._result_message(
                        calls[i], ToolResult.error(f"Tool raised {type(fatal).__name__}.")
                    )
        finally:
            for call_id in spenders:  # a call refused before it ran never took its share
                self._shares.pop(call_id, None)

    def _find(self, name: str) -> Any:
        for t in self.tools:
            if t.name == name:
                return t
        return None

    def _skipped(self, tc: ToolCall) -> ToolResultMessage:
        emit = self.emitter.emit
        emit(ToolExecutionStart(loop_id=self.loop_id, tool_call_id=tc.id, tool_name=tc.name))
        why = "the run is stopping" if self.fatal else "a steering message arrived"
        message = self._result_message(
            tc, ToolResult.error(f"Skipped: {why} before this tool ran.")
        )
        emit(
            ToolExecutionEnd(
                loop_id=self.loop_id,
                tool_call_id=tc.id,
                tool_name=tc.name,
                result=message,
                is_error=True,
            )
        )
        emit(MessageStart(loop_id=self.loop_id, message=message))
        emit(MessageEnd(loop_id=self.loop_id, message=message))
        return message

    def _result_message(self, tc: ToolCall, result: ToolResult) -> ToolResultMessage:
        result = finish_result(result, self.max_result_bytes)
        return ToolResultMessage(
            tool_call_id=tc.id,
            tool_name=tc.name,
            content=result.content or [TextContent(text="")],
            is_error=result.is_error,
        )

    async def _execute(self, tc: ToolCall) -> ToolResultMessage:
        emit = self.emitter.emit
        loop_id = self.loop_id
        allowed, hook_error = await self.call_hook(
            "before_tool_execution", True, (tc.name, tc.id, tc.arguments)
        )
        if hook_error is not None or allowed is False:
            text = (
                f"Tool call refused: the before_tool_execution hook raised: {hook_error}"
                if hook_error is not None
                else "Tool execution was blocked by the before_tool_execution hook."
            )
            message = self._result_message(tc, ToolResult.error(text))
            emit(MessageStart(loop_id=loop_id, message=message))
            emit(MessageEnd(loop_id=loop_id, message=message))
            return message

        emit(
            ToolExecutionStart(
                loop_id=loop_id, tool_call_id=tc.id, tool_name=tc.name, args=tc.arguments
            )
        )
        try:
            result = await self._outcome(tc)
        except asyncio.CancelledError:
            # The run was cancelled while this call ran: close it like any other call (one
            # ToolExecutionEnd with the "Cancelled" result, then the result's message events);
            # run() puts that result in the conversation.
            message = self._result_message(tc, ToolResult.error("Cancelled"))
            emit(
                ToolExecutionEnd(
                    loop_id=loop_id,
                    tool_call_id=tc.id,
                    tool_name=tc.name,
                    result=message,
                    is_error=True,
                    cancelled=True,
                )
            )
            emit(MessageStart(loop_id=loop_id, message=message))
            emit(MessageEnd(loop_id=loop_id, message=message))
            self._interrupted[tc.id] = message
            raise
        message = self._result_message(tc, result)
        details = result.details
        if details is not None:
            self.details[tc.id] = details
        emit(
            ToolExecutionEnd(
                loop_id=loop_id,
                tool_call_id=tc.id,
                tool_name=tc.name,
                result=message,
                is_error=result.is_error,
                # A sub-agent tool names the loop it ran, linking the two in session records.
                child_loop_id=details.get("child_loop_id") if isinstance(details, dict) else None,
            )
        )
        try:
            await self.call_hook("after_tool_execution", None, (tc.name, tc.id, result.is_error))
        except asyncio.CancelledError:
            self._interrupted[tc.id] = message  # it finished: its own result stays
            raise
        finally:
            emit(MessageStart(loop_id=loop_id, message=message))
            emit(MessageEnd(loop_id=loop_id, message=message))
        return message

    async def _outcome(self, tc: ToolCall) -> ToolResult:
        """What a started call produced (its error result when it cannot run)."""
        agent_tool = self._find(tc.name)
        if agent_tool is None and tc.name in self.caller_tools:
            return ToolResult.error(
                f"Not run: {tc.name!r} is run by the caller, which can only be handed a turn "
                "that calls nothing but its tools, and this turn also called tools run here "
                "(they ran). Call it again in a turn of its own."
            )
        if agent_tool is None:
            names = ", ".join(t.name for t in self.tools) or "none"
            return ToolResult.error(f"Tool {tc.name} not found. Available tools: {names}.")
        if tc.raw_arguments is not None:
            return ToolResult.error(
                f"The arguments for tool {tc.name!r} are not a JSON object: "
                f"{tc.raw_arguments[:500]!r}. Call the tool again with valid JSON arguments."
            )
        refusal = await self._approve(agent_tool, tc)
        return refusal if refusal is not None else await self._invoke(agent_tool, tc)

    async def _approve(self, agent_tool: Any, tc: ToolCall) -> ToolResult | None:
        """Ask the approver when the tool needs approval; an error result when refused."""
        needs = getattr(agent_tool, "needs_approval", False)
        if not needs:
            return None
        reason: str | None
        if callable(needs):
            try:
                reason = needs(dict(tc.arguments))
            except Exception as exc:
                reason = f"its needs_approval check raised {type(exc).__name__}: {exc}"
        else:
            reason = f"the tool {tc.name!r} needs approval for every call"
        if not reason:
            return None
        request = ApprovalRequest(
            tool_name=tc.name,
            arguments=dict(tc.arguments),
            reason=str(reason),
            tool_call_id=tc.id,
            loop_id=self.loop_id,
        )
        decision = await ask_approval(self.approver, request)
        if decision.approved:
            return None
        detail = f": {decision.message}" if decision.message else ""
        return ToolResult.error(f"Tool call not approved ({reason}){detail}")

    async def _invoke(self, agent_tool: Any, tc: ToolCall) -> ToolResult:
        child = self.cancel.child()
        loop_id = self.loop_id
        emit = self.emitter.emit
        pending_updates: list[asyncio.Task[None]] = []
        # A sync tool runs in a worker thread: its updates and progress lines are handed to
        # this loop's thread (in order, before the call's end: the thread's own completion is
        # delivered after them). Once the call has ended they are dropped.
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        ended = False

        async def deliver_update(text: str) -> None:
            text = redact(str(text))  # events, hooks and stored sessions never see a key
            allowed, _err = await self.call_hook(
                "before_tool_execution_update", True, (tc.name, tc.id, text)
            )
            if allowed is False:
                return
            emit(
                ToolExecutionUpdate(
                    loop_id=loop_id, tool_call_id=tc.id, tool_name=tc.name, text=text
                )
            )
            await self.call_hook("after_tool_execution_update", None, (tc.name, tc.id, text))

        def start_update(text: str) -> None:
            if ended:
                logger.debug("dropped an update of tool %s sent after its call ended", tc.name)
                return
            pending_updates.append(loop.create_task(deliver_update(text)))

        def emit_progress(text: str) -> None:
            if ended:
                logger.debug("dropped a progress line of tool %s sent after it ended", tc.name)
                return
            emit(
                ProgressMessage(
                    loop_id=loop_id, tool_call_id=tc.id, tool_name=tc.name, text=redact(str(text))
                )
            )

        def in_loop(fn: Callable[[str], None]) -> Callable[[str], None]:
            def call(text: str) -> None:
                if threading.get_ident() == loop_thread:
                    fn(text)
                elif loop.is_closed():
                    logger.debug("dropped a message of tool %s: its event loop is closed", tc.name)
                else:
                    loop.call_soon_threadsafe(fn, text)

            return call

        on_update, on_progress = in_loop(start_update), in_loop(emit_progress)

        ctx = ToolContext(
            tool_call_id=tc.id,
            tool_name=tc.name,
            loop_id=loop_id,
            cancel=child,
            _on_update=on_update,
            _on_progress=on_progress,
            messages=self.messages,
            emitter=self.emitter,
            _on_usage=lambda usage, cost: self.usage.append((usage, cost)),
            approver=self.approver,
            arguments=dict(tc.arguments),
            limits_left=_within_share(self.limits_left(), self._shares.pop(tc.id, None)),
        )
        timeout = tool_timeout(agent_tool)
        if timeout is None:
            timeout = self.default_timeout
        if child.cancelled:  # the run was cancelled before this call started: it never runs
            child.detach()
            return ToolResult.error(f"Tool {tc.name} was cancelled.")
        timer = asyncio.timeout(timeout)  # None: never
        try:
            async with child.scope() as scope, timer:
                value = await agent_tool.execute(dict(tc.arguments), ctx)
            if scope.cancelled:
                return ToolResult.error(f"Tool {tc.name} was cancelled.")
            return to_tool_result(value)
        except (KeyboardInterrupt, SystemExit, GeneratorExit) as exc:
            # Not swallowed: the loop ends the run (one AgentEnd) and raises it again.
            if self.fatal is None:
                self.fatal = exc
            return ToolResult.error(f"Tool {tc.name} raised {type(exc).__name__}; the run stops.")
        except BaseException as exc:
            if is_real_cancellation(exc):
                raise
            if isinstance(exc, TimeoutError) and timer.expired():
                child.cancel("timeout")
                return ToolResult.error(f"Tool {tc.name} timed out after {timeout:g}s.")
            # Anything else the tool raised, its own TimeoutError, a custom BaseException or a
            # CancelledError nothing asked for included, is that call's failure.
            text = str(exc) or type(exc).__name__
            if not isinstance(exc, _expected_tool_errors()):
                logger.warning("tool %s raised %s", tc.name, type(exc).__name__, exc_info=True)
            if not isinstance(exc, Exception):
                text = f"{type(exc).__name__}: {text}" if str(exc) else text
            return ToolResult.error(f"Tool {tc.name} failed: {text}")
        finally:
            ended = True
            child.detach()
            # Updates are delivered in order before the tool's end event; if the run is being
            # cancelled they are cancelled with it.
            if being_cancelled():
                for task in pending_updates:
                    task.cancel()
            for outcome in await asyncio.gather(*pending_updates, return_exceptions=True):
                if isinstance(outcome, Exception):
                    emit(Warning(loop_id=loop_id, message=f"tool update hook failed for {tc.name}"))


def _within_share(left: LimitsLeft | None, share: LimitsLeft | None) -> LimitsLeft | None:
    """What a call may spend: ``left`` now, within its batch's ``share`` when it has one (the
    time left is the live one: it passes for the whole batch at once)."""
    if left is None or share is None:
        return left

    def least(now: float | None, part: float | None) -> float | None:
        return now if part is None or (now is not None and now < part) else part

    tokens = least(left.tokens, share.tokens)
    return LimitsLeft(
        tokens=None if tokens is None else int(tokens),
        cost=least(left.cost, share.cost),
        seconds=left.seconds,
    )


def _first_fatal(errors: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The SystemExit/KeyboardInterrupt/GeneratorExit in ``errors`` when that is all it holds."""
    fatal: BaseException | None = None
    for error in errors.exceptions:
        if isinstance(error, BaseExceptionGroup):
            inner = _first_fatal(error)
            if inner is None:
                return None
            fatal = fatal or inner
        elif isinstance(error, KeyboardInterrupt | SystemExit | GeneratorExit):
            fatal = fatal or error
        else:
            return None
    return fatal


def _expected_tool_errors() -> tuple[type[BaseException], ...]:
    from .base import ToolError

    return (ToolError,)
