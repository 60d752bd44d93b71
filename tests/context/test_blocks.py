"""Block compaction: overlays that keep the original messages, on the agent and in sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phi_core.agent import BasicAgent
from phi_core.context import (
    CompactionConfig,
    DefaultBlockCompaction,
    apply_compaction_block,
    compact_block,
)
from phi_core.events import AgentEnd, AgentStart, CompactionEnded, CompactionStarted
from phi_core.loop import LoopHooks
from phi_core.providers import RetryPolicy
from phi_core.sessions import (
    JsonFileSessionStore,
    SessionRecorder,
    build_context_from_session,
    compact_session_loops,
)
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import tool
from phi_core.types import (
    AssistantMessage,
    CompactedSection,
    TextContent,
    ToolCall,
    ToolResultMessage,
    TurnRange,
    UserMessage,
)


@tool
def fetch(n: int) -> str:
    """Fetch a long report."""
    return "\n".join(f"report {n} line {k}" for k in range(120))


def turns(count: int) -> list[Any]:
    out: list[Any] = []
    for n in range(count):
        out += [
            UserMessage.text(f"question {n}"),
            AssistantMessage(content=[ToolCall(id=f"c{n}", name="fetch", arguments={"n": n})]),
            ToolResultMessage(
                tool_call_id=f"c{n}",
                tool_name="fetch",
                content=[TextContent(text="\n".join(f"line {k}" for k in range(120)))],
            ),
            AssistantMessage(content=[TextContent(text=f"answer {n}")]),
        ]
    return out


async def test_a_block_keeps_first_turns_summarises_the_middle_and_truncates_recent_outputs() -> (
    None
):
    messages = turns(20)
    config = CompactionConfig(keep_first_turns=2, keep_recent_turns=5, tool_output_max_lines=10)
    block = await compact_block(messages, config)
    assert block is not None and block.covers_messages == 80
    assert block.keep_first == TurnRange(start_turn=0, end_turn=1)
    assert block.keep_compacted is not None and block.keep_compacted.range == TurnRange(
        start_turn=2, end_turn=14
    )
    assert block.keep_recent is not None and block.keep_recent.range == TurnRange(
        start_turn=15, end_turn=19
    )
    view = apply_compaction_block([*messages, UserMessage.text("new")], block)
    assert view[:8] == messages[:8]
    assert view[-1].content[0].text == "new"  # type: ignore[union-attr]
    middle = block.keep_compacted.messages
    assert all(isinstance(m, UserMessage) for m in middle)
    assert [m.content[0].text for m in middle if m.content[0].text.startswith("question")] == [  # type: ignore[union-attr]
        f"question {n}" for n in range(2, 15)
    ]
    recent_results = [m for m in block.keep_recent.messages if isinstance(m, ToolResultMessage)]
    assert len(recent_results) == 5 and "lines truncated" in recent_results[0].content[0].text  # type: ignore[union-attr]
    assert len(view) < len(messages)
    assert apply_compaction_block(messages, None) == messages  # no block: the originals


async def test_a_short_conversation_has_nothing_to_compact() -> None:
    assert (
        await compact_block(turns(3), CompactionConfig(keep_first_turns=2, keep_recent_turns=2))
        is None
    )


async def test_a_block_that_does_not_match_is_ignored_rather_than_dropping_messages() -> None:
    block = await compact_block(
        turns(20), CompactionConfig(keep_first_turns=1, keep_recent_turns=1)
    )
    assert block is not None
    short = turns(3)
    assert apply_compaction_block(short, block) == short


async def test_a_custom_async_strategy_writes_the_middle() -> None:
    class Digest(DefaultBlockCompaction):
        async def keep_compacted(self, turns, config, first, recent):  # type: ignore[no-untyped-def]
            section = super().keep_compacted(turns, config, first, recent)
            assert section is not None
            digest = UserMessage.text(
                f"[Digest of {len(turns[section.range.start_turn : section.range.end_turn + 1])} turns]"
            )
            return CompactedSection(range=section.range, messages=[digest])

    block = await compact_block(
        turns(12), CompactionConfig(keep_first_turns=1, keep_recent_turns=1), Digest()
    )
    assert block is not None and block.keep_compacted is not None
    assert block.keep_compacted.messages[0].content[0].text == "[Digest of 10 turns]"  # type: ignore[union-attr]


def chatty_agent(replies: int) -> tuple[BasicAgent, ScriptedProvider]:
    script: list[Any] = []
    for n in range(replies):
        script += [Reply(tool_calls=[call("fetch", {"n": n})]), Reply(f"answer {n}")]
    provider = ScriptedProvider(script)
    agent = BasicAgent(provider=provider, tools=[fetch]).with_retry(RetryPolicy.none())
    return agent, provider


async def test_compact_context_overlays_the_history_the_next_prompt_sends(tmp_path: Path) -> None:
    agent, provider = chatty_agent(8)
    agent.with_compaction(
        CompactionConfig(keep_first_turns=1, keep_recent_turns=2, tool_output_max_lines=6)
    )
    store = JsonFileSessionStore(tmp_path)
    agent.with_session_recorder(SessionRecorder(), store=store)
    events: list[Any] = []
    agent.subscribe(events.append)
    for n in range(7):
        await agent.prompt(f"question {n}")
    original = list(agent.messages)
    compacted_loops = await agent.compact_context(focus="the report numbers")
    assert compacted_loops == 4  # questions 1..4 were summarised
    assert agent.messages == original  # the log keeps every message
    kinds = [type(e).__name__ for e in events[-4:]]
    assert kinds == ["AgentStart", "CompactionStarted", "CompactionEnded", "AgentEnd"]
    start = events[-4]
    assert isinstance(start, AgentStart) and start.continuation_kind == "compaction"
    ended = events[-2]
    assert (
        isinstance(ended, CompactionEnded) and ended.block is not None and ended.reason == "manual"
    )
    assert ended.estimated_tokens_after < ended.estimated_tokens_before // 2
    assert ended.loops_compacted == 4
    assert isinstance(events[-3], CompactionStarted) and isinstance(events[-1], AgentEnd)

    await agent.prompt("question 7")
    sent = provider.requests[-2].messages
    assert len(sent) < len(original)
    texts = [m.content[0].text for m in sent if isinstance(m, UserMessage)]  # type: ignore[union-attr]
    assert texts[0] == "question 0" and texts[-1] == "question 7"
    assert any("focus: the report numbers" in t for t in texts)
    assert len(agent.messages) == len(original) + 4  # the new turn lands on the full log

    saved = await store.load(agent.session_id)
    compaction = [r for r in saved.loops if r.continuation_kind == "compaction"]
    assert len(compaction) == 1 and compaction[0].compaction_block == ended.block
    context = build_context_from_session(saved, agent.last_loop_id)
    assert [m.model_dump() for m in context] == [m.model_dump() for m in agent.history_view()]
    assert sum(len(r.messages) for r in saved.loops) == len(agent.messages)  # originals kept


async def test_compaction_hooks_can_veto_a_manual_compaction() -> None:
    agent, _ = chatty_agent(6)
    agent.with_compaction(CompactionConfig(keep_first_turns=1, keep_recent_turns=1))
    for n in range(6):
        await agent.prompt(f"q{n}")
    seen: list[Any] = []
    agent.with_hooks(LoopHooks(before_compaction_start=lambda t, c: seen.append((t, c)) or False))
    assert await agent.compact_context() == 0
    assert agent.compaction_block is None and len(seen) == 1


async def test_compact_session_loops_puts_a_block_on_the_loop_and_the_session_round_trips(
    tmp_path: Path,
) -> None:
    agent, _ = chatty_agent(6)
    store = JsonFileSessionStore(tmp_path)
    agent.with_session_recorder(SessionRecorder(), store=store)
    for n in range(6):
        await agent.prompt(f"question {n}")
    session = await store.load(agent.session_id)
    raw = build_context_from_session(session)
    assert len(raw) == len(agent.messages)
    count = await compact_session_loops(
        session, None, CompactionConfig(keep_first_turns=1, keep_recent_turns=1)
    )
    assert count == 4
    assert session.loops[-1].compaction_block is not None
    await store.save(session)
    reloaded = await store.load(agent.session_id)
    assert reloaded.loops[-1].compaction_block == session.loops[-1].compaction_block
    view = build_context_from_session(reloaded)
    assert len(view) < len(raw)
    reloaded.loops[-1].compaction_block = None  # removing the overlay restores everything
    assert [m.model_dump() for m in build_context_from_session(reloaded)] == [
        m.model_dump() for m in raw
    ]


async def test_the_session_chain_skips_losing_branches_and_judges() -> None:
    from phi_core.loop import AgentLoopConfig
    from phi_core.parallel import PickFirstEvaluation

    agent, _ = chatty_agent(1)
    recorder = SessionRecorder()
    agent.with_session_recorder(recorder)
    await agent.prompt("warm up")
    configs = [
        AgentLoopConfig(model="fast:m", provider=ScriptedProvider(["winner"], name="fast")),
        AgentLoopConfig(model="slow:m", provider=ScriptedProvider(["loser"], name="slow")),
    ]
    await agent.prompt_parallel("race", configs, PickFirstEvaluation())
    session = recorder.get_session(agent.session_id)
    assert session is not None
    texts = [m.text for m in build_context_from_session(session) if isinstance(m, AssistantMessage)]
    assert "winner" in texts and "loser" not in texts
