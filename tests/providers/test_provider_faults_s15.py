"""Provider faults found against the wire fakes: unparseable Retry-After, a Bedrock stream that
froze the event loop when abandoned, parallel tool calls sharing one index, cache tokens of a
user price billed at $0, auth errors that did not say which key, Gemini's malformed events and
bad-key 400s, and a Responses content filter reported as a length stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from phi_core.config import agent_from_config, parse_config
from phi_core.errors import (
    AuthError,
    BadRequestError,
    CallTimeoutError,
    OverloadedError,
    RateLimitedError,
    ServerError,
)
from phi_core.metering import Meter, metering
from phi_core.providers._common import classify_error, parse_retry_after
from phi_core.providers.base import ModelConfig, StreamDone, StreamRequest
from phi_core.providers.call import ModelCall
from phi_core.providers.deadlines import CallDeadlines
from phi_core.providers.registry import get_provider, resolve_model
from phi_core.providers.retry import RetryPolicy, stream_with_retry
from phi_core.types import Pricing, ToolCall, ToolCallDelta, Usage, UserMessage

from .fakes import FakeServer, Respond, Stream
from .fakes import anthropic_wire as aw
from .fakes import bedrock_wire as bw
from .fakes import google_wire as gw
from .fakes import openai_wire as ow
from .fakes import responses_wire as rw
from .fakes.server import Recorded, sse
from .helpers import SleepRecorder, collect

KEY = "sk-test-SECRETKEY0123456789abcdef"
BEDROCK_ID = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
AWS_SECRET = "wJalrFAKESECRETKEYbPxRfiCYEXAMPLEKEY"


def _request(model: ModelConfig) -> StreamRequest:
    return StreamRequest(model, [UserMessage.text("x")])


# ------------------------------------------------------------------ one fake per vendor


def _openai(url: str) -> ModelConfig:
    return resolve_model("openai:gpt-4o-mini", base_url=f"{url}/v1", api_key=KEY)


def _responses(url: str) -> ModelConfig:
    return resolve_model("openai-responses:gpt-5-mini", base_url=f"{url}/v1", api_key=KEY)


def _anthropic(url: str) -> ModelConfig:
    return resolve_model("anthropic:claude-haiku-4-5", base_url=url, api_key=KEY)


def _google(url: str) -> ModelConfig:
    return resolve_model("google:gemini-2.5-flash", base_url=url, api_key=KEY)


def _bedrock(url: str) -> ModelConfig:
    return resolve_model(f"bedrock:{BEDROCK_ID}", base_url=url, api_key=f"AKIAFAKEACCESS:{AWS_SECRET}",
                         compat={"region": "us-west-2"})  # fmt: skip


def _bedrock_stream(frames: list[bytes], **kw: Any) -> Stream:
    return Stream(frames, content_type=bw.CONTENT_TYPE, **kw)


# (name, model for a server URL, a rate-limit/overload answer with these headers, a good answer)
Vendor = tuple[
    str,
    Callable[[str], ModelConfig],
    Callable[[int, dict[str, str]], Respond],
    Callable[[], Stream],
]
VENDORS: list[Vendor] = [
    ("openai", _openai,
     lambda status, h: Respond(status, ow.error_body("slow down", "rate_limit_exceeded"), h),
     lambda: Stream(ow.text_reply("ok"))),
    ("openai-responses", _responses,
     lambda status, h: Respond(status, ow.error_body("slow down", "rate_limit_exceeded"), h),
     lambda: Stream(rw.text_reply("ok"))),
    ("anthropic", _anthropic,
     lambda status, h: Respond(status, aw.error("rate_limit_error", "slow down"), h),
     lambda: Stream(aw.text_reply("ok"))),
    ("google", _google,
     lambda status, h: Respond(status, gw.gerror(status, "RESOURCE_EXHAUSTED", "slow down"), h),
     lambda: Stream(gw.text_reply("ok"))),
    ("bedrock", _bedrock,
     lambda status, h: Respond(status, {"message": "slow down"},
                               {**h, "x-amzn-errortype": "ThrottlingException"}),
     lambda: _bedrock_stream(bw.text_reply("ok"))),
]  # fmt: skip
VENDOR_IDS = [v[0] for v in VENDORS]


async def _run(
    model: ModelConfig,
    sleep: SleepRecorder,
    *,
    deadlines: CallDeadlines | None = None,
    errors: list[str] | None = None,
) -> list[object]:
    return [
        item
        async for item in stream_with_retry(
            get_provider(model),
            _request(model),
            RetryPolicy(max_retries=2),
            limiter=None,
            sleep=sleep,
            deadlines=deadlines,
            on_retry=(lambda _n, e, _d: errors.append(e.kind)) if errors is not None else None,
        )
    ]


# ------------------------------------------------------------------ 1. Retry-After that is no delay


@pytest.mark.parametrize("vendor", VENDORS, ids=VENDOR_IDS)
@pytest.mark.parametrize("value", ["soon", "1s", "Wed, 99 Foo 2025 00:00:00 GMT", "nan"])
async def test_a_429_with_an_unparseable_retry_after_is_rate_limited_and_retried(
    vendor: Vendor, value: str
) -> None:
    _, model_for, failing, good = vendor
    sleep = SleepRecorder()
    errors: list[str] = []
    async with FakeServer([failing(429, {"retry-after": value}), good()]) as server:
        items = await _run(model_for(server.url), sleep, errors=errors)
    assert isinstance(items[-1], StreamDone) and items[-1].message.text == "ok"
    assert len(server.requests) == 2 and errors == ["rate_limited"]
    # No vendor delay: the policy's own back-off (base 0.5 s, jitter 25 %).
    assert len(sleep.delays) == 1 and 0.3 <= sleep.delays[0] <= 0.7


async def test_a_503_with_a_malformed_retry_after_is_overloaded_and_retried() -> None:
    sleep = SleepRecorder()
    script: list[Respond | Stream] = [
        Respond(503, ow.error_body("busy", "server_error"), {"retry-after": "in a bit"}),
        Stream(ow.text_reply("ok")),
    ]
    async with FakeServer(script) as server:
        items = await _run(_openai(server.url), sleep)
    assert isinstance(items[-1], StreamDone) and len(server.requests) == 2
    assert len(sleep.delays) == 1 and sleep.delays[0] < 1.0


async def test_an_unparseable_retry_after_never_escapes_unclassified() -> None:
    """The raw error would chain the SDK exception, whose request headers hold the key."""
    async with FakeServer([Respond(429, ow.error_body("slow"), {"retry-after": "soon"})]) as server:
        model = _openai(server.url)
        with pytest.raises(RateLimitedError) as info:
            await collect(get_provider(model), _request(model))
    assert info.value.retry_after is None
    assert info.value.__cause__ is None and info.value.__context__ is None


async def test_valid_retry_after_values_still_count() -> None:
    sleep = SleepRecorder()
    script: list[Respond | Stream] = [
        Respond(429, ow.error_body("slow"), {"retry-after": "3"}),
        Respond(429, ow.error_body("slow"), {"retry-after-ms": "bogus", "retry-after": "2"}),
        Stream(ow.text_reply("ok")),
    ]
    async with FakeServer(script) as server:
        await _run(_openai(server.url), sleep)
    assert sleep.delays == [3.0, 2.0]


def test_parse_retry_after_takes_seconds_dates_and_nothing_else() -> None:
    assert parse_retry_after({"Retry-After": "4"}) == 4.0
    assert parse_retry_after({"retry-after-ms": "1500"}) == 1.5
    assert parse_retry_after({"retry-after": "-3"}) == 0.0
    for junk in ("soon", "1s", "", "inf", "nan", "Wed, 99 Foo 2025 00:00:00 GMT", "\x00"):
        assert parse_retry_after({"retry-after": junk}) is None, junk
    assert parse_retry_after({"retry-after-ms": "inf"}) is None
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # past
    future = time.strftime("%a, %d %b %Y %H:%M:%S", time.gmtime(time.time() + 30))
    for zone in ("GMT", "-0000", "+0000"):
        seconds = parse_retry_after({"retry-after": f"{future} {zone}"})
        assert seconds is not None and 25 <= seconds <= 31, zone


class _BrokenHeaders(dict[str, str]):
    def items(self) -> Any:
        raise RuntimeError("headers that cannot be listed")


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


def test_classify_error_never_raises_for_odd_fields() -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    cases: list[dict[str, Any]] = [
        {"headers": _BrokenHeaders(a="b")},
        {"body": circular},
        {"body": {"detail": _Opaque()}},
        {"body": {1: {2, 3}}},
        {"error_type": 429},
    ]
    for extra in cases:
        error = classify_error(status=429, message="slow", provider="openai", model="m", **extra)
        assert isinstance(error, RateLimitedError) and error.retry_after is None, extra
    odd_status = classify_error(status="503", message="x", provider="p", model="m")  # type: ignore[arg-type]
    assert odd_status.status is None


# ------------------------------------------------------------------ 2. Bedrock: abandoning a stream


@contextlib.contextmanager
def _server_thread(script: list[Any]) -> Iterator[FakeServer]:
    """A fake on its own thread and event loop, as a remote endpoint is: its silence goes on
    whatever the test's loop does (a fake on the test's loop would stall with it)."""
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def run() -> None:
        async def main() -> None:
            holder["stop"] = asyncio.Event()
            async with FakeServer(script) as server:
                holder["server"] = server
                ready.set()
                await holder["stop"].wait()

        loop = asyncio.new_event_loop()
        holder["loop"] = loop
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="fake-remote-bedrock", daemon=True)
    thread.start()
    assert ready.wait(5), "the fake server did not start"
    try:
        yield holder["server"]
    finally:
        holder["loop"].call_soon_threadsafe(holder["stop"].set)
        thread.join(10)


class _Heartbeat:
    """Beats every 20 ms on the test's loop; ``longest`` is the longest the loop was blocked."""

    def __init__(self) -> None:
        self.beats: list[float] = []
        self.task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        while True:
            self.beats.append(time.monotonic())
            await asyncio.sleep(0.02)

    def start(self) -> None:
        self.task = asyncio.create_task(self._beat())

    async def stop(self) -> float:
        assert self.task is not None
        self.beats.append(time.monotonic())
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        return max(b - a for a, b in zip(self.beats, self.beats[1:], strict=False))


