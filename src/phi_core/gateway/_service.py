"""What the gateway does per request, without HTTP: authenticate, admit, answer, learn.

:class:`Gateway` owns the planned profiles (``race:<profile>`` through :func:`plan_race` and
``agent_loop_parallel``; ``route:<profile>`` through the bandit race built by
:func:`bandit_race_from_plan`), the passthrough path (``provider:model`` through the registry and
:class:`~phi_core.providers.call.ModelCall`: retry, limiter, meter), the feedback links, the
per-key limits and the metrics. Every request runs under its own
:class:`~phi_core.metering.Meter`, so ``usage`` is the sum over every call it caused (judges,
previews, fallbacks), also when the client went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from .._logging import get_logger
from .._paths import check_user_dir
from ..cancel import CancelToken
from ..config import RacePlan, bandit_race_from_plan, plan_race
from ..errors import (
    BudgetExceededError,
    GatewayError,
    MissingApiKeyError,
    ProviderError,
    StateStoreError,
    UserError,
    redact,
)
from ..events import RouteDecision, RouteUpdate, tee
from ..loop import AgentContext, AgentLoopConfig
from ..metering import Budget, Meter, metering
from ..parallel import ParallelLoopResult
from ..providers.base import ModelConfig, Provider, StreamDone, StreamRequest
from ..providers.call import ModelCall
from ..providers.local import BUNDLED_MODELS
from ..providers.registry import get_provider, resolve_model, servable_models
from ..providers.retry import RetryPolicy
from ..race import Arm, BanditOptions, BanditRace, route_scope
from ..routing.state import check_redis_url, is_redis, open_route_state, state_location
from ..routing.stores import (
    LinkStore,
    MemoryPreviewCache,
    RouterStateStore,
    make_parent,
    open_state_store,
)
from ..runlog import RunLog, RunRecord, RunRecorder
from ..tools._validate import check_tools
from ..types import AssistantMessage, TextDelta, ToolCallDelta
from ._answers import (
    Answer,
    error_of_kind,
    failure_of,
    race_answer,
    route_answer,
    upstream_error,
    without_content,
)
from ._auth import BearerKeys
from ._config import ApiKey, GatewayConfig, model_problem
from ._limits import LimitCounters, MemoryCounters, RedisCounters, day_window, minute_window
from ._metrics import GatewayMetrics
from ._wire import (
    ChatRequest,
    cut_at_stop,
    finish_reason,
    new_completion_id,
    tool_calls_dicts,
)

__all__ = ["Answer", "Caller", "Gateway", "model_owner"]

logger = get_logger("phi_core.gateway")

_N = TypeVar("_N", int, float)

Kind = Literal["race", "route", "passthrough"]
"""What answers a model name: a race, a route or the model itself."""

LINK_PREFIX = "phi:gateway:link:"
SCORED_PREFIX = "phi:gateway:scored:"
"""The marker of a completion already scored (its value: the first score's answer), claimed
atomically in the link store so a repeated feedback (a client's retry) is learned once."""
FEEDBACK_RETRY_AFTER_S = 5
"""``Retry-After`` of a feedback refused because the link store cannot be reached."""
UNLINKED_KEPT = 4096
"""How many completions answered without a feedback link this process remembers."""
RELOAD_EVERY_S = 1.0
"""A route profile reloads the shared router statistics at most this often."""
MODELS_KEPT = 1024
"""How many resolved passthrough model names a gateway remembers."""
CANCELLED = (
    "the {what} was cancelled before it was decided (its client went away, or the gateway stopped)"
)
"""The warning on the run record of a race or route whose request was cancelled."""
RECORD_BATCH_S = 0.1
"""How long a run record waits for others to be written with it (one thread hop and one
transaction a batch); at close, what is queued is written at once."""


def model_owner(name: str) -> str:
    """``owned_by`` of a model the gateway serves: ``phi`` for a profile, else its provider."""
    head = name.partition(":")[0]
    return "phi" if head in ("race", "route") else head


@dataclass(frozen=True)
class Caller:
    """Who is calling: a configured key's name (``None`` when the gateway has no keys)."""

    name: str | None = None
    key: ApiKey | None = None


DAILY_REFUSAL = "daily spend limit (daily_usd"
"""In the message of every call a key's daily spend limit refused (how a refusal is told apart
from one of a profile's own budgets)."""


class _Allowance(Meter):
    """A :class:`Meter` whose budget is what is left of a key's ``daily_usd``: each call reserves
    its worst case against it before it is sent, and a call that could spend past it is refused
    with a :class:`BudgetExceededError` naming the key's limit (``limit="daily_usd"``).

    A request runs under its own (what the spend store said was left when it was admitted) and
    under the one its key's requests in flight in this process share (``shared``), so
    concurrent requests reserve from one remainder instead of each spending all of it."""

    def __init__(
        self,
        key: ApiKey,
        remaining: float,
        *,
        shared: _Allowance | None = None,
        slot: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(Budget(max_cost_usd=remaining), refusal=self._over_allowance)
        self.key = key
        self.shared = shared
        self.slot = slot
        """``(key name, day window)`` of the shared allowance this request holds (released once)."""

    def _over_allowance(self, exc: BudgetExceededError) -> BudgetExceededError:
        detail = str(exc).removeprefix("Budget exceeded: ")
        return BudgetExceededError(
            f"key {self.key.name!r} is over its {DAILY_REFUSAL} = ${self.key.daily_usd:g} a "
            f"day): what is left of today's dollars cannot fit this call ({detail})",
            limit="daily_usd",
        )

    def meters(self) -> tuple[Meter, ...]:
        """The meters a call of this request goes on: the shared allowance, then its own."""
        return (self,) if self.shared is None else (self.shared, self)


def meters_of(meter: Meter) -> tuple[Meter, ...]:
    """The meters a request's calls go on (its key's shared daily allowance too, if any)."""
    return meter.meters() if isinstance(meter, _Allowance) else (meter,)


def _retry_later(message: str, code: str) -> GatewayError:
    """A 503 of feedback that a store refused: worth retrying after ``Retry-After``."""
    return GatewayError(
        503,
        message,
        type_="server_error",
        code=code,
        headers={"Retry-After": str(FEEDBACK_RETRY_AFTER_S)},
    )


def daily_spend_error(key: ApiKey, message: str) -> GatewayError:
    """The 429 of a key over its ``daily_usd`` (``Retry-After``: when the UTC day ends)."""
    _, left = day_window()
    return GatewayError(
        429,
        message,
        type_="insufficient_quota",
        code="daily_spend_exceeded",
        headers={"Retry-After": str(max(1, round(left)))},
    )


def refused_by_allowance(meter: Meter) -> str | None:
    """The message of a call of this request its key's daily spend limit refused (``None``:
    none was)."""
    for call in list(meter.calls):
        if call.error_kind == "budget" and DAILY_REFUSAL in (call.error or ""):
            return call.error
    return None


@dataclass
class _Held:
    """A key's allowance shared by its requests in flight in this process."""

    meter: _Allowance
    requests: int = 0


@dataclass
class _Route:
    """A route profile: the bandit race (one per process) and when it last reloaded."""

    race: BanditRace
    loaded_at: float = 0.0
    load_failed: bool = False
    """Whether the last reload failed (warned once; the router keeps what it had)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Gateway:
    """The gateway's behaviour; :func:`~phi_core.gateway.create_app` puts HTTP around it.

    Args:
        config: the gateway config (profiles, keys, state, logging).
        providers: a provider per model string instead of the registry's (test doubles).
        run_log: where gateway requests are recorded (default: the user directory's run log
            when ``gateway.run_log`` is on; ``None``: not recorded).
    """

    def __init__(
        self,
        config: GatewayConfig,
        *,
        providers: Mapping[str, Provider] | None = None,
        run_log: RunLog | Literal["default"] | None = "default",
    ) -> None:
        self.config = config
        self.settings = config.gateway
        self.providers = dict(providers or {})
        self.metrics = GatewayMetrics()
        self.metrics.counter(
            "phi_gateway_feedback_requests_total", "Feedback requests answered, by status."
        )
        self.metrics.counter(
            "phi_gateway_feedback_duplicates_total",
            "Feedback repeated for a completion already scored (answered, not learned again).",
        )
        self.metrics.counter(
            "phi_gateway_feedback_links_lost_total",
            "Routed completions answered without a feedback link (the link store could not "
            "be written): they cannot be scored.",
        )
        self._keys = BearerKeys(config.api_keys())  # a key_env that is unset is reported now
        self._run_log_arg = run_log
        self.run_log: RunLog | None = None
        self.race_plans: dict[str, RacePlan] = {}
        self.routes: dict[str, _Route] = {}
        self.links: LinkStore = MemoryPreviewCache()
        self._unlinked = MemoryPreviewCache(UNLINKED_KEPT, self.settings.link_ttl_s)
        """Completions this process answered without a feedback link (the link store could
        not be written), so their feedback is told so rather than "not found"."""
        self._links_failing = False
        self.counters: LimitCounters = MemoryCounters()
        self._held: dict[tuple[str, str], _Held] = {}
        """Per ``(key, day)``: the daily allowance its requests in flight share."""
        self.state: str = state_location(self.settings.state)
        if is_redis(self.state):  # $PHI_ROUTER_STATE too: refused before anything listens
            check_redis_url(self.state)
        self.ready = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._redis: Any = None
        self._state_store: RouterStateStore | None = None
        self._models: dict[str, ModelConfig] = {}
        self._shown_as = {redact(m): m for m in self.settings.models if redact(m) != m}
        """A listed model whose name holds a secret (``…/v1?api_key=…``) is shown with the secret
        redacted, and that shown name calls it (the client never sees the secret)."""
        self._servable: list[str] | None = None
        self._unwritten: list[RunRecord] = []
        self._writer: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        # Plans are checked now, so a bad profile fails at start with the race file's errors;
        # so is every listed model (one a test double stands in for is taken as it is).
        self.retry = RetryPolicy(max_retries=self.settings.retries)
        for listed in self.settings.models:
            problem = None if listed in self.providers else model_problem(listed)
            if problem is not None:
                raise UserError(f"gateway.models entry {redact(listed)!r}: {problem}")
        for name, spec in config.profiles.items():
            try:
                plan = plan_race(spec, providers=self.providers)
            except UserError as exc:
                raise UserError(f"Profile {name!r}: {exc}") from None
            self.race_plans[name] = self._retrying(plan)
        self._judges_tool_calls = {
            name: plan.strategy == "bandit"
            or getattr(plan.build_strategy(), "judges_tool_calls", True)
            for name, plan in self.race_plans.items()
        }
        # A profile that cannot be a route (repeated branch labels) is still a race; a client
        # asking for its route is told why.
        self._route_plans: dict[str, RacePlan] = {}
        self.route_problems: dict[str, str] = {}
        for name, spec in config.profiles.items():
            try:
                plan = plan_race(
                    spec,
                    strategy="bandit",
                    bandit=BanditOptions(state=self.state, scope=route_scope(name)),
                    providers=self.providers,
                )
            except UserError as exc:
                self.route_problems[name] = str(exc)
                continue
            self._route_plans[name] = self._retrying(plan)

    # ------------------------------------------------------------------ lifecycle

    @property
    def shared(self) -> bool:
        return is_redis(self.state)

    def check_state(self) -> None:
        """Open a file router state once, before anything listens: one that cannot be used (a
        file that is not a router state, a folder that cannot be made, ``PHI_HOME`` a file) is
        an error now, not a failed startup. A Redis state is reached at start (``/readyz``
        reports it unreachable, and it may come up later).

        Raises:
            UserError: the state is not a router state (left unchanged), or ``PHI_HOME`` is a
                file.
            StateStoreError: it cannot be opened (named, with why)."""
        where = state_location(self.state)
        if is_redis(where):
            return
        if self.state is None:
            check_user_dir()
        make_parent(Path(where))
        store = open_state_store(where)
        close = getattr(store, "close", None)
        if callable(close):
            close()

    async def start(self) -> None:
        """Open the router state, feedback links, limits and run log (in threads)."""
        self._closing = asyncio.Event()
        await asyncio.to_thread(self._open)
        for route in self.routes.values():
            await route.race.load()
            route.loaded_at = time.monotonic()
        self.ready = True

    def _open(self) -> None:
        settings = self.settings
        state = open_route_state(self.state, preview_cache=True, cache_ttl_s=settings.link_ttl_s)
        assert state.cache is not None
        # the same store as the preview cache, own key prefix (every store open_route_state
        # makes keeps links: memory, SQLite, Redis)
        self.links = cast(LinkStore, state.cache.store)
        self._state_store = state.store
        if self.shared:
            client = getattr(state.store, "_client", None)
            if client is None:
                import redis

                client = redis.Redis.from_url(self.state)
            self._redis = client
            self.counters = RedisCounters(client)
        for name, plan in self._route_plans.items():
            self.routes[name] = _Route(bandit_race_from_plan(plan))
        if self._run_log_arg == "default":
            self.run_log = RunLog() if settings.run_log else None
        else:
            self.run_log = self._run_log_arg

    def _retrying(self, plan: RacePlan) -> RacePlan:
        """``plan`` with the gateway's retry policy on every branch and the judge."""
        return plan.with_retry(self.retry)

    @property
    def in_flight(self) -> int:
        """Requests being answered now (counted by the HTTP layer, which ends each only after
        it has counted, charged and logged it)."""
        return self._in_flight

    @in_flight.setter
    def in_flight(self, value: int) -> None:
        self._in_flight = value
        if value == 0:
            self._idle.set()
        else:
            self._idle.clear()

    async def close(self) -> None:
        """Stop answering readiness and close what :meth:`start` opened, once the requests
        still in flight have ended (a stopping server has cancelled them: they stop their
        work and log it first, so no record is lost to a log already closed)."""
        self.ready = False
        await self._idle.wait()
        if self._writer is not None:
            self._closing.set()
            await self._writer  # the records still queued
        if self.run_log is not None and self._run_log_arg == "default":
            await asyncio.to_thread(self.run_log.close)
        if self._redis is not None:
            await asyncio.to_thread(self._redis.close)
            self._redis = None

    async def check_ready(self) -> str | None:
        """Why the gateway cannot serve now (``None``: it can)."""
        if not self.ready:
            return "starting"
        if self._redis is not None:
            try:
                await asyncio.to_thread(self._redis.ping)
            except Exception as exc:
                return f"redis unreachable ({type(exc).__name__})"
        elif self._state_store is not None:
            # a file state (SQLite, JSON) that can no longer be read fails every route's learning
            # and feedback: one cheap read of it, in a thread
            try:
                await asyncio.to_thread(self._state_store.namespaces)
            except Exception as exc:
                return f"router state unreadable ({type(exc).__name__})"
        return None

    # ------------------------------------------------------------------ models

    def model_ids(self, caller: Caller | None = None) -> list[str]:
        """The profiles' names (``race:…``, ``route:…``), then ``gateway.models`` (a secret
        in a name redacted); with ``caller``, only those its key may call."""
        ids = [f"race:{p}" for p in self.race_plans] + [f"route:{p}" for p in self.routes]
        return [n for n in ids + [redact(m) for m in self.settings.models] if self.may(caller, n)]

    def may(self, caller: Caller | None, model: str) -> bool:
        """Whether ``caller`` (None: anyone) may call ``model`` (a name as shown or as set)."""
        allowed = caller.key.models if caller is not None and caller.key is not None else None
        return allowed is None or model in allowed or self._real(model) in allowed

    def _real(self, name: str) -> str:
        """The configured name of a model shown with a secret redacted (else ``name``)."""
        return self._shown_as.get(name, name)

    def listed_models(self, caller: Caller) -> list[str]:
        """What ``GET /v1/models`` shows ``caller``: :meth:`model_ids` and, with passthrough
        on, the catalogue models this process can serve now (their provider's key is set, or
        the embedded model is installed) — only those the caller's key may call."""
        names = self.model_ids(caller)
        if self.settings.passthrough:
            if self._servable is None:
                self._servable = servable_models()
            names += [
                n for n in self._servable if n not in self.settings.models and self.may(caller, n)
            ]
        return names

    def resolve(self, name: str, caller: Caller | None = None) -> tuple[Kind, str]:
        """``(kind, profile or model)``; an unknown name is a 404 listing the known ones (those
        ``caller`` may call)."""
        if not name.isprintable() or not name.isascii():
            # it is echoed in headers (x-phi-model), which carry neither
            raise GatewayError(
                400,
                f"The model name {name!r} holds control or non-ASCII characters; no model is "
                "named so.",
                param="model",
                code="invalid_model",
            )
        head, sep, rest = name.partition(":")
        if head == "race" and sep and rest in self.race_plans:
            # a profile whose own strategy is the bandit races as its route does
            return ("route" if self.race_plans[rest].strategy == "bandit" else "race"), rest
        if head == "route" and sep and rest in self.routes:
            return "route", rest
        if head == "route" and rest in self.route_problems:
            raise self.unknown(
                name, f"the profile cannot be routed: {self.route_problems[rest]}", caller
            )
        listed = self._real(name) in self.settings.models
        if head not in ("race", "route") and sep and rest and (self.settings.passthrough or listed):
            if "@" in rest and not listed:
                # A client must not point the gateway (and the keys it holds) at any address.
                raise GatewayError(
                    403,
                    f"The model {name!r} names its own endpoint; such models are served only "
                    "when listed in the config's `gateway.models`.",
                    type_="permission_error",
                    code="endpoint_not_allowed",
                    param="model",
                )
            if head == "local" and rest.partition("@")[0] not in BUNDLED_MODELS and not listed:
                # ... nor have it open the machine's files (the error would say whether one
                # exists, and what it starts with).
                raise GatewayError(
                    403,
                    f"The model {name!r} names a local model file; this gateway serves the "
                    "bundled local models and the files listed in the config's `gateway.models`.",
                    type_="permission_error",
                    code="local_file_not_allowed",
                    param="model",
                )
            try:
                self._model(self._real(name))
            except UserError as exc:
                raise self.unknown(name, str(exc), caller) from None
            return "passthrough", name
        raise self.unknown(name, "", caller)

    def _model(self, name: str) -> ModelConfig:
        """``resolve_model(name)``, remembered (the catalog and environment do not change
        while serving; at most :data:`MODELS_KEPT` names, so clients cannot grow it forever)."""
        model = self._models.get(name)
        if model is None:
            model = resolve_model(name)
            if len(self._models) < MODELS_KEPT:
                self._models[name] = model
        return model

    def unknown(self, name: str, why: str, caller: Caller | None) -> GatewayError:
        known = ", ".join(self.model_ids(caller)) or "none configured"
        anything = caller is None or caller.key is None or caller.key.models is None
        passthrough = " or any `provider:model`" if self.settings.passthrough and anything else ""
        detail = f" ({why})" if why else ""
        return GatewayError(
            404,
            f"The model {name!r} does not exist{detail}. Known models: {known}{passthrough}.",
            code="model_not_found",
            param="model",
        )

    # ------------------------------------------------------------------ auth and limits

    def authenticate(self, authorization: str | None) -> Caller:
        """The caller of a request with this ``Authorization`` header (401 without a key the
        gateway knows; see :class:`BearerKeys`)."""
        found = self._keys.check(authorization)
        return Caller() if found is None else Caller(found.name, found)

    def authorize(self, caller: Caller, model: str) -> None:
        """403 when the caller's key may not call ``model``."""
        if not self.may(caller, model):
            raise GatewayError(
                403,
                f"Key {caller.name!r} may not call {model!r}; it may call: "
                f"{', '.join(self.model_ids(caller)) or 'nothing'}.",
                type_="permission_error",
                code="model_not_allowed",
                param="model",
            )

    async def admit(self, caller: Caller) -> Meter:
        """Refuse with 429 (and ``Retry-After``) a key over its request rate or daily spend;
        else the :class:`Meter` the request runs under (hand it to :meth:`release` when the
        request is over, after :meth:`charge`).

        With a ``daily_usd``, the meter's budget is what is left of the key's day, and it goes
        with the allowance the key's requests in flight in this process share (see
        :func:`meters_of`): every call reserves its worst case before it is sent, so neither
        one request nor several at once spend past the limit. (Workers sharing a Redis store see
        each other's finished spend at admission, not each other's calls in flight.)"""
        key = caller.key
        if key is None:
            return Meter()
        if key.requests_per_minute is not None:
            window, left = minute_window()
            count = await self._counted(key, self.counters.hit(key.name, window, 60))
            if count > key.requests_per_minute:
                raise GatewayError(
                    429,
                    f"Key {key.name!r} is over its limit of {key.requests_per_minute} requests "
                    "per minute.",
                    type_="rate_limit_error",
                    code="rate_limit_exceeded",
                    headers={"Retry-After": str(max(1, round(left)))},
                )
        if key.daily_usd is None:
            return Meter()
        window, left = day_window()
        spent = await self._counted(key, self.counters.spend(key.name, window, 0.0, 86_400))
        if spent >= key.daily_usd:
            raise daily_spend_error(
                key, f"Key {key.name!r} has spent its ${key.daily_usd:g} for today (${spent:.6f})."
            )
        slot = (key.name, window)
        held = self._held.get(slot)
        if held is None:
            held = self._held[slot] = _Held(_Allowance(key, key.daily_usd - spent))
        held.requests += 1
        return _Allowance(key, key.daily_usd - spent, shared=held.meter, slot=slot)

    async def _counted(self, key: ApiKey, reading: Awaitable[_N]) -> _N:
        """A key's counter read for admission; a counter store that cannot be used (Redis
        down) refuses the request with a 503 to retry, rather than serving it unchecked."""
        try:
            return await reading
        except Exception as exc:
            logger.warning("the per-key counters cannot be read: %s", type(exc).__name__)
            raise _retry_later(
                f"Key {key.name!r} has limits, and the store that counts them cannot be used now "
                f"({type(exc).__name__}); nothing was sent. Retry later.",
                "limits_store_unavailable",
            ) from None

    def release(self, meter: Meter) -> None:
        """The request of ``meter`` is over (charged): it no longer holds its key's shared
        allowance (once the last one is over, the next request reads the spend store afresh)."""
        if not isinstance(meter, _Allowance) or meter.slot is None:
            return
        slot, meter.slot = meter.slot, None
        held = self._held.get(slot)
        if held is not None and held.meter is meter.shared:
            held.requests -= 1
            if held.requests <= 0:
                del self._held[slot]

    async def charge(self, caller: Caller, usd: float) -> None:
        if caller.key is not None and caller.key.daily_usd is not None and usd > 0:
            window, _ = day_window()
            await self.counters.spend(caller.key.name, window, usd, 86_400)

    # ------------------------------------------------------------------ answering

    async def answer(self, request: ChatRequest, caller: Caller, meter: Meter) -> Answer:
        """The whole answer to ``request`` (race, route or passthrough); calls go on ``meter``
        (and its key's daily allowance). A request that failed because that allowance refused a
        call is a 429 ``daily_spend_exceeded``."""
        try:
            return await self._answer(request, meter)
        except GatewayError as exc:
            refused = refused_by_allowance(meter)
            if refused is not None and caller.key is not None and exc.status != 429:
                raise daily_spend_error(caller.key, refused) from exc
            raise

    async def _answer(self, request: ChatRequest, meter: Meter) -> Answer:
        kind, target = self.resolve(request.model)
        if kind == "passthrough":
            stream = self.passthrough(request, meter)
            message: AssistantMessage | None = None
            async for item in stream:
                if isinstance(item, StreamDone):
                    message = item.message
            return self._passthrough_answer(request, target, message, meter)
        if request.tools:
            self._check_tools(kind, target, request)
        if kind == "race":
            return await self._race(request, target, meter)
        return await self._route(request, target, meter)

    def _check_tools(self, kind: Kind, profile: str, request: ChatRequest) -> None:
        """400 for tools no provider would accept (checked here, not by every branch), and when
        a race's strategy cannot judge a turn of tool calls (exec-vote runs the answers' code;
        a route's arms are graded by its judge, which reads tool calls)."""
        try:
            check_tools((), request.tools, caller_label="tools")
        except UserError as exc:
            raise GatewayError(400, str(exc), param="tools") from None
        if kind == "race" and not self._judges_tool_calls[profile]:
            strategy = self.race_plans[profile].strategy
            raise GatewayError(
                400,
                f"race:{profile} decides with the strategy {strategy!r}, which cannot judge "
                "tool calls (it runs each answer's code). Send `tools` to a profile whose "
                "strategy is judge, pairwise, rubric, consensus or vote, or to a `provider:model`.",
                param="tools",
                code="strategy_cannot_judge_tool_calls",
            )

    def _passthrough_answer(
        self, request: ChatRequest, model: str, message: AssistantMessage | None, meter: Meter
    ) -> Answer:
        text, cut = cut_at_stop(message.text if message else "", request.stop)
        return Answer(
            completion_id=new_completion_id(),
            model=request.model,
            text=text,
            finish=finish_reason(message, cut),
            usage=meter.paid_usage,
            cost_usd=meter.spent,
            tool_calls=tool_calls_dicts(message),
            phi={"kind": "passthrough", "model": model, "cost_usd": meter.spent},
            headers={"x-phi-kind": "passthrough", "x-phi-model": model},
        )

    def provider_for(self, name: str) -> Provider:
        """The provider that serves the passthrough model ``name``; a 503 when this gateway
        cannot build it (its vendor's key is not set, an extra is not installed…): the
        gateway's configuration, not the request, is at fault, and asking again will not help
        (``x-should-retry: false``) until it is fixed. The message names the environment
        variable to set, never a key."""
        model = self._model(self._real(name))
        provided = self.providers.get(self._real(name))
        if provided is not None:
            return provided
        no_retry = {"x-should-retry": "false"}
        try:
            return get_provider(model)
        except MissingApiKeyError as exc:
            raise GatewayError(
                503,
                f"This gateway cannot serve {name!r}: it has no API key for the provider "
                f"{exc.provider!r}. Set the {exc.env_var} environment variable where the "
                f"gateway runs (or store a key there with `phi keys set {exc.provider}`).",
                type_="server_error",
                code="missing_api_key",
                param="model",
                headers=no_retry,
            ) from None
        except UserError as exc:
            raise GatewayError(
                503,
                f"This gateway cannot serve {name!r}: {exc}",
                type_="server_error",
                code="model_unavailable",
                param="model",
                headers=no_retry,
            ) from None

    def passthrough_request(self, request: ChatRequest) -> tuple[Provider, StreamRequest]:
        """The provider and the upstream request of a passthrough ``request`` (see
        :meth:`provider_for` for the 503 of a model this gateway cannot call)."""
        model = self._model(self._real(request.model))
        provider = self.provider_for(request.model)
        return provider, StreamRequest(
            model=model,
            messages=request.messages,
            system_prompt=request.system_prompt,
            tools=request.tools,
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            seed=request.seed,
            response_format=request.response_format,
            thinking=request.thinking or "off",
            extra=request.extra,
        )

    async def passthrough(self, request: ChatRequest, meter: Meter) -> AsyncGenerator[Any, None]:
        """The upstream's stream (deltas, then one :class:`StreamDone`) through the call path;
        provider errors become :class:`GatewayError`."""
        provider, sent = self.passthrough_request(request)
        call = ModelCall(provider, sent, retry=self.retry, meters=meters_of(meter))
        try:
            async for item in call.stream():
                if isinstance(item, TextDelta | ToolCallDelta | StreamDone):
                    yield item
        except BudgetExceededError as exc:
            if exc.limit == "daily_usd" and isinstance(meter, _Allowance):
                raise daily_spend_error(meter.key, str(exc)) from exc
            raise upstream_error(exc) from exc
        except ProviderError as exc:
            raise upstream_error(exc) from exc
        if call.message is not None and call.message.stop_reason == "error":
            message = call.message
            raise error_of_kind(
                message.error_kind, f"upstream: {message.error_message}", message.retry_after
            )

    def _configs(self, configs: list[AgentLoopConfig], request: ChatRequest) -> list[Any]:
        """Each branch's config with the request's settings applied where the client set them."""
        out = []
        for config in configs:
            changes: dict[str, Any] = {}
            if request.max_tokens is not None:
                changes["max_tokens"] = request.max_tokens
            if request.temperature is not None:
                changes["temperature"] = request.temperature
            if request.top_p is not None:
                changes["top_p"] = request.top_p
            if request.seed is not None:
                changes["seed"] = request.seed
            if request.response_format is not None:
                changes["response_format"] = request.response_format
            if request.thinking is not None:
                changes["thinking"] = request.thinking
            if request.tools:  # the client's tools: a branch's turn ends on calling them
                changes["caller_tools"] = list(request.tools)
            if request.extra:  # stop, user, penalties, tool settings
                changes["extra"] = {**config.extra, **request.extra}
            if request.system_prompt is not None:
                own = config.system_prompt
                changes["system_prompt"] = (
                    f"{request.system_prompt}\n\n{own}" if own else request.system_prompt
                )
            out.append(dataclasses.replace(config, **changes) if changes else config)
        return out

    async def _race(self, request: ChatRequest, profile: str, meter: Meter) -> Answer:
        plan = self.race_plans[profile]
        plan = dataclasses.replace(plan, configs=self._configs(plan.configs, request))
        last = request.messages[-1]
        if isinstance(last, AssistantMessage):
            raise GatewayError(
                400, "The last message must be the user's (or a tool result) for a race.",
                param="messages",
            )  # fmt: skip
        recorder = self._recorder(request, plan=plan)
        context = AgentContext(messages=list(request.messages[:-1]))

        def start(cancel: CancelToken) -> Awaitable[Any]:
            return plan.run([last], context=context, events=recorder, cancel=cancel)

        result = await self._logged_run(start, recorder, meter, "race")
        assert isinstance(result, ParallelLoopResult)
        return race_answer(request, profile, plan, result, meter, recorder.run_id)

    async def _logged_run(
        self,
        start: Callable[[CancelToken], Awaitable[Any]],
        recorder: RunRecorder,
        meter: Meter,
        what: str,
    ) -> Any:
        """Run ``start(token)`` (a race or a route) under ``meter`` and log its result.

        When the request is cancelled (the client went away, or the gateway is stopping) the
        run is stopped through its token, so it still ends as what it is, each branch with its
        status and the usage it had caused, and is logged as one before the cancellation goes
        on."""
        cancel = CancelToken()
        with contextlib.ExitStack() as active:
            for each in meters_of(meter):  # its key's shared daily allowance first
                active.enter_context(metering(each))
            run = asyncio.ensure_future(start(cancel))
        try:
            result = await asyncio.shield(run)
        except asyncio.CancelledError:
            cancel.cancel("client_disconnected")
            try:
                ended = await run
            except asyncio.CancelledError:  # cancelled again while it stops: stop it harder
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)  # it outlives no request
                raise
            await self._log(recorder, ended, warning=CANCELLED.format(what=what))
            raise
        await self._log(recorder, result)
        return result

    async def _route(self, request: ChatRequest, profile: str, meter: Meter) -> Answer:
        route = self.routes[profile]
        if time.monotonic() - route.loaded_at > RELOAD_EVERY_S:
            async with route.lock:
                if time.monotonic() - route.loaded_at > RELOAD_EVERY_S:
                    await self._reload(profile, route)
        race = route.race
        configs = self._configs([a.config for a in race.arms.values()], request)
        if any(c is not a.config for c, a in zip(configs, race.arms.values(), strict=True)):
            race = copy.copy(race)  # the same router and store; this request's settings
            race.arms = {a.name: Arm(a.name, c) for a, c in zip(race.arms.values(), configs,
                                                                 strict=True)}  # fmt: skip
        query = request.prompt_text
        if not query.strip():
            raise GatewayError(400, "The conversation needs a user message with text.",
                               param="messages")  # fmt: skip
        if isinstance(request.messages[-1], AssistantMessage):
            raise GatewayError(
                400, "The last message must be the user's (or a tool result) for a route.",
                param="messages",
            )  # fmt: skip
        conversation = AgentContext(messages=list(request.messages))
        plan = self.race_plans[profile]
        recorder = self._recorder(request, plan=plan)
        decisions: list[RouteDecision] = []
        updates: list[dict[str, Any]] = []

        def sink(event: Any) -> None:
            if isinstance(event, RouteDecision):
                decisions.append(event)
            elif isinstance(event, RouteUpdate):
                updates.extend(event.rewards)

        def start(cancel: CancelToken) -> Awaitable[Any]:
            return race.run(query, context=conversation, events=tee(recorder, sink), cancel=cancel)

        result = await self._logged_run(start, recorder, meter, "route")
        self.metrics.inc("phi_gateway_router_decisions_total", profile=profile,
                         action=result.action)  # fmt: skip
        if result.action == "sure":
            self.metrics.inc("phi_gateway_races_skipped_total", profile=profile)
        if result.winner is None or result.status != "ok":
            raise failure_of(result.answers, f"route:{profile}")
        completion_id = new_completion_id()
        x = race.features(query)
        link = {
            "profile": profile,
            "namespace": race.namespace,
            "arm": result.winner,
            "x": [float(v) for v in x],
        }
        linked = await self._write_link(completion_id, link)
        ranking = decisions[0].ranking if decisions else []
        answer = route_answer(
            request, profile, result, meter, recorder.run_id, completion_id, ranking, updates
        )
        if not linked:  # answered all the same (it is paid for), and says it cannot be scored
            answer.headers["x-phi-feedback"] = "unavailable"
            answer.phi["feedback"] = "unavailable"
        return answer

    async def _reload(self, profile: str, route: _Route) -> None:
        """Reload a route's shared statistics (the sum of every worker's updates). A store
        that cannot be read fails no request: the router keeps the statistics it has, with one
        warning until a reload works again."""
        try:
            await route.race.load()
        except Exception as exc:
            if not route.load_failed:
                logger.warning(
                    "route:%s could not reload the router state (%s); it routes on the "
                    "statistics it has until the state can be read again",
                    profile,
                    exc,
                )
            route.load_failed = True
        else:
            if route.load_failed:
                logger.warning("route:%s reloads the router state again", profile)
            route.load_failed = False
        route.loaded_at = time.monotonic()

    async def _write_link(self, completion_id: str, link: dict[str, Any]) -> bool:
        """Keep a routed completion's feedback link; whether it was kept. A link store that
        cannot be written fails no request (the answer is paid for): one warning per outage,
        and the completion is remembered here so its feedback is told why it cannot be
        scored."""
        try:
            await asyncio.to_thread(self.links.write, LINK_PREFIX + completion_id, link,
                                    self.settings.link_ttl_s)  # fmt: skip
        except Exception as exc:
            if not self._links_failing:
                logger.warning(
                    "feedback links cannot be written (%s); routed completions are answered "
                    "with x-phi-feedback: unavailable and cannot be scored until it works again",
                    exc,
                )
            self._links_failing = True
            self.metrics.inc("phi_gateway_feedback_links_lost_total", profile=str(link["profile"]))
            self._unlinked.set(completion_id, {"why": str(exc)})
            return False
        if self._links_failing:
            logger.warning("feedback links are written again")
            self._links_failing = False
        return True

    # ------------------------------------------------------------------ feedback

    async def feedback(self, completion_id: Any, score: Any) -> dict[str, Any]:
        """Teach the router of a routed completion: the arm that answered gets ``score``.

        Idempotent: the first score of a completion is learned; a repeat (a client's retry) is
        not learned again and gets the first one's answer with ``"duplicate": true``. The
        claim is one atomic operation of the link store, so several workers sharing it learn
        a completion once. A link store that cannot be read or written is a 503 with
        ``Retry-After`` (retry later), never a 404."""
        if not isinstance(completion_id, str) or not completion_id:
            raise GatewayError(400, "`id` must be the completion's id (`chatcmpl-…`).", param="id")
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            raise GatewayError(400, f"`score` must be a number from 0 to 1, got {score!r}.",
                               param="score")  # fmt: skip
        unlinked = self._unlinked.get(completion_id)
        if unlinked is not None:
            raise GatewayError(
                409,
                f"The completion {completion_id!r} cannot be scored: it was answered while "
                "the gateway could not record its feedback link (its response said "
                "`x-phi-feedback: unavailable`). Asking again will not help.",
                code="feedback_unavailable",
                param="id",
            )
        try:
            link = await asyncio.to_thread(self.links.read, LINK_PREFIX + completion_id)
        except Exception as exc:
            raise self._links_unavailable(completion_id, exc) from None
        if link is None:
            raise GatewayError(
                404,
                f"No routed completion {completion_id!r} awaits feedback: only `route:` "
                f"completions of the last {self.settings.link_ttl_s:g} s can be scored, and "
                "not those answered with `x-phi-feedback: unavailable`.",
                code="completion_not_found",
                param="id",
            )
        route = self.routes.get(str(link["profile"]))
        if route is None:
            raise GatewayError(404, f"The profile {link['profile']!r} is no longer served.")
        answer = {"id": completion_id, "arm": link["arm"], "profile": link["profile"],
                  "score": float(score)}  # fmt: skip
        scored = SCORED_PREFIX + completion_id
        try:
            first = await asyncio.to_thread(
                self.links.claim, scored, answer, self.settings.link_ttl_s
            )
        except Exception as exc:
            raise self._links_unavailable(completion_id, exc) from None
        if first is not None:  # scored before: a retry is answered, not learned again
            self.metrics.inc("phi_gateway_feedback_duplicates_total", profile=str(link["profile"]))
            return {**first, "duplicate": True}
        import numpy as np

        race = route.race
        x = np.asarray(link["x"], dtype=float)
        delta = race.router.update(x, str(link["arm"]), float(score))
        if race.store is not None:
            try:
                await asyncio.to_thread(
                    race.store.add, str(link["namespace"]), str(link["arm"]), delta
                )
            except (StateStoreError, OSError) as exc:
                # not learned: give the claim back so the client's retry is learned
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self.links.delete, scored)
                raise _retry_later(
                    f"The feedback for {completion_id!r} was not learned: the router state "
                    f"cannot be written ({str(exc).rstrip('. ')}). Retry later.",
                    "router_state_unavailable",
                ) from None
        self.metrics.inc("phi_gateway_feedback_total", profile=str(link["profile"]))
        return answer

    def _links_unavailable(self, completion_id: str, exc: BaseException) -> GatewayError:
        cause = str(exc) if isinstance(exc, StateStoreError) else f"{type(exc).__name__}: {exc}"
        return _retry_later(
            f"The feedback for {completion_id!r} cannot be taken now: the feedback link store "
            f"cannot be used ({cause.rstrip('. ')}). Nothing was learned; retry later.",
            "feedback_store_unavailable",
        )

    # ------------------------------------------------------------------ run log

    def _recorder(self, request: ChatRequest, plan: RacePlan | None) -> RunRecorder:
        return RunRecorder(
            None,
            prompt=request.prompt_text,
            plan=plan,
            source="gateway",
            extra={"model": request.model, "user": request.user} if request.user else
            {"model": request.model},
        )  # fmt: skip

    async def _log(self, recorder: RunRecorder, result: Any, warning: str | None = None) -> None:
        if self.run_log is None:
            return
        record = recorder.build(result)
        if warning is not None:
            record.warnings.append(warning)
        await self.write_record(record)

    async def write_record(self, record: RunRecord) -> None:
        """Queue one record (content blanked unless ``log_content``) for the run log; never
        raises. Records are written in batches, :data:`RECORD_BATCH_S` apart, by one task that
        :meth:`close` waits for: a write in a worker thread takes the interpreter from the
        requests in flight, so one write a request cost passthrough latency."""
        if self.run_log is None:
            return
        if not self.settings.log_content:
            record = without_content(record)
        self._unwritten.append(record)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write_unwritten(self.run_log))

    async def _write_unwritten(self, log: RunLog) -> None:
        with contextlib.suppress(TimeoutError):  # the batch's time is up (or close() is waiting)
            await asyncio.wait_for(self._closing.wait(), RECORD_BATCH_S)
        while self._unwritten:
            batch, self._unwritten = self._unwritten, []
            try:
                await asyncio.to_thread(log.write_many, batch)
            except Exception as exc:  # a failed log write must not fail requests already paid for
                ids = ", ".join(r.id for r in batch)
                logger.warning("the run log could not record gateway runs %s: %s", ids, exc)
