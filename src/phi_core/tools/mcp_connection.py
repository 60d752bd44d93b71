"""The live session behind an :class:`~phi_core.tools.mcp.McpClient`, owned by a task of its own.

The SDK's task groups and cancel scopes must be entered and left by one task, while tool calls
come from many (runs, race branches); so one task per connection enters the SDK's ``Client`` and
waits to be told to close. Requests are sent from the callers' tasks. A stdio server's stderr is
read through a pipe: its last lines go into error messages, and its end means the process exited.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib.metadata
import logging
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .._logging import get_logger
from ..errors import McpConnectionError, McpError, UserError, redact
from .mcp_servers import McpHttpServer, McpServer, McpStdioServer, sdk

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["Connection"]

logger = get_logger("phi_core.tools.mcp")

_STDERR_LINES = 20


class Connection:
    """One live session, owned by its own task (the SDK's task groups and cancel scopes must be
    entered and left by one task, while tool calls come from many)."""

    def __init__(self, server: McpServer, on_tools_changed: Callable[[], None]) -> None:
        self.server = server
        self.on_tools_changed = on_tools_changed
        self.closing = asyncio.Event()
        self.lost: str | None = None
        self.stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self.client: Client | None = None
        self.task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[Client] | None = None
        # The transport itself ended (the process exited, its stdout closed): what tells a real
        # lost connection from an error response that happens to use the SDK's "closed" code.
        self.transport_ended = False
        # Requests waiting for an answer, each with the deadline a protocol fault may cut short.
        self.pending: set[_Pending] = set()
        # The last HTTP status of an answer that refused us (401/403...), for the messages.
        self.http_status: int | None = None

    def fault(self, what: str) -> None:
        """The server wrote something that is not JSON-RPC: fail the requests now waiting
        (the line carries no usable id, and the answer they wait for may never come)."""
        if not self.pending:
            logger.warning("MCP server %r wrote %s", self.server.label, what)
        for waiter in list(self.pending):
            waiter.fail(what)

    def ended(self, why: str) -> None:
        """The transport ended under us (not by :meth:`close`)."""
        self.transport_ended = True
        if self.lost is None and not self.closing.is_set():
            self.lost = why

    @contextlib.contextmanager
    def waiting(self, deadline: asyncio.Timeout) -> Iterator[_Pending]:
        """Register a request in flight (see :meth:`fault`) for the ``with`` block."""
        waiter = _Pending(deadline)
        self.pending.add(waiter)
        try:
            yield waiter
        finally:
            self.pending.discard(waiter)

    def refusal(self) -> str | None:
        """What to say when an HTTP server refused our credentials (None when it did not)."""
        server, status = self.server, self.http_status
        if status is None or not isinstance(server, McpHttpServer):
            return None
        what = {401: "401 Unauthorized", 403: "403 Forbidden"}.get(status, str(status))
        sent = sorted(server.headers or {})
        shown = (
            f"the headers sent: {', '.join(sent)}; their values are not shown"
            if sent
            else "no headers were sent"
        )
        return (
            f"MCP server {server.label!r} ({server.describe()}) refused the request: HTTP {what} "
            f"({shown}); pass its credentials with --mcp-header 'NAME: VALUE' (usually the "
            "header Authorization with the value 'Bearer <token>'; in Python: headers={...})"
        )

    @property
    def alive(self) -> bool:
        return (
            self.client is not None
            and self.lost is None
            and self.task is not None
            and not self.task.done()
        )

    def stderr_tail(self) -> str:
        if not self.stderr:
            return ""
        return "; its stderr ended with:\n" + redact("\n".join(list(self.stderr)[-8:]))

    async def open(self, timeout: float | None) -> Client:  # noqa: ASYNC109
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self.task = loop.create_task(self._own(), name=f"mcp:{self.server.label}")
        try:
            async with asyncio.timeout(timeout):
                self.client = await asyncio.shield(self._ready)
        except TimeoutError:
            await self.close()
            raise McpConnectionError(
                f"MCP server {self.server.label!r} ({self.server.describe()}) did not finish the "
                f"MCP handshake within {timeout:g}s{self.stderr_tail()}",
                server=self.server.label,
            ) from None
        except BaseException:
            await self.close()
            raise
        return self.client

    async def close(self) -> None:
        """Shut the session down and wait for it (a cancelled caller stops waiting; the shutdown
        still completes in the connection's own task)."""
        self.closing.set()
        if self.task is None:
            return
        if self._ready is not None and not self._ready.done():
            self.task.cancel()  # still connecting: stop the handshake (the SDK unwinds it)
        await asyncio.wait([self.task])

    def close_soon(self) -> None:
        """From a finalizer: ask the owner task to shut down (any thread, loop may be gone)."""
        task = self.task
        if task is None or task.done():
            return
        loop = task.get_loop()
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.closing.set)

    async def _own(self) -> None:
        assert self._ready is not None
        ready = self._ready
        mcp = sdk()
        helpers: list[asyncio.Task[None]] = []
        stderr: asyncio.Task[None] | None = None
        stderr_pipe: Any = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                stack.enter_context(_sdk_logs_to_debug())
                if isinstance(self.server, McpStdioServer):
                    read_fd, write_fd = os.pipe()
                    stderr_pipe = os.fdopen(read_fd, "rb", buffering=0)
                    errlog = stack.enter_context(os.fdopen(write_fd, "w"))
                    stderr = asyncio.create_task(self._read_stderr(stderr_pipe))
                    transport: Any = _stdio_transport(self, self.server, errlog)
                else:
                    transport = await _http_transport(stack, self.server, self)
                client = mcp.Client(
                    transport,
                    message_handler=self._on_message,
                    client_info=mcp.Implementation(name="phi-core", version=_version()),
                )
                try:
                    await stack.enter_async_context(client)
                finally:
                    if stderr is not None:  # the child has its own copy; ours would hide its EOF
                        errlog.close()
                if _wants_listen(client):
                    helpers.append(asyncio.create_task(self._listen(client)))
                ready.set_result(client)
                await self.closing.wait()
        except BaseException as exc:
            if not ready.done():
                if stderr is not None:  # the process is gone: let its last words arrive
                    await asyncio.wait([stderr], timeout=1.0)
                ready.set_exception(self._connect_error(exc))
            elif self.lost is None and not self.closing.is_set():
                self.transport_ended = True
                self.lost = _describe(exc)
                logger.info("MCP server %s: connection lost (%s)", self.server.label, self.lost)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if stderr is not None:
                helpers.append(stderr)
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            if stderr_pipe is not None:
                stderr_pipe.close()
            if not ready.done():  # pragma: no cover - every path above settles it
                ready.set_exception(McpConnectionError("MCP connection ended before it was ready"))

    def _connect_error(self, exc: BaseException) -> BaseException:
        if isinstance(exc, McpError | UserError | asyncio.CancelledError):
            return exc
        refused = self.refusal()
        if refused is not None:
            return McpConnectionError(refused + ".", server=self.server.label)
        not_mcp = _not_mcp(exc)
        if not_mcp is not None and isinstance(self.server, McpHttpServer):
            return McpConnectionError(
                f"{redact(self.server.url)} did not answer as an MCP server ({not_mcp}); check "
                "that the URL is the server's MCP endpoint.",
                server=self.server.label,
            )
        return McpConnectionError(
            f"Could not connect to MCP server {self.server.label!r} ({self.server.describe()}): "
            f"{_describe(exc)}{self.stderr_tail()}",
            server=self.server.label,
        )

    async def _on_message(self, message: Any) -> None:
        mcp = sdk()
        if isinstance(message, mcp.types.ToolListChangedNotification):
            self.on_tools_changed()
        elif isinstance(message, Exception):
            logger.debug("MCP server %s sent something unreadable: %s", self.server.label, message)

    async def _listen(self, client: Client) -> None:
        """On the 2026 protocol, change notices come on a ``subscriptions/listen`` stream."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self.on_tools_changed()
        except Exception as exc:  # the server may not serve it; the tool list then stays as is
            logger.debug("MCP server %s: no change notices (%s)", self.server.label, exc)

    async def _read_stderr(self, pipe: Any) -> None:
        """Keep the last lines the server wrote to stderr (for error messages); EOF means the
        process is gone, so the next call reconnects instead of failing."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            while line := await reader.readline():
                text = line.decode("utf-8", "replace").rstrip()
                self.stderr.append(text[:500])
                logger.debug("MCP server %s stderr: %s", self.server.label, redact(text))
            if self.lost is None and not self.closing.is_set() and self.client is not None:
                self.lost = "the server process exited"
        finally:
            transport.close()


