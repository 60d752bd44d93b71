"""The seam of interception in ``httpx`` and its fork ``httpx2``: their clients' ``send``.

:func:`patch_module` replaces ``Client.send`` and ``AsyncClient.send`` of one module with versions
that hand model calls made inside an interception scope to :mod:`._intercept` and pass every
other request through unchanged; it returns the function that puts the originals back. A
response body is observed as it streams (a tee over the response's byte stream), so streamed
calls are metered and cached when their last byte has arrived — never before.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any

from ..errors import BudgetExceededError
from ..providers.call import CachedResponse, CallCache
from ..providers.limiter import LimiterSlot
from ._intercept import SyncSlot, _Pending, active_scope, refusal_body, run_on_loop

__all__ = ["patch_module"]

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


async def _cache_get(cache: CallCache | None, key: str) -> CachedResponse | None:
    if cache is None:
        return None
    try:
        return await cache.get(key)
    except Exception:  # a broken cache is a miss, never a failed call
        return None


async def _cache_put(cache: CallCache | None, key: str, entry: CachedResponse | None) -> None:
    if cache is None or entry is None:
        return
    with contextlib.suppress(Exception):  # the call is paid for: keep its answer either way
        await cache.put(key, entry.message, entry.latency)


def _cache_get_sync(pending: _Pending) -> CachedResponse | None:
    cache = pending.scope.cache
    if cache is None:
        return None
    direct = getattr(cache, "get_sync", None)
    try:
        if callable(direct):
            result: CachedResponse | None = direct(pending.key)
            return result
        return run_on_loop(pending.scope, _cache_get(cache, pending.key))
    except Exception:
        return None


def _cache_put_sync(pending: _Pending, entry: CachedResponse | None) -> None:
    cache = pending.scope.cache
    if cache is None or entry is None:
        return
    direct = getattr(cache, "put_sync", None)
    with contextlib.suppress(Exception):
        if callable(direct):
            direct(pending.key, entry.message, entry.latency)
        else:
            run_on_loop(pending.scope, _cache_put(cache, pending.key, entry))


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
    response.stream = tee(response.stream, pending, stack)
    return response


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
    slot = SyncSlot(pending.scope, pending.call.provider, pending.call.spec)
    try:
        pending.started = time.perf_counter()
        token = _inside.set(True)
        try:
            response = original(client, request, stream=stream, **kwargs)
        finally:
            _inside.reset(token)
    except BaseException as error:
        pending.fail(error)
        slot.release(None)
        raise
    status = response.status_code
    pending.status = status
    pending.content_type = response.headers.get("content-type", "application/json")
    if not stream:
        entry = pending.finish(status, response.content, complete=True)
        slot.release(_outcome(status))
        _cache_put_sync(pending, entry)
        return response
    response.stream = tee(response.stream, pending, slot, _outcome(status))
    return response


# --------------------------------------------------------------------------- tees


@functools.cache
def _tees(module: ModuleType) -> tuple[type, type]:
    """Byte-stream wrappers of ``module``'s kinds (its responses check the stream's type)."""

    class TeeSync(module.SyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(
            self, inner: Any, pending: _Pending, slot: SyncSlot, outcome: Callable[..., None]
        ) -> None:
            self._inner = inner
            self._pending = pending
            self._slot = slot
            self._outcome = outcome
            self._parts: list[bytes] = []
            self._complete = False

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self._inner:
                self._parts.append(chunk)
                yield chunk
            self._complete = True
            self._finish()

        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                self._finish()

        def _finish(self) -> None:
            if self._pending.finished:
                return
            pending = self._pending
            entry = pending.finish(pending.status, b"".join(self._parts), complete=self._complete)
            self._slot.release(self._outcome)
            _cache_put_sync(pending, entry)

    class TeeAsync(module.AsyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(self, inner: Any, pending: _Pending, stack: contextlib.AsyncExitStack) -> None:
            self._inner = inner
            self._pending = pending
            self._stack = stack
            self._parts: list[bytes] = []
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
            if self._pending.finished:
                return
            pending = self._pending
            entry = pending.finish(pending.status, b"".join(self._parts), complete=self._complete)
            await self._stack.aclose()
            await _cache_put(pending.scope.cache, pending.key, entry)

    return TeeSync, TeeAsync
