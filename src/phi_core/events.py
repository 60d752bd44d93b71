"""Agent events, event sinks and the async-iterator form of a run.

Every event carries ``loop_id`` (branches of a race are told apart by it) and a ``timestamp`` in
unix milliseconds. Events are pydantic models tagged by ``type``; ``AGENT_EVENT_ADAPTER`` parses
them back from JSON.

A *sink* is whatever the caller passes as ``events=``: a sync callable, an async callable or an
``asyncio.Queue``. :class:`Emitter` delivers to it without ever letting the consumer break the run:
a sync callable that raises is reported once through ``logging`` and then skipped; an async
callable is fed from an internal queue by its own task, so a slow consumer never slows the loop
(the run flushes that queue before it returns, so no event is lost and order is kept).

An *observer* (:func:`add_observer`) sees every event of every run in the process, whoever the
run's sink is: OpenTelemetry spans (:mod:`phi_core.telemetry`) are built this way. Each event
reaches an observer once, also when a nested run (a judge, a sub-agent) forwards its events to its
parent's emitter. With no observer registered an emitter costs what it did before (one check).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from contextvars import ContextVar
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ._callables import is_async_callable
from ._logging import get_logger
from ._tasks import being_cancelled, is_real_cancellation
from .types import (
    AgentMessage,
    AssistantMessage,
    CompactionBlock,
    StreamDelta,
    ToolResultMessage,
    TurnId,
    Usage,
    now_ms,
)

__all__ = [
    "AGENT_EVENT_ADAPTER",
    "AgentEnd",
    "AgentEvent",
    "AgentStart",
    "BanditRaceEnd",
    "CompactionEnded",
    "CompactionReason",
    "CompactionStarted",
    "ContinuationKind",
    "Emitter",
    "EndReason",
    "EventSink",
    "EventStream",
    "InputRejected",
    "MessageEnd",
    "MessageStart",
    "MessageUpdate",
    "ParallelLoopEnd",
    "ParallelLoopStart",
    "ProgressMessage",
    "Provenance",
    "PrunApplied",
    "RouteDecision",
    "RouteUpdate",
    "SelectionEnd",
    "SelectionEvaluation",
    "SelectionStart",
    "ToolExecutionEnd",
    "ToolExecutionStart",
    "ToolExecutionUpdate",
    "TurnEnd",
    "TurnRequest",
    "TurnStart",
    "TurnTrigger",
    "Warning",
    "add_observer",
    "remove_observer",
    "tee",
]

logger = get_logger("phi_core.events")

ContinuationKind = Literal["initial", "default", "rerun", "branch", "compaction"]
TurnTrigger = Literal["user", "sub_agent", "continuation", "branch"]
EndReason = Literal["completed", "error", "cancelled", "limit", "vetoed", "rejected"]


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore")

    loop_id: str = ""
    timestamp: int = Field(default_factory=now_ms)


class AgentStart(_Event):
    type: Literal["agent_start"] = "agent_start"
    agent_id: str
    session_id: str
    parent_loop_id: str | None = None
    continuation_kind: ContinuationKind = "initial"
    config_snapshot: dict[str, Any] | None = None


class AgentEnd(_Event):
    """The last event of every run, on every path (also veto, rejection and cancellation)."""

    type: Literal["agent_end"] = "agent_end"
    messages: list[AgentMessage] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    reason: EndReason = "completed"
    rejection: str | None = None
    error: str | None = None


class TurnStart(_Event):
    type: Literal["turn_start"] = "turn_start"
    turn_index: int
    triggered_by: TurnTrigger = "user"


Provenance = Literal[
    "user",
    "steering",
    "follow_up",
    "sub_agent",
    "assistant",
    "tool_result",
    "limit",
    "compaction",
    "memo",
]
"""Where one message of a request came from (see :class:`TurnRequest`)."""


class TurnRequest(_Event):
    """The exact request sent to the model for one turn (once per turn, before any retry; again
    if a context overflow made the loop compact and resend).

    ``provenance[i]`` says where ``payload["messages"][i]`` came from: the caller's prompt
    (``user``; history the loop never saw counts as ``user`` too), a steering or follow-up
    message, a sub-agent's task, the model (``assistant``), a tool (``tool_result``), the loop's
    stop notice (``limit``), a compaction summary or marker, or a pruning memo.
    """

    type: Literal["turn_request"] = "turn_request"
    turn_index: int
    payload: dict[str, Any]
    provenance: list[Provenance] = Field(default_factory=list)


class TurnEnd(_Event):
    type: Literal["turn_end"] = "turn_end"
    turn_index: int
    message: AssistantMessage
    usage: Usage = Field(default_factory=Usage)
    tool_results: list[ToolResultMessage] = Field(default_factory=list)


class MessageStart(_Event):
    type: Literal["message_start"] = "message_start"
    message: AgentMessage


class MessageUpdate(_Event):
    """One streamed delta of the assistant message being generated."""

    type: Literal["message_update"] = "message_update"
    delta: StreamDelta


class MessageEnd(_Event):
    type: Literal["message_end"] = "message_end"
    message: AgentMessage


class ToolExecutionStart(_Event):
    type: Literal["tool_execution_start"] = "tool_execution_start"
    tool_call_id: str
    tool_name: str
    args: Any = None


class ToolExecutionUpdate(_Event):
    type: Literal["tool_execution_update"] = "tool_execution_update"
    tool_call_id: str
    tool_name: str
    text: str


class ToolExecutionEnd(_Event):
    type: Literal["tool_execution_end"] = "tool_execution_end"
    tool_call_id: str
    tool_name: str
    result: ToolResultMessage
    is_error: bool = False
    child_loop_id: str | None = None
    cancelled: bool = False
    """The run was cancelled while the call ran: ``result`` is its "Cancelled" error result."""


class ProgressMessage(_Event):
    type: Literal["progress_message"] = "progress_message"
    tool_call_id: str | None = None
    tool_name: str | None = None
    text: str


class InputRejected(_Event):
    type: Literal["input_rejected"] = "input_rejected"
    reason: str


class Warning(_Event):
    """Something the caller should know that did not stop the run (e.g. a best-effort judge).

    ``message`` is for the caller (the CLI shows it) and may quote model-written text, such as a
    judge's unusable reply, which can repeat a branch's answer. A warning that quotes such text
    also carries ``message_without_content``: the same message without it. Telemetry records
    that version unless content capture is on.
    """

    type: Literal["warning"] = "warning"
    message: str
    message_without_content: str | None = None
    """``message`` without the model-written text it quotes; ``None`` when it quotes none."""


class ParallelLoopStart(_Event):
    type: Literal["parallel_loop_start"] = "parallel_loop_start"
    session_id: str
    loop_ids: list[str]
    config_ids: list[str] = Field(default_factory=list)
    """Each branch's config id (its ``config_id`` or ``provider.model``), in branch order."""
    label: str | None = None
    """What the race is for, when it is part of a bigger run (a bandit race's ``preview`` or
    ``answer`` race)."""


