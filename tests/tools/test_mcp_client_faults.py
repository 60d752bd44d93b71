"""The MCP client against servers that misbehave: a malformed tool list or result, a server's own
-32000 error, a garbage stdout line, a server that spawns children or crashes while listing,
an HTTP server that wants credentials, and SIGTERM to ``phi run``."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

import phi_core.tools.mcp as mcp_module
from phi_core.cli import app
from phi_core.errors import McpConnectionError, McpError, UserError
from phi_core.tools import McpClient

pytestmark = pytest.mark.server

# A raw JSON-RPC stdio server; each tool misbehaves in its own way.
NAUGHTY = r"""
import json, os, subprocess, sys, time

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

TOOLS = [{"name": n, "inputSchema": {"type": "object"}}
         for n in ["pid", "rpcerror", "badjson", "nullresult", "malformed", "spawn", "hang"]]
if "strschema" in sys.argv:
    TOOLS.append({"name": "strschema", "inputSchema": {"type": "string"}})
for line in sys.stdin:
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "naughty", "version": "1"}}})
    elif method == "tools/list":
        if "crash_on_list" in sys.argv:
            os._exit(5)
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        text = lambda t: send({"jsonrpc": "2.0", "id": mid,
                               "result": {"content": [{"type": "text", "text": t}]}})
        if name == "pid":
            text(str(os.getpid()))
        elif name == "rpcerror":
            send({"jsonrpc": "2.0", "id": mid,
                  "error": {"code": -32000, "message": "quota exceeded for this user"}})
        elif name == "badjson":
            sys.stdout.write("this is not json {{{\n"); sys.stdout.flush()
        elif name == "nullresult":
            send({"jsonrpc": "2.0", "id": mid, "result": None})
        elif name == "malformed":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": "notalist"}})
        elif name == "spawn":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            text(str(child.pid))
        elif name == "hang":
            time.sleep(600)
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
"""


@pytest.fixture
def naughty(tmp_path: Path) -> Path:
    path = tmp_path / "naughty.py"
    path.write_text(NAUGHTY)
    return path


def client(server: Path, *args: str, **options: object) -> McpClient:
    return McpClient.stdio(sys.executable, [str(server), *args], name="naughty", **options)  # type: ignore[arg-type]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its new parent) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def wait_gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


# --------------------------------------------------------------------------- 1. tools/list


async def test_a_malformed_tool_list_is_an_mcp_error_naming_the_server_and_the_field(
    naughty: Path,
) -> None:
    async with client(naughty, "strschema") as mcp:
        with pytest.raises(McpError) as caught:
            await mcp.get_tools()
    message = str(caught.value)
    assert "'naughty'" in message and "tools/list" in message
    assert "inputSchema.type" in message and "'string'" in message


def test_phi_run_with_a_malformed_tool_list_fails_the_run_with_one_end_event(
    naughty: Path, tmp_path: Path
) -> None:
    events, code, output = phi_run_json(tmp_path, f"{sys.executable} {naughty} strschema")
    assert code == 1, output
    assert [e["type"] for e in events] == ["agent_end", "run_result"]
    assert "inputSchema" in str(events[-1]["error"])
    assert "Traceback" not in output


# --------------------------------------------------------------------------- 2. -32000


async def test_a_servers_own_32000_error_is_its_message_and_the_server_keeps_running(
    naughty: Path,
) -> None:
    async with client(naughty) as mcp:
        before = (await mcp.call_tool("pid")).content[0].text  # type: ignore[union-attr]
        with pytest.raises(McpError) as caught:
            await mcp.call_tool("rpcerror")
        assert not isinstance(caught.value, McpConnectionError)
        assert "quota exceeded for this user" in str(caught.value)
        assert caught.value.code == -32000
        assert mcp.connected
        after = (await mcp.call_tool("pid")).content[0].text  # type: ignore[union-attr]
    assert after == before  # not restarted


# --------------------------------------------------------------------------- 3. bad answers


@pytest.mark.parametrize("tool", ["badjson", "nullresult"])
async def test_a_line_that_is_not_json_rpc_fails_the_call_at_once(
    naughty: Path, tool: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with client(naughty, timeout=20) as mcp:
        started = time.monotonic()
        with pytest.raises(McpError) as caught:
            await mcp.call_tool(tool)
        assert time.monotonic() - started < 5
        assert "not a JSON-RPC message" in str(caught.value) and "'naughty'" in str(caught.value)
        assert (await mcp.call_tool("pid")).content  # the connection still works
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'naughty'" in w and repr(tool) in w for w in warnings)


async def test_a_malformed_result_is_an_error_result_and_a_one_line_warning(
    naughty: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with client(naughty) as mcp:
        tools = {t.remote_name: t for t in await mcp.get_tools()}
        result = await tools["malformed"].execute({}, None)  # type: ignore[arg-type]
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "'naughty'" in text and "'malformed'" in text and "content" in text
    assert not [r for r in caplog.records if r.exc_info]
    assert any(
        "'malformed'" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
    )


# --------------------------------------------------------------------------- 4. headers


class _Refuse(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", "Bearer")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def refusing_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_401_says_so_and_what_to_pass_without_showing_the_header(
    refusing_url: str,
) -> None:
    secret = "tok-abcdefgh-123456789"
    with pytest.raises(McpConnectionError) as caught:
        async with McpClient.http(refusing_url, headers={"Authorization": f"Bearer {secret}"}):
            pass
    message = str(caught.value)
    assert "401 Unauthorized" in message and "--mcp-header" in message
    assert "Authorization" in message and secret not in message


def test_phi_run_mcp_header_reaches_the_http_server_and_is_never_shown(
    refusing_url: str, tmp_path: Path
) -> None:
    secret = "tok-zyxwvuts-987654321"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripted:a": ["hi"]}))
    result = CliRunner().invoke(
        app,
        ["run", "hi", "-m", "scripted:a", "--script", str(script), "--no-log",
         "--mcp", refusing_url, "--mcp-header", f"Authorization: Bearer {secret}"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert (
        "401 Unauthorized" in result.output and "the headers sent: Authorization" in result.output
    )
    assert secret not in result.output


class _NotMcp(BaseHTTPRequestHandler):
    """An HTTP server that is not MCP: JSON that is not JSON-RPC at /json, a web page else."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        json_reply = self.path.startswith("/json")
        body = b'{"object": "list", "data": []}' if json_reply else b"<html>hello</html>"
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if json_reply else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *_args: object) -> None:
        pass


