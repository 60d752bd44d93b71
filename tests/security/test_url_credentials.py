"""Credentials written into an endpoint URL never reach the output, the events or the run log."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phi_core._paths import user_dir
from phi_core.cli import app
from phi_core.errors import redact


def test_a_password_in_an_endpoint_url_is_a_usage_error_that_does_not_show_it() -> None:
    model = "openai-compat:m2@http://ann:pw_hunter3_x@127.0.0.1:9/v1"
    result = CliRunner().invoke(
        app, ["race", "hi", "-m", model, "-m", "openai-compat:m1@http://127.0.0.1:9/v1"]
    )
    assert result.exit_code == 2
    assert "carries credentials" in result.stderr
    assert "pw_hunter3_x" not in result.output + result.stderr
    assert not (user_dir() / "logs.db").exists() or "pw_hunter3" not in _dump()


def test_a_key_in_an_endpoint_query_is_redacted_in_json_events_and_the_run_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_COMPAT_API_KEY", "not-a-real-key")
    model = "openai-compat:m1@http://127.0.0.1:9/v1?api_key=hunter2QUERYxyz"
    result = CliRunner().invoke(
        app, ["race", "hi", "-m", model, "-m", "openai-compat:m2@http://127.0.0.1:9/v1", "--json"]
    )
    assert result.stdout.count("\n") > 2, result.output  # the events were written
    assert "hunter2QUERYxyz" not in result.output + result.stderr
    assert "hunter2QUERYxyz" not in _dump()


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("http://u:secretpw@h/v1", "http://[REDACTED]@h/v1"),
        ("https://tok123@h/x", "https://[REDACTED]@h/x"),
        ("GET /x?token=abcdefgh&page=2", "GET /x?token=[REDACTED]&page=2"),
        ("max_tokens=123456 and user@example.com", "max_tokens=123456 and user@example.com"),
    ],
)
def test_redact_knows_url_credentials_and_token_parameters(text: str, shown: str) -> None:
    assert redact(text) == shown


def _dump() -> str:
    path: Path = user_dir() / "logs.db"
    if not path.exists():
        return ""
    with sqlite3.connect(path) as db:
        return "\n".join(db.iterdump())
