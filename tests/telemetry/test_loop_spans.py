"""Spans of one agent run: ``invoke_agent`` parenting its ``chat`` and ``execute_tool`` spans."""

from __future__ import annotations

import asyncio
import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from phi_core.cancel import CancelToken
from phi_core.errors import RateLimitedError
from phi_core.events import Emitter
from phi_core.loop import AgentContext, AgentLoopConfig, FilterResult, LoopHooks, agent_loop
from phi_core.providers import RetryPolicy, StreamRequest
from phi_core.providers.base import ModelConfig
from phi_core.subagents import SubAgentTool
from phi_core.telemetry import EventSpans, current_instrumentation, instrument
from phi_core.testing import Fail, Hang, Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import Pricing, Usage

from .conftest import Spans

PRICING = Pricing(input=1.0, output=2.0, cache_read=0.5)


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def broken(text: str) -> str:
    """Always fails."""
    raise RuntimeError("the disk is on fire")


def config(provider: ScriptedProvider, **kw: object) -> AgentLoopConfig:
    model = ModelConfig(provider="openai", id="gpt-4o-mini", pricing=PRICING)
    return AgentLoopConfig(model=model, provider=provider, retry=RetryPolicy.none(), **kw)  # type: ignore[arg-type]


def adding_provider() -> ScriptedProvider:
    return ScriptedProvider(
        [
            Reply(
                tool_calls=[call("add", {"a": 1, "b": 2}, id="c1")],
                usage=Usage(input=10, output=5),
            ),
            Reply("It is 3.", usage=Usage(input=20, output=2, cache_read=4)),
        ]
    )


async def test_a_run_with_a_tool_is_an_agent_span_over_its_model_calls_and_tool_call(
    spans: Spans,
) -> None:
    context = AgentContext(system_prompt="Be exact.", tools=[add])
    result = await agent_loop(
        "What is 1 + 2?",
        context,
        config(adding_provider(), config_id="adder", temperature=0.2, max_tokens=100),
    )
    assert result.ok  # nobody passed a sink: the spans come from the observer alone

    agent = spans.one("invoke_agent adder")
    assert spans.roots() == [agent]
    chats = spans.named("chat gpt-4o-mini")
    tool_span = spans.one("execute_tool add")
    assert spans.children(agent) == [chats[0], tool_span, chats[1]]
    assert chats[0].end_time <= tool_span.start_time and tool_span.end_time <= chats[1].start_time

    a = agent.attributes
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.agent.name"] == "adder" and a["gen_ai.agent.id"] == context.agent_id
    assert a["gen_ai.conversation.id"] == context.session_id
    assert a["gen_ai.request.model"] == "gpt-4o-mini" and a["phi.model"] == "openai:gpt-4o-mini"
    assert a["gen_ai.usage.input_tokens"] == 10 + 20 + 4
    assert a["gen_ai.usage.output_tokens"] == 7
    assert a["phi.cost_usd"] == pytest.approx(result.cost_usd)
    assert agent.kind == SpanKind.INTERNAL and agent.status.status_code == StatusCode.UNSET

    first, second = (c.attributes for c in chats)
    assert chats[0].kind == SpanKind.CLIENT
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.max_tokens"] == 100
    assert first["gen_ai.request.temperature"] == pytest.approx(0.2)
    assert first["gen_ai.response.model"] == "gpt-4o-mini"
    assert first["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (10, 5)
    assert first["phi.cost_usd"] == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)
    assert second["gen_ai.response.finish_reasons"] == ("stop",)
    assert second["gen_ai.usage.input_tokens"] == 24  # cached input tokens included
    assert second["gen_ai.usage.cache_read.input_tokens"] == 4
    assert first["phi.cost_usd"] + second["phi.cost_usd"] == pytest.approx(result.cost_usd)

    t = tool_span.attributes
    assert t["gen_ai.operation.name"] == "execute_tool"
    assert (t["gen_ai.tool.name"], t["gen_ai.tool.call.id"]) == ("add", "c1")
    # Content is opt-in: neither prompts nor tool arguments were recorded.
    said = spans.everything_said()
    assert "What is 1 + 2?" not in said and "Be exact." not in said and '"a"' not in said
    assert not any(k.startswith("gen_ai.input") for s in spans.all for k in s.attributes)


