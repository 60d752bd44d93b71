"""The loop against what its callers, tools and hooks do wrong (an outside audit): a token
cancelled before the run, tools raising their own TimeoutError, a custom BaseException or a stray
CancelledError, a malformed ToolResult, repeated tool-call ids, a hook failing after the end, and
budgets on non-ASCII text."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, ClassVar

import pytest

from phi_core.cancel import CancelToken
from phi_core.context import ExecutionLimits
from phi_core.errors import ContextOverflowError
from phi_core.loop import AgentContext, AgentLoopConfig, LoopHooks, agent_loop
from phi_core.metering import estimate_tokens
from phi_core.testing import Fail, Reply, ScriptedProvider, call
from phi_core.tools import ToolResult, tool
from phi_core.types import AssistantMessage, TextContent, Usage, UserMessage

done: list[str] = []


@tool
def act(what: str) -> str:
    """Do something that cannot be undone.

    Args:
        what: What to do.
    """
    done.append(what)
    return f"did {what}"


class Raising:
    """A tool whose execute raises ``exc``."""

    description = "raises"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def __init__(self, name: str, exc: BaseException, timeout: float | None = None) -> None:
        self.name = name
        self.exc = exc
        self.timeout = timeout

    async def execute(self, args: dict[str, Any], ctx: Any) -> Any:
        await asyncio.sleep(0)
        raise self.exc


class Returning:
    description = "returns"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value

    async def execute(self, args: dict[str, Any], ctx: Any) -> Any:
        return self.value


class Custom(BaseException):
    pass


def paired(events: list[Any]) -> bool:
    kinds = Counter(e.type for e in events)
    return all(
        kinds[f"{what}_start"] == kinds[f"{what}_end"]
        for what in ("turn", "message", "tool_execution", "agent")
    )


def results(messages: list[Any]) -> list[tuple[str, bool, str]]:
    return [
        (m.tool_call_id, m.is_error, m.content[0].text) for m in messages if m.role == "tool_result"
    ]


async def test_a_token_cancelled_before_the_run_makes_no_call_and_runs_no_tool(strict_loop):
    done.clear()
    token = CancelToken()
    token.cancel()
    provider = ScriptedProvider([Reply(tool_calls=[call("act", {"what": "A"})]), "done"])
    events: list[Any] = []
    result = await agent_loop(
        "go",
        AgentContext(tools=[act]),
        AgentLoopConfig(provider=provider),
        events=events.append,
        cancel=token.child(),
    )
    assert result.reason == "cancelled"
    assert provider.calls == 0 and done == []
    assert [e.type for e in events] == ["agent_start", "agent_end"]


async def test_a_tool_cancelled_before_it_starts_never_runs(strict_loop):
    done.clear()
    token = CancelToken()

    @tool
    def cancel_run() -> str:
        """Cancel the run (synchronously, without an await)."""
        token.cancel("stop")
        return "cancelling"

    provider = ScriptedProvider(
        [Reply(tool_calls=[call("cancel_run", {}), call("act", {"what": "B"})]), "never"]
    )
    events: list[Any] = []
    result = await agent_loop(
        "go",
        AgentContext(tools=[cancel_run, act]),
        AgentLoopConfig(provider=provider, tool_execution="sequential"),
        events=events.append,
        cancel=token,
    )
    assert result.reason == "cancelled" and done == [] and provider.calls == 1
    assert paired(events)


@pytest.mark.parametrize("tool_timeout", [None, 30.0])
async def test_a_tools_own_timeout_error_is_its_failure_not_the_tool_timeout(
    tool_timeout, strict_loop
):
    provider = ScriptedProvider([Reply(tool_calls=[call("t", {})]), "ok"])
    events: list[Any] = []
    result = await agent_loop(
        "go",
        AgentContext(tools=[Raising("t", TimeoutError("upstream API timed out"))]),
        AgentLoopConfig(provider=provider, tool_timeout=tool_timeout),
        events=events.append,
    )
    assert result.reason == "completed"
    [(_, is_error, text)] = results(result.messages)
    assert is_error and text == "Tool t failed: upstream API timed out"
    assert paired(events)


async def test_the_tool_timeout_itself_still_says_timed_out(strict_loop):
    class Slow(Returning):
        async def execute(self, args: dict[str, Any], ctx: Any) -> Any:
            await asyncio.sleep(5)

    provider = ScriptedProvider([Reply(tool_calls=[call("slow", {})]), "ok"])
    result = await agent_loop(
        "go",
        AgentContext(tools=[Slow("slow", None)]),
        AgentLoopConfig(provider=provider, tool_timeout=0.05),
    )
    [(_, is_error, text)] = results(result.messages)
    assert is_error and text == "Tool slow timed out after 0.05s."


@pytest.mark.parametrize(
    ("exc", "shown"),
    [
        (Custom("custom base"), "Tool b failed: Custom: custom base"),
        (asyncio.CancelledError(), "Tool b failed: CancelledError"),
    ],
)
async def test_a_tool_raising_a_base_exception_fails_its_call_alone(exc, shown, strict_loop):
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("b", {}), call("act", {"what": "C"})]), "ok"]
    )
    events: list[Any] = []
    result = await agent_loop(
        "go",
        AgentContext(tools=[Raising("b", exc), act]),
        AgentLoopConfig(provider=provider),
        events=events.append,
    )
    assert result.reason == "completed"
    assert [(e, t) for _, e, t in results(result.messages)] == [(True, shown), (False, "did C")]
    assert paired(events)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_tool_result_with_content_that_cannot_be_sent_is_an_error_result(strict_loop):
    provider = ScriptedProvider([Reply(tool_calls=[call("bad", {})]), "ok"])
    events: list[Any] = []
    result = await agent_loop(
        "go",
        AgentContext(tools=[Returning("bad", ToolResult(["not content"]))]),  # type: ignore[list-item]
        AgentLoopConfig(provider=provider),
        events=events.append,
    )
    assert result.reason == "completed"
    [(_, is_error, text)] = results(result.messages)
    assert is_error and "not a list of TextContent/ImageContent" in text and "str" in text
    assert paired(events)


async def test_repeated_tool_call_ids_get_ids_of_their_own(strict_loop):
    provider = ScriptedProvider(
        [
            Reply(
                tool_calls=[
                    call("act", {"what": "x"}, id="dup"),
                    call("act", {"what": "y"}, id="dup"),
                    call("act", {"what": "z"}, id=""),
                ]
            ),
            "ok",
        ]
    )
    result = await agent_loop("go", AgentContext(tools=[act]), AgentLoopConfig(provider=provider))
    assistant = next(m for m in result.messages if m.role == "assistant")
    ids = [c.id for c in assistant.tool_calls]
    assert ids[0] == "dup" and len(set(ids)) == 3 and all(ids)
    assert [r[0] for r in results(result.messages)] == ids
    # the second request answers each call exactly once
    sent = provider.requests[1].messages
    assert sorted(m.tool_call_id for m in sent if m.role == "tool_result") == sorted(ids)


async def test_transform_context_raising_on_the_overflow_resend_ends_the_message(strict_loop):
    calls = 0

    def transform(messages: list[Any]) -> list[Any]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ValueError("transform broke on the resend")
        return messages

    overflow = Fail(ContextOverflowError("prompt is too long: 250000 tokens > 200000 maximum"))
    history: list[Any] = []
    for i in range(20):
        history.append(UserMessage.text(f"question {i} " + "x" * 400))
        history.append(AssistantMessage(content=[TextContent(text=f"answer {i} " + "y" * 400)]))
    events: list[Any] = []
    with pytest.raises(ValueError, match="on the resend"):
        await agent_loop(
            "latest",
            AgentContext(messages=history),
            AgentLoopConfig(
                provider=ScriptedProvider([overflow, "never"]), transform_context=transform
            ),
            events=events.append,
        )
    assert paired(events)
    assert events[-1].type == "agent_end"


async def test_an_after_loop_hook_that_raises_adds_no_event_after_the_end(strict_loop):
    def broken(messages: list[Any], usage: Usage) -> None:
        raise RuntimeError("after_loop broke")

    events: list[Any] = []
    result = await agent_loop(
        "hi",
        AgentContext(),
        AgentLoopConfig(provider=ScriptedProvider(["hello"]), hooks=LoopHooks(after_loop=broken)),
        events=events.append,
    )
    assert result.reason == "completed"
    assert events[-1].type == "agent_end"


def test_the_budget_estimate_does_not_undercount_non_ascii_text():
    ascii_text = "This is a test sentence about context windows. " * 40
    assert estimate_tokens(ascii_text) == (len(ascii_text) + 2) // 3  # unchanged for ASCII
    # SmolLM2's tokenizer: 1720 tokens for this CJK text, 3000 for these emoji
    assert estimate_tokens("这是一个关于上下文窗口管理的测试句子，用来检查令牌计数。" * 40) >= 1720
    assert estimate_tokens("😀🚀🎉👍🔥" * 200) >= 3000


async def test_a_cjk_prompt_gets_an_output_limit_that_keeps_the_run_in_its_limit(strict_loop):
    cjk = "这是一个关于上下文窗口管理的测试句子，用来检查令牌计数。" * 40
    real_input = 1730  # what SmolLM2's tokenizer makes of it
    provider = ScriptedProvider([Reply("答", usage=Usage(input=real_input, output=1))])
    await agent_loop(
        cjk,
        AgentContext(),
        AgentLoopConfig(
            provider=provider, max_tokens=4000, limits=ExecutionLimits(max_total_tokens=4000)
        ),
    )
    [request] = provider.requests
    assert request.max_tokens is not None and real_input + request.max_tokens <= 4000
