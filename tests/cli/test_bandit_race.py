"""`phi race --strategy bandit`: the learned racing pipeline through the CLI, with state that
persists between runs and is visible through `phi route show`."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.routing import spool_path

JUDGE_REPLY = json.dumps(
    {
        "scores": [
            {"answer": 1, "reason": "r", "relevance": 0.9, "coverage": 0.9, "faithfulness": 0.9},
            {"answer": 2, "reason": "r", "relevance": 0.2, "coverage": 0.2, "faithfulness": 0.2},
        ]
    }
)


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            {
                "scripted:a": {"default": "Answer from A."},
                "scripted:b": {"default": "Answer from B."},
                "scripted:judge": {"default": JUDGE_REPLY},
            }
        )
    )
    return str(path)


def test_bandit_race_answers_learns_and_persists_router_state(tmp_path: Path, script: str) -> None:
    runner = CliRunner()
    state = str(tmp_path / "router.sqlite")
    args = [
        "race", "What is entanglement?", "-m", "scripted:a", "-m", "scripted:b",
        "--strategy", "bandit", "--judge", "scripted:judge", "--state", state,
        "--script", script, "--json", "--top-k", "2",
    ]  # fmt: skip
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    lines = [json.loads(line) for line in first.stdout.strip().splitlines()]
    payload = lines[-1]
    events = [line["type"] for line in lines[:-1]]
    assert "agent_start" in events and "message_update" in events  # every event, then the result
    assert payload["type"] == "race_result" and payload["status"] == "ok"
    winner = payload["winner"]["name"]  # the winner object of a race's result
    assert winner in ("scripted:a", "scripted:b")
    assert payload["text"] == payload["winner"]["text"] == f"Answer from {winner[-1].upper()}."
    assert set(payload["rewards"]) == {"scripted:a", "scripted:b"}

    shown = runner.invoke(app, ["route", "show", "--state", state, "--json"])
    assert shown.exit_code == 0, shown.output
    arms = next(iter(json.loads(shown.stdout).values()))
    # the answering arm learned from its graded answer (weight 1), the other from its preview (0.5)
    assert sorted(stats["n"] for stats in arms.values()) == [0.5, 1.0]
    assert arms[winner]["n"] == 1.0

    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    shown = runner.invoke(app, ["route", "show", "--state", state, "--json"])
    arms = next(iter(json.loads(shown.stdout).values()))
    # the second race learned from its answer (1) and from the other arm's preview (0.5): the
    # previews came from the preview cache, but the judge scored them afresh in this race
    assert sum(stats["n"] for stats in arms.values()) == 3.0


def test_bandit_race_rejects_an_unknown_provider_as_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["race", "Q?", "-m", "nope:x", "--strategy", "bandit", "--state", str(tmp_path / "s.db")],
    )
    assert result.exit_code == 2
    assert "Unknown provider 'nope'" in result.output


def test_bandit_race_verify_falls_back_to_an_answer_that_passes(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            {
                "scripted:a": {"default": "I think the answer is C."},
                "scripted:b": {"default": "C"},
                "scripted:judge": {"default": JUDGE_REPLY},
            }
        )
    )
    args = [
        "race", "Pick A-D.", "-m", "scripted:a", "-m", "scripted:b", "--strategy", "bandit",
        "--judge", "scripted:judge", "--state", str(tmp_path / "s.db"), "--script", str(path),
        "--json", "--verify", "regex:^[A-D]$",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert payload["text"] == "C" and payload["winner"]["name"] == "scripted:b"
    assert payload["verified"] is True
    if payload["attempts"][0][0] == "scripted:a":
        assert payload["attempts"][0][1] == "unverified"


def test_verify_is_a_usage_error_when_bad_or_without_the_bandit_strategy(
    tmp_path: Path, script: str
) -> None:
    runner = CliRunner()
    base = ["race", "Q?", "-m", "scripted:a", "-m", "scripted:b", "--script", script]
    bad = runner.invoke(
        app, [*base, "--strategy", "bandit", "--state", str(tmp_path / "s.db"), "--verify", "json"]
    )
    assert bad.exit_code == 2 and "Unknown verify check 'json'" in bad.output
    other = runner.invoke(app, [*base, "--strategy", "vote", "--verify", "python"])
    assert other.exit_code == 2 and "--verify applies to --strategy bandit" in other.output


@pytest.mark.parametrize(
    ("name", "garbage"),
    [("router.sqlite", b"\0" * 4096), ("router.json", b'{"version": 1, "namespaces": []}')],
)
def test_a_bandit_race_moves_a_state_of_the_wrong_shape_aside_and_learns_afresh(
    tmp_path: Path, script: str, name: str, garbage: bytes
) -> None:
    state = tmp_path / name
    state.write_bytes(garbage)
    if name.endswith(".json"):  # its preview cache beside it is garbage too
        (tmp_path / f"{name}.cache.sqlite").write_bytes(b"not a database" * 100)
    args = [
        "race", "What is entanglement?", "-m", "scripted:a", "-m", "scripted:b",
        "--strategy", "bandit", "--judge", "scripted:judge", "--state", str(state),
        "--script", script, "--json", "--top-k", "2",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert [p.read_bytes() for p in tmp_path.glob(f"{name}.corrupt-*")] == [garbage]
    # Learning restarted from empty statistics: the same as one race on a fresh state.
    fresh = tmp_path / "fresh" / name
    fresh.parent.mkdir()
    fresh_args = [str(fresh) if a == str(state) else a for a in args]
    assert CliRunner().invoke(app, fresh_args).exit_code == 0
    learned = []
    for where in (state, fresh):
        shown = CliRunner().invoke(app, ["route", "show", "--state", str(where), "--json"])
        assert shown.exit_code == 0, shown.output
        arms = next(iter(json.loads(shown.stdout).values()))
        learned.append(sum(arm["n"] for arm in arms.values()))
    assert learned[0] == learned[1] > 0


def test_a_bandit_race_says_when_router_updates_could_not_reach_redis(
    tmp_path: Path, script: str
) -> None:
    with socket.socket() as s:  # a port nobody listens on: Redis is down for the whole run
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [
        "race", "What is entanglement?", "-m", "scripted:a", "-m", "scripted:b",
        "--strategy", "bandit", "--judge", "scripted:judge",
        "--state", f"redis://127.0.0.1:{port}/0", "--script", script, "--top-k", "2",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    # The warning names the spool the updates were kept in, and the spool holds them.
    spool = spool_path(f"redis://127.0.0.1:{port}/0", "phi:router:v1")
    stderr = " ".join(result.stderr.split())  # the warning may be wrapped
    assert "router update(s) could not be stored yet" in stderr
    assert f"kept in {spool}" in stderr and "the next run with this state pushes them" in stderr
    waiting = int(stderr.split(" router update(s) could not be stored yet")[0].split()[-1])
    updates = json.loads(spool.read_text())["updates"]
    assert waiting == len(updates) >= 1 and all(u["delta"]["n"] > 0 for u in updates)
