"""Tools checked before a run starts: what the providers would reject is a :class:`UserError` now.

A tool needs a name matching ``^[a-zA-Z0-9_-]{1,64}$`` (the vendors' pattern), unique within the
run, an ``execute`` method, a text description, and ``parameters`` that are strict JSON (no
``NaN``), valid against the JSON Schema meta-schema (the draft its ``$schema`` names, else
2020-12) and describe an object, since every vendor passes arguments as a JSON object.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

from ..errors import UserError
from ..types import ToolDefinition, lone_surrogate
from .base import TOOL_NAME

__all__ = ["check_tools"]

_CHECKED: dict[str, None] = {}  # schemas already found valid (as JSON text)
_MAX_CACHED = 1024


def _check_schema(where: str, parameters: Any) -> None:
    if not isinstance(parameters, dict):
        raise UserError(
            f"{where}: `parameters` must be a JSON schema object (a dict), got "
            f"{type(parameters).__name__}."
        )
    try:
        text = json.dumps(parameters, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{where}: `parameters` is not strict JSON ({exc}).") from None
    if text in _CHECKED:
        return
    validator = jsonschema.validators.validator_for(
        parameters, default=jsonschema.Draft202012Validator
    )
    try:
        validator.check_schema(parameters)
    except SchemaError as exc:
        path = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise UserError(
            f"{where}: `parameters` is not a valid JSON Schema: at {path}: {exc.message}."
        ) from None
    kind = parameters.get("type", "object")
    if kind != "object":
        raise UserError(
            f'{where}: `parameters` must describe an object (`"type": "object"`), got '
            f"type {kind!r}; providers pass tool arguments as a JSON object."
        )
    if len(_CHECKED) >= _MAX_CACHED:
        _CHECKED.clear()
    _CHECKED[text] = None


def check_tools(
    tools: Sequence[Any],
    caller_tools: Sequence[ToolDefinition] = (),
    *,
    caller_label: str = "caller_tools",
) -> list[ToolDefinition]:
    """The definitions sent to the model, after checking every tool; raises :class:`UserError`.

    ``caller_tools`` are definitions of tools the caller executes (no ``execute`` method); they
    follow ``tools`` and their names must differ from every other tool's. Errors name them
    ``caller_label[i]`` (the gateway's clients know them as ``tools[i]``).
    """
    seen: dict[str, int] = {}
    definitions: list[ToolDefinition] = []
    every = [(t, "tools", i) for i, t in enumerate(tools)]
    every += [(t, caller_label, i) for i, t in enumerate(caller_tools)]
    for i, entry in enumerate(every):
        agent_tool = entry[0]
        name = getattr(agent_tool, "name", None)
        where = _where(entry) + (f" ({name!r})" if isinstance(name, str) else "")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise UserError(
                f"{where}: the tool name {name!r} is not accepted by model providers: use 1 to "
                "64 letters, digits, `_` or `-`."
            )
        if name in seen:
            raise UserError(
                f"Two tools are named {name!r} ({_where(every[seen[name]])} and {_where(entry)}); tool "
                "names must be unique within a run. Rename one of them."
            )
        seen[name] = i
        if i < len(tools) and not callable(getattr(agent_tool, "execute", None)):
            raise UserError(f"{where}: a tool needs an async `execute(args, ctx)` method.")
        description = getattr(agent_tool, "description", "")
        if description is None:
            description = ""
        if not isinstance(description, str):
            raise UserError(
                f"{where}: `description` must be a string, got {type(description).__name__}."
            )
        if lone_surrogate(description) is not None:
            raise UserError(
                f"{where}: the description contains invalid Unicode (a lone surrogate)."
            )
        timeout = getattr(agent_tool, "timeout", None)
        if timeout is not None and (
            not isinstance(timeout, int | float)
            or isinstance(timeout, bool)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise UserError(
                f"{where}: `timeout` must be a positive number of seconds or None, got {timeout!r}."
            )
        parameters = getattr(agent_tool, "parameters", None)
        _check_schema(where, parameters)
        definitions.append(
            ToolDefinition(name=name, description=description, parameters=parameters)
        )
    return definitions


def _where(entry: tuple[Any, str, int]) -> str:
    _tool, kind, position = entry
    return f"{kind}[{position}]"
