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

import asyncio
import contextlib
import contextvars
import ipaddress
import math
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio

from ._logging import get_logger
from ._net import DEFAULT_MAX_BODY_BYTES
from .cancel import CancelToken
from .config import (
    DEFAULT_BRANCHES,
    BranchSpec,
    RacePlan,
    RaceSpec,
    bandit_race_from_plan,
    default_strategy,
    parse_branch,
    plan_race,
)
from .errors import RunError, UserError, redact, redact_tree
from .events import AgentEnd
from .metering import Budget
from .parallel import ParallelLoopResult
from .providers.base import Provider
from .providers.keys import stored_keys
from .providers.local import BUNDLED_MODELS
from .providers.registry import model_listing, split_model_settings
from .providers.retry import RetryPolicy
from .race import BanditOptions, BanditRaceResult, route_scope
from .runlog import RunLog, RunRecorder

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from .gateway._auth import BearerKeys
    from .gateway._config import ApiKey
    from .gateway._service import Caller

__all__ = [
    "DEFAULT_PROFILE",
    "KeyLimits",
    "McpConfig",
    "Progress",
    "RaceProfile",
    "RaceTools",
    "allowed_host_names",
    "argument_problem",
    "host_check",
    "load_config",
    "load_profiles",
    "mcp_server",
    "serve_http",
]

Progress = Callable[[float, float | None, str], Awaitable[None]]
"""Told ``(calls ended, calls expected or None, message)`` as a race's model calls end."""

logger = get_logger("phi_core.mcp_server")

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
    api_keys: tuple[ApiKey, ...] = ()
    """The configured keys (their models, request rates and daily spends apply to tool calls
    over HTTP, as in ``phi serve``)."""
    models: tuple[str, ...] = ()
    """Every file's ``[gateway] models``: served even when they name an endpoint or a file."""
    passthrough: bool = True
    """False when a file sets ``[gateway] passthrough = false``: callers may name only the
    profiles' models and the listed ``models``."""
    run_log: bool = True
    """False when a file sets ``[gateway] run_log = false``."""
    log_content: bool = True
    """False when a file sets ``[gateway] log_content = false`` (records keep no text)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """The largest HTTP request body answered (``[gateway] max_body_bytes``; the smallest a
    file sets): a larger one gets a 413 before it is read."""
    retries: int | None = None
    """Retries of a failed upstream call on every branch and judge (``[gateway] retries``, the
    smallest a file sets, as ``phi serve`` applies it); ``None``: each race's own."""


def load_config(paths: Sequence[str | os.PathLike[str]]) -> McpConfig:
    """The profiles, router state, keys and settings of the config files ``paths`` (see
    :func:`load_profiles`; a key read from an unset variable is an error naming it).

    ``[gateway]`` settings apply as in ``phi serve``: ``run_log``, ``models``, ``passthrough``
    and the keys' limits; ``log_content``, ``max_body_bytes`` and ``retries`` only when a file
    sets them (an MCP race is logged with its text otherwise, as ``phi race`` logs, and retries
    as its race file says)."""
    from .gateway import load_gateway_config
    from .gateway._auth import BearerKeys
    from .gateway._config import env_keys

    profiles: dict[str, RaceProfile] = {}
    state: str | None = None
    keys = []
    listed: list[str] = []
    passthrough = run_log = log_content = True
    max_body = DEFAULT_MAX_BODY_BYTES
    retries: int | None = None
    for path in paths:
        config = load_gateway_config(path)
        settings = config.gateway
        if "max_body_bytes" in settings.model_fields_set:
            max_body = min(max_body, settings.max_body_bytes)
        if "retries" in settings.model_fields_set:
            retries = settings.retries if retries is None else min(retries, settings.retries)
        state = state or settings.state
        keys += [(k, k.secret()) for k in settings.keys]
        listed += [m for m in settings.models if m not in listed]
        passthrough = passthrough and settings.passthrough
        run_log = run_log and settings.run_log
        if "log_content" in settings.model_fields_set:
            log_content = log_content and settings.log_content
        for name, spec in config.profiles.items():
            if name in profiles:
                raise UserError(
                    f"Two config files offer the profile {name!r} ({profiles[name].source} and "
                    f"{os.fspath(path)}); rename one of them."
                )
            profiles[name] = RaceProfile(name, spec, source=os.fspath(path))
    profiles.setdefault(DEFAULT_PROFILE, RaceProfile(DEFAULT_PROFILE, RaceSpec()))
    return McpConfig(
        profiles, state, BearerKeys(keys + env_keys()), api_keys=tuple(k for k, _ in keys),
        models=tuple(listed), passthrough=passthrough, run_log=run_log, log_content=log_content,
        max_body_bytes=max_body, retries=retries,
    )  # fmt: skip


