"""Scripted replies for the hidden ``--script FILE`` option (tests and demos without a model).

The file is JSON: a map from ``scripted:NAME`` model strings to the turns that model plays, in
order. A turn is a string (the reply), ``{"text": ..., "chunks": 3, "delay": 0.1, "usage":
{"input": 10, "output": 5}}`` (add ``"tool_calls": [{"name": ..., "arguments": {...}}]`` for
a turn that calls tools), ``{"fail": "auth", "message": ...}`` (a classified provider error)
or ``{"hang": "partial text"}`` (stream that and wait until cancelled). A model's value may also be
``{"turns": [...], "default": ...}`` where ``default`` answers once the turns run out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import errors
from ..errors import ConfigError
from ..testing import Fail, Hang, Reply, ScriptedProvider, ScriptItem, call
from ..types import Usage

__all__ = ["load_scripts", "scripted_providers"]

_FAILURES: dict[str, type[errors.ProviderError]] = {
    "auth": errors.AuthError,
    "rate_limited": errors.RateLimitedError,
    "overloaded": errors.OverloadedError,
    "server": errors.ServerError,
    "network": errors.NetworkError,
    "context_overflow": errors.ContextOverflowError,
    "bad_request": errors.BadRequestError,
}


def load_scripts(path: str | Path) -> dict[str, ScriptedProvider]:
    """One :class:`ScriptedProvider` per model named in the script file."""
    shown = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the script file ({exc}).", file=shown) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON: {exc.msg}.", file=shown, line=exc.lineno) from exc
    if not isinstance(data, dict):
        raise ConfigError("the script must map `scripted:NAME` models to turns.", file=shown)
    providers: dict[str, ScriptedProvider] = {}
    for model, value in data.items():
        turns, default = (
            (value.get("turns", []), value.get("default"))
            if isinstance(value, dict)
            else (value, None)
        )
        if not isinstance(turns, list):
            raise ConfigError("expected a list of turns.", file=shown, key=model)
        items = [_item(turn, shown, f"{model}[{i}]") for i, turn in enumerate(turns)]
        providers[model] = ScriptedProvider(
            items,
            name=model,
            default=_item(default, shown, f"{model}.default") if default is not None else None,
        )
    return providers


def scripted_providers(path: str | Path | None) -> dict[str, ScriptedProvider]:
    """:func:`load_scripts` of the hidden ``--script`` option (``{}`` when it is not given)."""
    return load_scripts(path) if path is not None else {}


def _item(turn: Any, file: str, key: str) -> ScriptItem:
    if isinstance(turn, str):
        return Reply(turn)
    if not isinstance(turn, dict):
        raise ConfigError("a turn is a string or an object.", file=file, key=key)
    if "fail" in turn:
        kind = _FAILURES.get(turn["fail"])
        if kind is None:
            raise ConfigError(
                f"unknown failure {turn['fail']!r}; use one of: {', '.join(_FAILURES)}.",
                file=file,
                key=key,
            )
        message = str(turn.get("message", f"scripted {turn['fail']} failure"))
        return Fail(kind(message, status=turn.get("status")), partial_text=turn.get("partial", ""))
    if "hang" in turn:
        return Hang(partial_text=str(turn["hang"]))
    usage = turn.get("usage")
    calls = turn.get("tool_calls") or []
    if not isinstance(calls, list) or not all(isinstance(c, dict) and "name" in c for c in calls):
        raise ConfigError(
            'tool_calls must be a list of {"name": ..., "arguments": {...}} objects.',
            file=file,
            key=key,
        )
    return Reply(
        str(turn.get("text", "")),
        tool_calls=[call(str(c["name"]), c.get("arguments") or {}) for c in calls],
        chunks=int(turn.get("chunks", 1)),
        delay=float(turn.get("delay", 0.0)),
        delta_delay=float(turn.get("delta_delay", 0.0)),
        usage=Usage.model_validate(usage) if usage else None,
    )
