"""OpenAPI operations as agent tools: :class:`OpenApiToolAdapter` and :class:`OpenApiToolset`.

Each operation becomes one tool whose ``parameters`` object holds its path, query and header
parameters and, under ``body`` (``_request_body`` if a parameter is called ``body``), its JSON
request body. A call checks the arguments against that schema, fills in the path, sends the
request with the configured auth and headers, and answers ``METHOD URL -> STATUS`` and the
response text (cut at ``max_response_bytes``). A non-2xx answer is an error result carrying the
body's text; a timeout or a failed connection is an error result too. Nothing a tool returns or
raises shows a token or key (see :mod:`phi_core.tools.openapi`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import httpx
from jsonschema import Draft202012Validator

from ..errors import OpenApiError, UserError, redact
from .base import ToolContext, ToolResult
from .openapi import OpenApiConfig, OperationFilter
from .openapi_spec import Operation, parse_operations, parse_spec_text

__all__ = ["OpenApiToolAdapter", "OpenApiToolset"]

_MAX_SPEC_BYTES = 20 * 1024 * 1024


class OpenApiToolAdapter:
    """One OpenAPI operation as a tool (see the module docstring). Build them with
    :meth:`from_file`, :meth:`from_str` or :meth:`from_url`."""

    def __init__(self, operation: Operation, base_url: str, config: OpenApiConfig) -> None:
        self.operation = operation
        self.base_url = base_url
        self.config = config
        self.name = operation.tool_name(config.name_prefix)
        title = operation.summary or operation.operation_id or self.name
        text = operation.description or operation.summary
        self.description = (
            f"{title}. {operation.method.upper()} {operation.path}"
            + (f"\n\n{text}" if text and text != title else "")
        )[:2000]
        self.parameters = operation.schema()
        self._validator = Draft202012Validator(self.parameters)
        self.timeout: float | None = None  # the request's own timeout applies

    def __repr__(self) -> str:
        return f"OpenApiToolAdapter({self.name!r}, {self.operation.method.upper()} {self.operation.path})"

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_str(
        cls,
        spec: str,
        config: OpenApiConfig | None = None,
        filter: OperationFilter | None = None,
        *,
        source: str = "the OpenAPI spec",
        base_uri: str = "urn:phi-core:openapi-spec",
    ) -> list[OpenApiToolAdapter]:
        """Tools from a spec's JSON or YAML text."""
        return _adapters(parse_spec_text(spec, source), config, filter, base_uri, source)

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        config: OpenApiConfig | None = None,
        filter: OperationFilter | None = None,
    ) -> list[OpenApiToolAdapter]:
        """Tools from a spec file (``$ref``s to files next to it are followed)."""
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise OpenApiError(f"Cannot read the OpenAPI spec {str(path)!r}: {exc}") from None
        return cls.from_str(
            text, config, filter, source=str(path), base_uri=file.resolve().as_uri()
        )

    @classmethod
    async def from_url(
        cls,
        url: str,
        config: OpenApiConfig | None = None,
        filter: OperationFilter | None = None,
    ) -> list[OpenApiToolAdapter]:
        """Tools from a spec fetched from ``url`` (a relative server URL resolves against it)."""
        config = config or OpenApiConfig()
        try:
            async with (
                httpx.AsyncClient(timeout=config.timeout, follow_redirects=True) as http,
                http.stream("GET", url, headers=dict(config.headers)) as response,
            ):
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > _MAX_SPEC_BYTES:
                        raise OpenApiError(f"The OpenAPI spec at {url} is over 20 MB.")
        except httpx.HTTPError as exc:
            raise OpenApiError(
                redact(f"Cannot fetch the OpenAPI spec from {url}: {type(exc).__name__}: {exc}")
            ) from None
        if response.status_code >= 400:
            raise OpenApiError(
                f"Fetching the OpenAPI spec from {url} answered HTTP {response.status_code}; "
                "check the URL (and the headers, if the spec needs auth)."
            )
        text = bytes(body).decode(response.encoding or "utf-8", "replace")
        return cls.from_str(text, config, filter, source=url, base_uri=url)

    # ------------------------------------------------------------------ running

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        problems = sorted(self._validator.iter_errors(args), key=lambda e: list(e.path))
        if problems:
            listed = "; ".join(
                f"{'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}"
                for e in problems[:5]
            )
            return ToolResult.error(
                f"Invalid arguments for {self.name!r}: {listed}. Call it again with arguments "
                f"matching its schema: {json.dumps(self.parameters)[:1500]}"
            )
        op = self.operation
        path = op.path
        query: list[tuple[str, str | int | float | bool | None]] = []
        headers = dict(self.config.headers)
        for param in op.parameters:
            if param.arg not in args or args[param.arg] is None:
                continue
            value = args[param.arg]
            if param.location == "path":
                path = path.replace("{" + param.name + "}", _segment(_text(value)))
            elif param.location == "query":
                values = value if isinstance(value, list) else [value]
                query.extend((param.name, _text(v)) for v in values)
            else:
                headers[param.name] = _text(value)
        url = self.base_url + path
        shown = url + ("?" + str(httpx.QueryParams(query)) if query else "")
        auth = self._apply_auth(headers, query)
        body = args.get(op.body_arg) if op.body_arg else None
        method = op.method.upper()
        try:
            async with (
                httpx.AsyncClient(
                    timeout=self.config.timeout,
                    follow_redirects=True,
                    event_hooks={"request": [_same_origin_as(url)]},
                ) as http,
                http.stream(
                    method,
                    url,
                    params=query,
                    headers=headers,
                    auth=auth,
                    json=body if op.body_arg and op.body_arg in args else None,
                ) as response,
            ):
                text, cut = await _read_capped(response, self.config.max_response_bytes)
        except OpenApiError as exc:  # only the redirect hook raises it here
            return ToolResult.error(
                redact(
                    f"{method} {shown} was redirected to {exc}, another host: not "
                    f"followed, since the API's credentials and headers would go with it."
                )
            )
        except httpx.TimeoutException:
            return ToolResult.error(
                redact(f"{method} {shown} timed out after {self.config.timeout:g}s.")
            )
        except httpx.HTTPError as exc:
            return ToolResult.error(redact(f"{method} {shown} failed: {type(exc).__name__}: {exc}"))
        status = response.status_code
        if cut:
            text += (
                f"\n[truncated: the response is longer than {self.config.max_response_bytes} bytes]"
            )
        details = {"status": status, "method": method, "url": redact(shown)}
        if 200 <= status < 300:
            return ToolResult.text(
                redact(f"{method} {shown} -> {status}\n\n{text}"), details=details
            )
        reason = response.reason_phrase or ""
        return ToolResult.text(
            redact(f"{method} {shown} -> HTTP {status} {reason}".rstrip() + f"\n\n{text}"),
            is_error=True,
            details=details,
        )

    def _apply_auth(
        self, headers: dict[str, str], query: list[tuple[str, str | int | float | bool | None]]
    ) -> httpx.BasicAuth | None:
        auth = self.config.auth
        if auth is None:
            return None
        if auth.kind == "bearer":
            headers["Authorization"] = f"Bearer {auth.secret}"
        elif auth.kind == "api_key":
            assert auth.name is not None
            if auth.location == "query":
                query.append((auth.name, auth.secret))
            else:
                headers[auth.name] = auth.secret
        else:
            return httpx.BasicAuth(auth.username or "", auth.secret)
        return None


