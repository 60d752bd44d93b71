"""The agent loop: one run of prompt → model → tools → model … → answer, with events.

Owns ``AgentContext`` (conversation + identity), ``AgentLoopConfig`` (what runs), and
``agent_loop`` / ``agent_loop_continue`` (the run itself). Knows nothing of races or routing.
"""

from .config import AgentLoopConfig, Batched, FilterResult, InputFilter, LoopHooks, ToolExecution
from .context import AgentContext
from .queue import MessageQueue, QueueMode
from .run import (
    LoopResult,
    agent_loop,
    agent_loop_continue,
    agent_loop_continue_stream,
    agent_loop_stream,
)

__all__ = [
    "AgentContext",
    "AgentLoopConfig",
    "Batched",
    "FilterResult",
    "InputFilter",
    "LoopHooks",
    "LoopResult",
    "MessageQueue",
    "QueueMode",
    "ToolExecution",
    "agent_loop",
    "agent_loop_continue",
    "agent_loop_continue_stream",
    "agent_loop_stream",
]
