"""Running a judge model, and phi-core's ``LlmJudgeEvaluation``.

Every judge call is an ordinary ``agent_loop`` run in the race's session, under the deterministic
loop id ``{session}.{judge segment}.{N + k}`` (N branches, k-th judge call of this evaluation),
with its events forwarded to the race's sink, so judge cost and traces are accounted like any
branch's.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..events import Warning
from ..loop import AgentContext, AgentLoopConfig, agent_loop
from ..providers.base import ModelConfig
from ..types import AgentMessage, ResponseFormat, Usage
from ._strategies import BaseEvaluation, successful
from ._text import (
    compact_for_judge,
    content_budget,
    extract_query,
    parse_judge_choice,
    transcript,
)
from ._types import EvaluationDecision, ParallelLoopOutcome

if TYPE_CHECKING:
    from ..cancel import CancelToken
    from ..events import Emitter

__all__ = [
    "DEFAULT_JUDGE_SYSTEM_PROMPT",
    "JudgeCall",
    "LlmJudgeEvaluation",
    "as_loop_config",
    "build_judge_prompt",
    "parse_json_object",
    "run_judge",
]

DEFAULT_JUDGE_SYSTEM_PROMPT = (
    "You are an impartial judge evaluating responses from AI assistants. Choose the response "
    "that best answers the user's query. Reply with ONLY the response number "
    '(e.g., "1" or "2").'
)

JudgeSpec = AgentLoopConfig | str | ModelConfig


def as_loop_config(judge: JudgeSpec) -> AgentLoopConfig:
    """A judge given as ``provider:model``, a ModelConfig or a full AgentLoopConfig."""
    if isinstance(judge, AgentLoopConfig):
        return judge
    return AgentLoopConfig(model=judge)


def with_response_format(config: AgentLoopConfig, fmt: ResponseFormat | None) -> AgentLoopConfig:
    if fmt is None or config.response_format is not None:
        return config
    return dataclasses.replace(config, response_format=fmt)


@dataclass
class JudgeCall:
    """One judge run: its loop id, its reply text, what it cost and how it ended."""

    loop_id: str
    text: str
    usage: Usage
    cost_usd: float
    reason: str
    error: str | None


def judge_loop_id(outcomes: list[ParallelLoopOutcome], config: AgentLoopConfig, k: int) -> str:
    """``{session}.{judge segment}.{N + k}``: the judge runs in the race's session."""
    session = outcomes[0].session_id or ""
    return f"{session}.{config.segment()}.{outcomes[0].race_size + k}"


async def run_judge(
    prompt: str,
    *,
    config: AgentLoopConfig,
    system_prompt: str | None,
    session_id: str | None,
    loop_id: str,
    events: Emitter,
    cancel: CancelToken,
    response_format: ResponseFormat | None = None,
) -> JudgeCall:
    """Run the judge model once on ``prompt`` (no tools, no history)."""
    context = AgentContext(
        system_prompt=system_prompt,
        session_id=session_id,
        loop_id=loop_id,
    )
    result = await agent_loop(
        prompt,
        context,
        with_response_format(config, response_format),
        events=events.emit,
        cancel=cancel,
    )
    return JudgeCall(
        loop_id=result.loop_id,
        text=result.text,
        usage=result.usage,
        cost_usd=result.cost_usd,
        reason=result.reason,
        error=result.error,
    )


def build_judge_prompt(prior: str, query: str, responses: list[str]) -> str:
    """phi-core's judge message: prior context (if any), the query, numbered responses."""
    parts: list[str] = []
    if prior.strip():
        parts.append(f"Prior conversation context:\n{prior}\n")
    parts.append(f"Original query:\n{query}\n")
    for k, response in enumerate(responses, start=1):
        parts.append(f"Response {k}:\n{response}\n")
    parts.append('Which response is best? Reply with ONLY the response number (e.g., "1" or "2").')
    return "\n".join(parts)


def base_messages(outcomes: list[ParallelLoopOutcome]) -> list[AgentMessage]:
    """The shared base context (branch 0's first ``original_context_len`` messages)."""
    if not outcomes:
        return []
    first = outcomes[0]
    return list(first.context.messages[: first.original_context_len])


