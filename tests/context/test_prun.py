"""prun / prun_with_memo: the model prunes its own older work; the log and user messages stay."""

from __future__ import annotations

from typing import Any

from phi_core.agent import BasicAgent
from phi_core.context import PrunTool, apply_prunes, prun_tools
from phi_core.events import AGENT_EVENT_ADAPTER, PrunApplied, TurnRequest
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers import RetryPolicy
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import AssistantMessage, ExtensionMessage, ToolResultMessage, UserMessage


@tool
def fetch(n: int) -> str:
    """Fetch a page."""
    return f"page {n}: " + "lorem ipsum " * 200


def script(prune: Any) -> list[Any]:
    return [
        Reply("Looking.", tool_calls=[call("fetch", {"n": 0})]),
        Reply(tool_calls=[call("fetch", {"n": 1})]),
        Reply(tool_calls=[prune]),
        Reply("done"),
    ]


async def test_prun_with_memo_drops_old_turns_from_the_payload_and_leaves_one_memo() -> None:
    provider = ScriptedProvider(
        script(call("prun_with_memo", {"tokens": 1000, "memo": "pages 0 and 1 were lorem ipsum"}))
    )
    context = AgentContext(tools=[fetch, *prun_tools()])
    events: list[Any] = []
    result = await agent_loop(
        "research", context, AgentLoopConfig(provider=provider), events=events.append
    )
    assert result.text == "done"
    before, after = provider.requests[2].messages, provider.requests[3].messages
    assert [m.role for m in before] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
    ]
    roles = [m.role for m in after]
    assert roles == ["user", "user", "assistant", "tool_result"]  # prompt, memo, the prun turn
    assert after[0].content[0].text == "research"  # type: ignore[union-attr]
    memo = after[1]
    assert isinstance(memo, UserMessage) and memo.provenance == "memo"
    assert "pages 0 and 1 were lorem ipsum" in memo.content[0].text  # type: ignore[union-attr]
    [applied] = [e for e in events if isinstance(e, PrunApplied)]
    assert applied.messages_removed == 4 and applied.tokens_removed > 1000
    assert len(applied.pruned_turns) == 2 and applied.memo == "pages 0 and 1 were lorem ipsum"
    assert (
        applied.pruned_timestamps
        and AGENT_EVENT_ADAPTER.validate_json(applied.model_dump_json()) == applied
    )
    # the log keeps everything, plus the record of the prune (never sent to a model)
    records = [m for m in context.messages if isinstance(m, ExtensionMessage)]
    assert len(records) == 1 and records[0].kind == "prun"
    assert sum(isinstance(m, ToolResultMessage) for m in context.messages) == 3
    requests = [e for e in events if isinstance(e, TurnRequest)]
    assert requests[-1].provenance == ["user", "memo", "assistant", "tool_result"]


async def test_prun_takes_only_what_is_asked_oldest_first_and_never_the_calling_turn() -> None:
    provider = ScriptedProvider(script(call("prun", {"tokens": 10})))
    context = AgentContext(tools=[fetch, *prun_tools()])
    await agent_loop("research", context, AgentLoopConfig(provider=provider))
    sent = provider.requests[3].messages
    # turn 0 (with its tool result) is gone; turn 1 and the prun turn stay; no memo
    assert [m.role for m in sent] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
    ]
    assert "page 1" in sent[2].content[0].text  # type: ignore[union-attr]


async def test_pruning_survives_saving_and_restoring_the_conversation() -> None:
    provider = ScriptedProvider([*script(call("prun", {"tokens": 100_000})), Reply("again")])
    agent = (
        BasicAgent(provider=provider, tools=[fetch]).with_prun_tool().with_retry(RetryPolicy.none())
    )
    await agent.prompt("research")
    restored = BasicAgent(provider=provider, tools=[fetch]).with_prun_tool()
    restored.restore_messages(agent.save_messages())
    await restored.prompt("and now?")
    sent = provider.requests[-1].messages
    assert not any("page 0" in str(m.content) or "page 1" in str(m.content) for m in sent)
    assert [m.content[0].text for m in sent if isinstance(m, UserMessage)] == [
        "research",
        "and now?",
    ]  # type: ignore[union-attr]


async def test_prun_arguments_are_checked() -> None:
    from phi_core.cancel import CancelToken
    from phi_core.tools import ToolContext

    ctx = ToolContext(tool_call_id="c", tool_name="prun", loop_id="l", cancel=CancelToken())
    bad = await PrunTool().execute({"tokens": 0}, ctx)
    assert bad.is_error and "positive integer" in bad.content[0].text  # type: ignore[union-attr]
    no_memo = await PrunTool(memo=True).execute({"tokens": 5}, ctx)
    assert no_memo.is_error and "`memo`" in no_memo.content[0].text  # type: ignore[union-attr]
    nothing = await PrunTool().execute({"tokens": 5}, ctx)
    assert not nothing.is_error and "Nothing to prune" in nothing.content[0].text  # type: ignore[union-attr]
    assert PrunTool().parameters["required"] == ["tokens"]
    assert PrunTool(memo=True).parameters["required"] == ["tokens", "memo"]


def test_without_prune_records_the_view_is_the_log() -> None:
    messages: list[Any] = [UserMessage.text("a"), AssistantMessage()]
    assert apply_prunes(messages) == messages
