"""Hostile cases: a model endpoint that stalls or drips (issue 15, point 3).

Each case points the real ``openai`` SDK provider (through the agent loop or the one call path,
``ModelCall``) at a local OpenAI-compatible test server on 127.0.0.1 that misbehaves — silent
before its headers' body, silent after the first delta, one byte a second, a reply that never
ends — and measures when the call ended. ``contained``: it ended within its deadline + 1 s with
a ``timeout`` error (the usage that had streamed counted where some did); ``leaked``: it ran
past that, or ended some other way. ``max_duration`` cases run the agent loop against the same
server, and against a tool that never returns.

Run through ``benchmarks/hostile.py --only deadlines`` or
``python benchmarks/hostile_cases/deadlines.py``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's test doubles

from tests.providers.fakes import FakeServer, Stream
from tests.providers.fakes.openai_wire import chat_stream, chunk

from phi_core.context.limits import ExecutionLimits
from phi_core.errors import ProviderError
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.metering import Meter, metering
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.providers.call import ModelCall
from phi_core.providers.deadlines import CallDeadlines
from phi_core.providers.registry import get_provider
from phi_core.providers.retry import RetryPolicy
from phi_core.testing import Hang, Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import UserMessage

Verdict = tuple[str, str]
GRACE = 1.0


def _reply(deltas: int = 200) -> list[bytes]:
    return chat_stream(
        chunk({"role": "assistant", "content": ""}),
        *[chunk({"content": f" word{i}"}) for i in range(deltas)],
        chunk({}, "stop"),
    )


def _model(url: str) -> ModelConfig:
    return ModelConfig(
        provider="openai", id="gpt-4o-mini", base_url=url, api_key="sk-hostile-000001"
    )  # type: ignore[arg-type]


async def _call(
    stream: Stream, deadlines: CallDeadlines, bound: float, *, streamed: bool
) -> Verdict:
    meter = Meter()
    async with FakeServer([stream]) as server:
        model = _model(server.url)
        request = StreamRequest(model=model, messages=[UserMessage.text("hi")])
        started = time.monotonic()
        kind = "none"
        try:
            with metering(meter):
                mc = ModelCall(
                    get_provider(model), request, retry=RetryPolicy.none(), deadlines=deadlines
                )
                await asyncio.wait_for(_drain(mc), bound + 30)
        except ProviderError as exc:
            kind = exc.kind
        except TimeoutError:
            kind = "hung"
        seconds = time.monotonic() - started
    usage = meter.calls[-1].usage.output if meter.calls else 0
    detail = f"ended after {seconds:.1f} s (bound {bound:g} s + {GRACE:g}), error {kind}, {usage} output tokens counted"
    ok = kind == "timeout" and seconds <= bound + GRACE and (usage > 0 or not streamed)
    return ("contained" if ok else "leaked"), detail


async def _drain(mc: ModelCall) -> None:
    async for _ in mc.stream():
        pass


async def _loop_stall(max_duration: float) -> Verdict:
    async with FakeServer([Stream(_reply(), stall_after=3)]) as server:
        config = AgentLoopConfig(model=_model(server.url), retry=RetryPolicy.none(),
                                 limits=ExecutionLimits(max_duration=max_duration))  # fmt: skip
        started = time.monotonic()
        result = await asyncio.wait_for(agent_loop("hi", AgentContext(), config), max_duration + 30)
        seconds = time.monotonic() - started
    ok = result.reason == "limit" and seconds <= max_duration + GRACE and result.usage.output > 0
    return (
        "contained" if ok else "leaked"
    ), f"{result.reason}/{result.error_kind} after {seconds:.1f} s"


async def _loop_tool(max_duration: float) -> Verdict:
    @tool
    async def forever() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return ""

    provider = ScriptedProvider([Reply(tool_calls=[call("forever")]), Hang()])
    config = AgentLoopConfig(provider=provider, limits=ExecutionLimits(max_duration=max_duration))
    started = time.monotonic()
    result = await asyncio.wait_for(
        agent_loop("go", AgentContext(tools=[forever]), config), max_duration + 30
    )
    seconds = time.monotonic() - started
    ok = result.reason == "limit" and seconds <= max_duration + GRACE
    return (
        "contained" if ok else "leaked"
    ), f"{result.reason}/{result.error_kind} after {seconds:.1f} s"


CASES: list[tuple[str, str, Callable[[], Awaitable[Verdict]]]] = [
    ("stalled stream", "silent after the headers, total 2 s",
     lambda: _call(Stream(_reply(), stall_after=0), CallDeadlines(total=2.0), 2.0, streamed=False)),
    ("stalled stream", "silent after the first deltas, total 2 s",
     lambda: _call(Stream(_reply(), stall_after=3), CallDeadlines(total=2.0), 2.0, streamed=True)),
    ("stalled stream", "silent after the first deltas, idle 1 s",
     lambda: _call(Stream(_reply(), stall_after=3), CallDeadlines(idle=1.0), 1.0, streamed=True)),
    ("stalled stream", "silent from the start, first byte 1 s",
     lambda: _call(Stream(_reply(), stall_after=0), CallDeadlines(first_byte=1.0), 1.0, streamed=False)),
    ("dripping stream", "one byte a second, total 3 s",
     lambda: _call(Stream(_reply(), drip=1.0), CallDeadlines(total=3.0, idle=None), 3.0, streamed=False)),
    ("dripping stream", "one byte every 5 ms, total 2 s",
     lambda: _call(Stream(_reply(), drip=0.005), CallDeadlines(total=2.0), 2.0, streamed=False)),
    ("dripping stream", "deltas every 0.3 s for ever, idle 1 s, total 2 s",
     lambda: _call(Stream(_reply(5000), drip=0.002), CallDeadlines(idle=1.0, total=2.0), 2.0, streamed=True)),
    ("max_duration", "agent loop on a stalled stream, 1.5 s", lambda: _loop_stall(1.5)),
    ("max_duration", "agent loop in a tool that never returns, 1 s", lambda: _loop_tool(1.0)),
]  # fmt: skip


async def _warm_up() -> None:
    """One ordinary call first: the SDK's first use imports and builds its client, which blocks
    the event loop for a moment and is not what the cases measure."""
    async with FakeServer([Stream(_reply(3))]) as server:
        model = _model(server.url)
        request = StreamRequest(model=model, messages=[UserMessage.text("hi")])
        await _drain(ModelCall(get_provider(model), request, retry=RetryPolicy.none()))


async def run_cases() -> list[dict[str, str]]:
    await _warm_up()
    rows = []
    for cls, name, attack in CASES:
        try:
            result, detail = await attack()
        except Exception as exc:  # a case the harness could not judge is reported as a failure
            result, detail = "leaked", f"the case crashed: {type(exc).__name__}: {exc}"
        rows.append({"class": cls, "case": name, "result": result, "detail": detail[:400]})
    return rows


if __name__ == "__main__":
    for row in asyncio.run(run_cases()):
        print(f"{row['result']:9} {row['class']:16} {row['case']}: {row['detail']}")
