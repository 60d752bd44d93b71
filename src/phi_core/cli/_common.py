"""What every ``phi`` command shares: exit codes, usage errors and warnings, output streams that
survive a closed pipe, and running a coroutine that Ctrl-C (or a closed pipe) cancels cleanly.

Exit codes: 0 success, 1 the run failed, 2 a usage error (bad flag, file, model or key: the
message says what to write instead), 130 interrupted (Ctrl-C), 141 the reader of the output went
away (``phi race … | head -2``: the run stops, quietly, with the code a process killed by
SIGPIPE reports).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import io
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ParamSpec, TextIO, TypeVar, cast

import typer
from rich.console import Console
from rich.text import Text

from ..cancel import CancelToken
from ..errors import Interrupted, UserError

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE",
    "EXIT_USAGE",
    "PipeSafeStream",
    "check_utf8",
    "guard_process_streams",
    "holding_interrupts",
    "on_output_closed",
    "output_closed",
    "own_stream",
    "read_prompt",
    "run_interruptible",
    "sigterm_as_ctrl_c",
    "streams",
    "terminated",
    "usage_error",
    "user_error_in",
    "warn",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141
T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

_closed = False
_on_close: list[Callable[[], None]] = []


def output_closed() -> bool:
    """True once a write found the reader of stdout or stderr gone."""
    return _closed


@contextlib.contextmanager
def on_output_closed(callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` if the output is closed while the block runs (at once if it already is)."""
    if _closed:
        callback()
    _on_close.append(callback)
    try:
        yield
    finally:
        _on_close.remove(callback)


def _mark_closed() -> None:
    global _closed
    if _closed:
        return
    _closed = True
    for callback in list(_on_close):
        callback()


class PipeSafeStream:
    """A text stream that turns "the reader went away" (EPIPE) into silence.

    The first failed write points the file descriptor at ``/dev/null`` (so no later flush, not
    even the interpreter's at exit, can fail), drops everything after it and tells
    :func:`on_output_closed` listeners, which stop the run.
    """

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self.raw.write(text)
            except OSError as exc:
                self._closed(exc)
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.raw.flush()
            except OSError as exc:
                self._closed(exc)

    def _closed(self, exc: OSError) -> None:
        if not isinstance(exc, BrokenPipeError) and exc.errno not in (errno.EPIPE, errno.EINVAL):
            raise exc
        self.broken = True
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            _silence(self.raw.fileno())
        _mark_closed()

    def isatty(self) -> bool:
        return not self.broken and self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.raw.close()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer, …
        return getattr(self.raw, name)


def _silence(fd: int) -> None:
    """Point ``fd`` — and fds 1 and 2 when they are the same pipe — at ``/dev/null``, so that no
    later flush (the interpreter's own at exit included) can fail on the closed pipe."""
    pipe = os.fstat(fd)
    targets = {fd}
    for standard in (1, 2):
        with contextlib.suppress(OSError):
            other = os.fstat(standard)
            if (other.st_dev, other.st_ino) == (pipe.st_dev, pipe.st_ino):
                targets.add(standard)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for target in targets:
            os.dup2(devnull, target)
    finally:
        os.close(devnull)


def _safe(stream: TextIO) -> TextIO:
    return stream if isinstance(stream, PipeSafeStream) else cast(TextIO, PipeSafeStream(stream))