class ParallelLoopEnd(_Event):
    """The last event of a race, on every path. Its ``loop_id`` is the race's session id, the
    same as its ``ParallelLoopStart``'s."""

    type: Literal["parallel_loop_end"] = "parallel_loop_end"
    session_id: str
    selected_loop_id: str | None
    selected_config_index: int | None
    evaluation_usage: Usage = Field(default_factory=Usage)
    cancelled: bool = False
    decision: dict[str, Any] | None = None
    status: str | None = None
    """How the race ended. When it returned a result, this is the result's ``status`` (a
    :data:`~phi_core.outcome.RaceStatus`: ``ok``, ``all_failed``, ``cancelled``, ``timeout``,
    ``over_budget``). When it raised, it is ``cancelled`` for a cancellation or a
    ``KeyboardInterrupt`` and ``error`` for anything else (its strategy raised, say).
    ``None`` in records written before this field existed."""
    error: str | None = None
    """Why a race that raised ended (the exception, or which branch stopped it), redacted;
    ``None`` when it returned a result or its task was cancelled."""


class RouteDecision(_Event):
    """A router ranked the arms for one query and decided what to run (bandit races)."""

    type: Literal["route_decision"] = "route_decision"
    session_id: str
    policy: str
    namespace: str = ""
    ranking: list[dict[str, Any]] = Field(default_factory=list)
    """Best first: ``{"arm", "score", "mean", "width", "n"}`` per arm."""
    explanation: list[str] = Field(default_factory=list)
    action: Literal["race", "sure", "single", "baseline"] = "race"
    """``race``: preview the contenders and judge them; ``sure``: the top arm is clearly ahead,
    the race is skipped; ``single``: only one arm is previewed (or none can be judged), so the
    router's order decides; ``baseline``: the given order, every arm previewed."""
    contenders: list[str] = Field(default_factory=list)
    reason: str = ""


