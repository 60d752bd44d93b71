"""Race three configurations of the embedded model, let a judge pick, continue with the winner.

Run: python examples/race_and_continue.py   (needs `pip install -e ".[local]"`, no key)
"""

from __future__ import annotations

import asyncio

from phi_core import (
    AgentContext,
    AgentLoopConfig,
    LlmJudgeEvaluation,
    ResponseFormat,
    adopt_winner,
    agent_loop,
    agent_loop_parallel,
)

BRANCHES = [
    AgentLoopConfig(
        model="local:smollm2", config_id=name, system_prompt=system, temperature=t, max_tokens=80
    )
    for name, system, t in [
        ("terse", "Answer in one sentence.", 0.2),
        ("teacher", "Explain simply, like a patient teacher.", 0.7),
        ("poet", "Answer as a short poem.", 1.0),
    ]
]
# A small local judge is grammar-constrained to reply with one answer number.
JUDGE = AgentLoopConfig(
    model="local:smollm2",
    temperature=0.0,
    max_tokens=4,
    response_format=ResponseFormat(name="choice", schema={"enum": [1, 2, 3]}),
)


async def main() -> None:
    base = AgentContext()
    result = await agent_loop_parallel(
        "Why do cats purr?", base, BRANCHES, LlmJudgeEvaluation(JUDGE, max_context_tokens=2048)
    )
    for outcome in result.outcomes:
        print(f"{outcome.loop_id.split('.', 1)[1]:<12} {outcome.status:<6} {outcome.text[:70]!r}")
    winner = result.selected
    assert winner is not None
    print("winner:", winner.loop_id.split(".", 1)[1], "|", result.decision.rationale)
    print(
        "usage (branches + judge):",
        result.total_usage.input,
        "in,",
        result.total_usage.output,
        "out",
    )

    # Continue the conversation with the winner's context and configuration.
    context = adopt_winner(result)
    follow_up = await agent_loop(
        "Say that again in five words.", context, BRANCHES[winner.config_index]
    )
    print("follow-up:", follow_up.text)
    print("the follow-up loop's parent is the winner:", context.parent_loop_id == winner.loop_id)


if __name__ == "__main__":
    asyncio.run(main())
