"""Every exception phi-core raises, in one place.

::

    PhiError
    ├── UserError                      you called it wrong (raised at construction time)
    │   ├── UnknownModelError          a ``provider:model`` string names no known provider
    │   │   └── AmbiguousModelError    a bare model name that several providers offer
    │   ├── MissingApiKeyError         names the environment variable to set
    │   ├── MissingExtraError          names the extra to install
    │   ├── ConfigError                file, line and key of a bad config file
    │   ├── AgentBusyError             a second run on an agent that is still running
    │   ├── SkillError                 a SKILL.md without front matter, name or description
    │   ├── RunNotFoundError           no run (or conversation) with that id in the run log
    │   ├── ViewNotFoundError          the web view has no such run, namespace or selection
    │   ├── OpenApiError               an OpenAPI spec that cannot be turned into tools
    │   └── SandboxUnavailableError    model code would run, and no sandbox can be made here
    ├── RunError                       a run failed
    │   ├── AllBranchesFailedError     every branch of a race failed; ``failures`` per branch
    │   ├── BudgetExhausted            a selection's budget is spent (it recommends from what it has)
    │   ├── ScriptCallbackError        a callback script exited non-zero
    │   ├── Interrupted                Ctrl-C (or another interrupt) stopped the run
    │   ├── SchemaMismatchError        a reply holds no JSON (of the expected shape)
    │   └── McpError                   an MCP server failed a request (``code``: JSON-RPC code)
    │       ├── McpConnectionError     the server could not be started or reached, or went away
    │       └── McpTimeoutError        the server did not answer in time
    ├── GatewayError                   the gateway answers with an HTTP error (``status``, OpenAI body)
    │   └── ClientDisconnected         the client went away before its answer was sent (499)
    ├── ToolError                      raised by a tool: its message becomes the error result
    │   └── PathError                  a built-in tool refused a path (outside its workspace…)
    ├── StateStoreError                router state unreadable or unwritable: disk full, locked…
    │   └── StateCorruptError          not a router state (wrong shape, garbage); ``path`` names it
    ├── SessionError                   the session store could not do what was asked
    │   ├── SessionNotFoundError       no session with that id (also a ``KeyError``)
    │   └── SessionLockedError         another writer held the session's lock too long
    └── ProviderError                  one model call failed; ``kind`` classifies it
        ├── AuthError                  401/403: bad or missing credentials (not retried)
        ├── RateLimitedError           429; ``retry_after`` in seconds when the vendor said
        ├── OverloadedError            503/529 "overloaded" (retried)
        ├── ServerError                other 5xx (retried)
        ├── NetworkError               connection failed or dropped (retried before first byte)
        ├── ContextOverflowError       the prompt does not fit the model's context window
        ├── BadRequestError            400/404/422: the request itself is wrong (not retried)
        ├── BudgetExceededError        the budget refused the call before it was sent
        ├── CallTimeoutError           a call missed a deadline (``deadline``: connect, first byte…)
        └── ProviderCancelledError     the call was cancelled

Provider errors never carry API keys: :func:`redact` scrubs anything that looks like one, and
the raw SDK exception a provider error is classified from is not chained to it (its request
headers hold the key); ``ProviderError.cause_type`` names its type.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "MIN_SECRET",
    "SECRET_NAME",
    "SECRET_VALUE",
    "AgentBusyError",
    "AgentInterrupted",
    "AllBranchesFailedError",
    "AmbiguousModelError",
    "AuthError",
    "BadRequestError",
    "BranchFailure",
    "BudgetExceededError",
    "BudgetExhausted",
    "CallTimeoutError",
    "ClientDisconnected",
    "ConfigError",
    "ContextOverflowError",
    "DeadlineKind",
    "GatewayError",
    "Interrupted",
    "McpConnectionError",
    "McpError",
    "McpTimeoutError",
    "MissingApiKeyError",
    "MissingExtraError",
    "NetworkError",
    "OpenApiError",
    "OverloadedError",
    "PathError",
    "PhiError",
    "ProviderCancelledError",
    "ProviderError",
    "ProviderErrorKind",
    "RateLimitedError",
    "RunError",
    "RunNotFoundError",
    "SandboxUnavailableError",
    "SchemaMismatchError",
    "ScriptCallbackError",
    "ServerError",
    "SessionError",
    "SessionLockedError",
    "SessionNotFoundError",
    "SkillError",
    "StateCorruptError",
    "StateStoreError",
    "ToolError",
    "UnknownModelError",
    "UserError",
    "ViewNotFoundError",
    "redact",
    "redact_tree",
    "register_environment_secrets",
    "register_secret",
    "registered_secrets",
]

ProviderErrorKind = Literal[
    "auth",
    "rate_limited",
    "overloaded",
    "server",
    "network",
    "context_overflow",
    "bad_request",
    "cancelled",
    "timeout",
    "budget",
]

_SECRET_PATTERNS = [
    re.compile(r"sk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"AIza[0-9A-Za-z_\-]{20,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}"),
    re.compile(
        r"(?i)((?:api[_-]?key|x-api-key|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{6,}"
    ),
    # a query parameter or setting that names a token, secret or password (not max_tokens=)
    re.compile(
        r"(?i)((?<![a-z0-9_])(?:access[_-]?token|auth[_-]?token|token|secret|password|passwd)"
        r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',}&]{6,}"
    ),
    # credentials in a URL: scheme://user:password@host
    re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://)[^/\s@\"']+(?=@)"),
]
_registered_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret so :func:`redact` removes it wherever it shows up."""
    if value and len(value) >= 6:
        _registered_secrets.add(value)


