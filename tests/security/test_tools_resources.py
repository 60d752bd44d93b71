"""Resource exhaustion: huge files, huge lines, binary data, floods of output, FIFOs, slow
patterns, runaway processes and model-chosen timeouts all stay bounded."""

from __future__ import annotations

import asyncio
import os
import shutil
import tracemalloc
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest

from phi_core.tools import (
    BashSettings,
    BashTool,
    ListFilesTool,
    ReadFileTool,
    ReadSettings,
    SearchSettings,
    SearchTool,
)
from phi_core.tools._results import to_tool_result

from ..tools.helpers import ctx, run, text
from .conftest import Layout

T = TypeVar("T")
MB = 1024 * 1024


async def peak_memory(work: Awaitable[T]) -> tuple[T, int]:
    """The result of ``work`` and the peak of Python allocations (all threads) while it ran."""
    tracemalloc.start()
    try:
        result = await work
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def write_text_file(path: Path, size: int) -> None:
    block = b"".join(b"line %06d of a big text file\n" % i for i in range(40_000))
    with path.open("wb") as handle:
        written = 0
        while written < size:
            handle.write(block)
            written += len(block)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"  # a zombie is dead
    except OSError:  # gone (FileNotFoundError, or ESRCH while it was going)
        return False


async def dies(pid: int) -> bool:
    """Whether ``pid`` is gone within 5 s (SIGKILL is delivered asynchronously; another
    process's death cannot be awaited, so this polls)."""
    for _ in range(500):
        if not alive(pid):
            return True
        await asyncio.sleep(0.01)
    return False


async def test_reading_one_line_of_a_huge_file_reads_almost_nothing(layout: Layout) -> None:
    big = layout.workspace / "big.log"
    write_text_file(big, 100 * MB)  # above the size whose lines are counted
    result, peak = await peak_memory(run(ReadFileTool(layout.workspace), path="big.log", limit=1))
    assert text(result).startswith("[Lines 1-1 of a 10") and "line 000000" in text(result)
    assert peak < 4 * MB, peak
    window = await run(ReadFileTool(layout.workspace), path="big.log", offset=300_000, limit=2)
    assert "[Lines 300000-300001" in text(window) and "line 019999" in text(window)


async def test_a_huge_line_is_cut_without_loading_it(layout: Layout) -> None:
    (layout.workspace / "one.txt").write_bytes(b"x" * (50 * MB) + b"\nnext\n")
    result, peak = await peak_memory(run(ReadFileTool(layout.workspace), path="one.txt"))
    out = text(result)
    assert len(out) < 3000 and "line cut: 52426800 more bytes" in out and "next" in out
    assert peak < 4 * MB, peak


async def test_binary_files_are_reported_not_dumped(layout: Layout) -> None:
    (layout.workspace / "blob.bin").write_bytes(os.urandom(900 * 1024))
    result = await run(ReadFileTool(layout.workspace), path="blob.bin")
    assert text(result).startswith("blob.bin is a binary file (921600 bytes)")
    assert "\ufffd" not in text(result)


async def test_a_read_without_limit_stops_at_the_byte_cap(layout: Layout) -> None:
    write_text_file(layout.workspace / "mid.txt", 2 * MB)
    result = await run(ReadFileTool(layout.workspace), path="mid.txt")
    out = text(result)
    assert len(out.encode()) < 260 * 1024 and "continue with offset=" in out


async def test_a_flood_of_command_output_is_kept_bounded(layout: Layout) -> None:
    bash = BashTool(layout.workspace, BashSettings(max_output_bytes=64 * 1024))
    command = "head -c 300000000 /dev/zero | tr '\\0' a; echo; echo THE-END"
    result, peak = await peak_memory(run(bash, command=command))
    out = text(result)
    assert result.details["stdout_bytes"] == 300_000_009
    assert len(out) < 70 * 1024 and out.rstrip().endswith("THE-END")
    assert "bytes of output left out" in out
    assert peak < 8 * MB, peak


async def test_binary_command_output_is_summarised(layout: Layout) -> None:
    result = await run(BashTool(layout.workspace), command="head -c 100000 /dev/urandom")
    assert "[binary output, 100000 bytes, not shown]" in text(result)


