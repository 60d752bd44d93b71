"""Sessions: the recorder that builds sessions → loops → turns from agent events, the session
model (loop tree, parallel groups, sub-agent links) and the stores that persist it (JSON files
with advisory locks and atomic writes, or SQLite). Knows nothing of ``BasicAgent`` or configs.
"""

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
    "delete_session",
    "list_session_ids",
    "load_session",
    "load_sessions_for_agent",
    "open_session_store",
    "save_session",
]