def guard_process_streams() -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` pipe-safe (the console entry points call this)."""
    sys.stdout = _safe(sys.stdout)
    sys.stderr = _safe(sys.stderr)


def own_stream(stream: TextIO) -> TextIO:
    """A private, pipe-safe duplicate of ``stream``'s file descriptor (or ``stream`` itself,
    made pipe-safe, if it has none).

    llama-cpp-python silences model loading by pointing fds 1 and 2 at /dev/null and swapping
    ``sys.stdout`` for a while, from a worker thread; two overlapping loads can leave them
    swapped. Writing through our own duplicate keeps the race's output on the real terminal.
    """
    try:
        fd = stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return _safe(stream)
    with contextlib.suppress(OSError):
        stream.flush()
    dup = os.fdopen(
        os.dup(fd), "w", encoding=getattr(stream, "encoding", None) or "utf-8", errors="replace",
        buffering=1,
    )  # fmt: skip
    return _safe(dup)


@contextlib.contextmanager
def streams() -> Iterator[tuple[TextIO, TextIO]]:
    """``(out, err)``: the command's own pipe-safe stdout and stderr (see :func:`own_stream`)."""
    out, err = own_stream(sys.stdout), own_stream(sys.stderr)
    try:
        yield out, err
    finally:
        for mine, theirs in ((out, sys.stdout), (err, sys.stderr)):
            if getattr(mine, "raw", mine) is not getattr(theirs, "raw", theirs):
                mine.close()
            else:
                mine.flush()


def read_prompt(prompt: str, command: str = "race") -> str:
    """The prompt argument (``-`` reads stdin), stripped; empty or undecodable text is refused
    (the message shows ``phi COMMAND "..."``)."""
    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise UserError(
            f'The prompt is empty; pass the question as an argument (phi {command} "...") '
            "or pipe it in with `-`."
        )
    return check_utf8(prompt, "prompt").strip()


def check_utf8(text: str, what: str = "prompt") -> str:
    """``text`` when it is valid UTF-8; else a :class:`UserError` naming the first bad byte
    (bytes that are not UTF-8 arrive from stdin and argv as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = ord(text[exc.start]) - 0xDC00
        shown = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else repr(text[exc.start])
        raise UserError(
            f"The {what} is not valid UTF-8 text ({shown} at position {exc.start}); save or "
            "type it as UTF-8 (for example `iconv -f latin1 -t utf-8`)."
        ) from None
    return text


def usage_error(exc: BaseException, err: TextIO | None = None) -> typer.Exit:
    """Print ``exc`` as ``Error: …`` on stderr; the caller raises the returned exit (code 2)."""
    console = Console(file=err or sys.stderr, highlight=False)
    console.print(Text("Error: ", style="bold red") + Text(str(exc)), soft_wrap=True)
    return typer.Exit(EXIT_USAGE)


def warn(message: str, err: TextIO | None = None) -> None:
    """``warning: …`` on stderr: a setting that does nothing, or something worth knowing."""
    console = Console(file=err or sys.stderr, highlight=False)
    console.print(Text("warning: ", style="yellow") + Text(message), soft_wrap=True)


def user_error_in(error: BaseException) -> UserError | None:
    """The :class:`UserError` behind ``error`` (itself, or inside an exception group)."""
    if isinstance(error, UserError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = user_error_in(inner)
            if found is not None:
                return found
    return None


_terminated = False


def terminated() -> bool:
    """Whether a SIGTERM came while a :func:`sigterm_as_ctrl_c` command ran (a command that
    goes on after Ctrl-C, as ``phi chat`` does after a turn, stops after one)."""
    return _terminated


def sigterm_as_ctrl_c(command: Callable[P, R]) -> Callable[P, R]:
    """``command`` with SIGTERM (``timeout``, CI runners, systemd) handled as Ctrl-C: the run is
    cancelled, its end event, result, log record and summary written, MCP servers stopped, exit
    130 (by default SIGTERM killed phi on the spot, unlogged, leaving stdio servers behind). A
    second SIGTERM, like a second Ctrl-C, stops it outright."""

    @functools.wraps(command)
    def handled(*args: P.args, **kwargs: P.kwargs) -> R:
        if not hasattr(signal, "SIGTERM") or threading.current_thread() is not (
            threading.main_thread()
        ):
            return command(*args, **kwargs)

        def on_term(_signum: int, _frame: object) -> None:
            global _terminated
            _terminated = True
            os.kill(os.getpid(), signal.SIGINT)  # to whoever handles Ctrl-C now (the run, Python)

        previous = signal.signal(signal.SIGTERM, on_term)
        try:
            return command(*args, **kwargs)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return handled


def run_interruptible(make: Callable[[CancelToken], Awaitable[T]]) -> tuple[T, bool]:
    """Run ``make(token)`` on a fresh event loop; Ctrl-C or a closed output cancels ``token``
    (a second Ctrl-C stops the task outright). Returns the result and whether it was stopped.

    Raises:
        Interrupted: the task was stopped outright (a second Ctrl-C).
        UserError: a usage mistake surfaced while running, also from inside a task group.
    """
    stopped = False

    async def main() -> T:
        nonlocal stopped
        token = CancelToken()
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()

        def on_sigint() -> None:
            nonlocal stopped
            if stopped and task is not None:
                task.cancel()
            stopped = True
            token.cancel("interrupted")

        def on_closed() -> None:
            nonlocal stopped
            stopped = True
            loop.call_soon_threadsafe(token.cancel, "the output was closed")

        installed = False
        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
            installed = True
        except (NotImplementedError, RuntimeError, ValueError):
            installed = False  # not the main thread (or no signals here): Ctrl-C stays default
        if early:  # a Ctrl-C (or SIGTERM, see sigterm_as_ctrl_c) before the loop ran
            on_sigint()
        try:
            with on_output_closed(on_closed):
                return await make(token)
        finally:
            if installed:
                loop.remove_signal_handler(signal.SIGINT)

    # Until the loop's own handler is in place, a Ctrl-C is noted, not raised: raised while
    # the loop is being built it would leave a half-made loop and a never-awaited coroutine.
    with holding_interrupts() as early:
        try:
            result = asyncio.run(main())
        except (KeyboardInterrupt, asyncio.CancelledError) as exc:
            raise Interrupted() from exc
        except BaseExceptionGroup as group:
            found = user_error_in(group)
            if found is None:
                raise
            raise found from None
    return result, stopped


_held: list[int] | None = None
"""The Ctrl-Cs noted by the innermost :func:`holding_interrupts` (``None``: none is)."""


@contextlib.contextmanager
def holding_interrupts() -> Iterator[list[int]]:
    """Within it, a Ctrl-C (SIGINT) is noted in the yielded list instead of raised, for
    :func:`run_interruptible` to act on once its event loop runs: a command that shows its
    race before running it holds them from then on, so a Ctrl-C in between cancels the run
    (logged once) rather than escaping from wherever the code was. Nested, the outermost list
    is shared. Outside the main thread it notes nothing (Ctrl-C stays as it was)."""
    global _held
    if _held is not None:
        yield _held
        return
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    noted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: noted.append(1))
    _held = noted
    try:
        yield noted
    finally:
        _held = None
        signal.signal(signal.SIGINT, previous)
