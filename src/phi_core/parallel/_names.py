"""``strategy_from_name``: build a strategy from the names the CLI's ``--strategy`` accepts."""

from __future__ import annotations

import dataclasses
import difflib

from ..errors import UserError
from ..loop import AgentLoopConfig
from ..providers.base import ModelConfig, Provider
from ._behaviour import ExecVoteEvaluation
from ._consensus import ConsensusEvaluation
from ._judge import LlmJudgeEvaluation
from ._pairwise import PairwiseJudgeEvaluation
from ._rubric import RubricJudgeEvaluation
from ._strategies import (
    BaseEvaluation,
    ElaborateEvaluation,
    MajorityVoteEvaluation,
    PickFirstEvaluation,
    TokenEfficientEvaluation,
    TransparentEvaluation,
)

__all__ = ["STRATEGY_NAMES", "strategy_from_name"]

STRATEGY_NAMES: dict[str, str] = {
    "judge": "an LLM judge reads every answer and names the best (phi-core's LlmJudgeEvaluation)",
    "pairwise": "an LLM judge compares answers two at a time, both orders; reports its flip rate",
    "rubric": "an LLM judge scores each answer 0-1 on relevance, coverage and faithfulness",
    "consensus": "the answer that agrees most with the others (letters, numbers, JSON, code "
    "behaviour, else text similarity); no judge call",
    "vote": "the most common final answer wins; ties go to the cheaper answer",
    "exec-vote": "code answers are run on their own examples; the largest group that behaves "
    "the same wins",
    "pick-first": "the first successful branch in config order",
    "token-efficient": "the successful branch that used the fewest tokens",
    "elaborate": "the successful branch that used the most tokens",
    "transparent": "a single config passed through (refuses several configs)",
}
_JUDGES = {"judge", "pairwise", "rubric"}
DEFAULT_JUDGE_MODEL = "local:smollm2"


def strategy_from_name(
    name: str,
    *,
    judge_model: str | ModelConfig | AgentLoopConfig | None = None,
    judge_provider: Provider | None = None,
    max_context_tokens: int | None = None,
    seed: int | None = None,
    vote_extract: str | None = None,
    judge_orders: int | None = None,
) -> BaseEvaluation:
    """The built-in strategy called ``name`` (see :data:`STRATEGY_NAMES`).

    Judge strategies run ``judge_model`` (default ``local:smollm2``); ``judge_provider``
    overrides its provider (a ScriptedProvider in tests). ``max_context_tokens`` is the
    judge's window every judge strategy fits the answers to (default: the judge model's context
    window). ``seed`` fixes the
    answer shuffling of ``rubric``; ``vote_extract`` is ``vote``'s answer regex;
    ``judge_orders`` is how many answer orders ``judge`` and ``rubric`` ask under (default:
    ``judge`` per judge size, see :func:`default_orders`; ``rubric`` one).

    Raises:
        UserError: an unknown name (with a suggestion) or an unknown judge model.
    """
    key = name.strip().lower().replace("_", "-")
    if key not in STRATEGY_NAMES:
        close = difflib.get_close_matches(key, list(STRATEGY_NAMES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UserError(
            f"Unknown strategy {name!r}.{hint} Choose one of: {', '.join(STRATEGY_NAMES)}."
        )
    if key == "pick-first":
        return PickFirstEvaluation()
    if key == "token-efficient":
        return TokenEfficientEvaluation()
    if key == "elaborate":
        return ElaborateEvaluation()
    if key == "transparent":
        return TransparentEvaluation()
    if key == "vote":
        return MajorityVoteEvaluation(extract=vote_extract)
    if key == "exec-vote":
        return ExecVoteEvaluation()
    if key == "consensus":
        return ConsensusEvaluation()
    assert key in _JUDGES
    judge = _judge_config(judge_model, judge_provider)
    judge.model_config()  # resolve now: a bad judge model is a usage error, raised before a race
    budget = max_context_tokens or judge.model_config().context_window
    if key == "judge":
        return LlmJudgeEvaluation(judge, max_context_tokens=budget, orders=judge_orders)
    if key == "pairwise":
        return PairwiseJudgeEvaluation(judge, max_context_tokens=budget)
    return RubricJudgeEvaluation(
        judge, seed=seed, orders=judge_orders or 1, max_context_tokens=budget
    )


def _judge_config(
    model: str | ModelConfig | AgentLoopConfig | None, provider: Provider | None
) -> AgentLoopConfig:
    if isinstance(model, AgentLoopConfig):
        if provider is not None and model.provider is None:
            return dataclasses.replace(model, provider=provider)
        return model
    return AgentLoopConfig(model=model or DEFAULT_JUDGE_MODEL, provider=provider)