def _bedrock_workers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == f"bedrock-{BEDROCK_ID}"}


async def _eventually(predicate: Callable[[], bool], within: float) -> bool:
    end = time.monotonic() + within
    while not predicate():
        if time.monotonic() >= end:
            return False
        await asyncio.sleep(0.02)
    return True


async def _gone(threads: set[threading.Thread], within: float) -> bool:
    return await _eventually(lambda: not any(t.is_alive() for t in threads), within)


async def _closed(record: Recorded, within: float) -> bool:
    return await _eventually(lambda: record.ended_at is not None, within)


STALL = 3.0  # how long the fake stays silent at most; the fix must not wait for any of it
SILENT_AFTER_FIVE = [bw.event("messageStart", {"role": "assistant"})] + [
    bw.event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": f"w{i} "}})
    for i in range(10)
]


async def _consume(model: ModelConfig, got: list[object], **kw: Any) -> None:
    async for item in stream_with_retry(get_provider(model), _request(model), limiter=None, **kw):
        got.append(item)


async def _until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    end = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < end, "timed out waiting"
        await asyncio.sleep(0.01)


async def test_bedrock_cancel_mid_stream_frees_the_loop_at_once_and_ends_the_worker() -> None:
    stream = _bedrock_stream(SILENT_AFTER_FIVE, stall_after=5, stall_limit=STALL)
    with _server_thread([stream]) as server:
        model = _bedrock(server.url)
        get_provider(model)  # built first: making a boto3 client is slow, and not on trial here
        before = _bedrock_workers()
        heart = _Heartbeat()
        heart.start()
        got: list[object] = []
        task = asyncio.create_task(_consume(model, got))
        await _until(lambda: len(got) >= 4)  # the upstream now says nothing
        await asyncio.sleep(0.1)
        started = time.monotonic()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        took = time.monotonic() - started
        longest = await heart.stop()
        workers = _bedrock_workers() - before
        assert took < 0.5, f"cancel took {took:.2f}s"
        assert longest < 0.5, f"the event loop froze for {longest:.2f}s"
        assert await _gone(workers, 2.0), "the worker thread is still blocked in its read"
        assert await _closed(server.requests[0], 2.0), "the connection was never closed"


