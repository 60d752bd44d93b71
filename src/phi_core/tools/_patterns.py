"""Glob, brace and word helpers of the command policy (bash semantics; nothing is expanded)."""

from __future__ import annotations

import re

from ._shell import Part, Word

__all__ = [
    "GLOB",
    "MAX_ALTERNATIVES",
    "escape",
    "expand_braces",
    "has_glob",
    "is_env_assignment",
    "replace_braces",
    "shown",
    "split_top",
    "strip_prefix",
    "unescape",
    "word_of",
]

MAX_ALTERNATIVES = 32
GLOB = "\uf8ff"  # stands for a glob component while a path is resolved


def escape(text: str) -> str:
    return "".join("\\" + c if c in "\\*?[]{}," else c for c in text)


def unescape(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def has_glob(pattern: str) -> bool:
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c in "*?[":
            return True
        i += 1
    return False


def expand_braces(pattern: str, limit: int = MAX_ALTERNATIVES) -> list[str]:
    """Bash brace expansion of unescaped ``{a,b}`` and ``{x..y}`` (ranges give their ends)."""
    depth = 0
    start = -1
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                inner = pattern[start + 1 : i]
                options = split_top(inner)
                if len(options) == 1:
                    ends = re.fullmatch(r"(-?\w+)\.\.(-?\w+)(\.\.-?\d+)?", inner)
                    options = [ends.group(1), ends.group(2)] if ends else []
                if options:
                    prefix, suffix = pattern[:start], pattern[i + 1 :]
                    out: list[str] = []
                    for option in options:
                        out.extend(expand_braces(prefix + option + suffix, limit))
                        if len(out) >= limit:
                            break
                    return out[:limit]
        i += 1
    return [pattern]


def split_top(inner: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    i = 0
    while i < len(inner):
        c = inner[i]
        if c == "\\" and i + 1 < len(inner):
            current.append(inner[i : i + 2])
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1
    parts.append("".join(current))
    return parts


def shown(word: Word) -> str:
    text = "".join(
        p.text
        if p.kind == "lit"
        else (
            "~" + p.text
            if p.kind == "tilde"
            else f"${{{p.text}}}"
            if p.kind == "var"
            else f"$({p.text})"
        )
        for p in word.parts
    )
    return text if len(text) <= 80 else text[:77] + "..."


def word_of(text: str, like: Word) -> Word:
    return Word([Part("lit", text, quoted=all(p.quoted for p in like.parts))])


def strip_prefix(word: Word, prefix: str) -> Word:
    first = word.parts[0]
    return Word([Part("lit", first.text[len(prefix) :], first.quoted), *word.parts[1:]])


def replace_braces(word: Word, start: Word) -> Word:
    if word.literal == "{}":
        return Word([*start.parts, Part("lit", "/{}", quoted=True)])
    return word


def is_env_assignment(literal: str) -> bool:
    name, eq, _ = literal.partition("=")
    return bool(eq) and bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name))