async def test_content_is_recorded_in_the_conventions_shapes_only_when_asked(
    spans_with_content: Spans,
) -> None:
    context = AgentContext(system_prompt="Be exact.", tools=[add])
    await agent_loop("What is 1 + 2?", context, config(adding_provider()))
    spans = spans_with_content
    first, second = spans.named("chat gpt-4o-mini")
    assert json.loads(first.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "Be exact."}
    ]
    assert json.loads(first.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "What is 1 + 2?"}]}
    ]
    assert json.loads(first.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}
            ],
            "finish_reason": "tool_call",
        }
    ]
    sent = json.loads(second.attributes["gen_ai.input.messages"])
    assert sent[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "c1", "result": "3"}],
    }
    definitions = json.loads(first.attributes["gen_ai.tool.definitions"])
    assert [(d["type"], d["name"]) for d in definitions] == [("function", "add")]
    tool_span = spans.one("execute_tool add")
    assert json.loads(tool_span.attributes["gen_ai.tool.call.arguments"]) == {"a": 1, "b": 2}
    assert tool_span.attributes["gen_ai.tool.call.result"] == "3"


async def test_a_failed_call_marks_the_chat_and_agent_spans_with_its_error_kind(
    spans: Spans,
) -> None:
    provider = ScriptedProvider([Fail(RateLimitedError("slow down", retry_after=3.0))])
    result = await agent_loop("hi", AgentContext(), config(provider))
    assert not result.ok
    chat = spans.one("chat gpt-4o-mini")
    assert chat.status.status_code == StatusCode.ERROR
    assert chat.attributes["error.type"] == "rate_limited"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("error",)
    agent = spans.one("invoke_agent openai:gpt-4o-mini")
    assert agent.status.status_code == StatusCode.ERROR
    assert agent.attributes["error.type"] == "rate_limited"
    assert agent.attributes["phi.end_reason"] == "error"


async def test_a_tool_error_marks_its_span_without_recording_the_tools_output(
    spans: Spans,
) -> None:
    provider = ScriptedProvider([Reply(tool_calls=[call("broken", {"text": "x"})]), Reply("sorry")])
    await agent_loop("go", AgentContext(tools=[broken]), config(provider))
    tool_span = spans.one("execute_tool broken")
    assert tool_span.status.status_code == StatusCode.ERROR
    assert tool_span.attributes["error.type"] == "tool_error"
    assert "on fire" not in spans.everything_said()


async def test_a_cancelled_run_ends_every_span_it_opened(spans: Spans) -> None:
    token, streaming = CancelToken(), asyncio.Event()

    def hang(request: StreamRequest) -> Hang:
        streaming.set()
        return Hang("partial answ")

    provider = ScriptedProvider([hang])
    run = asyncio.create_task(agent_loop("hi", AgentContext(), config(provider), cancel=token))
    await streaming.wait()
    token.cancel()
    result = await run
    assert result.reason == "cancelled"
    chat = spans.one("chat gpt-4o-mini")
    agent = spans.one("invoke_agent openai:gpt-4o-mini")
    assert chat.attributes["error.type"] == agent.attributes["error.type"] == "cancelled"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("cancelled",)
    instrumentation = current_instrumentation()
    assert instrumentation is not None and instrumentation.spans.open_spans == 0


