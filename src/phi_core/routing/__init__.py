"""Learned routing: contextual bandits that learn which configuration wins for which query.

Owns the routers (:class:`LinUCBRouter`, :class:`LinearThompsonRouter`,
:class:`EpsilonGreedyRouter`) over additive sufficient statistics, the feature extractors, the
reward policy, the router-state stores and preview caches (JSON file, SQLite, Redis) and a replay
provider of recorded answers. It knows nothing of the CLI, the racing pipeline or ``parallel/``.
"""

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
from .features import EmbeddingFeatures, FeatureExtractor, HashedFeatures, intent_signals
from .replay import Recorded, ReplayProvider, prompt_key
from .reward import ArmOutcome, ArmReward, LatencyTracker, RewardPolicy
from .stores import (
    JsonFileStateStore,
    MemoryPreviewCache,
    MemoryStateStore,
    PreviewCache,
    RedisPreviewCache,
    RedisStateStore,
    RouterStateStore,
    SQLitePreviewCache,
    SQLiteStateStore,
    open_state_store,
    preview_cache_key,
)

__all__ = [
    "ArmOutcome",
    "ArmReward",
    "ArmStats",
    "EmbeddingFeatures",
    "EpsilonGreedyRouter",
    "FeatureExtractor",
    "HashedFeatures",
    "JsonFileStateStore",
    "LatencyTracker",
    "LinUCBRouter",
    "LinearRouter",
    "LinearThompsonRouter",
    "LoggedOutcome",
    "MemoryPreviewCache",
    "MemoryStateStore",
    "PreviewCache",
    "RankedArm",
    "Ranking",
    "Recorded",
    "RedisPreviewCache",
    "RedisStateStore",
    "ReplayProvider",
    "RewardPolicy",
    "RouterStateStore",
    "SQLitePreviewCache",
    "SQLiteStateStore",
    "intent_signals",
    "open_state_store",
    "preview_cache_key",
    "prompt_key",
]
