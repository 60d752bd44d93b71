"""``phi route show|reset|export``: inspect, reset or export the learned router state.

``app`` is the ``route`` sub-app (mounted by the main CLI). Reading commands (``show``,
``export``) open the state read-only: they never create, lock, move or change it, and a state
of the wrong shape is reported (exit 1) and left as it was. ``reset`` writes: it moves such a
state aside with a warning, and forgets the state's cached previews too (a reset router would
not learn from previews it found cached). A namespace that does not exist is a usage error
listing the ones that do. A state in Redis is found under its key prefix (``--router-state-key``
/ ``ROUTER_STATE_KEY``, as ``parallel-agents`` writes it).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from .._files import export_target
from ..errors import StateStoreError, UserError
from ..routing._redis import DEFAULT_PREFIX, RedisStateStore, safe_url
from ..routing.state import clear_previews, is_redis, route_state_summary, state_location
from ..routing.stores import RouterStateStore, open_state_store
from ._common import EXIT_FAILED, usage_error, warn
from ._options import RouterStateKeyOption, warn_key_without_redis
from ._parallel_agents import main as parallel_agents_main  # the installed script's old path

__all__ = ["app", "parallel_agents_main"]

StateOpt = Annotated[
    str | None,
    typer.Option(
        "--state",
        envvar="PHI_ROUTER_STATE",
        help="Router state: a .sqlite/.db file, a JSON file, or redis://host:port/db "
        "(default: router_state.sqlite in $PHI_HOME, ~/.phi).",
    ),
]

app = typer.Typer(
    name="route",
    help="Inspect, reset or export the learned router state.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _open(state: str | None, key: str | None, *, read_only: bool) -> RouterStateStore:
    state = state_location(state)
    warn_key_without_redis(key, state)
    if not is_redis(state) and not Path(state).is_file():
        raise usage_error(
            UserError(
                f"No router state at {state!r}; race with --strategy bandit first, or pass "
                "--state (a .sqlite/.json file or redis://…)."
            )
        )
    try:
        return open_state_store(state, read_only=read_only, prefix=key)
    except UserError as exc:  # a Redis URL that cannot be opened: the store says why
        raise usage_error(exc) from None


@contextlib.contextmanager
def _store_errors() -> Iterator[None]:
    """A state that cannot be read or written: its cause on stderr, exit 1 (not a traceback)."""
    try:
        yield
    except StateStoreError as exc:
        usage_error(exc)  # prints ``Error: …``
        raise typer.Exit(EXIT_FAILED) from None


@app.command("show")
def show(
    state: StateOpt = None,
    key: RouterStateKeyOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show each arm's observation count and mean reward, per feature namespace."""
    with _store_errors():
        summary = route_state_summary(_open(state, key, read_only=True))
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    if not summary:
        where = state_location(state)
        under = f" under the key prefix {key or DEFAULT_PREFIX}" if is_redis(where) else ""
        typer.echo(f"{safe_url(where)}: no router statistics yet{under}.")
        return
    for namespace, arms in summary.items():
        typer.echo(f"{namespace}")
        for arm, info in arms.items():
            mean = "-" if info["mean_reward"] is None else f"{info['mean_reward']:.3f}"
            typer.echo(f"  {arm:40s} n={info['n']:<8g} mean reward={mean}")


@app.command("reset")
def reset(
    state: StateOpt = None,
    key: RouterStateKeyOption = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="Only this feature namespace.")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Forget the learned statistics (all namespaces, or one) and the cached previews."""
    with _store_errors():
        store = _open(state, key, read_only=False)
        _reset(store, state_location(state), key, namespace, yes)


def _reset(
    store: RouterStateStore, state: str, key: str | None, namespace: str | None, yes: bool
) -> None:
    if namespace is not None:
        if isinstance(store, RedisStateStore):
            # an unreachable Redis lists only local namespaces: say it cannot be reached
            store.check_reachable()
        known = store.namespaces()
        if namespace not in known:
            listing = ", ".join(repr(n) for n in known) if known else "none yet"
            raise usage_error(
                UserError(
                    f"There is no namespace {namespace!r} in {state}; its namespaces are: "
                    f"{listing}. Pass one of them, or leave --namespace out to reset all."
                )
            )
    what = f"namespace {namespace!r}" if namespace else "every namespace"
    if not yes and not sys.stdin.isatty():  # nobody to answer the question
        raise usage_error(
            UserError(
                f"phi route reset asks before it forgets {what} in {state}, and there is no "
                "terminal to answer; pass -y/--yes to reset without asking."
            )
        )
    try:
        confirmed = yes or typer.confirm(f"Reset {what} in {state}?")
    except typer.Abort:  # Ctrl-C or end of input at the question
        confirmed = False
    if not confirmed:
        typer.echo("Nothing was reset.", err=True)
        raise typer.Exit(1)
    store.reset(namespace)
    # Previews are cached per request, not per namespace: a reset forgets them all, as a
    # router that found them cached would not learn from them again.
    try:
        cleared = clear_previews(state, key_prefix=key)
    except StateStoreError as exc:
        typer.echo(f"Reset {what} in {state}.")
        warn(f"its cached previews were kept: {exc}")
        return
    previews = f"; forgot {cleared} cached preview(s)" if cleared else ""
    typer.echo(f"Reset {what} in {state}{previews}.")


@app.command("export")
def export(
    state: StateOpt = None,
    key: RouterStateKeyOption = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write here instead of stdout (`-`: stdout)."),
    ] = None,
) -> None:
    """Export the full sufficient statistics (A, b, counts) as JSON."""
    data: dict[str, Any] = {"version": 1, "namespaces": {}}
    with _store_errors():
        store = _open(state, key, read_only=True)
        for namespace in store.namespaces():
            data["namespaces"][namespace] = {
                arm: stats.to_json() for arm, stats in sorted(store.load(namespace).items())
            }
    text = json.dumps(data)
    if output is None or str(output) == "-":  # `-o -`: stdout, as without -o
        typer.echo(text)
        return
    try:
        with export_target(output) as target:
            target.write_text(text + "\n", encoding="utf-8")
    except UserError as error:
        raise usage_error(error) from None
    typer.echo(f"Wrote {output}.")
