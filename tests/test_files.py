"""The one atomic-write-and-lock helper every file store uses."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from phi_core._files import atomic_write, file_lock


def test_atomic_write_replaces_whole_file_with_the_given_mode(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "state.json"
    atomic_write(target, b"old")
    atomic_write(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]  # no temporary left


def test_failed_write_leaves_target_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.json"
    atomic_write(target, b"kept")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, b"lost")
    assert target.read_bytes() == b"kept"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def _hold_lock(path: str, ready: object, release: object) -> None:
    with file_lock(Path(path)):
        ready.set()  # type: ignore[attr-defined]
        release.wait(10)  # type: ignore[attr-defined]


def test_lock_excludes_another_process_until_released(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(target), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        with (
            pytest.raises(TimeoutError, match="locked by another process"),
            file_lock(target, timeout=0.2),
        ):
            pass
        with pytest.raises(TimeoutError), file_lock(target, exclusive=False, timeout=0.2):
            pass  # a shared lock waits for an exclusive holder too
    finally:
        release.set()
        holder.join(10)
    with file_lock(target, timeout=1.0):  # free again once the holder let go
        assert holder.exitcode == 0