async def test_bedrock_idle_deadline_ends_the_call_without_freezing_the_loop() -> None:
    stream = _bedrock_stream(SILENT_AFTER_FIVE, stall_after=5, stall_limit=STALL)
    with _server_thread([stream]) as server:
        model = _bedrock(server.url)
        get_provider(model)  # built first: making a boto3 client is slow, and not on trial here
        before = _bedrock_workers()
        heart = _Heartbeat()
        heart.start()
        got: list[object] = []
        started = time.monotonic()
        with pytest.raises(CallTimeoutError):
            await _consume(model, got, deadlines=CallDeadlines(idle=0.3))
        took = time.monotonic() - started
        longest = await heart.stop()
        workers = _bedrock_workers() - before
        assert len(got) >= 4
        assert took < 1.5, f"the idle deadline ended the call after {took:.2f}s"
        assert longest < 0.5, f"the event loop froze for {longest:.2f}s"
        assert await _gone(workers, 2.0), "the worker thread is still blocked in its read"
        assert await _closed(server.requests[0], 2.0), "the connection was never closed"


async def test_bedrock_stream_opened_after_the_caller_left_is_closed_unread() -> None:
    async def slow_headers(_: Recorded) -> Stream:
        await asyncio.sleep(0.4)  # the caller cancels while the worker waits for the headers
        return _bedrock_stream(bw.text_reply("late"), stall_after=0, stall_limit=STALL)

    with _server_thread([slow_headers]) as server:
        model = _bedrock(server.url)
        before = _bedrock_workers()
        task = asyncio.create_task(_consume(model, []))
        await _until(lambda: len(server.requests) == 1)
        await asyncio.sleep(0.05)
        started = time.monotonic()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 0.3
        workers = _bedrock_workers() - before
        assert workers, "the worker thread should still be waiting for the headers"
        assert await _gone(workers, 1.5), "the worker read a stream nobody wanted"
        assert await _closed(server.requests[0], 1.0)


