"""``phi mcp serve``: racing, routing and the model list as MCP tools for other agents.

Desktop assistants, IDE agents and any other MCP client can ask phi to race a question and get
the winner with its rationale and costs. The server is built on the official ``mcp`` SDK
(:class:`mcp.server.mcpserver.MCPServer`) and speaks stdio or streamable HTTP; it offers three
tools:

* ``race`` — race a profile's branches (or the given ``models``) with its strategy; the result is
  the winner's text, the strategy's rationale, and every branch's status, usage and cost;
* ``route`` — the learned router (the ``bandit`` strategy) over a profile's branches: it ranks
  them, races only when unsure, answers and learns; ``dry_run`` returns the ranking alone;
* ``models`` — the profiles this server offers and the providers and models phi knows.

A client that asks for progress hears of every model call of a race as it ends; every race and
route is recorded in the run log (``phi logs``, source ``mcp``) and its ``run_id`` returned.

A **profile** is a race, read from the same config files as ``phi serve --config``: a gateway
file's ``[profiles.NAME]`` tables, or one race file (what ``phi race --config`` reads) named after
the file, with their located errors; the profile ``default`` races the default configurations
of the embedded model unless a file takes that name. What a race runs is planned by
:func:`phi_core.config.plan_race`; this module only adapts arguments and results. Bad input
(an unknown profile, model or strategy, an empty prompt) and a race without a winner are MCP
tool errors (``is_error``) whose text says what was wrong; secrets never reach them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .config import (
    DEFAULT_BRANCHES,
    RacePlan,
    RaceSpec,
    bandit_race_from_plan,
    default_strategy,
    parse_branch,
    plan_race,
)
from .errors import RunError, UserError, redact
from .events import AgentEnd
from .metering import Budget
from .parallel import ParallelLoopResult
from .providers.base import Provider
from .providers.keys import stored_keys
from .providers.registry import model_listing
from .race import BanditOptions, BanditRaceResult
from .runlog import RunLog, RunRecorder

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from .gateway._auth import BearerKeys

__all__ = [
    "DEFAULT_PROFILE",
    "McpConfig",
    "Progress",
    "RaceProfile",
    "RaceTools",
    "load_config",
    "load_profiles",
    "mcp_server",
    "serve_http",
]

Progress = Callable[[float, float | None, str], Awaitable[None]]
"""Told ``(calls ended, calls expected or None, message)`` as a race's model calls end."""

DEFAULT_PROFILE = "default"
"""The profile that races the default configurations when no file takes its name."""


@dataclass(frozen=True)
class RaceProfile:
    """A named race: a race file's contents (or the default race)."""

    name: str
    spec: RaceSpec
    source: str | None = None
    """The file it was read from (``None``: the built-in default race)."""

    def describe(self) -> dict[str, Any]:
        """What the profile races, as the ``models`` tool lists it."""
        branches = self.spec.branches or list(DEFAULT_BRANCHES)
        return {
            "name": self.name,
            "source": self.source,
            "strategy": self.spec.strategy or default_strategy(branches, self.spec.judge),
            "branches": [{"name": b.label, "model": b.model} for b in branches],
            "judge": self.spec.judge.model if self.spec.judge is not None else None,
        }


def load_profiles(
    paths: Sequence[str | os.PathLike[str]],
) -> tuple[dict[str, RaceProfile], str | None]:
    """The profiles of the config files ``paths`` and the router state they set.

    Each file is what ``phi serve --config`` reads (:func:`~phi_core.gateway.load_gateway_config`):
    a gateway file (``[profiles.NAME]`` tables, ``[gateway] state``) or one race file, a profile
    named after the file. :data:`DEFAULT_PROFILE` is added unless a file names it.

    Raises:
        UserError: a file that does not read or validate (naming file, line and key), or two
            files offering one profile name.
    """
    loaded = load_config(paths)
    return loaded.profiles, loaded.state


@dataclass(frozen=True)
class McpConfig:
    """What ``phi mcp serve`` reads from its config files."""

    profiles: dict[str, RaceProfile]
    state: str | None
    keys: BearerKeys
    """Who may call the HTTP endpoint: every file's ``[[gateway.keys]]`` and
    ``$PHI_GATEWAY_KEYS`` (none: anyone)."""


def load_config(paths: Sequence[str | os.PathLike[str]]) -> McpConfig:
    """The profiles, router state and keys of the config files ``paths`` (see
    :func:`load_profiles`; a key read from an unset variable is an error naming it)."""
    from .gateway import load_gateway_config
    from .gateway._auth import BearerKeys
    from .gateway._config import env_keys

    profiles: dict[str, RaceProfile] = {}
    state: str | None = None
    keys = []
    for path in paths:
        config = load_gateway_config(path)
        state = state or config.gateway.state
        keys += [(k, k.secret()) for k in config.gateway.keys]
        for name, spec in config.profiles.items():
            if name in profiles:
                raise UserError(
                    f"Two config files offer the profile {name!r} ({profiles[name].source} and "
                    f"{os.fspath(path)}); rename one of them."
                )
            profiles[name] = RaceProfile(name, spec, source=os.fspath(path))
    profiles.setdefault(DEFAULT_PROFILE, RaceProfile(DEFAULT_PROFILE, RaceSpec()))
    return McpConfig(profiles, state, BearerKeys(keys + env_keys()))


