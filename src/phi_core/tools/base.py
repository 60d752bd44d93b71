"""The tool contract, tool results, and the ``@tool`` decorator.

A tool is any object with ``name``, ``description``, ``parameters`` (a JSON schema), an optional
``timeout``, an optional ``needs_approval`` (true, or a callable giving the reason for some
arguments) and an async ``execute(args, ctx)``. :func:`tool` turns a plain function (sync or
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
from ..context.limits import LimitsLeft
from ..errors import ToolError, UserError
from ..events import Emitter
from ..types import AgentMessage, Content, TextContent, ToolDefinition, Usage
from ._approval import ApprovalDecision, ApprovalRequest, Approver, ask_approval

__all__ = [
    "TOOL_NAME",
    "AgentTool",
    "FunctionTool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "tool",
    "validate_arguments",
]

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""The tool names every provider accepts (OpenAI's and Anthropic's pattern)."""


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
    """What a running tool can use: its call id, a cancel token, progress callbacks, approval.

    ``messages`` is the conversation so far (read-only; the assistant message that made this
    call is last). ``emitter`` is the run's event emitter: a tool that runs a loop of its own (a
    sub-agent) passes it as ``events=`` so the child's events reach the caller's sink.
    ``approver`` answers :meth:`request_approval`; ``arguments`` are the call's arguments.
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
    approver: Approver | None = field(default=None, repr=False)
    arguments: dict[str, Any] = field(default_factory=dict, repr=False)
    limits_left: LimitsLeft | None = field(default=None, repr=False)
    """What the calling run's :class:`~phi_core.context.ExecutionLimits` have left when the
    call started (``None``: the run has no limits); a sub-agent runs within it."""

    async def request_approval(
        self, reason: str, arguments: dict[str, Any] | None = None
    ) -> ApprovalDecision:
        """Ask the run's approver to allow this call (refused when there is no approver)."""
        request = ApprovalRequest(
            tool_name=self.tool_name,
            arguments=dict(self.arguments if arguments is None else arguments),
            reason=reason,
            tool_call_id=self.tool_call_id,
            loop_id=self.loop_id,
        )
        return await ask_approval(self.approver, request)

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


def validate_arguments(
    model: type[BaseModel], args: dict[str, Any], name: str, schema: dict[str, Any]
) -> BaseModel | ToolResult:
    """``args`` checked against ``model``; an error result for the model when they do not fit."""
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
            for err in exc.errors()
        )
        return ToolResult.error(
            f"Invalid arguments for tool {name!r}: {problems}. "
            f"Expected arguments matching this schema: {json.dumps(schema)}"
        )


class FunctionTool:
    """A tool made from a Python function by :func:`tool`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        needs_approval: bool | Callable[[dict[str, Any]], str | None] = False,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        if not TOOL_NAME.match(self.name):
            raise UserError(
                f"The tool name {self.name!r} is not accepted by model providers: use 1 to 64 "
                "letters, digits, `_` or `-` (pass name=... to @tool)."
            )
        summary, arg_docs = _parse_docstring(fn.__doc__)
        self.description = description if description is not None else summary
        self.timeout = timeout
        self.needs_approval = needs_approval
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
        validated = validate_arguments(self._model, args, self.name, self.parameters)
        if isinstance(validated, ToolResult):
            return validated
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
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    needs_approval: bool | Callable[[dict[str, Any]], str | None] = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    needs_approval: bool | Callable[[dict[str, Any]], str | None] = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool from a function: ``@tool`` or ``@tool(name=..., timeout=...)``.

    A parameter annotated :class:`ToolContext` receives the call's context and is not part of the
    schema. Sync functions run in a worker thread so they never block the event loop.
    ``needs_approval=True`` makes every call wait for the run's approver; a callable gets the
    arguments and returns the reason approval is needed (or None when it is not).
    """
    if fn is not None:
        return FunctionTool(fn)

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f, name=name, description=description, timeout=timeout, needs_approval=needs_approval
        )

    return wrap
