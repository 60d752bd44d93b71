"""Session stores (study §4.10 items 4 and 14): round-trips, ordering, locking, two processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop, agent_loop_continue
from phi_core.sessions import (
    JsonFileSessionStore,
    LoopRecord,
    Session,
    SessionNotFoundError,
    SessionRecorder,
    SessionStore,
    SqliteSessionStore,
    delete_session,
    list_session_ids,
    load_session,
    load_sessions_for_agent,
    open_session_store,
    save_session,
)
from phi_core.testing import ScriptedProvider
from phi_core.types import UserMessage


def session(session_id: str, agent_id: str = "agent", loops: int = 1) -> Session:
    return Session(
        session_id=session_id,
        agent_id=agent_id,
        loops=[
            LoopRecord(loop_id=f"{session_id}.x.{n}", session_id=session_id, status="completed")
            for n in range(1, loops + 1)
        ],
    )


@pytest.fixture(params=["json", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SessionStore:
    if request.param == "json":
        return JsonFileSessionStore(tmp_path / "sessions")
    return SqliteSessionStore(tmp_path / "sessions.db")


async def test_store_round_trip_list_delete_and_agent_filter(store: SessionStore) -> None:
    assert await store.list_ids() == []
    for sid, agent in [("s1", "a"), ("s2", "b"), ("s3", "a")]:
        await store.save(session(sid, agent))
        await asyncio.sleep(0.05)  # distinct modification times for the newest-first order
    assert await store.list_ids() == ["s3", "s2", "s1"]
    loaded = await store.load("s2")
    assert loaded == session("s2", "b")
    assert sorted(s.session_id for s in await store.list_for_agent("a")) == ["s1", "s3"]
    assert await store.list_for_agent("nobody") == []
    await store.delete("s2")
    with pytest.raises(SessionNotFoundError, match="s2"):
        await store.load("s2")
    with pytest.raises(SessionNotFoundError):
        await store.delete("s2")


async def test_a_recorded_session_saved_and_reloaded_is_equal(store: SessionStore) -> None:
    recorder = SessionRecorder()
    provider = ScriptedProvider(["one", "two"])
    ctx = AgentContext(agent_id="a", session_id="rec", loop_id="rec.s.1")
    cfg = AgentLoopConfig(provider=provider)
    await agent_loop("hi", ctx, cfg, events=recorder)
    ctx.messages.append(UserMessage.text("again"))
    ctx.parent_loop_id, ctx.loop_id, ctx.continuation_kind = "rec.s.1", "rec.s.2", "default"
    await agent_loop_continue(ctx, cfg, events=recorder)
    recorder.flush()
    [recorded] = recorder.drain_completed()
    assert len(recorded.loops) == 2 and recorded.loops[0].events
    await store.save(recorded)
    assert await store.load("rec") == recorded


async def test_eight_concurrent_saves_of_one_session_all_succeed(tmp_path: Path) -> None:
    store = JsonFileSessionStore(tmp_path)
    await asyncio.gather(*(store.save(session("same", loops=n)) for n in range(1, 9)))
    _check_valid_and_no_temp_files(tmp_path)


def _check_valid_and_no_temp_files(directory: Path) -> None:
    data = json.loads((directory / "same.json").read_text())
    assert data["session_id"] == "same" and 1 <= len(data["loops"]) <= 8
    assert not list(directory.glob("*.tmp")) and not list(directory.glob(".*.tmp"))


def test_free_functions_work_on_a_directory(tmp_path: Path) -> None:
    path = save_session(session("f1", "a"), tmp_path)
    assert path == tmp_path / "f1.json"
    assert load_session("f1", tmp_path).session_id == "f1"
    assert list_session_ids(tmp_path) == ["f1"]
    assert [s.session_id for s in load_sessions_for_agent("a", tmp_path)] == ["f1"]
    delete_session("f1", tmp_path)
    assert list_session_ids(tmp_path) == []
    assert list_session_ids(tmp_path / "missing") == []


def test_session_ids_that_are_paths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="file name"):
        save_session(session("../escape"), tmp_path)


def test_store_spec_strings_pick_the_backend(tmp_path: Path) -> None:
    assert isinstance(open_session_store(f"sqlite:{tmp_path}/x"), SqliteSessionStore)
    assert isinstance(open_session_store(tmp_path / "s.db"), SqliteSessionStore)
    assert isinstance(open_session_store(f"json:{tmp_path}"), JsonFileSessionStore)
    assert isinstance(open_session_store(tmp_path), JsonFileSessionStore)


_WRITER = textwrap.dedent(
    """
    import sys
    from phi_core.sessions import LoopRecord, Session, open_session_store

    spec, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_session_store(spec)
    for n in range(count):
        loops = [LoopRecord(loop_id=f"{who}.x.{k}", session_id=who, status="completed")
                 for k in range(n % 7 + 1)]
        # Everyone also writes the shared session, so writers contend for the same file/row.
        store.save_sync(Session(session_id="shared", agent_id=who, loops=loops))
        store.save_sync(Session(session_id=f"{who}-{n}", agent_id=who, loops=loops))
    """
)


@pytest.mark.parametrize("backend", ["json", "sqlite"])
def test_two_processes_write_to_one_store_without_corrupting_it(
    tmp_path: Path, backend: str
) -> None:
    spec = str(tmp_path / "store") if backend == "json" else f"sqlite:{tmp_path}/store.db"
    count = 40
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, spec, who, str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("p1", "p2")
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    store = open_session_store(spec)
    ids = store.list_ids_sync()
    assert len(ids) == 2 * count + 1
    for sid in ids:
        loaded = store.load_sync(sid)  # every record parses: nothing half-written
        assert loaded.session_id == sid
    shared = store.load_sync("shared")
    assert shared.agent_id in ("p1", "p2")
    # a save merges with what is stored: neither writer's loops are lost
    assert {r.session_id for r in shared.loops} == {"p1", "p2"}
    assert len({r.loop_id for r in shared.loops}) == len(shared.loops) == 2 * 7
    if backend == "json":
        assert not list((tmp_path / "store").glob(".*.tmp"))
