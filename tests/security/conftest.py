"""Fixtures for the security tests: a workspace with an outside world next to it, and a fake API
key in the environment (the marker that must never reach anything the model sees)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Layout:
    workspace: Path
    outside: Path
    secret_file: Path
    marker: str  # the content of the outside file


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    marker = "OUTSIDE-" + secrets.token_hex(8)
    secret_file = outside / "secret.txt"
    secret_file.write_text(marker + "\n")
    (workspace / "notes.txt").write_text("inside\n")
    return Layout(workspace.resolve(), outside.resolve(), secret_file.resolve(), marker)


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fake OpenAI key in this process's environment, as a user running phi would have."""
    value = "sk-hostile-" + secrets.token_hex(16)
    monkeypatch.setenv("OPENAI_API_KEY", value)
    return value