async def test_a_run_cancelled_from_outside_mid_tool_closes_the_tool_span(spans: Spans) -> None:
    started = asyncio.Event()

    @tool
    async def slow(x: int) -> str:
        """Waits."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    provider = ScriptedProvider([Reply(tool_calls=[call("slow", {"x": 1})])])
    run = asyncio.create_task(agent_loop("go", AgentContext(tools=[slow]), config(provider)))
    await started.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    tool_span = spans.one("execute_tool slow")
    assert tool_span.attributes["error.type"] == "cancelled"
    assert spans.parent_of(tool_span) == spans.one("invoke_agent openai:gpt-4o-mini")
    instrumentation = current_instrumentation()
    assert instrumentation is not None and instrumentation.spans.open_spans == 0


async def test_a_vetoed_run_is_still_one_agent_span_saying_so(spans: Spans) -> None:
    hooks = LoopHooks(before_loop=lambda messages: False)
    result = await agent_loop("hi", AgentContext(), config(ScriptedProvider(["x"]), hooks=hooks))
    assert result.reason == "vetoed"
    (span,) = spans.all
    assert span.name == "invoke_agent"
    assert span.attributes["phi.end_reason"] == "vetoed"
    assert span.attributes["error.type"] == "vetoed"


async def test_a_rejected_input_says_so_without_quoting_the_input(spans: Spans) -> None:
    def no_plans(text: str) -> FilterResult:
        return FilterResult.reject(f"refused: {text!r} mentions a plan")

    filters = [no_plans]
    result = await agent_loop(
        "my secret plan", AgentContext(), config(ScriptedProvider(["x"]), input_filters=filters)
    )
    assert result.reason == "rejected"
    agent = spans.one("invoke_agent openai:gpt-4o-mini")
    assert agent.attributes["error.type"] == "rejected"
    assert "secret plan" not in spans.everything_said()


async def test_a_sub_agent_runs_under_the_tool_call_that_started_it_once(spans: Spans) -> None:
    child = ScriptedProvider(["found it"])
    researcher = SubAgentTool("researcher", "child:m", provider=child).with_retry(
        RetryPolicy.none()
    )
    parent = ScriptedProvider(
        [Reply(tool_calls=[call("researcher", {"task": "look"})]), Reply("done")]
    )
    seen: list[object] = []
    await agent_loop("go", AgentContext(tools=[researcher]), config(parent), events=seen.append)
    tool_span = spans.one("execute_tool researcher")
    sub = spans.one("invoke_agent child:m")
    assert spans.parent_of(sub) == tool_span
    assert sub.attributes["phi.role"] == "sub_agent"
    assert tool_span.attributes["phi.child_loop_id"] == sub.attributes["phi.loop_id"]
    # The child's events reach the parent's sink by forwarding: each still makes one span.
    assert len(spans.named("chat m")) == 1 and len(spans.named("chat gpt-4o-mini")) == 2
    assert len(spans.all) == 1 + 2 + 1 + 1 + 1  # agent, 2 chats, tool, sub-agent, its chat


async def test_a_run_nests_under_the_applications_current_span(
    spans: Spans, tracer_provider: tuple[TracerProvider, object]
) -> None:
    tracer = tracer_provider[0].get_tracer("app")
    with tracer.start_as_current_span("handle request"):
        await agent_loop("hi", AgentContext(), config(ScriptedProvider(["hello"])))
    request = spans.one("handle request")
    agent = spans.one("invoke_agent openai:gpt-4o-mini")
    assert spans.parent_of(agent) == request
    assert agent.context.trace_id == request.context.trace_id


async def test_a_continuation_links_to_the_run_it_continues(spans: Spans) -> None:
    provider = ScriptedProvider(["first", "second"])
    first = AgentContext()
    await agent_loop("one", first, config(provider))
    second = AgentContext(
        messages=list(first.messages), session_id=first.session_id, parent_loop_id=first.loop_id
    )
    await agent_loop("two", second, config(provider))
    earlier, later = sorted(
        spans.named("invoke_agent openai:gpt-4o-mini"), key=lambda s: s.start_time
    )
    assert [link.context.span_id for link in later.links] == [earlier.context.span_id]
    assert later.attributes["phi.parent_loop_id"] == first.loop_id


async def test_after_uninstrument_runs_make_no_spans_and_unobserved_emitters_stay_idle(
    tracer_provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = tracer_provider
    with instrument(tracer_provider=provider):
        assert Emitter(None).active  # observed: the loop builds its events for the spans
        await agent_loop("one", AgentContext(), config(ScriptedProvider(["hello"])))
    assert current_instrumentation() is None
    assert not Emitter(None).active  # off: a run nobody listens to builds no events at all
    await agent_loop("two", AgentContext(), config(ScriptedProvider(["hello"])))
    assert [s.name for s in exporter.get_finished_spans()] == [
        "chat gpt-4o-mini",
        "invoke_agent openai:gpt-4o-mini",
    ]


async def test_event_spans_as_one_runs_sink_traces_that_run_only(
    tracer_provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = tracer_provider
    sink = EventSpans(provider.get_tracer("test"))
    await agent_loop("traced", AgentContext(), config(ScriptedProvider(["a"])), events=sink)
    await agent_loop("not traced", AgentContext(), config(ScriptedProvider(["b"])))
    assert sorted(s.name for s in exporter.get_finished_spans()) == [
        "chat gpt-4o-mini",
        "invoke_agent openai:gpt-4o-mini",
    ]
    assert sink.open_spans == 0
