"""The ``phi`` command: ``race``, ``run``, ``models`` and ``--version`` (``route``, ``mcp``,
``serve``, ``select``, ``chat``, ``logs``, ``aliases``, ``keys`` and ``view`` are mounted from
their modules).

The commands only parse flags: what a race runs is planned by :func:`phi_core.config.plan_race`;
a turn is run, logged and printed by :mod:`._turns`.
Exit codes are listed in ``_common``: 0 success, 1 the run failed, 2 a usage error, 130
interrupted (Ctrl-C), 141 the output was closed (``| head``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Annotated, TextIO

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import __version__
from ..config import (
    RACE_STRATEGIES,
    BranchSpec,
    RacePlan,
    plan_race,
)
from ..errors import McpConnectionError, McpError, UserError, redact
from ..events import AgentEnd
from ..metering import Budget
from ..providers.keys import stored_keys
from ..providers.registry import model_listing
from ..race.entry import BanditOptions, verifier_from_spec
from ..runlog import Continuation
from ..tools.mcp import http_headers, parse_header
from ..types import Usage
from ._branches import flag_branch, flag_branches
from ._common import (
    EXIT_FAILED,
    EXIT_PIPE,
    guard_process_streams,
    output_closed,
    read_prompt,
    sigterm_as_ctrl_c,
    streams,
    usage_error,
    warn,
)
from ._conversation import open_session, race_spec
from ._options import (
    AnswerOnlyOption,
    CidOption,
    ContinueOption,
    MaxConcurrencyOption,
    NoLogOption,
    OutputOption,
    ScriptOption,
    TimeoutOption,
    finite_at_least,
)
from ._output import OutputMode, output_mode, print_table
from ._sandbox import UNSAFE_EXEC_HELP, use_sandbox
from ._script import scripted_providers
from ._telemetry import OTEL_ENDPOINT_HELP, OTEL_EXPORTER_HELP, OTEL_HELP, start_telemetry
from ._turns import race_once, run_once

__all__ = ["app", "main"]

_BANDIT = "Bandit strategy (--strategy bandit)"
_BANDIT_FLAGS = {
    "alpha": "--alpha",
    "ridge": "--ridge",
    "state": "--state",
    "router_state_key": "--router-state-key",
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
        "(no key, no network), the winner picked by consensus."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"phi {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
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


_CONFIG_SUFFIXES = (".toml", ".yaml", ".yml", ".json")


def _check_extra(ctx: typer.Context) -> None:
    """Arguments after the prompt: most likely a race file given with ``-c`` (which now
    continues a conversation) or an unquoted prompt."""
    if not ctx.args:
        return
    files = [a for a in ctx.args if a.lower().endswith(_CONFIG_SUFFIXES)]
    if files:
        raise UserError(
            f"Unexpected argument {files[0]!r}: `-c` continues the last conversation; give a "
            f"race file with `--config {files[0]}`."
        )
    raise UserError(
        f"Unexpected extra arguments {ctx.args!r}; quote the prompt as one argument "
        f'(phi {ctx.info_name} "two words").'
    )


def _explicit(ctx: typer.Context, name: str) -> bool:
    """Whether the flag behind parameter ``name`` was typed on the command line (a variable in
    the environment, such as ``PHI_ROUTER_STATE``, is a standing setting, not a request)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


# --------------------------------------------------------------------------- phi race


