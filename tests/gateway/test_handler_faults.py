"""Faults around the chat handler: a passthrough model the gateway cannot call (its vendor's key
is not set) answers OpenAI's error shape and is counted like any failed request; a handler that
is itself cancelled (as a stopping server does) stops the work of its request first, which is
counted (499), and leaves no task of it behind."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from phi_core.errors import MissingExtraError
from phi_core.gateway import Gateway, _service, create_app
from phi_core.runlog import RunLog

from ..providers.fakes import FakeServer, Recorded, Stream
from ..providers.fakes.openai_wire import chat_stream, chunk, usage_chunk
from .helpers import gateway_config, live_gateway
from .test_disconnect import until

KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


@pytest.fixture
def no_vendor_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GROQ_API_KEY", "gsk_test-value-that-must-never-be-shown-0123456789")


def chat_body(model: str, stream: bool = False) -> dict[str, Any]:
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": "q"}]}


# ---------------------------------------------------------------- a vendor key that is not set


async def test_a_passthrough_model_without_its_key_answers_openai_503_counted_every_time(
    strict_loop: Any, upstream: FakeServer, run_log: RunLog, no_vendor_keys: None
) -> None:
    cases = [
        ("openai:gpt-4o-mini", False, "OPENAI_API_KEY"),
        ("openai:gpt-4o-mini", True, "OPENAI_API_KEY"),
        ("anthropic:claude-haiku-4-5", False, "ANTHROPIC_API_KEY"),
        ("anthropic:claude-haiku-4-5", True, "ANTHROPIC_API_KEY"),
    ]
    gateway = Gateway(gateway_config(upstream.url), run_log=run_log)
    async with live_gateway(gateway) as url, httpx.AsyncClient(base_url=url) as client:
        replies = [
            await client.post("/v1/chat/completions", json=chat_body(model, stream))
            for model, stream, _ in cases
        ]
        retrieved = await client.get("/v1/models/openai:gpt-4o-mini")
        served = await client.get(f"/v1/models/openai-compat:alpha@{upstream.url}/v1")
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x") as sdk:  # it retries
            with pytest.raises(openai.InternalServerError) as raised:
                await sdk.chat.completions.create(
                    model="openai:gpt-4o-mini", messages=[{"role": "user", "content": "q"}]
                )
        metrics = (await client.get("/metrics")).text
    for reply, (model, _, variable) in zip(replies, cases, strict=True):
        assert reply.status_code == 503, reply.text
        assert reply.headers["content-type"] == "application/json"
        assert reply.headers["x-should-retry"] == "false"  # asking again cannot help
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert (error["code"], error["type"], error["param"]) == (
            "missing_api_key",
            "server_error",
            "model",
        )
        assert variable in error["message"] and model in error["message"]
        assert "gsk_" not in reply.text
    assert retrieved.status_code == 503 and retrieved.json()["error"]["code"] == "missing_api_key"
    assert served.status_code == 200
    assert raised.value.status_code == 503 and "OPENAI_API_KEY" in raised.value.message
    # every refusal is counted, streamed or not, and the SDK did not retry it
    assert 'phi_gateway_requests_total{kind="passthrough",route="chat",status="503"} 5' in metrics
    assert "phi_gateway_in_flight 0" in metrics
    assert upstream.requests == []
    await until(lambda: len(run_log.list_runs()) == 5)
    assert {r.status for r in run_log.list_runs()} == {"error"}


async def test_a_provider_that_cannot_be_built_answers_503_model_unavailable(
    strict_loop: Any, upstream: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any other usage error of building the provider (an extra not installed…) is the gateway's
    configuration too: OpenAI's shape, 503, counted, streamed or not."""

    def unbuildable(model: Any) -> Any:
        raise MissingExtraError("The provider", "anthropic")

    monkeypatch.setattr(_service, "get_provider", unbuildable)
    gateway = Gateway(gateway_config(upstream.url), run_log=None)
    model = f"openai-compat:alpha@{upstream.url}/v1"
    async with live_gateway(gateway) as url, httpx.AsyncClient(base_url=url) as client:
        replies = [
            await client.post("/v1/chat/completions", json=chat_body(model, stream))
            for stream in (False, True)
        ]
        retrieved = await client.get(f"/v1/models/{model}")
        metrics = (await client.get("/metrics")).text
    for reply in [*replies, retrieved]:
        assert reply.status_code == 503, reply.text
        error = reply.json()["error"]
        assert error["code"] == "model_unavailable" and "phi-core[anthropic]" in error["message"]
    assert 'phi_gateway_requests_total{kind="passthrough",route="chat",status="503"} 2' in metrics


