"""`-c`/`--cid`: `phi race` and `phi run` continue a logged conversation from the winner's
answer, racing the same branches (or the winner's model) unless told otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.cli._conversation import open_session, race_spec
from phi_core.config import DEFAULT_BRANCHES, plan_race
from phi_core.runlog import RunLog, RunRecord

SCRIPT = {
    "scripted:a": {"default": "A answers."},
    "scripted:b": {"default": "B answers best."},
    "scripted:c": {"default": "C answers."},
    "scripted:judge": {"default": "2"},
}
RACE = ["-m", "scripted:a", "-m", "scripted:b@temperature=0.5", "--judge", "scripted:judge"]


def phi(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def sent_messages(output: str) -> list[list[tuple[str, str]]]:
    """What each model request carried: (role, text) per message."""
    return [
        [
            (m["role"], "".join(c.get("text", "") for c in m["content"]))
            for m in e["payload"]["messages"]
        ]
        for e in jsonl(output)
        if e.get("type") == "turn_request"
    ]


def test_race_c_races_the_same_branches_again_from_the_winners_answer(script: str) -> None:
    first = phi("race", "What is X?", *RACE, "--json", "--script", script)
    assert first.exit_code == 0, first.output
    cid = jsonl(first.stdout)[-1]["conversation_id"]

    second = phi("race", "-c", "And Y?", "--json", "--script", script)
    assert second.exit_code == 0, second.output
    result = jsonl(second.stdout)[-1]
    assert result["conversation_id"] == cid
    assert [b["name"] for b in result["branches"]] == ["scripted:a", "scripted:b@temperature=0.5"]
    assert result["judge"] == "scripted:judge"
    branch_requests = sent_messages(second.stdout)[:2]
    for messages in branch_requests:  # every branch continues from the winner's answer
        assert messages == [
            ("user", "What is X?"),
            ("assistant", "B answers best."),
            ("user", "And Y?"),
        ]


def test_race_c_after_single_model_turns_races_the_conversations_branches_again(
    script: str,
) -> None:
    """A `run -c` turn between two races does not make `race -c` forget the branches: it races
    the conversation's newest race's branches, from the last answer."""
    phi("race", "What is X?", *RACE, "--script", script)
    assert phi("run", "-c", "Why?", "--script", script).exit_code == 0
    again = phi("race", "-c", "And Y?", "--json", "--script", script)
    assert again.exit_code == 0, again.output
    result = jsonl(again.stdout)[-1]
    assert [b["name"] for b in result["branches"]] == ["scripted:a", "scripted:b@temperature=0.5"]
    assert result["judge"] == "scripted:judge"
    assert sent_messages(again.stdout)[0][-3:] == [
        ("user", "Why?"),
        ("assistant", "B answers best."),
        ("user", "And Y?"),
    ]


def test_cid_takes_the_id_of_any_run_of_the_conversation_as_phi_logs_lists_it(
    script: str,
) -> None:
    first = phi("run", "About cats", "-m", "scripted:a", "--json", "--script", script)
    cats = jsonl(first.stdout)[-1]["conversation_id"]
    run_id = jsonl(CliRunner().invoke(app, ["logs", "--json"]).stdout)[0]["id"]
    phi("run", "About dogs", "-m", "scripted:c", "--script", script)
    for given in (run_id, run_id[:10].lower(), cats.lower()):
        follow = phi("run", "--cid", given, "More please", "--json", "--script", script)
        assert follow.exit_code == 0, (given, follow.output)
        assert jsonl(follow.stdout)[-1]["conversation_id"] == cats


def test_run_c_continues_with_the_winners_model_and_settings(script: str) -> None:
    phi("race", "What is X?", *RACE, "--script", script)
    follow = phi("run", "-c", "Why?", "--json", "--script", script)
    assert follow.exit_code == 0, follow.output
    events = jsonl(follow.stdout)
    assert events[-1]["model"] == "scripted:b"
    assert sent_messages(follow.stdout)[0][-3:] == [
        ("user", "What is X?"),
        ("assistant", "B answers best."),
        ("user", "Why?"),
    ]
    assert events[-2]["type"] == "agent_end"
    request = next(e for e in events if e.get("type") == "turn_request")
    assert request["payload"].get("temperature") == 0.5  # the winner's own settings


def test_an_explicit_model_wins_over_the_conversations(script: str) -> None:
    phi("run", "Hi", "-m", "scripted:a", "--system", "Be terse.", "--script", script)
    follow = phi("run", "-c", "More", "-m", "scripted:c", "--json", "--script", script)
    assert follow.exit_code == 0, follow.output
    request = next(e for e in jsonl(follow.stdout) if e.get("type") == "turn_request")
    assert jsonl(follow.stdout)[-1]["model"] == "scripted:c"
    assert request["payload"]["system_prompt"] == "Be terse."  # the conversation keeps it


def test_cid_picks_an_older_conversation(script: str) -> None:
    first = phi("run", "About cats", "-m", "scripted:a", "--json", "--script", script)
    cats = jsonl(first.stdout)[-1]["conversation_id"]
    phi("run", "About dogs", "-m", "scripted:c", "--script", script)
    follow = phi("run", "--cid", cats, "More please", "--json", "--script", script)
    assert follow.exit_code == 0, follow.output
    assert jsonl(follow.stdout)[-1]["conversation_id"] == cats
    assert sent_messages(follow.stdout)[0][0] == ("user", "About cats")
    logged = jsonl(CliRunner().invoke(app, ["logs", "--json", "--cid", cats]).stdout)
    assert [r["prompt"] for r in logged] == ["More please", "About cats"]


def test_a_failed_turn_is_logged_but_the_next_continues_from_the_last_answer(
    script: str,
) -> None:
    path = Path(script)
    path.write_text(json.dumps({**SCRIPT, "scripted:down": {"default": {"fail": "auth"}}}))
    phi("run", "one", "-m", "scripted:a", "--script", script)
    assert phi("run", "-c", "two", "-m", "scripted:down", "--script", script).exit_code == 1
    third = phi("run", "-c", "three", "--json", "--script", script)
    assert third.exit_code == 0, third.output
    assert jsonl(third.stdout)[-1]["model"] == "scripted:a"  # the last answer's model
    assert sent_messages(third.stdout)[0] == [
        ("user", "one"),
        ("assistant", "A answers."),
        ("user", "three"),
    ]
    statuses = [r["status"] for r in jsonl(CliRunner().invoke(app, ["logs", "--json"]).stdout)]
    assert statuses == ["ok", "error", "ok"]


def test_continuing_with_nothing_logged_or_an_unknown_id_is_a_usage_error(script: str) -> None:
    nothing = phi("run", "-c", "Hi", "--script", script)
    assert nothing.exit_code == 2 and "no conversation to continue" in nothing.stderr.lower()
    phi("run", "Hi", "-m", "scripted:a", "--script", script)
    unknown = phi("race", "--cid", "NOPE", "Hi", "--script", script)
    assert unknown.exit_code == 2 and "No conversation 'NOPE'" in unknown.stderr


def test_a_bandit_race_cannot_continue_and_says_what_to_do(script: str, tmp_path: Path) -> None:
    phi("run", "Hi", "-m", "scripted:a", "--script", script)
    refused = phi(
        "race",
        "-c",
        "More",
        *RACE,
        "-s",
        "bandit",
        "--state",
        str(tmp_path / "r.sqlite"),
        "--script",
        script,
    )
    assert refused.exit_code == 2 and "cannot continue a conversation" in refused.stderr


def test_a_race_file_after_c_is_pointed_at_config(script: str, tmp_path: Path) -> None:
    (tmp_path / "race.toml").write_text('strategy = "pick-first"\n')
    old_style = phi("race", "Q?", "-c", str(tmp_path / "race.toml"), "--script", script)
    assert old_style.exit_code == 2 and "--config" in old_style.stderr


def test_no_log_still_continues_but_does_not_record(script: str) -> None:
    phi("run", "Hi", "-m", "scripted:a", "--script", script)
    quiet = phi("run", "-c", "Again", "--no-log", "--json", "--script", script)
    assert quiet.exit_code == 0 and jsonl(quiet.stdout)[-1]["run_id"] is None
    assert len(jsonl(CliRunner().invoke(app, ["logs", "--json"]).stdout)) == 1


def test_continuing_the_default_race_races_the_defaults_with_their_limits() -> None:
    defaults = [b.model_dump(mode="json", exclude_none=True) for b in DEFAULT_BRANCHES]
    with RunLog() as log:
        log.write(
            RunRecord(
                kind="race",
                prompt="Q",
                status="ok",
                conversation_id="c",
                plan={
                    "branches": defaults,
                    "judge": {"name": "judge", "model": "local:smollm2"},
                    "strategy": "judge",
                },
                messages=[{"role": "user", "content": [{"type": "text", "text": "Q"}]}],
            )
        )
    with open_session(no_log=True, resume=True, cid=None) as session:
        plan = plan_race(race_spec(None, session.continuation, given_models=False))
    assert plan.labels == ["precise", "teacher", "storyteller"]
    assert all(c.max_tokens == 256 for c in plan.configs)  # the default race's own limit
