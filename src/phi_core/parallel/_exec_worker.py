"""Worker for behavioural agreement of code answers: run as a script in a separate process.

Reads ``{"codes": [str | null, ...], "call_timeout": float}`` as JSON on stdin and writes
``{"candidates": [{"runnable": bool, "outputs": {input index: str}}], "owners": [int]}`` on
stdout (``owners[n]`` is the candidate whose examples gave input ``n``). For each candidate it executes only the
definitions (imports, functions, classes, constant assignments; never the example usage), picks
the entry function, and collects the literal argument tuples of the calls its own example usage
makes to its functions. Every candidate's entry function is then called on every collected
argument tuple it accepts; the result (and the arguments afterwards, for in-place functions) is
recorded as a canonical string, an exception as ``!ExceptionName``.

This file imports nothing from phi_core: it runs as ``python -I <this file>`` with a clean
environment, a temporary working directory, no stdin, and limits on memory and CPU time. It runs
model-written code; isolation here is a process boundary, not a sandbox.
"""

from __future__ import annotations

import ast
import copy
import inspect
import io
import json
import math
import os
import signal
import sys
from collections import Counter
from typing import Any

MAX_INPUTS_PER_CANDIDATE = 8
MAX_REPR = 2000
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class _CallTimeout(BaseException):
    """Raised by the timer inside model code; a BaseException so ``except Exception`` in the
    model's code cannot swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _CallTimeout


def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)


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


_MISSING = object()


def _literal(node: ast.expr, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return copy.deepcopy(names[node.id]) if node.id in names else _MISSING
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


def _examples(tree: ast.Module, functions: set[str]) -> tuple[list[tuple[Any, ...]], Counter[str]]:
    """Literal argument tuples of calls to this candidate's functions outside its definitions."""
    names = _literal_names(tree)
    calls: list[tuple[Any, ...]] = []
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
            called[node.func.id] += 1
            calls.append(args)
    return calls[:MAX_INPUTS_PER_CANDIDATE], called


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


def _canonical(value: Any, depth: int = 0) -> Any:
    """A comparable form: floats rounded, generators and iterators materialised (bounded)."""
    if depth > 20:
        return "<deep>"
    if isinstance(value, bool) or value is None or isinstance(value, (int, str, bytes)):
        return value
    if isinstance(value, float):
        return value if math.isnan(value) or math.isinf(value) else round(value, 9)
    if isinstance(value, (list, tuple)):
        items = [_canonical(v, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {repr(_canonical(k, depth + 1)): _canonical(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return ("set", sorted(repr(_canonical(v, depth + 1)) for v in value))
    if hasattr(value, "__next__"):
        items = []
        for k, item in enumerate(value):
            if k >= 1000:
                break
            items.append(_canonical(item, depth + 1))
        return ("iter", items)
    return repr(value)


def _load(code: str, call_timeout: float) -> tuple[Any, list[tuple[Any, ...]]]:
    """(entry function or None, example argument tuples) of one candidate."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None, []
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    examples, called = _examples(tree, functions)
    entry = _entry(tree, called)
    if entry is None:
        return None, examples
    keep: list[ast.stmt] = [
        n
        for n in tree.body
        if isinstance(n, _DEFINITIONS)
        or (isinstance(n, ast.Assign) and _literal(n.value, {}) is not _MISSING)
    ]
    namespace: dict[str, Any] = {"__name__": "candidate"}
    signal.setitimer(signal.ITIMER_REAL, call_timeout)  # definitions can run code too
    try:
        exec(compile(ast.Module(body=keep, type_ignores=[]), "<candidate>", "exec"), namespace)
    except BaseException:
        return None, examples
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    fn = namespace.get(entry)
    return (fn if callable(fn) else None), examples


def _run(fn: Any, args: tuple[Any, ...], call_timeout: float) -> str | None:
    """Canonical result of ``fn(*args)``, or None when ``fn`` does not accept ``args``."""
    try:
        inspect.signature(fn).bind(*args)
    except (TypeError, ValueError):
        return None
    work = copy.deepcopy(args)
    signal.setitimer(signal.ITIMER_REAL, call_timeout)
    try:
        result = fn(*work)
        out = repr((_canonical(result), _canonical(work)))
    except _CallTimeout:
        out = "!Timeout"
    except RecursionError:
        out = "!RecursionError"
    except BaseException as exc:
        out = f"!{type(exc).__name__}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return out[:MAX_REPR]


def _limit(memory_bytes: int, cpu_seconds: int) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    except (ImportError, ValueError, OSError):  # not on this platform: the parent's timeout rules
        return


def main() -> None:
    _limit(2 << 30, 60)
    request = json.load(sys.stdin)
    call_timeout = float(request.get("call_timeout", 1.0))
    # The reply goes to a private copy of fd 1; fd 1 itself is pointed at /dev/null so that model
    # code writing to it (print, os.write, C extensions) cannot corrupt the reply.
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stdout = io.StringIO()
    signal.signal(signal.SIGALRM, _on_alarm)
    loaded = []
    inputs: list[tuple[Any, ...]] = []
    owners: list[int] = []
    for k, code in enumerate(request["codes"]):
        fn, examples = (None, []) if code is None else _load(code, call_timeout)
        loaded.append(fn)
        for args in examples:
            inputs.append(args)
            owners.append(k)
    candidates = []
    for fn in loaded:
        outputs: dict[str, str] = {}
        if fn is not None:
            for n, args in enumerate(inputs):
                out = _run(fn, args, call_timeout)
                if out is not None:
                    outputs[str(n)] = out
                sys.stdout = io.StringIO()
        candidates.append({"runnable": fn is not None, "outputs": outputs})
    reply.write(json.dumps({"candidates": candidates, "owners": owners}))
    reply.flush()
    os._exit(0)  # skip interpreter teardown: model code may have left threads or handlers


if __name__ == "__main__":
    main()
