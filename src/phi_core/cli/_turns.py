"""One turn of ``phi race``, ``phi run`` or ``phi chat``: run it, record it, print it.

A turn starts from the session's history (empty, or the winner's messages of the conversation
``-c`` continues), sends its events to the chosen output and to the run log's recorder at once
(:func:`~phi_core.events.tee`), then prints the result in the chosen output mode
(:mod:`._output`) and hands the winner's messages back to the session for the next turn.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from rich.console import Console
from rich.text import Text

from ..cancel import CancelToken
from ..config import RacePlan, bandit_payload, bandit_race_from_plan
from ..errors import Interrupted, StateCorruptError, StateStoreError, UserError, redact
from ..events import MessageUpdate, tee
from ..loop import AgentContext, AgentLoopConfig, LoopResult, agent_loop
from ..parallel import ParallelLoopResult
from ..race.pipeline import BanditRace, BanditRaceResult
from ..runlog import RunRecord, winner_history
from ..tools.mcp import mcp_tools
from ..types import TextDelta
from ._bandit import BanditView, bandit_exit_code, flush_router_updates
from ._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    holding_interrupts,
    run_interruptible,
)
from ._conversation import Session
from ._output import OutputMode, console_for
from ._report import record_markdown
from ._tools import describe_tool_event
from ._view import JsonLines, RaceView, format_cost

__all__ = ["race_once", "run_once"]


def _ids(payload: dict[str, Any], record: RunRecord, session: Session) -> dict[str, Any]:
    return {**payload, "run_id": record.id if session.logged else None,
            "conversation_id": session.conversation_id}  # fmt: skip


def _print_result(
    out: TextIO, mode: OutputMode, payload: dict[str, Any], record: RunRecord, text: str
) -> None:
    if mode == "json":
        out.write(redact(json.dumps(payload, ensure_ascii=False, indent=2)) + "\n")
    elif mode == "jsonl":
        JsonLines(out).result(payload)
    elif mode == "markdown":
        out.write(record_markdown(record))
    elif mode == "answer" and text.strip():
        out.write(text.strip() + "\n")
    out.flush()


# --------------------------------------------------------------------------- races


def race_once(
    plan: RacePlan, text: str, out: TextIO, err: TextIO, mode: OutputMode, session: Session
) -> int:
    """Race ``text`` once (continuing the session's history), log it and print it."""
    context = session.context()
    bandit = plan.strategy == "bandit"
    if bandit and context is not None:
        raise UserError(
            "--strategy bandit answers one question on its own and cannot continue a "
            "conversation; drop -c/--cid, or continue with another strategy (judge, pairwise, …)."
        )
    bandit_race: BanditRace | None = None
    if bandit:
        # The router state is opened and loaded before anything is shown or sent: one that
        # cannot be is an error line naming it and what to do (exit 1), not a traceback.
        try:
            race = bandit_race_from_plan(plan)
            _, stopped = run_interruptible(lambda _token: race.load())
            bandit_race = race
        except StateStoreError as exc:
            return _state_failure(exc, err)
        except (Interrupted, KeyboardInterrupt):
            return EXIT_INTERRUPTED
        if stopped:
            return EXIT_INTERRUPTED
    recorder = session.recorder(text, plan=plan)
    view: RaceView | None = None
    sink: Any = None
    if mode == "text":
        console = console_for(out)
        if bandit_race is not None:
            view = BanditView(console, bandit_race)
        else:
            judge = redact(plan.judge.model) if plan.judge is not None else None
            view = RaceView(  # a token in an endpoint URL is never shown (as in --json)
                console, [(redact(b.label), redact(b.model)) for b in plan.branches],
                judge=judge, strategy=plan.strategy,
            )  # fmt: skip
        sink = view
    elif mode == "jsonl":
        sink = JsonLines(out)
    events = tee(sink, recorder)

    async def go(token: CancelToken) -> ParallelLoopResult | BanditRaceResult:
        if bandit_race is not None:  # loaded above
            try:
                return await bandit_race.run(text, events=events, cancel=token)
            finally:
                await flush_router_updates(bandit_race)
        result = await plan.run(text, context=context, events=events, cancel=token)
        assert isinstance(result, ParallelLoopResult)
        return result

    try:
        with holding_interrupts():  # from the race's header on, a Ctrl-C cancels the race
            if view is not None:
                with view:
                    result, interrupted = run_interruptible(go)
            else:
                result, interrupted = run_interruptible(go)
    except (Interrupted, KeyboardInterrupt):  # Ctrl-C before the handler is in place, too
        if view is not None:
            view.print_interrupted()
        return EXIT_INTERRUPTED
    except StateStoreError as exc:  # a store the race itself could not use
        return _state_failure(exc, err)
    record = session.finish(recorder, result)
    session.advance(winner_history(result, text))
    cancelled = interrupted or (
        result.status == "cancelled" if isinstance(result, BanditRaceResult) else result.cancelled
    )
    if view is not None:
        if cancelled:
            view.print_interrupted()
            return EXIT_INTERRUPTED
        if isinstance(result, BanditRaceResult):
            assert isinstance(view, BanditView)
            view.print_bandit_verdict(result)
        else:
            view.print_verdict(result, [redact(label) for label in plan.labels])
    else:
        payload = (
            bandit_payload(result) if isinstance(result, BanditRaceResult) else plan.payload(result)
        )
        _print_result(out, mode, _ids(payload, record, session), record, record.text)
        if mode == "answer" and not record.text.strip() and not cancelled:
            reasons = "; ".join(
                f"{b.label}: {b.error or b.status}" for b in record.branches if b.status != "ok"
            )
            Console(file=err, highlight=False).print(
                Text(f"No answer ({record.status}). {reasons}", style="red"), soft_wrap=True
            )
    if isinstance(result, BanditRaceResult):
        return bandit_exit_code(result, interrupted)
    if cancelled:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if result.all_failed else EXIT_OK


def _state_failure(error: StateStoreError, err: TextIO) -> int:
    """A router state that cannot be opened, read or written: ``Error: …`` naming it and what
    to do, exit 1 (as ``phi route`` does)."""
    message = str(error).rstrip()
    if not isinstance(error, StateCorruptError):  # those say what to do with the state already
        message += (
            " A bandit race reads and writes its router state: make it usable, or pass another "
            "--state (a .sqlite or .json file in a writable folder, or redis://…)."
        )
    Console(file=err, highlight=False).print(
        Text("Error: ", style="bold red") + Text(message), soft_wrap=True
    )
    return EXIT_FAILED


# --------------------------------------------------------------------------- single runs


def run_once(
    text: str,
    config: AgentLoopConfig,
    spec: dict[str, Any],
    out: TextIO,
    err: TextIO,
    mode: OutputMode,
    session: Session,
    *,
    mcp: list[str] | None = None,
    builtin: list[Any] | None = None,
) -> int:
    """Run one agent on ``text`` (continuing the session's history) with the ``builtin`` tools
    and those of the ``mcp`` servers, log it and print it (tool calls are noted on stderr)."""

    context = session.context() or AgentContext()
    recorder = session.recorder(text, system=config.system_prompt, branches=[spec])
    streamed = False

    def on_event(event: Any) -> None:
        nonlocal streamed
        if mode == "jsonl":
            out.write(redact(event.model_dump_json()) + "\n")
            out.flush()
        elif (
            mode == "text"
            and isinstance(event, MessageUpdate)
            and isinstance(event.delta, TextDelta)
        ):
            out.write(event.delta.text)
            out.flush()
            streamed = True
        elif mode == "text" and (line := describe_tool_event(event)) is not None:
            err.write(line + "\n")
            err.flush()

    events = tee(on_event, recorder)

    async def go(token: CancelToken) -> LoopResult:
        async with mcp_tools(mcp or []) as tools:
            context.tools = [*(builtin or []), *tools]
            return await agent_loop(text, context, config, events=events, cancel=token)

    try:
        result, interrupted = run_interruptible(go)
    except (Interrupted, KeyboardInterrupt):  # Ctrl-C before the handler is in place, too
        out.write("\n")
        return EXIT_INTERRUPTED
    record = session.finish(recorder, result, context=context)
    session.advance(winner_history(result, text, context=context))
    model = config.model_config().spec
    if mode in ("text", "answer"):
        if mode == "answer" and result.text.strip():
            out.write(result.text.strip() + "\n")
        elif streamed:
            out.write("\n")
        out.flush()
        errors = Console(file=err, highlight=False)
        if result.error:
            errors.print(Text(f"Error: {result.error}", style="red"))
        if mode == "text":
            errors.print(
                Text(
                    f"{model} · {result.reason} · {result.usage.input} in / "
                    f"{result.usage.output} out · {format_cost(result.cost_usd)}",
                    style="dim",
                )
            )
    else:
        payload = {
            "type": "run_result",
            "loop_id": result.loop_id,
            "model": model,
            "reason": result.reason,
            "error": result.error,
            "text": result.text,
            "usage": result.usage.model_dump(mode="json"),
            "cost_usd": result.cost_usd,
        }
        _print_result(out, mode, _ids(payload, record, session), record, result.text)
    if interrupted or result.reason == "cancelled":
        return EXIT_INTERRUPTED
    return EXIT_OK if result.reason == "completed" else EXIT_FAILED
