"""What a race runs, as the command line describes it: branch specs and race config files.

A branch is named on the command line as ``provider:model`` with optional settings after an
``@``: ``openai:gpt-4o-mini@temperature=0.2,max_tokens=200``. A bare name (``-m precise``) refers
to a branch of the ``--config`` file. A config file (TOML, YAML or JSON) describes the whole race::

    strategy = "judge"
    max_tokens = 200

    [judge]
    model = "local:smollm2"

    [[branches]]
    name = "precise"
    model = "local:smollm2"
    system = "Answer precisely and briefly."
    temperature = 0.2

Every mistake in a file raises :class:`~phi_core.errors.ConfigError` naming the file, the line and
the key (``branches[1].temperature``) and saying what was expected.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError, UserError
from ..providers.registry import split_model_settings
from ..types import ThinkingLevel

__all__ = [
    "DEFAULT_BRANCHES",
    "DEFAULT_JUDGE",
    "BranchSpec",
    "RaceFile",
    "load_race_file",
    "parse_branch",
    "select_branches",
]

ConfigFormat = Literal["toml", "yaml", "json"]


class BranchSpec(BaseModel):
    """One configuration to run: a model plus the settings that make it different."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    model: str = Field(min_length=3)
    system: str | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    thinking: ThinkingLevel | None = None

    @property
    def label(self) -> str:
        """The branch's display name: its own name, else the model with its settings."""
        if self.name:
            return self.name
        settings = [
            f"{key}={value}"
            for key, value in self.model_dump(exclude={"name", "model", "system"}).items()
            if value is not None
        ]
        return self.model + (f"@{','.join(settings)}" if settings else "")


class RaceFile(BaseModel):
    """The contents of a ``--config`` file."""

    model_config = ConfigDict(extra="forbid")

    strategy: str | None = None
    judge: BranchSpec | None = None
    system: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    timeout: float | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, ge=1)
    branches: list[BranchSpec] = Field(default_factory=list)


# Three configurations of the embedded model that differ in system prompt and temperature, so the
# keyless default race compares configurations rather than three samples of one.
DEFAULT_BRANCHES: tuple[BranchSpec, ...] = (
    BranchSpec(
        name="precise",
        model="local:smollm2",
        system="You are a precise assistant. Answer accurately in a few clear sentences.",
        temperature=0.2,
    ),
    BranchSpec(
        name="teacher",
        model="local:smollm2",
        system="You are a patient teacher. Explain simply, with one concrete example.",
        temperature=0.7,
    ),
    BranchSpec(
        name="storyteller",
        model="local:smollm2",
        system="You are a vivid writer. Explain with an everyday analogy.",
        temperature=1.0,
    ),
)
DEFAULT_JUDGE = BranchSpec(name="judge", model="local:smollm2", temperature=0.0)

_SETTING_KEYS = ("name", "system", "temperature", "top_p", "seed", "max_tokens", "thinking")


def parse_branch(text: str, named: Sequence[BranchSpec] = ()) -> BranchSpec:
    """``provider:model[@key=value,...]`` or the name of a branch from the config file."""
    text = text.strip()
    if not text:
        raise UserError("An empty model was given to -m/--model; write `provider:model`.")
    for branch in named:
        if branch.name == text:
            return branch
    model, settings = split_model_settings(text)
    if ":" not in model:
        names = [b.name for b in named if b.name]
        known = f" The config file names: {', '.join(names)}." if names else ""
        raise UserError(
            f"Model {text!r} is neither `provider:model` (for example `local:smollm2` or "
            f"`openai:gpt-4o-mini@temperature=0.2`) nor a branch named in --config.{known}"
        )
    fields: dict[str, Any] = {"model": model}
    for key, value in settings.items():
        if key not in _SETTING_KEYS:
            raise UserError(
                f"Unknown setting {key!r} in model {text!r}; "
                f"use one of: {', '.join(_SETTING_KEYS)}."
            )
        fields[key] = value
    try:
        return BranchSpec.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise UserError(f"Bad setting `{key}` in model {text!r}: {first['msg']}.") from exc


def select_branches(models: Sequence[str], race_file: RaceFile | None) -> list[BranchSpec]:
    """The branches to race: ``-m`` values, else the config file's branches, else the default."""
    named = race_file.branches if race_file else []
    if models:
        return [parse_branch(m, named) for m in models]
    if named:
        return list(named)
    return [b.model_copy() for b in DEFAULT_BRANCHES]


# --------------------------------------------------------------------------- config files


