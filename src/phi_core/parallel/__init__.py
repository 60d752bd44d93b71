"""Evaluational parallelism: run one task through several agent configs at once, evaluate the
outcomes, keep the best, and continue the session with the winner.

Owns ``agent_loop_parallel`` (built on ``loop.agent_loop``/``agent_loop_continue``), the outcome
and result types, the ``EvaluationStrategy`` protocol and the built-in strategies: phi-core's
five (transparent, pick-first, token-efficient, elaborate, LLM judge) plus pairwise and rubric
judges, verifiers with early accept, majority vote, a behavioural vote over code answers
(``exec-vote``), judge-free consensus (minimum Bayes risk) and composites. Knows nothing of routing,
selection or the CLI.
"""

from ._behaviour import (
    BehaviourReport,
    ExecVoteEvaluation,
    code_agreement,
    code_agreement_sync,
    runnable_python,
)
from ._consensus import ConsensusEvaluation, lexical_similarity
from ._judge import (
    DEFAULT_JUDGE_SYSTEM_PROMPT,
    LlmJudgeEvaluation,
    build_judge_prompt,
    default_orders,
    shown_candidates,
)
from ._names import STRATEGY_NAMES, strategy_from_name
from ._pairwise import PairwiseJudgeEvaluation
from ._race import ToolFactory, adopt_winner, agent_loop_parallel, evaluate_or_fall_back
from ._rubric import DEFAULT_CRITERIA, Criterion, RubricJudgeEvaluation
from ._strategies import (
    BaseEvaluation,
    ElaborateEvaluation,
    MajorityVoteEvaluation,
    PickFirstEvaluation,
    TokenEfficientEvaluation,
    TransparentEvaluation,
)
from ._types import (
    EarlyAcceptStrategy,
    EvaluationDecision,
    EvaluationStrategy,
    OutcomeStatus,
    ParallelLoopOutcome,
    ParallelLoopResult,
    RaceStatus,
    tool_call_text,
    turn_text,
)
from ._verify import (
    Check,
    CheckResult,
    CompositeEvaluation,
    JsonSchemaCheck,
    PredicateCheck,
    PythonTestsCheck,
    RegexCheck,
    VerifierEvaluation,
)

__all__ = [
    "DEFAULT_CRITERIA",
    "DEFAULT_JUDGE_SYSTEM_PROMPT",
    "STRATEGY_NAMES",
    "BaseEvaluation",
    "BehaviourReport",
    "Check",
    "CheckResult",
    "CompositeEvaluation",
    "ConsensusEvaluation",
    "Criterion",
    "EarlyAcceptStrategy",
    "ElaborateEvaluation",
    "EvaluationDecision",
    "EvaluationStrategy",
    "ExecVoteEvaluation",
    "JsonSchemaCheck",
    "LlmJudgeEvaluation",
    "MajorityVoteEvaluation",
    "OutcomeStatus",
    "PairwiseJudgeEvaluation",
    "ParallelLoopOutcome",
    "ParallelLoopResult",
    "PickFirstEvaluation",
    "PredicateCheck",
    "PythonTestsCheck",
    "RaceStatus",
    "RegexCheck",
    "RubricJudgeEvaluation",
    "TokenEfficientEvaluation",
    "ToolFactory",
    "TransparentEvaluation",
    "VerifierEvaluation",
    "adopt_winner",
    "agent_loop_parallel",
    "build_judge_prompt",
    "code_agreement",
    "code_agreement_sync",
    "default_orders",
    "evaluate_or_fall_back",
    "lexical_similarity",
    "runnable_python",
    "shown_candidates",
    "strategy_from_name",
    "tool_call_text",
    "turn_text",
]
