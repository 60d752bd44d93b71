"""The seams of interception: the ``send`` of ``httpx`` and ``httpx2`` clients (and google-genai's
choice of transport), and how sync clients in worker threads borrow the run's event loop.

:func:`patch_module` replaces ``Client.send`` and ``AsyncClient.send`` of one module with versions
that hand model calls made inside an interception scope to :mod:`._intercept` and pass every
other request through unchanged; it returns the function that puts the originals back. A
response body is observed as it streams (a tee over the response's byte stream), so streamed
calls are metered and cached when their last byte has arrived — never before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import importlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any, TypeVar

from .._logging import get_logger
from ..errors import BudgetExceededError
from ..providers.call import CachedResponse, CallCache
from ..providers.limiter import LimiterSlot
from ._intercept import InterceptScope, _Pending, active_scope, refusal_body

__all__ = [
    "SyncBody",
    "SyncSlot",
    "patch_google",
    "patch_module",
    "run_on_loop",
    "send_sync",
    "settle_sync",
]

_T = TypeVar("_T")
logger = get_logger("phi_core.select.intercept")

_inside: ContextVar[bool] = ContextVar("phi_intercept_inside", default=False)
"""True while an intercepted request is being sent (a client nested in a transport passes)."""


def patch_module(module: ModuleType) -> Callable[[], None]:
    """Patch ``module.Client.send`` and ``module.AsyncClient.send``; returns the undo."""
    client_cls: Any = module.Client
    async_cls: Any = module.AsyncClient
    sync_send = client_cls.send
    async_send = async_cls.send
    tee_sync, tee_async = _tees(module)

    @functools.wraps(async_send)
    async def send_async(self: Any, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
        pending = _pending(request)
        if pending is None:
            return await async_send(self, request, stream=stream, **kwargs)
        return await _send_async(
            module, tee_async, async_send, self, request, stream, kwargs, pending
        )

    @functools.wraps(sync_send)
    def send_sync(self: Any, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
        pending = _pending(request)
        if pending is None:
            return sync_send(self, request, stream=stream, **kwargs)
        return _send_sync(module, tee_sync, sync_send, self, request, stream, kwargs, pending)

    async_cls.send = send_async
    client_cls.send = send_sync

    def restore() -> None:
        async_cls.send = async_send
        client_cls.send = sync_send

    return restore


def _pending(request: Any) -> _Pending | None:
    if _inside.get():
        return None
    scope = active_scope()
    return scope._prepare(request) if scope is not None else None


def _outcome(status: int) -> Callable[[LimiterSlot], None]:
    def apply(slot: LimiterSlot) -> None:
        if status == 429:
            slot.rate_limited()
        elif status < 400:
            slot.success()

    return apply


def _refusal(module: ModuleType, request: Any, error: BudgetExceededError) -> Any:
    headers = {"content-type": "application/json", "x-should-retry": "false"}
    return module.Response(402, headers=headers, content=refusal_body(error), request=request)


def _cached(module: ModuleType, request: Any, answer: tuple[int, dict[str, str], bytes]) -> Any:
    status, headers, body = answer
    return module.Response(status, headers=headers, content=body, request=request)


def _prepared(module: ModuleType, request: Any, lowered: bytes | None) -> Any:
    """The request to send: the budget's lowered body if any; asked uncompressed so the bytes
    observed are the bytes parsed and cached."""
    if lowered is not None:
        headers = module.Headers(request.headers)
        for name in ("content-length", "transfer-encoding"):
            if name in headers:
                del headers[name]
        request = module.Request(
            request.method, request.url, headers=headers, content=lowered,
            extensions=request.extensions,
        )  # fmt: skip
    request.headers["accept-encoding"] = "identity"
    return request


def _cache_failed(action: str, error: Exception) -> None:
    logger.warning(
        "response cache %s failed for an intercepted call (%s: %s); %s",
        action,
        type(error).__name__,
        error,
        "calling the model" if action == "read" else "the answer is kept, not cached",
    )


async def _cache_get(cache: CallCache | None, key: str) -> CachedResponse | None:
    if cache is None:
        return None
    try:
        return await cache.get(key)
    except Exception as error:  # a broken cache is a miss, never a failed call
        _cache_failed("read", error)
        return None


async def _cache_put(cache: CallCache | None, key: str, entry: CachedResponse | None) -> None:
    if cache is None or entry is None:
        return
    try:
        await cache.put(key, entry.message, entry.latency)
    except Exception as error:  # the call is paid for: keep its answer either way
        _cache_failed("write", error)


def _cache_get_sync(pending: _Pending) -> CachedResponse | None:
    cache = pending.scope.cache
    if cache is None:
        return None
    direct = getattr(cache, "get_sync", None)
    if not callable(direct):
        return run_on_loop(pending.scope, _cache_get(cache, pending.key))
    try:
        result: CachedResponse | None = direct(pending.key)
    except Exception as error:
        _cache_failed("read", error)
        return None
    return result


def _cache_put_sync(pending: _Pending, entry: CachedResponse | None) -> None:
    cache = pending.scope.cache
    if cache is None or entry is None:
        return
    direct = getattr(cache, "put_sync", None)
    if not callable(direct):
        run_on_loop(pending.scope, _cache_put(cache, pending.key, entry))
        return
    try:
        direct(pending.key, entry.message, entry.latency)
    except Exception as error:
        _cache_failed("write", error)


def settle_sync(
    pending: _Pending,
    body: bytes,
    *,
    complete: bool,
    slot: SyncSlot,
    outcome: Callable[[LimiterSlot], None] | None,
) -> None:
    """Settle a sync client's call once its body has been read (or given up): meter it, release
    its limiter slot and cache a whole answer. A call already settled (its cell ended first, see
    :meth:`~._intercept._Pending.abandon`) only has its slot released, if that is still held.

    Safe from any thread, the event loop's own included (a garbage collection there may close
    an abandoned stream): nothing here waits for the loop from its own thread."""
    entry = pending.finish(pending.status, body, complete=complete)
    pending.release = None
    slot.release(outcome)
    _cache_put_sync(pending, entry)


def send_sync(pending: _Pending, send: Callable[[], Any]) -> tuple[Any, SyncSlot]:
    """Send a sync client's call through ``send()`` in a limiter slot, marked as intercepted (a
    client nested in the transport passes); record its status and content type, or its failure
    (the slot freed). Returns the response and the slot, which settling the call releases."""
    slot = SyncSlot(pending.scope, pending.call.provider, pending.call.spec)
    try:
        pending.started = time.perf_counter()
        token = _inside.set(True)
        try:
            response = send()
        finally:
            _inside.reset(token)
    except BaseException as error:
        pending.fail(error)
        slot.release(None)
        raise
    pending.status = response.status_code
    pending.content_type = response.headers.get("content-type", "application/json")
    return response, slot


class SyncBody:
    """The body of a sync client's intercepted call, collected as the client reads it, and the
    call's settling once it has been read (``complete``) or given up (:func:`settle_sync`)."""

    def __init__(
        self, pending: _Pending, slot: SyncSlot, outcome: Callable[[LimiterSlot], None] | None
    ) -> None:
        self.pending = pending
        self.slot = slot
        self.outcome = outcome
        self.parts: list[bytes] = pending.parts
        pending.release = functools.partial(slot.release, outcome)
        pending.streaming()  # settled when its cell ends, if the agent never reads or closes it

    def settle(self, *, complete: bool) -> None:
        body = b"".join(self.parts)
        settle_sync(self.pending, body, complete=complete, slot=self.slot, outcome=self.outcome)


