"""The ``phi`` command: ``race``, ``run`` and ``models`` (``route`` and ``select`` are mounted).

The commands only parse flags: what a race runs is planned by :func:`phi_core.config.plan_race`.
Exit codes are listed in ``_common``: 0 success, 1 the run failed, 2 a usage error, 130
interrupted (Ctrl-C), 141 the output was closed (``| head``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..cancel import CancelToken
from ..config import (
    RACE_STRATEGIES,
    RacePlan,
    RaceSpec,
    bandit_payload,
    bandit_race_from_plan,
    load_race_spec,
    parse_branch,
    plan_race,
)
from ..errors import Interrupted, McpError, PhiError, UserError
from ..events import MessageUpdate
from ..loop import AgentContext, AgentLoopConfig, LoopResult, agent_loop
from ..metering import Budget
from ..parallel import ParallelLoopResult
from ..providers.registry import known_providers, resolve_model
from ..race.entry import BanditOptions, verifier_from_spec
from ..race.pipeline import BanditRace
from ..testing import ScriptedProvider
from ..tools.mcp import mcp_tools
from ..types import TextDelta
from ._bandit import BanditView, bandit_exit_code, run_bandit
from ._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE,
    guard_process_streams,
    output_closed,
    read_prompt,
    run_interruptible,
    streams,
    usage_error,
    warn,
)
from ._sandbox import UNSAFE_EXEC_HELP, use_sandbox
from ._script import load_scripts
from ._telemetry import OTEL_ENDPOINT_HELP, OTEL_EXPORTER_HELP, OTEL_HELP, start_telemetry
from ._view import JsonLines, RaceView, format_cost

__all__ = ["app", "main"]

_BANDIT = "Bandit strategy (--strategy bandit)"
_BANDIT_FLAGS = {
    "alpha": "--alpha",
    "ridge": "--ridge",
    "state": "--state",
    "length_threshold": "--length-threshold",
    "quality_weight": "--quality-weight",
    "speed_weight": "--speed-weight",
    "cost_weight": "--cost-weight",
    "min_preview_tokens": "--min-preview-tokens",
}
# A plan's setting → (the race command's parameter, its flag).
_FLAG_OF_SETTING = {
    "system_prompt": ("system", "--system"),
    "max_tokens": ("max_tokens", "--max-tokens"),
    "judge": ("judge", "--judge"),
    "max_concurrency": ("max_concurrency", "--max-concurrency"),
}

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


@app.callback()
def _options(
    ctx: typer.Context,
    otel: Annotated[bool, typer.Option("--otel", help=OTEL_HELP)] = False,
    otel_exporter: Annotated[
        str | None, typer.Option("--otel-exporter", metavar="otlp|console", help=OTEL_EXPORTER_HELP)
    ] = None,
    otel_endpoint: Annotated[
        str | None, typer.Option("--otel-endpoint", metavar="URL", help=OTEL_ENDPOINT_HELP)
    ] = None,
) -> None:
    """Race LLM agent configurations, judge the outcomes, keep the best."""
    start_telemetry(ctx, otel, otel_exporter, otel_endpoint)


def _scripts(path: Path | None) -> dict[str, ScriptedProvider]:
    return load_scripts(path) if path is not None else {}


def _explicit(ctx: typer.Context, name: str) -> bool:
    """Whether the flag behind parameter ``name`` was typed on the command line (a variable in
    the environment, such as ``PHI_ROUTER_STATE``, is a standing setting, not a request)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


# --------------------------------------------------------------------------- phi race


