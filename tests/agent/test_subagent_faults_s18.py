"""Sub-agents against a red-team pass (s18): sub-agents called one after another in a turn stay
within the parent's limits together, and a chain of fresh sub-agents is capped in depth."""

from __future__ import annotations

from typing import Any

import pytest

from phi_core.context.limits import ExecutionLimits
from phi_core.errors import UserError
from phi_core.loop import AgentContext, AgentLoopConfig, Batched, agent_loop
from phi_core.subagents import DEFAULT_MAX_DEPTH, SubAgentTool
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import ToolContext, tool

LIMIT = 10_000


@pytest.mark.parametrize("strategy", ["sequential", Batched(1), "parallel"])
async def test_sub_agents_of_one_turn_stay_within_the_parents_token_limit(strategy, strict_loop):
    # each child writes ~3,000 tokens (4 characters a token, cut at its max_tokens)
    child = ScriptedProvider([], default=Reply("word " * 2_400))
    helper = SubAgentTool("helper", provider=child).with_compaction(None)
    parent = ScriptedProvider(
        [Reply(tool_calls=[call("helper", {"task": f"job {i}"}) for i in range(4)])],
        default="done",
    )
    result = await agent_loop(
        "delegate 4 jobs",
        AgentContext(tools=[helper]),
        AgentLoopConfig(
            provider=parent,
            tool_execution=strategy,
            compaction=None,
            limits=ExecutionLimits(max_total_tokens=LIMIT),
        ),
    )
    assert result.usage.input + result.usage.output <= LIMIT
    limits = [r.max_tokens for r in child.requests]
    if strategy == "parallel":
        assert len(set(limits)) == 1  # equal shares of what was left when the batch started
    else:
        # later children are held to what the earlier ones left
        assert limits[-1] is not None and limits[-1] < 3_000


async def test_a_chain_of_fresh_sub_agents_is_capped_in_depth(strict_loop):
    provider = ScriptedProvider([], default=Reply(tool_calls=[call("delegate", {"task": "more"})]))
    refusals: list[str] = []
    depth = 0
    deepest = 0

    @tool
    async def delegate(task: str, ctx: ToolContext) -> Any:
        """Delegate to a helper built for this call."""
        nonlocal depth, deepest
        depth += 1
        deepest = max(deepest, depth)
        try:
            helper = SubAgentTool("helper", provider=provider, tools=[delegate], max_turns=1)
            outcome = await helper.execute({"task": task}, ctx)
            if outcome.is_error and "deep" in outcome.content[0].text:
                refusals.append(outcome.content[0].text)
            return outcome
        finally:
            depth -= 1

    result = await agent_loop(
        "start",
        AgentContext(tools=[delegate]),
        AgentLoopConfig(provider=provider, limits=ExecutionLimits(max_turns=1)),
    )
    assert result.reason == "limit"  # the top run's own max_turns, after its one turn
    # DEFAULT_MAX_DEPTH sub-agents ran one inside another; the next one was refused
    assert deepest == DEFAULT_MAX_DEPTH + 1
    [refusal] = refusals
    assert f"are already {DEFAULT_MAX_DEPTH} deep" in refusal
    assert f"at most {DEFAULT_MAX_DEPTH} may be" in refusal


async def test_with_max_depth_sets_the_cap_and_checks_it(strict_loop):
    with pytest.raises(UserError, match="max_depth must be an integer >= 1, got 0"):
        SubAgentTool("helper").with_max_depth(0)
    provider = ScriptedProvider([], default=Reply(tool_calls=[call("inner", {"task": "go"})]))
    inner = SubAgentTool("inner", provider=provider).with_max_depth(1)

    @tool
    async def inner_tool(task: str, ctx: ToolContext) -> Any:
        """Call the inner sub-agent from inside another."""
        return await inner.execute({"task": task}, ctx)

    inner_tool.name = "inner"
    outer = SubAgentTool("outer", provider=provider, tools=[inner_tool], max_turns=1)
    parent = ScriptedProvider([Reply(tool_calls=[call("outer", {"task": "go"})])], default="ok")
    events: list[Any] = []
    result = await agent_loop(
        "go", AgentContext(tools=[outer]), AgentLoopConfig(provider=parent), events=events.append
    )
    assert result.ok
    refused = [
        e.result.content[0].text
        for e in events
        if e.type == "tool_execution_end" and e.tool_name == "inner"
    ]
    assert refused and refused[0].startswith("The sub-agent 'inner' was not run")
    assert "(outer) are already 1 deep" in refused[0] and "at most 1 may be" in refused[0]
