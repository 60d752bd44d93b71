"""HTTP around :class:`~phi_core.gateway.Gateway`: the Starlette app and the uvicorn runner.

Routes: ``POST /v1/chat/completions`` (JSON or SSE), ``GET /v1/models``, ``POST /v1/feedback``,
``GET /healthz``, ``GET /readyz``, ``GET /metrics``. Every request runs under a watcher of the
client's connection: a client that goes away cancels the work of its request (every branch of a
race, the upstream stream of a passthrough), whose usage is still metered, charged and logged
(status 499).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    MutableMapping,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

from .._logging import get_logger
from .._net import HostCheck, allowed_hosts, listening_socket
from ..errors import ClientDisconnected, GatewayError, MissingExtraError, UserError
from ..metering import Meter
from ..providers.base import StreamDone
from ..types import TextDelta, ToolCallDelta
from ._answers import Answer, header_values, request_record
from ._config import GatewayConfig, env_keys, exposure_warning, load_gateway_config
from ._service import Caller, Gateway, model_owner
from ._wire import (
    ChatRequest,
    StopCutter,
    chunk,
    completion,
    delta_frames,
    error_body,
    finish_reason,
    new_completion_id,
    parse_chat_request,
)

try:
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route
except ImportError as exc:  # the `server` extra
    raise MissingExtraError("The gateway (`phi serve`)", "server") from exc

__all__ = [
    "CONFIG_ENV",
    "LOG_LEVELS",
    "ClientDisconnected",
    "app_from_env",
    "create_app",
    "serve",
]

logger = get_logger("phi_core.gateway")

CONFIG_ENV = "PHI_GATEWAY_CONFIG"
"""The config file of workers started by :func:`serve` (``--workers`` > 1 imports the app)."""
HOSTS_ENV = "PHI_GATEWAY_HOSTS"
"""The ``Host`` names the workers of a multi-worker :func:`serve` answer."""

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
"""The log levels :func:`serve` takes (uvicorn's, in either case)."""

FRAMES_AHEAD = 64
"""How many SSE frames a stream reads ahead of a client that is slow to take them."""

T = TypeVar("T")
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Ended = Literal["done", "disconnected", "stopped"]
"""How a request's work ended: answered (or refused), its client went away, or its handler was
cancelled (a stopping server); the last two are counted as 499 and logged as cancelled."""


async def _until_disconnect(receive: Receive, work: Coroutine[Any, Any, T] | Awaitable[T]) -> T:
    """``work``'s result, or :class:`ClientDisconnected` after cancelling (and awaiting) it
    when the client goes away first."""

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (watcher, task):
            if not pending.done():
                pending.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        if not task.done() or task.cancelled():
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise ClientDisconnected()
    return task.result()


async def _cancelled(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` if it is still running and wait for its end (its outcome is not wanted).

    Cancelled again while it waits (a server stopping harder), it cancels ``task`` again and
    still waits for it, then raises :class:`asyncio.CancelledError`: no work of a request
    outlives its handler."""
    if not task.done():
        task.cancel()
    again = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            again = True
            task.cancel()
    if not task.cancelled():
        task.exception()  # retrieved: its outcome is not wanted
    if again:
        raise asyncio.CancelledError()


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(body, status_code=status, headers=header_values(headers))


def _error(exc: GatewayError) -> Response:
    return _json(exc.status, exc.body(), exc.headers)


def _failed() -> GatewayError:
    """The answer to a failure that is not a :class:`GatewayError` (a bug; it is logged)."""
    return GatewayError(500, "The gateway failed.", type_="server_error")


def _stopping() -> GatewayError:
    """The answer to a request the gateway stopped working on because it is shutting down."""
    return GatewayError(
        503,
        "The gateway is shutting down and stopped this request before it was answered; send "
        "it again.",
        type_="server_error",
        code="server_shutting_down",
    )


class _StopsCleanly:
    """ASGI middleware: a request whose handler is cancelled because the server is stopping
    (uvicorn past its graceful-shutdown timeout) ends as a response, not as an exception that
    the server logs as a traceback and answers as a bare 500. The handler has already stopped
    its work and logged it; what is left is the client's answer: OpenAI's error shape with a
    503 when nothing was sent yet, else the end of the body (a stream has sent its error
    event)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = completed = False

        async def sending(message: MutableMapping[str, Any]) -> None:
            nonlocal started, completed
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                completed = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # handled here: the request task ends as a normal response
            with contextlib.suppress(OSError, RuntimeError):  # the connection may be gone
                if not started:
                    await _error(_stopping())(scope, receive, send)
                elif not completed:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})


class _EventStream:
    """An SSE response whose producer is cancelled when the client disconnects (the ASGI
    receive channel is watched from the start), so no upstream call is orphaned.

    The response starts with the first frame: frames that fail before it answer an error in
    OpenAI's shape instead: a :class:`GatewayError` (an upstream refusing the call) with its own
    status, anything else as a 500 (logged). ``on_end(ended, refused)`` is told how it ended
    (``ended``: ``"done"``, ``"disconnected"`` when the client went away, ``"stopped"`` when
    the response itself was cancelled, as a stopping server does; ``refused``: that error, or a
    500 when the frames failed otherwise)."""

    def __init__(
        self,
        frames: AsyncIterator[str],
        headers: dict[str, str],
        on_end: Callable[[Ended, GatewayError | None], Awaitable[None]],
    ) -> None:
        self.frames = frames
        self.headers = header_values(headers) or {}
        self.on_end = on_end

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *[(k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()],
        ]

        refused: list[GatewayError] = []
        opened_at_all = False

        async def produce() -> None:
            nonlocal opened_at_all
            # Frames that are ready together leave in one write (an upstream's network read
            # often holds many chunks); a frame that has to wait for the upstream goes at once.
            # The queue is bounded: a slow client slows the upstream read, as before.
            ready: asyncio.Queue[str | None] = asyncio.Queue(maxsize=FRAMES_AHEAD)

            async def pull() -> None:
                try:
                    async for frame in self.frames:
                        await ready.put(frame)
                except asyncio.CancelledError:
                    raise  # the sender is gone: nobody waits for the end
                except BaseException:
                    await ready.put(None)  # the sender stops, then raises this from the puller
                    raise
                await ready.put(None)

            puller = asyncio.ensure_future(pull())
            opened = False
            try:
                while True:
                    batch = [await ready.get()]
                    while not ready.empty():
                        batch.append(ready.get_nowait())
                    end = batch[-1] is None
                    body = "".join(f for f in batch if f is not None).encode()
                    if not opened:
                        if not body and end:  # over before its first frame: a refusal?
                            try:
                                await puller
                            except GatewayError as exc:
                                refused.append(exc)
                            except Exception:  # a bug: logged, answered as OpenAI's 500
                                logger.exception("a gateway stream failed before its first frame")
                                refused.append(_failed())
                            if refused:
                                await _error(refused[0])(scope, receive, send)
                                return
                        await send({"type": "http.response.start", "status": 200,
                                    "headers": headers})  # fmt: skip
                        opened = opened_at_all = True
                    if body:
                        await send({"type": "http.response.body", "body": body,
                                    "more_body": True})  # fmt: skip
                    if end:
                        break
                await puller  # its exception, if it failed
            finally:
                if not puller.done():
                    puller.cancel()
                await asyncio.gather(puller, return_exceptions=True)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        ended: Ended = "done"
        try:
            await _until_disconnect(receive, produce())
        except ClientDisconnected:
            ended = "disconnected"
        except OSError:  # the transport went away while writing
            ended = "disconnected"
        except asyncio.CancelledError:  # the server stops: the producer was cancelled, awaited
            ended = "stopped"
            if opened_at_all:  # the client is told, in the stream, that no answer follows
                body = (_sse(_stopping().body()) + _sse("[DONE]")).encode()
                with contextlib.suppress(OSError, RuntimeError):  # gone, or already ended
                    await send({"type": "http.response.body", "body": body, "more_body": False})
            raise
        except Exception:  # a bug: uvicorn logs it (and answers 500 if nothing was sent yet)
            refused.append(_failed())
            raise
        finally:
            aclose = getattr(self.frames, "aclose", None)
            if aclose is not None:
                await aclose()
            await self.on_end(ended, refused[0] if refused else None)


def _sse(data: Any) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


def _answer_frames(answer: Answer, include_usage: bool, created: int) -> list[str]:
    cid, model = answer.completion_id, answer.model
    frames = [_sse(chunk(cid, model, created, {"role": "assistant", "content": ""}))]
    if answer.text:
        frames.append(_sse(chunk(cid, model, created, {"content": answer.text})))
    if answer.tool_calls:
        calls = [{"index": i, **c} for i, c in enumerate(answer.tool_calls)]
        frames.append(_sse(chunk(cid, model, created, {"tool_calls": calls})))
    frames.append(_sse(chunk(cid, model, created, {}, finish=answer.finish, phi=answer.phi)))
    if include_usage:
        frames.append(_sse(chunk(cid, model, created, None, usage=answer.usage)))
    frames.append(_sse("[DONE]"))
    return frames


def create_app(
    config: GatewayConfig | Gateway | None = None, *, hosts: Sequence[str] | None = None
) -> Starlette:
    """The Starlette app serving ``config`` (a :class:`GatewayConfig`, a ready
    :class:`Gateway`, or ``None`` for passthrough only); the gateway starts with the app.

    ``hosts``: the ``Host`` names a request may be addressed to (``None``: any).
    :func:`serve` passes the loopback names when it listens on loopback, so a web page whose
    domain is re-pointed at 127.0.0.1 (DNS rebinding) can neither call nor read it.
    """
    gateway = config if isinstance(config, Gateway) else Gateway(config or GatewayConfig())
    metrics = gateway.metrics

    def observe(kind: str, status: int, started: float, meter: Meter | None) -> None:
        metrics.inc("phi_gateway_requests_total", route="chat", kind=kind, status=str(status))
        metrics.observe("phi_gateway_request_duration_seconds", time.perf_counter() - started,
                        kind=kind)  # fmt: skip
        for call in meter.calls if meter is not None else []:
            if call.cached:
                continue
            metrics.inc("phi_gateway_tokens_total", call.usage.input + call.usage.cache_read,
                        model=call.model, direction="input")  # fmt: skip
            metrics.inc("phi_gateway_tokens_total", call.usage.output, model=call.model,
                        direction="output")  # fmt: skip
            metrics.inc("phi_gateway_cost_usd_total", call.cost_usd, model=call.model)

    async def settle(caller: Caller, meter: Meter) -> None:
        try:
            await gateway.charge(caller, meter.spent)
        except Exception as exc:  # the answer is paid for; a limits store failure is logged
            logger.warning("could not charge key %s: %s", caller.name, type(exc).__name__)
        finally:  # charged first: the next request then reads this one's spend from the store
            gateway.release(meter)

    async def finish(
        kind: str, status: int, started: float, caller: Caller, meter: Meter, disconnected: bool
    ) -> None:
        """A request is over: count it (and the client's disconnect), charge the caller's key."""
        if disconnected:
            metrics.inc("phi_gateway_disconnects_total", kind=kind)
        observe(kind, status, started, meter)
        await settle(caller, meter)

    async def json_body(request: Request) -> Any:
        """The request's JSON body; 413 past ``max_body_bytes`` (read no further), 400 when it
        is not JSON."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json" and not kind.endswith("+json"):
            # a web page can send text/plain or a form to 127.0.0.1 without asking first; it
            # cannot send application/json without a CORS preflight, which this gateway fails
            raise GatewayError(
                415,
                f"The request body must be JSON sent as `Content-Type: application/json`, not "
                f"{kind or 'no content type'!r}.",
                code="unsupported_media_type",
            )
        limit = gateway.settings.max_body_bytes
        declared = request.headers.get("content-length", "")
        too_large = declared.isdigit() and int(declared) > limit
        raw = bytearray()
        if not too_large:
            async for piece in request.stream():
                raw += piece
                if len(raw) > limit:
                    too_large = True
                    break
        if too_large:
            raise GatewayError(
                413,
                f"The request body is larger than this gateway accepts ({limit} bytes; "
                "`gateway.max_body_bytes` in its config).",
                code="request_too_large",
            )
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise GatewayError(400, "The request body is not valid JSON.") from None
        except ValueError:  # an integer past Python's digit limit
            raise GatewayError(
                400,
                "The request body holds a number too long to read (more than "
                f"{sys.get_int_max_str_digits()} digits).",
            ) from None
        except RecursionError:
            raise GatewayError(400, "The request body nests JSON too deeply.") from None

    async def chat(request: Request) -> Response | _EventStream:
        started = time.perf_counter()
        kind = "unknown"
        try:
            caller = gateway.authenticate(request.headers.get("authorization"))
            chat_request = parse_chat_request(await json_body(request))
            kind, _ = gateway.resolve(chat_request.model, caller)
            gateway.authorize(caller, chat_request.model)
            # the request's meter: its budget is what is left of the key's daily dollars
            meter = await gateway.admit(caller)
        except Exception as exc:
            if not isinstance(exc, GatewayError):  # a bug: logged, answered as OpenAI's 500
                logger.error("the gateway failed to admit a request", exc_info=exc)
                exc = _failed()
            metrics.inc("phi_gateway_requests_total", route="chat", kind=kind,
                        status=str(exc.status))  # fmt: skip
            return _error(exc)
        wall = time.time()
        if kind == "passthrough" and chat_request.stream:
            return await stream_passthrough(request, chat_request, caller, meter, started)
        gateway.in_flight += 1
        task = asyncio.ensure_future(gateway.answer(chat_request, caller, meter))
        patience = gateway.settings.keepalive_s if chat_request.stream else None

        async def stop(ended: Ended) -> None:
            """Its client went away or the handler is cancelled (a stopping server): cancel the
            work and wait for it, then count and charge the request (499) and log a
            passthrough as cancelled (a race or route logs itself, also when cancelled)."""
            try:
                await _cancelled(task)
            finally:
                try:
                    await finish(kind, 499, started, caller, meter, ended == "disconnected")
                    if kind == "passthrough":
                        record = request_record(chat_request, meter, "cancelled", "", wall)
                        await gateway.write_record(record)
                finally:  # last: a stopping gateway waits for this before closing its log
                    gateway.in_flight -= 1

        try:
            await _until_disconnect(request.receive, asyncio.wait({task}, timeout=patience))
        except ClientDisconnected:
            await stop("disconnected")
            return _error(ClientDisconnected())
        except asyncio.CancelledError:  # the work stops before the cancellation goes on
            await stop("stopped")
            raise
        if not task.done():  # a streamed race still deciding: start the stream now
            return early_stream(request, chat_request, task, kind, caller, meter, started)
        try:
            answer = task.result()
        except Exception as failure:
            if isinstance(failure, GatewayError):
                refusal = failure
            else:  # a bug: logged, and answered and counted as any failed request
                logger.error("the gateway failed to answer %r", chat_request.model,
                             exc_info=failure)  # fmt: skip
                refusal = _failed()
            try:
                await finish(kind, refusal.status, started, caller, meter, disconnected=False)
                if kind == "passthrough":  # a race or route logged its own result
                    record = request_record(chat_request, meter, "error", "", wall)
                    await gateway.write_record(record)
            finally:
                gateway.in_flight -= 1
            return _error(refusal)
        try:
            await finish(kind, 200, started, caller, meter, disconnected=False)
            if kind == "passthrough":
                record = request_record(chat_request, meter, "ok", answer.text, wall)
                await gateway.write_record(record)
        finally:
            gateway.in_flight -= 1
        if chat_request.stream:
            frames = _answer_frames(answer, chat_request.include_usage, int(time.time()))

            async def replay() -> AsyncIterator[str]:
                for frame in frames:
                    yield frame

            async def done(ended: Ended, refused: GatewayError | None) -> None:
                if ended == "disconnected":  # the request was already counted and charged
                    metrics.inc("phi_gateway_disconnects_total", kind=kind)

            return _EventStream(replay(), answer.headers, done)
        body = completion(
            answer.completion_id, answer.model, answer.text, answer.usage,
            finish=answer.finish, tool_calls=answer.tool_calls, phi=answer.phi,
        )  # fmt: skip
        return _json(200, body, answer.headers)

    def early_stream(
        request: Request,
        chat_request: ChatRequest,
        task: asyncio.Future[Answer],
        kind: str,
        caller: Caller,
        meter: Meter,
        started: float,
    ) -> _EventStream:
        """The stream of a race or route that outlasted ``keepalive_s``: an SSE comment every
        ``keepalive_s`` until it is decided, then its frames (or an error event)."""
        every = gateway.settings.keepalive_s
        outcome = {"status": 200}

        async def frames() -> AsyncIterator[str]:
            while not task.done():
                yield ": phi is still deciding\n\n"
                await asyncio.wait({task}, timeout=every)
            try:
                answer = task.result()
            except GatewayError as exc:
                outcome["status"] = exc.status
                yield _sse(exc.body())
                yield _sse("[DONE]")
                return
            for frame in _answer_frames(answer, chat_request.include_usage, int(time.time())):
                yield frame

        async def done(ended: Ended, refused: GatewayError | None) -> None:
            status = 499 if ended != "done" else refused.status if refused else outcome["status"]
            try:
                await _cancelled(task)
            finally:
                try:
                    await finish(kind, status, started, caller, meter, ended == "disconnected")
                finally:
                    gateway.in_flight -= 1

        _, profile = gateway.resolve(chat_request.model)
        return _EventStream(frames(), {"x-phi-kind": kind, "x-phi-profile": profile}, done)

    async def stream_passthrough(
        request: Request, chat_request: ChatRequest, caller: Caller, meter: Meter, started: float
    ) -> _EventStream:
        stream = gateway.passthrough(chat_request, meter)
        wall = time.time()
        gateway.in_flight += 1
        cid, model, created = new_completion_id(), chat_request.model, int(time.time())
        text: list[str] = []
        outcome = {"status": 200}

        cutter = StopCutter(chat_request.stop)

        delta = delta_frames(cid, model, created)

        async def frames() -> AsyncIterator[str]:
            try:  # an upstream that refuses the call: the client gets its status
                item = await anext(stream)
            except StopAsyncIteration:
                raise GatewayError(502, "upstream: the stream ended without a reply",
                                   type_="upstream_error") from None  # fmt: skip
            yield delta({"role": "assistant", "content": ""})
            final = None
            try:
                while True:
                    if isinstance(item, TextDelta) and item.text:
                        # Past a stop sequence nothing more is sent; the upstream call is read
                        # to its end (it is given `stop` too, so it usually ends there itself),
                        # since cancellation, not an early close, is what ends a call cleanly.
                        piece = cutter.feed(item.text)
                        if piece:
                            text.append(piece)
                            yield delta({"content": piece})
                    elif isinstance(item, ToolCallDelta) and not cutter.stopped:
                        call: dict[str, Any] = {"index": item.index}
                        if item.id:
                            call["id"], call["type"] = item.id, "function"
                        function: dict[str, str] = {"arguments": item.arguments}
                        if item.name:
                            function["name"] = item.name
                        call["function"] = function
                        yield delta({"tool_calls": [call]})
                    elif isinstance(item, StreamDone):
                        final = item.message
                    item = await anext(stream)
            except StopAsyncIteration:
                pass
            except GatewayError as exc:  # the upstream failed mid-stream: an error event
                outcome["status"] = exc.status
                yield _sse(exc.body())
                yield _sse("[DONE]")
                return
            rest = cutter.flush()
            if rest:
                text.append(rest)
                yield delta({"content": rest})
            finish = "stop" if cutter.stopped else finish_reason(final)
            phi = {"kind": "passthrough", "model": model, "cost_usd": meter.spent}
            yield _sse(chunk(cid, model, created, {}, finish=finish, phi=phi))
            if chat_request.include_usage:
                yield _sse(chunk(cid, model, created, None, usage=meter.paid_usage))
            yield _sse("[DONE]")

        async def done(ended: Ended, refused: GatewayError | None) -> None:
            status = 499 if ended != "done" else refused.status if refused else outcome["status"]
            try:
                await stream.aclose()
            finally:
                try:
                    disconnected = ended == "disconnected"
                    await finish("passthrough", status, started, caller, meter, disconnected)
                    state = {200: "ok", 499: "cancelled"}.get(status, "error")
                    await gateway.write_record(
                        request_record(chat_request, meter, state, "".join(text), wall)
                    )
                finally:
                    gateway.in_flight -= 1

        headers = {"x-phi-kind": "passthrough", "x-phi-model": model}
        return _EventStream(frames(), headers, done)

    async def models(request: Request) -> Response:
        try:
            caller = gateway.authenticate(request.headers.get("authorization"))
        except GatewayError as exc:
            return _error(exc)
        created = int(gateway_started)
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": model_owner(name)}
            for name in gateway.listed_models(caller)
        ]
        return _json(200, {"object": "list", "data": data})

    async def model(request: Request) -> Response:
        """``GET /v1/models/{id}``: the model's object, the 404 listing the known ones, or the
        503 a chat request would get for a ``provider:model`` this gateway cannot call (its
        key is not set): what the model list leaves out is not offered here either."""
        name = request.path_params["model"]
        try:
            caller = gateway.authenticate(request.headers.get("authorization"))
            kind, _ = gateway.resolve(name, caller)
            if not gateway.may(caller, name):  # as the model list: not offered to this key
                raise gateway.unknown(name, "", caller)
            if kind == "passthrough":
                gateway.provider_for(name)
        except GatewayError as exc:
            return _error(exc)
        body = {
            "id": name,
            "object": "model",
            "created": int(gateway_started),
            "owned_by": model_owner(name),
        }
        return _json(200, body)

    async def feedback(request: Request) -> Response:
        try:
            gateway.authenticate(request.headers.get("authorization"))
            body = await json_body(request)
            if not isinstance(body, dict):
                raise GatewayError(400, 'The body must be {"id": "chatcmpl-…", "score": 0..1}.')
            result = await gateway.feedback(body.get("id"), body.get("score"))
        except GatewayError as exc:
            metrics.inc("phi_gateway_feedback_requests_total", status=str(exc.status))
            return _error(exc)
        except Exception as failure:  # a bug: logged, and answered in OpenAI's shape
            logger.error("the gateway failed to take a feedback", exc_info=failure)
            metrics.inc("phi_gateway_feedback_requests_total", status="500")
            return _error(_failed())
        metrics.inc("phi_gateway_feedback_requests_total", status="200")
        return _json(200, {"object": "feedback", **result})

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        why = await gateway.check_ready()
        if why is not None:
            return PlainTextResponse(f"not ready: {why}\n", status_code=503)
        return PlainTextResponse("ready\n")

    async def metrics_endpoint(request: Request) -> Response:
        text = metrics.render() + (
            "# HELP phi_gateway_in_flight Requests being answered now.\n"
            "# TYPE phi_gateway_in_flight gauge\n"
            f"phi_gateway_in_flight {gateway.in_flight}\n"
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def not_found(request: Request, exc: Exception) -> Response:
        served = "POST /v1/chat/completions, GET /v1/models, POST /v1/feedback"
        message = f"Unknown path {request.url.path!r}; this gateway serves {served}."
        return _json(404, error_body(message, "invalid_request_error", "not_found"))

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        return _json(405, error_body(f"{request.method} is not allowed on {request.url.path!r}.",
                                     "invalid_request_error", "method_not_allowed"))  # fmt: skip

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.close()

    gateway_started = time.time()
    middleware = [Middleware(_StopsCleanly)]
    if hosts is not None:
        middleware.append(
            Middleware(
                HostCheck,
                hosts=hosts,
                body=lambda m: {
                    "error": {"message": m, "type": "invalid_request_error", "param": None,
                              "code": "host_not_allowed"}
                },
            )
        )  # fmt: skip
    if gateway.settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=gateway.settings.cors_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type"],
                expose_headers=["x-phi-winner", "x-phi-kind", "x-phi-strategy", "x-phi-feedback"],
            )
        )
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/models/{model:path}", model, methods=["GET"]),
            Route("/v1/feedback", feedback, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
        ],
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={404: not_found, 405: method_not_allowed},
    )
    app.state.gateway = gateway
    return app


WORKER_HEALTHCHECK_S = 60
"""How long a worker may take to answer the supervisor's health check (uvicorn's 5 s kills a
worker still importing on a loaded machine)."""


def app_from_env() -> Starlette:
    """The app of one worker: the config named by ``$PHI_GATEWAY_CONFIG`` (uvicorn factory)."""
    hosts = os.environ.get(HOSTS_ENV)
    return create_app(
        load_gateway_config(os.environ.get(CONFIG_ENV) or None),
        hosts=hosts.split(",") if hosts else None,
    )


def serve(
    config: str | os.PathLike[str] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    log_level: str = "info",
) -> None:
    """Run the gateway with uvicorn until interrupted; in-flight streams drain on shutdown.
    uvicorn logs its start and errors at ``log_level``; its access log is off.

    The config is loaded (and every profile planned) before the server starts, so a bad file
    fails here with its located error; so does an address that cannot be listened on (a port
    in use, a host that is not this machine's).
    """
    import uvicorn

    if workers < 1:
        raise UserError(f"workers must be >= 1, got {workers!r}.")
    if not 0 <= port <= 65535:
        raise UserError(f"port must be from 0 to 65535, got {port!r}.")
    if not isinstance(log_level, str) or log_level.lower() not in LOG_LEVELS:
        raise UserError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}.")
    loaded = load_gateway_config(config)
    gateway = Gateway(loaded)  # every profile is checked once, before anything listens
    gateway.check_state()  # and the router state, where it is a file
    # Our own listening socket rather than uvicorn's: a taken port is a UserError like
    # `phi view`'s, and it says IPPROTO_TCP, so every accepted connection gets TCP_NODELAY
    # (uvicorn's own sockets leave Nagle on: +40 ms a stream).
    sock = listening_socket(host, port)
    try:
        warning = exposure_warning(bool(loaded.gateway.keys or env_keys()), host)
        if warning is not None:  # once, on stderr (a logged copy would print it twice)
            print(f"warning: {warning}", file=sys.stderr)
        drain = max(1, round(loaded.gateway.drain_timeout_s))
        if workers == 1:
            server = uvicorn.Server(
                uvicorn.Config(
                    create_app(gateway, hosts=allowed_hosts(host)), log_level=log_level,
                    timeout_graceful_shutdown=drain, access_log=False,
                )
            )  # fmt: skip
            _log_listening(sock)
            try:
                server.run(sockets=[sock])
            except KeyboardInterrupt:
                pass
            if not server.started:  # the app's startup failed; uvicorn said why
                raise SystemExit(3)  # uvicorn's own exit status for a failed startup
            return
        if config is not None:
            os.environ[CONFIG_ENV] = os.fspath(os.path.abspath(config))
        else:
            os.environ.pop(CONFIG_ENV, None)
        names = allowed_hosts(host)
        if names is not None:
            os.environ[HOSTS_ENV] = ",".join(names)
        else:
            os.environ.pop(HOSTS_ENV, None)
        from uvicorn.supervisors import Multiprocess

        settings = uvicorn.Config(
            "phi_core.gateway._app:app_from_env", factory=True, host=host, port=port,
            workers=workers, log_level=log_level, timeout_graceful_shutdown=drain,
            access_log=False, timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
        )  # fmt: skip
        _log_listening(sock)
        try:
            Multiprocess(settings, sockets=[sock]).run()
        except KeyboardInterrupt:
            pass
    finally:
        sock.close()


def _log_listening(sock: socket.socket) -> None:
    """Say where the gateway listens (uvicorn does not when it is handed a socket)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    logging.getLogger("uvicorn.error").info(
        "phi serve: listening on http://%s:%d (Ctrl+C stops it)", shown, port
    )
