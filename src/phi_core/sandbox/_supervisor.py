"""The sandbox's supervisor: the first process inside the sandbox (PID 1 of its PID namespace).

Runs as ``python -I <this file>`` and imports nothing from phi_core. It never runs model-written
code itself; it starts the worker that does, in a process of its own, and reports on it.

1. Reads the request (one JSON object) from stdin to its end: the per-run ``nonce``, the
   resource limits, the worker's path, the bytes for the worker's stdin, and optionally
   ``after_ready`` bytes.
2. Makes itself non-dumpable (so nothing of the same uid can open its ``/proc/1/fd``, ``mem`` or
   ``environ``), closes every inherited descriptor beyond stdio, and applies the rlimits, which
   every later process inherits.
3. Starts the worker with exactly four descriptors: stdin (a pipe from here), stdout and stderr
   (one pipe here when output is captured, else ``/dev/null``) and fd 3, on which the worker
   reports JSON lines. The worker never holds the supervisor's stdout, which is the reply
   channel, and never sees the nonce: it is a fresh ``exec``, not a fork.
4. Watches the worker: with ``deadline`` in the request, the worker must report within that
   many seconds of starting and of each report (a report may ask for less with its own
   ``"deadline"``, never for more or for none); without it, a report's ``"deadline"`` arms the
   watchdog (``null`` disarms it). A worker that misses it is killed (``"killed":
   "watchdog"``), as is one that reports more than ``message_bytes`` (``"overflow"``). A report
   with ``"ready": true`` makes the supervisor send ``after_ready`` on the worker's stdin and
   close it.
5. Reaps every orphan (it is PID 1), and when the worker has exited writes one line to stdout:
   ``<nonce> <JSON reply>``. When it exits, the kernel kills whatever is left in the namespace.

Reports are the worker's claims about its own run: code running in the worker can forge them,
but only for itself; it cannot reach the reply line, which carries the nonce.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import sys
import time
from typing import Any, NoReturn

_READ = 65536
_BURST = 16  # reads per wake-up, so a fast writer cannot keep the watchdog from running


def _read_request() -> dict[str, Any]:
    chunks = []
    while True:
        chunk = os.read(0, _READ)
        if not chunk:
            break
        chunks.append(chunk)
    request: dict[str, Any] = json.loads(b"".join(chunks))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return request


def _harden() -> None:
    """No inherited descriptor beyond stdio, and non-dumpable: without that, the worker (same
    uid) could open this process's ``/proc/1/fd/1`` and write a reply, or read the nonce."""
    os.closerange(3, 65536)
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _limit(limits: dict[str, int]) -> None:
    import resource

    names = {
        "cpu_seconds": resource.RLIMIT_CPU,
        "memory_bytes": resource.RLIMIT_AS,
        "processes": resource.RLIMIT_NPROC,
        "file_size_bytes": resource.RLIMIT_FSIZE,
        "open_files": resource.RLIMIT_NOFILE,
        "core_bytes": resource.RLIMIT_CORE,
    }
    for key, which in names.items():
        if key in limits:
            value = int(limits[key])
            resource.setrlimit(which, (value, value))


def _read_burst(fd: int) -> tuple[list[bytes], bool]:
    """What ``fd`` has now, at most ``_BURST`` reads; and False once it reached its end."""
    chunks: list[bytes] = []
    for _ in range(_BURST):
        try:
            chunk = os.read(fd, _READ)
        except BlockingIOError:
            return chunks, True
        if not chunk:
            return chunks, False
        chunks.append(chunk)
    return chunks, True


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    return r, w


