"""Context management: token counting and tracking, compaction (automatic tiers, overflow
recovery, block overlays), model-directed pruning, skills, and execution limits.

Everything here works on a *view* of the conversation: the message log is never rewritten. It
knows nothing of agents, sessions or configs (``sessions/`` stores the overlays made here).
"""

from .blocks import (
    BlockCompactionStrategy,
    DefaultBlockCompaction,
    apply_compaction_block,
    compact_block,
)
from .compaction import (
    CompactionConfig,
    CompactionReport,
    CompactionStrategy,
    ContextCompactor,
    DefaultCompaction,
    compact_messages,
    estimate_tokens,
    should_compact,
)
from .limits import ExecutionLimits, ExecutionTracker
from .prun import PrunRecord, PrunTool, apply_prunes, prun_tools
from .skills import Skill, SkillSet
from .tokens import (
    CallableTokenCounter,
    HeuristicTokenCounter,
    LlamaCppTokenCounter,
    TokenCounter,
    token_counter_for,
)
from .tracker import ContextTracker

__all__ = [
    "BlockCompactionStrategy",
    "CallableTokenCounter",
    "CompactionConfig",
    "CompactionReport",
    "CompactionStrategy",
    "ContextCompactor",
    "ContextTracker",
    "DefaultBlockCompaction",
    "DefaultCompaction",
    "ExecutionLimits",
    "ExecutionTracker",
    "HeuristicTokenCounter",
    "LlamaCppTokenCounter",
    "PrunRecord",
    "PrunTool",
    "Skill",
    "SkillSet",
    "TokenCounter",
    "apply_compaction_block",
    "apply_prunes",
    "compact_block",
    "compact_messages",
    "estimate_tokens",
    "prun_tools",
    "should_compact",
    "token_counter_for",
]
