"""Client CPU per streamed call: our ``agent_loop`` against the bare ``openai`` SDK (issue 10).

A zero-delay OpenAI-compatible streaming server (raw asyncio, one precomputed chunked SSE reply
per request, HTTP/1.1 keep-alive) runs in its own process pinned to core 1; every client runs in
a fresh worker process pinned to core 0, so ``resource.getrusage`` of the worker is the client's
CPU alone. For each answer length (20 and 500 content chunks) and each concurrency C (1, 100,
1,000 calls in flight) every column runs a bounded number of requests after a small warm-up:

* ``aiohttp`` -- raw aiohttp POST, SSE lines parsed with ``json.loads`` (a floor);
* ``sdk`` -- the bare ``openai`` SDK (``AsyncOpenAI``, ``stream=True``, default transport);
* ``sdk-aiohttp`` -- the same SDK with its aiohttp transport (``DefaultAioHttpClient``);
* ``agent_loop`` -- ``agent_loop`` with one turn and no tools, through our provider with a real
  ``openai-compat`` ``ModelConfig`` pointing at the server (no event sink);
* ``parallel`` -- one 3-branch ``agent_loop_parallel`` (pick-first) per request: C races in
  flight, so 3·C calls; its CPU is reported per branch (per call);
* ``pydantic-ai``, ``openai-agents``, ``litellm`` -- optional, run when importable by the
  interpreter given with ``--frameworks-python`` (keep them out of the project's venv).

The process-wide limiter's caps are raised above the concurrency in our columns, so every
column runs the same number of calls in flight (the default caps, 64 per provider and 32 per
model, would queue our calls and make the comparison meaningless). Every worker installs a socket
guard that refuses any connection or name lookup that is not loopback, and switches the
frameworks' telemetry off.

Default cells: 20-chunk answers at C = 1, 100, 1,000 and 500-chunk answers at C = 1, 100
(``--concurrency-levels 1,100,1000`` adds the slow 500-chunk C=1000 wave). The framework
columns run once per cell and only with 20-chunk answers (``--framework-runs``,
``--framework-chunks``): they are references, not the target.

Figures per cell are medians of ``--runs`` runs (default 3): requests/s, p50/p95 latency, client
CPU ms per call and µs per chunk, the share of CPU spent in garbage collection, and peak RSS.
Writes ``benchmarks/results/overhead/results.json`` and ``results.png`` (``--out DIR`` writes
under DIR instead; ``--output NAME`` names the files NAME.json and NAME.png).

Run: ``.venv/bin/python benchmarks/overhead.py`` (about 10 minutes on 2 cores) or ``--quick``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _bench import add_out_option

RESULTS = Path(__file__).parent / "results" / "overhead"
OURS = ("aiohttp", "sdk", "sdk-aiohttp", "agent_loop", "parallel")
FRAMEWORKS = ("pydantic-ai", "openai-agents", "litellm")
MODEL = "bench"
PROMPT = "Say hello."
CLIENT_CORE = 0
SERVER_CORE = 1
# Requests per (chunks, C): bounded so the default run stays near ten minutes on two cores.
# C=1000 needs 1,000 requests (one full wave). The 500-chunk set runs C=1 and C=100 unless
# --concurrency-levels asks for more (a C=1000 wave of 500-chunk races alone takes minutes).
REQUESTS = {20: {1: 200, 100: 500, 1000: 1000}, 500: {1: 20, 100: 100, 1000: 1000}}
QUICK_REQUESTS = {20: {1: 50, 100: 300, 1000: 1000}, 500: {1: 10, 100: 100, 1000: 1000}}
DEFAULT_LEVELS = {20: "1,100,1000", 500: "1,100"}


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _pin(core: int) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > core:
        os.sched_setaffinity(0, {core})


# --------------------------------------------------------------------------- the server


def sse_body(chunks: int) -> bytes:
    """One whole chunked-encoding SSE reply: role chunk, ``chunks`` content chunks, stop, usage."""

    def event(payload: dict[str, Any]) -> bytes:
        data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
        return b"%x\r\n%s\r\n" % (len(data), data)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    parts = [event(chunk({"role": "assistant", "content": ""}))]
    parts += [event(chunk({"content": f" w{i}"})) for i in range(chunks)]
    parts.append(event(chunk({}, "stop")))
    usage = {"prompt_tokens": 9, "completion_tokens": chunks, "total_tokens": 9 + chunks}
    parts.append(event({**chunk({}), "choices": [], "usage": usage}))
    done = b"data: [DONE]\n\n"
    parts.append(b"%x\r\n%s\r\n" % (len(done), done))
    parts.append(b"0\r\n\r\n")
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
    )
    return head + b"".join(parts)


_NOT_FOUND = (
    b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n"
    b'{"error":{"message":"not found","x":""}}'
)


class _Http(asyncio.Protocol):
    """Minimal HTTP/1.1 keep-alive server: every POST to ``/chat/completions`` gets the reply."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            assert self.transport is not None
            path = head.split(b" ", 2)[1]
            self.transport.write(self.reply if path.endswith(b"/chat/completions") else _NOT_FOUND)