_JSON_SLICE = re.compile(r"\{.*\}", re.DOTALL)


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in a reply: the whole text, a fenced block, or the outermost ``{…}``."""
    candidates = [text.strip()]
    match = _JSON_SLICE.search(text)
    if match:
        candidates.append(match.group(0))
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


class LlmJudgeEvaluation(BaseEvaluation):
    """A judge model reads the query and every successful branch's answer and names the best.

    Faithful to phi-core: prompt layout, reply parsing, the 80 % content budget and the
    two-iteration compaction when ``max_context_tokens`` is set (phi-core's
    ``context_config.max_context_tokens``), and a best-effort ``Warning`` event when the budget
    cannot be met. Fixed: failed branches are not shown to the judge (and never win while one
    succeeded); a single successful branch wins without a judge call; an unparseable reply falls
    back to the first successful branch and says so in the decision; the judge runs under a
    deterministic loop id. ``shuffle=True`` presents the answers in a random order (mapping kept)
    to counter position bias.
    """

    name = "judge"

    def __init__(
        self,
        judge_config: JudgeSpec,
        system_prompt: str | None = None,
        *,
        max_context_tokens: int | None = None,
        shuffle: bool = False,
        seed: int | None = None,
        strict_budget: bool = True,
    ) -> None:
        self.judge_config = as_loop_config(judge_config)
        self.system_prompt = system_prompt
        if max_context_tokens is not None and max_context_tokens < 1:
            raise ValueError(
                f"max_context_tokens must be >= 1, got {max_context_tokens}. "
                f"Use None to send everything uncompacted."
            )
        self.max_context_tokens = max_context_tokens
        self.shuffle = shuffle
        self._rng = random.Random(seed)
        self.strict_budget = strict_budget

    async def evaluate(
        self,
        prompts: list[AgentMessage],
        outcomes: list[ParallelLoopOutcome],
        *,
        events: Emitter,
        cancel: CancelToken,
    ) -> EvaluationDecision:
        decided = self.decided_without_judge(outcomes)
        if decided is not None:
            return decided
        ok = successful(outcomes)
        query, prior_messages = extract_query(prompts, base_messages(outcomes))
        prior = transcript(prior_messages)
        shown = list(ok)
        if self.shuffle:
            self._rng.shuffle(shown)
        responses = [o.text for o in shown]
        loop_id = judge_loop_id(outcomes, self.judge_config, 1)
        details: dict[str, Any] = {
            "judge_loop_id": loop_id,
            "order": [o.config_index for o in shown],
        }
        if self.max_context_tokens is not None:
            fitted = compact_for_judge(
                prior,
                responses,
                content_budget(self.max_context_tokens),
                strict=self.strict_budget,
            )
            prior, responses = fitted.context, fitted.outputs
            details["compaction"] = fitted.steps
            if not fitted.satisfied:
                events.emit(
                    Warning(
                        loop_id=loop_id,
                        message=(
                            f"LlmJudgeEvaluation: the prior context plus {len(responses)} branch "
                            f"responses could not be fitted within the judge budget of "
                            f"{self.max_context_tokens} tokens after two-iteration compaction; "
                            f"comparing best-effort."
                        ),
                    )
                )
                details["budget_satisfied"] = False
        call = await run_judge(
            build_judge_prompt(prior, query, responses),
            config=self.judge_config,
            system_prompt=self.system_prompt or DEFAULT_JUDGE_SYSTEM_PROMPT,
            session_id=outcomes[0].session_id,
            loop_id=loop_id,
            events=events,
            cancel=cancel,
        )
        details["reply"] = call.text
        choice = parse_judge_choice(call.text, len(shown))
        if choice is None:
            problem = (
                f"the judge run ended with {call.reason}: {call.error}"
                if call.reason != "completed"
                else f"the judge's reply {call.text[:200]!r} names no response 1..{len(shown)}"
            )
            return self.decision(
                ok[0].config_index,
                usage=call.usage,
                cost_usd=call.cost_usd,
                fallback=True,
                rationale=f"{problem}; fell back to the first successful branch",
                details=details,
            )
        winner = shown[choice]
        return self.decision(
            winner.config_index,
            usage=call.usage,
            cost_usd=call.cost_usd,
            scores={winner.config_index: 1.0},
            rationale=f"the judge chose response {choice + 1} (branch {winner.config_index})",
            details=details,
        )
