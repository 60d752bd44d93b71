"""Loading several llama.cpp instances at once must not leave the process's stdout silenced."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers import ModelConfig, resolve_model
from phi_core.providers.local import LocalProvider, gguf_path_for

pytestmark = pytest.mark.local_model


async def test_concurrent_loads_leave_stdout_and_stderr_as_they_were(
    smollm2: ModelConfig, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # A private copy of the GGUF gets a fresh pool, so three instances load at the same time.
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(gguf_path_for(smollm2), copy)
    model = resolve_model(f"local:{copy}").model_copy(update={"compat": {"pool_size": 3}})
    provider = LocalProvider()
    before = (os.fstat(1).st_ino, os.fstat(2).st_ino)
    config = AgentLoopConfig(model=model, provider=provider, max_tokens=2, temperature=0)
    results = await asyncio.gather(
        *(agent_loop(f"Say {n}.", AgentContext(), config) for n in range(3))
    )
    assert all(r.reason == "completed" for r in results)
    assert (os.fstat(1).st_ino, os.fstat(2).st_ino) == before
    print("still visible")
    assert "still visible" in capfd.readouterr().out
