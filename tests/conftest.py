"""Shared fixtures: a strict event loop that fails tests leaking tasks or unretrieved errors."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _isolated_user_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test gets its own user directory (``PHI_HOME``) and no inherited router-state
    location, so no test reads or writes the developer's ``~/.phi``."""
    monkeypatch.setenv("PHI_HOME", str(tmp_path_factory.mktemp("phi-home")))
    monkeypatch.delenv("PHI_ROUTER_STATE", raising=False)


@pytest.fixture
async def strict_loop() -> AsyncIterator[list[dict[str, Any]]]:
    """Collects everything that reaches the event loop's exception handler during the test
    (e.g. "Task exception was never retrieved") and fails if any task is left running."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        yield errors
        # Let finished tasks be collected so unretrieved exceptions are reported now.
        await asyncio.sleep(0)
        gc.collect()
        await asyncio.sleep(0)
        leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert not leftover, f"tasks left running: {leftover}"
        assert not errors, f"event loop errors: {errors}"
    finally:
        loop.set_exception_handler(previous)
