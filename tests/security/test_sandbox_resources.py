"""Model-written code cannot outlive its sandbox or exhaust this machine: fork bombs are
bounded, detached daemons die with the sandbox, and memory, CPU, disk, descriptors and output
are capped. Each test runs in both sandboxes (bubblewrap and the ``unshare`` fallback)."""

from __future__ import annotations

import time

import pytest

from phi_core.sandbox import Sandbox, SandboxLimits

from .sandbox_attacks import BACKENDS, marker, probe, run_answer, survivors


@pytest.fixture(params=BACKENDS)
def box(request: pytest.FixtureRequest) -> Sandbox:
    return Sandbox(backend=request.param)


async def test_a_fork_bomb_is_bounded_and_nothing_of_it_survives(box: Sandbox) -> None:
    tag = marker()
    code = f"""
import os

def probe():
    made = 0
    while made < 1000:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                os.execv('/usr/bin/sleep', ['sleep', {tag!r}])
            finally:
                os._exit(0)
        made += 1
    return made
"""
    made = await probe(box, code)
    assert 0 < made < box.limits.processes, made
    assert survivors(tag) == []


async def test_detached_daemons_die_with_the_sandbox(box: Sandbox) -> None:
    tag = marker()
    code = f"""
import os, subprocess

def probe():
    subprocess.Popen(['sleep', {tag!r}], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if os.fork() == 0:  # the classic double fork
        os.setsid()
        if os.fork() == 0:
            os.execv('/usr/bin/sleep', ['sleep', {tag!r}])
        os._exit(0)
    os.wait()
    return 'detached'
"""
    assert await probe(box, code) == "detached"
    assert survivors(tag) == []


async def test_memory_is_capped_per_process(box: Sandbox) -> None:
    code = """
def probe():
    try:
        block = bytearray(2 << 30)
        return len(block)
    except MemoryError:
        return 'MemoryError'
"""
    assert await probe(box, code) == "MemoryError"


async def test_a_call_that_ignores_its_timer_is_killed_by_the_watchdog(box: Sandbox) -> None:
    code = """
import os, signal

def probe():
    signal.signal(signal.SIGALRM, signal.SIG_IGN)  # the worker's per-call timer
    os.write(3, b'{"deadline": null}\\n{"deadline": 1e9}\\n')  # and asks the watchdog to wait
    while True:
        pass
"""
    started = time.monotonic()
    result = await run_answer(box, code, call_timeout=0.3, seconds=20)
    assert result.killed == "watchdog"
    assert time.monotonic() - started < 10


async def test_cpu_time_is_capped_even_without_a_watchdog() -> None:
    limited = Sandbox(limits=SandboxLimits(cpu_seconds=1))
    code = """
import signal

def probe():
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    while True:
        pass
"""
    started = time.monotonic()
    result = await run_answer(limited, code, call_timeout=60, seconds=30)
    assert result.killed is None and result.exit_code is not None and result.exit_code < 0
    assert time.monotonic() - started < 15


async def test_disk_writes_are_capped(box: Sandbox) -> None:
    code = """
import os

def probe():
    written, chunk = 0, b'x' * (1 << 20)
    for k in range(512):
        try:
            with open(f'/tmp/fill-{k}', 'wb') as f:
                for _ in range(64):
                    f.write(chunk)
                    f.flush()
                    written += len(chunk)
        except OSError as exc:
            return [written, type(exc).__name__]
    return [written, 'no limit']
"""
    written, error = await probe(box, code)
    assert error != "no limit" and written <= box.limits.tmp_bytes, (written, error)


async def test_open_files_are_capped(box: Sandbox) -> None:
    code = """
def probe():
    files = []
    try:
        while len(files) < 100000:
            files.append(open('/dev/null'))
    except OSError as exc:
        return [len(files), type(exc).__name__]
    return [len(files), 'no limit']
"""
    count, error = await probe(box, code)
    assert error == "OSError" and count < box.limits.open_files, (count, error)


async def test_output_and_reports_are_bounded(box: Sandbox) -> None:
    flood = """
import os, sys

def probe():
    block = 'y' * 65536
    for _ in range(2000):  # 128 MiB on stdout
        sys.stdout.write(block)
    for _ in range(2000):  # and as reports on the supervisor's channel
        os.write(3, (block + '\\n').encode())
    return 'flooded'
"""
    result = await run_answer(box, flood)
    assert result.killed == "overflow"
    assert sum(len(str(m)) for m in result.messages) <= 2 * box.limits.message_bytes
