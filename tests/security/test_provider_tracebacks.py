"""Secrets in tracebacks: the classified error of every provider, built by the provider itself
from a real SDK error whose message holds the API key (a local server echoes it, as some
gateways do), must not show the key anywhere in its full formatted traceback — chained
``__cause__``/``__context__`` included — nor in a logged traceback."""

from __future__ import annotations

import logging
import secrets
import traceback
from collections.abc import Callable

import pytest

from phi_core.errors import AuthError, ProviderError
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.providers.registry import get_provider, resolve_model
from phi_core.types import UserMessage
from tests.providers.fakes import FakeServer, Respond
from tests.providers.fakes.anthropic_wire import error as anthropic_error
from tests.providers.fakes.google_wire import gerror
from tests.providers.fakes.openai_wire import error_body

# Shaped like no known key (so the pattern-based scrubbing cannot be what hides it): only the
# exact-value redaction and the unchained errors keep it out.
KEY = "Zq" + secrets.token_hex(20)


def _openai(url: str) -> ModelConfig:
    return ModelConfig(provider="openai", id="gpt-4o-mini", base_url=url, api_key=KEY)  # type: ignore[arg-type]


def _responses(url: str) -> ModelConfig:
    return ModelConfig(
        provider="openai-responses",
        id="gpt-5-mini",
        api="openai_responses",
        base_url=f"{url}/v1",
        api_key=KEY,  # type: ignore[arg-type]
    )


def _anthropic(url: str) -> ModelConfig:
    return ModelConfig(
        provider="anthropic",
        id="claude-haiku-4-5",
        api="anthropic_messages",
        base_url=url,
        api_key=KEY,  # type: ignore[arg-type]
    )


def _google(url: str) -> ModelConfig:
    return resolve_model("google:gemini-2.5-flash", base_url=url, api_key=KEY)


def _bedrock(url: str) -> ModelConfig:
    return resolve_model(
        "bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0",
        base_url=url,
        api_key=f"AKIAFAKEACCESS:{KEY}",
        compat={"region": "us-west-2"},
    )


ECHO = f"the credential {KEY} is revoked"
CASES: dict[str, tuple[Callable[[str], ModelConfig], Respond]] = {
    "openai": (_openai, Respond(401, error_body(ECHO, code="invalid_api_key"))),
    "openai-responses": (_responses, Respond(401, error_body(ECHO, code="invalid_api_key"))),
    "anthropic": (_anthropic, Respond(401, anthropic_error("authentication_error", ECHO))),
    "google": (_google, Respond(401, gerror(401, "UNAUTHENTICATED", ECHO))),
    "bedrock": (
        _bedrock,
        Respond(403, {"message": ECHO}, headers={"x-amzn-errortype": "AccessDeniedException"}),
    ),
}


async def _classified(name: str) -> ProviderError:
    make_model, response = CASES[name]
    async with FakeServer([response]) as server:
        model = make_model(server.url)
        request = StreamRequest(model=model, messages=[UserMessage.text("hi")])
        with pytest.raises(ProviderError) as caught:
            async for _ in get_provider(model).stream(request):
                pass
    return caught.value


@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_full_traceback_of_a_classified_provider_error_never_shows_the_key(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    error = await _classified(name)
    assert isinstance(error, AuthError), f"{name}: {error!r}"
    text = "".join(traceback.format_exception(error))
    assert KEY not in text
    # The classification keeps what the raw error said that is safe to keep.
    assert error.cause_type is not None and error.status in (401, 403)
    assert "[REDACTED]" in str(error), "the vendor's message is kept, with the key scrubbed"
    logger = logging.getLogger("tests.security.tracebacks")
    with caplog.at_level(logging.ERROR):
        try:
            raise error
        except ProviderError:
            logger.exception("call failed")
    assert caplog.records and KEY not in caplog.text


def test_the_sdk_message_really_holds_the_key() -> None:
    """The attack is real: the vendor messages above do carry the key (so the absence above is
    the providers' doing, not an empty message)."""
    assert all(KEY in repr(response.body) for _, response in CASES.values())
