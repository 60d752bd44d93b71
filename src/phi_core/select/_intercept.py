"""Interception of the model calls an agent makes itself, through the vendors' SDKs, httpx or
requests.

Inside ``with intercepting(scope):`` every HTTP request sent by an ``httpx`` or ``httpx2`` client
(the official ``openai`` and ``anthropic`` SDKs use ``httpx2``, ``google-genai`` either, plain
``httpx`` agents ``httpx``) or through ``requests`` (:mod:`._intercept_requests`) from code
running in the block's context is checked; a model call (:mod:`._intercept_wire`) then takes the
same path as a :class:`~phi_core.select.MeteredModel` call:

1. **identity**: a key from the request actually sent — method, URL path, query (credential
   parameters dropped), body; never headers — plus the occurrence of the same request within
   the current (combination, datapoint) cell, so repeated samples stay apart;
2. **cache** (any :class:`~phi_core.providers.call.CallCache`): a hit is answered at once,
   recorded as cached (free) with its original latency;
3. **budget**: the worst case is reserved on every active meter before sending (the body's
   output limit, else the model's; lowered in the body when a budget needs it); a refused call
   is answered ``402`` with ``x-should-retry: false``, which the SDKs raise as a status error
   without retrying;
4. **limiter**: a slot of the shared :class:`~phi_core.providers.Limiter` per provider and
   model, held until the body has been read (sync clients in worker threads borrow it from the
   run's event loop), cut on 429s;
5. **meter**: the usage the response reports (whole or streamed), priced by the user's
   ``model_prices`` or the price table, recorded on every active meter and in the scope's log
   with the cell it belongs to.

Attribution follows context variables, so it is right under any concurrency: the cell's meter and
labels are set where the evaluation runs, and copied into worker threads with the context. Threads
the agent starts itself inside a cell inherit that cell too: while a scope is open,
``threading.Thread.start`` and ``ThreadPoolExecutor.submit`` called from a scope's context carry
the caller's context into the new thread or work item (a plain thread would start in an empty
one), so an agent that fans its calls out over a thread pool is metered like one that does not.
Work given to a ``multiprocessing.pool.ThreadPool`` (``apply_async``, ``map``, ``imap``...)
runs in its submitter's context too, even on worker threads a pool created during an earlier
run keeps.

The patches (the clients' ``send`` methods, ``requests``' adapter, the two thread entry points)
are installed when the first scope opens and removed when the last one closes; outside a scope's
context (other threads, other tasks) requests pass through untouched, and so do requests from a
context whose scope has closed (a long-lived pool thread started inside an earlier run). Calls
made by phi-core's own providers through ``ModelCall`` are metered there and left alone here
(:func:`~phi_core.metering.call_metered_here`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import hashlib
import importlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .._logging import get_logger
from ..errors import BudgetExceededError, RunError, register_secret
from ..metering import (
    CallRecord,
    Reservation,
    active_meters,
    call_metered_here,
    record_everywhere,
    reserve,
    settle,
)
from ..providers.call import CachedResponse, CallCache
from ..providers.limiter import Limiter, default_limiter
from ..providers.retry import DEFAULT_LIMITER
from ..types import AssistantMessage, Pricing, TextContent, Usage
from ._intercept_wire import (
    ModelPrices,
    WireCall,
    classify,
    estimated_usage,
    model_max_output,
    normalise_prices,
    parse_usage,
    price_of,
    with_output_limit,
)

__all__ = ["InterceptScope", "InterceptedCall", "attribute", "intercepting"]

logger = get_logger("phi_core.select.intercept")
_settling = threading.Lock()
"""Makes settling a call happen once when a reader and the end of its cell race."""


_SECRET_PARAMS = {
    "key",
    "api_key",
    "apikey",
    "api-key",
    "token",
    "access_token",
    "sig",
    "signature",
}
_SECRET_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")
_ERROR_KINDS = {401: "auth", 403: "auth", 408: "timeout", 413: "bad_request", 429: "rate_limited"}


@dataclass(frozen=True, slots=True)
class InterceptedCall:
    """One intercepted model call, with the cell it was made for."""

    combination: str | None
    datapoint: Any
    model: str
    """``provider:model`` (the provider from the host when it is a known vendor's)."""
    usage: Usage
    cost_usd: float
    latency_s: float
    cached: bool = False
    estimated: bool = False
    """The response reported no usage (an OpenAI stream without
    ``stream_options={"include_usage": True}``): its tokens were estimated from the text."""
    status: int = 200
    error_kind: str | None = None
    priced: bool = True

    # AgentOpt's names for the same facts
    @property
    def data_id(self) -> Any:
        return self.datapoint

    @property
    def combo_id(self) -> str | None:
        return self.combination

    @property
    def input_tokens(self) -> int:
        return self.usage.input + self.usage.cache_read + self.usage.cache_write

    @property
    def output_tokens(self) -> int:
        return self.usage.output

    @property
    def latency_seconds(self) -> float:
        return self.latency_s


@dataclass(slots=True)
class _Cell:
    combination: str | None
    datapoint: Any
    seen: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    """The block that attributed calls to this cell has ended: a thread still running in it
    (a sync agent past its timeout, which Python cannot stop) may call no more models."""
    pending: set[concurrent.futures.Future[Any]] = field(default_factory=set)
    """Calls a worker thread handed to the event loop (:func:`on_close`), cancelled when the
    block ends."""
    streams: dict[int, _Pending] = field(default_factory=dict)
    """Streamed calls whose body has been neither read to its end nor closed: those still open
    when the block ends (an agent that stopped reading a stream and never closed it) are settled
    then (:meth:`_Pending.abandon`)."""

    def occurrence(self, key: str) -> int:
        with self.lock:
            n = self.seen[key]
            self.seen[key] += 1
            return n


_cell: ContextVar[_Cell | None] = ContextVar("phi_intercept_cell", default=None)
_scope: ContextVar[InterceptScope | None] = ContextVar("phi_intercept_scope", default=None)


@contextlib.contextmanager
def attribute(combination: str | None, datapoint: Any) -> Iterator[None]:
    """Attribute the calls made in this block to ``(combination, datapoint)``. Once the block
    has ended, model calls still made in its context (by a thread it left running) are refused
    with :class:`~phi_core.errors.RunError` (:func:`check_open`) instead of being paid for."""
    cell = _Cell(combination, datapoint)
    token = _cell.set(cell)
    try:
        yield
    finally:
        with cell.lock:
            cell.closed = True
            pending, cell.pending = cell.pending, set()
            streams, cell.streams = list(cell.streams.values()), {}
        for future in list(pending):  # what a thread left running stops; its usage is metered
            future.cancel()
        for call in streams:  # a stream left unread and unclosed: metered with what arrived
            try:
                call.abandon()
            except Exception:  # one call's settling must not hide the block's own outcome
                logger.warning("settling an abandoned stream failed", exc_info=True)
        _cell.reset(token)


def on_close(future: concurrent.futures.Future[Any]) -> None:
    """Cancel ``future`` (a call a worker thread handed to the event loop) when the current
    attribution block ends, if it is still running then."""
    cell = _cell.get()
    if cell is None:
        return
    with cell.lock:
        if cell.closed:
            future.cancel()
            return
        cell.pending.add(future)
    future.add_done_callback(cell.pending.discard)


def check_open() -> None:
    """Refuse a model call made for an attribution block that has ended (see :func:`attribute`)."""
    cell = _cell.get()
    if cell is not None and cell.closed:
        raise RunError(
            f"A model call for {cell.combination or 'the scorer'} on dataset item "
            f"{cell.datapoint!r} came after that run had ended, from a thread still in that "
            "run's context: a sync agent past its timeout (it runs on in its thread), or a "
            "thread the agent started during that run and kept (work handed to it other than "
            "through `ThreadPoolExecutor.submit` or a `ThreadPool`'s `apply_async`/`map`/"
            "`imap` runs in that run's context). It was refused, not sent. Start long-lived "
            "threads outside the agent's run, or hand them work through their pool."
        )


class InterceptScope:
    """What interception does inside one run: its cache, limiter, prices, and the calls it saw.

    Args:
        cache: answer from / store into this cache (``None``: no caching).
        limiter: the limiter (default: the process-wide one; ``None``: no limiting).
        model_prices: the user's prices (see :data:`._intercept_wire.ModelPrices`); they win over
            the price table.
        loop: the run's event loop, which sync clients in worker threads borrow the limiter and
            the cache from (default: the loop running when the scope opens, if any).
    """

    def __init__(
        self,
        *,
        cache: CallCache | None = None,
        limiter: Limiter | None = DEFAULT_LIMITER,
        model_prices: ModelPrices | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.cache = cache
        self.limiter: Limiter | None = default_limiter() if limiter is DEFAULT_LIMITER else limiter
        self.prices: dict[str, Pricing] = normalise_prices(model_prices)
        self.loop = loop
        self.calls: list[InterceptedCall] = []
        self._lock = threading.Lock()
        self._outside = _Cell(None, None)
        self._open = 0
        self._unpriced: set[str] = set()

    @property
    def unpriced(self) -> set[str]:
        """Models called that have no price (their dollars count as 0)."""
        with self._lock:
            return set(self._unpriced)

    @property
    def estimated(self) -> list[InterceptedCall]:
        """The calls whose response reported no usage: their tokens (and dollars) are estimated."""
        with self._lock:
            return [c for c in self.calls if c.estimated and c.usage.total]

    def _log(self, call: InterceptedCall) -> None:
        with self._lock:
            self.calls.append(call)
            if not call.priced and call.usage.total:
                self._unpriced.add(call.model)

    # ------------------------------------------------------------------ one call

    def _prepare(self, request: Any) -> _Pending | None:
        try:
            content = bytes(request.content)
        except Exception:  # a streamed request body (not a model call an SDK sends): leave it
            return None
        call = classify(request.method, str(request.url), content)
        if call is None:
            return None
        _register_credentials(request)
        check_open()
        cell = _cell.get() or self._outside
        identity = _identity(request, content)
        occurrence = cell.occurrence(identity)
        pricing = price_of(call, self.prices)
        return _Pending(self, call, cell, identity, occurrence, pricing, active_meters())


@dataclass(slots=True)
class _Pending:
    """One intercepted call on its way: cache, reservation, limiter slot, metering."""

    scope: InterceptScope
    call: WireCall
    cell: _Cell
    identity: str
    occurrence: int
    pricing: Pricing | None
    meters: tuple[Any, ...]
    reservation: Reservation | None = None
    started: float = 0.0
    finished: bool = False
    status: int = 0
    content_type: str = "application/json"
    parts: list[bytes] = field(default_factory=list)
    """The streamed body as it has arrived so far."""
    release: Callable[[], None] | None = None
    """Frees what a streamed call holds until it is settled (its limiter slot); run (from any
    thread, never blocking on the event loop) when :meth:`abandon` settles it."""

    def _claim(self) -> bool:
        """Whether this caller settles the call (the first one to ask does)."""
        with _settling:
            if self.finished:
                return False
            self.finished = True
        self.cell.streams.pop(id(self), None)
        return True

    def streaming(self) -> None:
        """The response is streamed to the agent: settle it when its cell ends unless the body
        has been read to its end or closed by then (:meth:`abandon`)."""
        with self.cell.lock:
            if not self.finished and not self.cell.closed:
                self.cell.streams[id(self)] = self

    def abandon(self) -> None:
        """Settle a streamed call the agent stopped reading and never closed (a ``for chunk in
        stream: return ...``) with what had arrived by now: metered (its usage estimated from
        the text when the stream had not reported it yet), never cached; its limiter slot is
        freed."""
        self.finish(self.status, b"".join(self.parts), complete=False)
        release, self.release = self.release, None
        if release is not None:
            release()

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.identity}|{self.occurrence}".encode()).hexdigest()

    def hit(self, cached: CachedResponse | None) -> tuple[int, dict[str, str], bytes] | None:
        """The response to answer from a cache entry (``None``: not usable), recorded."""
        decoded = _decode(cached)
        if decoded is None:
            return None
        content_type, body = decoded
        usage = cached.message.usage if cached is not None else Usage()
        latency = cached.latency if cached is not None else 0.0
        # a response stored without usage (a stream without it) answers with the same estimate
        estimated = parse_usage(self.call, body)[0] is None
        self._record(usage, latency, cached=True, estimated=estimated)
        return 200, {"content-type": content_type, "x-phi-cache": "hit"}, body

    def reserve(self) -> bytes | None:
        """Reserve the worst case; the lowered body when a budget capped the output.

        Raises:
            BudgetExceededError: after recording the refusal.
        """
        call = self.call
        try:
            # No output limit and a model outside the catalog: a dollar budget reserves
            # UNBOUNDED_OUTPUT_ALLOWANCE output tokens (the request is left as it is).
            self.reservation = reserve(
                input_tokens=call.input_estimate,
                max_output=call.max_output,
                model_max_output=model_max_output(call.model),
                pricing=self.pricing,
                meters=self.meters,
            )
        except BudgetExceededError as refused:
            record_everywhere(
                CallRecord(call.spec, Usage(), 0.0, 0.0, error_kind="budget", error=str(refused)),
                self.meters,
            )
            self.scope._log(self._entry(Usage(), 0.0, status=402, error_kind="budget"))
            raise
        limit = self.reservation.max_output
        if limit is not None and limit != call.max_output:
            body = with_output_limit(call, limit)
            self.identity = hashlib.sha256(
                f"{self.identity}|max_output={limit}".encode()
            ).hexdigest()
            return body
        return None

    def finish(self, status: int, body: bytes | None, *, complete: bool) -> CachedResponse | None:
        """Settle the call with what the response reported; what to cache (``None``: nothing,
        also when the call was already settled)."""
        if not self._claim():
            return None
        latency = time.perf_counter() - self.started
        usage: Usage | None = None
        text = ""
        if status == 200 and body is not None:
            usage, text = parse_usage(self.call, body)
        estimated = usage is None and status == 200
        if usage is None:
            usage = estimated_usage(self.call, text) if status == 200 else Usage()
        kind = None if status == 200 else _error_kind(status)
        cost = usage.cost(self.pricing)
        record = CallRecord(
            self.call.spec,
            usage,
            cost,
            latency,
            estimated=estimated and usage.total > 0,
            error_kind=kind,
            error=None if kind is None else f"HTTP {status}",
        )
        if self.reservation is not None:
            settle(self.reservation, record)
        else:
            record_everywhere(record, self.meters)
        self.scope._log(
            self._entry(usage, latency, status=status, error_kind=kind, estimated=estimated)
        )
        if status != 200 or body is None or not complete:
            return None
        try:
            text_body = body.decode("utf-8")
        except UnicodeDecodeError:
            return None
        message = AssistantMessage(
            content=[TextContent(text=text_body)],
            model=self.call.spec,
            provider=f"http {self.content_type}",
            usage=usage,
        )
        return CachedResponse(message, latency)

    def fail(self, error: BaseException) -> None:
        """The request raised before a response (network error, cancellation)."""
        if not self._claim():
            return
        latency = time.perf_counter() - self.started
        kind = "cancelled" if isinstance(error, asyncio.CancelledError) else "network"
        record = CallRecord(
            self.call.spec, Usage(), 0.0, latency, error_kind=kind, error=type(error).__name__
        )
        if self.reservation is not None:
            settle(self.reservation, record)
        else:
            record_everywhere(record, self.meters)
        self.scope._log(self._entry(Usage(), latency, status=0, error_kind=kind))

    def _record(self, usage: Usage, latency: float, *, cached: bool, estimated: bool) -> None:
        cost = usage.cost(self.pricing)
        record = CallRecord(
            self.call.spec, usage, cost, latency, cached=cached, estimated=estimated
        )
        record_everywhere(record, self.meters)
        self.scope._log(self._entry(usage, latency, cached=cached, estimated=estimated))

    def _entry(
        self,
        usage: Usage,
        latency: float,
        *,
        cached: bool = False,
        status: int = 200,
        error_kind: str | None = None,
        estimated: bool = False,
    ) -> InterceptedCall:
        return InterceptedCall(
            combination=self.cell.combination,
            datapoint=self.cell.datapoint,
            model=self.call.spec,
            usage=usage,
            cost_usd=usage.cost(self.pricing),
            latency_s=latency,
            cached=cached,
            estimated=estimated,
            status=status,
            error_kind=error_kind,
            priced=self.pricing is not None,
        )


def _register_credentials(request: Any) -> None:
    """The keys a model call carries become known secrets: whatever echoes them later (an SDK's
    error message, an agent's exception) is redacted in results, logs and the journal."""
    for name in _SECRET_HEADERS:
        value = request.headers.get(name)
        if value:
            register_secret(value.removeprefix("Bearer ").removeprefix("bearer ").strip())
    for key, value in parse_qsl(urlsplit(str(request.url)).query):
        if key.lower() in _SECRET_PARAMS:
            register_secret(value)


def _identity(request: Any, content: bytes) -> str:
    """Method, path, query without credentials, canonical body: what the request asks for."""
    url = urlsplit(str(request.url))
    query = sorted(
        (k, v)
        for k, v in parse_qsl(url.query, keep_blank_values=True)
        if k.lower() not in _SECRET_PARAMS
    )
    try:
        body: Any = json.loads(content)
    except ValueError:
        body = hashlib.sha256(content).hexdigest()
    blob = json.dumps(
        {"method": request.method, "path": url.path, "query": query, "body": body},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _decode(cached: CachedResponse | None) -> tuple[str, bytes] | None:
    if cached is None or not cached.message.provider.startswith("http "):
        return None
    return cached.message.provider[5:], cached.message.text.encode()


def _error_kind(status: int) -> str:
    if status in _ERROR_KINDS:
        return _ERROR_KINDS[status]
    if status == 529 or status == 503:
        return "overloaded"
    return "server" if status >= 500 else "bad_request"


def refusal_body(error: BudgetExceededError) -> bytes:
    """An error body every SDK reads (OpenAI's, Anthropic's and Google's error shapes at once)."""
    return json.dumps(
        {
            "type": "error",
            "error": {
                "type": "budget_exceeded",
                "code": 402,
                "status": "RESOURCE_EXHAUSTED",
                "message": f"phi-core refused this call before sending it: {error}",
            },
        }
    ).encode()


# --------------------------------------------------------------------------- installation

_install_lock = threading.Lock()
_installed = 0
_restore: list[Callable[[], None]] = []


@contextlib.contextmanager
def intercepting(scope: InterceptScope) -> Iterator[InterceptScope]:
    """Intercept the model calls made in this block's context (see the module docstring)."""
    if scope.loop is None:
        with contextlib.suppress(RuntimeError):
            scope.loop = asyncio.get_running_loop()
    _install()
    token = _scope.set(scope)
    scope._open += 1
    try:
        yield scope
    finally:
        scope._open -= 1
        _scope.reset(token)
        _uninstall()


def active_scope() -> InterceptScope | None:
    """The interception scope of this context, unless the call path meters its own calls."""
    scope = _scope.get()
    return None if scope is None or not scope._open or call_metered_here() else scope


def _install() -> None:
    global _installed
    with _install_lock:
        _installed += 1
        if _installed > 1:
            return
        from ._intercept_http import patch_google, patch_module
        from ._intercept_requests import patch_requests

        for name in ("httpx", "httpx2"):
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            _restore.append(patch_module(module))
        _restore.append(patch_google())
        _restore.append(patch_requests())
        _restore.append(_patch_threads())


def _patch_threads() -> Callable[[], None]:
    """Make threads started, and work submitted to thread pools, from a scope's context run in a
    copy of that context (see the module docstring); returns the function that undoes it."""
    start, submit = threading.Thread.start, ThreadPoolExecutor.submit

    def start_in_context(self: threading.Thread) -> None:
        if _scope.get() is not None:
            run, context = self.run, contextvars.copy_context()
            self.run = lambda: context.run(run)  # type: ignore[method-assign]
        start(self)

    def submit_in_context(
        self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        if _scope.get() is None:
            return submit(self, fn, *args, **kwargs)
        return submit(self, contextvars.copy_context().run, fn, *args, **kwargs)

    threading.Thread.start = start_in_context  # type: ignore[method-assign]
    ThreadPoolExecutor.submit = submit_in_context  # type: ignore[method-assign, assignment]
    restore_pool = _patch_thread_pool()

    def restore() -> None:
        threading.Thread.start = start  # type: ignore[method-assign]
        ThreadPoolExecutor.submit = submit  # type: ignore[method-assign]
        restore_pool()

    return restore


# The methods of `multiprocessing.pool.ThreadPool` that take work (`apply`, `map` and `starmap`
# go through `apply_async` or `_map_async`, private; so their public callers are patched).
_POOL_ENTRIES = (
    "apply_async", "map", "map_async", "starmap", "starmap_async", "imap", "imap_unordered",
)  # fmt: skip


def _patch_thread_pool() -> Callable[[], None]:
    """Make the work given to a ``multiprocessing.pool.ThreadPool`` from a scope's context run
    in a copy of the submitter's context, like :meth:`ThreadPoolExecutor.submit` (its worker
    threads, started once and kept, would otherwise run every later task in the context of the
    run that started them). Only ``ThreadPool`` is patched: a process pool pickles its work."""
    from multiprocessing.pool import ThreadPool

    saved = {name: ThreadPool.__dict__.get(name) for name in _POOL_ENTRIES}

    def entry(name: str) -> Callable[..., Any]:
        original = getattr(ThreadPool, name)

        @functools.wraps(original)
        def in_context(self: Any, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            if _scope.get() is None:
                return original(self, func, *args, **kwargs)
            return original(self, _in_copy_of(contextvars.copy_context(), func), *args, **kwargs)

        return in_context

    patched = {name: entry(name) for name in _POOL_ENTRIES}
    for name, method in patched.items():
        setattr(ThreadPool, name, method)

    def restore() -> None:
        for name, method in saved.items():
            if method is None:
                delattr(ThreadPool, name)
            else:
                setattr(ThreadPool, name, method)

    return restore


def _in_copy_of(context: contextvars.Context, func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` run in a fresh copy of ``context`` at every call (a map's items run in several
    threads at once, and one context cannot be entered twice)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        return context.copy().run(func, *args, **kwargs)

    return run


def _uninstall() -> None:
    global _installed
    with _install_lock:
        _installed -= 1
        if _installed > 0:
            return
        while _restore:
            _restore.pop()()
