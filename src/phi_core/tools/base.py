"""The tool contract, tool results, and the ``@tool`` decorator.

A tool is any object with ``name``, ``description``, ``parameters`` (a JSON schema), an optional
``timeout`` and an async ``execute(args, ctx)``. :func:`tool` turns a plain function (sync or
async) into one: the schema comes from the type hints and the docstring, and arguments are
validated before the function runs, so invalid arguments go back to the model as an error result.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, get_type_hints, overload, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..cancel import CancelToken
from ..errors import ToolError
from ..events import Emitter
from ..types import AgentMessage, Content, ImageContent, TextContent, ToolDefinition, Usage

__all__ = [
    "AgentTool",
    "FunctionTool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "to_tool_result",
    "tool",
]


@dataclass
class ToolResult:
    content: list[Content]
    is_error: bool = False
    details: Any = None

    @classmethod
    def text(cls, text: str, *, is_error: bool = False, details: Any = None) -> ToolResult:
        return cls([TextContent(text=text)], is_error=is_error, details=details)

    @classmethod
    def error(cls, text: str) -> ToolResult:
        return cls.text(text, is_error=True)


@dataclass
class ToolContext:
    """What a running tool can use: its call id, a cancel token, and progress callbacks.

    ``messages`` is the conversation so far (read-only; the assistant message that made this
    call is last). ``emitter`` is the run's event emitter: a tool that runs a loop of its own (a
    sub-agent) passes it as ``events=`` so the child's events reach the caller's sink.
    """

    tool_call_id: str
    tool_name: str
    loop_id: str
    cancel: CancelToken
    _on_update: Callable[[str], None] = field(default=lambda _t: None, repr=False)
    _on_progress: Callable[[str], None] = field(default=lambda _t: None, repr=False)
    messages: Sequence[AgentMessage] = field(default=(), repr=False)
    emitter: Emitter | None = field(default=None, repr=False)
    _on_usage: Callable[[Usage, float], None] = field(default=lambda _u, _c: None, repr=False)

    def update(self, text: str) -> None:
        """Stream partial output (a ``ToolExecutionUpdate`` event); UI only."""
        self._on_update(text)

    def progress(self, text: str) -> None:
        """A short human-readable status line (a ``ProgressMessage`` event)."""
        self._on_progress(text)

    def add_usage(self, usage: Usage, cost_usd: float = 0.0) -> None:
        """Count model usage this tool caused (a sub-agent's) in the calling run's totals."""
        self._on_usage(usage, cost_usd)


@runtime_checkable
class AgentTool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Run the tool; return a ToolResult, str, content list or JSON-serialisable data."""
        ...


def tool_timeout(agent_tool: Any) -> float | None:
    timeout = getattr(agent_tool, "timeout", None)
    return float(timeout) if timeout is not None else None


def definition_of(agent_tool: AgentTool) -> ToolDefinition:
    return ToolDefinition(
        name=agent_tool.name,
        description=agent_tool.description,
        parameters=agent_tool.parameters,
    )


def to_tool_result(value: Any) -> ToolResult:
    """Normalise whatever a tool returned into a ToolResult (error result if it cannot be sent)."""
    if isinstance(value, ToolResult):
        return value
    if value is None:
        return ToolResult.text("")
    if isinstance(value, str):
        return ToolResult.text(value)
    if isinstance(value, TextContent | ImageContent):
        return ToolResult([value])
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, TextContent | ImageContent) for v in value)
    ):
        return ToolResult(list(value))
    if isinstance(value, BaseModel):
        return ToolResult.text(value.model_dump_json(), details=value)
    try:
        return ToolResult.text(json.dumps(value, ensure_ascii=False), details=value)
    except (TypeError, ValueError) as exc:
        return ToolResult.error(
            f"The tool returned a value of type {type(value).__name__} that cannot be sent to the "
            f"model ({exc}). Return a str, a ToolResult or JSON-serialisable data."
        )


# --------------------------------------------------------------------------- @tool


_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Summary and per-argument descriptions from a Google- or Sphinx-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        sphinx = re.match(r":param\s+(\w+)\s*:\s*(.*)", stripped)
        if sphinx:
            params[sphinx.group(1)] = sphinx.group(2)
            current = sphinx.group(1)
            section = "sphinx"
            continue
        if stripped.lower() in {"args:", "arguments:", "parameters:", "params:"}:
            section, current = "args", None
            continue
        if stripped.lower().rstrip(":") in {
            "returns",
            "return",
            "raises",
            "yields",
            "example",
            "examples",
        }:
            section, current = "other", None
            continue
        if section == "args":
            match = _ARG_LINE.match(line)
            if match and (line.startswith((" ", "\t")) or not summary_lines):
                current = match.group(1).lstrip("*")
                params[current] = match.group(2).strip()
            elif current and stripped:
                params[current] += " " + stripped
            continue
        if section is None:
            summary_lines.append(line)
    summary = " ".join(s.strip() for s in summary_lines if s.strip())
    return summary, params


class FunctionTool:
    """A tool made from a Python function by :func:`tool`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        summary, arg_docs = _parse_docstring(fn.__doc__)
        self.description = description if description is not None else summary
        self.timeout = timeout
        self._is_async = inspect.iscoroutinefunction(fn)
        self._context_param: str | None = None
        hints = get_type_hints(fn)
        fields: dict[str, Any] = {}
        for pname, param in inspect.signature(fn).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            annotation = hints.get(pname, Any)
            if annotation is ToolContext:
                self._context_param = pname
                continue
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[pname] = (annotation, default)
        self._model: type[BaseModel] = create_model(
            f"{self.name}_args",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        schema = self._model.model_json_schema()
        schema.pop("title", None)
        for pname, prop in schema.get("properties", {}).items():
            prop.pop("title", None)
            if pname in arg_docs:
                prop["description"] = arg_docs[pname]
        schema.setdefault("properties", {})
        schema["additionalProperties"] = False
        self.parameters: dict[str, Any] = schema

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        try:
            validated = self._model.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
                for err in exc.errors()
            )
            return ToolResult.error(
                f"Invalid arguments for tool {self.name!r}: {problems}. "
                f"Expected arguments matching this schema: {json.dumps(self.parameters)}"
            )
        kwargs = {k: getattr(validated, k) for k in type(validated).model_fields}
        if self._context_param:
            kwargs[self._context_param] = ctx
        if self._is_async:
            return await self.fn(**kwargs)
        return await asyncio.to_thread(self.fn, **kwargs)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (handy in tests)."""
        result = self.fn(*args, **kwargs)
        if isinstance(result, Awaitable):
            return await result
        return result

    def __repr__(self) -> str:
        return f"FunctionTool(name={self.name!r})"


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, timeout: float | None = None
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool from a function: ``@tool`` or ``@tool(name=..., timeout=...)``.

    A parameter annotated :class:`ToolContext` receives the call's context and is not part of the
    schema. Sync functions run in a worker thread so they never block the event loop.
    """
    if fn is not None:
        return FunctionTool(fn)

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, timeout=timeout)

    return wrap