class OpenApiToolset:
    """The tools of one spec as a toolset (for ``BasicAgent``): built at once from a file or
    text, or fetched from a URL on first use."""

    def __init__(
        self,
        *,
        tools: Sequence[OpenApiToolAdapter] | None = None,
        url: str | None = None,
        config: OpenApiConfig | None = None,
        filter: OperationFilter | None = None,
        name: str = "OpenAPI",
    ) -> None:
        self.name = name
        self._tools = list(tools) if tools is not None else None
        self._url = url
        self._config = config
        self._filter = filter

    async def get_tools(self) -> list[OpenApiToolAdapter]:
        if self._tools is None:
            assert self._url is not None
            self._tools = await OpenApiToolAdapter.from_url(self._url, self._config, self._filter)
        return list(self._tools)

    def for_branch(self) -> OpenApiToolset:
        return self  # stateless: every call is its own HTTP request

    async def aclose(self) -> None:
        """Nothing to release."""


def _adapters(
    spec: dict[str, Any],
    config: OpenApiConfig | None,
    filter: OperationFilter | None,
    base_uri: str,
    source: str,
) -> list[OpenApiToolAdapter]:
    config = config or OpenApiConfig()
    chosen = filter or OperationFilter()
    if not isinstance(config, OpenApiConfig) or not isinstance(chosen, OperationFilter):
        raise UserError(
            f"OpenAPI tools take an OpenApiConfig and an OperationFilter, got {config!r} and "
            f"{chosen!r}."
        )
    operations = parse_operations(spec, base_uri)
    known = {op.operation_id for op in operations}
    missing = sorted(chosen.operation_ids - known)
    if missing:
        raise OpenApiError(
            f"{source} has no operation with id {', '.join(map(repr, missing))}; it has: "
            f"{', '.join(sorted(str(k) for k in known if k)) or 'none with an operationId'}."
        )
    picked = [
        op for op in operations if chosen.matches(op.method, op.path, op.operation_id, op.tags)
    ]
    for op in picked:
        if op.unsupported_body and op.operation_id in chosen.operation_ids:
            raise OpenApiError(
                f"Operation {op.operation_id!r} in {source} takes a {op.unsupported_body} body; "
                "only JSON request bodies are supported."
            )
    picked = [op for op in picked if not op.unsupported_body]
    if not picked:
        raise OpenApiError(
            f"No operation of {source} matches the filter {chosen!r}; "
            f"it has {len(operations)} operation(s). Loosen the filter."
        )
    base_url = config.base_url or _server_url(spec, base_uri, source)
    tools = [OpenApiToolAdapter(op, base_url, config) for op in picked]
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise OpenApiError(
            f"{source} gives several operations the tool name {duplicates[0]!r}; give them "
            "distinct operationIds or filter some out."
        )
    return tools


