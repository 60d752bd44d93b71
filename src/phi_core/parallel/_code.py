"""What an answer's code is, read without running it: the Python in an answer's text
(:func:`extract_code`), and from its syntax tree the entry function, the literal inputs of its
own example calls and which top-level statements are definitions (:func:`analyse`).

All of it is parsing (``ast.parse``, ``ast.literal_eval``): nothing here executes model code.
"""

from __future__ import annotations

import ast
import copy
import re
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_INPUTS_PER_ANSWER", "Answer", "analyse", "extract_code"]

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.S)
_PYTHON_TAGS = {"", "python", "py", "python3"}
_CODE_START = re.compile(r"^(def |class |import |from \w[\w.]* import )")


def _parses(code: str) -> bool:
    with warnings.catch_warnings():
        # Model code is full of "\d" in plain strings: not our warning to show.
        warnings.simplefilter("ignore", category=SyntaxWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        try:
            ast.parse(code)
        except (SyntaxError, ValueError):
            return False
    return True


def extract_code(text: str) -> str | None:
    """The Python code of an answer, or None when it has none.

    Fenced blocks tagged python/py/python3 or untagged that parse, joined; without such
    blocks, the longest parseable run of lines starting at the first ``def``/``class``/import
    line (some models answer with bare code). Blocks in other languages are not Python.
    """
    blocks = [body for tag, body in _FENCE.findall(text) if tag.lower() in _PYTHON_TAGS]
    good = [b for b in blocks if b.strip() and _parses(b)]
    if good:
        joined = "\n\n".join(good)
        return joined if _parses(joined) else good[0]
    if _FENCE.search(text):
        return None  # fenced, but not Python (or not valid Python)
    lines = text.splitlines()
    start = next((k for k, line in enumerate(lines) if _CODE_START.match(line)), None)
    if start is None:
        return None
    for end in range(len(lines), start, -1):
        chunk = "\n".join(lines[start:end])
        if _parses(chunk):
            return chunk if "def " in chunk or "class " in chunk else None
    return None


_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_MISSING = object()
MAX_INPUTS_PER_ANSWER = 8


@dataclass(frozen=True)
class Answer:
    """What the syntax tree of an answer's code tells, without running it."""

    code: str
    definitions: str
    """The top-level statements that load (imports, functions, classes, literal assignments),
    as source; never the example usage."""
    entry: str | None
    """The function the answer is about."""
    examples: list[str]
    """``repr`` of the literal argument tuples of its own example calls."""


def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)


def _literal(node: ast.expr, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return copy.deepcopy(names[node.id]) if node.id in names else _MISSING
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


def _literal_names(tree: ast.Module) -> dict[str, Any]:
    """Top-level ``name = <literal>`` assignments (example inputs are often bound first)."""
    names: dict[str, Any] = {}
    body = list(tree.body)
    for node in tree.body:
        if _is_main_guard(node):
            body.extend(node.body)  # type: ignore[attr-defined]
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                value = _literal(node.value, names)
                if value is not _MISSING:
                    names[target.id] = value
    return names


def _round_trips(args: tuple[Any, ...]) -> str | None:
    """``repr(args)`` when the worker can rebuild ``args`` from it with ``literal_eval``."""
    try:
        text = repr(args)
        return text if ast.literal_eval(text) == args else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _examples(tree: ast.Module, functions: set[str]) -> tuple[list[str], Counter[str]]:
    """Literal argument tuples of calls to this answer's functions outside its definitions."""
    names = _literal_names(tree)
    calls: list[str] = []
    called: Counter[str] = Counter()
    for stmt in tree.body:
        if isinstance(stmt, _DEFINITIONS):
            continue
        for node in ast.walk(stmt):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id not in functions or node.keywords:
                continue
            if any(isinstance(a, ast.Starred) for a in node.args):
                continue
            args = tuple(_literal(a, names) for a in node.args)
            if any(a is _MISSING for a in args):
                continue
            text = _round_trips(args)
            if text is None:
                continue
            called[node.func.id] += 1
            calls.append(text)
    return calls[:MAX_INPUTS_PER_ANSWER], called


def _entry(tree: ast.Module, called: Counter[str]) -> str | None:
    """The function the answer is about: the one its examples call most, else the first
    top-level function that no other top-level function calls."""
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not defs:
        return None
    if called:
        return called.most_common(1)[0][0]
    inner: set[str] = set()
    for fn in defs:
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id != fn.name
            ):
                inner.add(node.func.id)
    roots = [fn.name for fn in defs if fn.name not in inner]
    return (roots or [defs[0].name])[0]


def analyse(code: str | None) -> Answer | None:
    if code is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=SyntaxWarning)
            warnings.simplefilter("ignore", category=DeprecationWarning)
            tree = ast.parse(code)
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        examples, called = _examples(tree, functions)
        keep: list[ast.stmt] = [
            n
            for n in tree.body
            if isinstance(n, _DEFINITIONS)
            or (isinstance(n, ast.Assign) and _literal(n.value, {}) is not _MISSING)
        ]
        definitions = ast.unparse(ast.Module(body=keep, type_ignores=[]))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return Answer(code, definitions, _entry(tree, called), examples)
