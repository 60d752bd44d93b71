"""MCP client on the official ``mcp`` SDK: stdio subprocesses and streamable-HTTP servers.

:class:`McpClient` is one connection to one server. It is an async context manager (or close it
with :meth:`McpClient.aclose`); a client that is garbage-collected while connected is closed too.
The connection lives in a task of its own, so the client may be used from any task: a run, a
race branch, the command line. What the client does for its callers:

- **tools**: :meth:`McpClient.get_tools` gives one :class:`~phi_core.tools.mcp_tools.McpToolAdapter`
  per server tool (names checked against the providers' rule, prefixed on request); the list is
  fetched again after the server says it changed (``notifications/tools/list_changed``, on the
  2026 protocol through a ``subscriptions/listen`` stream).
- **timeouts**: every request has one (``timeout=30`` seconds by default, ``None`` for none); a
  request that runs out, or whose caller is cancelled, is cancelled on the server too
  (``notifications/cancelled``, sent by the SDK).
- **servers that exit**: a call in flight fails with :class:`~phi_core.errors.McpConnectionError`
  naming the server and the last lines of its stderr; the next call starts a new connection,
  trying up to ``reconnect.max_attempts`` times with exponential back-off.
- **environment**: a stdio server gets only ``PATH``, ``HOME`` and the locale variables from our
  environment (plus the few harmless ones the SDK itself always passes: ``LOGNAME``, ``SHELL``,
  ``TERM``, ``USER``) and what the caller passes in ``env`` - never our API keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shlex
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import McpConnectionError, McpError, McpTimeoutError, UserError
from .mcp_connection import Connection
from .mcp_servers import McpHttpServer, McpReconnect, McpServer, McpStdioServer

if TYPE_CHECKING:
    from mcp.shared.dispatcher import ProgressFnT
    from mcp.types import CallToolResult, Tool

    from .mcp_tools import McpToolAdapter

__all__ = ["DEFAULT_MCP_TIMEOUT", "McpClient", "mcp_tools"]

logger = logging.getLogger("phi_core.tools.mcp")

DEFAULT_MCP_TIMEOUT = 30.0
"""Seconds a request to an MCP server may take before it is cancelled (the book's default)."""

_LIST_PAGES = 100
_UNSET: Any = object()


class McpClient:
    """A connection to one MCP server; see the module docstring.

    Args:
        server: an :class:`McpStdioServer` or :class:`McpHttpServer`.
        prefix: names the server's tools ``{prefix}__{name}`` (for two servers with one tool name).
        timeout: seconds per request (``None``: no limit); cancelled on the server when exceeded.
        connect_timeout: seconds for starting the server and the MCP handshake.
        reconnect: how to reconnect after the server went away.
    """

    def __init__(
        self,
        server: McpServer,
        *,
        prefix: str | None = None,
        timeout: float | None = DEFAULT_MCP_TIMEOUT,
        connect_timeout: float | None = DEFAULT_MCP_TIMEOUT,
        reconnect: McpReconnect | None = None,
    ) -> None:
        if not isinstance(server, McpStdioServer | McpHttpServer):
            raise UserError(
                f"McpClient needs an McpStdioServer or McpHttpServer, got {server!r}; "
                "McpClient.from_spec('CMD ARGS' or URL) builds one from a string."
            )
        for what, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if value is not None and value <= 0:
                raise UserError(f"McpClient {what} must be > 0 seconds or None, got {value!r}.")
        if prefix is not None:
            from .mcp_tools import check_prefix

            check_prefix(prefix)
        self.server = server
        self.name = server.label
        self.prefix = prefix
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.reconnect = reconnect or McpReconnect()
        self._slot = _Slot()
        self._lock = asyncio.Lock()
        self._closed = False
        self._tools: list[Tool] | None = None
        self._adapters: list[McpToolAdapter] | None = None
        # Garbage-collected while connected: ask the connection task to shut the server down.
        self._finalizer = weakref.finalize(self, _Slot.close_soon, self._slot)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self.connected else "idle")
        return f"McpClient({self.name!r}, {self.server.describe()!r}, {state})"

    # ------------------------------------------------------------------ construction

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | Path | None = None,
        name: str | None = None,
        **options: Any,
    ) -> McpClient:
        """A client (not yet connected) for a server started as ``command args``."""
        return cls(McpStdioServer(command, args, env, cwd, name), **options)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        **options: Any,
    ) -> McpClient:
        """A client (not yet connected) for a streamable-HTTP server at ``url``."""
        return cls(McpHttpServer(url, headers, name), **options)

    @classmethod
    def from_spec(cls, spec: str, **options: Any) -> McpClient:
        """``'http(s)://…'`` is an HTTP server; anything else is a command line (shell quoting)."""
        text = spec.strip() if isinstance(spec, str) else ""
        if not text:
            raise UserError(
                f"An MCP server spec must be a command line or a URL, got {spec!r}; "
                "for example 'python my_server.py' or 'http://127.0.0.1:8000/mcp'."
            )
        if re.match(r"(?i)https?://", text):
            return cls.http(text, **options)
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise UserError(f"Cannot split the MCP server command {spec!r}: {exc}.") from None
        return cls.stdio(words[0], words[1:], **options)

    @classmethod
    async def connect_stdio(
        cls, command: str, args: Sequence[str] = (), env: Mapping[str, str] | None = None, **kw: Any
    ) -> McpClient:
        """Start ``command args`` and connect (the book's ``McpClient::connect_stdio``)."""
        client = cls.stdio(command, args, env, **kw)
        await client.connect()
        return client

    @classmethod
    async def connect_http(cls, url: str, **kw: Any) -> McpClient:
        """Connect to a streamable-HTTP server (the book's ``McpClient::connect_http``)."""
        client = cls.http(url, **kw)
        await client.connect()
        return client

    # ------------------------------------------------------------------ lifetime

    @property
    def _conn(self) -> Connection | None:
        return self._slot.conn

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._conn.alive

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def server_info(self) -> Any:
        """The server's ``Implementation`` (name, version) once connected, else ``None``."""
        conn = self._conn
        return conn.client.server_info if conn is not None and conn.client is not None else None

    async def __aenter__(self) -> McpClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def connect(self) -> None:
        """Start or reach the server and finish the handshake (a no-op when connected).

        Raises:
            McpConnectionError: the server could not be started or reached.
        """
        await self._live(attempts=1)

    async def aclose(self) -> None:
        """Close the session and stop a stdio server's process; the client cannot be reused."""
        self._closed = True
        async with self._lock:
            conn, self._slot.conn = self._conn, None
            if conn is not None:
                await conn.close()
            self._finalizer.detach()

    async def _live(self, attempts: int | None = None) -> Connection:
        conn = self._conn
        if conn is not None and conn.alive:
            return conn
        async with self._lock:
            if self._closed:
                raise McpConnectionError(
                    f"The MCP client for {self.name!r} was closed (aclose() or the end of its "
                    "`async with` block) and cannot be reopened; create a new client or agent.",
                    server=self.name,
                )
            conn = self._conn
            if conn is not None and conn.alive:
                return conn
            reconnecting = conn is not None
            if conn is not None:
                await conn.close()
                self._slot.conn = None
                self._slot.stale = True  # a restarted server may offer other tools
            tries = attempts or (self.reconnect.max_attempts if reconnecting else 1)
            error: McpConnectionError | None = None
            for attempt in range(1, tries + 1):
                if attempt > 1:
                    await asyncio.sleep(self.reconnect.delay(attempt - 1))
                fresh = Connection(self.server, self._slot.mark_stale)
                try:
                    await fresh.open(self.connect_timeout)
                except McpConnectionError as exc:
                    error = exc
                    logger.info("MCP server %s: connect attempt %d failed", self.name, attempt)
                    continue
                self._slot.conn = fresh
                return fresh
            assert error is not None
            if tries > 1:
                raise McpConnectionError(
                    f"{error} (gave up after {tries} attempts)", server=self.name
                ) from None
            raise error

    # ------------------------------------------------------------------ requests

    async def list_tools(self) -> list[Tool]:
        """Fetch the server's tools (every page) and remember them for :meth:`get_tools`."""
        conn = await self._live()
        assert conn.client is not None
        client = conn.client
        tools: list[Tool] = []
        cursor: str | None = None

        async def page() -> Any:
            return await client.list_tools(cursor=cursor, cache_mode="refresh")

        self._slot.stale = False
        for _ in range(_LIST_PAGES):
            result = await self._request(conn, "tools/list", page())
            tools.extend(result.tools)
            cursor = result.next_cursor
            if cursor is None:
                break
        self._tools = tools
        self._adapters = None
        return list(tools)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = _UNSET,  # noqa: ASYNC109 - per call, cancelled on the server
        progress: ProgressFnT | None = None,
    ) -> CallToolResult:
        """Call ``name`` (the server's own name for it) and return the SDK's ``CallToolResult``.

        Raises:
            McpConnectionError: the server could not be reached, or went away during the call.
            McpTimeoutError: no answer within ``timeout`` (the call was cancelled on the server).
            McpError: the server refused the request (``code`` is its JSON-RPC error code).
        """
        conn = await self._live()
        assert conn.client is not None
        limit = self.timeout if timeout is _UNSET else timeout
        result: CallToolResult = await self._request(
            conn,
            f"the call to {name!r}",
            conn.client.call_tool(
                name, dict(arguments or {}), read_timeout_seconds=limit, progress_callback=progress
            ),
            limit,
        )
        return result

    async def _request(
        self, conn: Connection, what: str, request: Any, limit: float | None = _UNSET
    ) -> Any:
        limit = self.timeout if limit is _UNSET else limit
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        try:
            async with asyncio.timeout(limit):  # list requests have no SDK timeout of their own
                return await request
        except TimeoutError:
            raise McpTimeoutError(
                f"MCP server {self.name!r} did not answer {what} within {limit:g}s; "
                "the request was cancelled on the server.",
                server=self.name,
                code=REQUEST_TIMEOUT,
            ) from None
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise McpTimeoutError(
                    f"MCP server {self.name!r} did not answer {what} within {limit:g}s; "
                    "the request was cancelled on the server.",
                    server=self.name,
                    code=exc.code,
                ) from None
            if exc.code == CONNECTION_CLOSED:
                conn.lost = conn.lost or "the connection closed"
                raise McpConnectionError(
                    f"MCP server {self.name!r} went away during {what} ({conn.lost}); "
                    f"the next call starts a new connection{conn.stderr_tail()}",
                    server=self.name,
                    code=exc.code,
                ) from None
            raise McpError(
                f"MCP server {self.name!r} refused {what}: {exc.error.message} "
                f"(JSON-RPC error {exc.code})",
                server=self.name,
                code=exc.code,
            ) from None

    # ------------------------------------------------------------------ as a toolset

    async def get_tools(self) -> list[McpToolAdapter]:
        """One tool per server tool, listed on first use and again after a change notice."""
        from .mcp_tools import adapters_for

        if self._tools is None or self._slot.stale:
            await self.list_tools()
        assert self._tools is not None
        if self._adapters is None:
            self._adapters = adapters_for(self, self._tools)
        return list(self._adapters)

    def for_branch(self) -> McpClient:
        """A client of its own for one race branch: same server and tool list, its own session
        (a stdio server runs once per branch that calls it), opened on its first call."""
        twin = McpClient(
            self.server,
            prefix=self.prefix,
            timeout=self.timeout,
            connect_timeout=self.connect_timeout,
            reconnect=self.reconnect,
        )
        twin._tools = list(self._tools) if self._tools is not None else None
        return twin

    @property
    def tools_changed(self) -> bool:
        """The server said its tool list changed since it was last fetched."""
        return self._slot.stale


class _Slot:
    """The state a client shares with its connection task and its finalizer (neither may hold
    the client itself, or it would never be collected)."""

    __slots__ = ("conn", "stale")

    def __init__(self) -> None:
        self.conn: Connection | None = None
        self.stale = False

    def mark_stale(self) -> None:
        self.stale = True

    def close_soon(self) -> None:
        if self.conn is not None:
            self.conn.close_soon()


@contextlib.asynccontextmanager
async def mcp_tools(specs: Sequence[str], **options: Any) -> AsyncIterator[list[McpToolAdapter]]:
    """The tools of every server in ``specs`` (command lines or URLs, see
    :meth:`McpClient.from_spec`), connected for the block and closed after it::

        async with mcp_tools(["python my_server.py", "http://127.0.0.1:8000/mcp"]) as tools:
            await agent_loop("...", AgentContext(tools=tools), config)

    Raises:
        McpConnectionError: a server could not be started or reached.
        UserError: a bad spec, or two servers offering one tool name.
    """
    from .toolset import close_toolsets, merge_tools

    clients = [McpClient.from_spec(spec, **options) for spec in specs]
    try:
        yield await merge_tools([], clients)
    finally:
        await close_toolsets(clients)
