"""Sessions: the recorder that builds sessions → loops → turns from agent events, the session
model (loop tree, parallel groups, sub-agent links, compaction overlays), block compaction over
session records, and the stores that persist it (JSON files with advisory locks and atomic
writes, or SQLite). Knows nothing of ``BasicAgent`` or configs.
"""

from ._compaction import build_context_from_session, compact_session_loops, conversation_chain
from ._model import (
    SCHEMA_VERSION,
    ChildLoopRef,
    LoopConfigSnapshot,
    LoopEvent,
    LoopRecord,
    LoopStatus,
    ParallelGroupRecord,
    Session,
    SessionScope,
    SpawnRef,
    Turn,
)
from ._recorder import SessionRecorder, SessionRecorderConfig
from ._store import (
    JsonFileSessionStore,
    SessionLockedError,
    SessionNotFoundError,
    SessionStore,
    SqliteSessionStore,
    delete_session,
    list_session_ids,
    load_session,
    load_sessions_for_agent,
    merge_sessions,
    open_session_store,
    save_session,
)

__all__ = [
    "SCHEMA_VERSION",
    "ChildLoopRef",
    "JsonFileSessionStore",
    "LoopConfigSnapshot",
    "LoopEvent",
    "LoopRecord",
    "LoopStatus",
    "ParallelGroupRecord",
    "Session",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionRecorder",
    "SessionRecorderConfig",
    "SessionScope",
    "SessionStore",
    "SpawnRef",
    "SqliteSessionStore",
    "Turn",
    "build_context_from_session",
    "compact_session_loops",
    "conversation_chain",
    "delete_session",
    "list_session_ids",
    "load_session",
    "load_sessions_for_agent",
    "merge_sessions",
    "open_session_store",
    "save_session",
]
