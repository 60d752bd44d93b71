"""Where an MCP server is: :class:`McpStdioServer` (a subprocess) or :class:`McpHttpServer`
(streamable HTTP), and :class:`McpReconnect`, how to reach it again after it went away.

A stdio server's environment is an allow-list: ``PATH``, ``HOME`` and the locale variables of ours
plus what the caller passes in ``env`` (the SDK adds ``LOGNAME``, ``SHELL``, ``TERM`` and ``USER``)
- never our API keys. Values of ``env`` entries whose names look secret, and every HTTP header
value, are registered with :func:`~phi_core.errors.register_secret` so no message shows them.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import MissingExtraError, UserError, register_secret

__all__ = ["McpHttpServer", "McpReconnect", "McpServer", "McpStdioServer"]

_ENV_ALLOW = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE")
_SECRETISH = re.compile(r"(?i)key|token|secret|passw|auth|cred|cookie|session")
_INTERPRETERS = {"python", "python3", "node", "npx", "uv", "uvx", "deno", "bun", "bunx", "pipx"}


def sdk() -> Any:
    try:
        import mcp
    except ImportError as exc:  # pragma: no cover - the extra is part of `all`
        raise MissingExtraError("MCP servers", "mcp") from exc
    return mcp


# --------------------------------------------------------------------------- server specs


@dataclass(frozen=True)
class McpStdioServer:
    """A server started as a subprocess that speaks MCP on its stdin/stdout."""

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = field(default=None, repr=False)
    cwd: str | Path | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command.strip():
            raise UserError(
                f"An MCP stdio server needs a command to run, got {self.command!r}; "
                "pass e.g. command='npx', args=['-y', '@modelcontextprotocol/server-everything']."
            )
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise UserError(
                f"MCP server args must be a list of strings, got {self.args!r}; "
                "split the command line into its words (shlex.split does that)."
            )
        object.__setattr__(self, "args", tuple(self.args))
        env = dict(self.env or {})
        for key, value in env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise UserError(
                    f"MCP server env must map strings to strings; the entry for {key!r} is "
                    f"a {type(value).__name__}. Convert the value with str()."
                )
            if _SECRETISH.search(key):
                register_secret(value)
        object.__setattr__(self, "env", env)

    @property
    def label(self) -> str:
        """The server's name in messages: ``name`` or one derived from the command line."""
        if self.name:
            return self.name
        program = Path(self.command).name
        if program in _INTERPRETERS:
            for arg in self.args:
                if not arg.startswith("-"):
                    return Path(arg.rstrip("/")).stem or program
        return program

    def environment(self) -> dict[str, str]:
        """What the subprocess sees: the allow-listed variables of ours plus ``env``."""
        base = {k: os.environ[k] for k in _ENV_ALLOW if k in os.environ}
        return base | dict(self.env or {})

    def describe(self) -> str:
        return shlex.join([self.command, *self.args])


@dataclass(frozen=True)
class McpHttpServer:
    """A server reached over streamable HTTP at ``url`` (headers are sent with every request)."""

    url: str
    headers: Mapping[str, str] | None = field(default=None, repr=False)
    name: str | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.url) if isinstance(self.url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise UserError(
                f"An MCP HTTP server needs an http:// or https:// URL, got {self.url!r}; "
                "for example 'http://127.0.0.1:8000/mcp'."
            )
        headers = dict(self.headers or {})
        for key, value in headers.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise UserError(
                    f"MCP server headers must map strings to strings; the entry for {key!r} is "
                    f"a {type(value).__name__}."
                )
            register_secret(value)  # headers are where credentials go
        object.__setattr__(self, "headers", headers)

    @property
    def label(self) -> str:
        return self.name or (urlsplit(self.url).hostname or "mcp")

    def describe(self) -> str:
        parts = urlsplit(self.url)
        return (
            parts._replace(netloc=parts.hostname or "", query="").geturl()
            if (parts.username or parts.password)
            else self.url
        )


McpServer = McpStdioServer | McpHttpServer


@dataclass(frozen=True)
class McpReconnect:
    """How a client reconnects to a server that went away: up to ``max_attempts`` connection
    attempts per call, waiting ``base_delay * 2**n`` (at most ``max_delay``) between them."""

    max_attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise UserError(
                f"McpReconnect.max_attempts must be >= 1, got {self.max_attempts}; "
                "use 1 to try once without retrying."
            )
        if self.base_delay < 0 or self.max_delay < 0:
            raise UserError("McpReconnect delays must be >= 0 seconds.")

    def delay(self, attempt: int) -> float:
        return float(min(self.base_delay * (2 ** (attempt - 1)), self.max_delay))
