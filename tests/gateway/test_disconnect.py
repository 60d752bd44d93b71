"""A client that goes away cancels every upstream call of its request (closed within 1 s,
counted at the fake upstream), and what those calls used is still metered and logged."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest

from phi_core.runlog import RunLog, RunQuery

from ..providers.fakes import FakeServer, Recorded, Respond, Stream
from ..providers.fakes.openai_wire import chat_stream, chunk, usage_chunk
from .helpers import gateway_config, live_gateway, reply_rule


def slow_reply(words: int = 200, interval: float = 0.05) -> Stream:
    """A reply of ``words`` chunks, one every ``interval`` seconds (10 s in all)."""
    pieces = [chunk({"role": "assistant", "content": ""})]
    pieces += [chunk({"content": f"word{i} "}) for i in range(words)]
    return Stream(
        chat_stream(*pieces, chunk({}, "stop"), usage_chunk(10, words)), interval=interval
    )


def delayed(rule: Any, seconds: float) -> Any:
    """The fake upstream's rule ``rule``, answering ``seconds`` later."""

    async def slow(record: Any) -> Any:
        await asyncio.sleep(seconds)
        return rule(record)

    return slow


def stalling(model: str) -> Any:
    """The usual replies, except that ``model`` streams three words and then nothing more
    (until its caller hangs up)."""

    def rule(record: Recorded) -> Respond | Stream:
        if record.json.get("model") != model:
            return reply_rule(record)
        pieces = [chunk({"role": "assistant", "content": ""})]
        pieces += [chunk({"content": f"word{i} "}) for i in range(3)]
        return Stream(chat_stream(*pieces, chunk({}, "stop"), usage_chunk(10, 3)), stall_after=4)

    return rule


