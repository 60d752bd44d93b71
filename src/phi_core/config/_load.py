"""From text or a file to an :class:`AgentConfig`, with located errors."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from ._schema import AgentConfig
from ._source import ConfigFormat, ConfigSource, format_of, substitute_env

__all__ = ["load_config", "parse_config", "parse_config_auto"]


def load_config(
    path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None
) -> AgentConfig:
    """Read a ``.toml``, ``.json``, ``.yaml`` or ``.yml`` config file.

    Relative paths inside it (workspaces, ``file:`` prompts, skills, stores) resolve against the
    file's directory.
    """
    file = Path(path)
    fmt = format_of(file)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror}.", file=str(file)) from None
    return parse_config(text, fmt, file=str(file), base_dir=file.parent, env=env)


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
    data = source.parse()
    try:
        config = AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise _located(exc, source) from None
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


def _located(exc: ValidationError, source: ConfigSource) -> ConfigError:
    error = exc.errors()[0]
    path = tuple(p for p in error["loc"] if isinstance(p, str | int))
    kind = error["type"]
    if kind == "extra_forbidden":
        parent_path, key = path[:-1], str(path[-1])
        allowed = _allowed_keys(parent_path)
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        listing = ", ".join(allowed)
        return source.error(f"unknown key {key!r}.{hint} Expected one of: {listing}.", path)
    if kind == "missing":
        return source.error("this key is required.", path)
    value = error.get("input")
    shown = f" (got {value!r})" if not isinstance(value, dict | list) else ""
    return source.error(f"{error['msg']}{shown}.", path)


def _allowed_keys(path: tuple[str | int, ...]) -> list[str]:
    model: type[BaseModel] | None = AgentConfig
    for part in path:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return []
        model = _model_of(field.annotation)
    return sorted(model.model_fields) if model is not None else []


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None