async def test_a_failure_that_is_no_gateway_error_answers_openai_500_and_is_counted(
    strict_loop: Any, upstream: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")
        yield  # an async generator, as Gateway.passthrough is

    async def broken_answer(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    gateway = Gateway(gateway_config(upstream.url), run_log=None)
    monkeypatch.setattr(gateway, "passthrough", broken)
    monkeypatch.setattr(gateway, "answer", broken_answer)
    model = f"openai-compat:alpha@{upstream.url}/v1"
    async with live_gateway(gateway) as url, httpx.AsyncClient(base_url=url) as client:
        replies = [
            await client.post("/v1/chat/completions", json=chat_body(model, stream))
            for stream in (False, True)
        ]
        metrics = (await client.get("/metrics")).text
    for reply in replies:
        assert reply.status_code == 500
        assert reply.json()["error"] == {
            "message": "The gateway failed.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    assert 'phi_gateway_requests_total{kind="passthrough",route="chat",status="500"} 2' in metrics
    assert "phi_gateway_in_flight 0" in metrics


# ---------------------------------------------------------------- the handler itself cancelled


def stall_all(record: Recorded) -> Stream:
    """Every upstream call streams three words, then nothing until its caller hangs up."""
    pieces = [chunk({"role": "assistant", "content": ""})]
    pieces += [chunk({"content": f"word{i} "}) for i in range(3)]
    return Stream(chat_stream(*pieces, chunk({}, "stop"), usage_chunk(10, 3)), stall_after=4)


@pytest.fixture
async def stalling_upstream() -> AsyncIterator[FakeServer]:
    async with FakeServer(default=stall_all) as server:
        yield server


async def post_asgi(app: Any, body: dict[str, Any], sent: list[Any]) -> None:
    """``POST /v1/chat/completions`` straight into the ASGI app, from a client that stays."""
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
        ],
        "client": ("127.0.0.1", 5555),
        "server": ("127.0.0.1", 8000),
    }
    received = False
    forever = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await forever.wait()  # the client never goes away
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope, receive, send)


SCENARIOS = {
    "race": ("race:duo", False, 10.0, 2),
    "streamed race": ("race:duo", True, 10.0, 2),
    "race whose stream started": ("race:duo", True, 0.05, 2),
    "passthrough": ("alpha", False, 10.0, 1),
    "streamed passthrough": ("alpha", True, 10.0, 1),
}


UPSTREAM_TASKS = ("FakeServer.", "StreamReader.")
"""The fake upstream's own tasks (its handlers, and the read of a stalled call waiting for the
gateway to hang up); the gateway's HTTP client reads through httpx, in no task of its own."""


def assert_stopped_answer(sent: list[Any]) -> None:
    """One response, ended: a 503 in OpenAI's error shape, or (a stream that had started) a
    final error event and ``[DONE]``."""
    starts = [m for m in sent if m["type"] == "http.response.start"]
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert len(starts) == 1 and sent[-1]["type"] == "http.response.body"
    assert not sent[-1].get("more_body")
    if starts[0]["status"] == 200:
        error = json.loads(body.split(b"data: ")[-2])  # the event before [DONE]
        assert body.rstrip().endswith(b"data: [DONE]")
    else:
        assert starts[0]["status"] == 503
        error = json.loads(body)
    assert error["error"]["code"] == "server_shutting_down"
    assert error["error"]["type"] == "server_error"


