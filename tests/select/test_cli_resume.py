"""`phi select --resume`: after Ctrl-C the run continues where it stopped — the evaluations that
finished are taken from the run journal, not run again, even with the response cache off."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# A pure-Python agent: no model call, so only the journal can spare it work. It logs every run
# and, on the STOP_AT-th, interrupts its own process as Ctrl-C would.
AGENT = """
import os, signal
CALLS = {"n": 0}

def agent(models, question):
    CALLS["n"] += 1
    with open("runs.log", "a") as log:
        log.write(f"{models['solver'].name} {question}\\n")
    if CALLS["n"] == int(os.environ.get("STOP_AT", "0")):
        os.kill(os.getpid(), signal.SIGINT)
    return "x" if models["solver"].name.endswith("a") else "y"
"""
SPEC = """dataset = "data.jsonl"
agent = "agent.py:agent"
scorer = "exact"
algorithm = "brute_force"
max_concurrent = 1
seed = 1
cache = false

[steps]
solver = ["scripted:a", "scripted:b"]
"""


def select(tmp_path: Path, stop_at: int, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["STOP_AT"] = str(stop_at)
    command = [sys.executable, "-c", "from phi_core.cli import main; main()", "select", "spec.toml"]
    return subprocess.run(
        [*command, *flags],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        # a shell's background job ignores SIGINT, and Python then installs no KeyboardInterrupt
        # handler: give the child the default disposition, whatever pytest was started from
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.timeout(120)
def test_resume_after_ctrl_c_runs_only_what_was_left(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "spec.toml").write_text(SPEC)
    rows = [{"input": f"q{i}", "expected": "x"} for i in range(8)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))

    first = select(tmp_path, 6)
    assert first.returncode == 130, first.stderr
    assert "with --resume to continue" in first.stderr
    before = (tmp_path / "runs.log").read_text().splitlines()

    resumed = select(tmp_path, 0, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    after = (tmp_path / "runs.log").read_text().splitlines()[len(before) :]
    result = json.loads(resumed.stdout)
    # the evaluations finished before the interruption (5, or 6 when the one running at the
    # interruption still finished) came from the journal; only the rest ran
    done = result["resumed"]
    assert done in (5, 6) and f"{done} evaluations were resumed" in resumed.stderr
    assert len(after) == 16 - done and not set(after) & set(before[:done])
    assert result["best"]["name"] == "solver=scripted:a" and result["evaluations"] == 16
