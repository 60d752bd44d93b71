"""OpenAPI tools, configured: :class:`OpenApiConfig`, :class:`OpenApiAuth`, :class:`OperationFilter`.

One tool per operation of an OpenAPI 3.0 or 3.1 spec (see :mod:`phi_core.tools.openapi_tools`)::

    config = OpenApiConfig(auth=OpenApiAuth.bearer(token), name_prefix="pets")
    tools = OpenApiToolAdapter.from_file("petstore.yaml", config, OperationFilter.by_tag("pets"))

Secrets (bearer tokens, API keys, passwords) are registered with
:func:`~phi_core.errors.register_secret` when the auth is made, so they are scrubbed from every
tool result, error and log line, and their ``repr`` never shows them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..errors import UserError, register_secret

__all__ = ["HTTP_METHODS", "OpenApiAuth", "OpenApiConfig", "OperationFilter"]

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@dataclass(frozen=True)
class OpenApiAuth:
    """How requests authenticate: :meth:`bearer`, :meth:`api_key` (header or query), :meth:`basic`."""

    kind: Literal["bearer", "api_key", "basic"]
    secret: str = field(repr=False)
    name: str | None = None
    location: Literal["header", "query"] = "header"
    username: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.secret, str) or not self.secret:
            raise UserError(
                f"OpenAPI {self.kind} auth needs a non-empty secret string; pass the token, "
                "key or password itself (e.g. from an environment variable)."
            )
        if self.kind == "api_key" and not self.name:
            raise UserError(
                "OpenAPI api_key auth needs the header or query parameter name, "
                "e.g. OpenApiAuth.api_key('X-API-Key', key)."
            )
        if self.location not in ("header", "query"):
            raise UserError(
                f"An API key goes in the 'header' or the 'query', got {self.location!r}."
            )
        register_secret(self.secret)

    @classmethod
    def bearer(cls, token: str) -> OpenApiAuth:
        """``Authorization: Bearer <token>``."""
        return cls("bearer", token)

    @classmethod
    def api_key(
        cls, name: str, value: str, *, location: Literal["header", "query"] = "header"
    ) -> OpenApiAuth:
        """An API key sent as header ``name`` (or, with ``location="query"``, query parameter)."""
        return cls("api_key", value, name=name, location=location)

    @classmethod
    def basic(cls, username: str, password: str) -> OpenApiAuth:
        """HTTP basic authentication."""
        return cls("basic", password, username=username)


@dataclass(frozen=True)
class OpenApiConfig:
    """Auth, extra headers, timeouts and limits for the tools of one spec.

    Args:
        base_url: overrides the spec's ``servers[0].url`` (trailing ``/`` removed).
        auth: an :class:`OpenApiAuth`, or ``None``.
        headers: sent with every request (values are treated as secrets).
        timeout: seconds per request.
        max_response_bytes: longer response bodies are cut (and say so).
        name_prefix: tool names become ``{prefix}__{operationId}``.
    """

    base_url: str | None = None
    auth: OpenApiAuth | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = 30.0
    max_response_bytes: int = 64 * 1024
    name_prefix: str | None = None

    def __post_init__(self) -> None:
        if self.base_url is not None and not re.match(r"(?i)https?://[^/]", self.base_url):
            raise UserError(
                f"base_url must be an http:// or https:// URL, got {self.base_url!r}; "
                "for example 'https://api.example.com/v1'."
            )
        if self.base_url is not None:
            object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        if self.auth is not None and not isinstance(self.auth, OpenApiAuth):
            raise UserError(
                f"auth must be an OpenApiAuth, got {self.auth!r}; use OpenApiAuth.bearer(token), "
                "OpenApiAuth.api_key(name, value) or OpenApiAuth.basic(user, password)."
            )
        if not (isinstance(self.timeout, int | float) and self.timeout > 0):
            raise UserError(f"timeout must be > 0 seconds, got {self.timeout!r}.")
        if not (isinstance(self.max_response_bytes, int) and self.max_response_bytes >= 1):
            raise UserError(
                f"max_response_bytes must be a positive integer, got {self.max_response_bytes!r}."
            )
        if self.name_prefix is not None:
            from .mcp_tools import check_prefix

            check_prefix(self.name_prefix)
        headers = dict(self.headers)
        for key, value in headers.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise UserError(f"headers must map strings to strings; {key!r} does not.")
            register_secret(value)
        object.__setattr__(self, "headers", headers)


def _words(values: str | Iterable[str] | None) -> frozenset[str]:
    if values is None:
        return frozenset()
    if isinstance(values, str):
        return frozenset([values])
    return frozenset(values)


@dataclass(frozen=True)
class OperationFilter:
    """Which operations become tools. Empty ``include`` sets mean "all"; every ``exclude`` wins.

    Paths are glob patterns (``/pets/*`` stays in one segment, ``/pets/**`` does not) or prefixes
    (``/pets`` matches ``/pets`` and ``/pets/{id}``); methods
    are HTTP methods (any case); tags and operation ids match exactly.
    """

    tags: frozenset[str] = frozenset()
    operation_ids: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset()
    paths: frozenset[str] = frozenset()
    exclude_tags: frozenset[str] = frozenset()
    exclude_operation_ids: frozenset[str] = frozenset()
    exclude_methods: frozenset[str] = frozenset()
    exclude_paths: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for name in ("tags", "operation_ids", "methods", "paths"):
            for prefix in ("", "exclude_"):
                object.__setattr__(self, prefix + name, _words(getattr(self, prefix + name)))
        for method in self.methods | self.exclude_methods:
            if method.lower() not in HTTP_METHODS:
                raise UserError(
                    f"Unknown HTTP method {method!r} in an OperationFilter; "
                    f"use one of {', '.join(m.upper() for m in HTTP_METHODS)}."
                )

    @classmethod
    def all(cls) -> OperationFilter:
        return cls()

    @classmethod
    def by_operation_id(cls, *ids: str) -> OperationFilter:
        return cls(operation_ids=frozenset(ids))

    @classmethod
    def by_tag(cls, *tags: str) -> OperationFilter:
        return cls(tags=frozenset(tags))

    @classmethod
    def by_path_prefix(cls, *prefixes: str) -> OperationFilter:
        return cls(paths=frozenset(prefixes))

    def matches(
        self, method: str, path: str, operation_id: str | None, tags: Iterable[str]
    ) -> bool:
        tag_set = set(tags)
        method = method.lower()
        if (
            (operation_id is not None and operation_id in self.exclude_operation_ids)
            or tag_set & self.exclude_tags
            or method in {m.lower() for m in self.exclude_methods}
            or any(_path_matches(path, p) for p in self.exclude_paths)
        ):
            return False
        return (
            (not self.operation_ids or operation_id in self.operation_ids)
            and (not self.tags or bool(tag_set & self.tags))
            and (not self.methods or method in {m.lower() for m in self.methods})
            and (not self.paths or any(_path_matches(path, p) for p in self.paths))
        )


def _path_matches(path: str, pattern: str) -> bool:
    if any(c in pattern for c in "*?"):
        return re.fullmatch(_glob(pattern), path) is not None
    prefix = pattern.rstrip("/")
    return path == prefix or path.startswith(prefix + "/") or not prefix


def _glob(pattern: str) -> str:
    """``*`` and ``?`` stay within one path segment; ``**`` crosses segments."""
    parts = re.split(r"(\*\*|\*|\?)", pattern)
    table = {"**": ".*", "*": "[^/]*", "?": "[^/]"}
    return "".join(table.get(part, re.escape(part)) for part in parts)