def patch_google() -> Callable[[], None]:
    """google-genai sends async calls through aiohttp when it is installed: inside a scope, make
    it use its httpx client instead (which is intercepted)."""
    try:
        api_client: ModuleType = importlib.import_module("google.genai._api_client")
    except ImportError:
        return lambda: None
    cls = getattr(api_client, "BaseApiClient", None)
    original = getattr(cls, "_use_aiohttp", None)
    if cls is None or original is None:
        return lambda: None

    def _use_aiohttp(self: Any) -> bool:
        if active_scope() is not None and getattr(self, "_async_httpx_client", None) is not None:
            return False
        return bool(original(self))

    cls._use_aiohttp = _use_aiohttp

    def restore() -> None:
        cls._use_aiohttp = original

    return restore


# --------------------------------------------------------------------------- sync helpers


def run_on_loop(scope: InterceptScope, coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` for a sync caller: on the scope's loop from another thread, else in a
    private loop (a sync agent outside any running loop)."""
    loop = scope.loop
    if loop is not None and loop.is_running() and not _on_loop_thread(loop):
        return asyncio.run_coroutine_threadsafe(coro, loop).result()
    return asyncio.run(coro)


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class SyncSlot:
    """A limiter slot held for a sync client: acquired on the scope's loop, released from the
    worker thread. Without a usable loop (or on the loop's own thread) there is no slot."""

    def __init__(self, scope: InterceptScope, provider: str, model: str) -> None:
        self._release: asyncio.Event | None = None
        self._done: Any = None
        self._outcome: Callable[[LimiterSlot], None] | None = None
        self._lock = threading.Lock()
        loop = scope.loop
        limiter = scope.limiter
        if limiter is None or loop is None or not loop.is_running() or _on_loop_thread(loop):
            return
        self._loop = loop
        acquired: concurrent.futures.Future[None] = concurrent.futures.Future()

        async def hold() -> None:
            self._release = asyncio.Event()
            async with limiter.slot(provider, model) as slot:
                acquired.set_result(None)
                await self._release.wait()
                if self._outcome is not None:
                    self._outcome(slot)

        self._done = asyncio.run_coroutine_threadsafe(hold(), loop)
        concurrent.futures.wait([acquired, self._done], return_when="FIRST_COMPLETED")
        if not acquired.done():
            self._done.result()  # raises what stopped the acquisition

    def release(self, outcome: Callable[[LimiterSlot], None] | None) -> None:
        """Give the slot back (once; later calls do nothing), reporting ``outcome`` to it.

        From a worker thread this waits until the loop has taken the slot back, so the thread's
        next call finds it free. From the loop's own thread (a stream closed by a garbage
        collection there, or settled when its cell ended) it only asks the loop to take it
        back: waiting would wait for itself, forever."""
        with self._lock:
            done, self._done = self._done, None
        if done is None:
            return
        self._outcome = outcome
        loop = self._loop
        release = self._release
        try:
            if release is not None:
                loop.call_soon_threadsafe(release.set)
        except RuntimeError:  # the loop has closed: its limiter went with it
            return
        if _on_loop_thread(loop) or not loop.is_running():
            return
        with contextlib.suppress(Exception):
            done.result(timeout=30)


# --------------------------------------------------------------------------- async


async def _send_async(
    module: ModuleType,
    tee: type,
    original: Any,
    client: Any,
    request: Any,
    stream: bool,
    kwargs: dict[str, Any],
    pending: _Pending,
) -> Any:
    scope = pending.scope
    answer = pending.hit(await _cache_get(scope.cache, pending.key)) if scope.cache else None
    if answer is not None:
        return _cached(module, request, answer)
    try:
        request = _prepared(module, request, pending.reserve())
    except BudgetExceededError as refused:
        return _refusal(module, request, refused)
    stack = contextlib.AsyncExitStack()
    slot: LimiterSlot | None = None
    try:
        if scope.limiter is not None:
            slot = await stack.enter_async_context(
                scope.limiter.slot(pending.call.provider, pending.call.spec)
            )
        pending.started = time.perf_counter()
        token = _inside.set(True)
        try:
            response = await original(client, request, stream=stream, **kwargs)
        finally:
            _inside.reset(token)
    except BaseException as error:
        pending.fail(error)
        await stack.aclose()
        raise
    status = response.status_code
    if slot is not None:
        _outcome(status)(slot)
    pending.status = status
    pending.content_type = response.headers.get("content-type", "application/json")
    if not stream:
        entry = pending.finish(status, response.content, complete=True)
        await stack.aclose()
        await _cache_put(scope.cache, pending.key, entry)
        return response
    pending.release = functools.partial(_close_soon, asyncio.get_running_loop(), stack)
    pending.streaming()
    response.stream = tee(response.stream, pending, stack)
    return response


_closing: set[asyncio.Future[Any]] = set()
"""Limiter slots of abandoned async streams being given back (kept referenced until done)."""


def _close_soon(loop: asyncio.AbstractEventLoop, stack: contextlib.AsyncExitStack) -> None:
    """Close ``stack`` (an async stream's limiter slot) on ``loop``, from any thread, without
    waiting for it; nothing to do once the loop has closed."""

    def start() -> None:
        task = asyncio.ensure_future(stack.aclose())
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    if loop.is_closed():
        return
    if _on_loop_thread(loop):
        start()
        return
    with contextlib.suppress(RuntimeError):  # closed in the meantime
        loop.call_soon_threadsafe(start)


# --------------------------------------------------------------------------- sync


def _send_sync(
    module: ModuleType,
    tee: type,
    original: Any,
    client: Any,
    request: Any,
    stream: bool,
    kwargs: dict[str, Any],
    pending: _Pending,
) -> Any:
    answer = pending.hit(_cache_get_sync(pending)) if pending.scope.cache else None
    if answer is not None:
        return _cached(module, request, answer)
    try:
        request = _prepared(module, request, pending.reserve())
    except BudgetExceededError as refused:
        return _refusal(module, request, refused)
    response, slot = send_sync(pending, lambda: original(client, request, stream=stream, **kwargs))
    status = response.status_code
    if not stream:
        settle_sync(pending, response.content, complete=True, slot=slot, outcome=_outcome(status))
        return response
    response.stream = tee(response.stream, SyncBody(pending, slot, _outcome(status)))
    return response


# --------------------------------------------------------------------------- tees


@functools.cache
def _tees(module: ModuleType) -> tuple[type, type]:
    """Byte-stream wrappers of ``module``'s kinds (its responses check the stream's type)."""

    class TeeSync(module.SyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(self, inner: Any, body: SyncBody) -> None:
            self._inner = inner
            self._body = body
            self._complete = False

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self._inner:
                self._body.parts.append(chunk)
                yield chunk
            self._complete = True
            self._body.settle(complete=True)

        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                self._body.settle(complete=self._complete)

    class TeeAsync(module.AsyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(self, inner: Any, pending: _Pending, stack: contextlib.AsyncExitStack) -> None:
            self._inner = inner
            self._pending = pending
            self._stack = stack
            self._parts: list[bytes] = pending.parts
            self._complete = False

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._inner:
                self._parts.append(chunk)
                yield chunk
            self._complete = True
            await self._finish()

        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                await self._finish()

        async def _finish(self) -> None:
            pending = self._pending
            # None when the call was settled already (its cell ended before it was closed)
            entry = pending.finish(pending.status, b"".join(self._parts), complete=self._complete)
            pending.release = None
            await self._stack.aclose()
            await _cache_put(pending.scope.cache, pending.key, entry)

    return TeeSync, TeeAsync
