"""Reading a config file: ``${VAR}`` substitution, TOML/JSON/YAML parsing, and finding the line
of a key path so that every error can say file, line, key and what was expected."""

from __future__ import annotations

import bisect
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
        """The line of ``path`` from a walk of the TOML or JSON text (the deepest part of the
        path that is written: a missing key is placed at the table it belongs in)."""
        if self.fmt == "yaml":
            return None
        lines = _KeyLines(self.text, self.fmt).lines
        for end in range(len(path), 0, -1):
            found = lines.get(tuple(path[:end]))
            if found is not None:
                return found
        return None


class _KeyLines:
    """Where each key path of a TOML or JSON text is written: ``{("branches", 1,
    "temperature"): 8, ...}``. Array indices are counted per array (``[[branches]]`` headers,
    inline arrays, arrays of tables inside an element of another), so ``branches[1]`` is the
    second branch whatever keys the first one sets. Text that does not scan keeps the lines
    found before it."""

    def __init__(self, text: str, fmt: ConfigFormat) -> None:
        self.text = text
        self.at = 0
        self.lines: dict[tuple[str | int, ...], int] = {}
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._tables: dict[tuple[str | int, ...], int] = {}  # elements per array of tables
        try:
            if fmt == "json":
                self._skip(newlines=True)
                self._value(())
            else:
                self._document()
        except (IndexError, ValueError):
            pass

    # -- positions --------------------------------------------------------------------

    def _line(self) -> int:
        return bisect.bisect_right(self._starts, self.at)

    def _mark(self, path: tuple[str | int, ...], line: int) -> None:
        for end in range(1, len(path) + 1):
            self.lines.setdefault(path[:end], line)

    def _peek(self, count: int = 1) -> str:
        return self.text[self.at : self.at + count]

    def _skip(self, *, newlines: bool) -> None:
        text = self.text
        while self.at < len(text):
            char = text[self.at]
            if char in " \t\r" or (newlines and char == "\n"):
                self.at += 1
            elif char == "#":
                end = text.find("\n", self.at)
                self.at = len(text) if end < 0 else end
            else:
                return

    # -- TOML structure ------------------------------------------------------------------

    def _document(self) -> None:
        table: tuple[str | int, ...] = ()
        while True:
            self._skip(newlines=True)
            if self.at >= len(self.text):
                return
            line = self._line()
            if self._peek(2) == "[[":
                self.at += 2
                keys = self._keys("]")
                self.at += 2
                array = (*self._resolve(keys[:-1]), keys[-1])
                index = self._tables.get(array, 0)
                self._tables[array] = index + 1
                table = (*array, index)
                self._mark(table, line)
            elif self._peek() == "[":
                self.at += 1
                keys = self._keys("]")
                self.at += 1
                table = self._resolve(keys)
                self._mark(table, line)
            else:
                keys = self._keys("=")
                self.at += 1
                self._mark((*table, *keys), line)
                self._value((*table, *keys))
            self._skip(newlines=False)

    def _resolve(self, keys: list[str]) -> tuple[str | int, ...]:
        """A header's keys with each array of tables among them at its latest element."""
        path: tuple[str | int, ...] = ()
        for key in keys:
            path = (*path, key)
            count = self._tables.get(path)
            if count:
                path = (*path, count - 1)
        return path

    def _keys(self, end: str) -> list[str]:
        """A dotted key, up to (not past) ``end`` (or the ``:`` of a JSON object)."""
        keys: list[str] = []
        while True:
            self._skip(newlines=False)
            if self._peek() in ('"', "'"):
                keys.append(self._string())
            else:
                match = _BARE_KEY.match(self.text, self.at)
                if match is None:
                    raise ValueError(self.at)
                keys.append(match.group())
                self.at = match.end()
            self._skip(newlines=False)
            if self._peek() == ".":
                self.at += 1
            elif self._peek() in (end, ":"):
                return keys
            else:
                raise ValueError(self.at)

    # -- values --------------------------------------------------------------------------

    def _value(self, path: tuple[str | int, ...]) -> None:
        self._skip(newlines=False)
        char = self._peek()
        if char == "{":
            self.at += 1
            while True:
                self._skip(newlines=True)
                if self._peek() == "}":
                    self.at += 1
                    return
                if self._peek() == ",":
                    self.at += 1
                    continue
                line = self._line()
                keys = self._keys("=")
                self.at += 1
                self._mark((*path, *keys), line)
                self._value((*path, *keys))
        elif char == "[":
            self.at += 1
            index = 0
            while True:
                self._skip(newlines=True)
                if self._peek() == "]":
                    self.at += 1
                    return
                if self._peek() == ",":
                    self.at += 1
                    continue
                self._mark((*path, index), self._line())
                self._value((*path, index))
                index += 1
        elif char in ('"', "'"):
            self._string()
        else:
            match = _SCALAR.match(self.text, self.at)
            if match is None or not match.group().strip():
                raise ValueError(self.at)
            self.at = match.end()

    def _string(self) -> str:
        text, quote = self.text, self.text[self.at]
        if text.startswith(quote * 3, self.at):  # multi-line: up to five quotes may close it
            end = self._closing(quote * 3, self.at + 3)
            while text.startswith(quote, end + 3):
                end += 1
            value = text[self.at + 3 : end]
            self.at = end + 3
            return value
        end = self._closing(quote, self.at + 1)
        raw = text[self.at : end + 1]
        self.at = end + 1
        if quote == "'":
            return raw[1:-1]
        try:
            decoded = json.loads(raw)
        except json.JSONDecodeError:  # a TOML-only escape (\e, \U0001F600): keep it as written
            return raw[1:-1]
        return decoded if isinstance(decoded, str) else raw[1:-1]

    def _closing(self, quote: str, start: int) -> int:
        """Where the string's closing ``quote`` is (a basic string's may be escaped)."""
        end = self.text.index(quote, start)
        while quote[0] == '"' and _escaped(self.text, end):
            end = self.text.index(quote, end + 1)
        return end


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR = re.compile(r"[^,\]}\n#]+")


def _escaped(text: str, at: int) -> bool:
    """Whether the character at ``at`` follows an odd number of backslashes."""
    count = 0
    while at - count - 1 >= 0 and text[at - count - 1] == "\\":
        count += 1
    return count % 2 == 1
