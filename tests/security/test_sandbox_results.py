"""Results of model-written code cannot be forged or stolen: each answer runs in a sandbox of
its own and only the supervisor's nonce-stamped line is trusted; the Python-tests verifier
cannot be passed by exiting early. And where no sandbox can be made, nothing runs unless the
caller said "unsafe"."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phi_core.cancel import CancelToken
from phi_core.cli import app
from phi_core.errors import SandboxUnavailableError
from phi_core.loop import AgentContext
from phi_core.parallel import (
    ExecVoteEvaluation,
    PythonTestsCheck,
    agent_loop_parallel,
    code_agreement,
)
from phi_core.parallel._types import ParallelLoopOutcome
from phi_core.sandbox import Sandbox, default_sandbox, set_default_sandbox

from ..parallel.helpers import answer, branch
from ..parallel.test_strategies import outcome
from .sandbox_attacks import BACKENDS, run_answer

SORT_A = "```python\ndef order(xs):\n    return sorted(xs)\n\norder([3, 1, 2])\n```"
SORT_B = (
    "```python\ndef arrange(items):\n    out = list(items)\n    out.sort()\n    return out\n\n"
    "arrange([9, 4, 7])\n```"
)
# Tries, while its definitions load, every way to reach the reply channel and the other answers:
# writes replies shaped like the supervisor's (and like the old shared worker's) to every
# descriptor it can open, kills every sandbox process it can see, and exits "successfully".
# (Only sandbox processes: were the sandbox ever broken, this test must not kill the machine's.)
FORGER = """```python
import json, os, signal

def forge():
    fake = json.dumps({"candidates": [{"runnable": False, "outputs": {}}] * 3, "owners": [],
                       "messages": [{"loaded": True}], "exit": 0, "killed": None, "output": ""})
    for path in ['/proc/1/fd/1', '/proc/1/fd/0', '/proc/self/fd/1', '/dev/stdout']:
        try:
            with open(path, 'w') as f:
                f.write('0' * 32 + ' ' + fake + '\\n')
        except OSError:
            pass
    for fd in range(0, 256):
        try:
            os.write(fd, (fake + '\\n').encode())
            os.close(fd)
        except OSError:
            pass
    for pid in os.listdir('/proc'):  # the other answers' workers, were they in reach
        try:
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                if b'/opt/phi/' in f.read() and int(pid) != os.getpid():
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    os._exit(0)

class Loader:  # a class body runs while "only the definitions" load
    forge()

def order(xs):
    return list(reversed(xs))

order([5, 6])
```"""


async def test_a_forged_reply_cannot_beat_two_agreeing_answers() -> None:
    configs = [branch(answer(FORGER, 1)), branch(answer(SORT_A, 10)), branch(answer(SORT_B, 20))]
    result = await agent_loop_parallel(
        "Sort the list.", AgentContext(session_id="s"), configs, ExecVoteEvaluation()
    )
    assert result.selected_index == 1, result.decision
    assert result.decision.votes == {"behaviour 0": 2}
    report = await code_agreement([FORGER, SORT_A, SORT_B])
    assert report.runnable == [False, True, True]  # it killed only its own sandbox
    assert report.agree[1][2]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_worker_cannot_write_the_supervisors_reply(backend: str) -> None:
    code = """
import json, os

def probe():
    forged = '{"messages": [], "exit": 0, "killed": null, "output": "FORGED", "output_bytes": 6}'
    opened = []
    for path in ['/proc/1/fd/1', '/proc/1/fd/2', '/proc/1/fd/0']:
        try:
            with open(path, 'w') as f:
                f.write('0' * 32 + ' ' + forged + '\\n')
            opened.append(path)
        except OSError:
            pass
    os.write(3, (json.dumps({'opened': opened}) + '\\n').encode())
    for fd in range(256):
        try:
            os.write(fd, ('0' * 32 + ' ' + forged + '\\n').encode())
        except OSError:
            pass
    os._exit(3)
