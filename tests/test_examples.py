"""The Python example in examples/ runs as documented (on the real local model)."""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.local_model
def test_race_and_continue_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("needs the `local` extra: pip install 'phi-core[local]'")
    runpy.run_path(str(EXAMPLES / "race_and_continue.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "winner:" in out
    assert "the follow-up loop's parent is the winner: True" in out


def test_mcp_agent_example_runs_without_a_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.argv", ["mcp_agent.py"])
    runpy.run_path(str(EXAMPLES / "mcp_agent.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "tools: word_count, reverse_words" in out
    assert "tool word_count -> 5" in out
    assert "answer: There are 5 words." in out