async def test_the_whole_process_group_dies_on_timeout(layout: Layout) -> None:
    bash = BashTool(layout.workspace, BashSettings(isolate="never"))  # pids as seen from here
    result = await run(bash, command="sleep 300 & echo $! > pid; sleep 300", timeout=0.5)
    assert result.is_error and "timed out after 0.5s" in text(result)
    assert await dies(int((layout.workspace / "pid").read_text()))


def running(*argv: str) -> bool:
    """Whether a process with exactly this command line exists on this machine."""
    wanted = "\0".join(argv) + "\0"
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline") as handle:
                if handle.read() == wanted and alive(int(entry)):
                    return True
        except (OSError, ValueError):
            continue
    return False


@pytest.mark.parametrize("isolate", ["processes", "filesystem"])
async def test_with_isolation_even_daemons_die_with_the_command(
    layout: Layout, isolate: str
) -> None:
    if shutil.which({"processes": "unshare", "filesystem": "bwrap"}[isolate]) is None:
        pytest.skip("the isolation tool is missing")
    bash = BashTool(layout.workspace, BashSettings(isolate=isolate, exit_grace=0.2))  # type: ignore[arg-type]
    result = await run(
        bash,
        approver=lambda request: True,  # `ls /proc` needs approval
        command="setsid sleep 311 >/dev/null 2>&1 & ls /proc | grep -c '^[0-9]'",
    )
    assert not result.is_error and int(text(result).split("\n")[1]) < 8, text(result)
    for _ in range(500):  # another process's death cannot be awaited
        if not running("sleep", "311"):
            break
        await asyncio.sleep(0.01)
    assert not running("sleep", "311")


async def test_a_model_chosen_timeout_is_capped(layout: Layout) -> None:
    bash = BashTool(layout.workspace, BashSettings(timeout=5, max_timeout=0.5))
    result = await run(bash, command="sleep 30", timeout=1e9)
    assert result.is_error and "timeout capped at 0.5s" in text(result)
    assert "timed out after 0.5s" in text(result)


async def test_cancelling_the_call_kills_the_command(layout: Layout) -> None:
    bash = BashTool(layout.workspace, BashSettings(isolate="never"))
    task = asyncio.create_task(
        bash.execute({"command": "sleep 300 & echo $! > pid; wait"}, ctx(args={}))
    )
    pid_file = layout.workspace / "pid"
    for _ in range(500):  # the command is another process: nothing to await but its file
        if pid_file.exists() and pid_file.read_text().strip():
            break
        await asyncio.sleep(0.01)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert await dies(int(pid_file.read_text()))


async def test_a_sparse_file_of_one_endless_line_stops_at_the_read_budget(layout: Layout) -> None:
    """8 KiB of text, then a 64 GiB hole: without a budget the skipped line is read for minutes
    (and a cancelled call's thread would go on reading)."""
    sparse = layout.workspace / "big.txt"
    sparse.write_bytes(b"a" * 8192)
    os.truncate(sparse, 64 * 1024 * MB)
    read = ReadFileTool(layout.workspace, ReadSettings(timeout=0.2))
    result = await run(read, path="big.txt", limit=1)
    assert result.is_error and "read_file stopped after 0.2s in big.txt" in text(result)
    assert "head -c 2000 big.txt" in text(result)


async def test_a_cancelled_read_stops_its_thread(layout: Layout) -> None:
    sparse = layout.workspace / "big.txt"
    sparse.write_bytes(b"a" * 8192)
    os.truncate(sparse, 64 * 1024 * MB)
    context = ctx(args={})
    context.cancel.cancel()  # the run was cancelled: the thread stops at its next check
    result = await ReadFileTool(layout.workspace).run(
        ReadFileTool.arguments(path="big.txt", limit=1), context
    )
    assert result.is_error and "Cancelled." in text(result)


@pytest.mark.parametrize("isolate", ["filesystem", "processes", "never"])
async def test_commands_run_under_process_and_file_size_limits(
    layout: Layout, isolate: str
) -> None:
    settings = BashSettings(isolate=isolate, max_processes=64, max_file_bytes=MB)  # type: ignore[arg-type]
    bash = BashTool(layout.workspace, settings)
    result = await run(
        bash, command="ulimit -u; ulimit -f; head -c 2000000 /dev/zero > big; echo wrote $?"
    )
    processes, file_blocks, wrote = text(result).split("STDOUT:\n")[1].splitlines()[:3]
    # the process limit is set inside the isolation only (without it, it would count every
    # process of the user); the kernel does not enforce it for root
    assert (processes == "64") == (isolate != "never"), processes
    assert file_blocks == "1024"  # bash counts 1 KiB blocks
    assert (layout.workspace / "big").stat().st_size == MB  # the write stopped at the limit
    assert wrote != "wrote 0" and "File size limit exceeded" in text(result)


