"""Fixtures that start the SDK-built test MCP server (``mcp_server_for_tests.py``) for real: as a
stdio subprocess, or as a streamable-HTTP server subprocess on 127.0.0.1 (port 0)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from phi_core.tools import McpClient, McpHttpServer, McpStdioServer

SERVER = Path(__file__).with_name("mcp_server_for_tests.py")


@dataclass
class McpTestServer:
    transport: str
    marks: Path
    spec: McpStdioServer | McpHttpServer
    process: subprocess.Popen[bytes] | None = None

    def client(self, **options: Any) -> McpClient:
        return McpClient(self.spec, **options)

    async def wait_for_mark(self, name: str, within: float = 10.0) -> bool:
        """The server leaves marks on its own schedule; look for one for a bounded time."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if (self.marks / name).exists():
                return True
            await asyncio.sleep(0.02)
        return False


def stdio_spec(marks: Path, **env: str) -> McpStdioServer:
    return McpStdioServer(sys.executable, [str(SERVER)], env={"MCP_TEST_MARKS": str(marks), **env})


def start_http_server(marks: Path) -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http"],
        stdout=subprocess.PIPE,
        env={**os.environ, "MCP_TEST_MARKS": str(marks)},
    )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    return process, f"http://127.0.0.1:{port}/mcp"


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)
    if process.stdout is not None:
        process.stdout.close()


@contextmanager
def running_server(transport: str, tmp_path: Path) -> Iterator[McpTestServer]:
    marks = tmp_path / "marks"
    marks.mkdir()
    if transport == "stdio":
        yield McpTestServer("stdio", marks, stdio_spec(marks))
        return
    process, url = start_http_server(marks)
    try:
        yield McpTestServer("http", marks, McpHttpServer(url), process)
    finally:
        stop(process)


@pytest.fixture(params=["stdio", "http"])
def mcp_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[McpTestServer]:
    """The test server over each transport."""
    with running_server(request.param, tmp_path) as server:
        yield server


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[McpTestServer]:
    with running_server("http", tmp_path) as server:
        yield server


@pytest.fixture
def stdio_server(tmp_path: Path) -> Iterator[McpTestServer]:
    with running_server("stdio", tmp_path) as server:
        yield server


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def wait_until_gone(pid: int, within: float = 10.0) -> bool:
    """A process's end is not awaitable from here; look for a bounded time."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if process_gone(pid):
            return True
        await asyncio.sleep(0.02)
    return False