async def test_bedrock_normal_stream_still_completes_and_ends_its_worker() -> None:
    async with FakeServer([_bedrock_stream(bw.text_reply("fine"))]) as server:
        model = _bedrock(server.url)
        before = _bedrock_workers()
        _, message = await collect(get_provider(model), _request(model))
        assert message.text == "fine" and message.stop_reason == "stop"
        assert await _gone(_bedrock_workers() - before, 2.0)


# ------------------------------------------------------------------ 3. parallel calls at one index


def _call(index: int | None, id: str | None, name: str | None, args: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function", "function": {"arguments": args}}
    if index is not None:
        out["index"] = index
    if id is not None:
        out["id"] = id
    if name is not None:
        out["function"]["name"] = name
    return out


async def _chat_calls(model_spec: str, *chunks: dict[str, Any]) -> Any:
    frames = ow.chat_stream(*chunks, ow.chunk({}, "tool_calls"), ow.usage_chunk(10, 5))
    async with FakeServer([Stream(frames)]) as server:
        model = resolve_model(model_spec, base_url=f"{server.url}/v1", api_key=KEY)
        return await collect(get_provider(model), _request(model))


async def test_ollama_parallel_calls_all_at_index_zero_stay_separate_calls() -> None:
    deltas, message = await _chat_calls(
        "ollama:qwen3",
        ow.chunk({"tool_calls": [_call(0, "call_a", "read_file", '{"path": "a"}')]}),
        ow.chunk({"tool_calls": [_call(0, "call_b", "list_dir", '{"path": "b"}')]}),
    )
    calls = [c for c in message.content if isinstance(c, ToolCall)]
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_a", "read_file", {"path": "a"}),
        ("call_b", "list_dir", {"path": "b"}),
    ]
    assert message.stop_reason == "tool_use"
    call_deltas = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert [d.index for d in call_deltas] == [0, 1]


