"""Gateway load: ``phi serve`` against LiteLLM's proxy, both passing streams through (issue 18).

Every configuration runs against the same zero-delay fake OpenAI-compatible upstream (raw asyncio,
one precomputed 20-chunk SSE reply per request, HTTP/1.1 keep-alive, its own process: the server
of ``overhead.py``) and, for the gateways, a real ``redis-server`` on a free port:

* ``direct`` — the clients call the upstream itself (the baseline the added latency is measured
  against);
* ``phi`` — ``phi serve --workers 2`` with Redis for shared state, model ``openai-compat:bench``
  (passthrough through our providers, retry and limiter);
* ``litellm`` — LiteLLM's proxy (``litellm --num_workers 2 --run_gunicorn``, Redis in
  ``router_settings``, a master key) from its
  own virtual environment (default ``/tmp/litellm-venv``; create it with ``python3 -m venv
  /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'``).

For each concurrency K (default 1, 50 and 200) K streaming clients (raw aiohttp, one keep-alive pool)
send ``POST /v1/chat/completions`` with ``stream: true`` back to back for a bounded time (warm-up,
then ``--duration`` seconds, at most 60). Per configuration: requests/s, latency to the full
stream and to the first content chunk (p50/p99), the latency added over ``direct`` at the same K
(K=1 shows the gateway's own latency; at 50 and 200 queueing for the CPU dominates), the
gateway's CPU per request (user+system time of the gateway's whole process tree from the first
request to the last, from ``/proc``, over every request served), and errors (non-200, a stream without ``[DONE]``, a broken
connection — must be 0). Each configuration's one-minute load average before it starts is
recorded: on a shared machine the figures move with what else runs.

Writes ``benchmarks/results/gateway/results.json`` and ``results.md`` (a side-by-side table).

Run: ``.venv/bin/python benchmarks/gateway_load.py`` (about 4 minutes) or ``--quick``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from overhead import Server

RESULTS = Path(__file__).parent / "results" / "gateway"
TARGETS = ("direct", "phi", "litellm")
CHUNKS = 20
PROMPT = "Say hello."
KEY = "sk-bench-key"  # LiteLLM master keys start with sk-
MAX_DURATION = 60.0
READY_TIMEOUT = 180.0


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and every live descendant (from ``/proc``)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as file:
                stat = file.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(")") + 2 :].split()
        pid = int(entry)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / tick
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(times.get(pid, 0.0) for pid in tree)


class Process:
    """A gateway or redis process in its own process group, stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._log_file = log.open("wb")
        self.popen = subprocess.Popen(
            argv, env=env, stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def tail(self, lines: int = 15) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
        self._log_file.close()


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A throwaway ``redis-server`` on a free loopback port (no persistence); yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server).")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
            "no", "--dir", str(workdir)]  # fmt: skip
    process = Process("redis", argv, dict(os.environ), workdir / "redis.log")
    try:
        deadline = time.monotonic() + 10
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), 1) as s,
            ):
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    break
            if time.monotonic() > deadline or process.popen.poll() is not None:
                raise SystemExit(f"redis-server did not start:\n{process.tail()}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.stop()


@dataclass
class Target:
    """Where the clients send requests, and which processes' CPU counts as the gateway's."""

    name: str
    base_url: str
    model: str
    process: Process | None = None
    note: str = ""


def start_phi(
    upstream: str, redis_url: str, workdir: Path, workers: int, pythonpath: str | None = None
) -> Target:
    port = free_port()
    phi = Path(sys.executable).with_name("phi")
    config = workdir / "gateway.toml"
    config.write_text(
        f'[gateway]\nstate = "{redis_url}"\nmodels = ["openai-compat:bench"]\n', encoding="utf-8"
    )
    argv = [str(phi), "serve", "--config", str(config), "--host", "127.0.0.1", "--port",
            str(port), "--workers", str(workers)]  # fmt: skip
    env = {
        **os.environ,
        "PHI_HOME": str(workdir / "phi-home"),
        "PHI_GATEWAY_KEYS": KEY,
        "OPENAI_COMPAT_BASE_URL": upstream,
        "OPENAI_COMPAT_API_KEY": "upstream-key",
    }
    if pythonpath:  # an experiment loaded into the gateway (see gateway_nodelay/)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    process = Process("phi", argv, env, workdir / "phi.log")
    return Target("phi", f"http://127.0.0.1:{port}/v1", "openai-compat:bench", process)


def start_litellm(
    upstream: str, redis_url: str, workdir: Path, workers: int, binary: Path
) -> Target:
    port = free_port()
    redis_port = redis_url.rsplit(":", 1)[1].split("/")[0]
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: bench\n"
        "    litellm_params:\n"
        "      model: openai/bench\n"
        f"      api_base: {upstream}\n"
        f"      api_key: {KEY}\n"
        "general_settings:\n"
        f"  master_key: {KEY}\n"
        "router_settings:\n"
        "  redis_host: 127.0.0.1\n"
        f"  redis_port: {redis_port}\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  set_verbose: false\n",
        encoding="utf-8",
    )
    # gunicorn, not LiteLLM's default uvicorn supervisor: on a loaded machine uvicorn's 5-second
    # worker health check kills LiteLLM's workers while they still import, and restarts them
    # for ever (seen here at load average 8; the log shows only "Child process died").
    argv = [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
            "--num_workers", str(workers), "--run_gunicorn"]  # fmt: skip
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the price map from GitHub
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "DISABLE_SCHEMA_UPDATE": "True",
    }
    env.pop("PYTHONPATH", None)  # its own venv only
    process = Process("litellm", argv, env, workdir / "litellm.log")
    return Target("litellm", f"http://127.0.0.1:{port}/v1", "bench", process)


