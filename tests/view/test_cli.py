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
from typer.testing import CliRunner

from phi_core.cli import app

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
