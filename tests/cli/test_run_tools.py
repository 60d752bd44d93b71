"""`phi run --tools`: the built-in tools in a workspace, and the y/N approval prompt."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phi_core.cli import _tools as cli_tools
from phi_core.cli import app
from phi_core.tools import ApprovalRequest


def script(tmp_path: Path, commands: list[str]) -> str:
    turns: list[Any] = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": c}} for c in commands]},
        "done",
    ]
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"scripted:a": turns}), encoding="utf-8")
    return str(path)


class Terminal:
    """Stands in for /dev/tty: answers from a list, records what was asked."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    def __call__(self) -> tuple[io.StringIO, io.StringIO]:
        reader = io.StringIO(self.answers.pop(0) + "\n")
        writer = _Recording(self.asked)
        return reader, writer


class _Recording(io.StringIO):
    def __init__(self, sink: list[str]) -> None:
        super().__init__()
        self.sink = sink

    def close(self) -> None:
        self.sink.append(self.getvalue())
        super().close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def invoke(tmp_path: Path, workspace: Path, commands: list[str]) -> Any:
    return CliRunner().invoke(
        app,
        ["run", "do it", "-m", "scripted:a", "--script", script(tmp_path, commands),
         "--tools", "--workspace", str(workspace)],
    )  # fmt: skip


def test_tools_work_in_the_workspace_and_refusals_are_shown(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_tools, "open_terminal", lambda: None)
    result = invoke(tmp_path, workspace, ["echo hi > made.txt", "rm -rf /"])
    assert result.exit_code == 0, result.output
    assert (workspace / "made.txt").read_text() == "hi\n"
    assert "→ bash: $ rm -rf /" in result.stderr
    assert "✗ bash: Command refused by the safety policy: it deletes /" in result.stderr


@pytest.mark.parametrize(("answer", "ran"), [("y", True), ("n", False), ("", False)])
def test_risky_commands_ask_yes_no_on_the_terminal(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, answer: str, ran: bool
) -> None:
    terminal = Terminal(answer)
    monkeypatch.setattr(cli_tools, "open_terminal", terminal)
    result = invoke(tmp_path, workspace, ["$(echo touch) asked.txt"])
    assert result.exit_code == 0, result.output
    assert (workspace / "asked.txt").exists() is ran
    assert len(terminal.asked) == 1
    assert "computed when the command runs" in terminal.asked[0]
    assert "$ $(echo touch) asked.txt" in terminal.asked[0] and "Allow? [y/N]" in terminal.asked[0]


def test_without_a_terminal_risky_commands_are_refused(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_tools, "open_terminal", lambda: None)
    result = invoke(tmp_path, workspace, ["$(echo touch) asked.txt"])
    assert not (workspace / "asked.txt").exists()
    assert "no terminal to ask for approval" in result.stderr


def test_a_workspace_without_tools_is_a_usage_error(tmp_path: Path, workspace: Path) -> None:
    result = CliRunner().invoke(
        app, ["run", "x", "-m", "scripted:a", "--script", script(tmp_path, []),
              "--workspace", str(workspace)],
    )  # fmt: skip
    assert result.exit_code == 2 and "add --tools" in result.output


async def test_the_terminal_approver_asks_one_question_at_a_time() -> None:
    import asyncio

    terminal = Terminal("y", "n")
    approve = cli_tools.terminal_approver(terminal)
    requests = [ApprovalRequest("bash", {"command": f"cmd{i}"}, "because") for i in range(2)]
    decisions = await asyncio.gather(*(approve(r) for r in requests))
    assert [d.approved for d in decisions] == [True, False]
    assert len(terminal.asked) == 2 and all(q.count("Allow?") == 1 for q in terminal.asked)
