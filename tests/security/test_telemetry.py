"""Secrets never reach span attributes, span events or status descriptions — not even with
prompt and completion capture turned on (issue 19 point 5)."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from phi_core.errors import AuthError
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers import RetryPolicy
from phi_core.providers.credentials import StaticCredentialProvider
from phi_core.telemetry import instrument
from phi_core.testing import Fail, Reply, ScriptedProvider, call
from phi_core.tools import tool

# A key no pattern recognises (only its registration by the credential provider can hide it)
# and one shaped like an OpenAI key (hidden by the patterns even when nobody registered it).
REGISTERED = "zzQ9registeredMARKERv7Yx"
PATTERNED = "sk-proj-PATTERNMARKER0123456789"


@tool
def lookup(query: str) -> str:
    """Looks things up (and leaks the key into its result)."""
    return f"found {query} with token {PATTERNED}"


@pytest.fixture
def captured() -> Iterator[tuple[InMemorySpanExporter, io.StringIO]]:
    memory, console = InMemorySpanExporter(), io.StringIO()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=console)))
    with instrument(tracer_provider=provider, capture_content=True):
        yield memory, console
    provider.shutdown()


def said(spans: tuple[ReadableSpan, ...]) -> str:
    parts: list[object] = []
    for span in spans:
        parts.extend([span.name, span.status.description, *(span.attributes or {}).values()])
        for event in span.events:
            parts.extend((event.attributes or {}).values())
    return "\n".join(str(p) for p in parts)


async def test_keys_in_prompts_tool_io_and_provider_errors_never_reach_the_spans(
    captured: tuple[InMemorySpanExporter, io.StringIO],
) -> None:
    memory, console = captured
    refused = Fail(AuthError(f"Incorrect API key provided: {REGISTERED} / api_key={PATTERNED}"))
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("lookup", {"query": f"owner of {REGISTERED}"})])],
        default=refused,  # refused again after the credentials are refreshed
    )
    config = AgentLoopConfig(
        model="openai:gpt-4o-mini",
        provider=provider,
        credentials=StaticCredentialProvider(REGISTERED),
        system_prompt=f"Authorization: Bearer {PATTERNED}",
        retry=RetryPolicy.none(),
    )
    result = await agent_loop(
        f"My key is {REGISTERED}; use it.", AgentContext(tools=[lookup]), config
    )
    assert result.error_kind == "auth"
    spans = memory.get_finished_spans()
    text = said(spans)
    # the content really was captured, only the secrets are gone
    assert "My key is [REDACTED]; use it." in text
    assert "found owner of [REDACTED] with token [REDACTED]" in text
    assert any(s.attributes.get("error.type") == "auth" for s in spans)
    for secret in (REGISTERED, PATTERNED):
        assert secret not in text
        assert secret not in console.getvalue()  # what an exporter would send


async def test_without_content_capture_no_prompt_or_tool_text_is_recorded_at_all() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    scripted = ScriptedProvider([Reply(tool_calls=[call("lookup", {"query": "q"})]), Reply("ok")])
    config = AgentLoopConfig(
        model="openai:gpt-4o-mini", provider=scripted, retry=RetryPolicy.none()
    )
    with instrument(tracer_provider=provider):
        await agent_loop("private question", AgentContext(tools=[lookup]), config)
    text = said(memory.get_finished_spans())
    assert "private question" not in text and "found q" not in text and "ok" not in text.split()
    provider.shutdown()
    assert sys.modules["phi_core.telemetry._spans"]  # the spans did come from phi_core