SECRET_NAME = re.compile(
    r"(?i)(API_?KEY|_KEY$|^KEY$|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|PRIVATE|DSN$|"
    r"DATABASE_URL|CONNECTION_STRING)"
)
"""Names of environment variables whose values are secrets."""
SECRET_VALUE = re.compile(r"^(sk-|sk_|AIza|ghp_|gho_|github_pat_|xox[abp]-|AKIA|glpat-)")
"""How the values of well-known kinds of keys start, whatever their variable is called."""
MIN_SECRET = 8
"""A shorter value (``true``, ``1``) is no secret worth hiding."""


def register_environment_secrets(environ: Mapping[str, str] | None = None) -> None:
    """Register the values of the environment's secret-looking variables (``*_API_KEY``,
    ``*_TOKEN``, ``sk-…`` values...), so :func:`redact` removes a key even in a shape its
    patterns do not know, also one this process never used (done once at import)."""
    for name, value in (os.environ if environ is None else environ).items():
        if len(value) >= MIN_SECRET and (SECRET_NAME.search(name) or SECRET_VALUE.match(value)):
            register_secret(value)


def registered_secrets() -> frozenset[str]:
    """The secrets :func:`register_secret` has seen (for exact-value scrubbing elsewhere)."""
    return frozenset(_registered_secrets)


def redact(text: str) -> str:
    """Replace anything that looks like an API key with ``[REDACTED]``."""
    for secret in _registered_secrets:
        if secret in text:
            text = text.replace(secret, "[REDACTED]")
    for pattern in _SECRET_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + "[REDACTED]", text)
        else:
            text = pattern.sub("[REDACTED]", text)
    return text


def redact_tree(value: Any) -> Any:
    """``value`` with :func:`redact` applied to every string in it, keys too (JSON-like trees:
    dicts, lists, tuples; other values as they are)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): redact_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_tree(v) for v in value]
    return value


class _DeadlinePassed(BaseException):
    """The run's deadline passed in work the agent loop bounds itself (hooks, filters, getters,
    ``transform_context``, compaction); the loop ends the run on the limit. Never leaves the
    loop. A ``BaseException`` so that no ``except Exception`` on the way takes it for that
    work's own failure."""


class PhiError(Exception):
    """Base of every phi-core exception."""


class UserError(PhiError, ValueError):
    """A usage mistake by the application developer; fix the call or the config."""


class UnknownModelError(UserError):
    """A model string names no known provider or model."""


class AmbiguousModelError(UnknownModelError):
    """A bare model name (``gpt-4o``) that more than one provider offers; ``candidates`` lists
    the ``provider:model`` spellings to choose from."""

    def __init__(self, name: str, candidates: Sequence[str]) -> None:
        self.name = name
        self.candidates = tuple(candidates)
        super().__init__(
            f"Model {name!r} is offered by several providers; write one of: "
            f"{', '.join(self.candidates)}."
        )


class MissingApiKeyError(UserError):
    def __init__(self, provider: str, env_var: str) -> None:
        self.provider = provider
        self.env_var = env_var
        super().__init__(
            f"No API key for provider {provider!r}: store one with `phi keys set {provider}` "
            f"or set the {env_var} environment variable (or pass api_key=...). The embedded "
            "model `local:smollm2` needs no key."
        )


class MissingExtraError(UserError, ImportError):
    def __init__(self, what: str, extra: str) -> None:
        self.extra = extra
        super().__init__(f"{what} needs an optional dependency: pip install 'phi-core[{extra}]'")


