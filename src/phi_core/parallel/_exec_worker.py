"""Worker that runs ONE answer's code inside the sandbox (see ``phi_core.sandbox``).

Imports nothing from phi_core: the sandbox's supervisor starts it as ``python -S -s -B`` with an
empty environment. It reads one JSON request line on stdin and reports JSON lines on fd 3; in calls mode each
report re-arms the supervisor's watchdog (the parent sets it to a call's timeout plus a grace).

``{"mode": "calls", "definitions", "entry", "inputs", "call_timeout"}`` (exec-vote,
``code_agreement``): executes ``definitions`` (the answer's imports, functions, classes and
literal assignments, picked out by the parent; never the example usage), then calls the function
``entry`` on every input (``[n, "repr of a literal argument tuple"]``) it accepts,
reporting ``{"loaded": bool}`` and then ``{"n": n, "out": str | None}`` per input: the canonical
result (and the arguments afterwards, for in-place functions), ``!ExceptionName`` for an
exception, None when ``entry`` does not take those arguments.

``{"mode": "tests", "code", "tests"}`` (``PythonTestsCheck``): executes ``code`` as ``__main__``,
reports ``{"ready": true}``, then reads a token line and executes the tests in the same module;
when they end normally it reports ``{"passed": token}`` and exits 0. Code that exits early never
sees the token. Code that runs *during* the tests (the functions they call) runs in this process
and could still subvert them; the sandbox contains it, it cannot make it honest.

Loading code *is* running code: class bodies, decorators, default arguments and imports all
execute while "only the definitions" load. That is why this worker runs in the sandbox, one
answer per sandbox, and why its reports are treated as the answer's own claims.
"""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imports are the worker's start-up time: only what every run needs
    from typing import Any

MAX_REPR = 2000


class _CallTimeout(BaseException):
    """Raised by the timer inside model code; a BaseException so ``except Exception`` in the
    model's code cannot swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _CallTimeout


class _Reporter:
    def __init__(self) -> None:
        self._out = os.fdopen(3, "w", encoding="utf-8")

    def __call__(self, **message: Any) -> None:
        self._out.write(json.dumps(message) + "\n")
        self._out.flush()


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


def _timed(seconds: float) -> None:
    signal.signal(signal.SIGALRM, _on_alarm)  # again: model code may have replaced it
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _load(request: dict[str, Any]) -> Any:
    """The entry function of the answer, or None when its definitions do not load."""
    namespace: dict[str, Any] = {"__name__": "candidate"}
    _timed(float(request["call_timeout"]))
    try:
        exec(compile(request["definitions"], "<candidate>", "exec"), namespace)
    except BaseException:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    fn = namespace.get(request["entry"])
    return fn if callable(fn) else None


def _accepts(fn: Any, count: int) -> bool:
    """Whether ``fn`` can be called with ``count`` positional arguments."""
    if isinstance(fn, types.FunctionType):  # the usual case, without importing inspect
        code, defaults = fn.__code__, len(fn.__defaults__ or ())
        required_keywords = code.co_kwonlyargcount - len(fn.__kwdefaults__ or {})
        varargs = bool(code.co_flags & 0x04)
        fits = code.co_argcount - defaults <= count and (count <= code.co_argcount or varargs)
        return fits and required_keywords <= 0
    import inspect

    try:
        inspect.signature(fn).bind(*range(count))
    except (TypeError, ValueError):
        return False
    return True


def _literal(source: str) -> tuple[Any, ...]:
    """An argument tuple from its repr (made by the parent from literals; no builtins needed)."""
    value = eval(source, {"__builtins__": {}}, {})
    return value if isinstance(value, tuple) else (value,)


def _call(fn: Any, args: tuple[Any, ...], call_timeout: float) -> str | None:
    """Canonical result of ``fn(*args)``, or None when ``fn`` does not accept ``args``."""
    if not _accepts(fn, len(args)):
        return None
    work = copy.deepcopy(args)
    _timed(call_timeout)
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


def _calls(request: dict[str, Any], report: _Reporter) -> None:
    call_timeout = float(request["call_timeout"])
    report(started=True)
    fn = _load(request)
    report(loaded=fn is not None)
    if fn is None:
        return
    for n, source in request["inputs"]:
        out = _call(fn, _literal(source), call_timeout)
        report(n=n, out=out)


def _ended_by_unittest(exc: SystemExit) -> bool:
    """``unittest.main()`` ends the tests with SystemExit; a function under test calling
    ``sys.exit(0)`` does not count as passing. (Walks the traceback's C attributes only: the
    answer's code may have replaced ``traceback``'s functions.)"""
    tb = exc.__traceback__
    from_unittest = False
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        from_unittest = from_unittest or name.endswith("/unittest/main.py")
        tb = tb.tb_next
    return exc.code in (0, None, False) and from_unittest


def _exit(code: int) -> None:
    """Flush what the code printed (stdout is a pipe: block-buffered) and leave at once."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # skip interpreter teardown: model code may have left threads or handlers


def _failed() -> None:
    """Print the exception being handled after what the code printed, and exit 1."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    import traceback

    traceback.print_exc()
    _exit(1)


def _tests(request: dict[str, Any], report: _Reporter) -> None:
    # What runs after the answer's code is bound now, to C functions: that code can rebind names
    # in modules (``json.loads``, ``builtins.exec``, ``sys.stdin``), not these references.
    read, write, run = os.read, os.write, exec
    tests = compile(request["tests"], "tests.py", "exec")
    for name, text in (("answer.py", request["code"]), ("tests.py", request["tests"])):
        with open(name, "w", encoding="utf-8") as f:  # for the lines in tracebacks
            f.write(text)
    module = types.ModuleType("__main__")
    module.__file__ = "answer.py"
    sys.modules["__main__"] = module
    try:
        run(compile(request["code"], "answer.py", "exec"), module.__dict__)
    except BaseException:
        report(loaded=False)
        _failed()
    write(3, b'{"ready": true}\n')
    token = read(0, 256).strip()  # sent only now, after the answer's code has run
    try:
        run(tests, module.__dict__)
    except SystemExit as exc:
        if not _ended_by_unittest(exc):
            print(f"the code exited during the tests: SystemExit({exc.code!r})", file=sys.stderr)
            _exit(1)
    except BaseException:
        _failed()
    if token.isalnum():
        write(3, b'{"passed": "' + token + b'"}\n')


def main() -> None:
    report = _Reporter()
    request = json.loads(sys.stdin.readline())
    if request["mode"] == "calls":
        _calls(request, report)
    else:
        _tests(request, report)
    _exit(0)


if __name__ == "__main__":
    main()