@app.command(context_settings={"allow_extra_args": True})
@sigterm_as_ctrl_c
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
            help=f"How the winner is chosen: {', '.join(RACE_STRATEGIES)}. Default: consensus "
            "when every branch is local and no --judge is given (measured best for the "
            "embedded model), else judge.",
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
    timeout: TimeoutOption = None,
    max_concurrency: MaxConcurrencyOption = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="TOML/YAML/JSON file describing the branches and the judge."),
    ] = None,
    resume: ContinueOption = False,
    cid: CidOption = None,
    no_log: NoLogOption = False,
    output: OutputOption = None,
    answer_only: AnswerOnlyOption = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="JSON lines: every event, then the result (-o jsonl).")
    ] = False,
    script: ScriptOption = None,
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
    router_state_key: Annotated[
        str | None,
        typer.Option(
            "--router-state-key",
            rich_help_panel=_BANDIT,
            envvar="ROUTER_STATE_KEY",
            help="Key prefix of a router state in Redis (default phi:router:v1), as "
            "`parallel-agents` and `phi route` take it.",
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
            callback=finite_at_least(0.000001, "dollars"),
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
            callback=finite_at_least(0.001, "seconds"),
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

    `-c` continues the last conversation (`--cid ID` another one) from the winner's answer,
    racing the same branches again unless -m or --config names others. Every run is logged
    (`phi logs`); `--no-log` skips this one.

    `--strategy bandit` ranks the branches with a learned router instead, previews the top ones,
    answers with the best and learns from the outcome (state persists between runs).
    """
    use_sandbox(ctx, unsafe_exec)
    with streams() as (out, err):
        try:
            _check_extra(ctx)
            mode = output_mode(output, json_lines=json_output, answer_only=answer_only)
            text = read_prompt(prompt)
            session = open_session(no_log=no_log, resume=resume, cid=cid, err=err)
        except UserError as exc:
            raise usage_error(exc, err) from None
        with session:
            try:
                spec = race_spec(config, session.continuation, given_models=bool(model))
                chosen = strategy or spec.strategy
                bandit = (chosen or "").strip().lower() == "bandit"
                options: BanditOptions | None = None
                if bandit:
                    options = BanditOptions(
                        alpha=alpha, ridge=ridge, state=state, state_key=router_state_key,
                        length_threshold=length_threshold, quality_weight=quality_weight,
                        speed_weight=speed_weight, cost_weight=cost_weight,
                        min_preview_tokens=min_preview_tokens, top_k=top_k, verify=verify,
                    )  # fmt: skip
                    if verify is not None:
                        _check_verify(verify)
                elif top_k is not None:
                    raise UserError(
                        "--top-k applies to --strategy bandit (how many arms to preview)."
                    )
                elif verify is not None:
                    raise UserError(
                        "--verify applies to --strategy bandit (its fallback asks the next "
                        "candidate). For a parallel race on code, use --strategy exec-vote."
                    )
                budget = Budget(
                    max_tokens=max_total_tokens, max_cost_usd=max_cost, max_wall_s=deadline
                )
                plan = plan_race(
                    spec, models=flag_branches(model or [], spec.branches or []),
                    judge=flag_branch(judge, spec.branches or []) if judge is not None else None,
                    strategy=strategy, system_prompt=system, max_tokens=max_tokens,
                    timeout=timeout, max_concurrency=max_concurrency, budget=budget,
                    bandit=options, providers=scripted_providers(script),
                )  # fmt: skip
            except UserError as exc:
                raise usage_error(exc, err) from None
            _warn_about(ctx, plan, config, err)
            try:
                code = race_once(plan, text, out, err, mode, session)
            except UserError as exc:
                raise usage_error(exc, err) from None
    raise typer.Exit(code)


def _check_verify(spec: str) -> None:
    try:
        verifier_from_spec(spec)
    except UserError as exc:
        raise UserError(f"--verify: {exc}") from None


def _warn_about(ctx: typer.Context, plan: RacePlan, config: Path | None, err: TextIO) -> None:
    """Say which given settings do nothing, naming the flag (or the race file) they came from."""
    if plan.strategy != "bandit":
        given = [flag for name, flag in _BANDIT_FLAGS.items() if _explicit(ctx, name)]
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            warn(f"{', '.join(given)} only {verb} to --strategy bandit; ignored.", err)
    for warning in plan.warnings:
        param, flag = _FLAG_OF_SETTING.get(warning.setting, ("", ""))
        if param and _explicit(ctx, param):
            warn(f"{flag} {warning.message}", err)
        elif config is not None:
            warn(f"`{warning.setting}` in {config} {warning.message}", err)


# --------------------------------------------------------------------------- phi run


@app.command(context_settings={"allow_extra_args": True})
@sigterm_as_ctrl_c
def run(
    ctx: typer.Context,
    prompt: Annotated[str, typer.Argument(help="The task; `-` reads stdin.")],
    model: Annotated[
        str,
        typer.Option(
            "-m",
            "--model",
            envvar="PHI_MODEL",
            help="`provider:model[@settings]`, a bare model name (gpt-4o) or an alias "
            "(env PHI_MODEL). With -c: the conversation's model unless given.",
        ),
    ] = "local:smollm2",
    system: Annotated[
        str | None, typer.Option(help="System prompt (with -c: the conversation's, unless given).")
    ] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Output token limit.")] = None,
    resume: ContinueOption = False,
    cid: CidOption = None,
    no_log: NoLogOption = False,
    output: OutputOption = None,
    answer_only: AnswerOnlyOption = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="JSON lines: every event, then the result (-o jsonl).")
    ] = False,
    script: ScriptOption = None,
    mcp: Annotated[
        list[str] | None,
        typer.Option(
            "--mcp",
            help="An MCP server whose tools the agent may use: a command line "
            "('npx -y @modelcontextprotocol/server-everything') or an http(s):// URL. Repeatable.",
        ),
    ] = None,
    mcp_header: Annotated[
        list[str] | None,
        typer.Option(
            "--mcp-header",
            help="'Name: value' sent with every request to the --mcp http(s):// server, e.g. "
            "'Authorization: Bearer <token>' (never shown in output). Repeatable; one HTTP "
            "server only.",
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
    """Run one agent on a task, streaming its answer (`-c` continues the last conversation)."""
    from ._tools import builtin_tools, terminal_approver

    with streams() as (out, err):
        try:
            _check_extra(ctx)
            mode = output_mode(output, json_lines=json_output, answer_only=answer_only)
            text = read_prompt(prompt, "run")
            session = open_session(no_log=no_log, resume=resume, cid=cid, err=err)
        except UserError as exc:
            raise usage_error(exc, err) from None
        with session:
            try:
                spec = _run_branch(ctx, model, system, session.continuation)
                config = spec.loop_config(
                    provider=scripted_providers(script).get(spec.model), max_tokens=max_tokens
                )
                agent_tools = builtin_tools(tools, workspace)
                if agent_tools:
                    config = dataclasses.replace(config, approver=terminal_approver())
                with http_headers(_mcp_headers(mcp or [], mcp_header or [], err)):
                    code = run_once(
                        text, config, spec.model_dump(mode="json", exclude_none=True), out, err,
                        mode, session, mcp=mcp or [], builtin=agent_tools,
                    )  # fmt: skip
            except UserError as exc:
                raise usage_error(exc, err) from None
            except McpError as exc:
                if _unreachable(exc):  # a wrong command, URL or credentials
                    raise usage_error(exc, err) from None
                code = _mcp_failed(exc, spec.model, out, err, mode)  # it started, then failed
    raise typer.Exit(code)


def _mcp_headers(servers: list[str], given: list[str], err: TextIO) -> dict[str, str] | None:
    """``--mcp-header`` values for the one HTTP ``--mcp`` server (their values secret)."""
    headers = dict(parse_header(text) for text in given)
    if not headers:
        return None
    urls = [s for s in servers if re.match(r"(?i)\s*https?://", s)]
    if not urls:
        warn("--mcp-header only applies to an http(s):// --mcp server; ignored.", err)
        return None
    if len(urls) > 1:
        raise UserError(
            "--mcp-header goes to one HTTP MCP server, and this run has "
            f"{len(urls)}; phi does not send one server's credentials to another. Use one "
            "HTTP --mcp server, or the Python API (with_mcp_server_http(url, headers=...))."
        )
    return headers


def _unreachable(exc: McpError) -> bool:
    """A server that could not be started, reached or authenticated at all (a configuration
    mistake, exit 2): the connection errors without a JSON-RPC code. One that started and then
    failed (crashed, sent a malformed tool list) carries one, or is no connection error."""
    return isinstance(exc, McpConnectionError) and exc.code is None


def _mcp_failed(exc: McpError, model: str, out: TextIO, err: TextIO, mode: OutputMode) -> int:
    """An MCP server that started but failed before the agent could run (it crashed or sent a
    malformed tool list): a failed run - the error on stderr and, as JSON, one ``agent_end``
    and the ``run_result``; exit 1."""
    message = redact(str(exc))
    Console(file=err, highlight=False).print(Text("Error: ", style="bold red") + Text(message))
    payload = {
        "type": "run_result", "loop_id": "", "model": model, "reason": "error",
        "error": message, "text": "", "usage": Usage().model_dump(mode="json"),
        "cost_usd": 0.0, "run_id": None, "conversation_id": None,
    }  # fmt: skip
    if mode == "jsonl":
        out.write(redact(AgentEnd(reason="error", error=message).model_dump_json()) + "\n")
        out.write(redact(json.dumps(payload, ensure_ascii=False)) + "\n")
    elif mode == "json":
        out.write(redact(json.dumps(payload, ensure_ascii=False, indent=2)) + "\n")
    out.flush()
    return EXIT_FAILED


def _run_branch(
    ctx: typer.Context, model: str, system: str | None, continuation: Continuation | None
) -> BranchSpec:
    """The model of ``phi run``: ``-m`` as typed; else, when continuing, the winner's branch
    (model, settings, system prompt); else ``PHI_MODEL`` or the embedded default. ``--system``
    applies to it when given."""
    spec: BranchSpec | None = None
    previous = continuation.winner_spec if continuation is not None else None
    if not _explicit(ctx, "model") and previous:
        try:
            spec = BranchSpec.model_validate(previous)
        except ValueError:
            spec = None  # logged by another version: use -m's default
    if spec is None:
        spec = flag_branch(model)
        if system is None and previous and previous.get("system_prompt"):
            system = str(previous["system_prompt"])  # the conversation keeps its system prompt
    if system is not None:
        spec = spec.model_copy(update={"system_prompt": system})
    return spec


# --------------------------------------------------------------------------- phi models


@app.command()
def models(
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON instead.")] = False,
) -> None:
    """List providers and models, their prices, and which API keys are set (never their values)."""
    try:
        stored = stored_keys()
    except UserError as exc:  # an unreadable keys.json: say so, list the models anyway
        warn(str(exc))
        stored = {}
    rows = model_listing(stored)
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
        elif row["key_stored"]:
            key = Text("stored (phi keys)", style="green")
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
    print_table(Console(highlight=False), table)


def _price(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _mount_subcommands() -> None:
    """``phi route …``, ``mcp``, ``serve``, ``select``, ``chat``, ``logs``, ``aliases``, ``keys``,
    ``view`` and ``parallel-agents`` live in their own modules."""
    from . import _parallel_agents, aliases, chat, keys, logs, mcp, route, select, serve, view

    app.add_typer(route.app, name="route")
    app.add_typer(mcp.app, name="mcp")
    app.command("select")(sigterm_as_ctrl_c(select.command))
    app.command("chat")(sigterm_as_ctrl_c(chat.command))
    app.command("serve")(serve.command)
    app.add_typer(logs.app, name="logs")
    app.add_typer(aliases.app, name="aliases")
    app.add_typer(keys.app, name="keys")
    app.command("view")(view.command)
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
