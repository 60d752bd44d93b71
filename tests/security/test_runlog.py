"""Secrets and the user directory: API keys never reach the run log, stored keys stay 0600 and
are never printed, and a stored key is scrubbed from errors like any other.

Each test fails when its protection is removed (checked by removing it): the run-log tests
without ``_redacted`` in ``RunLog.write`` (``runlog/_store.py``), the file-mode test without
``secret=True`` in ``providers/keys.py``, the error test without ``register_secret`` in
``stored_keys``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.errors import AuthError, redact, register_secret
from phi_core.providers.keys import keys_path, stored_keys
from phi_core.runlog import BranchRecord, RunLog, RunRecord

VENDOR_KEY = "sk-live-ABCDEFGHIJKLMNOP0123456789"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("PHI_SCRIPT", "PHI_MODEL", "PHI_NO_LOG", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def log_bytes(directory: Path) -> bytes:
    """Everything the run log holds on disk (the database and its write-ahead log)."""
    return b"".join(p.read_bytes() for p in directory.iterdir() if p.name.startswith("logs.db"))


def test_keys_in_prompts_errors_verdicts_and_histories_never_reach_the_file(
    tmp_path: Path,
) -> None:
    registered = "my-private-token-9f8e7d6c5b"
    register_secret(registered)
    history = [{"role": "user", "content": [{"type": "text", "text": f"key={VENDOR_KEY}"}]}]
    record = RunRecord(
        kind="race",
        prompt=f"use {registered} please",
        status="error",
        branches=[
            BranchRecord(
                index=0,
                label="a",
                model="openai:gpt-4o",
                status="error",
                error=f"401 Incorrect API key provided: {VENDOR_KEY}",
                error_kind="auth",
            ),
        ],
        verdict={"rationale": f"Authorization: Bearer {VENDOR_KEY}"},
        messages=history,
    )
    with RunLog(tmp_path / "logs.db") as log:
        log.write(record)
        back = log.get_run(record.id)
    raw = log_bytes(tmp_path)
    assert VENDOR_KEY.encode() not in raw and registered.encode() not in raw
    assert b"Incorrect API key provided" in raw  # the error itself is kept
    assert back.branches[0].error == "401 Incorrect API key provided: [REDACTED]"


def test_a_key_in_a_prompt_an_answer_or_an_error_is_not_logged_by_the_cli(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "scripted:echo": [f"Your key {VENDOR_KEY} looks revoked."],
                "scripted:x": [{"fail": "auth", "message": f"Incorrect API key: {VENDOR_KEY}"}],
            }
        )
    )
    for model in ("scripted:echo", "scripted:x"):
        CliRunner().invoke(
            app, ["run", f"Is {VENDOR_KEY} valid?", "-m", model, "--script", str(script)]
        )
    runs = CliRunner().invoke(app, ["logs", "--json"]).stdout.splitlines()
    assert len(runs) == 2
    echoed = json.loads(runs[1])
    assert echoed["text"] == "Your key [REDACTED] looks revoked."
    assert VENDOR_KEY.encode() not in log_bytes(Path(os.environ["PHI_HOME"]))


def test_a_stored_key_file_is_0600_and_no_command_prints_the_key() -> None:
    key = "stored-key-without-a-known-prefix-42"
    stored = CliRunner().invoke(app, ["keys", "set", "anthropic"], input=key)
    assert stored.exit_code == 0, stored.output
    assert stat.S_IMODE(keys_path().stat().st_mode) == 0o600
    for command in (["keys"], ["keys", "--json"], ["models"], ["models", "--json"]):
        shown: Any = CliRunner().invoke(app, command)
        assert key not in shown.output, command


def test_a_stored_key_is_scrubbed_from_errors_that_echo_it() -> None:
    key = "stored-key-without-a-known-prefix-77"
    keys_path().parent.mkdir(parents=True, exist_ok=True)
    keys_path().write_text(json.dumps({"anthropic": key}))
    stored_keys()  # reading the stored keys registers them as secrets
    error = AuthError(f"invalid x-api-key {key}")
    assert key not in redact(str(error))


def test_a_key_in_no_known_shape_is_scrubbed_because_its_variable_names_a_key(
    tmp_path: Path,
) -> None:
    """A key the patterns cannot recognise (no `sk-` prefix), exported as `*_API_KEY` and never
    used by this process, still never reaches the run log or an error message."""
    from phi_core.errors import register_environment_secrets

    odd = "ZZplainsecret9876ZZ"
    assert redact(f"echoed {odd}") == f"echoed {odd}"  # no pattern knows it
    register_environment_secrets({"ACME_API_KEY": odd, "TOKENIZERS_PARALLELISM": "false"})
    assert redact(f"echoed {odd}") == "echoed [REDACTED]"
    assert redact("false") == "false"  # short values are no secrets
    record = RunRecord(
        kind="run",
        prompt=f"key {odd}",
        status="ok",
        branches=[
            BranchRecord(index=0, label="a", model="scripted:a", status="ok", text=f"it is {odd}")
        ],
    )
    with RunLog(tmp_path / "logs.db") as log:
        log.write(record)
    assert odd.encode() not in log_bytes(tmp_path)