def _server_url(spec: dict[str, Any], base_uri: str, source: str) -> str:
    servers = spec.get("servers") or []
    server = servers[0] if servers and isinstance(servers[0], dict) else {}
    url = str(server.get("url") or "")
    for name, variable in (server.get("variables") or {}).items():
        if isinstance(variable, dict) and "default" in variable:
            url = url.replace("{" + name + "}", str(variable["default"]))
    if url and not url.startswith(("http://", "https://")) and base_uri.startswith("http"):
        url = urljoin(base_uri, url)
    if not url.startswith(("http://", "https://")):
        raise OpenApiError(
            f"{source} names no absolute server URL (servers[0].url is {url or 'missing'!r}); "
            "pass OpenApiConfig(base_url='https://...')."
        )
    return url.rstrip("/")


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def _same_origin_as(first: str) -> Any:
    """A request hook that stops a redirect away from the API's origin (scheme, host, port):
    httpx keeps custom headers across such a redirect, an API-key header included."""
    origin = _origin(httpx.URL(first))

    async def check(request: httpx.Request) -> None:
        if _origin(request.url) != origin:
            u = request.url
            raise OpenApiError(f"{u.scheme}://{u.host}" + (f":{u.port}" if u.port else ""))

    return check


def _segment(value: str) -> str:
    """A path parameter's value as one path segment: every reserved character escaped, and a
    value of dots only (``..``) escaped too, which a URL would otherwise resolve into a step
    up out of the operation's path."""
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if quoted.strip(".") == "" else quoted


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


async def _read_capped(response: httpx.Response, limit: int) -> tuple[str, bool]:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > limit:
            break
    cut = len(data) > limit
    return bytes(data[:limit]).decode(response.encoding or "utf-8", "replace"), cut