async def cancel_handler(
    gateway: Gateway, upstream: FakeServer, model: str, stream: bool, calls: int, twice: int = 0
) -> list[asyncio.Task[Any]]:
    """Start a request, cancel its handler once its upstream calls are streaming; the tasks
    started since that are still alive when the handler's cancellation has come through."""
    app = create_app(gateway)
    if model == "alpha":
        model = f"openai-compat:alpha@{upstream.url}/v1"
    baseline = asyncio.all_tasks()
    sent: list[Any] = []
    handler = asyncio.create_task(post_asgi(app, chat_body(model, stream), sent))
    await until(lambda: upstream.in_flight == calls)
    await asyncio.sleep(0.2)  # the three words have arrived; every call stalls
    handler.cancel()  # the server stops
    for _ in range(twice):  # and, while the work stops, harder
        await asyncio.sleep(0)
        handler.cancel()
    [outcome] = await asyncio.gather(handler, return_exceptions=True)
    # the stop ends as a response, not as an exception the server would log as a traceback
    # (and answer with a bare text 500)
    assert outcome is None
    assert_stopped_answer(sent)
    return [
        t
        for t in asyncio.all_tasks() - baseline
        if t is not asyncio.current_task()
        and not getattr(t.get_coro(), "__qualname__", "").startswith(UPSTREAM_TASKS)
    ]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_a_cancelled_handler_stops_its_work_first_and_counts_it(
    strict_loop: Any, stalling_upstream: FakeServer, scenario: str
) -> None:
    model, stream, keepalive_s, calls = SCENARIOS[scenario]
    config = gateway_config(stalling_upstream.url, keepalive_s=keepalive_s)
    gateway = Gateway(config, run_log=None)
    await gateway.start()
    try:
        left = await cancel_handler(gateway, stalling_upstream, model, stream, calls)
        assert left == []  # no branch, judge, race or stream outlived the handler
        assert gateway.in_flight == 0
        # every upstream call was closed (the gateway hung up; the stall ended with it)
        await until(lambda: all(r.ended_at is not None for r in stalling_upstream.requests), 2.0)
        assert len(stalling_upstream.requests) == calls  # no judge call for a stopped race
    finally:
        await gateway.close()
    kind = "passthrough" if model == "alpha" else "race"
    metrics = gateway.metrics.render()
    assert f'phi_gateway_requests_total{{kind="{kind}",route="chat",status="499"}} 1' in metrics
    assert "phi_gateway_disconnects_total{" not in metrics  # the client did not go away


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("twice", [1, 3])
async def test_a_handler_cancelled_again_while_its_work_stops_still_waits_for_it(
    strict_loop: Any, stalling_upstream: FakeServer, scenario: str, twice: int
) -> None:
    model, stream, keepalive_s, calls = SCENARIOS[scenario]
    config = gateway_config(stalling_upstream.url, keepalive_s=keepalive_s)
    gateway = Gateway(config, run_log=None)
    await gateway.start()
    try:
        left = await cancel_handler(gateway, stalling_upstream, model, stream, calls, twice)
        assert left == [] and gateway.in_flight == 0
        await until(lambda: all(r.ended_at is not None for r in stalling_upstream.requests), 2.0)
    finally:
        await gateway.close()
    kind = "passthrough" if model == "alpha" else "race"
    metrics = gateway.metrics.render()
    assert f'phi_gateway_requests_total{{kind="{kind}",route="chat",status="499"}} 1' in metrics


@pytest.mark.parametrize("scenario", ["race", "streamed passthrough"])
async def test_a_gateway_closing_as_a_stopped_request_ends_waits_to_log_it_once(
    strict_loop: Any, stalling_upstream: FakeServer, run_log: RunLog, scenario: str
) -> None:
    """uvicorn past its drain timeout cancels the handlers, then at once shuts the app down
    (the gateway closes its run log): the close waits for the stopped requests to end."""
    model, stream, _, calls = SCENARIOS[scenario]
    if model == "alpha":
        model = f"openai-compat:alpha@{stalling_upstream.url}/v1"
    gateway = Gateway(gateway_config(stalling_upstream.url), run_log=run_log)
    await gateway.start()
    sent: list[Any] = []
    handler = asyncio.create_task(post_asgi(create_app(gateway), chat_body(model, stream), sent))
    await until(lambda: stalling_upstream.in_flight == calls)
    handler.cancel()  # the server stops the request...
    await gateway.close()  # ...and closes the app without waiting for it
    [record] = run_log.list_runs()  # written by the time the close is done
    assert record.status == "cancelled" and record.source == "gateway"
    assert gateway.in_flight == 0
    await handler
    assert_stopped_answer(sent)
    assert len(run_log.list_runs()) == 1


@pytest.mark.parametrize("scenario", ["race", "passthrough", "streamed passthrough"])
async def test_a_cancelled_handler_logs_its_request_once_as_cancelled(
    strict_loop: Any, stalling_upstream: FakeServer, run_log: RunLog, scenario: str
) -> None:
    model, stream, _, calls = SCENARIOS[scenario]
    gateway = Gateway(gateway_config(stalling_upstream.url), run_log=run_log)
    await gateway.start()
    try:
        await cancel_handler(gateway, stalling_upstream, model, stream, calls)
    finally:
        await gateway.close()  # the queued records are written
    [record] = run_log.list_runs()
    assert record.status == "cancelled" and record.source == "gateway"
    assert record.output_tokens > 0  # the words streamed before it stopped
    if model.startswith("race:"):
        assert record.kind == "race" and "gateway stopped" in " ".join(record.warnings)
        assert {b.status for b in record.branches} == {"cancelled"}