class KeyLimits:
    """The per-key checks of ``phi serve`` applied to MCP tool calls over HTTP: the models a key
    may call (``race:PROFILE``, ``route:PROFILE``, ``provider:model``), its requests per minute
    and its daily spend. The checks are the gateway's own (:class:`~phi_core.gateway.Gateway`'s
    ``authenticate``, ``authorize``, ``admit`` and ``charge``); the counters are this process's,
    or Redis's when the router state is a Redis URL (shared with ``phi serve`` there)."""

    def __init__(self, keys: Sequence[ApiKey], state: str | None = None) -> None:
        from .gateway import GatewayConfig
        from .gateway._config import GatewaySettings
        from .gateway._service import Gateway

        # the config files' keys; the gateway adds $PHI_GATEWAY_KEYS itself
        self.gateway = Gateway(
            GatewayConfig(gateway=GatewaySettings(keys=list(keys), state=state)), run_log=None
        )
        if self.gateway.shared:
            from .gateway._limits import RedisCounters

            try:
                import redis
            except ImportError as exc:
                raise UserError(
                    "The keys' limits live in Redis with this router state, and the redis "
                    "package is missing: pip install 'phi-core[redis]'."
                ) from exc
            self.gateway.counters = RedisCounters(redis.Redis.from_url(self.gateway.state))

    def caller(self, authorization: str | None) -> Caller:
        return self.gateway.authenticate(authorization)


MAX_TOKENS_LIMIT = 1_000_000
"""The largest ``max_tokens`` a caller may ask for (no model writes more in one answer)."""

STOP_WAIT_S = 30.0
"""How long a cancelled race gets to stop through its cancel token (and be logged) before it is
stopped hard."""

CANCELLED = (
    "the {what} was cancelled before it was decided (its MCP client cancelled the call, ended "
    "its session, or the server stopped)"
)
"""The warning on the run record of a race or route whose tool call was cancelled."""


