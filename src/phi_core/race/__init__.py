"""The bandit race: a router decides which configurations to preview, the rubric judge scores
the previews, the best continues its branch to a full answer (with fallback, or speculatively
with early accept, optionally verifying each answer), and the router learns from the judged or
verified full answer.

Owns :class:`BanditRace` (a policy over ``parallel.agent_loop_parallel``, not a second engine),
its settings and result, and :func:`build_bandit_race` / :func:`run_bandit_race`, which build one
from plain options with its state (router statistics, preview cache, latency history) opened from
one location by ``routing.open_route_state``. Builds on ``loop/``, ``parallel/`` and ``routing/``.
"""

from .entry import (
    BanditOptions,
    build_bandit_race,
    route_scope,
    run_bandit_race,
    verifier_from_spec,
)
from .pipeline import (
    Arm,
    BanditRace,
    BanditRaceResult,
    RaceSettings,
    Verifier,
)

__all__ = [
    "Arm",
    "BanditOptions",
    "BanditRace",
    "BanditRaceResult",
    "RaceSettings",
    "Verifier",
    "build_bandit_race",
    "route_scope",
    "run_bandit_race",
    "verifier_from_spec",
]
