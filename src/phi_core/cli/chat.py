"""``phi chat``: an interactive conversation that runs (one model) or races (several
configurations) every turn, each turn continuing from the winner's answer and logged under one
conversation id (``phi logs --cid ID``; ``phi run -c`` or ``phi chat -c`` picks it up again).

Type a message and press Enter; end a line with ``\\`` to go on on the next one. ``exit`` or
``quit`` (or Ctrl-D) ends the chat; Ctrl-C while a turn runs stops that turn, Ctrl-C at the
prompt ends the chat (exit code 130).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, TextIO

import typer
from rich.console import Console
from rich.text import Text

from ..config import BranchSpec, parse_branch, plan_race
from ..errors import McpError, UserError
from ._branches import flag_branch, flag_branches
from ._common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    check_utf8,
    streams,
    terminated,
    usage_error,
)
from ._conversation import Session, open_session, race_spec
from ._options import (
    CidOption,
    ContinueOption,
    MaxConcurrencyOption,
    NoLogOption,
    ScriptOption,
    TimeoutOption,
)
from ._script import scripted_providers
from ._turns import race_once, run_once

__all__ = ["command", "read_message"]

_EXIT_WORDS = {"exit", "quit", ":q", "/exit", "/quit"}


def read_message(prompt: str = "> ") -> str | None:
    """One message from the user (lines ending in ``\\`` continue); ``None`` at end of input.

    Raises:
        KeyboardInterrupt: Ctrl-C at the prompt.
    """
    show = sys.stdin.isatty()
    lines: list[str] = []
    while True:
        try:
            line = input(prompt if show and not lines else ("… " if show else ""))
        except EOFError:
            return "\n".join(lines) if lines else None
        if line.endswith("\\"):
            lines.append(line[:-1])
            continue
        lines.append(line)
        return "\n".join(lines)


def command(
    model: Annotated[
        list[str] | None,
        typer.Option(
            "-m",
            "--model",
            help="The model (`provider:model[@settings]`, a bare name or an alias); repeat to "
            "race several each turn. Default: the conversation's model with -c, else "
            "PHI_MODEL or local:smollm2.",
        ),
    ] = None,
    race: Annotated[
        bool, typer.Option("--race", help="Race the default configurations every turn.")
    ] = False,
    judge: Annotated[str | None, typer.Option(help="The judge of a race.")] = None,
    strategy: Annotated[
        str | None, typer.Option("-s", "--strategy", help="How a race picks its winner.")
    ] = None,
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Output token limit.")] = None,
    timeout: TimeoutOption = None,
    max_concurrency: MaxConcurrencyOption = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="A race file: race it every turn.")
    ] = None,
    resume: ContinueOption = False,
    cid: CidOption = None,
    no_log: NoLogOption = False,
    script: ScriptOption = None,
) -> None:
    """Chat: every turn runs one model or races several, continuing from the winner."""
    with streams() as (out, err):
        try:
            session = open_session(no_log=no_log, resume=resume, cid=cid, err=err)
        except UserError as exc:
            raise usage_error(exc, err) from None
        with session:
            racing = race or config is not None or strategy is not None or judge is not None
            racing = racing or len(model or []) > 1
            providers = scripted_providers(script)
            try:
                if racing:
                    spec = race_spec(config, session.continuation, given_models=bool(model))
                    named = spec.branches or []
                    plan = plan_race(
                        spec, models=flag_branches(model or [], named),
                        judge=flag_branch(judge, named) if judge else None,
                        strategy=strategy, system_prompt=system, max_tokens=max_tokens,
                        timeout=timeout, max_concurrency=max_concurrency, providers=providers,
                    )  # fmt: skip
                    what = f"racing {', '.join(plan.labels)} ({plan.strategy})"
                else:
                    branch = _chat_branch(model, system, session)
                    loop_config = branch.loop_config(
                        provider=providers.get(branch.model), max_tokens=max_tokens
                    )
                    what = branch.label
            except (UserError, McpError) as exc:
                raise usage_error(exc, err) from None
            _greet(err, what, session)
            code = EXIT_OK
            while True:
                try:
                    message = read_message()
                except KeyboardInterrupt:
                    out.write("\n")
                    code = EXIT_INTERRUPTED
                    break
                if message is None or message.strip().lower() in _EXIT_WORDS:
                    break
                if not message.strip():
                    continue
                try:
                    check_utf8(message, "message")
                    if racing:
                        race_once(plan, message.strip(), out, err, "text", session)
                    else:
                        spec_dict = branch.model_dump(mode="json", exclude_none=True)
                        run_once(message.strip(), loop_config, spec_dict, out, err, "text", session)
                except (UserError, McpError) as exc:
                    usage_error(exc, err)  # said; the chat goes on
                if terminated():  # SIGTERM stopped the turn, as Ctrl-C does; it ends the chat
                    code = EXIT_INTERRUPTED
                    break
    raise typer.Exit(code)


def _chat_branch(model: list[str] | None, system: str | None, session: Session) -> BranchSpec:
    previous = session.continuation.winner_spec if session.continuation else None
    if model:
        branch = flag_branch(model[0])
    elif previous:
        branch = BranchSpec.model_validate(previous)
    else:
        branch = parse_branch(os.environ.get("PHI_MODEL") or "local:smollm2", qualify=True)
    if system is not None:
        branch = branch.model_copy(update={"system_prompt": system})
    return branch


def _greet(err: TextIO, what: str, session: Session) -> None:
    console = Console(file=err, highlight=False)
    turns = len(session.history) // 2
    resumed = f" (continuing, {turns} earlier turns)" if session.continuation else ""
    logged = "" if session.logged else " · not logged"
    console.print(
        Text(
            f"Chat with {what} · conversation {session.conversation_id}{resumed}{logged}. "
            "Type exit or press Ctrl-D to end.",
            style="dim",
        ),
        soft_wrap=True,
    )
