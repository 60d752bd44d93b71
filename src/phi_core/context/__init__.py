"""Context management: execution limits (and compaction) applied by the loop between turns."""

from .compaction import (
    CompactionConfig,
    ContextCompactor,
    compact_messages,
    estimate_tokens,
    should_compact,
)
from .limits import ExecutionLimits, ExecutionTracker

__all__ = [
    "CompactionConfig",
    "ContextCompactor",
    "ExecutionLimits",
    "ExecutionTracker",
    "compact_messages",
    "estimate_tokens",
    "should_compact",
]