class RouteUpdate(_Event):
    """What a bandit race taught its router: one reward per arm that produced evidence."""

    type: Literal["route_update"] = "route_update"
    session_id: str
    namespace: str = ""
    rewards: list[dict[str, Any]] = Field(default_factory=list)
    """``{"arm", "reward", "quality", "latency_term", "cost_term", "penalty", "weight",
    "source"}`` per updated arm; ``source`` is ``answer``, ``preview`` or ``failure``."""


class BanditRaceEnd(_Event):
    """The last event of a bandit race (its first is the ``RouteDecision``), on every path."""

    type: Literal["bandit_race_end"] = "bandit_race_end"
    session_id: str
    status: str
    """The race's :data:`~phi_core.outcome.RaceStatus` (``ok``, ``all_failed``, ``timeout``...),
    or ``error`` when the run raised (a featuriser, a store, a bug), as ``ParallelLoopEnd``."""
    winner: str | None = None
    action: str = "race"
    quality: float | None = None
    verified: bool | None = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    error: str | None = None


class SelectionStart(_Event):
    """A selection run (``ModelSelector.select_best``, ``phi select``) started."""

    type: Literal["selection_start"] = "selection_start"
    session_id: str
    algorithm: str
    combinations: int
    datapoints: int


class SelectionEvaluation(_Event):
    """One combination ran on one datapoint and was scored (cells resumed from a journal are
    not run again and have none)."""

    type: Literal["selection_evaluation"] = "selection_evaluation"
    session_id: str
    combination: str
    datapoint: int
    status: str
    """The evaluation's :data:`~phi_core.outcome.OutcomeStatus` (``ok``, ``error``, ``timeout``,
    ``over_budget``)."""
    score: float
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    latency_s: float = 0.0
    calls: int = 0
    model_usage: dict[str, Usage] = Field(default_factory=dict)
    """Usage per ``provider:model`` the agent called."""
    error_kind: str | None = None
    error: str | None = None


class SelectionEnd(_Event):
    """The last event of a selection run, on every path."""

    type: Literal["selection_end"] = "selection_end"
    session_id: str
    status: Literal["ok", "over_budget", "error", "cancelled"]
    """``over_budget``: the budget ended the search early (a best is still recommended) — the
    same word races and bandit races use."""
    best: str | None = None
    evaluations: int = 0
    usage: Usage = Field(default_factory=Usage)
    """Tokens of the model calls this run actually sent and paid for: the agents', the
    scorer's (an LLM judge) and the algorithm's own (an LM proposer); cache hits, refused calls
    and cells resumed from a journal are not counted. The same calls as ``cost_usd``."""
    cost_usd: float = 0.0
    """Dollars this run actually paid, for the same calls as ``usage`` (the selection result's
    ``cost_usd``); not the price of the combinations' runs with cache hits priced."""
    error: str | None = None