async def test_calls_without_an_index_are_told_apart_by_their_ids() -> None:
    _, message = await _chat_calls(
        "openai:gpt-4o-mini",
        ow.chunk({"tool_calls": [_call(None, "a", "f", '{"x": ')]}),
        ow.chunk({"tool_calls": [_call(None, None, None, "1}")]}),  # continues call "a"
        ow.chunk({"tool_calls": [_call(None, "b", "g", '{"y": 2}')]}),
    )
    calls = [c for c in message.content if isinstance(c, ToolCall)]
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("a", "f", {"x": 1}),
        ("b", "g", {"y": 2}),
    ]


async def test_one_call_that_repeats_its_id_on_every_chunk_stays_one_call() -> None:
    _, message = await _chat_calls(
        "openai:gpt-4o-mini",
        ow.chunk({"tool_calls": [_call(0, "a", "f", '{"x"')]}),
        ow.chunk({"tool_calls": [_call(0, "a", None, ": 1}")]}),
        ow.chunk({"tool_calls": [_call(1, "b", "g", "{}")]}),
    )
    calls = [c for c in message.content if isinstance(c, ToolCall)]
    assert [(c.id, c.arguments) for c in calls] == [("a", {"x": 1}), ("b", {})]


# ------------------------------------------------------------------ 4. cache prices left unset


async def test_a_user_price_without_cache_prices_bills_cached_tokens_at_the_input_price() -> None:
    frames = ow.chat_stream(
        ow.chunk({"content": "hi"}), ow.chunk({}, "stop"), ow.usage_chunk(1000, 100, cached=800)
    )
    async with FakeServer([Stream(frames)]) as server:
        model = resolve_model(
            "openai:gpt-4o-mini",
            base_url=f"{server.url}/v1",
            api_key=KEY,
            pricing=Pricing(input=2.0, output=8.0),
        )
        meter = Meter()
        with metering(meter):
            call = ModelCall(get_provider(model), _request(model), limiter=None)
            async for _ in call.stream():
                pass
    assert call.message is not None
    usage = call.message.usage
    assert (usage.input, usage.cache_read, usage.output) == (200, 800, 100)
    expected = (200 * 2.0 + 800 * 2.0 + 100 * 8.0) / 1_000_000
    assert usage.cost(model.pricing) == pytest.approx(expected)
    assert meter.cost == pytest.approx(expected)


async def test_anthropic_cache_writes_and_reads_fall_back_to_the_input_price() -> None:
    frames = sse([
        aw.message_start(input_tokens=100, cache_read=1000, cache_write=200),
        aw.block_start(0, {"type": "text", "text": ""}),
        aw.block_delta(0, {"type": "text_delta", "text": "ok"}), aw.block_stop(0),
        aw.message_delta("end_turn", 50), aw.MESSAGE_STOP,
    ])  # fmt: skip
    async with FakeServer([Stream(frames), Stream(frames)]) as server:
        unset = _anthropic(server.url).model_copy(update={"pricing": Pricing(input=3, output=15)})
        _, message = await collect(get_provider(unset), _request(unset))
        free = Pricing(input=3, output=15, cache_read=0.0, cache_write=0.0)
    usage = message.usage
    assert (usage.input, usage.cache_read, usage.cache_write) == (100, 1000, 200)
    assert usage.cost(unset.pricing) == pytest.approx((1300 * 3 + 50 * 15) / 1_000_000)
    assert usage.cost(free) == pytest.approx((100 * 3 + 50 * 15) / 1_000_000)  # 0.0 is free
    explicit = Pricing(input=3, output=15, cache_read=0.3, cache_write=3.75)
    assert usage.cost(explicit) == pytest.approx(
        (100 * 3 + 1000 * 0.3 + 200 * 3.75 + 50 * 15) / 1_000_000
    )