@app.command()
def race(
    ctx: typer.Context,
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
            help=f"How the winner is chosen: {', '.join(RACE_STRATEGIES)}. Default: judge.",
        ),
    ] = None,
    system: Annotated[
        str | None,
        typer.Option(
            help="System prompt for branches that set none; on the default race it is put "
            "before each configuration's own prompt."
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Output token limit per call (default 256 for the default local race).",
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
    unsafe_exec: Annotated[bool, typer.Option("--unsafe-exec", help=UNSAFE_EXEC_HELP)] = False,
) -> None:
    """Race configurations on one task, judge them, print the winner.

    `--strategy bandit` ranks the branches with a learned router instead, previews the top ones,
    answers with the best and learns from the outcome (state persists between runs).
    """
    use_sandbox(ctx, unsafe_exec)
    try:
        text = read_prompt(prompt)
        spec = load_race_spec(config) if config is not None else RaceSpec()
        chosen = strategy or spec.strategy
        bandit = (chosen or "").strip().lower() == "bandit"
        options: BanditOptions | None = None
        if bandit:
            options = BanditOptions(
                alpha=alpha, ridge=ridge, state=state, length_threshold=length_threshold,
                quality_weight=quality_weight, speed_weight=speed_weight,
                cost_weight=cost_weight, min_preview_tokens=min_preview_tokens, top_k=top_k,
                verify=verify,
            )  # fmt: skip
            if verify is not None:
                _check_verify(verify)
        elif top_k is not None:
            raise UserError("--top-k applies to --strategy bandit (how many arms to preview).")
        elif verify is not None:
            raise UserError(
                "--verify applies to --strategy bandit (its fallback asks the next candidate). "
                "For a parallel race on code, use --strategy exec-vote."
            )
        budget = Budget(max_tokens=max_total_tokens, max_cost_usd=max_cost, max_wall_s=deadline)
        plan = plan_race(
            spec, models=model or [], judge=judge, strategy=strategy, system_prompt=system,
            max_tokens=max_tokens, timeout=timeout, max_concurrency=max_concurrency,
            budget=budget, bandit=options, providers=_scripts(script),
        )  # fmt: skip
        bandit_race = bandit_race_from_plan(plan) if plan.strategy == "bandit" else None
    except UserError as exc:
        raise usage_error(exc) from None
    _warn_about(ctx, plan, config)
    with streams() as (out, err):
        try:
            if bandit_race is not None:
                code = (
                    _bandit_json(bandit_race, text, out)
                    if json_output
                    else _bandit_live(bandit_race, text, out)
                )
            elif json_output:
                code = _race_json(plan, text, out)
            else:
                code = _race_live(plan, text, out)
        except UserError as exc:
            raise usage_error(exc, err) from None
    raise typer.Exit(code)


def _check_verify(spec: str) -> None:
    try:
        verifier_from_spec(spec)
    except UserError as exc:
        raise UserError(f"--verify: {exc}") from None


def _warn_about(ctx: typer.Context, plan: RacePlan, config: Path | None) -> None:
    """Say which given settings do nothing, naming the flag (or the race file) they came from."""
    if plan.strategy != "bandit":
        given = [flag for name, flag in _BANDIT_FLAGS.items() if _explicit(ctx, name)]
        if given:
            warn(f"{', '.join(given)} only apply to --strategy bandit; ignored.")
    for warning in plan.warnings:
        param, flag = _FLAG_OF_SETTING.get(warning.setting, ("", ""))
        if param and _explicit(ctx, param):
            warn(f"{flag} {warning.message}")
        elif config is not None:
            warn(f"`{warning.setting}` in {config} {warning.message}")


def _bandit_json(race: BanditRace, text: str, out: TextIO) -> int:
    sink = JsonLines(out)
    try:
        result, interrupted = run_interruptible(lambda token: run_bandit(race, text, sink, token))
    except (Interrupted, KeyboardInterrupt):  # Ctrl-C before the handler is in place, too
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
    except (Interrupted, KeyboardInterrupt):  # Ctrl-C before the handler is in place, too
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
        result, interrupted = run_interruptible(lambda token: _run(plan, text, sink, token))
    except (Interrupted, KeyboardInterrupt):  # Ctrl-C before the handler is in place, too
        return EXIT_INTERRUPTED
    sink.result(plan.payload(result))
    return _race_exit(result, interrupted)


def _race_live(plan: RacePlan, text: str, out: TextIO) -> int:
    view = RaceView(
        _console(out),
        [(b.label, b.model) for b in plan.branches],
        judge=plan.judge.model if plan.judge is not None else None,
    )
    try:
        with view:
            result, interrupted = run_interruptible(lambda token: _run(plan, text, view, token))
    except (Interrupted, KeyboardInterrupt):  # Ctrl-C before the handler is in place, too
        view.print_interrupted()
        return EXIT_INTERRUPTED
    if interrupted or result.cancelled:
        view.print_interrupted()
        return EXIT_INTERRUPTED
    view.print_verdict(result, plan.labels)
    return _race_exit(result, interrupted)


async def _run(plan: RacePlan, text: str, events: Any, token: CancelToken) -> ParallelLoopResult:
    result = await plan.run(text, events=events, cancel=token)
    assert isinstance(result, ParallelLoopResult)
    return result


def _console(out: TextIO) -> Console:
    """A terminal-width console, or a wide plain one for pipes (tables then fit unclipped)."""
    console = Console(file=out, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(file=out, highlight=False, width=120)
    return console


def _race_exit(result: ParallelLoopResult, interrupted: bool) -> int:
    if interrupted or result.cancelled:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if result.all_failed else EXIT_OK


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
    tools: Annotated[
        bool,
        typer.Option(
            "--tools",
            help="Give the agent the built-in tools (bash, read_file, write_file, edit_file, "
            "list_files, search), confined to --workspace; risky commands ask y/N on the terminal.",
        ),
    ] = False,
    workspace: Annotated[
        Path | None,
        typer.Option(help="The folder the tools may touch (default: the current directory)."),
    ] = None,
) -> None:
    """Run one agent on a task, streaming its answer."""
    from ._tools import builtin_tools, terminal_approver

    try:
        text = read_prompt(prompt)
        spec = parse_branch(model)
        config = spec.loop_config(
            provider=_scripts(script).get(spec.model), max_tokens=max_tokens, system_prompt=system
        )
        agent_tools = builtin_tools(tools, workspace)
        if agent_tools:
            config = dataclasses.replace(config, approver=terminal_approver())
    except UserError as exc:
        raise usage_error(exc) from None

    with streams() as (out, err):
        try:
            code = _run_one(text, config, out, err, json_output, mcp or [], agent_tools)
        except (UserError, McpError) as exc:
            raise usage_error(exc, err) from None
    raise typer.Exit(code)


def _run_one(
    text: str,
    config: AgentLoopConfig,
    out: TextIO,
    err: TextIO,
    as_json: bool,
    mcp: list[str],
    builtin: list[Any] | None = None,
) -> int:
    from ._tools import describe_tool_event

    streamed = False

    def on_event(event: Any) -> None:
        nonlocal streamed
        if as_json:
            out.write(event.model_dump_json() + "\n")
        elif isinstance(event, MessageUpdate) and isinstance(event.delta, TextDelta):
            out.write(event.delta.text)
            streamed = True
        elif (line := describe_tool_event(event)) is not None:
            err.write(line + "\n")
            err.flush()
        out.flush()

    async def go(token: CancelToken) -> LoopResult:
        async with mcp_tools(mcp) as tools:
            context = AgentContext(tools=[*(builtin or []), *tools])
            return await agent_loop(text, context, config, events=on_event, cancel=token)

    try:
        result, interrupted = run_interruptible(go)
    except (Interrupted, KeyboardInterrupt):  # Ctrl-C before the handler is in place, too
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
    """``phi route …``, ``phi select`` and ``phi parallel-agents`` live in their own modules."""
    from . import _parallel_agents, route, select

    app.add_typer(route.app, name="route")
    app.command("select")(select.command)
    app.command("parallel-agents")(_parallel_agents.parallel_agents)


_mount_subcommands()


def main() -> None:
    """Console-script entry point (``phi``)."""
    guard_process_streams()
    try:
        app()
    except SystemExit:
        if output_closed():
            raise SystemExit(EXIT_PIPE) from None
        raise
