"""A stored session continued elsewhere keeps every loop: saves merge into what is stored (under
the store's lock), loop ids are numbered after the stored ones and reserved before a run, and an
agent continuing a stored conversation links its first loop to it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from phi_core import BasicAgent
from phi_core.providers import RetryPolicy
from phi_core.sessions import (
    JsonFileSessionStore,
    LoopRecord,
    Session,
    SqliteSessionStore,
    build_context_from_session,
    merge_sessions,
    open_session_store,
)
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import message_text

BACKENDS = ["json", "sqlite"]


def spec_for(tmp_path: Path, backend: str) -> str:
    return str(tmp_path / "store") if backend == "json" else f"sqlite:{tmp_path}/store.db"


def run_script(script: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def loop(session_id: str, name: str, **kw: object) -> LoopRecord:
    return LoopRecord(loop_id=f"{session_id}.x.{name}", session_id=session_id, **kw)


# ---------------------------------------------------------------- continuing in another process

_FIRST = textwrap.dedent(
    """
    import asyncio, sys
    from phi_core import BasicAgent
    from phi_core.sessions import open_session_store
    from phi_core.testing import Reply, ScriptedProvider

    async def main():
        store = open_session_store(sys.argv[1])
        provider = ScriptedProvider([Reply("one"), Reply("two")], name="scripted:x")
        agent = BasicAgent("scripted:x").with_provider(provider).with_session_recorder(store=store)
        await agent.prompt("q1")
        await agent.prompt("q2")
        print(agent.session_id)

    asyncio.run(main())
    """
)

_RESUME = textwrap.dedent(
    """
    import asyncio, sys
    from phi_core import BasicAgent
    from phi_core.sessions import build_context_from_session, open_session_store
    from phi_core.testing import Reply, ScriptedProvider

    async def main():
        store = open_session_store(sys.argv[1])
        sid = sys.argv[2]
        messages = build_context_from_session(await store.load(sid))
        provider = ScriptedProvider([Reply("three")], name="scripted:x")
        agent = (
            BasicAgent("scripted:x", session_id=sid)
            .with_provider(provider)
            .with_session_recorder(store=store)
            .with_messages(messages)
        )
        await agent.prompt("q3")
        print(len(provider.requests[-1].messages))

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_session_continued_in_another_process_keeps_every_loop(
    tmp_path: Path, backend: str
) -> None:
    spec = spec_for(tmp_path, backend)
    sid = run_script(_FIRST, spec)
    sent = run_script(_RESUME, spec, sid)
    assert sent == "5"  # q1, one, q2, two, q3: the second process saw the whole conversation

    session = open_session_store(spec).load_sync(sid)
    ids = [r.loop_id for r in session.loops]
    assert ids == [f"{sid}.scripted.x.1", f"{sid}.scripted.x.2", f"{sid}.scripted.x.3"]
    assert all(r.status == "completed" for r in session.loops)
    first, second, third = session.loops
    assert third.parent_loop_id == second.loop_id  # continues the stored conversation
    assert third.loop_id in second.children_loop_ids
    assert session.agent_id == first.agent_id  # the session keeps its identity
    texts = [message_text(m) for m in build_context_from_session(session)]
    assert texts == ["q1", "one", "q2", "two", "q3", "three"]


async def test_a_fresh_agent_on_a_stored_session_numbers_after_it_without_linking(
    tmp_path: Path,
) -> None:
    store = JsonFileSessionStore(tmp_path)
    first = BasicAgent("scripted:x").with_provider(
        ScriptedProvider([Reply("one"), Reply("two")], name="scripted:x")
    )
    first.with_session_recorder(store=store)
    await first.prompt("q1")
    await first.prompt("q2")
    sid = first.session_id
    # Another agent on the same session, with a history of its own (not the stored one).
    other = BasicAgent("scripted:x", session_id=sid).with_provider(
        ScriptedProvider([Reply("b")], name="scripted:x")
    )
    other.with_session_recorder(store=store)
    await other.prompt("unrelated")
    session = await store.load(sid)
    assert [r.loop_id.rsplit(".", 1)[1] for r in session.loops] == ["1", "2", "3"]
    assert session.loops[2].parent_loop_id is None  # not the stored conversation: no link
    assert [message_text(m) for m in build_context_from_session(session)] == ["unrelated", "b"]
    # The first agent goes on in its own line, numbered after every stored loop.
    await first.with_provider(ScriptedProvider([Reply("three")], name="scripted:x")).prompt("q3")
    session = await store.load(sid)
    assert session.loops[-1].loop_id == f"{sid}.scripted.x.4"
    texts = [message_text(m) for m in build_context_from_session(session)]
    assert texts == ["q1", "one", "q2", "two", "q3", "three"]