async def _serve(chunks: int) -> None:
    loop = asyncio.get_running_loop()
    reply = sse_body(chunks)
    server = await loop.create_server(lambda: _Http(reply), "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    # Stops when the parent closes our stdin (or dies).
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.read()
    server.close()


class Server:
    """The server process (pinned to the other core); a context manager that stops it."""

    def __init__(self, chunks: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", "--chunks", str(chunks)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --------------------------------------------------------------------------- the socket guard


def _loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    return isinstance(host, str) and (
        host in ("localhost", "::1", "") or host.startswith(("127.", "::ffff:127."))
    )


REFUSED: list[str] = []
"""What the socket guard refused in this worker (reported in its result: must stay empty)."""


def install_socket_guard() -> None:
    """Refuse every connection and name lookup that is not loopback (or a unix socket)."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family == socket.AF_UNIX:
            return
        host = address[0] if isinstance(address, tuple) else address
        if not _loopback(host):
            REFUSED.append(f"connect {address!r}")
            raise PermissionError(f"socket guard: refused a connection to {address!r}")

    def connect(self: socket.socket, address: Any) -> None:
        check(self, address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(self, address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _loopback(host):
            REFUSED.append(f"resolve {host!r}")
            raise socket.gaierror(f"socket guard: refused to resolve {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo


TELEMETRY_OFF = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "LOGFIRE_SEND_TO_LOGFIRE": "false",
    "OTEL_SDK_DISABLED": "true",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
}


# --------------------------------------------------------------------------- the clients

Call = Callable[[], Awaitable[int]]
"""One request; returns the number of content characters received (checked by the worker)."""


async def make_client(
    name: str, base_url: str, concurrency: int
) -> tuple[Call, Callable[[], Awaitable[None]]]:
    """``(call, close)`` for one column."""
    messages = [{"role": "user", "content": PROMPT}]

    if name == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        url = base_url + "/chat/completions"
        body = {"model": MODEL, "messages": messages, "stream": True}

        async def call_aiohttp() -> int:
            size = 0
            async with session.post(url, json=body) as response:
                async for line in response.content:
                    if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                        event = json.loads(line[6:])
                        for choice in event["choices"]:
                            size += len(choice["delta"].get("content") or "")
            return size

        return call_aiohttp, session.close

    if name in ("sdk", "sdk-aiohttp"):
        import openai

        http = openai.DefaultAioHttpClient() if name == "sdk-aiohttp" else None
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key="bench", max_retries=0, http_client=http
        )

        async def call_sdk() -> int:
            size = 0
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=messages,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
            async for chunk in stream:
                for choice in chunk.choices:
                    size += len(choice.delta.content or "")
            return size

        return call_sdk, client.close

    if name in ("agent_loop", "parallel"):
        from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
        from phi_core.parallel import PickFirstEvaluation, agent_loop_parallel
        from phi_core.providers.limiter import Limiter, set_default_limiter
        from phi_core.providers.registry import resolve_model

        cap = 4 * concurrency + 64
        set_default_limiter(Limiter(per_provider=cap, per_model=cap))
        model = resolve_model(f"openai-compat:{MODEL}@{base_url}")
        config = AgentLoopConfig(model=model)

        async def call_loop() -> int:
            result = await agent_loop(PROMPT, AgentContext(), config)
            if result.reason != "completed":
                raise RuntimeError(result.error)
            return len(result.text)

        strategy = PickFirstEvaluation()
        configs = [AgentLoopConfig(model=model, config_id=f"b{i}") for i in range(3)]

        async def call_parallel() -> int:
            result = await agent_loop_parallel(PROMPT, AgentContext(), configs, strategy)
            failed = [o.error for o in result.outcomes if o.status != "ok"]
            if failed:
                raise RuntimeError(failed[0])
            return sum(len(o.result.text) for o in result.outcomes if o.result) // 3

        async def close_phi() -> None:
            return None

        return (call_loop if name == "agent_loop" else call_parallel), close_phi

    if name == "pydantic-ai":
        from pydantic_ai import Agent
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        agent = Agent(
            OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key="bench"))
        )

        async def call_pydantic_ai() -> int:
            size = 0
            async with agent.run_stream(PROMPT) as run:
                async for text in run.stream_text(delta=True, debounce_by=None):
                    size += len(text)
            return size

        async def close_nothing() -> None:
            return None

        return call_pydantic_ai, close_nothing

    if name == "openai-agents":
        import openai
        from agents import Agent as OAAgent
        from agents import OpenAIChatCompletionsModel, Runner, set_tracing_disabled

        set_tracing_disabled(True)
        client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        oa_agent = OAAgent(
            name="bench",
            instructions=None,
            model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        )

        async def call_openai_agents() -> int:
            result = Runner.run_streamed(oa_agent, PROMPT)
            async for _event in result.stream_events():
                pass
            return len(str(result.final_output))

        return call_openai_agents, client.close

    if name == "litellm":
        import litellm

        litellm.telemetry = False

        async def call_litellm() -> int:
            size = 0
            response = await litellm.acompletion(
                model=f"openai/{MODEL}",
                api_base=base_url,
                api_key="bench",
                messages=messages,
                stream=True,
            )
            async for chunk in response:
                for choice in chunk.choices:
                    size += len(choice.delta.content or "")
            return size

        async def close_litellm() -> None:
            return None

        return call_litellm, close_litellm

    raise SystemExit(f"unknown client {name!r}")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    base_url = f"http://127.0.0.1:{args.port}/v1"
    call, close = await make_client(args.client, base_url, args.concurrency)
    expected = len("".join(f" w{i}" for i in range(args.chunks)))
    latencies: list[float] = []
    errors: list[str] = []

    async def one() -> None:
        started = time.perf_counter()
        try:
            size = await call()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            return
        latencies.append(time.perf_counter() - started)
        if size != expected:
            errors.append(f"got {size} characters, expected {expected}")

    async def wave(count: int, concurrency: int) -> None:
        queue = iter(range(count))

        async def worker() -> None:
            for _ in queue:
                await one()

        async with asyncio.TaskGroup() as group:
            for _ in range(min(concurrency, count)):
                group.create_task(worker())

    # Warm-up (imports, first-use validation, a few connections): not measured.
    await wave(min(args.concurrency, 20) * 2, min(args.concurrency, 20))
    latencies.clear()
    errors.clear()

    gc_time = 0.0
    gc_started = 0.0

    def on_gc(phase: str, _info: dict[str, Any]) -> None:
        nonlocal gc_time, gc_started
        if phase == "start":
            gc_started = time.process_time()
        else:
            gc_time += time.process_time() - gc_started

    gc.callbacks.append(on_gc)
    cpu0, wall0 = _cpu(), time.perf_counter()
    await wave(args.requests, args.concurrency)
    cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    gc.callbacks.remove(on_gc)
    await close()
    calls = args.requests * (3 if args.client == "parallel" else 1)
    latencies.sort()
    return {
        "client": args.client,
        "chunks": args.chunks,
        "concurrency": args.concurrency,
        "requests": args.requests,
        "calls": calls,
        "errors": len(errors),
        "first_errors": errors[:3],
        "wall_s": wall,
        "requests_per_s": args.requests / wall,
        "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else None,
        "p95_ms": 1000 * latencies[int(len(latencies) * 0.95)] if latencies else None,
        "cpu_ms_per_call": 1000 * cpu / calls,
        "cpu_us_per_chunk": 1e6 * cpu / (calls * args.chunks),
        "gc_share": gc_time / cpu if cpu else 0.0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "guard_refused": list(REFUSED),
    }


def worker_main(args: argparse.Namespace) -> None:
    _pin(CLIENT_CORE)
    _raise_nofile()
    os.environ.update(TELEMETRY_OFF)
    install_socket_guard()
    result = asyncio.run(_measure(args))
    print(json.dumps(result))


# --------------------------------------------------------------------------- the driver


def available(python: str, client: str) -> bool:
    module = {"pydantic-ai": "pydantic_ai", "openai-agents": "agents", "litellm": "litellm"}[client]
    probe = subprocess.run(
        [
            python,
            "-c",
            f"import importlib.util,sys; sys.exit(importlib.util.find_spec({module!r}) is None)",
        ],
        capture_output=True,
    )
    return probe.returncode == 0


def run_worker(
    python: str, client: str, chunks: int, concurrency: int, requests: int, port: int
) -> dict[str, Any]:
    if client == "parallel":
        requests = max(requests // 3, concurrency, 1)  # C races in flight: 3·C calls
    cmd = [
        python,
        __file__,
        "--worker",
        "--client",
        client,
        "--chunks",
        str(chunks),
        "--concurrency",
        str(concurrency),
        "--requests",
        str(requests),
        "--port",
        str(port),
    ]
    env = {**os.environ, **TELEMETRY_OFF}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        return {"client": client, "failed": done.stderr.strip().splitlines()[-5:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if "failed" not in r]
    if not good:
        return runs[0]
    out = dict(good[0])
    for key in (
        "wall_s",
        "requests_per_s",
        "p50_ms",
        "p95_ms",
        "cpu_ms_per_call",
        "cpu_us_per_chunk",
        "gc_share",
        "peak_rss_mb",
    ):
        values = [r[key] for r in good if r.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    out["errors"] = max(r["errors"] for r in good)
    out["guard_refused"] = sorted({x for r in good for x in r.get("guard_refused", [])})
    out["runs"] = len(good)
    out["cpu_ms_per_call_runs"] = [round(r["cpu_ms_per_call"], 3) for r in good]
    return out


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def print_table(cells: list[dict[str, Any]]) -> None:
    header = (
        "chunks",
        "C",
        "client",
        "req/s",
        "p50 ms",
        "p95 ms",
        "CPU ms/call",
        "CPU µs/chunk",
        "× sdk",
        "GC %",
        "RSS MB",
        "errors",
    )
    rows = [header]
    sdk = {(c["chunks"], c["concurrency"]): c for c in cells if c.get("client") == "sdk"}
    for c in cells:
        if "failed" in c:
            rows.append(
                (
                    str(c.get("chunks")),
                    str(c.get("concurrency")),
                    c["client"],
                    "failed",
                    *[""] * 7,
                    " | ".join(c["failed"])[-120:],
                )
            )
            continue
        base = sdk.get((c["chunks"], c["concurrency"]))
        ratio = c["cpu_ms_per_call"] / base["cpu_ms_per_call"] if base else None
        rows.append(
            (
                str(c["chunks"]),
                str(c["concurrency"]),
                c["client"],
                fmt(c["requests_per_s"], 0),
                fmt(c["p50_ms"], 1),
                fmt(c["p95_ms"], 1),
                fmt(c["cpu_ms_per_call"], 3),
                fmt(c["cpu_us_per_chunk"], 1),
                fmt(ratio),
                fmt(100 * c["gc_share"], 0),
                fmt(c["peak_rss_mb"], 0),
                str(c["errors"]),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for n, row in enumerate(rows):
        print(
            "  ".join(
                cell.rjust(w) if i > 2 else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=False))
            )
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))


def plot(cells: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    good = [c for c in cells if "failed" not in c]
    chunk_sets = sorted({c["chunks"] for c in good})
    clients = list(dict.fromkeys(c["client"] for c in good))
    fig, axes = plt.subplots(1, len(chunk_sets), figsize=(7 * len(chunk_sets), 4.5), squeeze=False)
    for ax, chunks in zip(axes[0], chunk_sets, strict=False):
        levels = sorted({c["concurrency"] for c in good if c["chunks"] == chunks})
        width = 0.8 / max(len(clients), 1)
        for i, client in enumerate(clients):
            by_c = {
                c["concurrency"]: c for c in good if c["chunks"] == chunks and c["client"] == client
            }
            values = [by_c[level]["cpu_ms_per_call"] if level in by_c else 0 for level in levels]
            ax.bar([x + i * width for x in range(len(levels))], values, width, label=client)
        ax.set_xticks([x + width * (len(clients) - 1) / 2 for x in range(len(levels))])
        ax.set_xticklabels([f"C={level}" for level in levels])
        ax.set_ylabel("client CPU ms per call (per branch for parallel)")
        ax.set_title(f"{chunks} content chunks per answer")
        ax.legend(fontsize=8)
    fig.suptitle("Client CPU per streamed call (client pinned to one core; medians)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def driver_main(args: argparse.Namespace) -> None:
    table = QUICK_REQUESTS if args.quick else REQUESTS
    runs = 1 if args.quick and args.runs is None else (args.runs or 3)
    chunk_sets = [int(c) for c in args.chunk_sets.split(",")]
    clients = [c for c in args.clients.split(",") if c] if args.clients else list(OURS)
    fw_python = args.frameworks_python or sys.executable
    columns: list[tuple[str, str]] = [(c, sys.executable) for c in clients if c in OURS]
    for name in FRAMEWORKS:
        if args.clients and name not in clients:
            continue
        if available(fw_python, name):
            columns.append((name, fw_python))
        else:
            print(f"({name} is not importable by {fw_python}: column skipped)")
    cells: list[dict[str, Any]] = []
    started = time.time()
    for chunks in chunk_sets:
        with Server(chunks) as server:
            levels = args.concurrency_levels or DEFAULT_LEVELS.get(chunks, "1,100,1000")
            for level in [int(c) for c in levels.split(",")]:
                requests = args.requests or table[chunks][level]
                # The frameworks are reference columns: by default measured once per cell, and
                # only with short answers (their 500-chunk calls take seconds each).
                here = [(n, p) for n, p in columns if n in OURS or chunks in args.framework_chunks]
                per_column: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in here}
                for run in range(runs):  # columns interleaved, so drift hits all of them alike
                    for name, python in here:
                        if name in FRAMEWORKS and run >= args.framework_runs:
                            continue
                        per_column[name].append(
                            run_worker(python, name, chunks, level, requests, server.port)
                        )
                for name, _ in here:
                    cell = median_of(per_column[name])
                    cell.setdefault("chunks", chunks)
                    cell.setdefault("concurrency", level)
                    cells.append(cell)
                    print(
                        f"  {chunks} chunks, C={level}, {name}: "
                        f"{fmt(cell.get('cpu_ms_per_call'), 3)} ms/call",
                        flush=True,
                    )
    print()
    print_table(cells)
    refused = {c["client"]: c["guard_refused"] for c in cells if c.get("guard_refused")}
    print(f"socket guard refusals (non-loopback attempts): {refused or 'none'}")
    args.out.mkdir(parents=True, exist_ok=True)
    out = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
            "packages": _versions("openai", "httpx", "aiohttp"),
        },
        "method": {
            "runs": runs,
            "client_core": CLIENT_CORE,
            "server_core": SERVER_CORE,
            "statistic": "median of runs",
            "frameworks_python": fw_python,
        },
        "elapsed_s": round(time.time() - started, 1),
        "cells": cells,
    }
    name = args.output or ("quick" if args.quick else "results")
    (args.out / f"{name}.json").write_text(json.dumps(out, indent=2) + "\n")
    plot(cells, args.out / f"{name}.png")
    print(f"\nwrote {args.out / (name + '.json')} and {name}.png ({out['elapsed_s']} s)")


def _versions(*names: str) -> dict[str, str]:
    """Installed versions of the packages the figures depend on (the SDK's transport changes)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one run, fewer requests")
    parser.add_argument("--runs", type=int, default=None, help="runs per cell (median; default 3)")
    parser.add_argument("--clients", default="", help="comma-separated columns (default: all)")
    parser.add_argument("--chunk-sets", default="20,500", help="content chunks per answer")
    parser.add_argument(
        "--concurrency-levels",
        default="",
        help="comma-separated C values (default 1,100,1000 for 20 chunks, 1,100 for 500)",
    )
    parser.add_argument(
        "--framework-runs", type=int, default=1, help="runs per cell for the framework columns"
    )
    parser.add_argument(
        "--framework-chunks",
        type=lambda text: {int(c) for c in text.split(",") if c},
        default={20},
        help="answer lengths the framework columns run at (default 20)",
    )
    parser.add_argument("--requests", type=int, default=None, help="requests per cell (override)")
    parser.add_argument(
        "--frameworks-python",
        default=None,
        help="interpreter that has pydantic-ai / openai-agents / litellm",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="results file stem in --out (default results; quick with --quick)",
    )
    add_out_option(parser, RESULTS)
    # internal roles
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", default="sdk", help=argparse.SUPPRESS)
    parser.add_argument("--chunks", type=int, default=20, help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _pin(SERVER_CORE)
        _raise_nofile()
        asyncio.run(_serve(args.chunks))
    elif args.worker:
        worker_main(args)
    else:
        driver_main(args)


if __name__ == "__main__":
    main()
