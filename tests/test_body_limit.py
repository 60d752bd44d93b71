"""``BodyLimit``: phi's HTTP servers refuse a request body past their limit with a 413, whether
it announces its length or not, and read no more of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from phi_core._net import BodyLimit

LIMIT = 1024


def app_reading_bodies(seen: list[int]) -> Starlette:
    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        seen.append(len(body))
        return JSONResponse({"size": len(body)})

    return Starlette(routes=[Route("/", echo, methods=["POST"])])


def client(seen: list[int]) -> httpx.AsyncClient:
    limited = BodyLimit(app_reading_bodies(seen), LIMIT, body=lambda m: {"error": {"message": m}})
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=limited), base_url="http://t")


async def test_a_body_within_the_limit_reaches_the_app() -> None:
    seen: list[int] = []
    async with client(seen) as c:
        reply = await c.post("/", content=b"x" * LIMIT)
    assert reply.status_code == 200 and reply.json() == {"size": LIMIT} and seen == [LIMIT]


async def test_a_declared_length_past_the_limit_is_refused_before_the_app_runs() -> None:
    seen: list[int] = []
    async with client(seen) as c:
        reply = await c.post("/", content=b"x" * (LIMIT + 1))
    assert reply.status_code == 413 and seen == []
    assert "larger than this server accepts (1,024 bytes)" in reply.json()["error"]["message"]


@pytest.mark.parametrize("length", ["abc", "-5", "1" * 40])
async def test_a_length_that_is_no_size_or_huge_is_refused(length: str) -> None:
    seen: list[int] = []
    async with client(seen) as c:
        reply = await c.post("/", content=b"{}", headers={"content-length": length})
    assert reply.status_code == 413 and seen == []


async def test_a_chunked_body_is_counted_and_cut_off_at_the_limit() -> None:
    seen: list[int] = []
    sent: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(100):
            sent.append(512)
            yield b"x" * 512

    async with client(seen) as c:
        reply = await c.post("/", content=chunks())
    assert reply.status_code == 413, reply.text
    assert seen == []  # the app never got the body


async def test_websockets_and_lifespan_pass_through() -> None:
    calls: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope["type"])

    await BodyLimit(app, LIMIT, body=dict)({"type": "lifespan"}, None, None)
    assert calls == ["lifespan"]
