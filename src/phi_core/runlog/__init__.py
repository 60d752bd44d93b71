"""The run log: every run, race, bandit race and selection recorded in SQLite
(``$PHI_HOME/logs.db``) and read back — by ``phi logs``, by ``-c`` to continue a conversation
with the winner, and by a web view.

Owns the schema and its numbered migrations, the :class:`RunRecorder` event sink (a sink of the
one event stream plus the final result), the :class:`RunLog` store with its reading API, and
conversations. Sits above ``loop/``, ``parallel/``, ``race/`` and ``select/`` (it records their
results) and below ``cli/`` and ``server/``, which only wire it.
"""

from ..errors import RunNotFoundError
from ._conversation import Continuation, find_continuation, new_conversation_id
from ._migrations import MIGRATIONS, applied_migrations, fts_available, migrate
from ._recorder import RunRecorder, plan_snapshot, winner_history
from ._records import (
    MAX_COUNT,
    BranchRecord,
    LogStatus,
    RouteEventRecord,
    RunFacets,
    RunKind,
    RunQuery,
    RunRecord,
    check_count,
    check_text,
    end_of_day,
    new_run_id,
    parse_count,
    parse_when,
    utc_iso,
)
from ._store import (
    LOG_FILE,
    NO_LOG_ENV,
    RunLog,
    default_log_path,
    log_status,
    logging_enabled,
    open_run_log,
    set_logging_enabled,
    why_logging_disabled,
)

__all__ = [
    "LOG_FILE",
    "MAX_COUNT",
    "MIGRATIONS",
    "NO_LOG_ENV",
    "BranchRecord",
    "Continuation",
    "LogStatus",
    "RouteEventRecord",
    "RunFacets",
    "RunKind",
    "RunLog",
    "RunNotFoundError",
    "RunQuery",
    "RunRecord",
    "RunRecorder",
    "applied_migrations",
    "check_count",
    "check_text",
    "default_log_path",
    "end_of_day",
    "find_continuation",
    "fts_available",
    "log_status",
    "logging_enabled",
    "migrate",
    "new_conversation_id",
    "new_run_id",
    "open_run_log",
    "parse_count",
    "parse_when",
    "plan_snapshot",
    "set_logging_enabled",
    "utc_iso",
    "why_logging_disabled",
    "winner_history",
]
