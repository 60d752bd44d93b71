"""``agent_loop_parallel``: run one task through several configs at once and keep the best.

Order of events on the sink: ``ParallelLoopStart`` → every branch's events (interleaved, each
branch's ``AgentEnd`` last for that branch) → the judge's events, if any → ``ParallelLoopEnd``.
``ParallelLoopEnd`` is emitted on every exit, including cancellation; it carries the race's
session id as its ``loop_id`` (like ``ParallelLoopStart``) and the race's ``status`` (its
result's, or ``cancelled``/``error`` with the reason when the race raised).

A strategy that raises (a parser tripping over what a model or a judge wrote) or selects a failed
branch does not lose the race: :func:`evaluate_or_fall_back` falls back to the first successful
branch with one ``Warning`` naming the failure, and the race returns its result as usual. Only a
usage mistake (``UserError``) and a stop or real cancellation propagate.

Under a token budget the branches share it (:func:`~phi_core.metering.sharing`): each call may
reserve only its share of what is left, counting room for the judge when the strategy calls one.

A race whose token is cancelled while its strategy is deciding has no winner, whatever the
strategy returns (a judge cut short would only fall back to a default): ``selected`` is ``None``
and the decision's rationale names the dropped pick. A branch accepted early was chosen before
the cancellation and stays the winner.

Branches run as tasks of one ``asyncio.TaskGroup``. Whatever a branch raises is captured into
its outcome (status ``error``, the exception's type and text in ``error``) — any
``BaseException``, a custom one or ``GeneratorExit`` included, and a ``CancelledError`` that a
provider or tool raised although nothing cancelled the branch — so no exception reaches the task
group: the other branches go on and the caller's ``Task.cancelling()`` count is left as it was.
Two exceptions are not captured: a real cancellation (``CancelledError`` while the branch's task
is being cancelled) propagates, and ``KeyboardInterrupt``/``SystemExit`` stop the race — the
branch that raised it ends with status ``error`` (like ``agent_loop``, which ends the run and
raises it again), every other branch is cancelled and ends, ``ParallelLoopEnd`` is emitted and
the race raises it again. A branch that emitted no ``AgentEnd`` (it raised before the loop
could) gets one synthesised, so every branch ends with exactly one. Each branch has its own child
:class:`CancelToken`: ``branch_timeout`` and early accept cancel one branch through it, so the loop
ends that branch cleanly (reason ``cancelled``, partial usage kept).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, cast

from .._logging import get_logger
from .._tasks import STOPS, is_real_cancellation
from ..cancel import CancelToken
from ..errors import UserError, redact
from ..events import (
    AgentEnd,
    Emitter,
    EndReason,
    ParallelLoopEnd,
    ParallelLoopStart,
    Warning,
)
from ..loop import AgentContext, AgentLoopConfig, LoopResult, agent_loop, agent_loop_continue
from ..loop._inputs import check_messages, coerce_prompts
from ..metering import Budget, Meter, metering, sharing
from ..outcome import ErrorKind, status_of_error_kind
from ..tools._validate import check_tools
from ..types import AgentMessage, AssistantMessage, Usage, UserMessage
from ._strategies import successful
from ._types import (
    EarlyAcceptStrategy,
    EvaluationDecision,
    EvaluationStrategy,
    OutcomeStatus,
    ParallelLoopOutcome,
    ParallelLoopResult,
    ensure_valid_index,
)

__all__ = [
    "STOPS",
    "ToolFactory",
    "adopt_winner",
    "agent_loop_parallel",
    "describe_exception",
    "evaluate_or_fall_back",
    "is_real_cancellation",
]

logger = get_logger("phi_core.parallel")

_WALL = "wall-clock budget"
"""The reason the race's own token is cancelled with when its ``max_wall_s`` passes."""

_HALT = "halted"
"""The reason the other branches' tokens are cancelled with when a branch raised a stop."""


