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
  trying up to ``reconnect.max_attempts`` times with exponential back-off. Only a transport
  that really ended counts: an error response the server sent (even with the SDK's
  "connection closed" code -32000) is an :class:`~phi_core.errors.McpError` with its message.
- **servers that break the protocol**: an answer that does not follow the MCP schema (a tool
  list with a bad tool refuses the whole list; a malformed call result) is an ``McpError``
  naming the server and the field; a stdout line that is not JSON-RPC fails the requests waiting
  at once (one warning line each), not at their timeout.
- **processes**: a stdio server runs in a process group of its own; the whole group is stopped
  (SIGTERM, SIGKILL after a grace) when the connection closes.
- **credentials**: an HTTP server's ``headers`` (or those of :func:`http_headers` for specs)
  go with every request and are never shown; a 401/403 says so and what to pass.
- **environment**: a stdio server gets only ``PATH``, ``HOME`` and the locale variables from our
  environment (plus the few harmless ones the SDK itself always passes: ``LOGNAME``, ``SHELL``,
  ``TERM``, ``USER``) and what the caller passes in ``env`` - never our API keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
import shlex
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._logging import get_logger
from ..errors import McpConnectionError, McpError, McpTimeoutError, UserError
from .mcp_connection import Connection
from .mcp_servers import McpHttpServer, McpReconnect, McpServer, McpStdioServer

if TYPE_CHECKING:
    from mcp.shared.dispatcher import ProgressFnT
    from mcp.types import CallToolResult, Tool

    from .mcp_tools import McpToolAdapter

__all__ = ["DEFAULT_MCP_TIMEOUT", "McpClient", "http_headers", "mcp_tools", "parse_header"]

logger = get_logger("phi_core.tools.mcp")

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
        """``'http(s)://…'`` is an HTTP server; anything else is a command line (shell quoting).

        An HTTP server gets ``headers=`` when given, else those of :func:`http_headers` in effect;
        a command line ignores both."""
        text = spec.strip() if isinstance(spec, str) else ""
        if not text:
            raise UserError(
                f"An MCP server spec must be a command line or a URL, got {spec!r}; "
                "for example 'python my_server.py' or 'http://127.0.0.1:8000/mcp'."
            )
        if re.match(r"(?i)https?://", text):
            if options.get("headers") is None and (given := _HEADERS.get()) is not None:
                options = {**options, "headers": given}
            return cls.http(text, **options)
        options.pop("headers", None)  # only HTTP servers take headers
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
            conn.client.call_tool(name, dict(arguments or {}), progress_callback=progress),
            limit,
        )
        return result

    async def _request(
        self, conn: Connection, what: str, request: Any, limit: float | None = _UNSET
    ) -> Any:
        """Await ``request``; every way it can fail becomes an :class:`McpError` that names the
        server and says what happened (see the module docstring)."""
        limit = self.timeout if limit is _UNSET else limit
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR
        from pydantic import ValidationError

        fault: str | None = None
        try:
            # Our deadline, not the SDK's: its REQUEST_TIMEOUT code is one servers send too.
            async with asyncio.timeout(limit) as deadline:
                with conn.waiting(deadline) as waiter:
                    try:
                        return await request
                    finally:
                        fault = waiter.failure
        except TimeoutError:
            if fault is not None:
                logger.warning("MCP server %r wrote %s during %s", self.name, fault, what)
                raise McpError(
                    f"MCP server {self.name!r} wrote {fault} while {what} waited for its answer; "
                    "an MCP server must write only MCP messages to its stdout (logs go to "
                    "stderr), so the answer cannot be trusted to come.",
                    server=self.name,
                ) from None
            assert limit is not None
            raise McpTimeoutError(
                f"MCP server {self.name!r} did not answer {what} within {limit:g}s; "
                "the request was cancelled on the server.",
                server=self.name,
                code=_REQUEST_TIMEOUT,
            ) from None
        except ValidationError as exc:
            problem = _malformed(exc)
            logger.warning("MCP server %r: malformed answer to %s (%s)", self.name, what, problem)
            raise McpError(
                f"MCP server {self.name!r} answered {what} with something that does not follow "
                f"the MCP schema: {problem}",
                server=self.name,
            ) from None
        except MCPError as exc:
            refused = conn.refusal() if exc.code == INTERNAL_ERROR else None
            if refused is not None:
                raise McpConnectionError(f"{refused}.", server=self.name, code=exc.code) from None
            if exc.code == CONNECTION_CLOSED and _closed(conn, exc):
                conn.lost = conn.lost or "the connection closed"
                again = "; its next call starts it again" if what.startswith("the call") else ""
                raise McpConnectionError(
                    f"MCP server {self.name!r} went away during {what} ({conn.lost}){again}"
                    f"{conn.stderr_tail()}",
                    server=self.name,
                    code=exc.code,
                ) from None
            # An error response the server sent (whatever its code): its own words.
            raise McpError(
                f"MCP server {self.name!r} answered {what} with an error: {exc.error.message} "
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


_REQUEST_TIMEOUT = -32001  # the SDK's code for a request that ran out of time
# What the SDK itself says when it resolves a request because the transport closed under it
# (an HTTP server's streams); a server's own error response with code -32000 says otherwise.
_SDK_CLOSED = ("Connection closed", "SSE stream ended without a response")


def _closed(conn: Connection, exc: Any) -> bool:
    """Did the connection really close (the transport ended), or did the server answer with an
    error whose code happens to be the SDK's CONNECTION_CLOSED (-32000, common for servers)?"""
    if conn.transport_ended or conn.lost is not None:
        return True
    return isinstance(conn.server, McpHttpServer) and exc.error.message in _SDK_CLOSED


def _malformed(exc: Any) -> str:
    """The first few problems of a pydantic ValidationError, one line (``tools.13.inputSchema
    .type: Input should be 'object', got 'string'``)."""
    problems = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error.get("loc", ())) or "the answer"
        got = error.get("input")
        shown = repr(got) if not isinstance(got, dict | list) else type(got).__name__
        problems.append(f"{where}: {error.get('msg', 'invalid')}, got {shown[:60]}")
    more = exc.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


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