class _Worker:
    def __init__(self, request: dict[str, Any]) -> None:
        self.request = request
        self.stdin_data = request.get("stdin", "").encode()
        after = request.get("after_ready")
        self.after_ready = None if after is None else after.encode()
        self.message_cap = int(request.get("message_bytes", 1 << 20))
        self.output_cap = int(request.get("output_bytes", 64 << 10))
        self.messages: list[Any] = []
        self.message_bytes = 0
        self.partial = b""
        self.output = bytearray()
        self.output_total = 0
        self.killed: str | None = None
        self.status: int | None = None
        self.started = time.monotonic()
        first = request.get("deadline")
        self.cap = None if first is None else float(first)
        self.deadline = None if first is None else self.started + float(first)

    def start(self) -> None:
        in_r, self.stdin_w = os.pipe()
        self.msg_r, msg_w = _pipe()
        os.set_blocking(self.stdin_w, False)
        null = os.open(os.devnull, os.O_RDWR)
        self.out_r: int | None = None
        out_w = null
        if self.request.get("capture_output"):
            self.out_r, out_w = _pipe()
        actions = [
            (os.POSIX_SPAWN_DUP2, in_r, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, out_w, 2),
            (os.POSIX_SPAWN_DUP2, msg_w, 3),
        ]
        argv = [sys.executable, *self.request["python_flags"], self.request["worker"]]
        env = {str(k): str(v) for k, v in self.request.get("env", {}).items()}
        self.pid = os.posix_spawn(sys.executable, argv, env, file_actions=actions, setsid=True)
        for fd in {in_r, msg_w, out_w, null}:
            os.close(fd)
        if not self.stdin_data:
            self._close_stdin_unless_waiting()

    def _close_stdin_unless_waiting(self) -> None:
        if self.after_ready is None and self.stdin_w >= 0:
            os.close(self.stdin_w)
            self.stdin_w = -1

    def write_stdin(self) -> None:
        try:
            written = os.write(self.stdin_w, self.stdin_data[:_READ])
        except BlockingIOError:
            return
        except BrokenPipeError:
            self.stdin_data = b""
            self.after_ready = None
            os.close(self.stdin_w)
            self.stdin_w = -1
            return
        self.stdin_data = self.stdin_data[written:]
        if not self.stdin_data:
            self._close_stdin_unless_waiting()

    def read_messages(self) -> bool:
        """Read what is there on fd 3 (a bounded amount per call); False once it is closed."""
        chunks, still_open = _read_burst(self.msg_r)
        for chunk in chunks:
            self.message_bytes += len(chunk)
            if self.message_bytes > self.message_cap:
                self.kill("overflow")
                return False
            self.partial += chunk
            *lines, self.partial = self.partial.split(b"\n")
            for line in lines:
                self._message(line)
        return still_open

    def _message(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            message = {"unreadable": line[:200].decode("utf-8", "replace")}
        if not isinstance(message, dict):
            message = {"unreadable": repr(message)[:200]}
        self.messages.append(message)
        if self.cap is not None or "deadline" in message:
            self._watch(message.get("deadline"))
        if message.get("ready") is True and self.after_ready is not None:
            self.stdin_data += self.after_ready
            self.after_ready = None
            if self.stdin_w >= 0:
                self.write_stdin()

    def _watch(self, seconds: object) -> None:
        """Arm the watchdog ``seconds`` from now (None: off). With a ``deadline`` in the
        request, every report re-arms it for that long at most, and it cannot be switched off."""
        value: float | None = None
        number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
        if number and 0 <= seconds < math.inf:  # type: ignore[operator]  # NaN & co. disarm
            value = float(min(seconds, 1e6))  # type: ignore[call-overload]
        if self.cap is not None:
            value = self.cap if value is None else min(value, self.cap)
        self.deadline = None if value is None else time.monotonic() + value

    def read_output(self) -> bool:
        assert self.out_r is not None
        chunks, still_open = _read_burst(self.out_r)
        for chunk in chunks:
            self.output_total += len(chunk)
            self.output += chunk
            if len(self.output) > self.output_cap:
                del self.output[: len(self.output) - self.output_cap]
        return still_open

    def kill(self, why: str) -> None:
        if self.killed is None:
            self.killed = why
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def reap(self) -> None:
        """Collect every exited process (orphans come to PID 1); note the worker's status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                self.status = os.waitstatus_to_exitcode(status)

    def reply(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "exit": self.status,
            "killed": self.killed,
            "output": self.output.decode("utf-8", "replace"),
            "output_bytes": self.output_total,
            "seconds": round(time.monotonic() - self.started, 4),
        }


def _supervise(worker: _Worker) -> None:
    wake_r, wake_w = _pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    worker.start()
    reads = {worker.msg_r: worker.read_messages}
    if worker.out_r is not None:
        reads[worker.out_r] = worker.read_output
    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    for fd in reads:
        poller.register(fd, select.POLLIN)
    writing: int | None = None  # the worker's stdin, while there is something to send
    while True:
        if writing is not None and (worker.stdin_w != writing or not worker.stdin_data):
            poller.unregister(writing)
            writing = None
        if writing is None and worker.stdin_w >= 0 and worker.stdin_data:
            writing = worker.stdin_w
            poller.register(writing, select.POLLOUT)
        worker.reap()
        if worker.status is not None:
            break
        timeout = None
        if worker.deadline is not None:
            left = worker.deadline - time.monotonic()
            if left <= 0:
                worker.kill("watchdog")
                worker.deadline = None
                continue
            timeout = int(left * 1000) + 1
        for fd, _ in poller.poll(timeout):
            if fd == wake_r:
                _drain(wake_r)
            elif fd in reads and not reads[fd]():
                poller.unregister(fd)
                del reads[fd]
            elif fd == writing:
                worker.write_stdin()
    # The worker is gone: what it wrote before exiting is in the pipes now. Descendants it left
    # may still hold them open, so read what is there and stop (they die with this process, and
    # outside a PID namespace with the worker's process group).
    if worker.killed is None:
        worker.read_messages()
    if worker.out_r is not None:
        worker.read_output()
    try:
        os.killpg(worker.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _drain(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, _READ):
                return
        except BlockingIOError:
            return


def main() -> None:
    request = _read_request()
    nonce = str(request["nonce"])
    try:
        _harden()
        _limit(request.get("limits", {}))
    except (OSError, ImportError, ValueError, AttributeError) as exc:
        if not request.get("unsafe"):  # never run the worker in a sandbox left half-protected
            _reply(nonce, {"error": f"the supervisor cannot protect itself: {exc}"})
    if request.get("worker") is None:  # a probe: the sandbox starts and answers
        reply: dict[str, Any] = {"probe": True, "uid": os.getuid(), "pid": os.getpid()}
    else:
        worker = _Worker(request)
        try:
            _supervise(worker)
            reply = worker.reply()
        except OSError as exc:  # cannot start the worker (limits too tight, no interpreter)
            reply = worker.reply()
            reply["error"] = f"{type(exc).__name__}: {exc}"
    _reply(nonce, reply)


def _reply(nonce: str, reply: dict[str, Any]) -> NoReturn:
    data = (nonce + " " + json.dumps(reply) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]
    os._exit(0)


if __name__ == "__main__":
    main()
