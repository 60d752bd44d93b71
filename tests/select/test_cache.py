"""Cache keys cover the whole request, every sampling parameter and the sample index."""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from pathlib import Path

import pytest

from phi_core.errors import StateStoreError
from phi_core.metering import metering
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.providers.call import ModelCall
from phi_core.providers.call import request_key as cache_key
from phi_core.select import ResponseCache
from phi_core.testing import ScriptedProvider
from phi_core.types import AssistantMessage, TextContent, UserMessage


def request(**changes: object) -> StreamRequest:
    base = StreamRequest(
        model=ModelConfig(provider="openai", id="gpt-4o-mini"), messages=[UserMessage.text("hi")]
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_identical_requests_share_a_key_even_with_different_message_timestamps() -> None:
    a = request(messages=[UserMessage(content=[TextContent(text="hi")], timestamp=1)])
    b = request(messages=[UserMessage(content=[TextContent(text="hi")], timestamp=2)])
    assert cache_key(a) == cache_key(b)


def test_every_sampling_parameter_and_the_sample_index_change_the_key() -> None:
    base = cache_key(request())
    variants = [
        request(temperature=0.7),
        request(top_p=0.9),
        request(seed=1),
        request(max_tokens=10),
        request(thinking="high"),
        request(system_prompt="be brief"),
        request(messages=[UserMessage.text("hello")]),
        request(model=ModelConfig(provider="openai", id="gpt-4o")),
        request(
            model=ModelConfig(provider="openai", id="gpt-4o-mini", base_url="http://127.0.0.1:9/v1")
        ),
    ]
    keys = {cache_key(v) for v in variants}
    assert base not in keys and len(keys) == len(variants)
    assert cache_key(request(temperature=0.7), sample=0) != cache_key(
        request(temperature=0.7), sample=1
    )


def test_a_model_default_temperature_counts_like_a_request_temperature() -> None:
    hot = ModelConfig(provider="openai", id="gpt-4o-mini", temperature=0.9)
    assert cache_key(request(model=hot)) == cache_key(request(temperature=0.9))
    assert cache_key(request(model=hot)) != cache_key(request())


async def test_the_cache_persists_messages_and_latency(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    message = AssistantMessage(content=[TextContent(text="hello")], model="m")
    await cache.put("k", message, 1.5)
    cache.close()
    reopened = ResponseCache(path)
    hit = await reopened.get("k")
    assert hit is not None and hit.message.text == "hello" and hit.latency == 1.5
    assert await reopened.get("other") is None
    assert len(reopened) == 1


async def test_a_locked_cache_never_fails_a_call_already_paid_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cache.sqlite"
    cache = ResponseCache(path, timeout=0.1)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process is writing, and keeps the lock
    model = ModelConfig(provider="scripted", id="m", api="scripted")
    try:
        with metering() as meter, caplog.at_level(logging.WARNING):
            call = ModelCall(
                ScriptedProvider(["paid answer"]),
                StreamRequest(model=model, messages=[UserMessage.text("hi")]),
                cache=cache,
                limiter=None,
            )
            async for _ in call.stream():
                pass
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert call.message is not None and call.message.text == "paid answer"
    assert len(meter.calls) == 1 and meter.calls[0].error_kind is None
    warning = next(r.getMessage() for r in caplog.records if "cache write failed" in r.getMessage())
    assert "locked" in warning and "the answer is kept" in warning
    assert len(cache) == 0
    cache.close()


def set_aside(folder: Path, name: str) -> list[bytes]:
    """The contents of the files moved aside as damaged copies of ``name``."""
    companions = ("-wal", "-shm", "-journal")
    return [
        p.read_bytes() for p in folder.glob(f"{name}.corrupt-*") if not p.name.endswith(companions)
    ]


async def test_a_damaged_cache_file_is_moved_aside_and_a_fresh_one_takes_its_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cache.sqlite"
    garbage = b"this is not a database\n" * 200
    path.write_bytes(garbage)
    cache = ResponseCache(path)
    message = AssistantMessage(content=[TextContent(text="hello")])
    await cache.put("k", message, 0.5)
    assert (await cache.get("k")) is not None
    cache.close()
    assert set_aside(tmp_path, "cache.sqlite") == [garbage]  # kept, not deleted
    assert cache.set_aside is not None and cache.set_aside.read_bytes() == garbage
    assert any(
        "is not a response cache" in r.message and "moved it to" in r.message
        for r in caplog.records
    )


def test_a_cache_that_cannot_be_opened_names_the_file_and_why(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(StateStoreError, match=r"Cannot open the response cache .*file/c\.sqlite"):
        ResponseCache(blocker / "c.sqlite")