CompactionReason = Literal["threshold", "overflow", "manual"]


class CompactionStarted(_Event):
    """``reason``: the context neared the budget, the provider said it overflowed, or a caller
    asked (``BasicAgent.compact_context``)."""

    type: Literal["compaction_started"] = "compaction_started"
    estimated_tokens: int
    message_count: int
    reason: CompactionReason = "threshold"


class CompactionEnded(_Event):
    """``block`` is the overlay a manual compaction made (recorded on the session's loop).
    ``error`` says why a compaction failed (``"cancelled"``, or the strategy's error); the
    messages were then left as they were (``messages_after == messages_before``). None when it
    succeeded."""

    type: Literal["compaction_ended"] = "compaction_ended"
    messages_before: int
    messages_after: int
    estimated_tokens_before: int
    estimated_tokens_after: int
    loops_compacted: int = 0
    reason: CompactionReason = "threshold"
    block: CompactionBlock | None = None
    error: str | None = None


class PrunApplied(_Event):
    """The model pruned its own older work from the context (``prun`` / ``prun_with_memo``)."""

    type: Literal["prun_applied"] = "prun_applied"
    tool_call_id: str | None = None
    pruned_turns: list[TurnId] = Field(default_factory=list)
    pruned_timestamps: list[int] = Field(default_factory=list)
    tokens_removed: int = 0
    messages_removed: int = 0
    memo: str | None = None


AgentEvent = Annotated[
    AgentStart
    | AgentEnd
    | TurnStart
    | TurnRequest
    | TurnEnd
    | MessageStart
    | MessageUpdate
    | MessageEnd
    | ToolExecutionStart
    | ToolExecutionUpdate
    | ToolExecutionEnd
    | ProgressMessage
    | InputRejected
    | Warning
    | ParallelLoopStart
    | ParallelLoopEnd
    | RouteDecision
    | RouteUpdate
    | BanditRaceEnd
    | SelectionStart
    | SelectionEvaluation
    | SelectionEnd
    | CompactionStarted
    | CompactionEnded
    | PrunApplied,
    Field(discriminator="type"),
]
AGENT_EVENT_ADAPTER: TypeAdapter[AgentEvent] = TypeAdapter(AgentEvent)

EventSink = Callable[[Any], None] | Callable[[Any], Awaitable[None]] | asyncio.Queue[Any]
"""What ``events=`` accepts: a sync or async callable, or an ``asyncio.Queue``."""

Observer = Callable[[Any], None]

_observers: tuple[Observer, ...] = ()
_delivering: ContextVar[object] = ContextVar("phi_core_event_delivering", default=None)
"""The observed event being handed on to a sink right now. A sink may forward it to another
emitter (a judge's or a sub-agent's events reach the race's or the parent's emitter that way):
that emitter must not show it to the observers a second time. Holding the event itself rather
than a flag keeps tasks the sink starts from skipping events of their own."""
_failed_observers: set[int] = set()


def add_observer(observer: Observer) -> Callable[[], None]:
    """Show every event of every run started from now on to ``observer`` (a sync callable,
    called in the emitting task right when the event is emitted, so keep it quick). An observer
    that raises is logged once and keeps receiving events. Returns a function that removes it.
    """
    global _observers
    if not callable(observer):
        raise TypeError(f"add_observer needs a callable, got {observer!r}")
    _observers = (*_observers, observer)
    return lambda: remove_observer(observer)


def remove_observer(observer: Observer) -> None:
    """Stop showing events to ``observer`` (runs already going keep it until they end). An equal
    callable removes it too: ``remove_observer(self.on_event)`` finds the bound method that
    ``add_observer(self.on_event)`` added, though each access makes a new one."""
    global _observers
    gone = [o for o in _observers if o is observer or o == observer]
    _observers = tuple(o for o in _observers if not any(o is g for g in gone))
    for removed in gone:
        _failed_observers.discard(id(removed))


