"""Offline selection: find the best model combination for a multi-step agent.

``select/`` owns the search space of step -> candidate models, the evaluation arena that the
best-arm identification algorithms run against, the algorithms themselves (AgentOpt's baselines
with their defects fixed, AgentOpt's newer low-rank matrix UCB and LM proposal, plus our
:class:`RegretRace`, the default, its savings-first :class:`ThriftyRegretRace`, and
:class:`PairedRace`),
the metered model handle agents call, the interception of the calls an agent makes itself
through vendors' SDKs or httpx, the response cache, the run journal, the local and Ray executors
and the result tables. It builds on ``providers/`` and never imports the CLI.
"""

from ..errors import BudgetExhausted
from ..metering import Budget, CallRecord, Meter
from ..metering import metering as metered
from ..providers.call import CachedResponse
from ._algorithms import (
    ALGORITHMS,
    ArmElimination,
    BayesianOptimization,
    BruteForce,
    EpsilonLUCB,
    HillClimbing,
    MatrixUCB,
    RandomSearch,
    SelectionAlgorithm,
    ThresholdSuccessiveElimination,
    make_algorithm,
    run_algorithm,
)
from ._arena import Arena, Evaluation, Evaluator, Objective
from ._cache import ResponseCache
from ._intercept import InterceptedCall, InterceptScope, intercepting
from ._lowrank import LowRankMatrixUCB
from ._meter import MeteredModel, current_meter
from ._proposal import LMProposal, parse_proposals
from ._race import PairedRace, RegretRace, ThriftyRegretRace
from ._results import CombinationResult, DatapointResult, FailureRecord, SelectionResult
from ._selector import AgentEvaluator, ModelSelector, default_cache_path
from ._space import SearchSpace

__all__ = [
    "ALGORITHMS",
    "AgentEvaluator",
    "Arena",
    "ArmElimination",
    "BayesianOptimization",
    "BruteForce",
    "Budget",
    "BudgetExhausted",
    "CachedResponse",
    "CallRecord",
    "CombinationResult",
    "DatapointResult",
    "EpsilonLUCB",
    "Evaluation",
    "Evaluator",
    "FailureRecord",
    "HillClimbing",
    "InterceptScope",
    "InterceptedCall",
    "LMProposal",
    "LowRankMatrixUCB",
    "MatrixUCB",
    "Meter",
    "MeteredModel",
    "ModelSelector",
    "Objective",
    "PairedRace",
    "RandomSearch",
    "RegretRace",
    "ResponseCache",
    "SearchSpace",
    "SelectionAlgorithm",
    "SelectionResult",
    "ThresholdSuccessiveElimination",
    "ThriftyRegretRace",
    "current_meter",
    "default_cache_path",
    "intercepting",
    "make_algorithm",
    "metered",
    "parse_proposals",
    "run_algorithm",
]