_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "phi_mcp_caller", default=None
)
"""Who makes the tool call being answered: the key an HTTP caller presented (set per call by
the server's middleware; ``None``: stdio, or a server without keys)."""


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
        models: models served although they name an endpoint or a file (the config's
            ``[gateway] models``), besides the profiles' own.
        passthrough: whether a caller may name other ``provider:model`` names of the catalogue
            (never ones naming an endpoint or a local file, unless offered as above).
        limits: the keys' limits, applied to calls made with a key (HTTP).
        log_content: whether run records keep the prompt and the answers.
        retries: retries of a failed upstream call on every branch and judge (``[gateway]
            retries``); ``None``: each race's own policy.
    """

    def __init__(
        self,
        profiles: Mapping[str, RaceProfile] | None = None,
        *,
        state: str | None = None,
        providers: Mapping[str, Provider] | None = None,
        max_cost_usd: float | None = None,
        run_log: RunLog | None = None,
        models: Sequence[str] = (),
        passthrough: bool = True,
        limits: KeyLimits | None = None,
        log_content: bool = True,
        retries: int | None = None,
    ) -> None:
        if max_cost_usd is not None and (
            isinstance(max_cost_usd, bool)
            or not isinstance(max_cost_usd, int | float)
            or not math.isfinite(max_cost_usd)
            or not max_cost_usd > 0
        ):  # refused now, not by every tool call
            raise UserError(
                f"The server's dollar cap (--max-cost) must be a finite number of dollars > 0, "
                f"got {max_cost_usd!r}; leave it out for none."
            )
        self.profiles = dict(profiles or load_profiles(())[0])
        self.run_log = run_log
        self.state = state
        self.providers = dict(providers or {})
        self.max_cost_usd = max_cost_usd
        self.listed = list(models)
        self.passthrough = passthrough
        self.limits = limits
        self.log_content = log_content
        if retries is not None and (
            isinstance(retries, bool) or not isinstance(retries, int) or retries < 0
        ):
            raise UserError(f"retries must be a whole number >= 0, got {retries!r}.")
        self.retry = None if retries is None else RetryPolicy(max_retries=retries)
        self.offered = set(self.listed)
        """The models a caller may name whatever they look like: the listed ones and every
        profile's branches and judge."""
        for found in self.profiles.values():
            spec = found.spec
            self.offered.update(b.model for b in spec.branches or DEFAULT_BRANCHES)
            if spec.judge is not None:
                self.offered.add(spec.judge.model)

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

    def check_model(self, text: str, named: Sequence[BranchSpec] = ()) -> None:
        """Refuse a model a caller may not name: one that names its own endpoint
        (``openai-compat:m@http://…``) or a local file (``local:/path/model.gguf``) unless
        the server offers it, and with ``passthrough`` off any model it does not offer. The
        model is not resolved first, so the answer says nothing of the endpoint or the file.

        Raises:
            UserError: the model is refused (naming the rule, not what is behind the name).
        """
        text = text.strip()
        if any(b.name == text for b in named):
            return  # a branch of the profile
        model = split_model_settings(text)[0] if text else text
        if ":" not in model or model in self.offered:
            return  # an alias (the server's own) or a bare catalogue name; or offered
        head, _, rest = model.partition(":")
        if "@" in rest or "://" in rest:
            # A caller must not point the server (and the keys it holds) at any address.
            raise UserError(
                f"The model {model!r} names its own endpoint; such models are served only when "
                "a profile races them or the config lists them in `[gateway] models`."
            )
        if head == "local" and rest not in BUNDLED_MODELS:
            # ... nor have it open its files (the error would say whether one exists).
            bundled = ", ".join(f"local:{m}" for m in BUNDLED_MODELS)
            raise UserError(
                f"The model {model!r} names a local model file; this server serves the bundled "
                f"local models ({bundled}) and the files its profiles or `[gateway] models` name."
            )
        if not self.passthrough:
            raise UserError(
                f"The model {model!r} is not offered by this server; it races its profiles' "
                f"models and {', '.join(sorted(self.listed)) or 'no other'}. Call the `models` "
                "tool to see the profiles."
            )

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
        if models is not None and len(models) > MAX_MODELS:
            raise UserError(
                f"`models` names {len(models)} models; a call may race at most {MAX_MODELS}. "
                "Name fewer, or put them in a profile of the server's config."
            )
        chosen = self.profile(profile)
        spec = chosen.spec
        named = spec.branches or []
        for text in [*(models or []), *([judge] if judge else [])]:
            self.check_model(text, named)
        branches = [parse_branch(m, named, qualify=True) for m in models or []]
        cap = _cap(max_cost_usd, self.max_cost_usd)
        _check_max_tokens(max_tokens)
        bandit = (strategy or spec.strategy or "").strip().lower() == "bandit"
        plan = plan_race(
            spec,
            models=branches,
            judge=parse_branch(judge, named, qualify=True) if judge else None,
            strategy=strategy,
            max_tokens=max_tokens,
            budget=Budget(max_cost_usd=cap),
            bandit=BanditOptions(state=self.state, scope=route_scope(chosen.name))
            if bandit
            else None,
            providers=self.providers,
        )
        return plan if self.retry is None else plan.with_retry(self.retry)

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
            UserError: bad input (an unknown profile, model or strategy, an empty prompt), or
                a key that may not make this call (now).
            RunError: a race without a winner (every branch's error named).
        """
        _check_prompt(prompt)
        plan = self.plan(
            profile=profile, models=models, strategy=strategy, judge=judge,
            max_tokens=max_tokens, max_cost_usd=max_cost_usd,
        )  # fmt: skip
        name = self.profile(profile).name
        caller = await self._admit("race", name, plan, bool(models or judge))
        given = {"max_tokens": max_tokens, "judge": judge, "strategy": strategy, "models": models}
        return await self._run(plan, prompt, name, progress, caller, given)

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
        caller = await self._admit("route", name, plan, bool(models))
        if not dry_run:
            given = {"max_tokens": max_tokens, "models": models}
            return await self._run(plan, prompt, name, progress, caller, given)
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

    async def _admit(self, kind: str, profile: str, plan: RacePlan, own: bool) -> Caller | None:
        """The caller of this call, once its key may make it (``phi serve``'s checks):

        * without ``models`` (or a judge) of its own, the key must list ``race:PROFILE``
          (``route:PROFILE`` for the router), as a request for that profile needs in
          ``phi serve``;
        * with them, every model the race calls that is not the profile's own (when the key
          lists the profile) must be listed by its ``provider:model`` name;
        * the key's requests per minute and daily spend are counted and checked.

        Raises:
            UserError: the key may not call it, or is over a limit (the gateway's message).
        """
        from .errors import GatewayError

        caller = _CALLER.get()
        if caller is None or caller.key is None or self.limits is None:
            return caller
        gateway = self.limits.gateway
        try:
            name = f"{kind}:{profile}"
            if not own:
                gateway.authorize(caller, name)
            else:
                allowed = caller.key.models
                spec = self.profiles[profile].spec
                mine: set[str] = set()
                if allowed is not None and name in allowed:
                    mine = {b.model for b in spec.branches or DEFAULT_BRANCHES}
                    mine |= {spec.judge.model} if spec.judge is not None else set()
                called = [b.model for b in plan.branches]
                called += [plan.judge.model] if plan.judge is not None else []
                for model in called:
                    if model not in mine:
                        gateway.authorize(caller, model)
            await gateway.admit(caller)
        except GatewayError as exc:
            raise UserError(exc.message) from None
        return caller

    async def _run(
        self,
        plan: RacePlan,
        prompt: str,
        profile: str,
        progress: Progress | None,
        caller: Caller | None = None,
        given: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run the plan (its events to the run log and, as model calls end, to ``progress``),
        record it, and shape the answer.

        A cancelled call (the client cancelled it or ended its session) stops the race through
        its cancel token, so it ends as what it is, each branch with its status and the usage
        it caused; that is logged (and charged to the caller's key) before the cancellation
        goes on, as ``phi serve`` does."""
        recorder = None
        if self.run_log is not None:
            extra = {"profile": profile}
            recorder = RunRecorder(None, prompt=prompt, plan=plan, source="mcp", extra=extra)
        total = None
        if plan.strategy != "bandit":  # a bandit race decides its calls as it goes
            total = len(plan.configs) + (1 if plan.judge_config is not None else 0)
        ended = 0
        stopping = False

        async def sink(event: Any) -> None:
            nonlocal ended
            if recorder is not None:
                recorder(event)
            if progress is not None and not stopping and isinstance(event, AgentEnd):
                ended += 1
                of = f" of up to {total}" if total is not None else ""
                await progress(ended, total, f"{ended}{of} model calls finished")

        events = sink if progress is not None else recorder
        cancel = CancelToken()
        run = asyncio.ensure_future(plan.run(prompt, events=events, cancel=cancel))
        try:
            result = await asyncio.shield(run)
        except asyncio.CancelledError:
            stopping = True
            cancel.cancel("client_cancelled")
            # Shielded from the caller's cancel scope (anyio cancels again at every await).
            with anyio.CancelScope(shield=True):
                try:
                    ended_as = await asyncio.wait_for(asyncio.shield(run), STOP_WAIT_S)
                except BaseException:  # it did not stop in time (or failed): stop it hard
                    run.cancel()
                    await asyncio.gather(run, return_exceptions=True)
                    raise asyncio.CancelledError from None
                what = "route" if plan.strategy == "bandit" else "race"
                await self._finish(recorder, ended_as, caller, CANCELLED.format(what=what))
            raise
        run_id = await self._finish(recorder, result, caller)
        return {**_answer(plan, result, profile, given), "run_id": run_id}

    async def _finish(
        self,
        recorder: RunRecorder | None,
        result: ParallelLoopResult | BanditRaceResult,
        caller: Caller | None,
        warning: str | None = None,
    ) -> str | None:
        """Charge the run to the caller's key and write its record (its id; never raises)."""
        if caller is not None and self.limits is not None:
            with contextlib.suppress(Exception):  # a counter store down fails no paid call
                await self.limits.gateway.charge(caller, _spent(result))
        if recorder is None or self.run_log is None:
            return None
        record = recorder.build(result)
        if warning is not None:
            record.warnings.append(warning)
        if not self.log_content:
            from .gateway._answers import without_content

            record = without_content(record)
        log = self.run_log
        try:
            await asyncio.to_thread(log.write, record)
        except Exception as exc:  # a failed log write must not fail a finished run
            logger.warning("the run log could not record run %s: %s", record.id, exc)
        return record.id

    def models(self) -> dict[str, Any]:
        """The profiles and models the caller may use (no key values): every profile and, with
        ``passthrough`` on, every model phi knows; with it off, the offered models only. An HTTP
        caller whose key lists its models sees only those (and the profiles it lists as
        ``race:NAME`` or ``route:NAME``), as ``GET /v1/models`` shows them in ``phi serve``."""
        warnings: list[str] = []
        try:
            stored = set(stored_keys())
        except UserError as exc:  # an unreadable keys file: say so, list the models anyway
            warnings.append(str(exc))
            stored = set()
        caller = _CALLER.get()
        allowed = caller.key.models if caller is not None and caller.key is not None else None
        profiles = [
            p.describe()
            for name, p in self.profiles.items()
            if allowed is None or {f"race:{name}", f"route:{name}"} & set(allowed)
        ]
        rows = [
            row
            for row in model_listing(stored)
            if (self.passthrough or row["model"] in self.offered)
            and (allowed is None or row["model"] in allowed)
        ]
        # an endpoint's URL may carry a token (`…/v1?api_key=…`): the listing never shows it
        listing: dict[str, Any] = redact_tree(
            {"profiles": profiles, "models": rows, "warnings": warnings}
        )
        return listing


def _spent(result: ParallelLoopResult | BanditRaceResult) -> float:
    return float(result.cost_usd or 0.0)


def _check_prompt(prompt: str) -> None:
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserError("The prompt is empty; pass the question or task to race on.")


def _check_max_tokens(value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(
            f"max_tokens must be a whole number from 1 to {MAX_TOKENS_LIMIT:,}, got {value!r}."
        )
    if not 1 <= value <= MAX_TOKENS_LIMIT:
        shown = f"{value!r}" if abs(value) < 10**12 else "a larger number"
        raise UserError(
            f"max_tokens must be from 1 to {MAX_TOKENS_LIMIT:,} tokens, got {shown}; leave it "
            "out for each branch's own."
        )


def _cap(asked: float | None, limit: float | None) -> float | None:
    if asked is not None and (
        isinstance(asked, bool)
        or not isinstance(asked, int | float)
        or not math.isfinite(asked)
        or not asked > 0
    ):
        raise UserError(
            f"max_cost_usd must be > 0 (a finite number of dollars), got {asked!r}; leave it out "
            "for none."
        )
    if limit is None or asked is None:
        return asked if limit is None else limit
    return min(asked, limit)


def _answer(
    plan: RacePlan,
    result: ParallelLoopResult | BanditRaceResult,
    profile: str,
    given: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The tool's result: ``plan.payload`` (what ``phi race --json`` prints) with the winner's
    text and the rationale on top; a race without a winner is an error naming every cause.

    ``warnings`` are about the settings the caller gave (``given``): a profile's own judge
    that the caller's strategy does not use is no news to the caller."""
    given = given or {}
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
        "warnings": [
            f"`{w.setting}` {w.message}" for w in plan.warnings if given.get(w.setting) is not None
        ],
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

    Every tool call passes :func:`_check_call` first: an unknown argument, or one of the wrong
    type or out of range, is a tool error naming the argument and what it accepts (not the
    SDK's validation dump); the caller's key (HTTP) is noted for :class:`KeyLimits`.

    Raises:
        UserError: the ``mcp`` extra is not installed.
    """
    try:
        from ._mcp_tools import build_server
    except ImportError as exc:
        raise UserError(
            "`phi mcp serve` needs the official MCP SDK: pip install 'phi-core[mcp]'."
        ) from exc
    server = build_server(tools)
    server.middleware.append(_CallChecks(tools))
    return server


MAX_MODELS = 16
"""The most models one ``race`` or ``route`` call may name: each is a full model call (and the
judge reads every answer), so a caller cannot start hundreds with one call."""

_TOOL_ARGS: dict[str, dict[str, str]] = {
    "race": {
        "prompt": "text", "profile": "name", "models": "models", "strategy": "name",
        "judge": "name", "max_tokens": "tokens", "max_cost_usd": "dollars",
    },
    "route": {
        "prompt": "text", "profile": "name", "models": "models", "max_tokens": "tokens",
        "max_cost_usd": "dollars", "dry_run": "flag",
    },
    "models": {},
}  # fmt: skip
"""Each tool's arguments and what each takes (the tools' signatures in ``_mcp_tools``)."""

_ACCEPTS = {
    "text": "a string",
    "name": "a string",
    "models": f"a list of up to {MAX_MODELS} model strings (`provider:model` or branch names)",
    "tokens": f"a whole number from 1 to {MAX_TOKENS_LIMIT:,}",
    "dollars": "a finite number of dollars > 0",
    "flag": "true or false",
}


def _shown(value: Any) -> str:
    """What a rejected value is, without echoing a caller's long text back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(value) if abs(value) < 10**12 or not math.isfinite(value) else "a larger number"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else "a long string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def argument_problem(tool: str, arguments: Any) -> str | None:
    """Why ``arguments`` cannot be passed to ``tool`` (``None``: they can, or the tool is not
    one of phi's): an unknown argument, a missing prompt, a value of the wrong type or out of
    range — named with what it accepts."""
    spec = _TOOL_ARGS.get(tool)
    if spec is None:
        return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return f"The arguments of `{tool}` must be an object, got {_shown(arguments)}."
    unknown = sorted(str(a) for a in arguments if a not in spec)
    if unknown:
        takes = ", ".join(f"`{a}`" for a in spec) or "no arguments"
        names = ", ".join(repr(a) for a in unknown)
        return f"Unknown argument{'s' if len(unknown) > 1 else ''} {names}; `{tool}` takes {takes}."
    for name, kind in spec.items():
        if name not in arguments:
            if kind == "text":
                return f"`{name}` is required: the question or task to race on ({_ACCEPTS[kind]})."
            continue
        value = arguments[name]
        if value is None and kind not in ("text", "flag"):
            continue
        if _accepts(kind, value):
            continue
        return f"`{name}` must be {_ACCEPTS[kind]}, got {_shown(value)}."
    return None


def _accepts(kind: str, value: Any) -> bool:
    if kind == "text":
        return isinstance(value, str)  # an empty one: RaceTools says what to pass
    if kind == "name":
        return isinstance(value, str)
    if kind == "models":
        return (
            isinstance(value, list)
            and len(value) <= MAX_MODELS
            and all(isinstance(m, str) for m in value)
        )
    if kind == "flag":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if kind == "tokens":
        return isinstance(value, int) and 1 <= value <= MAX_TOKENS_LIMIT
    return math.isfinite(value) and value > 0  # dollars


class _CallChecks:
    """Server middleware: check a tool call's arguments (:func:`argument_problem`) before the
    SDK validates them, and note who calls (the HTTP request's key) for the call's limits."""

    def __init__(self, tools: RaceTools) -> None:
        self.tools = tools

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if ctx.method != "tools/call" or not isinstance(ctx.params, Mapping):
            return await call_next(ctx)
        tool = ctx.params.get("name")
        problem = argument_problem(str(tool), ctx.params.get("arguments"))
        if problem is not None:
            from mcp.types import CallToolResult, TextContent

            text = f"Error executing tool {tool}: {problem}"
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        caller = None
        request = ctx.request
        if self.tools.limits is not None and request is not None:
            headers = getattr(request, "headers", None)
            authorization = headers.get("authorization") if headers is not None else None
            caller = self.tools.limits.caller(authorization)
        token = _CALLER.set(caller)
        try:
            return await call_next(ctx)
        finally:
            _CALLER.reset(token)


def allowed_host_names(
    host: str, has_keys: bool, extra: Sequence[str] = ()
) -> tuple[str, ...] | None:
    """The ``Host`` names the HTTP endpoint answers when listening on ``host`` (``None``: any).

    As ``phi serve`` (:func:`phi_core._net.allowed_hosts`): the loopback names on a loopback
    address (all of 127.0.0.0/8 and ::1). Listening on another address *without keys*, the
    loopback names, this machine's names, the address itself and ``extra`` (``--allow-host``):
    a keyless server answering every name can be driven by any web page that re-points its
    domain at it (DNS rebinding). With keys any name is answered (a page has no key to send).
    A ``Host`` that is an IP address is always answered (no DNS name, nothing to re-point).
    """
    from ._net import LOOPBACK_HOSTS, allowed_hosts

    names = allowed_hosts(host)
    if names is not None:
        return (*names, *extra)
    if has_keys:
        return None
    mine = {socket.gethostname(), socket.getfqdn(), host.strip("[]")}
    return (*LOOPBACK_HOSTS, *sorted(n for n in mine if n), *extra)


def host_check(app: Any, hosts: Sequence[str]) -> Any:
    """``app`` behind ``phi serve``'s :class:`~phi_core._net.HostCheck` for ``hosts``, except
    that a ``Host`` that is an IP address passes (see :func:`allowed_host_names`)."""
    from ._net import HostCheck

    checked = HostCheck(app, hosts, body=lambda m: _http_error(m, "host_not_allowed"))

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and _ip_host(scope):
            await app(scope, receive, send)
        else:
            await checked(scope, receive, send)

    return guarded


def _http_error(message: str, code: str = "request_too_large") -> dict[str, Any]:
    """The JSON of an HTTP-level refusal (before the MCP layer)."""
    return {"error": {"message": message, "code": code}}


def _ip_host(scope: Any) -> bool:
    raw = dict(scope.get("headers") or ()).get(b"host", b"").decode("latin-1")
    try:
        name = urlsplit("//" + raw).hostname if raw else None
    except ValueError:
        return False
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def serve_http(
    server: MCPServer,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    keys: BearerKeys | None = None,
    on_ready: Callable[[str], None] | None = None,
    allow_hosts: Sequence[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> None:
    """Serve ``server`` over streamable HTTP at ``http://host:port/mcp`` until interrupted.

    ``port`` 0 picks a free port; with ``keys``, a request without ``Authorization: Bearer
    <one of them>`` gets a 401 and never reaches the tools; a request for another ``Host``
    than :func:`allowed_host_names` gets a 400, and one whose body is larger than
    ``max_body_bytes`` a 413; ``on_ready`` receives the endpoint's URL once it listens.
    """
    import uvicorn

    from ._net import BodyLimit, listening_socket
    from .gateway._auth import require_bearer

    sock = listening_socket(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    app = server.streamable_http_app(host=host)
    guarded: Any = BodyLimit(app, max_body_bytes, body=_http_error)
    guarded = require_bearer(guarded, keys) if keys is not None else guarded
    hosts = allowed_host_names(host, bool(keys), allow_hosts)
    if hosts is not None:
        guarded = host_check(guarded, hosts)
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
    if on_ready is not None:
        on_ready(f"http://{shown}:{bound}/mcp")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
