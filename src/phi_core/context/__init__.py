"""Context management: execution limits (and compaction) applied by the loop between turns."""

from .limits import ExecutionLimits, ExecutionTracker

__all__ = ["ExecutionLimits", "ExecutionTracker"]
