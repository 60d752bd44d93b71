"""`phi chat`: each turn runs (or races), continues from the winner and is logged under one
conversation; end of input, `exit` and Ctrl-C end it cleanly."""

from __future__ import annotations

import builtins
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from phi_core.cli import app

SCRIPT = {
    "scripted:a": {"default": "A says so."},
    "scripted:b": {"default": "B says better."},
    "scripted:judge": {"default": "2"},
}


def chat(*args: str, input: str) -> Any:
    return CliRunner().invoke(app, ["chat", *args], input=input)


def logged() -> list[dict[str, Any]]:
    out = CliRunner().invoke(app, ["logs", "--json", "-n", "0"]).stdout
    return [json.loads(line) for line in reversed(out.splitlines()) if line.strip()]


def test_each_turn_continues_from_the_last_answer_under_one_conversation(script: str) -> None:
    done = chat("-m", "scripted:a", "--script", script, input="first\nsecond\n")
    assert done.exit_code == 0, done.output
    assert done.stdout.count("A says so.") == 2
    runs = logged()
    assert [r["prompt"] for r in runs] == ["first", "second"]
    assert len({r["conversation_id"] for r in runs}) == 1
    shown = json.loads(CliRunner().invoke(app, ["logs", "show", "--json"]).stdout)
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"] * 2


def test_several_models_race_every_turn(script: str) -> None:
    done = chat(
        "-m",
        "scripted:a",
        "-m",
        "scripted:b",
        "--judge",
        "scripted:judge",
        "--script",
        script,
        input="which?\n",
    )
    assert done.exit_code == 0, done.output
    assert "Winner: scripted:b" in done.stdout
    (run,) = logged()
    assert run["kind"] == "race" and run["winner"] == "scripted:b"


def test_exit_ends_the_chat_and_blank_lines_are_skipped(script: str) -> None:
    done = chat("-m", "scripted:a", "--script", script, input="\n  \none\nexit\nnever sent\n")
    assert done.exit_code == 0
    assert [r["prompt"] for r in logged()] == ["one"]


def test_a_trailing_backslash_continues_the_message_on_the_next_line(script: str) -> None:
    chat("-m", "scripted:a", "--script", script, input="line one\\\nline two\n")
    assert [r["prompt"] for r in logged()] == ["line one\nline two"]


def test_chat_c_picks_up_the_last_conversation_with_its_model(script: str) -> None:
    first = chat("-m", "scripted:b", "--script", script, input="hello\n")
    assert first.exit_code == 0
    again = chat("-c", "--script", script, input="more\n")
    assert again.exit_code == 0, again.output
    assert "continuing, 1 earlier turns" in again.stderr
    runs = logged()
    assert [r["winner_model"] for r in runs] == ["scripted:b", "scripted:b"]
    assert runs[0]["conversation_id"] == runs[1]["conversation_id"]


def test_ctrl_c_at_the_prompt_ends_the_chat_with_130(
    script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = iter(["one"])

    def fake_input(prompt: str = "") -> str:
        try:
            return next(answers)
        except StopIteration:
            raise KeyboardInterrupt from None

    monkeypatch.setattr(builtins, "input", fake_input)
    done = CliRunner().invoke(app, ["chat", "-m", "scripted:a", "--script", script])
    assert done.exit_code == 130
    assert [r["prompt"] for r in logged()] == ["one"]


def test_a_usage_mistake_stops_before_the_first_prompt(script: str) -> None:
    done = chat("-m", "nope:x", "--script", script, input="hello\n")
    assert done.exit_code == 2 and "Unknown provider 'nope'" in done.stderr
    assert logged() == []


def test_a_message_that_is_not_utf8_is_refused_naming_the_byte_and_the_chat_goes_on(
    script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = iter([b"caf\xe9".decode("utf-8", "surrogateescape"), "fine"])

    def fake_input(prompt: str = "") -> str:
        try:
            return next(answers)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr(builtins, "input", fake_input)
    done = CliRunner().invoke(app, ["chat", "-m", "scripted:a", "--script", script])
    assert done.exit_code == 0
    assert "The message is not valid UTF-8 text (byte 0xe9 at position 3)" in done.stderr
    assert "bytes.decode" not in done.output and "Python" not in done.output
    assert [r["prompt"] for r in logged()] == ["fine"]