class ConfigError(UserError):
    """A config file is wrong; says where (file, line, key path) and what was expected."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.key = key
        self.detail = message
        where = []
        if file:
            where.append(f"{file}:{line}" if line else file)
        if key:
            where.append(f"key `{key}`")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class AgentBusyError(UserError):
    """A second run was started while the agent was still running one."""


class SkillError(UserError):
    """A ``SKILL.md`` is malformed; the message names the file and what is missing."""

    def __init__(self, message: str, *, path: Path) -> None:
        self.path = path
        super().__init__(message)


class SandboxUnavailableError(UserError):
    """Model-written code would run, and no sandbox can be made on this machine; the message
    names what is missing, how to install it, and the explicit unsafe opt-in."""


class RunNotFoundError(UserError, KeyError):
    """No run (or conversation) with that id in the run log; the message says how to list
    them."""

    def __str__(self) -> str:  # KeyError's own __str__ would quote the message
        return str(self.args[0]) if self.args else ""


class ViewNotFoundError(UserError):
    """The web view has no such run, router namespace or selection (its HTTP 404); the message
    says what exists instead."""


class RunError(PhiError):
    """A run failed in a way the caller must handle."""


@dataclass(frozen=True, slots=True)
class BranchFailure:
    """Why one branch of a race produced no answer (the data behind the message)."""

    index: int
    """The branch's position in the race (its ``config_index``)."""
    loop_id: str
    status: str
    """How the branch ended: ``error``, ``timeout``, ``cancelled`` or ``rejected``."""
    error: str | None = None
    """The cause as text (already redacted)."""
    error_kind: str | None = None
    """The classified kind of ``error`` (a provider error's ``kind``, ``tool``, ``timeout``…; see
    ``phi_core.outcome.ErrorKind``)."""


class AllBranchesFailedError(RunError):
    """Every branch of a race failed (or the race was cancelled before any answer).

    ``failures`` holds one :class:`BranchFailure` per branch, so callers can act on the causes
    (retry the rate-limited ones, report the auth errors) without parsing the message.
    """

    def __init__(self, message: str, failures: Sequence[BranchFailure] = ()) -> None:
        self.failures: tuple[BranchFailure, ...] = tuple(failures)
        super().__init__(message)

    @property
    def kinds(self) -> dict[int, str]:
        """``{branch index: error kind}``: the provider classification, else the status."""
        return {f.index: f.error_kind or f.status for f in self.failures}


class ScriptCallbackError(RunError):
    """A callback script from a config file exited with a non-zero code."""

    def __init__(self, command: str, code: int, stderr: str) -> None:
        self.code = code
        detail = f": {stderr.strip()[:500]}" if stderr.strip() else ""
        super().__init__(f"callback script {command!r} exited with code {code}{detail}")


class Interrupted(RunError):
    """The user interrupted the run (Ctrl-C); ``partial`` is whatever it had returned, or None."""

    def __init__(self, partial: Any = None) -> None:
        super().__init__("interrupted")
        self.partial = partial


class ToolError(PhiError):
    """Raise from a tool to return an error result with this message to the model."""


class PathError(ToolError):
    """A path a built-in tool refuses: outside its workspace, not a regular file, malformed."""


class StateStoreError(PhiError):
    """A router state (or its cache) could not be read or written; the message names the real
    cause (disk full, locked by another process, unreachable, permission) and the location."""


class StateCorruptError(StateStoreError):
    """A router state of the wrong shape: garbage or truncated SQLite, JSON that is not a state
    (``[]``, ``null``, a string where an arm's statistics belong). Writers move it aside with a
    warning; read-only commands raise this and leave the file untouched."""

    def __init__(self, message: str, *, path: str, reason: str = "") -> None:
        self.path = path
        self.reason = reason or message
        """What is wrong with it, in a few words."""
        super().__init__(message)


class SessionError(PhiError):
    """The session store could not do what was asked."""


class SessionNotFoundError(SessionError, KeyError):
    """No session with this id in the store."""

    def __init__(self, session_id: str, where: str) -> None:
        self.session_id = session_id
        super().__init__(f"No session {session_id!r} in {where}.")

    def __str__(self) -> str:
        return str(self.args[0])


class SessionLockedError(SessionError):
    """Another writer held the session's lock for longer than ``lock_timeout``."""

    def __init__(self, session_id: str, timeout: float) -> None:
        self.session_id = session_id
        super().__init__(
            f"Session {session_id!r} stayed locked by another writer for {timeout:.1f}s; "
            "retry later or raise lock_timeout."
        )


class BudgetExhausted(RunError):
    """Raised inside a selection algorithm when the budget is spent; the runner recommends from
    what has been evaluated."""


