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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import McpConnectionError, McpError, UserError, redact
from .mcp_servers import McpHttpServer, McpServer, McpStdioServer, sdk

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["Connection"]

logger = logging.getLogger("phi_core.tools.mcp")

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
                if isinstance(self.server, McpStdioServer):
                    read_fd, write_fd = os.pipe()
                    stderr_pipe = os.fdopen(read_fd, "rb", buffering=0)
                    errlog = stack.enter_context(os.fdopen(write_fd, "w"))
                    stderr = asyncio.create_task(self._read_stderr(stderr_pipe))
                    transport: Any = mcp.client.stdio.stdio_client(
                        mcp.StdioServerParameters(
                            command=self.server.command,
                            args=list(self.server.args),
                            env=self.server.environment(),
                            cwd=self.server.cwd,
                        ),
                        errlog=errlog,
                    )
                else:
                    transport = await _http_transport(stack, self.server)
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


async def _http_transport(stack: contextlib.AsyncExitStack, server: McpHttpServer) -> Any:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    http = await stack.enter_async_context(
        httpx2.AsyncClient(
            headers=dict(server.headers or {}),
            timeout=httpx2.Timeout(30.0, read=300.0),
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
