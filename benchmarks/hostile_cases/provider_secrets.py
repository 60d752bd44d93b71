"""Hostile cases: the API key in the traceback of a classified provider error (issue 15, point 5).

A local test server speaking each vendor's wire format (127.0.0.1) answers the real provider
(official SDK) with an error whose message echoes the key, as some gateways and proxies do; the
provider classifies it. A case is ``blocked`` when the key appears nowhere in the full formatted
traceback (``traceback.format_exception``, chained ``__cause__``/``__context__`` included), in
a ``logger.exception`` record, or in ``repr``/``str`` of the error; ``leaked`` otherwise.

Run through ``benchmarks/hostile.py --only provider_secrets`` or
``python benchmarks/hostile_cases/provider_secrets.py``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import secrets
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's test doubles

from tests.providers.fakes import FakeServer, Respond
from tests.providers.fakes.anthropic_wire import error as anthropic_error
from tests.providers.fakes.google_wire import gerror
from tests.providers.fakes.openai_wire import error_body

from phi_core.errors import ProviderError
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.providers.registry import get_provider, resolve_model
from phi_core.providers.retry import RetryPolicy, stream_with_retry
from phi_core.types import UserMessage

KEY = "Qx" + secrets.token_hex(20)  # shaped like no known key: no pattern can hide it

Make = Callable[[str], ModelConfig]
MODELS: dict[str, Make] = {
    "openai": lambda url: ModelConfig(provider="openai", id="gpt-4o-mini", base_url=url, api_key=KEY),  # type: ignore[arg-type]
    "openai-responses": lambda url: ModelConfig(provider="openai-responses", id="gpt-5-mini", api="openai_responses", base_url=f"{url}/v1", api_key=KEY),  # type: ignore[arg-type]
    "anthropic": lambda url: ModelConfig(provider="anthropic", id="claude-haiku-4-5", api="anthropic_messages", base_url=url, api_key=KEY),  # type: ignore[arg-type]
    "google": lambda url: resolve_model("google:gemini-2.5-flash", base_url=url, api_key=KEY),
    "bedrock": lambda url: resolve_model("bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0", base_url=url, api_key=f"AKIAFAKEACCESS:{KEY}", compat={"region": "us-west-2"}),
}  # fmt: skip


def _responses(provider: str, status: int, text: str) -> Respond:
    if provider.startswith("openai"):
        return Respond(status, error_body(text, code="invalid_api_key" if status == 401 else None))
    if provider == "anthropic":
        kind = "authentication_error" if status == 401 else "api_error"
        return Respond(status, anthropic_error(kind, text))
    if provider == "google":
        code = {401: "UNAUTHENTICATED", 400: "INVALID_ARGUMENT"}.get(status, "INTERNAL")
        return Respond(status, gerror(status, code, text))
    kind = {401: "AccessDeniedException", 400: "ValidationException"}.get(
        status, "InternalServerException"
    )
    return Respond(status, {"message": text}, headers={"x-amzn-errortype": kind})


ECHOES = {
    "401 echoing the key": (401, f"the credential {KEY} is revoked"),
    "500 echoing the key after retries": (500, f"upstream rejected key={KEY}"),
    "400 with the key in a quoted header dump": (400, f'bad request, headers {{"authorization": "Bearer {KEY}"}}'),
}  # fmt: skip


async def _case(provider: str, status: int, text: str) -> tuple[str, str]:
    respond = _responses(provider, status, text)
    async with FakeServer(default=respond) as server:
        model = MODELS[provider](server.url)
        request = StreamRequest(model=model, messages=[UserMessage.text("hi")])
        policy = RetryPolicy(max_retries=2, base_delay=0.001)
        try:
            async for _ in stream_with_retry(get_provider(model), request, policy, limiter=None):
                pass
        except ProviderError as exc:
            error = exc
        else:
            return "leaked", "the call did not fail"
    shown = "".join(traceback.format_exception(error))
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    logger = logging.getLogger("phi_hostile_secrets")
    logger.addHandler(handler)
    try:
        try:
            raise error
        except ProviderError:
            logger.exception("model call failed")
    finally:
        logger.removeHandler(handler)
    places = {"traceback": shown, "logged": sink.getvalue(), "repr": repr(error), "str": str(error)}
    found = [name for name, value in places.items() if KEY in value]
    detail = f"{type(error).__name__} (from {error.cause_type}); key found in: {found or 'nothing'}"
    return ("leaked" if found else "blocked"), detail


async def run_cases() -> list[dict[str, str]]:
    rows = []
    for provider in MODELS:
        for name, (status, text) in ECHOES.items():
            try:
                result, detail = await _case(provider, status, text)
            except Exception as exc:  # a case the harness could not judge is reported
                result, detail = "leaked", f"the case crashed: {type(exc).__name__}: {exc}"
            rows.append({"class": "key in a chained traceback", "case": f"{provider}: {name}",
                         "result": result, "detail": detail[:400]})  # fmt: skip
    return rows


if __name__ == "__main__":
    for row in asyncio.run(run_cases()):
        print(f"{row['result']:8} {row['case']}: {row['detail']}")