async def until(condition: Any, within: float = 5.0) -> None:
    """Wait (bounded) for ``condition()`` to hold: the fake upstream has no event to await."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_disconnect_mid_stream_closes_the_upstream_stream_and_keeps_its_usage(
    strict_loop: Any, upstream: FakeServer, run_log: RunLog
) -> None:
    upstream.push(slow_reply())
    model = f"openai-compat:alpha@{upstream.url}/v1"
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "long"}]}
    async with live_gateway(gateway_config(upstream.url), run_log) as url:
        async with (
            httpx.AsyncClient() as client,
            client.stream("POST", f"{url}/v1/chat/completions", json=body) as response,
        ):
            seen = ""
            async for text in response.aiter_text():
                seen += text
                if seen.count("word") >= 3:
                    break
        gone = time.monotonic()  # the response is closed: the connection is dropped
        await until(lambda: upstream.requests[0].ended_at is not None)
        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"{url}/metrics")).text
    call = upstream.requests[0]
    assert not call.completed
    assert call.ended_at is not None and call.ended_at - gone < 1.0
    assert 'phi_gateway_requests_total{kind="passthrough",route="chat",status="499"} 1' in metrics
    [record] = run_log.list_runs()
    assert record.status == "cancelled" and record.output_tokens > 0  # streamed usage, estimated


async def test_disconnect_during_a_race_cancels_every_branch(
    strict_loop: Any, upstream: FakeServer, run_log: RunLog
) -> None:
    upstream.push(slow_reply(), slow_reply())
    body = {"model": "race:duo", "stream": True, "messages": [{"role": "user", "content": "q"}]}
    async with live_gateway(gateway_config(upstream.url), run_log) as url:
        async with httpx.AsyncClient() as client:
            request = asyncio.create_task(client.post(f"{url}/v1/chat/completions", json=body))
            await until(lambda: upstream.in_flight == 2)  # both branches are streaming
            await asyncio.sleep(0.3)  # mid-stream: a few chunks (one every 50 ms) reach each
            request.cancel()  # the client goes away before the race is decided
            gone = time.monotonic()
            await asyncio.gather(request, return_exceptions=True)
        await until(lambda: all(r.ended_at is not None for r in upstream.requests))
        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"{url}/metrics")).text
    assert len(upstream.requests) == 2  # no judge call was made for a race nobody waits for
    for call in upstream.requests:
        assert not call.completed
        assert call.ended_at is not None and call.ended_at - gone < 1.0
    assert 'phi_gateway_requests_total{kind="race",route="chat",status="499"} 1' in metrics
    [record] = run_log.list_runs()
    assert record.status == "cancelled" and record.output_tokens > 0


async def test_a_streamed_race_that_outlasts_keepalive_starts_with_comments_then_answers(
    strict_loop: Any, upstream: FakeServer, run_log: RunLog
) -> None:
    """Proxies drop silent connections: a race still deciding after `keepalive_s` starts its
    stream with SSE comments; the answer follows, and the official client reads it as usual."""
    upstream.push(slow_reply(words=10), slow_reply(words=10))  # ~0.5 s each; the judge is quick
    config = gateway_config(upstream.url, keepalive_s=0.1)
    body = {"model": "race:duo", "stream": True, "messages": [{"role": "user", "content": "q"}]}
    async with live_gateway(config, run_log) as url:
        async with httpx.AsyncClient() as client:
            raw = await client.post(f"{url}/v1/chat/completions", json=body)
        upstream.push(slow_reply(words=10), slow_reply(words=10))
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as sdk:
            stream = await sdk.chat.completions.create(
                model="race:duo", messages=[{"role": "user", "content": "q"}], stream=True
            )
            chunks = [c async for c in stream]
    assert raw.status_code == 200 and raw.headers["x-phi-kind"] == "race"
    assert "x-phi-winner" not in raw.headers  # decided after the headers went out
    lines = raw.text.split("\n\n")
    assert lines[0] == ": phi is still deciding" and lines[-2] == "data: [DONE]"
    frames = [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: {")]
    text = "".join(f["choices"][0]["delta"].get("content") or "" for f in frames if f["choices"])
    assert text.startswith("word0 word1")
    assert frames[-1]["phi"]["winner"] in {"alpha", "beta"}  # the facts, in the last chunk
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text


async def test_a_race_that_fails_after_its_stream_started_ends_with_an_error_event(
    strict_loop: Any, upstream: FakeServer, run_log: RunLog
) -> None:
    config = gateway_config(upstream.url, keepalive_s=0.05)
    body = {
        "model": "race:duo",
        "stream": True,
        "messages": [{"role": "user", "content": "status:400 refused"}],  # every branch fails
    }
    upstream.default = delayed(upstream.default, 0.3)
    async with live_gateway(config, run_log) as url, httpx.AsyncClient() as client:
        raw = await client.post(f"{url}/v1/chat/completions", json=body)
    events = [e for e in raw.text.split("\n\n") if e]
    assert raw.status_code == 200 and events[0] == ": phi is still deciding"
    error = json.loads(events[-2][len("data: ") :])
    assert error["error"]["message"] and events[-1] == "data: [DONE]"


@pytest.mark.parametrize("keepalive_s", [10.0, 0.05], ids=["before", "after its stream started"])
async def test_a_race_whose_client_goes_away_is_logged_once_as_a_race_with_its_branches(
    strict_loop: Any, upstream: FakeServer, run_log: RunLog, keepalive_s: float
) -> None:
    """One branch has answered, the other is mid-stream when the client leaves: the run log
    keeps one race record (`phi logs --kind race` lists it) with both branches, their
    statuses and their usage, not a pseudo-run of the profile's name."""
    upstream.default = stalling("beta")
    config = gateway_config(upstream.url, keepalive_s=keepalive_s)
    body = {"model": "race:duo", "stream": True, "messages": [{"role": "user", "content": "q"}]}

    def alpha_done() -> bool:
        return any(r.json["model"] == "alpha" and r.completed for r in upstream.requests)

    async with live_gateway(config, run_log) as url:
        async with httpx.AsyncClient() as client:
            if keepalive_s < 1:  # the stream has started (keep-alive comments): then close it
                async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                    async for text in r.aiter_text():
                        if text.startswith(": phi is still deciding") and alpha_done():
                            break
            else:  # no byte has been sent yet
                request = asyncio.create_task(client.post(f"{url}/v1/chat/completions", json=body))
                await until(lambda: alpha_done() and upstream.in_flight == 1)
                request.cancel()
                await asyncio.gather(request, return_exceptions=True)
        await until(lambda: all(r.ended_at is not None for r in upstream.requests))
        # the request is counted when its handler ends, which may come after the upstream's end
        cancelled = 'phi_gateway_requests_total{kind="race",route="chat",status="499"} 1'
        async with httpx.AsyncClient() as client:
            for _ in range(500):
                if cancelled in (metrics := (await client.get(f"{url}/metrics")).text):
                    break
                await asyncio.sleep(0.01)
    assert cancelled in metrics
    [record] = run_log.list_runs()  # one record per run
    assert run_log.list_runs(RunQuery(kind="race")) == [record]
    assert record.kind == "race" and record.strategy == "judge" and record.status == "cancelled"
    assert record.source == "gateway" and record.winner is None
    assert "client went away" in " ".join(record.warnings)
    alpha, beta = record.branches
    assert (alpha.label, alpha.status) == ("alpha", "ok")
    assert (alpha.input_tokens, alpha.output_tokens) == (10, 5)
    assert (beta.label, beta.status) == ("beta", "cancelled") and beta.error
    assert beta.output_tokens > 0  # the three words it streamed, estimated
    assert record.input_tokens == alpha.input_tokens + beta.input_tokens
    assert record.output_tokens == alpha.output_tokens + beta.output_tokens


async def test_a_route_whose_client_goes_away_is_logged_once_as_a_bandit_race(
    strict_loop: Any, upstream: FakeServer, run_log: RunLog
) -> None:
    """A routed request (`route:`) whose arm is mid-stream when the client leaves: the route is
    stopped through its token and logged once as what it is (a bandit race, `phi logs --kind
    bandit`), with the arm's status and the usage it caused, not as a pseudo-run."""
    upstream.default = stalling("alpha")  # the router's first arm on a fresh router
    body = {"model": "route:duo", "messages": [{"role": "user", "content": "q"}]}
    async with live_gateway(gateway_config(upstream.url), run_log) as url:
        async with httpx.AsyncClient() as client:
            request = asyncio.create_task(client.post(f"{url}/v1/chat/completions", json=body))
            await until(lambda: upstream.in_flight == 1)
            await asyncio.sleep(0.3)  # its three words have arrived; then it stalls
            request.cancel()
            await asyncio.gather(request, return_exceptions=True)
        await until(lambda: all(r.ended_at is not None for r in upstream.requests))
        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"{url}/metrics")).text
    assert 'phi_gateway_requests_total{kind="route",route="chat",status="499"} 1' in metrics
    [record] = run_log.list_runs()
    assert run_log.list_runs(RunQuery(kind="bandit")) == [record]
    assert record.status == "cancelled" and record.source == "gateway"
    assert record.winner is None
    assert "route was cancelled" in " ".join(record.warnings)
    [arm] = record.branches
    assert arm.label.endswith("alpha") and arm.status == "cancelled"
    assert arm.output_tokens > 0 and record.output_tokens == arm.output_tokens
