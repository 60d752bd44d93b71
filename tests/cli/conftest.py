"""What the CLI tests share: no inherited script, model, log switch or API key, and a script
file written from the test module's ``SCRIPT``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("PHI_SCRIPT", "PHI_MODEL", "PHI_NO_LOG", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def script(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The module's ``SCRIPT`` (scripted replies per model) as a ``--script`` file."""
    path = tmp_path / "script.json"
    path.write_text(json.dumps(request.module.SCRIPT))
    return str(path)
