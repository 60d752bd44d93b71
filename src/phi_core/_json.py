"""``extract_json``: the first JSON object or array in a model's reply, fenced or bare.

Models wrap JSON in prose and code fences, or answer through a ``respond_json`` tool call (how
phi-core asks Anthropic for structured output). :func:`extract_json` accepts all of these::

    data = extract_json(result)                       # a LoopResult, AssistantMessage or str
    answer = extract_json(result, schema=Answer)      # validated into a pydantic model

Search order: a ``respond_json`` tool call's arguments; the whole text as JSON; then every
position where an object or array could start, in text order (so the first fenced or bare value
wins, and a broken one is skipped). Without a schema only objects and arrays count; with one, a
whole-text scalar counts too. Bounded work: at most :data:`MAX_STARTS` start positions are tried.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar, overload

from pydantic import TypeAdapter, ValidationError

from .errors import SchemaMismatchError
from .types import AssistantMessage, TextContent

__all__ = ["MAX_STARTS", "extract_json"]

T = TypeVar("T")
MAX_STARTS = 500
JSON_TOOL = "respond_json"
_DECODER = json.JSONDecoder()


def _text_of(source: Any) -> tuple[str, Any]:
    """(text, value from a ``respond_json`` call or None) of a str, message or loop result."""
    if isinstance(source, str):
        return source, None
    message = source if isinstance(source, AssistantMessage) else None
    if message is None:
        message = getattr(source, "final_message", None)
    if isinstance(message, AssistantMessage):
        for call in message.tool_calls:
            if call.name == JSON_TOOL and call.raw_arguments is None:
                return message.text, call.arguments
        return "".join(c.text for c in message.content if isinstance(c, TextContent)), None
    if message is None and hasattr(source, "text"):
        return str(source.text), None
    raise SchemaMismatchError(
        f"extract_json reads an assistant reply (str, AssistantMessage or LoopResult), got "
        f"{type(source).__name__}.",
        reason="not an assistant reply",
    )


def _find(text: str, *, scalars: bool) -> Any:
    stripped = text.strip()
    try:
        whole = json.loads(stripped)
    except (ValueError, RecursionError):
        pass
    else:
        if scalars or isinstance(whole, dict | list):
            return whole
    tried = 0
    for index, char in enumerate(text):
        if char not in "{[":
            continue
        tried += 1
        if tried > MAX_STARTS:
            break
        try:
            value, _end = _DECODER.raw_decode(text, index)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict | list):
            return value
    raise LookupError


def _snippet(text: str) -> str:
    return repr(text[:160] + ("…" if len(text) > 160 else ""))


@overload
def extract_json(source: Any) -> Any: ...


@overload
def extract_json(source: Any, schema: type[T]) -> T: ...


@overload
def extract_json(source: Any, schema: dict[str, Any]) -> Any: ...


def extract_json(source: Any, schema: Any = None) -> Any:
    """The first JSON object/array in ``source`` (see the module docstring).

    ``schema`` is a type pydantic can validate (a model, ``list[int]``, a ``TypedDict`` …) or a
    JSON Schema dict. Raises :class:`~phi_core.errors.SchemaMismatchError` when no JSON is found
    or it does not match, with the reason and the start of the text.
    """
    text, value = _text_of(source)
    if value is None:
        try:
            value = _find(text, scalars=schema is not None)
        except LookupError:
            raise SchemaMismatchError(
                f"The reply is not valid JSON and contains no JSON object or array: "
                f"{_snippet(text)}. Ask for JSON (a ResponseFormat) or check the model's output.",
                reason="not valid JSON",
            ) from None
    if schema is None:
        return value
    if isinstance(schema, dict):
        import jsonschema

        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as exc:
            raise SchemaMismatchError(
                f"The reply's JSON does not match the schema: {exc.message} (at "
                f"{'/'.join(map(str, exc.absolute_path)) or 'the top level'}).",
                reason="schema mismatch",
            ) from None
        return value
    try:
        return TypeAdapter(schema).validate_python(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(value)'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise SchemaMismatchError(
            f"The reply's JSON does not match {getattr(schema, '__name__', schema)!s}: {problems}.",
            reason="schema mismatch",
        ) from None