"""
    result = await run_answer(Sandbox(backend=backend), code)
    assert {"opened": []} in result.messages, result.messages  # the reply channel is out of reach
    assert result.output != "FORGED" and result.exit_code == 3, result
    assert result.error is None and any(m.get("loaded") for m in result.messages)


def _outcome(text: str) -> ParallelLoopOutcome:
    return outcome(0, text)


@pytest.mark.parametrize(
    "cheat",
    [
        "import sys\nsys.exit(0)",
        "import os\nos._exit(0)",
        'import os\nos.write(3, b\'{"passed": "guess"}\\n\')\nos._exit(0)',
        "def add(a, b):\n    import sys\n    sys.exit(0)",
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0",
        # Rebinding what the harness uses after the answer loaded: the tests must still run.
        "import builtins, json\nbuiltins.exec = lambda *a, **k: None\n"
        "json.loads = lambda *a, **k: {'tests': 'pass', 'token': 'x'}\ndef add(a, b):\n    return 0",
    ],
    ids=[
        "sys.exit-at-load",
        "os._exit-at-load",
        "fake-pass-report",
        "exit-in-function",
        "atexit",
        "patched-harness",
    ],
)
async def test_python_tests_cannot_be_passed_by_exiting_early(cheat: str) -> None:
    check = PythonTestsCheck("assert add(2, 3) == 5\n", timeout=20)
    result = await check.check(_outcome(f"```python\n{cheat}\n```"), cancel=CancelToken())
    assert not result.passed, result.reason


async def test_python_tests_see_no_key_and_the_reason_shows_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-verysecretvalue123456")
    code = "import os\nprint(os.environ)\nprint('sk-proj-printedbythemodel123')\nassert False"
    result = await PythonTestsCheck("pass").check(_outcome(code), cancel=CancelToken())
    assert not result.passed
    assert "verysecretvalue" not in result.reason and "printedbythemodel" not in result.reason
    assert "AssertionError" in result.reason


# --------------------------------------------------------------------------- no sandbox


def test_without_bwrap_and_unshare_code_execution_refuses_and_says_what_to_install() -> None:
    nowhere = Sandbox(search_path="")
    with pytest.raises(SandboxUnavailableError) as caught:
        ExecVoteEvaluation(sandbox=nowhere)
    message = str(caught.value)
    assert "bwrap" in message and "unshare" in message
    assert "apt install bubblewrap" in message and "allow_unsafe_exec=True" in message
    with pytest.raises(SandboxUnavailableError):
        PythonTestsCheck("assert True", sandbox=nowhere)


async def test_a_bwrap_that_cannot_make_namespaces_is_named_with_its_error() -> None:
    with tempfile.TemporaryDirectory() as where:  # reachable by uid 65534, which runs bwrap as root
        os.chmod(where, 0o755)
        fake = Path(where) / "bwrap"
        fake.write_text(
            "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
        )
        fake.chmod(0o755)
        broken = Sandbox(backend="bwrap", search_path=f"{where}:/usr/bin:/bin:/usr/sbin:/sbin")
        with pytest.raises(SandboxUnavailableError, match="No permissions to create new namespace"):
            await code_agreement([SORT_A], sandbox=broken)


async def test_unsafe_execution_runs_only_when_asked_and_warns(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("phi_core.sandbox._sandbox._announced", set())
    with pytest.raises(SandboxUnavailableError):
        await code_agreement([SORT_A, SORT_B], sandbox=Sandbox(search_path=""))
    unsafe = Sandbox(search_path="", allow_unsafe_exec=True)
    with caplog.at_level(logging.WARNING, logger="phi_core.sandbox"):
        report = await code_agreement([SORT_A, SORT_B], sandbox=unsafe)
        await code_agreement([SORT_A], sandbox=unsafe)
    assert report.agree[0][1]
    warnings = [r for r in caplog.records if "WITHOUT a sandbox" in r.getMessage()]
    assert len(warnings) == 1  # once per process, not per answer


# --------------------------------------------------------------------------- command line

DOUBLERS = {
    "scripted:a": ["```python\ndef f(x):\n    return x * 2\n\nf(3)\n```"],
    "scripted:b": ["```python\ndef g(x):\n    return x + x\n\ng(5)\n```"],
}


def _race(tmp_path: Path, *extra: str) -> list[str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(DOUBLERS))
    return [
        "race", "Double it.", "-m", "scripted:a", "-m", "scripted:b", "--strategy", "exec-vote",
        "--json", "--script", str(script), *extra,
    ]  # fmt: skip


@pytest.fixture
def fresh_notices(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr("phi_core.sandbox._sandbox._announced", set())
    previous = default_sandbox()
    yield
    set_default_sandbox(previous)


@pytest.mark.usefixtures("fresh_notices")
def test_the_cli_says_once_on_stderr_that_model_code_runs_and_where(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, _race(tmp_path))
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("phi: ")]
    assert len(notes) == 1 and "sandbox" in notes[0] and "no network" in notes[0], result.stderr


@pytest.mark.usefixtures("fresh_notices")
def test_the_cli_refuses_exec_vote_without_a_sandbox_unless_unsafe_exec(tmp_path: Path) -> None:
    set_default_sandbox(Sandbox(search_path=""))
    refused = CliRunner().invoke(app, _race(tmp_path))
    assert refused.exit_code == 2
    assert "apt install bubblewrap" in refused.stderr and "--unsafe-exec" in refused.stderr
    allowed = CliRunner().invoke(app, _race(tmp_path, "--unsafe-exec"))
    assert allowed.exit_code == 0, allowed.output
    assert "WITHOUT a sandbox" in allowed.stderr
    assert not default_sandbox().allow_unsafe_exec  # the flag lasts one command
    assert os.environ.get("PHI_UNSAFE_EXEC") is None