class _Pending:
    """One request waiting for its answer: its deadline, and the protocol fault that cut it
    short (see :meth:`Connection.fault`)."""

    __slots__ = ("deadline", "failure")

    def __init__(self, deadline: asyncio.Timeout) -> None:
        self.deadline = deadline
        self.failure: str | None = None

    def fail(self, what: str) -> None:
        if self.failure is None and not self.deadline.expired():
            self.failure = what
            self.deadline.reschedule(asyncio.get_running_loop().time())


_GRACE = 2.0  # seconds a stdio server has to exit after its stdin closes, then after SIGTERM
_FLUSH = 0.5  # seconds for the writer to send what it accepted before stdin closes


@contextlib.asynccontextmanager
async def _stdio_transport(conn: Connection, server: McpStdioServer, errlog: Any) -> Any:
    """The stdio transport, as the SDK's ``stdio_client`` but: the server runs in a session (and
    process group) of its own, and that whole group - the server and whatever it started - is
    stopped when the connection closes (SIGTERM, then SIGKILL after a grace); a line that is not
    JSON-RPC fails the requests waiting instead of leaving them to their timeout; the end of
    the server's stdout marks the transport as ended."""
    import sys

    mcp = sdk()
    if sys.platform == "win32":  # pragma: no cover - the SDK's job objects do it there
        async with mcp.client.stdio.stdio_client(
            mcp.StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=server.environment(),
                cwd=server.cwd,
            ),
            errlog=errlog,
        ) as streams:
            yield streams
        return

    import anyio
    import mcp_types
    from mcp.client.stdio import get_default_environment
    from mcp.os.posix.utilities import terminate_posix_process_tree
    from mcp.shared.message import SessionMessage

    process = await anyio.open_process(
        [server.command, *server.args],
        env=get_default_environment() | server.environment(),
        stderr=errlog,
        cwd=server.cwd,
        start_new_session=True,
    )
    reader_send, reader_recv = anyio.create_memory_object_stream[Any](0)
    writer_send, writer_recv = anyio.create_memory_object_stream[Any](0)
    writer_done = anyio.Event()

    async def read_stdout() -> None:
        assert process.stdout is not None
        buffer = b""
        try:
            async for chunk in process.stdout:
                *lines, buffer = (buffer + chunk).split(b"\n")
                for raw in lines:
                    line = raw.decode("utf-8", "replace").strip()
                    if not line:
                        continue
                    try:
                        message = mcp_types.jsonrpc_message_adapter.validate_json(
                            line, by_name=False
                        )
                    except ValueError:
                        conn.fault(_not_jsonrpc(line))
                        continue
                    await reader_send.send(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            if not conn.closing.is_set():  # a moment for its exit code, for the message
                with anyio.CancelScope(shield=True):
                    await _exited(process, 0.5)
            # Before the stream closes: the requests it wakes must see why.
            code = process.returncode
            conn.ended(
                f"the server process exited with code {code}"
                if code is not None
                else "the server closed its stdout"
            )
            reader_send.close()

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with writer_recv:
                async for message in writer_recv:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((text + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            conn.ended("the server stopped reading its stdin")
            reader_send.close()
        finally:
            writer_done.set()

    async def stop() -> None:
        writer_send.close()
        with anyio.move_on_after(_FLUSH):
            await writer_done.wait()
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()  # type: ignore[union-attr]
        await _exited(process, _GRACE)
        # The whole group, even when the server itself has exited: what it started goes too.
        await terminate_posix_process_tree(process, _GRACE)
        await _exited(process, _GRACE)
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdout.aclose()  # type: ignore[union-attr]
        transport = getattr(getattr(process, "_process", None), "_transport", None)
        with contextlib.suppress(Exception):
            if transport is not None:
                transport.close()

    async with anyio.create_task_group() as group:
        group.start_soon(read_stdout)
        group.start_soon(write_stdin)
        try:
            yield reader_recv, writer_send
        finally:
            with anyio.CancelScope(shield=True):
                await stop()
                for stream in (reader_recv, writer_send, reader_send, writer_recv):
                    await stream.aclose()
            group.cancel_scope.cancel()


def _not_jsonrpc(line: str) -> str:
    shown = redact(line if len(line) <= 120 else line[:117] + "...")
    return f"a line that is not a JSON-RPC message to its stdout ({shown!r})"


async def _http_transport(
    stack: contextlib.AsyncExitStack, server: McpHttpServer, conn: Connection
) -> Any:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async def note_status(response: Any) -> None:
        if response.status_code in (401, 403, 407):
            conn.http_status = response.status_code

    http = await stack.enter_async_context(
        httpx2.AsyncClient(
            headers=dict(server.headers or {}),
            timeout=httpx2.Timeout(30.0, read=300.0),
            event_hooks={"response": [note_status]},
        )
    )
    return streamable_http_client(server.url, http_client=http)


def _wants_listen(client: Client) -> bool:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    tools = client.server_capabilities.tools
    return (
        client.protocol_version in MODERN_PROTOCOL_VERSIONS
        and tools is not None
        and bool(tools.list_changed)
    )


_PARSE_ERROR, _INVALID_REQUEST = -32700, -32600  # JSON-RPC's codes, as the SDK uses them


def _not_mcp(exc: BaseException) -> str | None:
    """What an HTTP server answered instead of MCP, when ``exc`` (the SDK's error for the
    handshake, perhaps in a group) says its reply was not JSON-RPC; else ``None``."""
    if isinstance(exc, BaseExceptionGroup):
        return next((w for e in exc.exceptions if (w := _not_mcp(e)) is not None), None)
    code, message = getattr(exc, "code", None), str(getattr(exc, "message", ""))
    if code == _PARSE_ERROR and message.startswith("Failed to parse"):
        return "its reply is not JSON-RPC"
    if code == _INVALID_REQUEST and message.startswith("Unexpected content type"):
        kind = message.partition(":")[2].strip()
        return f"it replied with {kind[:60] or 'no content type'}, not JSON-RPC or an event stream"
    return None


_sdk_quieted = 0
_sdk_saved: tuple[bool, list[logging.Handler]] | None = None


class _ToDebug(logging.Handler):
    """The MCP SDK's log records, as one-line debug records of phi's MCP logger: a server
    that is not MCP is one clear error from phi, not the SDK's tracebacks on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("MCP SDK (%s): %s", record.name, redact(record.getMessage()))


@contextlib.contextmanager
def _sdk_logs_to_debug() -> Iterator[None]:
    """While phi's MCP connections are open, the ``mcp`` loggers' records go to phi's MCP
    logger at debug level instead of stderr (counted: the last connection to end restores
    them)."""
    global _sdk_quieted, _sdk_saved
    sdk_logger = logging.getLogger("mcp")
    if _sdk_quieted == 0:
        _sdk_saved = (sdk_logger.propagate, list(sdk_logger.handlers))
        for handler in _sdk_saved[1]:
            sdk_logger.removeHandler(handler)
        sdk_logger.addHandler(_ToDebug())
        sdk_logger.propagate = False
    _sdk_quieted += 1
    try:
        yield
    finally:
        _sdk_quieted -= 1
        if _sdk_quieted == 0 and _sdk_saved is not None:
            propagate, handlers = _sdk_saved
            for handler in list(sdk_logger.handlers):
                sdk_logger.removeHandler(handler)
            for handler in handlers:
                sdk_logger.addHandler(handler)
            sdk_logger.propagate = propagate
            _sdk_saved = None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc) or type(exc).__name__
    return redact(f"{type(exc).__name__}: {text}" if not isinstance(exc, McpError) else text)


def _version() -> str:
    try:
        return importlib.metadata.version("phi-core")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return "0"


async def _exited(process: Any, within: float) -> bool:
    """Whether process exited within within seconds (polled: ``process.wait()`` would
    also wait for pipes a surviving child may hold)."""
    import anyio

    with anyio.move_on_after(within):
        while process.returncode is None:  # noqa: ASYNC110 - no event to wait for
            await anyio.sleep(0.01)
    return process.returncode is not None
