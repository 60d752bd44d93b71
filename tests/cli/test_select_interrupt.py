"""Ctrl-C during `phi select`: what was evaluated is printed with where it was saved, and running
the same command again resumes from the response cache."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from phi_core.runlog import RunLog

# The agent answers through the selector's own (metered, cached) model handles; the scripted
# protocol is re-registered so that every scripted model has an answer. On the STOP_AT-th call
# it interrupts its own process, as Ctrl-C would.
AGENT = """
import os, signal
from phi_core.providers.registry import known_providers, register_protocol
from phi_core.testing import ScriptedProvider

known_providers()  # the built-in protocols first, so that this one replaces theirs
register_protocol("scripted", lambda model: ScriptedProvider(name=model.spec, default="x"))
CALLS = {"n": 0}

async def agent(models, question):
    CALLS["n"] += 1
    if CALLS["n"] == int(os.environ.get("STOP_AT", "0")):
        os.kill(os.getpid(), getattr(signal, os.environ.get("STOP_SIGNAL", "SIGINT")))
    return await models["solver"].complete(f"Q: {question}")
"""
SPEC = """dataset = "data.jsonl"
agent = "agent.py:agent"
scorer = "contains"
algorithm = "brute_force"
max_concurrent = 1
cache = "responses.sqlite"

[steps]
solver = ["scripted:a", "scripted:b"]
"""


def select(
    tmp_path: Path, stop_at: int, stop_signal: str = "SIGINT"
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["STOP_AT"], env["STOP_SIGNAL"] = str(stop_at), stop_signal
    return subprocess.run(
        [sys.executable, "-c", "from phi_core.cli import main; main()", "select", "spec.toml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        # a shell's background job ignores SIGINT: give the child the default disposition
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


@pytest.mark.timeout(120)
def test_ctrl_c_reports_what_was_evaluated_and_a_rerun_resumes_from_the_cache(
    tmp_path: Path,
) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "spec.toml").write_text(SPEC)
    rows = [{"input": f"q{i}", "expected": "x"} for i in range(10)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))

    first = select(tmp_path, stop_at=7)
    assert first.returncode == 130, first.stderr
    assert "Interrupted after 6 of 20 evaluations" in first.stderr
    # the per-combination table: 6 evaluated, mean score 1, no failure
    assert re.search(r"solver=scripted:a\s*│\s*6\s*│\s*1\.000\s*│\s*0\s*│", first.stderr)
    cache = tmp_path / "responses.sqlite"
    assert f"saved in {cache}" in first.stderr and "run the same command again" in first.stderr
    journal = re.search(r"run journal \((/[^)]+)\)", first.stderr.replace("\n", ""))
    assert journal is not None and Path(journal.group(1)).exists()  # where --resume reads
    assert "Traceback" not in first.stderr

    again = select(tmp_path, stop_at=0)
    assert again.returncode == 0, again.stderr
    assert "6 model calls were answered from the cache" in again.stderr
    assert "best: solver=scripted:" in again.stdout


@pytest.mark.timeout(120)
def test_sigterm_ends_a_selection_as_ctrl_c_does(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "spec.toml").write_text(SPEC)
    rows = [{"input": f"q{i}", "expected": "x"} for i in range(10)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    stopped = select(tmp_path, stop_at=3, stop_signal="SIGTERM")
    assert stopped.returncode == 130, stopped.stderr  # not killed on the spot (-15)
    assert "Interrupted after 2 of 20 evaluations" in stopped.stderr
    assert "--resume" in stopped.stderr and "Traceback" not in stopped.stderr
    # logged once, as cancelled, with what was evaluated (a race interrupted is logged so too)
    [record] = RunLog().list_runs()
    assert (record.kind, record.status, record.winner) == ("select", "cancelled", None)
    assert [(b.label, b.spec) for b in record.branches] == [
        ("solver=scripted:a", {"evaluations": 2})
    ]
