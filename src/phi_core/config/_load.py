"""From text or a file to a validated config (agent configs, race files, select specs), with
located errors: every reader goes through :func:`read_source` and :func:`validate`."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from ._schema import AgentConfig
from ._source import ConfigFormat, ConfigSource, format_of, substitute_env

__all__ = ["load_config", "parse_config", "parse_config_auto", "read_source", "validate"]

M = TypeVar("M", bound=BaseModel)


def load_config(
    path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None
) -> AgentConfig:
    """Read a ``.toml``, ``.json``, ``.yaml`` or ``.yml`` config file.

    Relative paths inside it (workspaces, ``file:`` prompts, skills, stores) resolve against the
    file's directory.
    """
    source = read_source(path, env=env)
    return _agent_config(source)


def read_source(
    path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None
) -> ConfigSource:
    """The text of a ``.toml``/``.json``/``.yaml``/``.yml`` file with ``${VAR}`` substituted;
    relative paths in it resolve against the file's directory."""
    file = Path(path)
    fmt = format_of(file)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("the file does not exist.", file=str(file)) from None
    except IsADirectoryError:
        raise ConfigError("this is a directory, not a config file.", file=str(file)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror}.", file=str(file)) from None
    except UnicodeDecodeError:
        raise ConfigError("the file is not UTF-8 text.", file=str(file)) from None
    return ConfigSource(
        text=substitute_env(text, env, file=str(file)),
        fmt=fmt,
        file=str(file),
        base_dir=file.parent,
    )


def validate(model: type[M], data: object, source: ConfigSource) -> M:
    """``model`` validated from ``data``; the first problem becomes a :class:`ConfigError` with
    the file, line and key path (and the allowed keys for an unknown one)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _located(exc, source, model, data) from None


def parse_config(
    text: str,
    fmt: ConfigFormat,
    *,
    file: str | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> AgentConfig:
    """Parse config ``text`` in format ``fmt`` (``toml``, ``json`` or ``yaml``)."""
    if fmt not in ("toml", "json", "yaml"):
        raise ConfigError(f"unknown config format {fmt!r}; use 'toml', 'json' or 'yaml'.")
    substituted = substitute_env(text, env, file=file)
    source = ConfigSource(
        text=substituted,
        fmt=fmt,
        file=file,
        base_dir=Path(base_dir) if base_dir is not None else Path.cwd(),
    )
    return _agent_config(source)


def _agent_config(source: ConfigSource) -> AgentConfig:
    config = validate(AgentConfig, source.parse(), source)
    config._source = source
    return config


def parse_config_auto(text: str, **kwargs: Any) -> AgentConfig:
    """Try TOML, then JSON, then YAML; the first that parses wins."""
    errors = []
    formats: tuple[ConfigFormat, ...] = ("toml", "json", "yaml")
    for fmt in formats:
        try:
            return parse_config(text, fmt, **kwargs)
        except ConfigError as exc:
            errors.append(f"{fmt}: {exc.detail}")
    raise ConfigError(
        "the text is not a valid TOML, JSON or YAML config (" + "; ".join(errors) + ")"
    )


def _located(
    exc: ValidationError, source: ConfigSource, root: type[BaseModel], data: object = None
) -> ConfigError:
    errors = exc.errors()
    # A misspelt key also leaves its real key missing: report the misspelling, which explains both.
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    path = _as_written(tuple(p for p in error["loc"] if isinstance(p, str | int)), data)
    kind = error["type"]
    if kind == "extra_forbidden":
        parent_path, key = path[:-1], str(path[-1])
        owner = _model_at(root, parent_path)
        allowed = sorted(owner.model_fields) if owner is not None else []
        field = _field_named(owner, key) if owner is not None else None
        if field is not None:  # an alias given next to its field's own name
            return source.error(
                f"{key!r} is another name for {field!r}; give only one of them.", path
            )
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        listing = ", ".join(allowed)
        return source.error(f"unknown key {key!r}.{hint} Expected one of: {listing}.", path)
    if kind == "missing":
        return source.error("this key is required.", path)
    message = str(error["msg"]).removeprefix("Value error, ").rstrip(".")
    if kind == "value_error":  # a validator's own message says what was wrong and what to do
        return source.error(f"{message}.", path)
    value = error.get("input")
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected", "")))
        return source.error(
            f"invalid value {value!r}; expected one of: {', '.join(choices)}.", path
        )
    shown = f" (got {value!r})" if not isinstance(value, dict | list) else ""
    table = _model_at(root, path) if kind == "model_type" else None
    if table is not None:  # a number or a string where a table belongs
        keys = ", ".join(sorted(table.model_fields))
        return source.error(f"expected a table with the keys {keys}{shown}.", path)
    return source.error(f"{message}{shown}.", path)


_ABSENT = object()


def _as_written(path: tuple[str | int, ...], data: object) -> tuple[str | int, ...]:
    """``path`` without the names pydantic gives the members of a union (``cache.bool`` for
    ``cache = 5`` where ``cache: bool | str``): the key path as the file writes it. A part that
    is not in the data is kept only as the last one (a missing or unknown key)."""
    written: list[str | int] = []
    node = data
    for number, part in enumerate(path):
        last = number == len(path) - 1
        child: object = _ABSENT
        if isinstance(node, dict):
            child = node.get(part, _ABSENT)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            child = node[part]
        if child is not _ABSENT:
            node = child
        elif isinstance(node, dict) and last:
            pass  # the key the error is about: missing, or not one the table allows
        else:
            continue  # a union member's name, not a key of the file
        written.append(part)
    return tuple(written) if written else path


def _model_at(root: type[BaseModel], path: tuple[str | int, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = root
    for part in path:
        if isinstance(part, int):
            continue
        field = _field(model, part) if model is not None else None
        if field is None:
            return None
        model = _model_of(model.model_fields[field].annotation) if model is not None else None
    return model


def _field(model: type[BaseModel], key: str) -> str | None:
    """The field ``key`` names in ``model``: its own name or one of its aliases."""
    return key if key in model.model_fields else _field_named(model, key)


def _field_named(model: type[BaseModel], alias: str) -> str | None:
    for name, info in model.model_fields.items():
        choices = getattr(info.validation_alias, "choices", None) or ()
        if alias != name and alias in choices:
            return name
    return None


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None