async def wait_ready(target: Target) -> None:
    """Poll ``GET /v1/models`` until the gateway answers 200 (bounded)."""
    import aiohttp

    assert target.process is not None
    deadline = time.monotonic() + READY_TIMEOUT
    async with aiohttp.ClientSession() as session:
        while True:
            if target.process.popen.poll() is not None:
                raise RuntimeError(f"{target.name} exited at start:\n{target.process.tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(
                    f"{target.base_url}/models", headers={"authorization": f"Bearer {KEY}"}
                ) as response:
                    if response.status == 200:
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{target.name} not ready in {READY_TIMEOUT:.0f} s:\n"
                                   f"{target.process.tail()}")  # fmt: skip
            await asyncio.sleep(0.2)


# --------------------------------------------------------------------------- the load


@dataclass
class Cell:
    target: str
    concurrency: int
    duration_s: float
    requests: int = 0
    """Requests that started and ended in the measured window (the latency samples)."""
    served: int = 0
    """Every complete stream, warm-up included (the CPU figure's denominator)."""
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    requests_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    first_chunk_p50_ms: float = 0.0
    first_chunk_p99_ms: float = 0.0
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    gateway_cpu_ms_per_request: float | None = None
    loadavg_1m_before: float = 0.0
    note: str = ""


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def load(target: Target, concurrency: int, warmup: float, duration: float) -> Cell:
    """K clients back to back for ``warmup + duration`` seconds; figures over the last part."""
    import aiohttp

    cell = Cell(target.name, concurrency, duration, loadavg_1m_before=os.getloadavg()[0])
    body = json.dumps(
        {"model": target.model, "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    ).encode()
    headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
    url = f"{target.base_url}/chat/completions"
    totals: list[float] = []
    firsts: list[float] = []
    served = served_in_window = 0
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from, end = start + warmup, start + warmup + duration

    def error(text: str) -> None:
        if loop.time() >= measure_from:
            cell.errors += 1
            if len(cell.error_samples) < 5:
                cell.error_samples.append(text[:300])

    async def client(session: aiohttp.ClientSession) -> None:
        while (began := loop.time()) < end:
            first: float | None = None
            done = False
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    if response.status != 200:
                        error(f"HTTP {response.status}: {(await response.read())[:200]!r}")
                        continue
                    async for line in response.content:
                        if first is None and line.startswith(b"data: {") and b'"content"' in line:
                            first = loop.time()
                        if line.startswith(b"data: [DONE]"):
                            done = True
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                error(f"{type(exc).__name__}: {exc}")
                continue
            finished = loop.time()
            if not done:
                error("stream ended without data: [DONE]")
                continue
            nonlocal served, served_in_window
            served += 1
            if measure_from <= finished <= end:
                served_in_window += 1
            if began >= measure_from and finished <= end:
                totals.append(finished - began)
                firsts.append((first or finished) - began)

    pid = target.process.pid if target.process is not None else None
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        # CPU from the first request to the last one's end, over every request served then
        # (warm-up included): a window would count work on requests that end outside it.
        cpu_before = cpu_seconds(pid) if pid is not None else 0.0
        tasks = [asyncio.create_task(client(session)) for _ in range(concurrency)]
        await asyncio.gather(*tasks)
        cpu_after = cpu_seconds(pid) if pid is not None else 0.0
    cell.requests, cell.served = len(totals), served
    cell.requests_per_s = served_in_window / duration
    cell.p50_ms, cell.p99_ms = 1e3 * _percentile(totals, 0.5), 1e3 * _percentile(totals, 0.99)
    cell.first_chunk_p50_ms = 1e3 * _percentile(firsts, 0.5)
    cell.first_chunk_p99_ms = 1e3 * _percentile(firsts, 0.99)
    if pid is not None and served:
        cell.gateway_cpu_ms_per_request = 1e3 * (cpu_after - cpu_before) / served
    return cell


# --------------------------------------------------------------------------- the run


async def run(args: argparse.Namespace) -> dict[str, Any]:
    levels = [int(k) for k in args.concurrency.split(",")]
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(targets) - set(TARGETS)
    if unknown:
        raise SystemExit(f"Unknown targets {sorted(unknown)}; choose from {', '.join(TARGETS)}.")
    duration = min(args.duration, MAX_DURATION)
    cells: list[Cell] = []
    skipped: dict[str, str] = {}
    with Server(CHUNKS) as upstream, tempfile.TemporaryDirectory(prefix="gw-") as tmp:
        workdir = Path(tmp)
        upstream_url = f"http://127.0.0.1:{upstream.port}/v1"
        with redis_server(workdir) as redis_url:
            for name in targets:
                target: Target | None = None
                try:
                    if name == "direct":
                        target = Target("direct", upstream_url, "bench")
                    elif name == "phi":
                        target = start_phi(
                            upstream_url, redis_url, workdir, args.workers, args.phi_pythonpath
                        )
                    else:
                        if args.litellm_missing:
                            skipped[name] = f"{args.litellm} does not exist (see the docstring)"
                            continue
                        target = start_litellm(
                            upstream_url, redis_url, workdir, args.workers, Path(args.litellm)
                        )
                    if target.process is not None:
                        await wait_ready(target)
                    for k in levels:
                        cell = await load(target, k, args.warmup, duration)
                        cells.append(cell)
                        print(_row(cell), flush=True)
                except RuntimeError as exc:
                    skipped[name] = str(exc)
                    print(f"{name}: skipped: {exc}", file=sys.stderr, flush=True)
                finally:
                    if target is not None and target.process is not None:
                        target.process.stop()
    baseline = {c.concurrency: c for c in cells if c.target == "direct"}
    for cell in cells:
        base = baseline.get(cell.concurrency)
        if base is not None and cell.target != "direct":
            cell.added_p50_ms = cell.p50_ms - base.p50_ms
            cell.added_p99_ms = cell.p99_ms - base.p99_ms
    return {
        "benchmark": "gateway_load",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {
            "chunks": CHUNKS,
            "warmup_s": args.warmup,
            "duration_s": duration,
            "workers": args.workers,
            "concurrency": levels,
            "phi_pythonpath": args.phi_pythonpath,
        },
        "versions": versions(args),
        "skipped": skipped,
        "cells": [asdict(c) for c in cells],
    }


def versions(args: argparse.Namespace) -> dict[str, str | None]:
    """The phi commit and the LiteLLM version measured (None where unknown)."""

    def output(argv: list[str]) -> str | None:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() or None

    python = Path(args.litellm).with_name("python")
    return {
        "phi_commit": output(["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"]),
        "litellm": None
        if args.litellm_missing
        else output(
            [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"]
        ),
    }


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _row(cell: Cell) -> str:
    return (
        f"| {cell.target} | {cell.concurrency} | {cell.requests_per_s:.0f} | {_fmt(cell.p50_ms)} "
        f"| {_fmt(cell.p99_ms)} | {_fmt(cell.first_chunk_p50_ms)} | {_fmt(cell.added_p50_ms)} "
        f"| {_fmt(cell.added_p99_ms)} | {_fmt(cell.gateway_cpu_ms_per_request, 2)} "
        f"| {cell.errors} | {cell.loadavg_1m_before:.1f} |"
    )


HEADER = (
    "| target | K | req/s | p50 ms | p99 ms | first chunk p50 ms | added p50 ms | added p99 ms "
    "| gateway CPU ms/req | errors | load avg before |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def table(result: dict[str, Any]) -> str:
    lines = [HEADER]
    for data in result["cells"]:
        lines.append(_row(Cell(**data)))
    for name, why in result["skipped"].items():
        lines.append(f"\n**{name} not measured:** {why.splitlines()[0] if why else ''}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument(
        "--concurrency", default="1,50,200", help="K levels, comma-separated (1: latency alone)."
    )
    parser.add_argument("--duration", type=float, default=20.0, help="Measured seconds (≤ 60).")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--litellm", default="/tmp/litellm-venv/bin/litellm")
    parser.add_argument(
        "--phi-pythonpath",
        help="A folder put first on the gateway's PYTHONPATH (an experiment such as "
        "benchmarks/gateway_nodelay); recorded in the results.",
    )
    parser.add_argument("--quick", action="store_true", help="5 s per configuration.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.duration, args.warmup = 5.0, 3.0
    args.litellm_missing = not Path(args.litellm).exists()
    print(HEADER, flush=True)
    result = asyncio.run(run(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (args.out / "results.md").write_text(table(result) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out / 'results.json'} and results.md")
    if any(c["errors"] for c in result["cells"]):
        print("ERRORS were seen: see error_samples in results.json", file=sys.stderr)


if __name__ == "__main__":
    main()
