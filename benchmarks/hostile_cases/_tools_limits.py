"""Resource exhaustion through the tools, and bad input at the boundary of a run.

A resource case is ``contained`` when the attack ran and stayed within its bounds (memory, time,
output size, processes), ``leaked`` when it got past them. An input case is ``blocked`` when the
bad input is a ``UserError`` before any event, ``contained`` when the run ended properly (one
``AgentEnd``, the exception re-raised, a sendable result), ``leaked`` otherwise.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from phi_hostile_tools_kit import Env, Verdict, case, peak_memory, processes, run_tool, text_of

from phi_core.errors import UserError
from phi_core.events import AgentEnd
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers.retry import RetryPolicy, stream_with_retry
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import (
    BashSettings,
    BashTool,
    ListFilesTool,
    ReadFileTool,
    SearchSettings,
    SearchTool,
    tool,
)
from phi_core.types import TextContent, ToolResultMessage, UserMessage

MB = 1024 * 1024


def _bounded(out: str, peak: int, seconds: float, *, memory: int, time_limit: float) -> Verdict:
    detail = f"{len(out)} chars back, peak {peak / MB:.1f} MB, {seconds:.1f} s"
    ok = len(out.encode()) <= 300 * 1024 and peak <= memory and seconds <= time_limit
    return ("contained" if ok else "leaked"), detail


async def _measure(work: Any, *, memory: int = 16 * MB, time_limit: float = 20) -> Verdict:
    started = time.monotonic()
    result, peak = await peak_memory(work)
    return _bounded(
        text_of(result), peak, time.monotonic() - started, memory=memory, time_limit=time_limit
    )


def _big_text(path: Path, size: int) -> None:
    block = b"".join(b"line %06d of a big file\n" % i for i in range(40_000))
    with path.open("wb") as handle:
        for _ in range(size // len(block) + 1):
            handle.write(block)


@case("resource exhaustion", "one line of a 200 MB file")
async def _huge_file(env: Env) -> Verdict:
    with env.workspace() as ws:
        _big_text(ws / "big.log", 200 * MB)
        return await _measure(run_tool(ReadFileTool(ws), path="big.log", limit=1))


@case("resource exhaustion", "a 50 MB line")
async def _huge_line(env: Env) -> Verdict:
    with env.workspace() as ws:
        (ws / "line.txt").write_bytes(b"x" * (50 * MB))
        return await _measure(run_tool(ReadFileTool(ws), path="line.txt"))


@case("resource exhaustion", "a window of a billion lines")
async def _huge_window(env: Env) -> Verdict:
    with env.workspace() as ws:
        _big_text(ws / "mid.log", 20 * MB)
        return await _measure(run_tool(ReadFileTool(ws), path="mid.log", offset=1, limit=10**9))


@case("resource exhaustion", "900 KB of binary read as text")
async def _binary(env: Env) -> Verdict:
    with env.workspace() as ws:
        (ws / "blob.dat").write_bytes(os.urandom(900 * 1024))
        verdict, detail = await _measure(run_tool(ReadFileTool(ws), path="blob.dat"))
        out = text_of(await run_tool(ReadFileTool(ws), path="blob.dat"))
    return ("leaked", out[:120]) if "\ufffd" in out else (verdict, detail)


for _name, _command in {
    "400 MB of output": "head -c 400000000 /dev/zero | tr '\\0' a",
    "endless output until the timeout": "yes",
    "binary output": "head -c 50000000 /dev/urandom",
    "a 100 MB line on stderr": "head -c 100000000 /dev/zero | tr '\\0' e >&2",
}.items():

    def _flood(name: str, command: str) -> None:
        @case("resource exhaustion", name)
        async def attack(env: Env) -> Verdict:
            with env.workspace() as ws:
                bash = BashTool(ws, BashSettings(max_timeout=3))
                return await _measure(run_tool(bash, command=command, timeout=3), memory=32 * MB)

    _flood(_name, _command)


@case("resource exhaustion", "model asks for timeout=1e9")
async def _timeout(env: Env) -> Verdict:
    with env.workspace() as ws:
        bash = BashTool(ws, BashSettings(max_timeout=1.5))
        started = time.monotonic()
        out = text_of(await run_tool(bash, command="sleep 3600", timeout=1e9))
    seconds = time.monotonic() - started
    return ("contained" if seconds < 5 else "leaked"), f"{seconds:.1f} s: {out[:120]}"


@case("resource exhaustion", "daemons left behind by a command")
async def _daemons(env: Env) -> Verdict:
    tag = str(3000 + os.getpid() % 1000)
    with env.workspace() as ws:
        await run_tool(
            BashTool(ws, BashSettings(exit_grace=0.2)),
            command=f"setsid sleep {tag} >/dev/null 2>&1 & nohup sleep {tag} >/dev/null 2>&1 &",
        )
    for _ in range(300):  # another process's death cannot be awaited
        if not processes("sleep", tag):
            return "contained", "every process the command started died with it"
        await asyncio.sleep(0.01)
    for pid in processes("sleep", tag):  # ours: clean up
        os.kill(pid, 9)
    return "leaked", "a process the command started outlived it"


@case("resource exhaustion", "stdin read by a command")
async def _stdin(env: Env) -> Verdict:
    with env.workspace() as ws:
        started = time.monotonic()
        out = text_of(
            await run_tool(
                BashTool(ws, BashSettings(max_timeout=5)), command="cat; read x; echo done"
            )
        )
    seconds = time.monotonic() - started
    return ("contained" if seconds < 3 else "leaked"), f"{seconds:.1f} s: {out[:80]}"


for _name, _target in {"a FIFO in a searched folder": "search", "a FIFO listed": "list",
                       "a FIFO read": "read"}.items():  # fmt: skip

    def _fifo(name: str, target: str) -> None:
        @case("resource exhaustion", name)
        async def attack(env: Env) -> Verdict:
            with env.workspace() as ws:
                os.mkfifo(ws / "pipe")
                tools = {"search": (SearchTool(ws), {"pattern": "x"}),
                         "list": (ListFilesTool(ws), {}),
                         "read": (ReadFileTool(ws), {"path": "pipe"})}  # fmt: skip
                chosen, args = tools[target]
                try:
                    result = await asyncio.wait_for(run_tool(chosen, **args), 15)
                except TimeoutError:
                    return "leaked", "the tool hung on the FIFO"
            return "contained", text_of(result)[:120]

    _fifo(_name, _target)


@case("resource exhaustion", "a catastrophic regular expression")
async def _redos(env: Env) -> Verdict:
    with env.workspace() as ws:
        (ws / "a.txt").write_text(("a" * 5000 + "!\n") * 5)
        search = SearchTool(ws, SearchSettings(timeout=1))
        started = time.monotonic()
        out = text_of(await asyncio.wait_for(run_tool(search, pattern="(a|aa)+$"), 60))
    seconds = time.monotonic() - started
    return ("contained" if seconds < 5 else "leaked"), f"{seconds:.1f} s: {out[:100]}"


@case("resource exhaustion", "20 000 files listed")
async def _many_files(env: Env) -> Verdict:
    with env.workspace() as ws:
        for i in range(20_000):
            (ws / "sub" / f"f{i}").touch()
        return await _measure(run_tool(ListFilesTool(ws), max_depth=5))


@case("resource exhaustion", "a 50 MB tool result")
async def _huge_result(env: Env) -> Verdict:
    @tool
    def dump() -> str:
        """Return a lot."""
        return "z" * (50 * MB)

    provider = ScriptedProvider([Reply(tool_calls=[call("dump", {})]), Reply("ok")])
    context = AgentContext(tools=[dump])
    await agent_loop("go", context, AgentLoopConfig(provider=provider))
    sent = json.dumps(provider.requests[-1].payload())
    return ("contained" if len(sent) < 400 * 1024 else "leaked"), f"{len(sent)} bytes sent"


# --------------------------------------------------------------------------- input boundary


async def _refused(prompts: Any, context: AgentContext | None = None) -> Verdict:
    events: list[Any] = []
    provider = ScriptedProvider(["x"])
    try:
        await agent_loop(prompts, context or AgentContext(), AgentLoopConfig(provider=provider),
                         events=events.append)  # fmt: skip
    except UserError as exc:
        if events or provider.requests:
            return "leaked", f"UserError after {len(events)} events: {exc}"
        return "blocked", str(exc)[:200]
    except Exception as exc:
        return "leaked", f"{type(exc).__name__}: {exc}"[:200]
    return "leaked", "the run started"


class _Raw:
    def __init__(self, **attributes: Any) -> None:
        self.name, self.description = "raw", "raw"
        self.parameters: dict[str, Any] = {"type": "object", "properties": {}}
        self.__dict__.update(attributes)

    async def execute(self, args: dict[str, Any], ctx: Any) -> str:
        return "ok"


_BAD_INPUT: dict[str, tuple[Any, Any]] = {
    "prompt None": (None, None), "prompt 123": (123, None), "prompt [None]": ([None], None),
    "prompt bytes": (b"hi", None), "prompt dict": ({"role": "user"}, None),
    "prompt list of dicts": ([{"role": "user", "content": "hi"}], None),
    "prompt lone surrogate": ("x\ud800y", None), "prompt empty": ("   ", None),
    "message with surrogate": ([UserMessage(content=[TextContent(text="\udcff")])], None),
    "dict in context.messages": ("hi", AgentContext(messages=[{"role": "user"}])),  # type: ignore[list-item]
    "system prompt surrogate": ("hi", AgentContext(system_prompt="\ud83d")),
    "schema type 42": ("hi", AgentContext(tools=[_Raw(parameters={"type": 42})])),
    "schema not an object": ("hi", AgentContext(tools=[_Raw(parameters={"type": "array"})])),
    "schema with NaN": ("hi", AgentContext(tools=[_Raw(parameters={"type": "object", "default": math.nan})])),
    "tool name with spaces": ("hi", AgentContext(tools=[_Raw(name="rm -rf")])),
    "tool name of 100 chars": ("hi", AgentContext(tools=[_Raw(name="a" * 100)])),
    "duplicate tool names": ("hi", AgentContext(tools=[_Raw(), _Raw()])),
    "tool without execute": ("hi", AgentContext(tools=[type("T", (), {"name": "t", "parameters": {}})()])),
}  # fmt: skip

for _name, (_prompts, _context) in _BAD_INPUT.items():

    def _input(name: str, prompts: Any, context: Any) -> None:
        @case("bad input at the boundary", name)
        async def attack(env: Env) -> Verdict:
            return await _refused(prompts, context)

    _input(_name, _prompts, _context)


_EXIT = textwrap.dedent(
    """
    import asyncio, sys
    from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop_stream
    from phi_core.testing import Reply, ScriptedProvider, call
    from phi_core.tools import tool
    kind = {"SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt,
            "GeneratorExit": GeneratorExit}[sys.argv[1]]
    @tool
    def boom() -> str:
        "Raise in a worker thread."
        raise kind()
    async def main():
        provider = ScriptedProvider([Reply(tool_calls=[call("boom", {}), call("boom", {})]), "x"])
        ends = 0
        try:
            async for event in agent_loop_stream("go", AgentContext(tools=[boom]),
                                                 AgentLoopConfig(provider=provider)):
                ends += event.type == "agent_end"
        finally:
            print("ends", ends)
    try:
        asyncio.run(main())
    except BaseException as exc:
        print("raised", type(exc).__name__)
    """
)

for _kind in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):

    def _exit(kind: str) -> None:
        @case("bad input at the boundary", f"{kind} raised in a tool")
        async def attack(env: Env) -> Verdict:
            done = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-c", _EXIT, kind], capture_output=True,
                text=True, timeout=60,
            )  # fmt: skip
            lines = done.stdout.split()
            ok = lines[:4] == ["ends", "1", "raised", kind] and "Task" not in done.stderr
            detail = f"stdout {done.stdout.strip()!r}, stderr {done.stderr.strip()[:120]!r}"
            return ("contained" if ok else "leaked"), detail

    _exit(_kind)


@case("bad input at the boundary", "NaN and infinities in a tool result")
async def _nan(env: Env) -> Verdict:
    @tool
    def stats() -> Any:
        """Numbers."""
        return {"mean": math.nan, "max": math.inf}

    provider = ScriptedProvider([Reply(tool_calls=[call("stats", {})]), Reply("ok")])
    context = AgentContext(tools=[stats])
    await agent_loop("go", context, AgentLoopConfig(provider=provider))
    result = next(m for m in context.messages if isinstance(m, ToolResultMessage))
    text = "".join(c.text for c in result.content if isinstance(c, TextContent))

    def bare(name: str) -> Any:
        raise ValueError(name)

    try:
        json.loads(text, parse_constant=bare)
    except ValueError as exc:
        return "leaked", f"invalid JSON sent: {exc}"
    return "contained", text


@case("bad input at the boundary", "invalid Unicode reaching a provider is not retried")
async def _surrogate_retry(env: Env) -> Verdict:
    from phi_core.providers._common import malformed_stream
    from phi_core.providers.base import ModelConfig, StreamRequest

    attempts = 0

    class Encoder:
        name = "encoder"

        async def stream(self, request: StreamRequest) -> Any:
            nonlocal attempts
            attempts += 1
            try:
                "\ud800".encode()
            except UnicodeEncodeError as exc:
                raise malformed_stream("encoder", "m", exc) from None
            yield  # pragma: no cover

    model = ModelConfig(provider="encoder", id="m", api="scripted")
    try:
        async for _ in stream_with_retry(Encoder(), StreamRequest(model, []), RetryPolicy(max_retries=3),
                                         sleep=lambda delay: asyncio.sleep(0)):  # fmt: skip
            pass
    except Exception as exc:
        verdict = "blocked" if attempts == 1 else "leaked"
        return verdict, f"{attempts} attempt(s): {type(exc).__name__}"
    return "leaked", "no error"


@case("bad input at the boundary", "one AgentEnd when a queued message is garbage")
async def _queued(env: Env) -> Verdict:
    queue: list[Any] = [None, {"role": "user"}, 42]
    events: list[Any] = []

    def steering() -> list[Any]:
        out, queue[:] = list(queue), []
        return out

    result = await agent_loop("go", AgentContext(),
                              AgentLoopConfig(provider=ScriptedProvider(["ok"]), get_steering_messages=steering),
                              events=events.append)  # fmt: skip
    ends = sum(isinstance(e, AgentEnd) for e in events)
    ok = ends == 1 and result.reason == "completed"
    return ("contained" if ok else "leaked"), f"{ends} AgentEnd, reason {result.reason}"
