"""Reading a config file: ``${VAR}`` substitution, TOML/JSON/YAML parsing, and finding the line
of a key path so that every error can say file, line, key and what was expected."""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import ConfigError

__all__ = ["ConfigFormat", "ConfigSource", "format_of", "key_path", "substitute_env"]

ConfigFormat = Literal["toml", "json", "yaml"]

_EXTENSIONS: dict[str, ConfigFormat] = {
    ".toml": "toml",
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def format_of(path: str | os.PathLike[str]) -> ConfigFormat:
    suffix = Path(path).suffix.lower()
    fmt = _EXTENSIONS.get(suffix)
    if fmt is None:
        raise ConfigError(
            f"cannot tell the config format from the extension {suffix or '(none)'!r}; "
            "use .toml, .json, .yaml or .yml.",
            file=str(path),
        )
    return fmt


def key_path(path: Sequence[str | int]) -> str:
    """``("agent", "instances", 1, "name")`` → ``agent.instances[1].name``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def substitute_env(
    text: str, env: Mapping[str, str] | None = None, *, file: str | None = None
) -> str:
    """Replace ``${VAR}`` with the variable's value (before parsing, in every format).

    A missing variable is a :class:`ConfigError` naming it and its line; ``${}`` and an
    unterminated ``${…`` stay as written; comments (``#`` to the end of the line, outside
    quotes: TOML's and YAML's) are left alone.
    """
    environ = os.environ if env is None else env
    out: list[str] = []
    for number, whole in enumerate(text.splitlines(keepends=True), start=1):
        cut = _comment_start(whole)
        line, comment = whole[:cut], whole[cut:]

        def replace(match: re.Match[str], number: int = number) -> str:
            name = match.group(1)
            value = environ.get(name)
            if value is None:
                raise ConfigError(
                    f"environment variable {name} is not set; set it or remove `${{{name}}}`.",
                    file=file,
                    line=number,
                )
            return value

        out.append(_VAR.sub(replace, line) + comment)
    return "".join(out)


def _comment_start(line: str) -> int:
    """Where the ``#`` comment of ``line`` starts (``len(line)`` when it has none): a ``#`` at
    the start or after white space, outside single and double quotes."""
    quote = ""
    escaped = False
    for i, char in enumerate(line):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return len(line)


@dataclass
class ConfigSource:
    """The text a config came from, for error locations."""

    text: str = ""
    fmt: ConfigFormat = "toml"
    file: str | None = None
    base_dir: Path = field(default_factory=Path.cwd)
    overrides: dict[str, Any] = field(default_factory=dict)
    """Top-level keys whose values the caller gave instead of the file's (command-line
    options): an error about one of them names the value, not a line of the file."""

    def error(self, message: str, path: Sequence[str | int] = ()) -> ConfigError:
        if path and path[0] in self.overrides:
            given = self.overrides[str(path[0])]
            return ConfigError(
                f"{given!r}, given in place of the file's value: {message}", key=key_path(path)
            )
        return ConfigError(
            message,
            file=self.file,
            line=self.line_of(path) if path else None,
            key=key_path(path) if path else None,
        )

    # -- parsing ---------------------------------------------------------------

    def parse(self) -> dict[str, Any]:
        try:
            if self.fmt == "toml":
                data: Any = tomllib.loads(self.text)
            elif self.fmt == "json":
                data = json.loads(self.text) if self.text.strip() else {}
            else:
                data = yaml.safe_load(self.text) or {}
        except tomllib.TOMLDecodeError as exc:
            match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
            line = int(match.group(1)) if match else None
            detail = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
            raise ConfigError(f"invalid TOML: {detail}.", file=self.file, line=line) from None
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"invalid JSON: {exc.msg}.", file=self.file, line=exc.lineno
            ) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError(
                f"invalid YAML: {problem}.",
                file=self.file,
                line=mark.line + 1 if mark is not None else None,
            ) from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"the config must be a table/object at the top level, got {type(data).__name__}.",
                file=self.file,
                line=1,
            )
        return data

    # -- locating keys -----------------------------------------------------------

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """The line where ``path`` is set (exact for YAML, a forward scan for TOML and JSON)."""
        if not self.text or not path:
            return None
        if self.fmt in ("yaml", "json"):  # JSON is YAML, so the node walk is exact for both
            found = self._yaml_line(path)
            if found is not None:
                return found
        return self._scan_line(path)

    def _yaml_line(self, path: Sequence[str | int]) -> int | None:
        try:
            node: Any = yaml.compose(self.text)
        except yaml.YAMLError:
            return None
        line: int | None = None
        for part in path:
            if node is None:
                break
            if isinstance(part, int) and isinstance(node, yaml.SequenceNode):
                if part >= len(node.value):
                    break
                node = node.value[part]
                line = node.start_mark.line + 1
            elif isinstance(part, str) and isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if key.value == part:
                        line = key.start_mark.line + 1
                        node = value
                        break
                else:
                    break
            else:
                break
        return line

    def _scan_line(self, path: Sequence[str | int]) -> int | None:
        lines = self.text.splitlines()
        position = 0
        found: int | None = None
        occurrence = 1
        for part in path:
            if isinstance(part, int):
                occurrence = part + 1
                continue
            key = re.escape(part)
            if self.fmt == "json":
                pattern = re.compile(rf'"{key}"\s*:')
            elif self.fmt == "toml":
                pattern = re.compile(
                    rf'^\s*\[\[?\s*(?:[^\]]*\.)?"?{key}"?\s*[\].]'
                    rf'|^\s*"?{key}"?\s*[=.]'
                    rf'|[{{,]\s*"?{key}"?\s*='
                )
            else:
                pattern = re.compile(rf'^\s*(?:-\s+)?"?{key}"?\s*:')
            seen = 0
            for index in range(position, len(lines)):
                if pattern.search(lines[index]):
                    seen += 1
                    if seen == occurrence:
                        position, found = index, index + 1
                        break
            occurrence = 1
        return found
