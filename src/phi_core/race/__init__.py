"""The racing pipeline: a router decides which configurations to preview, a judge scores the
previews, the best answers in full (with fallback or speculatively, optionally verifying each
answer before accepting it), and the router learns.

Owns :class:`BanditRace` and its settings, budgets and results, plus the entry points the CLI
calls (:func:`run_bandit_race`). Builds on ``loop/`` (``agent_loop``), ``routing/`` and
``parallel/`` (the code verifier).
"""

from .entry import (
    DEFAULT_STATE,
    BanditOptions,
    build_bandit_race,
    route_state_summary,
    run_bandit_race,
    verifier_from_spec,
)
from .pipeline import (
    Arm,
    BanditRace,
    PreviewOutcome,
    RaceBudget,
    RaceResult,
    RaceSettings,
    Verifier,
    parse_judge_scores,
    preview_token_limit,
)

__all__ = [
    "DEFAULT_STATE",
    "Arm",
    "BanditOptions",
    "BanditRace",
    "PreviewOutcome",
    "RaceBudget",
    "RaceResult",
    "RaceSettings",
    "Verifier",
    "build_bandit_race",
    "parse_judge_scores",
    "preview_token_limit",
    "route_state_summary",
    "run_bandit_race",
    "verifier_from_spec",
]