def load_race_file(path: str | Path) -> RaceFile:
    """Read and validate a race config file; raise :class:`ConfigError` with file, line and key."""
    path = Path(path)
    shown = str(path)
    fmt = _format_of(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError("the config file does not exist.", file=shown) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the config file ({exc}).", file=shown) from exc
    data = _parse(text, fmt, shown)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"the top level must be a table of settings, got {type(data).__name__}.",
            file=shown,
            line=1,
        )
    try:
        return RaceFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        # A judge given as a bare string: accept `judge = "local:smollm2"`.
        if loc and loc[0] == "judge" and isinstance(data.get("judge"), str):
            fixed = dict(data)
            fixed["judge"] = {"model": data["judge"]}
            try:
                return RaceFile.model_validate(fixed)
            except ValidationError as again:
                exc, first = again, again.errors()[0]
                loc = tuple(first["loc"])
        key = _key_path(loc)
        line = _locate(text, fmt, loc)
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            allowed = _allowed_keys(loc)
            message = f"unknown key; expected one of: {', '.join(allowed)}"
        elif "input" in first and not isinstance(first["input"], dict | list):
            message = f"{message}, got {first['input']!r}"
        raise ConfigError(message + ".", file=shown, line=line, key=key) from exc


def _format_of(path: Path) -> ConfigFormat:
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return "toml"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix == ".json":
        return "json"
    raise ConfigError(
        f"unknown config format {suffix or '(no extension)'!r}; use .toml, .yaml/.yml or .json.",
        file=str(path),
    )


def _parse(text: str, fmt: ConfigFormat, shown: str) -> Any:
    if fmt == "toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            match = re.search(r"\(at line (\d+)", str(exc))
            line = int(match.group(1)) if match else None
            raise ConfigError(f"invalid TOML: {exc}.", file=shown, line=line) from exc
    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"invalid JSON: {exc.msg}.", file=shown, line=exc.lineno) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"invalid YAML: {problem}.", file=shown, line=line) from exc


def _key_path(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _allowed_keys(loc: Sequence[Any]) -> list[str]:
    model: type[BaseModel] = BranchSpec if len(loc) > 1 else RaceFile
    return list(model.model_fields)


def _locate(text: str, fmt: ConfigFormat, loc: Sequence[Any]) -> int | None:
    """The 1-based line of the key at ``loc`` (or of its closest existing parent)."""
    if fmt in ("yaml", "json"):
        try:
            node = yaml.compose(text)
        except yaml.YAMLError:
            node = None
        if node is not None:
            return _locate_node(node, loc)
    return _locate_text(text, loc)


def _locate_node(node: Any, loc: Sequence[Any]) -> int:
    line: int = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key, value in node.value:
                if key.value == part:
                    line, node = key.start_mark.line + 1, value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _locate_text(text: str, loc: Sequence[Any]) -> int | None:
    """TOML: walk ``[[array]]`` headers for indices and ``key =`` lines for keys."""
    lines = text.splitlines()
    # Top-level keys must come before the first table header.
    start = 0
    end = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("[")), len(lines))
    found: int | None = None
    parent = ""
    for part in loc:
        if isinstance(part, int):
            header = re.compile(rf"^\s*\[\[\s*{re.escape(parent)}\s*\]\]")
            hits = [i for i in range(start, len(lines)) if header.match(lines[i])]
            if part >= len(hits):
                return found
            start = hits[part] + 1
            found = start
            end = next(
                (i for i in range(start, len(lines)) if lines[i].lstrip().startswith("[")),
                len(lines),
            )
            continue
        assignment = re.compile(rf"^\s*\"?{re.escape(part)}\"?\s*=")
        table = re.compile(rf"^\s*\[\s*(?:[\w.]+\.)?{re.escape(part)}\s*\]")
        hit = next((i for i in range(start, end) if assignment.match(lines[i])), None)
        if hit is None:
            hit = next((i for i in range(start, len(lines)) if table.match(lines[i])), None)
            if hit is not None:
                start = hit + 1
                end = next(
                    (i for i in range(start, len(lines)) if lines[i].lstrip().startswith("[")),
                    len(lines),
                )
        if hit is None:
            # An array of tables names no `key =` line; its first header stands for it.
            array = re.compile(rf"^\s*\[\[\s*{re.escape(part)}\s*\]\]")
            hit = next((i for i in range(len(lines)) if array.match(lines[i])), None)
            if hit is None:
                return found
            start, end = 0, len(lines)
        found = hit + 1
        parent = part
    return found