def describe_exception(exc: BaseException) -> str:
    """``"Type: text"``, or ``"Type"`` alone for an exception without text."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


ToolFactory = Callable[[int, AgentLoopConfig], Sequence[Any]]
"""``(branch index, config) -> tools`` for branches that must not share tool state."""

_STATUS_OF_REASON: dict[str, OutcomeStatus] = {
    "completed": "ok",
    "error": "error",
    "limit": "error",  # a budget refusal is re-classified as over_budget below
    "cancelled": "cancelled",
    "vetoed": "rejected",
    "rejected": "rejected",
}
_REASON_OF_STATUS: dict[OutcomeStatus, EndReason] = {
    "ok": "completed",
    "error": "error",
    "cancelled": "cancelled",
    "timeout": "cancelled",
    "rejected": "rejected",
    "unverified": "completed",
    "over_budget": "limit",
}


def _coerce_prompts(prompts: Any) -> list[AgentMessage]:
    """The race's new input, checked like ``agent_loop``'s (``None``/``[]``: continue mode)."""
    if prompts is None or (isinstance(prompts, list | tuple) and not prompts):
        return []
    if isinstance(prompts, str) and not prompts.strip():
        raise UserError(
            "The prompt is empty; pass the text to race, or [] to continue from the context."
        )
    return coerce_prompts(prompts)


class _Forward(Emitter):
    """A branch's emitter: forwards to the race's emitter and remembers the branch's end.

    It is as ``active`` as the race's emitter, so a race nobody listens to builds no per-delta
    events in its branches (the loop still emits each branch's ``AgentEnd``, which is kept here).
    """

    __slots__ = ("end", "loop_id", "target")

    def __init__(self, target: Emitter, loop_id: str) -> None:
        super().__init__(None)
        self.target = target
        self.loop_id = loop_id
        self.end: AgentEnd | None = None

    @property
    def active(self) -> bool:
        return self.target.active

    def emit(self, event: Any) -> None:
        # A sub-agent's events pass through here too; only the branch's own end counts.
        if isinstance(event, AgentEnd) and event.loop_id == self.loop_id:
            self.end = event
        self.target.emit(event)

    async def aclose(self) -> None:
        """Nothing to flush: the race's own emitter is closed by the race."""


class _Race:
    def __init__(
        self,
        prompts: list[AgentMessage],
        bases: list[AgentContext],
        configs: list[AgentLoopConfig],
        strategy: EvaluationStrategy,
        emitter: Emitter,
        cancel: CancelToken,
        max_concurrency: int | None,
        branch_timeout: float | None,
        tool_factory: ToolFactory | None,
        early_accept: bool,
        first_index: int = 0,
    ) -> None:
        self.prompts = prompts
        self.bases = bases
        self.configs = configs
        self.strategy = strategy
        self.emitter = emitter
        self.cancel = cancel
        self.semaphore = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.branch_timeout = branch_timeout
        self.tool_factory = tool_factory
        self.early: EarlyAcceptStrategy | None = (
            strategy
            if early_accept
            and isinstance(strategy, EarlyAcceptStrategy)
            and strategy.early_accept is True
            else None
        )
        assert bases[0].session_id is not None
        self.session_id: str = bases[0].session_id
        self.loop_ids = [
            f"{self.session_id}.{config.segment()}.{first_index + i + 1}"
            for i, config in enumerate(configs)
        ]
        # Independent tokens fed by one callback rather than ``cancel.child()``: cancelling a
        # parent skipped every other child (CancelToken.cancel mutated the list it iterated).
        self.tokens = [CancelToken() for _ in configs]
        self.outcomes: list[ParallelLoopOutcome | None] = [None] * len(configs)
        self.accepted: int | None = None
        self._timed_out = [False] * len(configs)
        self.stop: BaseException | None = None
        """The first KeyboardInterrupt/SystemExit a branch raised: the race raises it again."""
        self.stopped_by: str = ""

    async def run_branches(self) -> list[ParallelLoopOutcome]:
        unhook = self.cancel.on_cancel(self._cancel_branches)
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(len(self.configs)):
                    group.create_task(self._branch(index))
        finally:
            unhook()
        if self.stop is not None:  # every branch has ended: now stop the race with it
            raise self.stop
        return [o for o in self.outcomes if o is not None]

    def _cancel_branches(self) -> None:
        for token in self.tokens:
            token.cancel(self.cancel.reason or "cancelled")

    def _halt(self, index: int, exc: BaseException) -> None:
        """A branch raised KeyboardInterrupt/SystemExit: end every other branch, keep ``exc``."""
        if self.stop is None:
            self.stop = exc
            self.stopped_by = f"branch {index} raised {type(exc).__name__}"
        for other, token in enumerate(self.tokens):
            if other != index:
                token.cancel(_HALT)

    async def _branch(self, index: int) -> None:
        """Run one branch; nothing it raises reaches the task group but a real cancellation.

        An exception escaping the group would cancel the sibling branches, and on Python 3.11 it
        also leaves the caller's ``Task.cancelling()`` count raised for good (the task group
        cancels its parent and never uncancels it), which later reads as a real cancellation.
        """
        config = self.configs[index]
        loop_id = self.loop_ids[index]
        forward = _Forward(self.emitter, loop_id)
        context = self.bases[index].clone()
        context.loop_id = loop_id
        outcome = ParallelLoopOutcome(
            config_id=config.segment(),
            config_index=index,
            loop_id=loop_id,
            context=context,
            config=config,
            original_context_len=len(context.messages),
            race_size=len(self.configs),
        )
        self.outcomes[index] = outcome
        try:
            await self._run_branch(outcome, forward)
        except BaseException as exc:
            if is_real_cancellation(exc):
                raise
            # What got past _execute: a sink raising on the branch's synthesised AgentEnd, an
            # early-accept check raising KeyboardInterrupt, ...
            if outcome.status != "error":
                outcome.status, outcome.error = "error", describe_exception(exc)
                outcome.error_kind = "internal"
            if isinstance(exc, STOPS):
                self._halt(index, exc)
            else:
                logger.warning(
                    "branch %d raised after its run ended; recorded as an error",
                    index,
                    exc_info=True,
                )

    async def _run_branch(self, outcome: ParallelLoopOutcome, forward: _Forward) -> None:
        index = outcome.config_index
        token = self.tokens[index]

        def on_timeout() -> None:
            self._timed_out[index] = True
            token.cancel("timeout")

        try:
            if self.semaphore is not None:
                await self.semaphore.acquire()
            try:
                await self._execute(outcome, forward, on_timeout)
            finally:
                if self.semaphore is not None:
                    self.semaphore.release()
        except asyncio.CancelledError:  # a real one: _execute captures a stray one
            outcome.status, outcome.error = "cancelled", "the race's task was cancelled"
            self._close(outcome, forward)
            raise
        except STOPS:  # recorded by _execute; _branch stops the race with it
            self._close(outcome, forward)
            raise
        self._close(outcome, forward)
        if (
            self.early is not None
            and outcome.ok
            and self.accepted is None
            and self.stop is None
            and await self._accepts(outcome)
            and self.accepted is None  # a sibling may have been accepted while we checked
            and self.stop is None
        ):
            self.accepted = index
            for other, sibling in enumerate(self.tokens):
                if other != index:
                    sibling.cancel("early_accept")

    async def _accepts(self, outcome: ParallelLoopOutcome) -> bool:
        """The early-accept check; one that raises rejects the branch (and is logged), except a
        real cancellation and KeyboardInterrupt/SystemExit, which propagate."""
        assert self.early is not None
        try:
            return await self.early.accept(outcome, cancel=self.cancel)
        except BaseException as exc:
            if is_real_cancellation(exc) or isinstance(exc, STOPS):
                raise
            logger.warning(
                "early-accept check raised for branch %d; not accepting it",
                outcome.config_index,
                exc_info=True,
            )
            return False

    async def _execute(
        self, outcome: ParallelLoopOutcome, forward: _Forward, on_timeout: Callable[[], None]
    ) -> None:
        index = outcome.config_index
        token = self.tokens[index]
        if token.cancelled:  # stopped while waiting for a slot: never started
            outcome.status = "cancelled"
            if token.reason == "early_accept":
                outcome.error = "cancelled before it started: another branch was accepted early"
            elif token.reason == _HALT:
                outcome.error = f"cancelled before it started: {self.stopped_by}"
            else:
                outcome.error = "cancelled before it started: the race was cancelled"
            return
        timer = (
            asyncio.get_running_loop().call_later(self.branch_timeout, on_timeout)
            if self.branch_timeout is not None
            else None
        )
        started = time.perf_counter()
        try:
            if self.tool_factory is not None:
                outcome.context.tools = list(self.tool_factory(index, outcome.config))
            result = await self._run_loop(outcome.context, outcome.config, forward, token)
            self._record(outcome, result, self._timed_out[index])
        except BaseException as exc:
            # Any exception is the branch's failure (a custom BaseException, GeneratorExit, a
            # stray CancelledError...); a real cancellation is not, and a stop is recorded and
            # raised again for _branch to stop the race with.
            if is_real_cancellation(exc):
                raise
            outcome.status = "error"
            outcome.error = describe_exception(exc)
            outcome.error_kind = getattr(exc, "kind", None) or "internal"
            if isinstance(exc, STOPS):
                raise
        finally:
            outcome.latency_s = time.perf_counter() - started
            if timer is not None:
                timer.cancel()

    async def _run_loop(
        self, context: AgentContext, config: AgentLoopConfig, forward: _Forward, token: CancelToken
    ) -> LoopResult:
        if self.prompts:
            return await agent_loop(
                [m.model_copy(deep=True) for m in self.prompts],
                context,
                config,
                events=forward,
                cancel=token,
            )
        return await agent_loop_continue(context, config, events=forward, cancel=token)

    def _record(self, outcome: ParallelLoopOutcome, result: LoopResult, timed_out: bool) -> None:
        outcome.result = result
        outcome.new_messages = list(result.messages)
        outcome.usage = result.usage
        outcome.cost_usd = result.cost_usd
        status = _STATUS_OF_REASON.get(result.reason, "error")
        error = result.rejection if status == "rejected" else result.error
        outcome.error_kind = cast("ErrorKind | None", result.error_kind)
        outcome.retry_after = result.retry_after
        if status == "error" or result.error_kind == "budget":
            status = status_of_error_kind(result.error_kind)
        if status == "cancelled":
            if timed_out:
                status = "timeout"
                outcome.error_kind = "timeout"
                error = f"the branch exceeded branch_timeout={self.branch_timeout}s"
            elif self.tokens[outcome.config_index].reason == "early_accept":
                error = "cancelled: another branch was accepted early"
            elif self.tokens[outcome.config_index].reason == _HALT:
                error = f"cancelled: {self.stopped_by}"
            elif self.cancel.reason == _WALL:
                status = "timeout"
                outcome.error_kind = "timeout"
                error = "the race's wall-clock budget ran out"
            else:
                error = "cancelled: the race was cancelled"
        elif status == "error" and not error:
            final = result.final_message
            error = (final.error_message if final else None) or f"loop ended with {result.reason}"
        outcome.status = status
        outcome.error = error

    def _close(self, outcome: ParallelLoopOutcome, forward: _Forward) -> None:
        """Guarantee the branch's single AgentEnd (synthesised if the loop never emitted one)."""
        if forward.end is not None:
            if outcome.result is None:  # the loop ended but raised afterwards: keep its usage
                outcome.usage = forward.end.usage
                outcome.cost_usd = forward.end.cost_usd
            return
        forward.emit(
            AgentEnd(
                loop_id=outcome.loop_id,
                usage=outcome.usage,
                cost_usd=outcome.cost_usd,
                reason=_REASON_OF_STATUS[outcome.status],
                error=outcome.error,
            )
        )


async def agent_loop_parallel(
    prompts: str | Sequence[AgentMessage] | None,
    base_context: AgentContext | Sequence[AgentContext],
    configs: Sequence[AgentLoopConfig],
    strategy: EvaluationStrategy,
    *,
    events: Any = None,
    cancel: CancelToken | None = None,
    max_concurrency: int | None = None,
    branch_timeout: float | None = None,
    tool_factory: ToolFactory | None = None,
    early_accept: bool = True,
    budget: Budget | None = None,
    label: str | None = None,
    first_index: int = 0,
) -> ParallelLoopResult:
    """Run ``prompts`` through every config concurrently and let ``strategy`` pick the winner.

    Args:
        prompts: the new input (a string or messages); empty (``[]`` or ``None``) continues from
            ``base_context``, which must then end on a non-assistant message.
        base_context: cloned once per branch (messages deep-copied, tools shared unless
            ``tool_factory`` builds them per branch); never modified. A sequence gives each
            branch its own base (one per config, e.g. to continue each branch of an earlier
            race); the branches then share the first context's session.
        configs: one per branch; branch ``i`` runs under loop id ``{session}.{segment}.{i+1}``
            (see ``first_index``).
        strategy: picks the winner; see :class:`EvaluationStrategy`.
        events: a sink (callable, async callable or ``asyncio.Queue``) for every event.
        cancel: cancels the whole race; the result then says ``cancelled`` and has no winner
            unless a branch was accepted early before the cancellation (a strategy still
            deciding when it came has its pick dropped).
        max_concurrency: at most this many branches run at once (``None``: all).
        branch_timeout: seconds after which a branch is cancelled with status ``timeout``.
        tool_factory: ``(index, config) -> tools`` giving each branch its own tool instances.
        early_accept: with a strategy that can accept early (a verifier constructed with
            ``early_accept=True``), let the first accepted branch win and cancel the others.
        budget: what the whole race (branches and judge) may spend
            (:class:`~phi_core.metering.Budget`): each call reserves its worst case before it is
            sent, so a branch whose call does not fit ends ``over_budget`` and the race never
            overshoots; ``max_wall_s`` cancels what is still running when it passes (branches,
            or the strategy, whose pick is then dropped like on a cancellation).
        label: what this race is for, carried by ``ParallelLoopStart`` (e.g. ``"preview"``).
        first_index: branch ``i`` runs under ``{session}.{segment}.{first_index + i + 1}``: a
            later race in the same session (a bandit race's answer after its previews) numbers
            on, so no loop id is run twice.

    Raises:
        UserError: no configs, a bad limit, a strategy that refuses the race (Transparent with
            several configs) or a continue-mode context that cannot continue — all before any
            branch runs.
    """
    messages = _coerce_prompts(prompts)
    config_list = list(configs)
    if not config_list:
        raise UserError("agent_loop_parallel needs at least one config to run.")
    if max_concurrency is not None and max_concurrency < 1:
        raise UserError(
            f"max_concurrency must be >= 1, got {max_concurrency}. Use None for no limit."
        )
    if branch_timeout is not None and branch_timeout <= 0:
        raise UserError(f"branch_timeout must be > 0 seconds, got {branch_timeout}.")
    if not callable(getattr(strategy, "evaluate", None)):
        raise UserError(
            f"strategy must implement `async evaluate(prompts, outcomes, *, events, cancel)`, "
            f"got {strategy!r}."
        )
    check = getattr(strategy, "check_race", None)
    if callable(check):
        check(len(config_list))
    given = [base_context] if isinstance(base_context, AgentContext) else list(base_context)
    for number, context in enumerate(given):
        # Checked once here, before any branch starts, not once per branch mid-race.
        where = "base_context" if len(given) == 1 else f"base_context[{number}]"
        check_messages(context.messages, f"{where}.messages")
        check_tools(context.tools)
    if len(given) not in (1, len(config_list)):
        raise UserError(
            f"Give one base context for every branch or one for all: got {len(given)} contexts "
            f"for {len(config_list)} configs."
        )
    if not messages:
        for context in given:
            if not context.messages:
                raise UserError(
                    "Continue mode (no prompts) needs a base context with at least one message."
                )
            if isinstance(context.messages[-1], AssistantMessage):
                raise UserError(
                    "Continue mode (no prompts) cannot start from a context that ends on an "
                    "assistant message; pass new prompts or append a user message first."
                )
    first = given[0]
    agent_id = first.agent_id or str(uuid.uuid4())
    session_id = first.session_id or str(uuid.uuid4())
    bases = []
    for context in given if len(given) == len(config_list) else given * len(config_list):
        base = context.clone()
        base.agent_id, base.session_id = agent_id, session_id
        bases.append(base)
    owns_emitter = not isinstance(events, Emitter)
    emitter = Emitter.of(events)
    caller = cancel or CancelToken()
    # The race's own token: the caller's cancellation reaches it, the wall-clock budget too.
    cancel = caller.child() if budget is not None and budget.max_wall_s is not None else caller
    race = _Race(
        messages,
        bases,
        config_list,  # segment() resolves each model: a bad model string raises here
        strategy,
        emitter,
        cancel,
        max_concurrency,
        branch_timeout,
        tool_factory,
        early_accept,
        first_index,
    )
    started = time.perf_counter()
    result: ParallelLoopResult | None = None
    failure: BaseException | None = None
    meter = Meter(budget)
    wall = (
        asyncio.get_running_loop().call_later(budget.max_wall_s, cancel.cancel, _WALL)
        if budget is not None and budget.max_wall_s is not None
        else None
    )
    try:
        emitter.emit(
            ParallelLoopStart(
                loop_id=race.session_id,
                session_id=race.session_id,
                loop_ids=race.loop_ids,
                config_ids=[c.segment() for c in config_list],
                label=label,
            )
        )
        with metering(meter):
            with sharing(_parties(strategy, len(config_list), max_concurrency)):
                outcomes = await race.run_branches()
            decision = await _decide(race, messages, outcomes)
        timed_out = cancel.reason == _WALL and not caller.cancelled
        total = Usage.sum(o.usage for o in outcomes) + decision.usage
        cost = sum(o.cost_usd for o in outcomes) + decision.cost_usd
        result = ParallelLoopResult(
            session_id=race.session_id,
            loop_ids=race.loop_ids,
            outcomes=outcomes,
            decision=decision,
            total_usage=total,
            cost_usd=cost,
            cancelled=cancel.cancelled and not timed_out,
            timed_out=timed_out,
            wall_time_s=time.perf_counter() - started,
        )
        return result
    except BaseException as exc:
        failure = exc
        raise
    finally:
        if wall is not None:
            wall.cancel()
        if cancel is not caller:
            cancel.detach()
        emitter.emit(_end_event(race, result, failure, caller))
        if owns_emitter:
            await emitter.aclose()


def _parties(strategy: EvaluationStrategy, count: int, max_concurrency: int | None) -> int:
    """How many parties a race's branches share a token budget with: the branches running at
    once, plus, when the strategy calls a judge, as many again for the judge, whose prompt
    reads every answer (so branches that use their whole share still leave it room)."""
    running = min(count, max_concurrency or count)
    return running + (count if getattr(strategy, "uses_judge", False) is True else 0)


def _end_event(
    race: _Race,
    result: ParallelLoopResult | None,
    failure: BaseException | None,
    caller: CancelToken,
) -> ParallelLoopEnd:
    """The race's last event: its result's winner and status, or, when the race raised,
    ``cancelled`` (the caller cancelled it, or a ``CancelledError``/``KeyboardInterrupt``) or
    ``error`` (its strategy raised, a ``SystemExit``...), with the redacted reason."""
    if result is not None:
        decision = result.decision
        index = decision.index
        return ParallelLoopEnd(
            loop_id=race.session_id,
            session_id=race.session_id,
            selected_loop_id=race.loop_ids[index] if index is not None else None,
            selected_config_index=index,
            evaluation_usage=decision.usage,
            cancelled=result.cancelled,
            decision=decision.summary(),
            status=result.status,
        )
    error: str | None = None
    if isinstance(failure, STOPS):
        error = race.stopped_by or describe_exception(failure)
    elif failure is not None and not isinstance(failure, asyncio.CancelledError):
        error = describe_exception(failure)
    cancelled = caller.cancelled or isinstance(failure, asyncio.CancelledError | KeyboardInterrupt)
    return ParallelLoopEnd(
        loop_id=race.session_id,
        session_id=race.session_id,
        selected_loop_id=None,
        selected_config_index=None,
        cancelled=cancelled,
        status="cancelled" if cancelled else "error",
        error=redact(error) if error is not None else None,
    )


async def _decide(
    race: _Race, prompts: list[AgentMessage], outcomes: list[ParallelLoopOutcome]
) -> EvaluationDecision:
    name = getattr(race.strategy, "name", type(race.strategy).__name__)
    if race.accepted is not None:
        stopped = [
            o.config_index
            for o in outcomes
            if o.status == "cancelled" and o.config_index != race.accepted
        ]
        return EvaluationDecision(
            index=race.accepted,
            strategy=name,
            early_accept=True,
            scores={race.accepted: 1.0},
            rationale=(
                f"branch {race.accepted} was the first to pass verification; "
                f"{len(stopped)} running sibling(s) cancelled"
            ),
            details={"cancelled_siblings": stopped},
        )
    if race.cancel.cancelled:
        return EvaluationDecision(
            index=None,
            strategy=name,
            rationale="the race was cancelled before evaluation; no branch was selected",
        )
    decision = await evaluate_or_fall_back(
        race.strategy,
        prompts,
        outcomes,
        events=race.emitter,
        cancel=race.cancel,
        loop_id=race.session_id,
    )
    if race.cancel.cancelled and decision.index is not None:
        # Cancelled while the strategy ran (nothing awaits between its return and here): its
        # pick is not the race's winner; a judge cut short would only have fallen back. Its
        # usage and figures are kept, the pick is named in the rationale.
        what = (
            "the race's wall-clock budget ran out"
            if race.cancel.reason == _WALL
            else "the race was cancelled"
        )
        return decision.model_copy(
            update={
                "index": None,
                "tie": False,
                "rationale": (
                    f"{what} while the strategy was deciding; no branch was selected (the "
                    f"strategy's pick, branch {decision.index}, was dropped: "
                    f"{decision.rationale or 'no rationale'})"
                ),
            }
        )
    return decision


async def evaluate_or_fall_back(
    strategy: EvaluationStrategy,
    prompts: list[AgentMessage],
    outcomes: list[ParallelLoopOutcome],
    *,
    events: Emitter,
    cancel: CancelToken,
    loop_id: str,
) -> EvaluationDecision:
    """``strategy``'s decision over ``outcomes``, never lost to a bug in the strategy.

    A strategy that raises (a parser tripping over what a model or judge wrote, a custom
    strategy's bug) does not end the race: the decision falls back to the first candidate (the
    first successful branch with an answer, see :func:`successful`), marked ``fallback``, and
    one ``Warning`` names the failure (redacted). A strategy that selects a failed branch while
    a successful one exists falls back the same way. Raised as they are: a real cancellation,
    ``KeyboardInterrupt``/``SystemExit``, a usage mistake (:class:`UserError`: a judge model
    whose key is not set) and a selected index that is not a branch of the race.
    """
    name = getattr(strategy, "name", type(strategy).__name__)
    try:
        decision = await strategy.evaluate(prompts, outcomes, events=events, cancel=cancel)
    except BaseException as exc:
        if is_real_cancellation(exc) or isinstance(exc, (*STOPS, UserError)):
            raise
        logger.warning("strategy %r raised %s; the race falls back", name, type(exc).__name__)
        logger.debug("strategy %r raised", name, exc_info=True)
        failure = redact(describe_exception(exc))
        return _fall_back(
            name,
            outcomes,
            events,
            loop_id,
            reason=f"the strategy raised {failure}",
            reason_without_content=f"the strategy raised {type(exc).__name__}",
            details={"strategy_error": failure},
        )
    if not decision.strategy:
        decision.strategy = name
    ensure_valid_index(decision, outcomes)
    chosen = next((o for o in outcomes if o.config_index == decision.index), None)
    if chosen is not None and not chosen.ok:
        picked = f"the strategy selected branch {chosen.config_index}, which {chosen.status}"
        return _fall_back(
            decision.strategy,
            outcomes,
            events,
            loop_id,
            reason=f"{picked} ({chosen.error or 'no error text'})",
            reason_without_content=picked,
            usage=decision.usage,
            cost_usd=decision.cost_usd,
            details={**decision.details, "refused_index": chosen.config_index},
        )
    return decision


def _fall_back(
    name: str,
    outcomes: list[ParallelLoopOutcome],
    events: Emitter,
    loop_id: str,
    *,
    reason: str,
    reason_without_content: str,
    **fields: Any,
) -> EvaluationDecision:
    """The race's own fallback: the first candidate, one ``Warning`` saying why."""
    candidates = successful(outcomes)
    index = candidates[0].config_index if candidates else None
    picked = (
        "; fell back to the first successful branch"
        if index is not None
        else "; no branch succeeded, none is selected"
    )
    said = f"{name} strategy fell back: "
    events.emit(
        Warning(
            loop_id=loop_id,
            message=said + reason + picked,
            message_without_content=said + reason_without_content + picked,
        )
    )
    return EvaluationDecision(
        index=index, strategy=name, fallback=True, rationale=reason + picked, **fields
    )


def adopt_winner(
    result: ParallelLoopResult,
    prompt: str | None = None,
    *,
    loop_id: str | None = None,
) -> AgentContext:
    """A copy of the winner's context ready for the next run of the same session.

    The copy gets a fresh ``loop_id`` (``loop_id`` or a new UUID) whose ``parent_loop_id`` is the
    winner's loop id, and ``continuation_kind="default"``. Pass it to ``agent_loop`` with the next
    prompt, or give ``prompt`` here to append it as a user message so that
    ``agent_loop_continue`` can run on the context directly.

    Raises:
        AllBranchesFailedError: the race has no winner (every branch failed or it was cancelled).
    """
    winner = result.raise_for_status().selected
    assert winner is not None
    context = winner.context.clone()
    context.parent_loop_id = winner.loop_id
    context.loop_id = loop_id or str(uuid.uuid4())
    context.continuation_kind = "default"
    if prompt is not None:
        context.messages.append(UserMessage.text(prompt))
    return context
