"""Learned routing: contextual bandits that learn which configuration wins for which query.

Owns the routers (:class:`LinUCBRouter`, :class:`LinearThompsonRouter`,
:class:`EpsilonGreedyRouter`) over additive sufficient statistics, the feature extractors, the
reward policy, the router-state stores, preview caches and latency history (JSON file, SQLite,
Redis) and a replay
provider of recorded answers. It knows nothing of the CLI, the racing pipeline or ``parallel/``.
"""

from ._redis import RedisPreviewCache, RedisStateStore, spool_path
from .bandits import (
    ArmStats,
    EpsilonGreedyRouter,
    LinearRouter,
    LinearThompsonRouter,
    LinUCBRouter,
    LoggedOutcome,
    RankedArm,
    Ranking,
)
from .features import EmbeddingFeatures, FeatureExtractor, HashedFeatures
from .history import (
    LatencyHistory,
    MemoryLatencyHistory,
    RedisLatencyHistory,
    SQLiteLatencyHistory,
)
from .replay import Recorded, ReplayProvider, prompt_key
from .reward import ArmReward, LatencyTracker, RewardPolicy
from .state import (
    DEFAULT_STATE,
    PreviewCallCache,
    RouteState,
    open_route_state,
    route_state_summary,
    state_location,
)
from .stores import (
    JsonFileStateStore,
    MemoryPreviewCache,
    MemoryStateStore,
    PreviewCache,
    RouterStateStore,
    SQLitePreviewCache,
    SQLiteStateStore,
    open_state_store,
)

__all__ = [
    "DEFAULT_STATE",
    "ArmReward",
    "ArmStats",
    "EmbeddingFeatures",
    "EpsilonGreedyRouter",
    "FeatureExtractor",
    "HashedFeatures",
    "JsonFileStateStore",
    "LatencyHistory",
    "LatencyTracker",
    "LinUCBRouter",
    "LinearRouter",
    "LinearThompsonRouter",
    "LoggedOutcome",
    "MemoryLatencyHistory",
    "MemoryPreviewCache",
    "MemoryStateStore",
    "PreviewCache",
    "PreviewCallCache",
    "RankedArm",
    "Ranking",
    "Recorded",
    "RedisLatencyHistory",
    "RedisPreviewCache",
    "RedisStateStore",
    "ReplayProvider",
    "RewardPolicy",
    "RouteState",
    "RouterStateStore",
    "SQLiteLatencyHistory",
    "SQLitePreviewCache",
    "SQLiteStateStore",
    "open_route_state",
    "open_state_store",
    "prompt_key",
    "route_state_summary",
    "spool_path",
    "state_location",
]
