"""The agent loop: ``agent_loop``, ``agent_loop_continue`` and their streaming forms.

Event order per call (phi-core's, §3.3 of the study)::

    before_loop → AgentStart
      [limits] before_turn → TurnStart
         MessageStart/End per prompt (first turn) and per injected steering/follow-up message
         TurnRequest → MessageStart(placeholder) → MessageUpdate* (live) → MessageEnd(assistant)
         per tool call: before_tool_execution → ToolExecutionStart → updates → ToolExecutionEnd
                        → after_tool_execution → MessageStart/End(tool result)
      TurnEnd → after_turn
      ... more turns ...
    AgentEnd → after_loop

Exactly one ``AgentEnd`` is emitted on every path: completion, error, limit, veto, input
rejection and cancellation (by a :class:`CancelToken` or by cancelling the task). Input is
checked before anything starts (prompts, messages, system prompt, tools: a :class:`UserError`
and no event at all); once started, an exception that escapes — ``SystemExit`` or
``KeyboardInterrupt`` from a tool, a bug in a hook — ends the run with reason ``error`` and its
``AgentEnd``, and is then raised again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .._logging import get_logger
from .._tasks import is_real_cancellation
from ..cancel import CancelToken
from ..context.compaction import CompactionReport
from ..context.limits import ExecutionTracker, LimitsLeft, counted_tokens
from ..context.prun import PrunRecord, apply_prunes, pruned_turns
from ..context.window import ContextWindow
from ..errors import (
    BudgetExceededError,
    CallTimeoutError,
    ContextOverflowError,
    ProviderError,
    UserError,
    _DeadlinePassed,
    redact,
)
from ..events import (
    AgentEnd,
    AgentStart,
    CompactionEnded,
    CompactionStarted,
    Emitter,
    EndReason,
    EventStream,
    InputRejected,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    Provenance,
    PrunApplied,
    TurnEnd,
    TurnRequest,
    TurnStart,
    TurnTrigger,
    Warning,
)
from ..metering import active_meters, estimate_request_tokens
from ..providers.base import (
    ModelConfig,
    Provider,
    StreamDone,
    StreamEvent,
    StreamRequest,
    output_ceiling,
)
from ..providers.call import ModelCall
from ..providers.credentials import stream_with_credentials
from ..providers.deadlines import deadline_scope, scope_deadline
from ..tools._validate import check_tools
from ..tools.execute import ToolRunner
from ..types import (
    AgentMessage,
    AssistantMessage,
    Content,
    ExtensionMessage,
    InputSource,
    Message,
    TextContent,
    TextDelta,
    ThinkingContent,
    ThinkingDelta,
    ToolResultMessage,
    TurnId,
    Usage,
    UserMessage,
    now_ms,
)
from ._inputs import check_messages, check_text, coerce_prompts, scrub_assistant
from .config import AgentLoopConfig, maybe_await
from .context import AgentContext

__all__ = [
    "LoopResult",
    "agent_loop",
    "agent_loop_continue",
    "agent_loop_continue_stream",
    "agent_loop_stream",
    "default_convert_to_llm",
]

logger = get_logger("phi_core.loop")

T = TypeVar("T")

_OBSERVER_GRACE = 5.0
"""Seconds an observer hook (``after_*``, ``on_error``) that starts once the run's deadline has
passed has to observe the run ending on it."""


_OBSERVER_HOOKS = frozenset(
    {
        "after_loop",
        "after_turn",
        "after_tool_execution",
        "after_tool_execution_update",
        "on_error",
        "after_compaction_end",
    }
)


@dataclass
class LoopResult:
    """What one loop call produced."""

    loop_id: str
    messages: list[AgentMessage] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    reason: EndReason = "completed"
    error: str | None = None
    rejection: str | None = None
    error_kind: str | None = None
    """The classified kind of ``error``: a provider error's ``kind`` (``auth``, ``rate_limited``,
    ``timeout``, ``budget``, ...), or ``hook``, ``limit``, ``cancelled``, ``internal``."""
    retry_after: float | None = None
    """Seconds the vendor asked to wait, when the run ended on a rate limit that said so."""
    cached_calls: int = 0
    """Model calls answered from the configured ``response_cache`` (free, instant)."""

    @property
    def final_message(self) -> AssistantMessage | None:
        for message in reversed(self.messages):
            if isinstance(message, AssistantMessage):
                return message
        return None

    @property
    def text(self) -> str:
        final = self.final_message
        return final.text if final is not None else ""

    @property
    def ok(self) -> bool:
        return self.reason == "completed"


async def agent_loop(
    prompts: str | AgentMessage | Sequence[AgentMessage],
    context: AgentContext,
    config: AgentLoopConfig,
    *,
    events: Any = None,
    cancel: CancelToken | None = None,
) -> LoopResult:
    """Run the agent on new input: append ``prompts`` to ``context`` and loop until done.

    ``events`` is a sink (sync/async callable or ``asyncio.Queue``); ``cancel`` stops the run
    promptly with reason ``cancelled`` (stop reason ``aborted`` on an interrupted reply).
    """
    batch = coerce_prompts(prompts)
    return await _Run(context, config, events, cancel, batch).execute()


async def agent_loop_continue(
    context: AgentContext,
    config: AgentLoopConfig,
    *,
    events: Any = None,
    cancel: CancelToken | None = None,
) -> LoopResult:
    """Resume from ``context`` without new prompts (e.g. after tool results or a race)."""
    if not context.agent_id:
        raise UserError("agent_loop_continue requires context.agent_id to be set")
    if not context.session_id:
        raise UserError("agent_loop_continue requires context.session_id to be set")
    if not context.messages:
        raise UserError("agent_loop_continue requires a context with at least one message")
    if isinstance(context.messages[-1], AssistantMessage):
        raise UserError(
            "agent_loop_continue cannot continue from an assistant message: the model would "
            "answer itself. Add a user message (use agent_loop) or a tool result first."
        )
    return await _Run(context, config, events, cancel, None).execute()


def agent_loop_stream(
    prompts: str | AgentMessage | Sequence[AgentMessage],
    context: AgentContext,
    config: AgentLoopConfig,
    *,
    cancel: CancelToken | None = None,
) -> EventStream[LoopResult]:
    """``async for event in agent_loop_stream(...)``; ``await`` it for the :class:`LoopResult`."""
    return EventStream(
        lambda queue: agent_loop(prompts, context, config, events=queue, cancel=cancel)
    )


def agent_loop_continue_stream(
    context: AgentContext, config: AgentLoopConfig, *, cancel: CancelToken | None = None
) -> EventStream[LoopResult]:
    return EventStream(
        lambda queue: agent_loop_continue(context, config, events=queue, cancel=cancel)
    )


def default_convert_to_llm(messages: list[AgentMessage]) -> list[Message]:
    """Keep the messages a model can read: everything but extension messages."""
    return [m for m in messages if not isinstance(m, ExtensionMessage)]


class _Run:
    """The state of one loop call. ``execute`` is the whole envelope."""

    def __init__(
        self,
        context: AgentContext,
        config: AgentLoopConfig,
        events: Any,
        cancel: CancelToken | None,
        prompts: list[AgentMessage] | None,
    ) -> None:
        self.context = context
        self.config = config
        # Checked before any event: what a provider would reject is a usage error now.
        check_messages(context.messages, "context.messages")
        for prompt in (config.system_prompt, context.system_prompt):
            if prompt is not None:
                check_text(prompt, "The system prompt")
        self.tool_defs = check_tools(context.tools, config.caller_tools)
        self.caller_tools = {t.name for t in config.caller_tools}
        self.owns_emitter = not isinstance(events, Emitter)
        self.emitter = Emitter.of(events)
        self.cancel = cancel or CancelToken()
        self.prompts = prompts
        # Resolve before any event: a bad model string or a missing key is a usage error.
        self.model: ModelConfig = config.model_config()
        # With a credential provider the key is only known per call.
        self.provider: Provider | None = config.provider or (
            _registry_provider(self.model) if config.credentials is None else None
        )
        if prompts is None:
            if not context.loop_id:
                from .context import new_id

                context.loop_id = new_id()
        else:
            context.ensure_ids()
        assert context.loop_id is not None
        self.loop_id: str = context.loop_id
        self.new_messages: list[AgentMessage] = []
        self.usage = Usage()
        self.cost = 0.0
        self.reason: EndReason = "completed"
        self.error: str | None = None
        self.error_kind: str | None = None
        self.retry_after: float | None = None
        self.cached_calls = 0
        self.rejection: str | None = None
        self.turn_tokens = 0
        """The tokens of this turn's reply, not yet recorded on the tracker while its tools run."""
        self.tracker = ExecutionTracker(config.limits) if config.limits is not None else None
        self.run_deadline = self.tracker.deadline() if self.tracker is not None else None
        """``max_duration`` as a ``time.monotonic()`` value: calls and tools end there."""
        self.run_deadline_hit = False
        self.bounded = False
        """Inside a block :meth:`_within_deadline` bounds (work inside it is not bounded again)."""
        self.observer_cut: str | None = None
        """Why an observer hook was cancelled at the run's deadline: a run that otherwise
        completed ends on the limit with it."""
        self.window = (
            ContextWindow(
                config.compaction,
                self.model,
                system_prompt=self._system_prompt(),
                tools=self.tool_defs,
            )
            if config.compaction is not None
            else None
        )
        self.call: ModelCall | None = None
        self.started = False
        self.ended = False
        self.open_turn: int | None = None
        """The turn with a ``TurnStart`` and no ``TurnEnd`` yet (closed by :meth:`_end`)."""

    # ------------------------------------------------------------------ envelope

    async def execute(self) -> LoopResult:
        try:
            try:
                async with self.cancel.scope() as scope:
                    await self._envelope()
                if scope.cancelled:
                    self._mark_cancelled()
            except _DeadlinePassed as passed:
                # a hook, filter, getter, transform_context or compaction still ran at the
                # run's deadline: it was cancelled and the run ends on the limit
                self.reason, self.error, self.error_kind = "limit", str(passed), "timeout"
            except asyncio.CancelledError:
                # Cancelled from outside: still exactly one AgentEnd, then propagate.
                self._mark_cancelled()
                self._end()
                raise
            except BaseException as exc:
                # SystemExit/KeyboardInterrupt from a tool, a bug: end the run, then re-raise.
                self.reason = "error"
                self.error = redact(f"{type(exc).__name__} raised during the run: {exc}").rstrip(
                    ": "
                )
                self._end()
                raise
            if self.observer_cut is not None and self.reason == "completed":
                self.reason, self.error, self.error_kind = "limit", self.observer_cut, "timeout"
            self._end()
            if self.started:
                await self._hook("after_loop", None, (list(self.new_messages), self.usage))
        finally:
            if self.owns_emitter:
                await self.emitter.aclose()
        return LoopResult(
            loop_id=self.loop_id,
            messages=self.new_messages,
            usage=self.usage,
            cost_usd=self.cost,
            reason=self.reason,
            error=self.error,
            rejection=self.rejection,
            error_kind=self.error_kind,
            retry_after=self.retry_after,
            cached_calls=self.cached_calls,
        )

    def _end(self) -> None:
        if not self.ended:
            self.ended = True
            if self.open_turn is not None:
                # the run stopped inside a turn before it could close it (cancelled or failed
                # while the request was built): the turn ends with the run, with no reply
                stopped = AssistantMessage(
                    model=self.model.id,
                    provider=self.model.provider,
                    stop_reason="aborted" if self.reason == "cancelled" else "error",
                    error_message=self.error or self.reason,
                )
                self._turn_end(self.open_turn, stopped)
            self.emitter.emit(self._end_event())

    def _turn_end(
        self, turn_index: int, message: AssistantMessage, tool_results: list[Any] | None = None
    ) -> None:
        """Emit the ``TurnEnd`` of ``turn_index`` (every path that ends a turn comes here)."""
        self.open_turn = None
        self.emitter.emit(
            TurnEnd(
                loop_id=self.loop_id,
                turn_index=turn_index,
                message=message,
                usage=message.usage,
                tool_results=tool_results or [],
            )
        )

    def _close_stopped_tools(
        self,
        runner: ToolRunner,
        calls: list[Any],
        assistant: AssistantMessage,
        turn_index: int,
        turn_id: TurnId,
    ) -> None:
        """Tools stopped mid-turn (cancelled, or past the run's deadline): every call's result
        (a "Cancelled" one for those cut short) goes into the context and the turn ends."""
        results = runner.take_partial_results()
        self._append_tool_results(results, turn_id)
        self._take_tool_effects(runner, calls, turn_id)
        self._turn_end(turn_index, assistant, results)

    def _mark_cancelled(self) -> None:
        self.reason = "cancelled"
        why = self.cancel.reason if self.cancel.cancelled else None
        # the token's reason when it says more (a race's branch_timeout says "timeout")
        self.error = self.error or (f"cancelled: {why}" if why and why != "cancelled" else None)
        self.error = self.error or "cancelled"
        self.error_kind = self.error_kind or ("timeout" if why == "timeout" else "cancelled")

    def _end_event(self) -> AgentEnd:
        return AgentEnd(
            loop_id=self.loop_id,
            messages=list(self.new_messages),
            usage=self.usage,
            cost_usd=self.cost,
            reason=self.reason,
            rejection=self.rejection,
            error=self.error,
        )

    async def _envelope(self) -> None:
        context = self.context
        allowed, err = await self._hook("before_loop", True, (list(context.messages),))
        if err is not None:
            self.reason, self.error = "error", redact(f"The before_loop hook raised: {err}")
            self.error_kind = "hook"
            return
        if allowed is False:
            self.reason = "vetoed"
            return
        assert context.agent_id and context.session_id
        self.started = True
        if self.emitter.active:  # no event is built when nobody listens (AgentEnd always is)
            self.emitter.emit(
                AgentStart(
                    loop_id=self.loop_id,
                    agent_id=context.agent_id,
                    session_id=context.session_id,
                    parent_loop_id=context.parent_loop_id,
                    continuation_kind=context.continuation_kind,
                    config_snapshot=self.config.snapshot(),
                )
            )
        if self.prompts is not None:
            batch = await self._within_deadline(self._filter(self.prompts), "in an input filter")
            if batch is None:
                return
            context.messages.extend(batch)
            self.new_messages.extend(batch)
            self.prompts = batch
        await self._run_loop()

    # ------------------------------------------------------------------ hooks & filters

    async def _within_deadline(self, work: Awaitable[T], where: str, *, grace: bool = False) -> T:
        """Await ``work`` within the run's deadline (its ``max_duration``, a budget's
        ``max_wall_s`` or an enclosing run's deadline, the earliest): past it ``work`` is
        cancelled and :class:`_DeadlinePassed` raised (the run ends on the limit). Work already
        inside a bounded block (a hook called by a compaction) is awaited as it is. With
        ``grace`` (an observer hook), work that starts once the deadline has passed (to observe
        the run ending on it) gets :data:`_OBSERVER_GRACE` seconds instead."""
        ends = [d for d in (self.run_deadline, scope_deadline()) if d is not None]
        if self.bounded or not ends:
            return await work
        end = min(ends)
        if grace and end <= time.monotonic():
            end = time.monotonic() + _OBSERVER_GRACE
        self.bounded = True
        timer = asyncio.timeout_at(_loop_time(end))
        try:
            async with timer:
                return await work
        except TimeoutError:
            if not timer.expired():
                raise
            raise _DeadlinePassed(self._run_deadline_passed(where)) from None
        finally:
            self.bounded = False

    async def _hook(
        self, name: str, default: Any, args: tuple[Any, ...], *, bounded: bool = True
    ) -> tuple[Any, str | None]:
        """Call hook ``name`` if set. Returns (value, error text if it raised).

        A hook still running at the run's deadline is cancelled (``bounded``; the tool runner's
        hooks are bounded with the tools): a gate hook (``before_*``) ends the run on the limit;
        an observer hook (``after_*``, ``on_error``) gets a warning and the run goes on to end
        on its limit, and one that starts after the deadline passed has a few seconds to
        observe that. A ``CancelledError`` a hook raises while nothing cancels the run is that
        hook's failure, like any error."""
        fn = getattr(self.config.hooks, name, None)
        if fn is None:
            return default, None
        observer = name in _OBSERVER_HOOKS
        failure: BaseException
        try:
            if bounded:
                value = await self._within_deadline(
                    maybe_await(fn(*args)), f"in the {name} hook", grace=observer
                )
            else:
                value = await maybe_await(fn(*args))
        except _DeadlinePassed as passed:
            if not observer:
                raise
            text = f"The {name} hook was cancelled: {passed}"
            logger.warning("%s", text)
            if not self.ended:  # nothing follows AgentEnd (after_loop): logged only
                self.emitter.emit(Warning(loop_id=self.loop_id, message=text))
                self.observer_cut = self.observer_cut or str(passed)
            return default, str(passed)
        except asyncio.CancelledError as exc:
            if is_real_cancellation(exc):
                raise
            failure = exc
        except Exception as exc:
            failure = exc
        else:
            return (default if value is None else value), None
        kind = type(failure).__name__
        text = redact(f"{kind}: {failure}" if str(failure) else kind)
        logger.warning("hook %s raised %s", name, text, exc_info=failure)
        if observer and not self.ended:  # nothing follows AgentEnd: logged
            self.emitter.emit(
                Warning(loop_id=self.loop_id, message=f"The {name} hook raised {text}")
            )
        return default, text

    async def _filter(self, batch: list[AgentMessage]) -> list[AgentMessage] | None:
        """Apply input filters to a batch; None when rejected (InputRejected already emitted)."""
        filters = self.config.input_filters
        if not filters or not batch:
            return batch
        text = "\n".join(
            c.text
            for m in batch
            if isinstance(m, UserMessage)
            for c in m.content
            if isinstance(c, TextContent)
        )
        warnings: list[str] = []
        for input_filter in filters:
            try:
                verdict = await maybe_await(input_filter(text))
            except Exception as exc:
                verdict_reason = redact(f"input filter raised {type(exc).__name__}: {exc}")
                self._reject(verdict_reason)
                return None
            if verdict.action == "reject":
                self._reject(verdict.message)
                return None
            if verdict.action == "warn":
                warnings.append(verdict.message)
        if warnings:
            users = [i for i, m in enumerate(batch) if isinstance(m, UserMessage)]
            if users:
                last = batch[users[-1]]
                assert isinstance(last, UserMessage)
                note = "\n".join(f"[Warning: {w}]" for w in warnings)
                batch = list(batch)
                batch[users[-1]] = last.model_copy(
                    update={"content": [*last.content, TextContent(text=note)]}
                )
        return batch

    def _reject(self, reason: str) -> None:
        self.emitter.emit(InputRejected(loop_id=self.loop_id, reason=reason))
        self.reason = "rejected"
        self.rejection = reason

    async def _poll(self, getter: Any) -> list[AgentMessage]:
        if getter is None:
            return []
        try:
            messages = list(await maybe_await(getter()) or [])
        except Exception as exc:
            self.emitter.emit(
                Warning(loop_id=self.loop_id, message=f"message getter raised {exc!r}")
            )
            return []
        valid: list[AgentMessage] = []
        for message in messages:
            try:
                check_messages([message], "a queued message")
            except UserError as exc:
                self.emitter.emit(Warning(loop_id=self.loop_id, message=redact(f"dropped: {exc}")))
                continue
            valid.append(message)
        return valid

    # ------------------------------------------------------------------ the turn engine

    async def _end_turn(
        self, assistant: AssistantMessage, turn_index: int, results: list[Any], live: bool
    ) -> None:
        """Count a finished turn, tell observers (``TurnEnd``) and the ``after_turn`` hook."""
        if self.tracker is not None:
            self.tracker.record_turn(counted_tokens(assistant.usage))
        if live:
            self._turn_end(turn_index, assistant, results)
        self.open_turn = None
        await self._hook("after_turn", None, (self.context.messages, assistant.usage))

    async def _run_loop(self) -> None:
        config = self.config
        context = self.context
        emit = self.emitter.emit
        live = self.emitter.active
        loop_id = self.loop_id
        if self.window is not None:
            try:
                await self._within_deadline(
                    self.window.start(), "while the context window was set up"
                )
            except Exception as exc:
                self._context_failed(exc)
        pending = await self._steering()
        if pending is None:
            return
        _stamp(pending, "steering")
        first_turn = True
        turn = 0
        runner = ToolRunner(
            tools=context.tools,
            loop_id=loop_id,
            emitter=self.emitter,
            cancel=self.cancel,
            strategy=config.tool_execution,
            default_timeout=config.tool_timeout,
            # bounded with the tools (the runner's deadline), not each on its own
            call_hook=lambda name, default, args: self._hook(name, default, args, bounded=False),
            poll_steering=lambda: self._poll(config.get_steering_messages),
            messages=context.messages,
            approver=config.approver,
            max_result_bytes=config.tool_result_max_bytes,
            caller_tools=frozenset(self.caller_tools),
        )
        runner.limits_left = lambda: self._limits_left(runner)
        while True:
            while True:
                if self.cancel.cancelled:  # cancelled already (before the run, or by sync code)
                    return
                trigger: TurnTrigger
                if not first_turn:
                    trigger = "continuation"
                elif context.continuation_kind == "branch":
                    trigger = "branch"
                elif context.continuation_kind != "initial":
                    trigger = "continuation"
                else:
                    trigger = config.first_turn_trigger
                if self.tracker is not None:
                    why = self.tracker.check_limits()
                    if why is not None:
                        stop = UserMessage.text(f"[Agent stopped: {why}]")
                        stop.provenance = "limit"
                        emit(MessageStart(loop_id=loop_id, message=stop))
                        emit(MessageEnd(loop_id=loop_id, message=stop))
                        context.messages.append(stop)
                        self.new_messages.append(stop)
                        self.reason, self.error, self.error_kind = "limit", why, "limit"
                        return
                allowed, err = await self._hook("before_turn", True, (context.messages, turn))
                if err is not None:
                    self.reason, self.error = "error", redact(f"The before_turn hook raised: {err}")
                    self.error_kind = "hook"
                    return
                if allowed is False:
                    self.reason = "vetoed"
                    return
                if live:
                    emit(TurnStart(loop_id=loop_id, turn_index=turn, triggered_by=trigger))
                    self.open_turn = turn
                this_turn = turn
                turn += 1
                turn_id = TurnId(loop_id=loop_id, turn_index=this_turn)
                if first_turn and self.prompts:
                    source: InputSource = (
                        "sub_agent" if config.first_turn_trigger == "sub_agent" else "user"
                    )
                    for prompt in self.prompts:
                        prompt.turn_id = turn_id
                        _stamp([prompt], source)
                        if live:
                            emit(MessageStart(loop_id=loop_id, message=prompt))
                            emit(MessageEnd(loop_id=loop_id, message=prompt))
                first_turn = False
                for message in pending:
                    message.turn_id = turn_id
                    emit(MessageStart(loop_id=loop_id, message=message))
                    emit(MessageEnd(loop_id=loop_id, message=message))
                    context.messages.append(message)
                    self.new_messages.append(message)
                pending = []

                with deadline_scope(at=self.run_deadline):
                    assistant = await self._stream_turn(this_turn, turn_id)
                cached = self.call is not None and self.call.cached
                # A reply from the response cache is free: its tokens are reported, not paid.
                turn_cost = 0.0 if cached else assistant.usage.cost(self.model.pricing)
                self.usage = self.usage + assistant.usage
                self.turn_tokens = counted_tokens(assistant.usage)
                self.cost += turn_cost
                if self.tracker is not None:
                    self.tracker.record_cost(turn_cost)
                if assistant.stop_reason in ("error", "aborted"):
                    if assistant.stop_reason == "error":
                        await self._hook(
                            "on_error", None, (assistant.error_message or "Unknown error",)
                        )
                    self._turn_end(this_turn, assistant)
                    await self._hook("after_turn", None, (context.messages, assistant.usage))
                    self.reason = "error" if assistant.stop_reason == "error" else "cancelled"
                    self.error = assistant.error_message or self.error
                    self.error_kind = assistant.error_kind or (
                        "internal" if assistant.stop_reason == "error" else "cancelled"
                    )
                    self.retry_after = assistant.retry_after
                    if self.error_kind == "budget" or self.run_deadline_hit:
                        # The budget refused the call, or max_duration passed mid-stream: a
                        # limit, not a fault.
                        self.reason = "limit"
                    return

                calls = assistant.tool_calls
                if calls and all(c.name in self.caller_tools for c in calls):
                    # The caller runs these tools: the turn (and the run) ends on the calls.
                    # (A turn that mixes them with the run's own tools runs the own ones and
                    # tells the model to call the caller's again on their own: ToolRunner.)
                    await self._end_turn(assistant, this_turn, [], live)
                    return
                results: list[Any] = []
                steering: list[AgentMessage] = []
                if calls:
                    # tools end at the run's deadline: its max_duration, a budget's max_wall_s
                    # or an enclosing run's deadline, whichever comes first
                    ends = [d for d in (self.run_deadline, scope_deadline()) if d is not None]
                    timer = asyncio.timeout_at(_loop_time(min(ends) if ends else None))
                    try:
                        async with timer:
                            results, steering = await runner.run(calls)
                    except asyncio.CancelledError:
                        # Every call has its result (and its events); close the turn as the
                        # streaming path does when it is cancelled, then let it propagate.
                        self._close_stopped_tools(runner, calls, assistant, this_turn, turn_id)
                        raise
                    except TimeoutError:
                        if not timer.expired():
                            raise
                        # the deadline passed while tools ran: they were cancelled (each call
                        # has a result); the run ends on the limit.
                        self._close_stopped_tools(runner, calls, assistant, this_turn, turn_id)
                        why = self._run_deadline_passed("while tools ran")
                        self.reason, self.error, self.error_kind = "limit", why, "timeout"
                        return
                    self._append_tool_results(results, turn_id)
                    self._take_tool_effects(runner, calls, turn_id)
                    if runner.fatal is not None:
                        raise runner.fatal
                await self._end_turn(assistant, this_turn, results, live)
                if steering:
                    filtered = await self._within_deadline(
                        self._filter(steering), "in an input filter"
                    )
                    if filtered is None:
                        return
                    pending = _stamp(filtered, "steering")
                    continue
                filtered = await self._steering()
                if filtered is None:
                    return
                pending = filtered
                if not calls and not pending:
                    break
            follow_ups = await self._within_deadline(
                self._polled(config.get_follow_up_messages),
                "while follow-up messages were fetched and filtered",
            )
            if follow_ups is None:
                return
            if not follow_ups:
                return
            pending = _stamp(follow_ups, "follow_up")

    async def _polled(self, getter: Any) -> list[AgentMessage] | None:
        """Messages from ``getter``, filtered (None: the input filters rejected them)."""
        return await self._filter(await self._poll(getter))

    async def _steering(self) -> list[AgentMessage] | None:
        """Steering messages, filtered and stamped, within the run's deadline."""
        filtered = await self._within_deadline(
            self._polled(self.config.get_steering_messages),
            "while steering messages were fetched and filtered",
        )
        return None if filtered is None else _stamp(filtered, "steering")

    def _limits_left(self, runner: ToolRunner) -> LimitsLeft | None:
        """What the run's limits have left for a tool call starting now: the turn's reply and
        what earlier tool calls of this turn spent (sub-agents that ran before it, in the
        same turn) are not recorded on the tracker yet, and are taken off here."""
        if self.tracker is None:
            return None
        spent = runner.usage
        return self.tracker.left(
            pending_tokens=self.turn_tokens + sum(counted_tokens(u) for u, _ in spent),
            pending_cost=sum(cost for _, cost in spent),
        )

    def _append_tool_results(self, results: list[Any], turn_id: TurnId) -> None:
        for result in results:
            result.turn_id = turn_id
            self.context.messages.append(result)
            self.new_messages.append(result)

    def _take_tool_effects(self, runner: ToolRunner, calls: list[Any], turn_id: TurnId) -> None:
        """Count usage tools reported (sub-agents) and apply prunes the model asked for."""
        for usage, cost in runner.usage:
            self.usage = self.usage + usage
            self.cost += cost
            if self.tracker is not None:
                self.tracker.record_cost(cost)
                self.tracker.tokens_used += counted_tokens(usage)
        runner.usage.clear()
        for tc in calls:
            record = runner.details.pop(tc.id, None)
            if isinstance(record, PrunRecord):
                self._apply_prun(record, tc.id, turn_id)

    def _apply_prun(self, record: PrunRecord, tool_call_id: str, turn_id: TurnId) -> None:
        done = pruned_turns(self.context.messages)
        fresh = [t for t in record.turns if (t.loop_id, t.turn_index) not in done]
        if not fresh:
            return
        if len(fresh) != len(record.turns):
            record = record.model_copy(update={"turns": fresh})
        note = ExtensionMessage(kind="prun", data=record.model_dump(mode="json"), turn_id=turn_id)
        self.context.messages.append(note)
        self.new_messages.append(note)
        if self.window is not None:
            self.window.reset()
        self.emitter.emit(
            PrunApplied(
                loop_id=self.loop_id,
                tool_call_id=tool_call_id,
                pruned_turns=record.turns,
                pruned_timestamps=record.pruned_timestamps,
                tokens_removed=record.tokens_removed,
                messages_removed=record.messages_removed,
                memo=record.memo,
            )
        )

    # ------------------------------------------------------------------ one model call

    def _context_failed(self, exc: Exception) -> None:
        """Context management broke (a custom token counter or compaction strategy raised):
        say so and carry on without it for the rest of the run."""
        text = redact(f"{type(exc).__name__}: {exc}")
        logger.warning("context management failed: %s", text, exc_info=True)
        self.emitter.emit(
            Warning(
                loop_id=self.loop_id,
                message=f"Context management failed ({text}); it is off for the rest of this run "
                "and the conversation is sent uncompacted.",
            )
        )
        self.window = None

    def _system_prompt(self) -> str | None:
        if self.config.system_prompt is not None:
            return self.config.system_prompt
        return self.context.system_prompt

    async def _build_request(self, *, overflow: bool = False) -> StreamRequest | None:
        """The request of this turn: the log with prunes applied, ``transform_context``, then
        compaction (harder, with ``overflow``; None when that cannot shrink it), within the
        run's deadline."""
        config = self.config
        working = await self._within_deadline(
            self._working(overflow=overflow),
            "while the request was built (transform_context and compaction)",
        )
        if working is None:
            return None
        convert = config.convert_to_llm or default_convert_to_llm
        model = self.model
        return StreamRequest(
            model=model,
            messages=convert(working),
            system_prompt=self._system_prompt(),
            tools=self.tool_defs,
            thinking=config.thinking,
            max_tokens=config.max_tokens,
            temperature=config.temperature if config.temperature is not None else model.temperature,
            top_p=config.top_p if config.top_p is not None else model.top_p,
            seed=config.seed if config.seed is not None else model.seed,
            response_format=config.response_format,
            cache=config.cache,
            extra=config.extra,
        )

    async def _working(self, *, overflow: bool) -> list[AgentMessage] | None:
        """The messages to send: the log with prunes applied, ``transform_context``, then
        compaction (None when an overflow's harder compaction cannot shrink them)."""
        working = apply_prunes(self.context.messages)
        transform = self.config.transform_context
        if transform is not None:
            working = list(await maybe_await(transform(working)))
        try:
            if self.window is not None and (overflow or not self.window.fits(working)):
                compacted = await self._compact(working, overflow=overflow)
                if compacted is None:
                    return None
                working = compacted
        except Exception as exc:  # a custom counter or strategy that fails never ends the run
            self._context_failed(exc)
            if overflow:
                return None
        return working

    async def _compact(
        self, messages: list[AgentMessage], *, overflow: bool
    ) -> list[AgentMessage] | None:
        """Compact the payload (never the log) when the trigger fires, with hooks/events."""
        loop_id = self.loop_id
        emit = self.emitter.emit
        assert self.window is not None

        async def before_start(tokens: int, count: int) -> bool:
            allowed, _err = await self._hook("before_compaction_start", True, (tokens, count))
            return allowed is not False

        def started(tokens: int, count: int, reason: Any) -> None:
            emit(
                CompactionStarted(
                    loop_id=loop_id, estimated_tokens=tokens, message_count=count, reason=reason
                )
            )

        async def ended(report: CompactionReport) -> None:
            emit(
                CompactionEnded(
                    loop_id=loop_id,
                    messages_before=report.messages_before,
                    messages_after=report.messages_after,
                    estimated_tokens_before=report.estimated_tokens_before,
                    estimated_tokens_after=report.estimated_tokens_after,
                    reason=report.reason,
                    error=report.error,
                )
            )
            await self._hook(
                "after_compaction_end",
                None,
                (
                    report.messages_before,
                    report.messages_after,
                    report.estimated_tokens_before,
                    report.estimated_tokens_after,
                ),
            )

        return await self.window.view(
            messages,
            before_start=before_start,
            on_started=started,
            on_compacted=ended,
            overflow=overflow,
        )

    def _stream(self, request: StreamRequest) -> AsyncIterator[StreamEvent]:
        """The call through :class:`ModelCall` (per credential attempt when credentials are set;
        ``self.call`` is the latest attempt, for its partial usage)."""
        config = self.config

        def open_call(provider: Provider, sent: StreamRequest) -> AsyncIterator[StreamEvent]:
            self.call = ModelCall(
                provider,
                sent,
                retry=config.retry,
                cache=config.response_cache,
                deadlines=config.deadlines,
            )
            return self.call.stream()

        if config.credentials is None:
            assert self.provider is not None
            return open_call(self.provider, request)
        override = config.provider
        return stream_with_credentials(
            (lambda _model: override) if override is not None else _registry_provider,
            request,
            config.credentials,
            open_stream=open_call,
        )

    def _run_deadline_passed(self, where: str) -> str:
        """The stop reason when the run's deadline passed ``where``, naming the limit that fired:
        the earliest of this loop's ``max_duration``, an active budget's ``max_wall_s`` and an
        enclosing run's deadline."""
        meters = self.call.meters if self.call is not None else active_meters()
        # (when, reason): the earliest deadline is the one the call ran into.
        fired: list[tuple[float, str]] = []
        if self.tracker is not None and self.run_deadline is not None:
            fired.append((self.run_deadline, self.tracker.duration_exceeded(where)))
        for meter in meters:
            budget = meter.budget
            if budget is not None and budget.max_wall_s is not None:
                fired.append(
                    (
                        meter.started + budget.max_wall_s,
                        f"Budget max_wall_s reached {where} "
                        f"({meter.elapsed():.1f}s/{budget.max_wall_s:g}s)",
                    )
                )
        outer = scope_deadline(())
        if outer is not None:
            fired.append((outer, f"An enclosing run's deadline passed {where}"))
        if not fired:
            return f"The run's deadline passed {where}"
        return min(fired, key=lambda item: item[0])[1]

    def _partial_usage(self) -> Usage:
        return self.call.partial_usage() if self.call is not None else Usage()

    async def _stream_turn(self, turn_index: int, turn_id: TurnId) -> AssistantMessage:
        emitter = self.emitter
        emit = emitter.emit
        loop_id = self.loop_id
        live = emitter.active
        self.call = None
        request = await self._build_request()
        assert request is not None
        final: AssistantMessage | None = None
        refused = self._fit_limits(request)
        if refused is not None:
            final = self._error_message(refused)
        if live:
            emit(self._turn_request(turn_index, request))
            placeholder = AssistantMessage(model=self.model.id, provider=self.model.provider)
            emit(MessageStart(loop_id=loop_id, message=placeholder))
        texts: dict[int, list[str]] = {}
        thinking: dict[int, list[str]] = {}
        construct = MessageUpdate.model_construct
        recovered = False
        overflowed: ContextOverflowError | None = None
        while final is None:
            try:
                if overflowed is not None:
                    # Compact harder and send once more, if compaction is on and nothing
                    # streamed (here, not in the handler, so a cancellation meanwhile ends the
                    # message and the turn like any other).
                    retry = None
                    if self.window is not None and not recovered and not texts and not thinking:
                        recovered = True
                        self.window.overflowed()
                        retry = await self._build_request(overflow=True)
                    if retry is None:
                        if recovered:
                            # compaction went as far as it can (never separating a tool result
                            # from its call); the provider's words stay at the end
                            overflowed = ContextOverflowError(
                                "The conversation does not fit the model's context window even "
                                "compacted as far as it can be without separating a tool result "
                                f"from its call (a single message may be too large): {overflowed}",
                                status=overflowed.status,
                            )
                        final = self._error_message(overflowed)
                        break
                    overflowed, request = None, retry
                    refused = self._fit_limits(request)
                    if refused is not None:
                        final = self._error_message(refused)
                        break
                    if live:
                        emit(self._turn_request(turn_index, request))
                async for item in self._stream(request):
                    if isinstance(item, StreamDone):
                        final = item.message
                        continue
                    if isinstance(item, TextDelta):
                        texts.setdefault(item.index, []).append(item.text)
                    elif isinstance(item, ThinkingDelta):
                        thinking.setdefault(item.index, []).append(item.thinking)
                    if live:
                        emit(
                            construct(
                                loop_id=loop_id,
                                timestamp=now_ms(),
                                type="message_update",
                                delta=item,
                            )
                        )
            except ContextOverflowError as exc:
                overflowed = exc
            except ProviderError as exc:
                final = self._error_message(exc)
                if isinstance(exc, CallTimeoutError) and exc.deadline == "run":
                    self.run_deadline_hit = True
                    final.error_message = self._run_deadline_passed("mid-stream")
            except asyncio.CancelledError:
                partial = _partial_message(texts, thinking, self.model)
                partial.turn_id = turn_id
                partial.usage = self._partial_usage()
                self.usage = self.usage + partial.usage
                self.cost += partial.usage.cost(self.model.pricing)
                self.context.messages.append(partial)
                self.new_messages.append(partial)
                emit(MessageEnd(loop_id=loop_id, message=partial))
                self._turn_end(turn_index, partial)
                raise
            except BaseException as exc:
                # transform_context raising while the resend was built, a provider's bug: the
                # message ends here and the run ends (closing the turn) as it raises
                if live:
                    failed = self._error_message(f"{type(exc).__name__}: {exc}")
                    emit(MessageEnd(loop_id=loop_id, message=failed))
                raise
            else:
                if final is None:
                    final = self._error_message(
                        f"Provider {self._provider_name()!r} ended its stream without a message."
                    )
        if self.call is not None and self.call.cached:
            self.cached_calls += 1
        if self.window is not None and final.stop_reason != "error":
            self.window.record(final.usage)
        final = scrub_assistant(final)
        _unique_call_ids(final, _call_ids(self.context.messages))
        final.turn_id = turn_id
        self.context.messages.append(final)
        self.new_messages.append(final)
        if live:
            emit(MessageEnd(loop_id=loop_id, message=final))
        return final

    def _fit_limits(self, request: StreamRequest) -> BudgetExceededError | None:
        """Lower ``request``'s output limit so the call cannot pass ``max_total_tokens`` or
        ``max_cost``; the refusal when even its (estimated) input would pass them."""
        if self.tracker is None:
            return None
        needed = estimate_request_tokens(request.system_prompt, request.messages, request.tools)
        allowance = self.tracker.output_allowance(needed, self.model.pricing)
        if allowance is None:
            return None
        if allowance < 1:
            limits = self.tracker.limits
            return BudgetExceededError(
                f"the next turn does not fit the run's limits (max_total_tokens "
                f"{limits.max_total_tokens}, max_cost {limits.max_cost}; "
                f"{self.tracker.tokens_used} tokens and ${self.tracker.cost:.4f} used, "
                f"~{needed} input tokens needed)",
                limit="limits",
            )
        # only ever lowered: a request that sets no limit keeps the provider's default while
        # what the provider would send (thinking may raise the model's limit) fits
        if allowance < output_ceiling(self.provider, request):
            request.max_tokens = allowance
        return None

    def _provider_name(self) -> str:
        return self.provider.name if self.provider is not None else self.model.provider

    def _error_message(self, error: ProviderError | str) -> AssistantMessage:
        classified = isinstance(error, ProviderError)
        return AssistantMessage(
            stop_reason="error",
            model=self.model.id,
            provider=self.model.provider,
            error_message=redact(str(error)),  # an unclassified error may quote a key
            error_kind=error.kind if isinstance(error, ProviderError) else None,
            retry_after=error.retry_after if isinstance(error, ProviderError) else None,
            usage=self._partial_usage() if classified else Usage(),
        )

    def _turn_request(self, turn_index: int, request: StreamRequest) -> TurnRequest:
        return TurnRequest(
            loop_id=self.loop_id,
            turn_index=turn_index,
            payload=request.payload(),
            provenance=[_provenance(m) for m in request.messages],
        )