def _fatal_to_consumer(exc: BaseException) -> bool:
    """Whether exc, raised by a sink or an observer, must stop the run rather than be
    reported and isolated: only KeyboardInterrupt and SystemExit. Anything else (also
    CancelledError or GeneratorExit a consumer raises itself) is the consumer's fault."""
    return isinstance(exc, KeyboardInterrupt | SystemExit)


def _observe(observers: tuple[Observer, ...], event: Any) -> None:
    for observer in observers:
        try:
            observer(event)
        except BaseException as exc:
            # A sync call has no await, so no cancellation of the task can be delivered inside
            # it: a CancelledError it raises is its own.
            if _fatal_to_consumer(exc):
                raise
            if id(observer) not in _failed_observers:
                _failed_observers.add(id(observer))
                logger.exception("event observer %r raised; it keeps receiving events", observer)


class Emitter:
    """Delivers events to one sink; see the module docstring for the guarantees."""

    __slots__ = (
        "_async_fn",
        "_drain_task",
        "_failed",
        "_observers",
        "_pending",
        "_queue",
        "_sync_fn",
    )

    def __init__(self, sink: Any = None) -> None:
        self._observers = _observers
        self._sync_fn: Callable[[Any], Any] | None = None
        self._async_fn: Callable[[Any], Awaitable[None]] | None = None
        self._queue: asyncio.Queue[Any] | None = None
        self._pending: asyncio.Queue[Any] | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._failed = False
        if sink is None:
            return
        if isinstance(sink, asyncio.Queue):
            self._queue = sink
        elif is_async_callable(sink):
            self._async_fn = sink
        elif callable(sink):
            self._sync_fn = sink
        else:
            raise TypeError(
                f"events= must be a callable, an async callable or an asyncio.Queue, got {sink!r}"
            )

    @classmethod
    def of(cls, sink: Any) -> Emitter:
        """Reuse an existing emitter (nested runs share their parent's) or wrap a sink."""
        return sink if isinstance(sink, Emitter) else cls(sink)

    @property
    def active(self) -> bool:
        """False when nobody listens, so callers can skip building events at all."""
        return (
            bool(self._observers)
            or self._sync_fn is not None
            or self._async_fn is not None
            or self._queue is not None
        )

    def emit(self, event: Any) -> None:
        if self._observers and _delivering.get() is not event:
            _observe(self._observers, event)
            token = _delivering.set(event)
            try:
                self._deliver(event)
            finally:
                _delivering.reset(token)
            return
        self._deliver(event)

    def _deliver(self, event: Any) -> None:
        if self._sync_fn is not None:
            if self._failed:
                return
            try:
                result = self._sync_fn(event)
            except BaseException as exc:
                # No await happens inside a sync call, so no cancellation of this task can be
                # delivered there: a CancelledError (or another BaseException but
                # KeyboardInterrupt/SystemExit) it raises is the sink's own failure.
                if _fatal_to_consumer(exc):
                    raise
                self._failed = True
                logger.exception("event sink raised; further events to it are dropped")
                return
            if inspect.isawaitable(result):  # a sync-looking callable that returned a coroutine
                self._start_async_path(None)
                assert self._pending is not None
                self._pending.put_nowait(result)
            return
        if self._queue is not None:
            try:
                self._queue.put_nowait(event)
            except asyncio.QueueFull:
                self._start_async_path(None)
                assert self._pending is not None
                self._pending.put_nowait(event)
            return
        if self._async_fn is not None:
            self._start_async_path(self._async_fn)
            assert self._pending is not None
            self._pending.put_nowait(event)

    def _start_async_path(self, fn: Callable[[Any], Awaitable[None]] | None) -> None:
        if self._drain_task is not None:
            return
        self._pending = asyncio.Queue()
        self._drain_task = asyncio.get_running_loop().create_task(self._drain(fn))

    async def _drain(self, fn: Callable[[Any], Awaitable[None]] | None) -> None:
        assert self._pending is not None
        while True:
            item = await self._pending.get()
            if item is _STOP:
                return
            # Observed when it was emitted: an async sink that forwards it must not repeat that.
            token = _delivering.set(item)
            try:
                if inspect.isawaitable(item):
                    await item
                elif fn is not None:
                    await fn(item)
                elif self._queue is not None:
                    await self._queue.put(item)
            except BaseException as exc:
                if _fatal_to_consumer(exc):
                    raise
                if is_real_cancellation(exc):
                    raise  # this drain task is being cancelled (aclose gave up, loop shutdown)
                # The sink's own failure, a CancelledError it raised included: isolate it.
                if not self._failed:
                    logger.exception("async event sink raised; continuing")
                self._failed = True
            finally:
                _delivering.reset(token)

    async def aclose(self) -> None:
        """Wait until every event handed to an async sink has been delivered.

        When the calling task is cancelled (before or while this waits), the events already
        queued, the run's end event among them, are still delivered, within
        :data:`CLOSE_GRACE_S` seconds; then the ``CancelledError`` propagates (never
        swallowed). Only a sink too slow to take them in that time loses the rest.
        """
        if self._drain_task is None or self._pending is None:
            return
        self._pending.put_nowait(_STOP)
        task, self._drain_task = self._drain_task, None
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() and not being_cancelled():
                # The drain task itself was cancelled (the loop is shutting down), not us.
                return
            await _finish_drain(task)
            raise