class AgentInterrupted(PhiError):
    """A ``KeyboardInterrupt`` raised while a selection's agent ran, carried out of its cell's
    task as an ordinary exception (so the batch's task groups cancel and await every sibling)
    and raised again as the original ``interrupt`` once they have. Internal to selection."""

    def __init__(self, interrupt: KeyboardInterrupt) -> None:
        super().__init__("interrupted")
        self.interrupt = interrupt


class OpenApiError(UserError):
    """An OpenAPI spec could not be loaded or turned into tools; says what and how to fix it."""


class McpError(RunError):
    """An MCP server failed a request. ``server`` names it; ``code`` is the JSON-RPC error code
    when the server sent one."""

    def __init__(self, message: str, *, server: str | None = None, code: int | None = None) -> None:
        self.server = server
        self.code = code
        super().__init__(redact(message))


class McpConnectionError(McpError):
    """The MCP server could not be started or reached, or the connection to it was lost."""


class McpTimeoutError(McpError):
    """The MCP server did not answer within the timeout (the request was cancelled on it)."""


class SchemaMismatchError(RunError):
    """A model's reply holds no JSON value, or none of the expected shape (``extract_json``)."""

    def __init__(self, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class GatewayError(PhiError):
    """An error the gateway answers in OpenAI's error format, with ``status`` and ``headers``
    (``Retry-After`` on a 429); the message never carries a key (:func:`redact`)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.message = redact(message)
        self.type = type_
        self.code = code
        self.param = param
        self.headers = dict(headers or {})
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {"message": self.message, "type": self.type, "param": self.param,
                      "code": self.code}
        }  # fmt: skip


class ClientDisconnected(GatewayError):
    """The client closed the connection before its answer was sent (logged as 499)."""

    def __init__(self) -> None:
        super().__init__(499, "The client closed the request.", type_="client_closed")


class ProviderError(PhiError):
    """One model call failed. ``kind`` says how; ``retryable`` says whether to try again."""

    kind: ProviderErrorKind = "bad_request"
    retryable: bool = False
    cause_type: str | None = None
    """The type of the SDK or transport exception this error was classified from
    (``openai.AuthenticationError``). The raw exception itself is never chained as
    ``__cause__``/``__context__``: its message, request and headers can hold the API key."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        provider: str | None = None,
        model: str | None = None,
        body: str | None = None,
    ) -> None:
        self.message = redact(message)
        self.status = status
        self.retry_after = retry_after
        self.provider = provider
        self.model = model
        self.body = redact(body) if body else None
        super().__init__(self.message)

    def __str__(self) -> str:
        parts = [self.message]
        if self.status is not None:
            parts.append(f"(HTTP {self.status})")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status!r})"


class AuthError(ProviderError):
    kind = "auth"


class RateLimitedError(ProviderError):
    kind = "rate_limited"
    retryable = True


class OverloadedError(ProviderError):
    kind = "overloaded"
    retryable = True


class ServerError(ProviderError):
    kind = "server"
    retryable = True


class NetworkError(ProviderError):
    kind = "network"
    retryable = True


class ContextOverflowError(ProviderError):
    kind = "context_overflow"


class BadRequestError(ProviderError):
    kind = "bad_request"


class BudgetExceededError(ProviderError):
    """A budget refused a call before it was sent; ``limit`` names which one (``tokens``,
    ``cost``, ``wall`` or ``calls`` of a :class:`~phi_core.metering.Budget`, or ``limits``: an
    agent's :class:`~phi_core.context.ExecutionLimits`). Never retried."""

    kind = "budget"

    def __init__(self, message: str, *, limit: str) -> None:
        self.limit = limit
        super().__init__(f"Budget exceeded: {message}")


DeadlineKind = Literal["connect", "first_byte", "idle", "total", "run"]
"""Which deadline a call missed (``run``: the run's ``max_duration`` or wall-clock budget)."""


class CallTimeoutError(ProviderError):
    """A model call missed a deadline; ``deadline`` says which one.

    Retried (within the retry policy and the total deadline) only when nothing had streamed and
    the missed deadline was ``connect`` or ``first_byte``.
    """

    kind = "timeout"

    def __init__(
        self,
        message: str,
        *,
        deadline: DeadlineKind,
        seconds: float,
        provider: str | None = None,
        model: str | None = None,
    ) -> None:
        self.deadline: DeadlineKind = deadline
        self.seconds = seconds
        self.retryable = deadline in ("connect", "first_byte")
        super().__init__(message, provider=provider, model=model)


class ProviderCancelledError(ProviderError):
    kind = "cancelled"


register_environment_secrets()