def _call_ids(messages: Sequence[AgentMessage]) -> set[str]:
    """Every tool-call id the conversation uses already (calls and results)."""
    ids: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            ids.update(call.id for call in message.tool_calls)
        elif isinstance(message, ToolResultMessage):
            ids.add(message.tool_call_id)
    return ids


def _unique_call_ids(message: AssistantMessage, taken: set[str] | None = None) -> None:
    """Give a tool call whose id repeats an id of the conversation (``taken``: a call of an
    earlier turn, as models that number their calls per reply do) or of an earlier call of the
    same message (or is empty) an id of its own, before any result uses it: each call then gets
    exactly one result the provider can match to it, and Anthropic's unique tool_use ids hold.
    """
    seen: set[str] = set(taken or ())
    for call in message.tool_calls:
        if call.id and call.id not in seen:
            seen.add(call.id)
            continue
        base, k = call.id or "call", 2
        while f"{base}_{k}" in seen:
            k += 1
        call.id = f"{base}_{k}"
        seen.add(call.id)


def _provenance(message: Message) -> Provenance:
    if isinstance(message, UserMessage):
        return message.provenance or "user"
    if isinstance(message, ToolResultMessage):
        return "tool_result"
    return "assistant"


def _stamp(messages: list[AgentMessage], source: InputSource) -> list[AgentMessage]:
    """Record where user messages came from (messages that already say so keep theirs)."""
    for message in messages:
        if isinstance(message, UserMessage) and message.provenance is None:
            message.provenance = source
    return messages


def _partial_message(
    texts: dict[int, list[str]], thinking: dict[int, list[str]], model: ModelConfig
) -> AssistantMessage:
    """What had arrived when the run was cancelled (text and thinking; no partial tool calls)."""
    content: list[Content] = []
    for index in sorted(set(texts) | set(thinking)):
        if index in thinking:
            content.append(ThinkingContent(thinking="".join(thinking[index])))
        if index in texts:
            content.append(TextContent(text="".join(texts[index])))
    return AssistantMessage(
        content=content,
        stop_reason="aborted",
        model=model.id,
        provider=model.provider,
        error_message="cancelled",
        error_kind="cancelled",
    )


def _loop_time(deadline: float | None) -> float | None:
    """A ``time.monotonic()`` deadline on the running loop's clock (``None`` stays ``None``)."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


def _registry_provider(model: ModelConfig) -> Provider:
    from ..providers.registry import get_provider

    return get_provider(model)