def test_pricing_resolves_unset_cache_prices_in_one_place() -> None:
    assert Pricing(input=2).cache_read_price == 2 and Pricing(input=2).cache_write_price == 2
    assert Pricing(input=2, cache_read=0.5).cache_read_price == 0.5
    assert Pricing(input=2, cache_write=0.0).cache_write_price == 0.0
    round_trip = Pricing.model_validate(json.loads(Pricing(input=1, output=2).model_dump_json()))
    assert round_trip.cache_read is None and round_trip.cache_read_price == 1
    assert Usage(cache_read=1_000_000).cost(Pricing(input=2)) == pytest.approx(2.0)


def test_a_config_cost_section_without_cache_prices_uses_the_input_price() -> None:
    text = (
        '[provider]\nmodel = "openai:gpt-4o-mini"\napi_key = "sk-config-0123456789abcdef"\n'
        "[provider.cost]\ninput_per_million = 2.0\noutput_per_million = 8.0\n"
    )

    def priced(config_text: str) -> Pricing:
        model = agent_from_config(parse_config(config_text, "toml")).config.model
        assert isinstance(model, ModelConfig)
        return model.pricing

    pricing = priced(text)
    assert pricing.cache_read is None and pricing.cache_write is None
    assert Usage(cache_read=1000, cache_write=500).cost(pricing) == pytest.approx(1500 * 2.0 / 1e6)
    free = priced(text + "cache_read_per_million = 0.0\n")
    assert free.cache_read == 0.0 and Usage(cache_read=1000).cost(free) == 0.0


# ------------------------------------------------------------------ 5. auth errors name the key


async def test_a_401_names_the_key_variable_and_phi_keys_set() -> None:
    cases: list[tuple[Callable[[str], ModelConfig], Respond, str, str]] = [
        (_openai, Respond(401, ow.error_body("Incorrect API key", code="invalid_api_key")),
         "OPENAI_API_KEY", "openai"),
        (_responses, Respond(401, ow.error_body("Incorrect API key", code="invalid_api_key")),
         "OPENAI_API_KEY", "openai-responses"),
        (_anthropic, Respond(401, aw.error("authentication_error", "invalid x-api-key")),
         "ANTHROPIC_API_KEY", "anthropic"),
        (_google, Respond(401, gw.gerror(401, "UNAUTHENTICATED", "bad key")),
         "GEMINI_API_KEY", "google"),
    ]  # fmt: skip
    for model_for, answer, env, provider in cases:
        sleep = SleepRecorder()
        async with FakeServer([answer]) as server:
            with pytest.raises(AuthError) as info:
                await _run(model_for(server.url), sleep)
        text = str(info.value)
        assert env in text and f"`phi keys set {provider}`" in text, text
        assert "check the API key" in text, text
        assert len(server.requests) == 1 and sleep.delays == []
        assert KEY not in text


async def test_a_bedrock_403_points_at_the_aws_credentials() -> None:
    answer = Respond(
        403, {"message": "not authorized"}, {"x-amzn-errortype": "AccessDeniedException"}
    )
    async with FakeServer([answer]) as server:
        with pytest.raises(AuthError) as info:
            await _run(_bedrock(server.url), SleepRecorder())
    text = str(info.value)
    assert "AWS_ACCESS_KEY_ID" in text and "AWS_PROFILE" in text and AWS_SECRET not in text
    assert "REDACTED" not in text


# ------------------------------------------------------------------ 6, 7. Gemini faults


