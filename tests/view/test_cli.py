"""``phi view``: serves the view on 127.0.0.1 until interrupted, and a port it cannot use is a
usage error (exit 2) saying what to pass instead."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.cli import view as view_cli
from phi_core.view import ViewData

from .conftest import Recorded


def test_phi_view_serves_the_log_on_loopback_until_interrupted(recorded: Recorded) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-c", "from phi_core.cli import main; main()", "view"]
    command += ["--port", "0", "--no-open"]
    command += ["--log", str(recorded.log_path), "--state", recorded.state]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("phi view: http://127.0.0.1:"), line
        url = line.split()[2]
        runs = httpx.get(url + "api/runs", timeout=10).json()
        assert recorded.race_id in [r["id"] for r in runs["runs"]]
        race = httpx.get(f"{url}api/runs/{recorded.race_id}", timeout=10).json()
        assert race["winner"] == "scripted:b"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
    assert code in (0, 130)


def test_a_port_in_use_is_a_usage_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            app, ["view", "--port", str(port), "--log", str(tmp_path / "logs.db")]
        )
    assert result.exit_code == 2
    assert f"Cannot listen on 127.0.0.1:{port}" in result.output
    assert "--port" in result.output


def test_a_port_out_of_range_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["view", "--port", "70000"])
    assert result.exit_code == 2 and "65535" in result.output


def test_the_router_state_key_reaches_the_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--router-state-key`` (or ``ROUTER_STATE_KEY``) names the key prefix the view reads a
    Redis state under; on a file it does nothing, and says so."""
    served: list[ViewData] = []

    def fake_serve(data: ViewData, **_: object) -> None:  # the test's stand-in for the server
        served.append(data)

    monkeypatch.setattr(view_cli, "serve", fake_serve)
    log = ["--log", str(tmp_path / "logs.db")]
    redis_state = ["--state", "redis://127.0.0.1:6379/0"]
    flagged = CliRunner().invoke(app, ["view", *log, *redis_state, "--router-state-key", "team-a"])
    assert flagged.exit_code == 0, flagged.output
    from_env = CliRunner().invoke(app, ["view", *log, *redis_state], env={"ROUTER_STATE_KEY": "b"})
    assert from_env.exit_code == 0, from_env.output
    assert [d.state_key for d in served] == ["team-a", "b"]
    on_file = ["--state", str(tmp_path / "s.sqlite"), "--router-state-key", "x"]
    ignored = CliRunner().invoke(app, ["view", *log, *on_file])
    assert ignored.exit_code == 0 and "only applies to state in Redis" in ignored.output
