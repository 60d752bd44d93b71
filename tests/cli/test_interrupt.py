"""Ctrl-C on a running `phi race`: every branch is cancelled, what arrived is printed, exit 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = {
    "scripted:a": [{"hang": "half an answer"}],
    "scripted:b": [{"hang": "another half"}],
    "scripted:c": [{"hang": "a third"}],
    "scripted:j": ["1"],
}
ARGS = ["-m", "scripted:a", "-m", "scripted:b", "-m", "scripted:c", "--judge", "scripted:j"]


def start_phi(tmp_path: Path, *args: str, script: dict[str, Any] = SCRIPT) -> subprocess.Popen[str]:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PHI_SCRIPT"] = str(path)
    return subprocess.Popen(
        [sys.executable, "-c", "from phi_core.cli import main; main()", "race", "Q?", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # a shell's background job ignores SIGINT: give the child the default disposition
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.timeout(60)
def test_ctrl_c_cancels_every_branch_and_reports_what_arrived_as_json(tmp_path: Path) -> None:
    proc = start_phi(tmp_path, *ARGS, "--json")
    assert proc.stdout is not None
    seen: set[str] = set()
    # Wait (by reading, not sleeping) until every branch has streamed its partial text.
    while len(seen) < 3:
        line = proc.stdout.readline()
        assert line, f"phi exited early: {proc.stderr.read() if proc.stderr else ''}"
        event = json.loads(line)
        if event["type"] == "message_update":
            seen.add(event["loop_id"])
    proc.send_signal(signal.SIGINT)
    rest, errors = proc.communicate(timeout=30)
    assert proc.returncode == 130, errors
    result = json.loads(rest.splitlines()[-1])
    assert result["type"] == "race_result"
    assert result["status"] == "cancelled"
    assert result["winner"] is None
    assert [b["status"] for b in result["branches"]] == ["cancelled"] * 3
    assert [b["text"] for b in result["branches"]] == ["half an answer", "another half", "a third"]
    ends = [json.loads(line) for line in rest.splitlines()[:-1]]
    assert sum(1 for e in ends if e["type"] == "agent_end") == 3  # one AgentEnd per branch


@pytest.mark.timeout(60)
def test_ctrl_c_in_plain_mode_prints_each_branch_and_exits_130(tmp_path: Path) -> None:
    proc = start_phi(tmp_path, *ARGS)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("Racing 3 branches")
    proc.send_signal(signal.SIGINT)
    rest, errors = proc.communicate(timeout=30)
    assert proc.returncode == 130, errors
    assert "Interrupted: every branch was cancelled" in rest
    for name in ("scripted:a", "scripted:b", "scripted:c"):
        assert f"--- {name} ({name}): cancelled" in rest


@pytest.mark.timeout(60)
def test_ctrl_c_after_one_branch_finished_names_it_instead_of_saying_all_were_cancelled(
    tmp_path: Path,
) -> None:
    script = {**SCRIPT, "scripted:a": ["four"]}
    proc = start_phi(tmp_path, *ARGS, script=script)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("Racing 3 branches")
    assert proc.stdout.readline().startswith("--- scripted:a (scripted:a): done")
    proc.send_signal(signal.SIGINT)
    rest, errors = proc.communicate(timeout=30)
    assert proc.returncode == 130, errors
    assert "every branch was cancelled" not in rest
    assert "2 of 3 branches were cancelled; scripted:a had finished (no winner was chosen)" in rest


@pytest.mark.timeout(60)
def test_ctrl_c_during_a_chat_turn_stops_that_turn_and_the_chat_goes_on(tmp_path: Path) -> None:
    script = tmp_path / "chat.json"
    script.write_text(json.dumps({"scripted:a": [{"hang": "partial"}, "second answer"]}))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PHI_SCRIPT"] = str(script)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from phi_core.cli import main; main()", "chat", "-m", "scripted:a"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # a shell's background job ignores SIGINT: give the child the default disposition
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("first\n")
    proc.stdin.flush()
    assert proc.stdout.read(len("partial")) == "partial"  # the turn is streaming
    proc.send_signal(signal.SIGINT)
    rest, errors = proc.communicate("second\nexit\n", timeout=30)
    assert proc.returncode == 0, errors
    assert "second answer" in rest and "Traceback" not in errors
    logged = subprocess.run(
        [sys.executable, "-c", "from phi_core.cli import main; main()", "logs", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    runs = [json.loads(line) for line in logged.stdout.splitlines()]
    assert [(r["prompt"], r["status"]) for r in runs] == [("second", "ok"), ("first", "cancelled")]
    assert runs[0]["conversation_id"] == runs[1]["conversation_id"]


def logged_runs(env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    shown = subprocess.run(
        [sys.executable, "-c", "from phi_core.cli import main; main()", "logs", "--json"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in shown.stdout.splitlines()]


@pytest.mark.timeout(60)
def test_sigterm_ends_a_race_as_ctrl_c_does_and_it_is_logged_once(tmp_path: Path) -> None:
    proc = start_phi(tmp_path, *ARGS)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("Racing 3 branches")
    proc.send_signal(signal.SIGTERM)
    rest, errors = proc.communicate(timeout=30)
    assert proc.returncode == 130, errors  # not killed on the spot (-15)
    assert "Interrupted: every branch was cancelled" in rest and "Traceback" not in errors
    [run] = logged_runs()
    assert run["kind"] == "race" and run["status"] == "cancelled"


def start_chat(
    tmp_path: Path, script: dict[str, Any]
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(script))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PHI_SCRIPT"] = str(path)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from phi_core.cli import main; main()", "chat", "-m", "scripted:a"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    return proc, env


@pytest.mark.timeout(60)
def test_sigterm_during_a_chat_turn_stops_the_turn_and_ends_the_chat(tmp_path: Path) -> None:
    proc, env = start_chat(tmp_path, {"scripted:a": [{"hang": "partial"}, "second answer"]})
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("first\n")
    proc.stdin.flush()
    assert proc.stdout.read(len("partial")) == "partial"  # the turn is streaming
    proc.send_signal(signal.SIGTERM)
    rest, errors = proc.communicate("second\n", timeout=30)
    assert proc.returncode == 130, errors
    assert "second answer" not in rest and "Traceback" not in errors
    assert [(r["prompt"], r["status"]) for r in logged_runs(env)] == [("first", "cancelled")]


@pytest.mark.timeout(60)
def test_sigterm_at_the_chat_prompt_ends_it_with_130(tmp_path: Path) -> None:
    proc, _ = start_chat(tmp_path, {"scripted:a": ["an answer"]})
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("Chat with scripted:a")  # it waits at the prompt
    proc.send_signal(signal.SIGTERM)
    _, errors = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in errors


@pytest.mark.parametrize("entry", ["phi", "parallel_agents"])
def test_ctrl_c_while_phi_core_is_still_loading_exits_130_without_a_traceback(entry: str) -> None:
    """The console scripts load phi-core (most of a second) inside their own handler."""
    child = (
        "import builtins, phi_entry\n"
        "real = builtins.__import__\n"
        "def interrupted(name, *args, **kwargs):\n"
        "    if name == 'phi_core.cli':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = interrupted\n"
        f"phi_entry.{entry}()\n"
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize("entry", ["phi", "parallel_agents"])
def test_ctrl_c_while_the_command_is_being_built_exits_130_without_a_traceback(entry: str) -> None:
    """After phi-core has loaded, typer still builds the command (reading every option's
    signature) before the command's own Ctrl-C handling is in place."""
    child = (
        "import inspect, phi_entry, phi_core.cli\n"
        "def interrupted(*args, **kwargs):\n"
        "    raise KeyboardInterrupt\n"
        "inspect.signature = interrupted  # typer reads the options' signatures\n"
        f"phi_entry.{entry}()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
