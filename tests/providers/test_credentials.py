"""CredentialProvider: the key per call, invalidated and retried once on an auth error."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from phi_core.errors import AuthError
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers import (
    ModelConfig,
    RefreshingCredentialProvider,
    RetryPolicy,
    StaticCredentialProvider,
)
from phi_core.providers.base import StreamRequest
from phi_core.testing import Fail, Reply, ScriptedProvider

from .fakes import FakeServer, Recorded, Respond, Stream
from .fakes.openai_wire import error_body, text_reply

OLD = "ya29.oldTOKEN7f3a9c2e11b04d55"
NEW = "ya29.newTOKEN0c8e2d61aa93f7b4"


def keys(*values: str) -> RefreshingCredentialProvider:
    queue = list(values)
    return RefreshingCredentialProvider(lambda: queue.pop(0))


def gatekeeper(valid: str) -> ScriptedProvider:
    def answer(request: StreamRequest) -> Reply | Fail:
        key = request.model.api_key_value()
        if key != valid:
            return Fail(AuthError(f"invalid api key {key}", status=401))
        return Reply("welcome")

    return ScriptedProvider(default=answer)


async def test_an_auth_error_invalidates_once_and_the_retry_uses_the_new_key() -> None:
    provider = gatekeeper(NEW)
    credentials = keys(OLD, NEW)
    result = await agent_loop(
        "hi",
        AgentContext(),
        AgentLoopConfig(provider=provider, credentials=credentials, retry=RetryPolicy.none()),
    )
    assert result.ok and result.text == "welcome"
    assert provider.calls == 2 and credentials.fetches == 2
    assert [r.model.api_key_value() for r in provider.requests] == [OLD, NEW]


async def test_a_key_that_keeps_failing_gives_the_classified_auth_error_after_two_calls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = gatekeeper("nothing-matches")
    events: list[Any] = []
    result = await agent_loop(
        "hi",
        AgentContext(),
        AgentLoopConfig(provider=provider, credentials=keys(OLD, NEW, OLD)),
        events=events.append,
    )
    assert result.reason == "error" and "invalid api key" in (result.error or "")
    assert provider.calls == 2
    # the credential never shows up in events, errors or logs
    dumped = "".join(e.model_dump_json() for e in events) + (result.error or "") + caplog.text
    assert OLD not in dumped and NEW not in dumped and "[REDACTED]" in (result.error or "")


async def test_without_credentials_an_auth_error_is_not_retried() -> None:
    provider = ScriptedProvider([Fail(AuthError("bad key", status=401)), Reply("never")])
    result = await agent_loop("hi", AgentContext(), AgentLoopConfig(provider=provider))
    assert result.reason == "error" and provider.calls == 1


async def test_a_credential_provider_that_fails_is_an_auth_error_without_the_secret() -> None:
    def broken() -> str:
        raise RuntimeError(f"vault said no for token {NEW}")

    StaticCredentialProvider(NEW)  # registers the secret, as a real vault client would have
    provider = ScriptedProvider(["never"])
    result = await agent_loop(
        "hi",
        AgentContext(),
        AgentLoopConfig(provider=provider, credentials=RefreshingCredentialProvider(broken)),
    )
    assert result.reason == "error" and provider.calls == 0
    assert "could not produce a credential" in (result.error or "")
    assert NEW not in (result.error or "")
    assert repr(StaticCredentialProvider(NEW)) == "StaticCredentialProvider('**********')"


async def test_the_refreshed_key_reaches_the_vendor_sdk_on_the_wire() -> None:
    def answer(request: Recorded) -> Respond | Stream:
        if request.headers.get("authorization") != f"Bearer {NEW}":
            return Respond(401, error_body("Incorrect API key provided", "invalid_request_error"))
        return Stream(text_reply("hello from the wire"))

    async with FakeServer(default=answer) as server:
        model = ModelConfig(provider="openai", id="gpt-4o-mini", base_url=f"{server.url}/v1")
        result = await agent_loop(
            "hi",
            AgentContext(),
            AgentLoopConfig(model=model, credentials=keys(OLD, NEW), retry=RetryPolicy.none()),
        )
    assert result.ok and result.text == "hello from the wire"
    assert [r.headers["authorization"] for r in server.requests] == [
        f"Bearer {OLD}",
        f"Bearer {NEW}",
    ]
