"""The ``phi`` command: ``race``, ``run`` and ``models``.

Exit codes: 0 success, 1 the run failed (every branch of a race failed), 2 a usage error (bad
flag, unknown provider, missing key, bad config file, empty prompt), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import importlib.util
import io
import json
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TextIO, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..cancel import CancelToken
from ..errors import McpError, PhiError, UserError
from ..events import MessageUpdate
from ..loop import AgentContext, AgentLoopConfig, LoopResult, agent_loop
from ..metering import Budget
from ..providers.base import Provider
from ..providers.registry import get_provider, known_providers, resolve_model
from ..race.entry import BanditOptions
from ..race.pipeline import BanditRace
from ..testing import ScriptedProvider
from ..tools.mcp import mcp_tools
from ..types import ResponseFormat, TextDelta
from ._bandit import BanditView, bandit_exit_code, bandit_payload, plan_bandit, run_bandit
from ._race import RacePlan, race_payload, run_race
from ._script import load_scripts
from ._spec import DEFAULT_JUDGE, BranchSpec, RaceFile, load_race_file, select_branches
from ._view import JsonLines, RaceView, format_cost

__all__ = ["app", "main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_LOCAL_MAX_TOKENS = 256
STRATEGIES = (
    "judge",
    "pairwise",
    "rubric",
    "vote",
    "exec-vote",
    "pick-first",
    "token-efficient",
    "elaborate",
    "bandit",
)
_BANDIT = "Bandit strategy (--strategy bandit)"
# A judge's reply (scores with reasons for every answer) must not be cut by --max-tokens, which
# limits the branches; a judge spec's own max_tokens still wins.
JUDGE_MAX_TOKENS = 1024
_JUDGED = ("judge", "pairwise", "rubric")

app = typer.Typer(
    name="phi",
    help=(
        "Race LLM agent configurations, judge the outcomes, keep the best.\n\n"
        'Start with `phi race "your question"`: three configurations of the embedded model '
        "(no key, no network) and a judge."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

T = TypeVar("T")


class Interrupted(Exception):
    """Ctrl-C arrived; carries whatever the interrupted run returned (or None)."""

    def __init__(self, partial: Any = None) -> None:
        super().__init__("interrupted")
        self.partial = partial


def own_stream(stream: TextIO) -> TextIO:
    """A private duplicate of ``stream``'s file descriptor (or ``stream`` itself if it has none).

    llama-cpp-python silences model loading by pointing fds 1 and 2 at /dev/null and swapping
    ``sys.stdout`` for a while, from a worker thread; two overlapping loads can leave them
    swapped. Writing through our own duplicate keeps the race's output on the real terminal.
    """
    try:
        fd = stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return stream
    stream.flush()
    return os.fdopen(
        os.dup(fd), "w", encoding=stream.encoding or "utf-8", errors="replace", buffering=1
    )


@contextlib.contextmanager
def _streams() -> Iterator[tuple[TextIO, TextIO]]:
    out, err = own_stream(sys.stdout), own_stream(sys.stderr)
    try:
        yield out, err
    finally:
        for mine, theirs in ((out, sys.stdout), (err, sys.stderr)):
            if mine is not theirs:
                mine.close()
            else:
                mine.flush()


def _usage_error(exc: BaseException, err: TextIO | None = None) -> typer.Exit:
    console = Console(file=err or sys.stderr, highlight=False)
    console.print(Text("Error: ", style="bold red") + Text(str(exc)), soft_wrap=True)
    return typer.Exit(EXIT_USAGE)


def run_interruptible(make: Callable[[CancelToken], Awaitable[T]]) -> tuple[T, bool]:
    """Run ``make(token)`` on a fresh event loop; Ctrl-C cancels ``token`` (a second one stops
    the task outright). Returns the result and whether Ctrl-C was pressed."""
    interrupted = False

    async def main() -> T:
        nonlocal interrupted
        token = CancelToken()
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()

        def on_sigint() -> None:
            nonlocal interrupted
            if interrupted and task is not None:
                task.cancel()
            interrupted = True
            token.cancel("interrupted")

        installed = False
        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
            installed = True
        except (NotImplementedError, RuntimeError, ValueError):
            installed = False  # not the main thread (or no signals here): Ctrl-C stays default
        try:
            return await make(token)
        finally:
            if installed:
                loop.remove_signal_handler(signal.SIGINT)

    try:
        result = asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError) as exc:
        raise Interrupted() from exc
    return result, interrupted


def _read_prompt(prompt: str) -> str:
    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise UserError(
            'The prompt is empty; pass the question as an argument (phi race "...") '
            "or pipe it in with `-`."
        )
    return prompt.strip()


def _scripts(path: Path | None) -> dict[str, ScriptedProvider]:
    return load_scripts(path) if path is not None else {}


_SLUG = re.compile(r"[^\w-]+")


def loop_config(
    spec: BranchSpec,
    scripts: dict[str, ScriptedProvider],
    *,
    max_tokens: int | None = None,
    system: str | None = None,
) -> AgentLoopConfig:
    """An :class:`AgentLoopConfig` for ``spec``, checked now: unknown provider, missing key or
    missing extra raise a :class:`UserError` before anything runs."""
    provider: Provider | None = scripts.get(spec.model)
    config = AgentLoopConfig(
        model=spec.model,
        provider=provider,
        config_id=_SLUG.sub("-", spec.name).strip("-") or None if spec.name else None,
        thinking=spec.thinking or "off",
        max_tokens=spec.max_tokens if spec.max_tokens is not None else max_tokens,
        temperature=spec.temperature,
        top_p=spec.top_p,
        seed=spec.seed,
        system_prompt=spec.system if spec.system is not None else system,
    )
    if provider is None:
        get_provider(config.model_config())  # builds the client: missing key/extra fail here
    return config


# --------------------------------------------------------------------------- phi race


@app.command()
def race(
    prompt: Annotated[str, typer.Argument(help="The task for every branch; `-` reads stdin.")],
    model: Annotated[
        list[str] | None,
        typer.Option(
            "-m",
            "--model",
            help=(
                "A branch: `provider:model`, optionally with settings "
                "(`openai:gpt-4o-mini@temperature=0.2,max_tokens=200`), or a branch name from "
                "--config. Repeat for more branches. Default: three configurations of "
                "local:smollm2."
            ),
        ),
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option(help="The judge model (`provider:model[@settings]`) for judge strategies."),
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            "-s",
            "--strategy",
            help=f"How the winner is chosen: {', '.join(STRATEGIES)}. Default: judge.",
        ),
    ] = None,
    system: Annotated[
        str | None, typer.Option(help="System prompt for branches that set none.")
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help=f"Output token limit per call (default {DEFAULT_LOCAL_MAX_TOKENS} for the "
            "default local race).",
        ),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(min=0.001, help="Seconds after which a branch times out.")
    ] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(min=1, help="At most this many branches run at once.")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "-c", "--config", help="TOML/YAML/JSON file describing the branches and the judge."
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="JSON lines: every event, then the result.")
    ] = False,
    script: Annotated[
        Path | None, typer.Option(hidden=True, envvar="PHI_SCRIPT", help="Scripted replies.")
    ] = None,
    alpha: Annotated[
        float, typer.Option(rich_help_panel=_BANDIT, help="LinUCB exploration weight.")
    ] = 1.0,
    ridge: Annotated[
        float, typer.Option(rich_help_panel=_BANDIT, help="LinUCB ridge (prior strength).")
    ] = 1.0,
    state: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=_BANDIT,
            envvar="PHI_ROUTER_STATE",
            help="Router state: .sqlite/.json file or redis://… (default: router_state.sqlite "
            "in $PHI_HOME, ~/.phi).",
        ),
    ] = None,
    length_threshold: Annotated[
        int,
        typer.Option(
            rich_help_panel=_BANDIT, help="Query length (chars) counted as long (speculative)."
        ),
    ] = 2000,
    quality_weight: Annotated[float, typer.Option(rich_help_panel=_BANDIT)] = 0.8,
    speed_weight: Annotated[float, typer.Option(rich_help_panel=_BANDIT)] = 0.2,
    cost_weight: Annotated[float, typer.Option(rich_help_panel=_BANDIT)] = 0.0,
    min_preview_tokens: Annotated[
        int, typer.Option(rich_help_panel=_BANDIT, min=1, help="Preview length before scaling.")
    ] = 120,
    top_k: Annotated[
        int | None,
        typer.Option(
            "--top-k",
            min=1,
            rich_help_panel=_BANDIT,
            help="Arms previewed per query (default: one fewer than there are, at most 2).",
        ),
    ] = None,
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            min=0.000001,
            help="Dollar budget of the whole race: a call that may not fit is refused unsent.",
        ),
    ] = None,
    max_total_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-total-tokens", min=1, help="Token budget of the whole race (every call)."
        ),
    ] = None,
    deadline: Annotated[
        float | None,
        typer.Option(
            "--deadline",
            min=0.001,
            help="Seconds the whole race may take; what still runs then is stopped.",
        ),
    ] = None,
    verify: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=_BANDIT,
            help="Check each full answer before accepting it; a failing one falls back to the "
            "next candidate: 'python' (runnable Python code) or 'regex:PATTERN'.",
        ),
    ] = None,
) -> None:
    """Race configurations on one task, judge them, print the winner.

    `--strategy bandit` ranks the branches with a learned router instead, previews the top ones,
    answers with the best and learns from the outcome (state persists between runs).
    """
    chosen = (strategy or "").strip().lower()
    try:
        text = _read_prompt(prompt)
        race_file = load_race_file(config) if config is not None else RaceFile()
        scripts = _scripts(script)
        budget = Budget(max_tokens=max_total_tokens, max_cost_usd=max_cost, max_wall_s=deadline)
        if chosen == "bandit" or (not chosen and race_file.strategy == "bandit"):
            flags = BanditOptions(
                alpha=alpha, ridge=ridge, state=state, length_threshold=length_threshold,
                quality_weight=quality_weight, speed_weight=speed_weight,
                cost_weight=cost_weight, min_preview_tokens=min_preview_tokens, verify=verify,
                top_k=top_k, preview_timeout_s=timeout, full_timeout_s=timeout,
                max_concurrency=max_concurrency, max_cost_usd=max_cost,
                max_total_tokens=max_total_tokens, total_timeout_s=deadline,
            )  # fmt: skip
            bandit = plan_bandit(model or [], race_file, scripts, judge, system, max_tokens, flags)
            with _streams() as (out, err):
                code = (
                    _bandit_json(bandit, text, out)
                    if json_output
                    else _bandit_live(bandit, text, out)
                )
            raise typer.Exit(code)
        if top_k is not None:
            raise UserError("--top-k applies to --strategy bandit (how many arms to preview).")
        if verify is not None:
            raise UserError(
                "--verify applies to --strategy bandit (its fallback asks the next candidate). "
                "For a parallel race on code, use --strategy exec-vote."
            )
        plan = _plan(
            model or [], race_file, scripts, judge, strategy, system, max_tokens, timeout,
            max_concurrency,
        )  # fmt: skip
        plan.budget = None if budget.unlimited else budget
    except UserError as exc:
        raise _usage_error(exc) from None

    with _streams() as (out, err):
        try:
            code = _race_json(plan, text, out) if json_output else _race_live(plan, text, out)
        except UserError as exc:
            raise _usage_error(exc, err) from None
    raise typer.Exit(code)


def _bandit_json(race: BanditRace, text: str, out: TextIO) -> int:
    sink = JsonLines(out)
    try:
        result, interrupted = run_interruptible(lambda token: run_bandit(race, text, sink, token))
    except (Interrupted, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    sink.result(bandit_payload(result))
    return bandit_exit_code(result, interrupted)


def _bandit_live(race: BanditRace, text: str, out: TextIO) -> int:
    view = BanditView(_console(out), race)
    try:
        with view:
            result, interrupted = run_interruptible(
                lambda token: run_bandit(race, text, view, token)
            )
    except (Interrupted, KeyboardInterrupt):
        view.print_interrupted()
        return EXIT_INTERRUPTED
    if interrupted or result.status == "cancelled":
        view.print_interrupted()
        return EXIT_INTERRUPTED
    view.print_bandit_verdict(result)
    return bandit_exit_code(result, interrupted)


def _race_json(plan: RacePlan, text: str, out: TextIO) -> int:
    sink = JsonLines(out)
    try:
        result, interrupted = run_interruptible(lambda token: run_race(plan, text, sink, token))
    except (Interrupted, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    sink.result(race_payload(result, plan))
    return _race_exit(result, interrupted)


def _race_live(plan: RacePlan, text: str, out: TextIO) -> int:
    view = RaceView(
        _console(out),
        [(b.label, b.model) for b in plan.branches],
        judge=plan.judge.model if plan.judge is not None else None,
    )
    try:
        with view:
            result, interrupted = run_interruptible(lambda token: run_race(plan, text, view, token))
    except (Interrupted, KeyboardInterrupt):
        view.print_interrupted()
        return EXIT_INTERRUPTED
    if interrupted or result.cancelled:
        view.print_interrupted()
        return EXIT_INTERRUPTED
    view.print_verdict(result, [b.label for b in plan.branches])
    return _race_exit(result, interrupted)


def _console(out: TextIO) -> Console:
    """A terminal-width console, or a wide plain one for pipes (tables then fit unclipped)."""
    console = Console(file=out, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(file=out, highlight=False, width=120)
    return console


def _race_exit(result: Any, interrupted: bool) -> int:
    if interrupted or result.cancelled:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if result.all_failed else EXIT_OK


def _plan(
    models: list[str],
    race_file: RaceFile,
    scripts: dict[str, ScriptedProvider],
    judge: str | None,
    strategy: str | None,
    system: str | None,
    max_tokens: int | None,
    timeout: float | None,
    max_concurrency: int | None,
) -> RacePlan:
    from ._spec import parse_branch

    branches = select_branches(models, race_file)
    default_race = not models and not race_file.branches
    max_tokens = max_tokens if max_tokens is not None else race_file.max_tokens
    if max_tokens is None and default_race:
        max_tokens = DEFAULT_LOCAL_MAX_TOKENS
    system = system if system is not None else race_file.system
    strategy_name = (strategy or race_file.strategy or "judge").strip().lower()
    configs = [loop_config(b, scripts, max_tokens=max_tokens, system=system) for b in branches]
    judge_spec: BranchSpec | None = None
    judge_config: AgentLoopConfig | None = None
    if strategy_name in _JUDGED:
        if judge is not None:
            judge_spec = parse_branch(judge)
        elif race_file.judge is not None:
            judge_spec = race_file.judge
        elif all(b.model.startswith("local:") for b in branches):
            judge_spec = DEFAULT_JUDGE
        else:
            # Racing vendors: the first branch's model judges, deterministically.
            judge_spec = BranchSpec(name="judge", model=branches[0].model, temperature=0.0)
        judge_config = loop_config(judge_spec, scripts, max_tokens=JUDGE_MAX_TOKENS)
        if strategy_name == "judge" and judge_spec.model.startswith("local:"):
            # A small local judge often forgets to name an answer; llama.cpp's grammar makes
            # its reply one of the answer numbers (vendor APIs take no bare-enum schema).
            judge_config = dataclasses.replace(
                judge_config,
                response_format=ResponseFormat(
                    name="choice", schema={"enum": list(range(1, len(branches) + 1))}
                ),
            )
    elif judge is not None:
        raise UserError(
            f"--judge has no effect with --strategy {strategy_name}; "
            "use --strategy judge, pairwise or rubric."
        )
    plan = RacePlan(
        branches=branches,
        configs=configs,
        strategy=strategy_name,
        judge=judge_spec,
        judge_config=judge_config,
        timeout=timeout if timeout is not None else race_file.timeout,
        max_concurrency=(
            max_concurrency if max_concurrency is not None else race_file.max_concurrency
        ),
    )
    plan.build_strategy()  # an unknown strategy name is a usage error, raised before the race
    return plan


# --------------------------------------------------------------------------- phi run


@app.command()
def run(
    prompt: Annotated[str, typer.Argument(help="The task; `-` reads stdin.")],
    model: Annotated[
        str,
        typer.Option(
            "-m",
            "--model",
            envvar="PHI_MODEL",
            help="`provider:model[@settings]` (env PHI_MODEL).",
        ),
    ] = "local:smollm2",
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Output token limit.")] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="JSON lines: every event, then the result.")
    ] = False,
    script: Annotated[
        Path | None, typer.Option(hidden=True, envvar="PHI_SCRIPT", help="Scripted replies.")
    ] = None,
    mcp: Annotated[
        list[str] | None,
        typer.Option(
            "--mcp",
            help="An MCP server whose tools the agent may use: a command line "
            "('npx -y @modelcontextprotocol/server-everything') or an http(s):// URL. Repeatable.",
        ),
    ] = None,
) -> None:
    """Run one agent on a task, streaming its answer."""
    from ._spec import parse_branch

    try:
        text = _read_prompt(prompt)
        spec = parse_branch(model)
        config = loop_config(spec, _scripts(script), max_tokens=max_tokens, system=system)
    except UserError as exc:
        raise _usage_error(exc) from None

    with _streams() as (out, err):
        try:
            code = _run_one(text, config, out, err, json_output, mcp or [])
        except (UserError, McpError) as exc:
            raise _usage_error(exc, err) from None
    raise typer.Exit(code)


def _run_one(
    text: str,
    config: AgentLoopConfig,
    out: TextIO,
    err: TextIO,
    as_json: bool,
    mcp: list[str],
) -> int:
    streamed = False

    def on_event(event: Any) -> None:
        nonlocal streamed
        if as_json:
            out.write(event.model_dump_json() + "\n")
        elif isinstance(event, MessageUpdate) and isinstance(event.delta, TextDelta):
            out.write(event.delta.text)
            streamed = True
        out.flush()

    async def go(token: CancelToken) -> LoopResult:
        async with mcp_tools(mcp) as tools:
            context = AgentContext(tools=list(tools))
            return await agent_loop(text, context, config, events=on_event, cancel=token)

    try:
        result, interrupted = run_interruptible(go)
    except (Interrupted, KeyboardInterrupt):
        out.write("\n")
        return EXIT_INTERRUPTED
    spec = config.model_config().spec
    if as_json:
        JsonLines(out).result(
            {
                "type": "run_result",
                "loop_id": result.loop_id,
                "model": spec,
                "reason": result.reason,
                "error": result.error,
                "text": result.text,
                "usage": result.usage.model_dump(mode="json"),
                "cost_usd": result.cost_usd,
            }
        )
    else:
        if streamed:
            out.write("\n")
        errors = Console(file=err, highlight=False)
        if result.error:
            errors.print(Text(f"Error: {result.error}", style="red"))
        errors.print(
            Text(
                f"{spec} · {result.reason} · {result.usage.input} in / "
                f"{result.usage.output} out · {format_cost(result.cost_usd)}",
                style="dim",
            )
        )
    if interrupted or result.reason == "cancelled":
        return EXIT_INTERRUPTED
    return EXIT_OK if result.reason == "completed" else EXIT_FAILED


# --------------------------------------------------------------------------- phi models


@app.command()
def models(
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON instead.")] = False,
) -> None:
    """List providers and models, their prices, and which API keys are set (never their values)."""
    rows: list[dict[str, Any]] = []
    for spec in known_providers():
        if spec.name == "scripted":
            continue
        key_set = bool(os.environ.get(spec.key_env)) if spec.key_env else None
        entries = spec.models or ("",)
        for name in entries:
            price = None
            if name:
                try:
                    price = resolve_model(f"{spec.name}:{name}").pricing
                except PhiError:
                    price = None
            rows.append(
                {
                    "provider": spec.name,
                    "model": f"{spec.name}:{name}" if name else f"{spec.name}:<model>",
                    "description": spec.description,
                    "key_env": spec.key_env,
                    "key_set": key_set,
                    "input_per_mtok": price.input if price else None,
                    "output_per_mtok": price.output if price else None,
                }
            )
    if json_output:
        for row in rows:
            sys.stdout.write(json.dumps(row) + "\n")
        return
    table = Table(title="Known models (prices in $ per million tokens)")
    for column in ("model", "input $/M", "output $/M", "key", "about"):
        table.add_column(column)
    previous = ""
    for row in rows:
        if row["key_env"] is None:
            key = Text("not needed", style="green")
        elif row["key_set"]:
            key = Text(f"{row['key_env']} set", style="green")
        else:
            key = Text(f"{row['key_env']} missing", style="yellow")
        first = row["provider"] != previous
        previous = row["provider"]
        table.add_row(
            row["model"],
            _price(row["input_per_mtok"]),
            _price(row["output_per_mtok"]),
            key if first else Text(""),
            row["description"] if first else "",
        )
    Console(highlight=False).print(table)


def _price(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _mount_subcommands() -> None:
    """Mount the routing and selection commands when their modules exist (they are optional
    pieces of the CLI, written next to this one): a module exposing ``app`` becomes a command
    group, one exposing ``command`` a single command."""
    for module, name in (("route", "route"), ("select", "select")):
        if importlib.util.find_spec(f"{__package__}.{module}") is None:
            continue
        mod = importlib.import_module(f"{__package__}.{module}")
        if callable(getattr(mod, "command", None)):
            app.command(name)(mod.command)
        elif isinstance(getattr(mod, "app", None), typer.Typer):
            app.add_typer(mod.app, name=name)
        if callable(getattr(mod, "parallel_agents", None)):
            app.command("parallel-agents")(mod.parallel_agents)


_mount_subcommands()


def main() -> None:
    """Console-script entry point (``phi``)."""
    app()
