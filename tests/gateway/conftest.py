"""Fixtures of the gateway tests: a fake OpenAI-compatible upstream and a live gateway over it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from phi_core.runlog import RunLog

from ..providers.fakes import FakeServer
from .helpers import reply_rule


@pytest.fixture
async def upstream() -> AsyncIterator[FakeServer]:
    async with FakeServer(default=reply_rule) as server:
        yield server


@pytest.fixture
def run_log(tmp_path: Path) -> RunLog:
    return RunLog(tmp_path / "logs.db")
