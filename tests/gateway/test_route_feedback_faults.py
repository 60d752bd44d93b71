"""Faults around ``route:`` answers and ``POST /v1/feedback``: a repeated feedback is learned
once (also when the repeats race each other), a link store that cannot be read is a 503 with
``Retry-After`` (not a 404), a route whose link cannot be written is answered all the same and
says so (``x-phi-feedback: unavailable``), a SQLite state corrupted while the gateway runs fails
no paid request, and a JSON number past Python's digit limit is a counted 400."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from phi_core.gateway import Gateway
from phi_core.routing import SQLiteStateStore

from ..providers.fakes import FakeServer
from ..routing.test_stores import running_redis
from .helpers import gateway_config, live_gateway


def route_body(content: str, stream: bool = False) -> dict[str, Any]:
    return {"model": "route:duo", "stream": stream,
            "messages": [{"role": "user", "content": content}]}  # fmt: skip


def _n(state: Path, arm: str) -> float:
    store = SQLiteStateStore(state)
    [namespace] = store.namespaces()
    return store.load(namespace)[arm].n


def _corrupt(state: Path) -> None:
    with open(state, "r+b") as f:
        f.truncate(1000)
    for suffix in ("-wal", "-shm"):
        state.with_name(state.name + suffix).unlink(missing_ok=True)


def _moved_aside(folder: Path) -> list[Path]:
    return list(folder.glob("state.sqlite.corrupt-*"))


async def test_repeated_feedback_is_learned_once_and_answered_as_a_duplicate(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path
) -> None:
    state = tmp_path / "state.sqlite"
    gateway = Gateway(gateway_config(upstream.url, state=str(state)), run_log=None)
    async with live_gateway(gateway) as url, httpx.AsyncClient(base_url=url) as client:
        reply = (await client.post("/v1/chat/completions", json=route_body("hello"))).json()
        arm = reply["phi"]["winner"]
        before = _n(state, arm)
        first = await client.post("/v1/feedback", json={"id": reply["id"], "score": 1.0})
        again = [
            await client.post("/v1/feedback", json={"id": reply["id"], "score": s})
            for s in (1.0, 0.0)
        ]
        after = _n(state, arm)
        # repeats racing each other: one of them at most is learned
        other = (await client.post("/v1/chat/completions", json=route_body("other"))).json()
        other_before = _n(state, other["phi"]["winner"])
        raced = await asyncio.gather(
            *(client.post("/v1/feedback", json={"id": other["id"], "score": 0.5}) for _ in range(8))
        )
        metrics = (await client.get("/metrics")).text
    assert first.status_code == 200 and "duplicate" not in first.json()
    for repeat in again:
        assert repeat.status_code == 200, repeat.text
        assert repeat.json() == {**first.json(), "duplicate": True}  # the first score's answer
    assert after == before + 1
    assert [r.status_code for r in raced] == [200] * 8
    assert sum(1 for r in raced if not r.json().get("duplicate")) == 1
    assert _n(state, other["phi"]["winner"]) == other_before + 1
    assert 'phi_gateway_feedback_total{profile="duo"} 2' in metrics
    assert 'phi_gateway_feedback_duplicates_total{profile="duo"} 9' in metrics


@pytest.mark.server
async def test_feedback_while_redis_is_down_is_a_503_and_routes_say_feedback_is_unavailable(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with running_redis(tmp_path) as (redis_url, proc):
        gateway = Gateway(gateway_config(upstream.url, state=redis_url), run_log=None)
        async with live_gateway(gateway) as url, httpx.AsyncClient(base_url=url) as client:
            before = (await client.post("/v1/chat/completions", json=route_body("q0"))).json()
            assert (await client.get("/readyz")).status_code == 200
            proc.terminate()
            await asyncio.to_thread(proc.wait, 10)
            with caplog.at_level(logging.WARNING, logger="phi_core.gateway"):
                down = await client.post("/v1/feedback", json={"id": before["id"], "score": 1})
                routed = [
                    await client.post("/v1/chat/completions", json=route_body(f"q{i}"))
                    for i in range(1, 3)
                ]
                streamed = await client.post(
                    "/v1/chat/completions", json=route_body("q3", stream=True)
                )
                unlinked = await client.post(
                    "/v1/feedback", json={"id": routed[0].json()["id"], "score": 1}
                )
    assert down.status_code == 503, down.text
    assert down.headers["retry-after"] == "5"
    error = down.json()["error"]
    assert error["code"] == "feedback_store_unavailable" and "cannot be reached" in error["message"]
    for reply in routed:
        assert reply.status_code == 200, reply.text  # paid for: answered all the same
        assert reply.headers["x-phi-feedback"] == "unavailable"
        assert reply.json()["phi"]["feedback"] == "unavailable"
    assert streamed.status_code == 200 and '"feedback": "unavailable"' in streamed.text
    assert unlinked.status_code == 409, unlinked.text
    assert unlinked.json()["error"]["code"] == "feedback_unavailable"
    warnings = [r for r in caplog.records if "feedback links cannot be written" in r.message]
    assert len(warnings) == 1  # one per outage, not one per request


async def test_a_sqlite_state_corrupted_while_serving_fails_no_route_nor_feedback(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state.sqlite"
    gateway = Gateway(gateway_config(upstream.url, state=str(state)), run_log=None)
    async with live_gateway(gateway) as url, httpx.AsyncClient(base_url=url) as client:
        for i in range(20):  # enough pages that a truncation damages them
            await client.post("/v1/chat/completions", json=route_body(f"warm {i} " + "x" * 300))
        _corrupt(state)
        for route in gateway.routes.values():
            route.loaded_at = 0.0  # the next request reloads (as it would a second later)
        with caplog.at_level(logging.WARNING):
            replies = [
                await client.post("/v1/chat/completions", json=route_body(f"after {i}"))
                for i in range(3)
            ]
            scored = [
                await client.post("/v1/feedback", json={"id": r.json()["id"], "score": 0.5})
                for r in replies
                if r.status_code == 200
            ]
    assert [r.status_code for r in replies] == [200] * 3, [r.text for r in replies]
    assert all("x-phi-feedback" not in r.headers for r in replies)  # links written again
    assert [s.status_code for s in scored] == [200] * 3, [s.text for s in scored]
    assert _moved_aside(tmp_path)
    assert "moved it to" in caplog.text and "left unchanged" not in caplog.text
    assert "Traceback" not in caplog.text


async def test_a_number_past_the_digit_limit_is_a_counted_400_in_openais_shape(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path
) -> None:
    big = b"1" + b"0" * 5000
    bodies = {
        "/v1/chat/completions": b'{"model": "route:duo", "max_tokens": '
        + big
        + b', "messages": [{"role": "user", "content": "hi"}]}',
        "/v1/feedback": b'{"id": "chatcmpl-x", "score": ' + big + b"}",
    }
    gateway = Gateway(gateway_config(upstream.url, state=str(tmp_path / "s.sqlite")), run_log=None)
    headers = {"content-type": "application/json"}
    async with live_gateway(gateway) as url, httpx.AsyncClient(base_url=url) as client:
        replies = {p: await client.post(p, content=b, headers=headers) for p, b in bodies.items()}
        metrics = (await client.get("/metrics")).text
    for reply in replies.values():
        assert reply.status_code == 400, reply.text
        assert reply.headers["content-type"] == "application/json"
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error" and "digits" in error["message"]
    assert 'phi_gateway_requests_total{kind="unknown",route="chat",status="400"} 1' in metrics
    assert 'phi_gateway_feedback_requests_total{status="400"} 1' in metrics


async def test_a_feedback_failing_unexpectedly_is_a_json_500(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = Gateway(gateway_config(upstream.url, state=str(tmp_path / "s.sqlite")), run_log=None)

    async def broken(completion_id: Any, score: Any) -> dict[str, Any]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(gateway, "feedback", broken)
    async with live_gateway(gateway) as url, httpx.AsyncClient(base_url=url) as client:
        reply = await client.post("/v1/feedback", json={"id": "chatcmpl-x", "score": 1})
    assert reply.status_code == 500
    assert reply.json()["error"]["type"] == "server_error"


async def test_readyz_fails_while_a_file_router_state_cannot_be_read(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path
) -> None:
    folder = tmp_path / "states"
    folder.mkdir()
    state = folder / "state.sqlite"
    gateway = Gateway(gateway_config(upstream.url, state=str(state)), run_log=None)
    async with live_gateway(gateway) as url, httpx.AsyncClient(base_url=url) as client:
        ready = await client.get("/readyz")
        # the state's folder goes away and a file takes its place: nothing can open the state
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
        folder.write_text("not a folder", encoding="utf-8")
        broken = await client.get("/readyz")
        folder.unlink()
        folder.mkdir()  # back: a fresh state can be made there again
        healed = await client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert broken.status_code == 503 and "router state unreadable" in broken.text, broken.text
    assert healed.status_code == 200, healed.text
