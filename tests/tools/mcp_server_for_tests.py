"""An MCP server for phi-core's tests, built with the official SDK (``mcp``).

Run it as ``python mcp_server_for_tests.py`` (stdio) or ``python mcp_server_for_tests.py --http``
(streamable HTTP on 127.0.0.1, port chosen by the OS and printed as the first line of stdout).

When ``MCP_TEST_MARKS`` names a directory, the server leaves files there that tests read:
``started-<pid>`` when it starts, and ``cancelled-<tag>`` for a call to ``slow`` that was cancelled.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import EmbeddedResource, ImageContent, TextResourceContents

# A 1x1 PNG.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
    )
).decode()

server = MCPServer("phi-test-server", log_level="WARNING")


def _mark(name: str) -> None:
    marks = os.environ.get("MCP_TEST_MARKS")
    if marks:
        Path(marks, name).write_text("1")


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(message: str) -> str:
    """Always fail with the given message."""
    raise ToolError(message)


@server.tool()
async def slow(seconds: float, tag: str = "slow") -> str:
    """Sleep, then answer; a cancelled call leaves a mark."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        _mark(f"cancelled-{tag}")
        raise
    return f"slept {seconds}"


@server.tool()
def die() -> str:
    """Exit the server process in the middle of the call."""
    print("dying on purpose", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def env_names() -> list[str]:
    """The names of the server's environment variables."""
    return sorted(os.environ)


@server.tool()
def picture() -> list[ImageContent]:
    """A tiny picture."""
    return [ImageContent(type="image", data=PIXEL, mime_type="image/png")]


@server.tool()
def document() -> list[EmbeddedResource]:
    """A text document embedded as a resource."""
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(uri="file:///notes.txt", text="the notes"),
        )
    ]


@server.tool(name="fs.read/file")
def read_file_oddly_named(path: str) -> str:
    """A tool whose name providers would refuse."""
    return f"read {path}"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `late_tool` and tell the client the tool list changed."""

    def late_tool() -> str:
        """A tool added while the server runs."""
        return "late"

    server.add_tool(late_tool)
    await ctx.notify_tools_changed()  # 2026 protocol: subscriptions/listen streams
    if ctx.request_context.protocol_version != "2026-07-28":  # older clients: a notification
        await ctx.request_context.session.send_tool_list_changed()
    return "grown"


def _serve_http() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    _mark(f"started-{os.getpid()}")
    if sys.argv[1:] == ["--http"]:
        _serve_http()
    else:
        server.run("stdio")
