"""The command line against careless and hostile use: a reader that goes away (`| head`), and
usage mistakes that used to end in tracebacks. Each test fails when its protection is removed:
the pipe tests without ``PipeSafeStream`` (``cli/_common.py``), the exception-group test without
``user_error_in`` in ``run_interruptible``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.testing import ScriptedProvider

EXIT_PIPE = 141
SLOW = {"text": "one two three four five six seven eight nine ten", "chunks": 10, "delay": 0.02}
SCRIPT = {
    "scripted:a": {"default": SLOW},
    "scripted:b": {"default": SLOW},
    "scripted:judge": {"default": "1"},
}
RACE = ["race", "Q?", "-m", "scripted:a", "-m", "scripted:b", "--judge", "scripted:judge"]


def phi(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(PHI_SCRIPT=str(script), COLUMNS="100")
    return subprocess.Popen(
        [sys.executable, "-c", "from phi_core.cli import main; main()", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["plain", "json"])
def test_a_race_piped_into_head_ends_quietly_once_head_has_its_lines(
    tmp_path: Path, extra: list[str]
) -> None:
    """`phi race … | head -2`: read two lines, close the pipe, as head does."""
    proc = phi(tmp_path, *RACE, *extra)
    assert proc.stdout is not None and proc.stderr is not None
    lines = [proc.stdout.readline() for _ in range(2)]
    assert all(lines), proc.stderr.read()
    proc.stdout.close()
    errors = proc.stderr.read()
    proc.wait(timeout=30)
    assert proc.returncode == EXIT_PIPE, errors
    assert "Traceback" not in errors and "BrokenPipe" not in errors and "Exception" not in errors


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args",
    [RACE, [*RACE, "--json"], ["models"], ["models", "--json"], ["run", "Q?", "-m", "scripted:a"]],
    ids=["race", "race-json", "models", "models-json", "run"],
)
def test_every_command_whose_reader_is_already_gone_exits_141_without_a_traceback(
    tmp_path: Path, args: list[str]
) -> None:
    proc = phi(tmp_path, *args)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader went away before the first line
    errors = proc.stderr.read()
    proc.wait(timeout=30)
    assert proc.returncode == EXIT_PIPE, errors
    assert "Traceback" not in errors and "Exception ignored" not in errors


def test_a_usage_mistake_raised_inside_a_task_group_is_exit_2_not_an_exception_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key that is looked up only when the call is made (as some SDKs do) fails inside the
    pairwise judge's task group: it surfaces as the usage error it is, not as a traceback."""
    from phi_core.errors import MissingApiKeyError

    class KeyOnFirstCall(ScriptedProvider):
        async def stream(self, request):  # type: ignore[no-untyped-def, override]
            raise MissingApiKeyError("acme", "ACME_API_KEY")
            yield  # pragma: no cover

    scripts = {
        "scripted:a": ScriptedProvider(default="A."),
        "scripted:b": ScriptedProvider(default="B."),
        "scripted:judge": KeyOnFirstCall(),
    }
    monkeypatch.setattr("phi_core.cli._app.scripted_providers", lambda path: scripts)
    result = CliRunner().invoke(app, [*RACE, "--strategy", "pairwise", "--script", "x"])
    assert result.exit_code == 2, result.output
    assert "ACME_API_KEY" in result.stderr
    assert not isinstance(result.exception, BaseExceptionGroup)