async def test_a_malformed_gemini_stream_event_is_a_retried_server_error() -> None:
    sleep = SleepRecorder()
    errors: list[str] = []
    script = [Stream([b"data: {oops\n\n"]), Stream(gw.text_reply("ok"))]
    async with FakeServer(script) as server:
        items = await _run(_google(server.url), sleep, errors=errors)
    assert errors == ["server"] and len(server.requests) == 2
    assert isinstance(items[-1], StreamDone) and items[-1].message.text == "ok"
    async with FakeServer([Stream([b"data: {oops\n\n"])]) as server:
        model = _google(server.url)
        with pytest.raises(ServerError, match="malformed stream event"):
            await collect(get_provider(model), _request(model))


async def test_a_gemini_invalid_api_key_400_is_an_auth_error() -> None:
    body = {
        "error": {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                }
            ],
        }
    }
    sleep = SleepRecorder()
    async with FakeServer([Respond(400, body)]) as server:
        with pytest.raises(AuthError) as info:
            await _run(_google(server.url), sleep)
    assert len(server.requests) == 1 and sleep.delays == []
    assert "GEMINI_API_KEY" in str(info.value) and info.value.status == 400


async def test_another_gemini_invalid_argument_stays_a_bad_request() -> None:
    body = gw.gerror(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
    async with FakeServer([Respond(400, body)]) as server:
        with pytest.raises(BadRequestError):
            await _run(_google(server.url), SleepRecorder())


# ------------------------------------------------------------------ 8. Responses incomplete reason


@pytest.mark.parametrize(
    ("reason", "expected"),
    [("content_filter", "error"), ("max_output_tokens", "length"), (None, "length")],
)
async def test_responses_incomplete_maps_its_reason(reason: str | None, expected: str) -> None:
    details = {"reason": reason} if reason else None
    frames = sse([
        rw.ev("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta="x", logprobs=[]),
        rw.ev("response.incomplete", response=rw.response("incomplete", rw.usage(5, 5), incomplete_details=details)),
    ])  # fmt: skip
    async with FakeServer([Stream(frames)]) as server:
        model = _responses(server.url)
        _, message = await collect(get_provider(model), _request(model))
    assert message.stop_reason == expected and message.text == "x"


# ------------------------------------------------------------------ helpers' own sanity


def test_overloaded_is_still_overloaded_with_junk_headers() -> None:
    error = classify_error(
        status=503, message="busy", provider="anthropic", model="m", headers={"retry-after": "x"}
    )
    assert isinstance(error, OverloadedError) and error.retry_after is None


# ------------------------------------------------------------------ a server that reports no usage


async def test_a_reply_without_usage_is_estimated_flagged_and_counted_against_the_budget() -> None:
    from phi_core.errors import BudgetExceededError
    from phi_core.metering import Budget

    words = "word " * 2000  # about 2,000 words, no usage chunk

    def no_usage() -> list[bytes]:
        return ow.chat_stream(ow.chunk({"content": words}), ow.chunk({}, "stop"))

    async with FakeServer() as server:
        server.default = lambda _rec: Stream(no_usage())
        model = _openai(server.url)
        meter = Meter(Budget(max_tokens=5000))
        sent = refused = 0
        with metering(meter):
            for _ in range(5):
                call = ModelCall(get_provider(model), _request(model), limiter=None)
                try:
                    async for _item in call.stream():
                        pass
                except BudgetExceededError:
                    refused += 1
                    continue
                sent += 1
                assert call.usage_estimated and call.message is not None
                assert call.message.usage.output >= 2000  # on the message the loop counts too
    assert meter.usage.output >= 2 * 2000
    assert all(c.estimated for c in meter.calls if c.sent)
    assert refused >= 1 and sent < 5  # the budget saw the tokens and refused


async def test_a_reply_with_usage_is_not_estimated() -> None:
    async with FakeServer([Stream(ow.text_reply("hi", prompt=7, completion=2))]) as server:
        model = _openai(server.url)
        call = ModelCall(get_provider(model), _request(model), limiter=None)
        async for _item in call.stream():
            pass
    assert not call.usage_estimated
    assert call.message is not None and (call.message.usage.input, call.message.usage.output) == (
        7,
        2,
    )
