"""Test doubles for the gateway tests: an OpenAI-compatible upstream on 127.0.0.1 (the shared
:class:`~tests.providers.fakes.FakeServer` with a reply rule) and a live gateway in the test's
event loop (a real uvicorn server on a free port)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import uvicorn

from phi_core.gateway import Gateway, GatewayConfig, create_app
from phi_core.runlog import RunLog

from ..providers.fakes import Recorded, Respond, Stream
from ..providers.fakes.openai_wire import chat_stream, chunk, error_body, text_reply, usage_chunk

__all__ = ["gateway_client", "gateway_config", "live_gateway", "reply_rule", "tool_call_reply"]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def tool_call_reply(name: str, arguments: str) -> list[bytes]:
    return chat_stream(
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
        chunk({}, "tool_calls"),
        usage_chunk(12, 7),
    )


def reply_rule(record: Recorded) -> Respond | Stream:
    """How the fake upstream answers: judges name answer 1, rubric judges score every answer,
    a request with tools calls the first tool, any other request gets ``<model> says: <last
    user text>``; a last message starting ``status:NNN`` gets that error status."""
    body = record.json
    messages = body.get("messages", [])
    system = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
    last = _text(messages[-1].get("content")) if messages else ""
    if last.startswith("status:"):
        status = int(last.split(":")[1][:3])
        headers = {"retry-after": "7"} if status == 429 else {}
        return Respond(status, error_body(f"upstream says {status}"), headers=headers)
    if '"scores"' in system + last:
        scores = [
            {"answer": i, "reason": "fine", "relevance": 0.9, "coverage": 0.8, "faithfulness": 0.9}
            for i in range(1, 5)
        ]
        return Stream(text_reply(json.dumps({"scores": scores}), prompt=40, completion=30))
    if "impartial judge" in system:
        return Stream(text_reply("1"))
    if body.get("tools"):
        tool = body["tools"][0]["function"]["name"]
        return Stream(tool_call_reply(tool, '{"city": "Paris"}'))
    return Stream(text_reply(f"{body['model']} says: {last}", prompt=10, completion=5))


def gateway_config(upstream_url: str, **gateway: Any) -> GatewayConfig:
    """Profiles over two upstream models: ``duo`` (judge strategy) and ``first`` (pick-first);
    the two models are listed, so they are served as passthrough models too."""
    alpha = f"openai-compat:alpha@{upstream_url}/v1"
    beta = f"openai-compat:beta@{upstream_url}/v1"
    branches = [{"name": "alpha", "model": alpha}, {"name": "beta", "model": beta}]
    return GatewayConfig.model_validate(
        {
            "gateway": {"retries": 0, "models": [alpha, beta], **gateway},
            "profiles": {
                "duo": {"strategy": "judge", "branches": branches},
                "first": {"strategy": "pick-first", "branches": branches},
            },
        }
    )


@asynccontextmanager
async def live_gateway(
    gateway: Gateway | GatewayConfig, log: RunLog | None = None
) -> AsyncIterator[str]:
    """A real uvicorn server on 127.0.0.1 (free port) serving ``gateway``; yields its URL."""
    if isinstance(gateway, GatewayConfig):
        gateway = Gateway(gateway, run_log=log)
    config = uvicorn.Config(
        create_app(gateway), host="127.0.0.1", port=0, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the gateway stopped before it started")
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def gateway_client(
    gateway: Gateway | GatewayConfig, log: RunLog | None = None
) -> AsyncIterator[openai.AsyncOpenAI]:
    """The official ``openai`` client (no retries of its own) of a :func:`live_gateway`."""
    async with (
        live_gateway(gateway, log) as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client,
    ):
        yield client
