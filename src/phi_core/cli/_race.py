"""Running a race for the CLI: the plan (what the flags and the config file asked for), the run
through ``agent_loop_parallel``, and the JSON result object of ``phi race --json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..cancel import CancelToken
from ..loop import AgentContext, AgentLoopConfig
from ..metering import Budget
from ..parallel import ParallelLoopResult, agent_loop_parallel, strategy_from_name
from ._spec import BranchSpec

__all__ = ["RacePlan", "race_payload", "run_race"]


@dataclass
class RacePlan:
    """A checked race: one loop config per branch, the strategy and its judge, the limits."""

    branches: list[BranchSpec]
    configs: list[AgentLoopConfig]
    strategy: str
    judge: BranchSpec | None = None
    judge_config: AgentLoopConfig | None = None
    timeout: float | None = None
    max_concurrency: int | None = None
    budget: Budget | None = None

    def build_strategy(self) -> Any:
        return strategy_from_name(self.strategy, judge_model=self.judge_config)


async def run_race(
    plan: RacePlan, prompt: str, events: Any, cancel: CancelToken
) -> ParallelLoopResult:
    """Race ``prompt`` through the plan's branches; ``events`` receives every event."""
    return await agent_loop_parallel(
        prompt,
        AgentContext(),
        plan.configs,
        plan.build_strategy(),
        events=events,
        cancel=cancel,
        max_concurrency=plan.max_concurrency,
        branch_timeout=plan.timeout,
        budget=plan.budget,
    )


def race_payload(result: ParallelLoopResult, plan: RacePlan) -> dict[str, Any]:
    """The last line of ``phi race --json``: winner, decision, per-branch figures, totals."""
    labels = [b.label for b in plan.branches]
    winner = result.selected
    return {
        "type": "race_result",
        "session_id": result.session_id,
        "status": result.status,
        "winner": (
            {
                "index": winner.config_index,
                "name": labels[winner.config_index],
                "loop_id": winner.loop_id,
                "model": winner.config.model_config().spec,
                "text": winner.text,
            }
            if winner is not None
            else None
        ),
        "decision": result.decision.summary(),
        "branches": [
            {
                "index": o.config_index,
                "name": labels[o.config_index],
                "loop_id": o.loop_id,
                "model": o.config.model_config().spec,
                "status": o.status,
                "error": o.error,
                "text": o.text,
                "latency_s": round(o.latency_s, 4),
                "usage": o.usage.model_dump(mode="json"),
                "cost_usd": o.cost_usd,
            }
            for o in result.outcomes
        ],
        "judge": plan.judge.model if plan.judge is not None else None,
        "evaluation_usage": result.decision.usage.model_dump(mode="json"),
        "total_usage": result.total_usage.model_dump(mode="json"),
        "cost_usd": result.cost_usd,
        "wall_time_s": round(result.wall_time_s, 4),
    }