async def test_stdin_is_closed_and_background_jobs_do_not_hold_the_call(layout: Layout) -> None:
    bash = BashTool(layout.workspace, BashSettings(exit_grace=0.2, isolate="never"))
    waiting = await run(bash, command="cat; echo read-nothing")
    assert "read-nothing" in text(waiting)
    result = await run(bash, command="sleep 300 & echo $! > pid; echo started")
    assert "started" in text(result) and "background processes" in text(result)
    assert await dies(int((layout.workspace / "pid").read_text()))


async def test_a_fifo_in_a_searched_folder_is_skipped(layout: Layout) -> None:
    os.mkfifo(layout.workspace / "pipe")
    (layout.workspace / "a.txt").write_text("needle\n")
    found = await asyncio.wait_for(run(SearchTool(layout.workspace), pattern="needle"), 10)
    assert text(found) == "1 matches:\na.txt:1: needle"
    listing = await asyncio.wait_for(run(ListFilesTool(layout.workspace)), 10)
    assert "pipe (fifo)" in text(listing)


async def test_a_catastrophic_pattern_stops_at_the_time_budget(layout: Layout) -> None:
    (layout.workspace / "a.txt").write_text(("a" * 3000 + "b\n") * 3)
    search = SearchTool(layout.workspace, SearchSettings(timeout=0.5))
    result = await asyncio.wait_for(run(search, pattern="(a+)+$"), 10)
    assert "search stopped after 0.5s" in text(result)


async def test_listing_and_search_stop_at_their_result_budgets(layout: Layout) -> None:
    for i in range(300):
        (layout.workspace / f"f{i:03}.txt").write_text("hit\n")
    listing = text(await run(ListFilesTool(layout.workspace)))
    assert len(listing.splitlines()) == 201 and "more than 200 files" in listing
    found = text(await run(SearchTool(layout.workspace), pattern="hit"))
    assert found.startswith("50 matches:") and "limit of 50 matches reached" in found


async def test_a_tool_result_too_big_for_the_model_is_cut_with_a_note() -> None:
    from phi_core.tools._results import finish_result

    result = finish_result(to_tool_result("x" * (50 * MB)), 256 * 1024)
    out = text(result)
    assert len(out.encode()) < 257 * 1024
    assert "tool result truncated: 52166656 of 52428800 bytes left out" in out


def test_a_key_cut_by_the_result_cap_is_redacted_not_half_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the kept part of a huge result is redacted, but a key straddling the cut is still
    recognised whole: no run of its characters reaches the model."""
    from phi_core.tools._results import finish_result, to_tool_result

    key = "sk-test-" + "Q7vN2xL9pR4tW8yZ3mK6bH1cF5dJ0gSa"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    cap = 1024
    for cut in range(cap - len(key) + 1, cap, 3):  # the key starts before the cut and ends after
        value = "x" * cut + key + "y" * (5 * MB)
        result = finish_result(to_tool_result(value), cap)
        text = "".join(getattr(c, "text", "") for c in result.content)
        assert "tool result truncated" in text
        kept = text.split("\n[... tool result truncated")[0]
        assert not any(key[i : i + 8] in kept for i in range(len(key) - 8)), cut


@pytest.mark.skipif(os.geteuid() != 0, reason="only a command run by root can plant setuid root")
async def test_run_by_root_a_command_leaves_no_setuid_program_behind(layout: Layout) -> None:
    bash = BashTool(layout.workspace, BashSettings(isolate="never"))
    result = await run(bash, command="cp /bin/true mine && chmod 4755 mine && mkdir -p d && "
                       "cp /bin/true d/group && chmod 2755 d/group")  # fmt: skip
    for name in ("mine", "d/group"):
        mode = (layout.workspace / name).stat().st_mode
        assert not mode & (0o4000 | 0o2000) and mode & 0o755 == 0o755, (name, oct(mode))
    assert "the setuid/setgid bits of" in text(result) and "mine" in text(result)