CLOSE_GRACE_S = 1.0
"""How long :meth:`Emitter.aclose` keeps delivering queued events to an async sink after the
caller was cancelled, before it gives up on them."""

_STOP = object()


async def _finish_drain(task: asyncio.Task[None]) -> None:
    """Let ``task`` deliver what is queued within the grace period, then stop it; called while
    a ``CancelledError`` is propagating, which the caller raises again afterwards."""
    try:
        await asyncio.wait({task}, timeout=CLOSE_GRACE_S)
    except asyncio.CancelledError:
        pass  # cancelled once more: stop waiting (the caller re-raises its CancelledError)
    if task.done():
        return
    task.cancel()
    try:
        # The drain ends at its next step (a sink that swallows the cancellation is not
        # waited for), so no task is left behind.
        await asyncio.wait({task}, timeout=0.1)
    except asyncio.CancelledError:
        pass


def tee(*sinks: Callable[[Any], Any] | None) -> Callable[[Any], None]:
    """One sync sink that hands every event to each of ``sinks`` in order (``None`` skipped):
    a live view and the run log, say. A sink that raises is reported once through ``logging``
    and skipped from then on; the others keep receiving."""
    live = [s for s in sinks if s is not None]
    failed: set[int] = set()

    def forward(event: Any) -> None:
        for index, sink in enumerate(live):
            if index in failed:
                continue
            try:
                sink(event)
            except Exception:
                failed.add(index)
                logger.exception("event sink %r raised; further events to it are dropped", sink)

    return forward


T = TypeVar("T")