class _Quiet(ThreadingHTTPServer):
    """Keeps a request's failure (the client hanging up once it saw the reply is no MCP)
    instead of printing it to stderr, where the CLI's own output is checked."""

    failures: list[BaseException | None]

    def handle_error(self, request: object, client_address: object) -> None:
        self.failures.append(sys.exc_info()[1])


@pytest.fixture
def not_mcp_url() -> Iterator[str]:
    server = _Quiet(("127.0.0.1", 0), _NotMcp)
    server.failures = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("path", "why"),
    [("/json/mcp", "its reply is not JSON-RPC"), ("/page", "it replied with text/html")],
)
def test_an_http_server_that_is_not_mcp_is_one_clear_error_without_the_sdks_tracebacks(
    not_mcp_url: str, tmp_path: Path, path: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripted:a": ["hi"]}))
    url = not_mcp_url + path
    result = CliRunner().invoke(
        app,
        ["run", "hi", "-m", "scripted:a", "--script", str(script), "--no-log", "--mcp", url],
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {url} did not answer as an MCP server ({why}")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output and "validation error" not in result.output
    # the SDK's own error records (with their tracebacks) went to phi's debug log, not stderr
    assert not [r for r in caplog.records if r.name.startswith("mcp") and r.levelno > 20]
    assert logging.getLogger("mcp").propagate  # the SDK's loggers are as they were after it


async def test_http_headers_apply_to_http_specs_only() -> None:
    with mcp_module.http_headers({"Authorization": "Bearer xyz-123456789"}):
        web = McpClient.from_spec("http://127.0.0.1:9/mcp")
        local = McpClient.from_spec("python server.py")
    assert dict(web.server.headers or {}) == {"Authorization": "Bearer xyz-123456789"}  # type: ignore[union-attr]
    assert not hasattr(local.server, "headers")
    assert McpClient.from_spec("http://127.0.0.1:9/mcp").server.headers == {}  # type: ignore[union-attr]


def test_a_bad_header_is_refused_without_echoing_it() -> None:
    with pytest.raises(UserError) as caught:
        mcp_module.parse_header("just-a-secret-token-value")
    assert "just-a-secret-token-value" not in str(caught.value)
    assert mcp_module.parse_header("X-Api-Key:  abcdef123456 ") == ("X-Api-Key", "abcdef123456")


def test_one_header_set_is_not_sent_to_two_http_servers(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["run", "hi", "-m", "scripted:a", "--no-log", "--mcp", "http://127.0.0.1:9/a",
         "--mcp", "http://127.0.0.1:9/b", "--mcp-header", "Authorization: Bearer q-123456789"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "one HTTP MCP server" in result.output and "q-123456789" not in result.output


# --------------------------------------------------------------------------- 5. processes


async def test_what_a_stdio_server_started_is_stopped_with_it(naughty: Path) -> None:
    async with client(naughty) as mcp:
        grandchild = int((await mcp.call_tool("spawn")).content[0].text)  # type: ignore[union-attr]
        assert alive(grandchild)
    assert wait_gone(grandchild), "the server's child outlived the connection"


def test_sigterm_ends_phi_run_like_ctrl_c_and_stops_the_server(
    naughty: Path, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps({"scripted:a": {"turns": [{"text": "", "tool_calls": [
            {"name": "pid", "arguments": {}}, ]}, {"text": "", "tool_calls": [
            {"name": "hang", "arguments": {}}]}], "default": "done"}})
    )  # fmt: skip
    env = {**os.environ, "PHI_HOME": str(tmp_path / "home")}
    process = subprocess.Popen(
        [sys.executable, "-c", "from phi_core.cli import main; main()", "run", "go",
         "-m", "scripted:a", "--script", str(script), "--json", "--no-log",
         "--mcp", f"{sys.executable} {naughty}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert process.stdout is not None
    server_pid = None
    deadline = time.monotonic() + 60
    for line in process.stdout:  # wait for the pid tool's answer, then for the hang to start
        event = json.loads(line)
        if event.get("type") == "tool_execution_end" and event.get("tool_name") == "pid":
            server_pid = int(event["result"]["content"][0]["text"])
        if event.get("type") == "tool_execution_start" and event.get("tool_name") == "hang":
            break
        assert time.monotonic() < deadline
    assert server_pid is not None
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    rest, _err = process.communicate(timeout=60)
    types = [json.loads(line)["type"] for line in rest.splitlines()]
    assert process.returncode == 130
    assert types.count("agent_end") == 1 and types[-1] == "run_result"
    assert wait_gone(server_pid), "the stdio server outlived phi run"


# --------------------------------------------------------------------------- 6. crash on list


def phi_run_json(tmp_path: Path, server: str) -> tuple[list[dict[str, object]], int, str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripted:a": ["hi"]}))
    result = CliRunner().invoke(
        app,
        ["run", "hi", "-m", "scripted:a", "--script", str(script), "--json", "--no-log",
         "--mcp", server],
    )  # fmt: skip
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return events, result.exit_code, result.output


def test_a_server_that_crashes_while_listing_fails_the_run_with_an_end_event(
    naughty: Path, tmp_path: Path
) -> None:
    events, code, output = phi_run_json(tmp_path, f"{sys.executable} {naughty} crash_on_list")
    assert code == 1, output
    assert [e["type"] for e in events] == ["agent_end", "run_result"]
    error = str(events[-1]["error"])
    assert "went away during tools/list" in error and "exited" in error
    assert "next call" not in error