_HEADERS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "phi_mcp_http_headers", default=None
)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def parse_header(text: str) -> tuple[str, str]:
    """``'Name: value'`` as ``(name, value)``; the value is registered as a secret at once
    (it never appears in a message, this function's own included).

    Raises:
        UserError: not ``Name: value``, or a name HTTP does not allow.
    """
    from ..errors import register_secret

    name, colon, value = text.partition(":") if isinstance(text, str) else ("", "", "")
    name, value = name.strip(), value.strip()
    if value:
        register_secret(value)
    if not colon or not value or not _HEADER_NAME.match(name):
        if not colon:  # the whole text may be the secret itself: show none of it
            got = "no ':' in it"
        else:
            shown = name if _HEADER_NAME.match(name) else "..."
            got = f"one named {shown!r}" + (" with no value" if not value else "")
        raise UserError(
            "An MCP header must read 'Name: value' (e.g. the name Authorization and the value "
            f"'Bearer <token>'); got {got}."
        )
    return name, value


@contextlib.contextmanager
def http_headers(headers: Mapping[str, str] | None) -> Iterator[None]:
    """HTTP servers built from specs (:func:`mcp_tools`, :meth:`McpClient.from_spec`) inside
    the block, in this task and those it starts, send ``headers`` with every request (how
    ``phi run --mcp URL --mcp-header ...`` passes them on)."""
    token = _HEADERS.set(dict(headers) if headers else None)
    try:
        yield
    finally:
        _HEADERS.reset(token)


@contextlib.asynccontextmanager
async def mcp_tools(specs: Sequence[str], **options: Any) -> AsyncIterator[list[McpToolAdapter]]:
    """The tools of every server in ``specs`` (command lines or URLs, see
    :meth:`McpClient.from_spec`), connected for the block and closed after it::

        async with mcp_tools(["python my_server.py", "http://127.0.0.1:8000/mcp"]) as tools:
            await agent_loop("...", AgentContext(tools=tools), config)

    ``options`` go to every client (``headers=`` only to the HTTP servers).

    Raises:
        McpConnectionError: a server could not be started, reached or authenticated.
        McpError: a server failed while its tools were listed (crashed, sent a malformed list).
        UserError: a bad spec, or two servers offering one tool name.
    """
    from .toolset import close_toolsets, merge_tools

    clients = [McpClient.from_spec(spec, **options) for spec in specs]
    try:
        yield await merge_tools([], clients)
    finally:
        await close_toolsets(clients)
