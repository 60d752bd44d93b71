"""The ``requests`` seam of interception: ``HTTPAdapter.send``.

Hand-written agents often post to an OpenAI-compatible server with ``requests``. Inside an
interception scope, :func:`patch_requests` hands such a model call to :mod:`._intercept` the way
:mod:`._intercept_http` does for httpx: cache, budget, limiter slot (borrowed from the run's
loop, as for sync httpx clients) and meter. The adapter is the seam because every ``Session``
(and ``requests.post``) sends through it, and the session's own work after it — cookies, hooks,
redirects, reading the body unless ``stream=True`` — stays as it is. The body is observed as it
is read (a tee over the urllib3 response), so a streamed call is metered and cached when its last
byte has arrived, and an abandoned one when it is closed.
"""

from __future__ import annotations

import functools
import http
import importlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import BudgetExceededError
from ._intercept import _Pending, refusal_body
from ._intercept_http import SyncBody, _cache_get_sync, _outcome, send_sync
from ._intercept_http import _pending as pending_for

__all__ = ["patch_requests"]


@dataclass(frozen=True, slots=True)
class _View:
    """What interception reads of a request: ``requests``' prepared request, httpx-shaped."""

    method: str
    url: str
    headers: Any
    content: bytes


def patch_requests() -> Callable[[], None]:
    """Patch ``requests.adapters.HTTPAdapter.send`` (if ``requests`` is installed); returns the
    undo."""
    try:
        adapters: Any = importlib.import_module("requests.adapters")
    except ImportError:
        return lambda: None
    cls = adapters.HTTPAdapter
    original = cls.send

    @functools.wraps(original)
    def send(self: Any, request: Any, stream: bool = False, *args: Any, **kwargs: Any) -> Any:
        pending = _pending(request)
        if pending is None:
            return original(self, request, stream, *args, **kwargs)
        return _send(original, self, request, stream, args, kwargs, pending)

    cls.send = send

    def restore() -> None:
        cls.send = original

    return restore


def _pending(request: Any) -> _Pending | None:
    body = request.body
    if body is None:
        content = b""
    elif isinstance(body, bytes | bytearray):
        content = bytes(body)
    elif isinstance(body, str):
        content = body.encode("utf-8")
    else:  # a streamed upload (a generator or a file): not a model call an agent posts
        return None
    return pending_for(_View(request.method or "GET", request.url or "", request.headers, content))


def _send(
    original: Any,
    adapter: Any,
    request: Any,
    stream: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    pending: _Pending,
) -> Any:
    answer = pending.hit(_cache_get_sync(pending)) if pending.scope.cache else None
    if answer is not None:
        return _response(adapter, request, *answer)
    request = request.copy()
    try:
        lowered = pending.reserve()
    except BudgetExceededError as refused:
        headers = {"content-type": "application/json", "x-should-retry": "false"}
        return _response(adapter, request, 402, headers, refusal_body(refused))
    if lowered is not None:
        request.headers.pop("Transfer-Encoding", None)
        request.body = lowered
        request.headers["Content-Length"] = str(len(lowered))
    request.headers["Accept-Encoding"] = "identity"  # the bytes observed are the bytes parsed
    response, slot = send_sync(pending, lambda: original(adapter, request, stream, *args, **kwargs))
    response.raw = _TeeRaw(response.raw, SyncBody(pending, slot, _outcome(response.status_code)))
    if not stream:
        _ = response.content  # read here, through the tee, as the session would right after
    return response


def _response(adapter: Any, request: Any, status: int, headers: dict[str, str], body: bytes) -> Any:
    """A whole ``requests`` response that was never sent: a cache hit or a refusal."""
    models: Any = importlib.import_module("requests.models")
    structures: Any = importlib.import_module("requests.structures")
    utils: Any = importlib.import_module("requests.utils")
    response = models.Response()
    response.status_code = status
    response.headers = structures.CaseInsensitiveDict(headers)
    response.raw = io.BytesIO(body)
    response._content = body
    response._content_consumed = True
    response.encoding = utils.get_encoding_from_headers(response.headers)
    response.reason = http.HTTPStatus(status).phrase
    response.url = request.url
    response.request = request
    response.connection = adapter
    return response


class _TeeRaw:
    """The urllib3 response of an intercepted call, recording the bytes read through it; the
    call is settled (metered, slot released, whole answers cached) once the body has been read
    to the end, or when it is closed before that (abandoned: estimated, not cached)."""

    def __init__(self, inner: Any, body: SyncBody) -> None:
        self._inner = inner
        self._body = body

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def stream(
        self, amt: int | None = 2**16, decode_content: bool | None = None
    ) -> Iterator[bytes]:
        try:
            for chunk in self._inner.stream(amt, decode_content=decode_content):
                self._body.parts.append(chunk)
                yield chunk
        except BaseException:
            self._body.settle(complete=False)
            raise
        self._body.settle(complete=True)

    def read(self, amt: int | None = None, *args: Any, **kwargs: Any) -> bytes:
        try:
            data: bytes = self._inner.read(amt, *args, **kwargs)
        except BaseException:
            self._body.settle(complete=False)
            raise
        self._body.parts.append(data)
        if amt is None or not data:
            self._body.settle(complete=True)
        return data

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._body.settle(complete=False)

    def release_conn(self) -> None:
        try:
            self._inner.release_conn()
        finally:
            self._body.settle(complete=False)
