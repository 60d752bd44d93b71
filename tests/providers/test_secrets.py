"""An API key never reaches events, errors, reprs or logs — through the real agent loop."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers.base import ModelConfig
from phi_core.providers.retry import RetryPolicy

from .fakes import FakeServer, Respond, Stream
from .fakes.anthropic_wire import error, text_reply

KEY = "sk-ant-api03-TOPSECRET-abcdefghijklmnopqrstuvwxyz"


@pytest.mark.parametrize("fail", [False, True])
async def test_key_is_absent_from_events_result_and_logs(
    caplog: pytest.LogCaptureFixture, fail: bool
) -> None:
    caplog.set_level(logging.DEBUG)
    script: list[Any] = (
        [Respond(500, error("api_error", f"echoing {KEY}")), Respond(401, error("authentication_error", f"bad key {KEY}"))]
        if fail
        else [Stream(text_reply("hello"))]
    )  # fmt: skip
    events: list[Any] = []
    async with FakeServer(script) as server:
        model = ModelConfig(provider="anthropic", id="claude-haiku-4-5", api="anthropic_messages",
                            base_url=server.url, api_key=KEY)  # type: ignore[arg-type]  # fmt: skip
        config = AgentLoopConfig(model=model, retry=RetryPolicy(max_retries=2, base_delay=0.001))
        result = await agent_loop("hi", AgentContext(), config, events=events.append)
    dumped = [e.model_dump_json() for e in events]
    assert events, "the loop emitted events"
    assert (result.reason == "error") is fail
    texts = [*dumped, repr(result), str(result.error), json.dumps([m.model_dump(mode="json") for m in result.messages]),
             repr(config), repr(model), caplog.text]  # fmt: skip
    assert all(KEY not in t for t in texts)
