"""The same GGUF behind llama.cpp's own OpenAI-compatible server, driven by the agent loop.

Real HTTP, real SSE streaming and the server's own usage numbers, through the generic
`openai-compat:` provider. The server listens on 127.0.0.1 only and is stopped at the end.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from phi_core.events import AgentEnd, MessageUpdate
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers import ModelConfig, StreamDone, StreamRequest
from phi_core.providers.local import LocalProvider
from phi_core.types import TextDelta, UserMessage

pytestmark = [pytest.mark.server, pytest.mark.local_model]

STARTUP_TIMEOUT = 90.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start `python -m llama_cpp.server` on a free 127.0.0.1 port; yield its /v1 base URL."""
    pytest.importorskip("fastapi", reason="needs llama-cpp-python[server]")
    pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server]")
    from phi_core.providers import resolve_model

    gguf = resolve_model("local:smollm2").compat["gguf_path"]
    port = _free_port()
    log_path = tmp_path_factory.mktemp("llama_server") / "server.log"
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", gguf, "--model_alias", "smollm2",
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--n_threads", "1", "--n_threads_batch", "1",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "NO_PROXY": "*"}
        )
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        _wait_until_ready(process, base_url, log_path)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def _wait_until_ready(process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    """Poll the server (a separate process: nothing to await) until it answers or exits."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"llama_cpp.server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{base_url}/models", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.2)
    pytest.fail(f"llama_cpp.server did not answer within {STARTUP_TIMEOUT}s:\n{log.read_text()}")


async def test_agent_loop_streams_from_llama_cpp_server_over_real_http(llama_server: str) -> None:
    events: list[Any] = []
    result = await agent_loop(
        "Name three colours.",
        AgentContext(system_prompt="Answer briefly."),
        AgentLoopConfig(
            model=f"openai-compat:smollm2@{llama_server}", max_tokens=24, temperature=0, seed=1
        ),
        events=events.append,
    )

    assert result.reason == "completed", result.error
    assert result.text
    text_deltas = [
        e.delta for e in events if isinstance(e, MessageUpdate) and isinstance(e.delta, TextDelta)
    ]
    assert len(text_deltas) > 1  # streamed piece by piece over SSE, not in one block
    assert "".join(d.text for d in text_deltas) == result.text
    assert isinstance(events[-1], AgentEnd)
    assert result.cost_usd == 0.0
    # llama_cpp.server (0.3.x) sends no usage chunk in streams, even with
    # stream_options.include_usage; the next test takes its usage from a non-streamed call.


async def test_server_usage_matches_the_in_process_model_for_the_same_greedy_call(
    llama_server: str, smollm2: ModelConfig
) -> None:
    """Same GGUF, same chat template, greedy decoding: the server's usage numbers and text are
    the ones the in-process provider reports."""
    prompt = "What is the capital of France?"
    async with httpx.AsyncClient(base_url=llama_server, timeout=60) as client:
        response = await client.post(
            "/chat/completions",
            json={
                "model": "smollm2",
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 12,
                "temperature": 0,
            },
        )
    response.raise_for_status()
    body = response.json()
    request = StreamRequest(
        model=smollm2, messages=[UserMessage.text(prompt)], max_tokens=12, temperature=0
    )
    local_message = None
    async for item in LocalProvider().stream(request):
        if isinstance(item, StreamDone):
            local_message = item.message
    assert local_message is not None
    assert body["usage"]["prompt_tokens"] > 0
    assert body["usage"]["prompt_tokens"] == local_message.usage.input
    assert body["usage"]["completion_tokens"] == local_message.usage.output
    assert body["choices"][0]["message"]["content"] == local_message.text