async def test_loop_numbers_continue_after_the_highest_stored_one(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    sid = "gap"
    stored = Session(
        session_id=sid,
        loops=[
            LoopRecord(loop_id=f"{sid}.scripted.x.1", session_id=sid, status="completed"),
            LoopRecord(loop_id=f"{sid}.scripted.x.7", session_id=sid, status="completed"),
        ],
    )
    await store.save(stored)
    agent = BasicAgent("scripted:x", session_id=sid).with_provider(
        ScriptedProvider([Reply("a")], name="scripted:x")
    )
    await agent.with_session_recorder(store=store).prompt("go")
    assert agent.last_loop_id == f"{sid}.scripted.x.8"
    assert len((await store.load(sid)).loops) == 3


# ---------------------------------------------------------------- merging saves


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_save_merges_loops_by_id_and_never_drops_stored_ones(
    tmp_path: Path, backend: str
) -> None:
    store = open_session_store(spec_for(tmp_path, backend))
    await store.save(Session(session_id="s", agent_id="a", created_at=5, loops=[loop("s", "1")]))
    await store.save(Session(session_id="s", agent_id="b", created_at=9, loops=[loop("s", "2")]))
    updated = loop("s", "1", status="completed", end_reason="done")
    await store.save(Session(session_id="s", agent_id="b", loops=[updated]))
    session = await store.load("s")
    assert [(r.loop_id, r.status) for r in session.loops] == [
        ("s.x.1", "completed"),  # updated in place
        ("s.x.2", "running"),  # kept though the last save did not hold it
    ]
    assert (session.agent_id, session.created_at) == ("a", 5)


def test_merge_rules() -> None:
    stored = Session(
        session_id="s",
        loops=[
            loop("s", "1", status="completed", started_at=10),
            loop("s", "2", status="pending", started_at=11),
        ],
    )
    incoming = Session(
        session_id="s",
        loops=[
            loop("s", "1", status="pending", started_at=99),  # a placeholder: never overwrites
            loop("s", "2", status="completed", started_at=12, parent_loop_id="s.x.1"),
            loop("s", "3", status="completed", started_at=13),
        ],
    )
    merged = merge_sessions(stored, incoming)
    assert [(r.loop_id, r.status) for r in merged.loops] == [
        ("s.x.1", "completed"),
        ("s.x.2", "completed"),
        ("s.x.3", "completed"),
    ]
    assert merged.loops[0].children_loop_ids == ["s.x.2"]  # parent link added
    assert stored.loops[0].children_loop_ids == []  # arguments unchanged
    # Two different executions that share an id (different start times) are both kept.
    clash = Session(session_id="s", loops=[loop("s", "1", status="completed", started_at=50)])
    assert [r.started_at for r in merge_sessions(merged, clash).loops if r.loop_id == "s.x.1"] == [
        10,
        50,
    ]
    assert merge_sessions(None, incoming) is incoming


# ---------------------------------------------------------------- two writers


async def test_two_agents_writing_one_session_at_once_keep_both_loops(tmp_path: Path) -> None:
    store = JsonFileSessionStore(tmp_path)

    def agent(*texts: str) -> BasicAgent:
        provider = ScriptedProvider([Reply(t, delay=0.05) for t in texts], name="scripted:x")
        built = BasicAgent("scripted:x", session_id="shared").with_provider(provider)
        return built.with_retry(RetryPolicy.none()).with_session_recorder(store=store)

    a, b = agent("a1", "a2"), agent("b1", "b2")
    await asyncio.gather(a.prompt("from a"), b.prompt("from b"))
    await asyncio.gather(a.prompt("again a"), b.prompt("again b"))
    session = await store.load("shared")
    ids = [r.loop_id for r in session.loops]
    assert len(ids) == 4 and len(set(ids)) == 4
    assert all(r.status == "completed" for r in session.loops)
    texts = {message_text(m) for m in session.iter_messages()}
    assert texts == {"from a", "a1", "from b", "b1", "again a", "a2", "again b", "b2"}


_AGENT_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from phi_core import BasicAgent
    from phi_core.sessions import open_session_store
    from phi_core.testing import Reply, ScriptedProvider

    async def main():
        spec, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
        replies = [Reply(f"{who}-{n}", delay=0.01) for n in range(count)]
        provider = ScriptedProvider(replies, name="scripted:x")
        agent = BasicAgent("scripted:x", session_id="shared", agent_id=who)
        agent.with_provider(provider).with_session_recorder(store=open_session_store(spec))
        for n in range(count):
            await agent.prompt(f"{who} asks {n}")

    asyncio.run(main())
    """
)

_RAW_WRITER = textwrap.dedent(
    """
    import sys
    from phi_core.sessions import LoopRecord, Session, open_session_store

    spec, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_session_store(spec)
    for n in range(count):
        record = LoopRecord(loop_id=f"raw.{who}.{n}", session_id="raw", status="completed")
        store.save_sync(Session(session_id="raw", agent_id=who, loops=[record]))
    """
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_processes_adding_loops_to_one_session_lose_none(tmp_path: Path, backend: str) -> None:
    spec = spec_for(tmp_path, backend)
    count = 12
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, spec, who, str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for script in (_AGENT_WRITER, _RAW_WRITER)
        for who in ("p1", "p2")
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    store = open_session_store(spec)

    shared = store.load_sync("shared")
    ids = [r.loop_id for r in shared.loops]
    assert len(ids) == 2 * count and len(set(ids)) == 2 * count  # every loop, no id twice
    assert all(r.status == "completed" for r in shared.loops)
    for who in ("p1", "p2"):
        mine = [r for r in shared.loops if r.agent_id == who]
        assert [message_text(r.messages[-1]) for r in mine] == [f"{who}-{n}" for n in range(count)]

    raw = store.load_sync("raw")
    assert sorted(r.loop_id for r in raw.loops) == sorted(
        f"raw.{who}.{n}" for who in ("p1", "p2") for n in range(count)
    )