class RaceTools:
    """The tools' behaviour, independent of the MCP transport (so it is tested directly too).

    Args:
        profiles: the races offered by name (default: only :data:`DEFAULT_PROFILE`).
        state: the router state of ``route`` (a .sqlite/.json file or ``redis://…``; default:
            the user directory's).
        providers: a provider per model string instead of the registry's (test doubles).
        max_cost_usd: a dollar cap on every call of a tool; a caller may ask for less, never more.
        run_log: where each race and route is recorded (``phi logs``; source ``mcp``); ``None``:
            nowhere.
    """

    def __init__(
        self,
        profiles: Mapping[str, RaceProfile] | None = None,
        *,
        state: str | None = None,
        providers: Mapping[str, Provider] | None = None,
        max_cost_usd: float | None = None,
        run_log: RunLog | None = None,
    ) -> None:
        self.profiles = dict(profiles or load_profiles(())[0])
        self.run_log = run_log
        self.state = state
        self.providers = dict(providers or {})
        self.max_cost_usd = max_cost_usd

    def profile(self, name: str | None) -> RaceProfile:
        """The profile ``name`` (default: :data:`DEFAULT_PROFILE`, else the only one)."""
        if name is None or not name.strip():
            if DEFAULT_PROFILE in self.profiles or len(self.profiles) != 1:
                name = DEFAULT_PROFILE
            else:
                name = next(iter(self.profiles))
        found = self.profiles.get(name.strip())
        if found is None:
            raise UserError(
                f"Unknown profile {name!r}; this server offers: {', '.join(sorted(self.profiles))}."
                " Call the `models` tool to see what each races."
            )
        return found

    def plan(
        self,
        *,
        profile: str | None = None,
        models: Sequence[str] | None = None,
        strategy: str | None = None,
        judge: str | None = None,
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
    ) -> RacePlan:
        """The checked plan of one call (see :func:`~phi_core.config.plan_race`)."""
        spec = self.profile(profile).spec
        named = spec.branches or []
        branches = [parse_branch(m, named, qualify=True) for m in models or []]
        cap = _cap(max_cost_usd, self.max_cost_usd)
        bandit = (strategy or spec.strategy or "").strip().lower() == "bandit"
        return plan_race(
            spec,
            models=branches,
            judge=parse_branch(judge, named, qualify=True) if judge else None,
            strategy=strategy,
            max_tokens=max_tokens,
            budget=Budget(max_cost_usd=cap),
            bandit=BanditOptions(state=self.state) if bandit else None,
            providers=self.providers,
        )

    async def race(
        self,
        prompt: str,
        *,
        profile: str | None = None,
        models: Sequence[str] | None = None,
        strategy: str | None = None,
        judge: str | None = None,
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Race ``prompt``; the winner's text, the rationale, and every branch's costs.
        ``progress`` hears of every model call that ends (the branches, then the judge).

        Raises:
            UserError: bad input (an unknown profile, model or strategy, an empty prompt).
            RunError: a race without a winner (every branch's error named).
        """
        _check_prompt(prompt)
        plan = self.plan(
            profile=profile, models=models, strategy=strategy, judge=judge,
            max_tokens=max_tokens, max_cost_usd=max_cost_usd,
        )  # fmt: skip
        return await self._run(plan, prompt, self.profile(profile).name, progress)

    async def route(
        self,
        prompt: str,
        *,
        profile: str | None = None,
        models: Sequence[str] | None = None,
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """The learned router over the profile's branches: rank, race only when unsure, answer
        and learn; with ``dry_run`` only the ranking (no model is called, nothing is learned)."""
        _check_prompt(prompt)
        plan = self.plan(
            profile=profile, models=models, strategy="bandit", max_tokens=max_tokens,
            max_cost_usd=max_cost_usd,
        )  # fmt: skip
        name = self.profile(profile).name
        if not dry_run:
            return await self._run(plan, prompt, name, progress)
        race = bandit_race_from_plan(plan)
        await race.load()
        ranking = race.router.rank(race.features(prompt), list(race.arms))
        return {
            "type": "route_ranking",
            "profile": name,
            "namespace": race.namespace,
            "order": ranking.order,
            "clearly_ahead": ranking.clearly_ahead(),
            "arms": [
                {"arm": a.arm, "score": a.score, "mean": a.mean, "width": a.width, "n": a.n}
                for a in ranking.arms
            ],
            "explanation": ranking.explain(),
        }

    async def _run(
        self, plan: RacePlan, prompt: str, profile: str, progress: Progress | None
    ) -> dict[str, Any]:
        """Run the plan (its events to the run log and, as model calls end, to ``progress``),
        record it, and shape the answer."""
        recorder = None
        if self.run_log is not None:
            extra = {"profile": profile}
            recorder = RunRecorder(
                self.run_log, prompt=prompt, plan=plan, source="mcp", extra=extra
            )
        total = None
        if plan.strategy != "bandit":  # a bandit race decides its calls as it goes
            total = len(plan.configs) + (1 if plan.judge_config is not None else 0)
        ended = 0

        async def sink(event: Any) -> None:
            nonlocal ended
            if recorder is not None:
                recorder(event)
            if progress is not None and isinstance(event, AgentEnd):
                ended += 1
                of = f" of up to {total}" if total is not None else ""
                await progress(ended, total, f"{ended}{of} model calls finished")

        events = sink if progress is not None else recorder
        result = await plan.run(prompt, events=events)
        run_id = (await recorder.afinish(result)).id if recorder is not None else None
        return {**_answer(plan, result, profile), "run_id": run_id}

    def models(self) -> dict[str, Any]:
        """The profiles offered and the providers and models phi knows (no key values)."""
        warnings: list[str] = []
        try:
            stored = set(stored_keys())
        except UserError as exc:  # an unreadable keys file: say so, list the models anyway
            warnings.append(redact(str(exc)))
            stored = set()
        return {
            "profiles": [p.describe() for p in self.profiles.values()],
            "models": model_listing(stored),
            "warnings": warnings,
        }


def _check_prompt(prompt: str) -> None:
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserError("The prompt is empty; pass the question or task to race on.")


def _cap(asked: float | None, limit: float | None) -> float | None:
    if asked is not None and not asked > 0:
        raise UserError(f"max_cost_usd must be > 0 dollars, got {asked!r}; leave it out for none.")
    if limit is None or asked is None:
        return asked if limit is None else limit
    return min(asked, limit)


def _answer(
    plan: RacePlan, result: ParallelLoopResult | BanditRaceResult, profile: str
) -> dict[str, Any]:
    """The tool's result: ``plan.payload`` (what ``phi race --json`` prints) with the winner's
    text and the rationale on top; a race without a winner is an error naming every cause."""
    payload = plan.payload(result)
    if isinstance(result, BanditRaceResult):
        text, winner = result.text, result.winner
        rationale = _bandit_rationale(result)
    else:
        chosen = payload["winner"]
        text, winner = (chosen["text"], chosen["name"]) if chosen else ("", None)
        rationale = result.decision.rationale
    if winner is None:
        causes = "; ".join(
            f"{b.get('name') or b.get('arm')}: {b['status']} ({b.get('error') or 'no answer'})"
            for b in payload["branches"]
        )
        raise RunError(
            redact(f"The race has no winner (status {result.status}): {causes or 'nothing ran'}.")
        )
    usage = payload.pop("total_usage", None) or payload.pop("usage")
    return {
        **payload,
        "profile": profile,
        "strategy": plan.strategy,
        "winner": winner,
        "text": text,
        "rationale": rationale,
        "usage": usage,
        "warnings": [f"`{w.setting}` {w.message}" for w in plan.warnings],
    }


def _bandit_rationale(result: BanditRaceResult) -> str:
    if result.winner is None:
        return result.error or ""
    how = {"race": "previewed the contenders", "skip": "was sure of the top arm"}.get(
        str(result.action), str(result.action)
    )
    scores = ", ".join(f"{arm} {score:.2f}" for arm, score in result.scores.items())
    ranked = f"; preview scores: {scores}" if scores else ""
    return f"the router {how} and answered with {result.winner}{ranked}"


# --------------------------------------------------------------------------- the MCP server


def mcp_server(tools: RaceTools) -> MCPServer:
    """An :class:`~mcp.server.mcpserver.MCPServer` offering ``race``, ``route`` and ``models``.

    Raises:
        UserError: the ``mcp`` extra is not installed.
    """
    try:
        from ._mcp_tools import build_server
    except ImportError as exc:
        raise UserError(
            "`phi mcp serve` needs the official MCP SDK: pip install 'phi-core[mcp]'."
        ) from exc
    return build_server(tools)


def serve_http(
    server: MCPServer,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    keys: BearerKeys | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``server`` over streamable HTTP at ``http://host:port/mcp`` until interrupted.

    ``port`` 0 picks a free port; with ``keys``, a request without ``Authorization: Bearer
    <one of them>`` gets a 401 and never reaches the tools; ``on_ready`` receives the endpoint's
    URL once it listens.
    """
    import uvicorn

    from ._net import listening_socket
    from .gateway._auth import require_bearer

    sock = listening_socket(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    app = server.streamable_http_app(host=host)
    guarded = require_bearer(app, keys) if keys is not None else app
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
    if on_ready is not None:
        on_ready(f"http://{shown}:{bound}/mcp")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