class EventStream(Generic[T]):
    """``async for event in stream`` yields a run's events live; ``await stream`` (or
    :meth:`result`) gives its return value.

    Leaving the ``async for`` early (``break``, ``return``, an exception) cancels the run. The
    iterator is a plain object, not an async generator, so this does not wait for Python's
    async-generator finaliser: the cancellation is requested as soon as the loop lets go of the
    iterator (at once on CPython), and the run stops at the event loop's next step. Python gives
    a ``break`` no way to *wait* for that; to have the run ended (its tools stopped, its end
    event emitted) before the next line, use the stream as an async context manager, or call
    :meth:`aclose` (on the stream or on its iterator)::

        async with agent_loop_stream(prompt, context, config) as events:
            async for event in events:
                if enough(event):
                    break
        # the run has ended here
    """

    def __init__(self, run: Callable[[asyncio.Queue[Any]], Coroutine[Any, Any, T]]) -> None:
        self._run = run
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[T] | None = None
        self._fatal: BaseException | None = None

    async def _guarded(self) -> T:
        try:
            return await self._run(self._queue)
        except (KeyboardInterrupt, SystemExit) as exc:
            # Raised inside a task, asyncio would throw these out of the event loop, leaving
            # the consumer pending; hand them to the consumer instead, after the events.
            self._fatal = exc
            raise asyncio.CancelledError from exc

    def _start(self) -> asyncio.Task[T]:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._guarded())
            self._task.add_done_callback(lambda _t: self._queue.put_nowait(_STOP))
        return self._task

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    def __aiter__(self) -> AsyncIterator[Any]:
        return _StreamIterator(self)

    async def __aenter__(self) -> EventStream[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel the run if it is still going and wait until it has ended (a no-op once it
        has). A ``CancelledError`` of the caller while it waits is not swallowed."""
        task = self._task
        if task is None or task.done():
            return
        task.cancel()
        await asyncio.wait({task})
        _forget_outcome(task)

    def _abandon(self) -> None:
        """Cancel the run without waiting (its iterator was dropped mid-run)."""
        task = self._task
        if task is None or task.done():
            return
        task.add_done_callback(_forget_outcome)
        task.cancel()

    async def result(self) -> T:
        """Run to completion (draining events nobody iterated) and return the result."""
        try:
            return await self._start()
        except asyncio.CancelledError:
            self._raise_fatal()
            raise

    def __await__(self) -> Generator[Any, None, T]:
        return self.result().__await__()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


def _forget_outcome(task: asyncio.Task[Any]) -> None:
    """Retrieve the outcome of a run its consumer left (no "exception never retrieved")."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        logger.debug("run ended with an error after its consumer left", exc_info=exc)


_RUNNING, _DRAINING, _CLOSED = 0, 1, 2


class _StreamIterator(AsyncIterator[Any]):
    """One ``async for`` over an :class:`EventStream`: an async iterator object rather than an
    async generator, so leaving the loop early leaves no generator for Python to finalise later;
    dropping it mid-run cancels the run right away (:meth:`EventStream._abandon`)."""

    __slots__ = ("_state", "_stream", "_task")

    def __init__(self, stream: EventStream[Any]) -> None:
        self._stream = stream
        self._task: asyncio.Task[Any] | None = None
        self._state = _RUNNING

    def __aiter__(self) -> _StreamIterator:
        return self

    async def __anext__(self) -> Any:
        stream = self._stream
        if self._state == _CLOSED:
            raise StopAsyncIteration
        if self._state == _RUNNING:
            self._task = stream._start()
            try:
                item = await stream._queue.get()
            except BaseException:
                # The consumer itself was cancelled while waiting: stop the run first.
                self._state = _CLOSED
                await stream.aclose()
                raise
            if item is not _STOP:
                return item
            self._state = _DRAINING
        # Events put after the run ended (none expected) are still delivered.
        while not stream._queue.empty():
            extra = stream._queue.get_nowait()
            if extra is not _STOP:
                return extra
        self._state = _CLOSED
        # Surface the run's own failure to the consumer.
        stream._raise_fatal()
        task = self._task
        if task is not None and task.done() and not task.cancelled():
            exc = task.exception()
            if exc is not None:
                raise exc
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop iterating: cancel the run if it is still going and wait until it has ended."""
        running = self._state == _RUNNING
        self._state = _CLOSED
        if running and self._task is not None:
            await self._stream.aclose()

    def __del__(self) -> None:
        if self._state != _RUNNING or self._task is None:
            return
        try:
            self._stream._abandon()
        except Exception:  # the event loop is already closed: nothing left to cancel
            pass
