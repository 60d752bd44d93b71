"""``phi serve`` as a process, used by real command-line clients: ``curl`` and simonw's ``llm``
(through an OpenAI-compatible model entry pointing at the gateway); graceful shutdown drains a
stream in flight; a bad config, a port in use or a bad host fails before serving, with exit
code 2."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..providers.fakes import FakeServer, Stream
from ..providers.fakes.openai_wire import chat_stream, chunk, usage_chunk
from .process import PHI, phi_serve

pytestmark = pytest.mark.server  # each test starts `phi serve` as a process

KEY = "sk-gateway-test-key"


def write_config(tmp_path: Path, upstream: FakeServer) -> Path:
    alpha = f"openai-compat:alpha@{upstream.url}/v1"
    beta = f"openai-compat:beta@{upstream.url}/v1"
    path = tmp_path / "gateway.toml"
    path.write_text(
        f"""
[gateway]
retries = 0
state = "{tmp_path / "router.sqlite"}"
models = ["{alpha}", "{beta}"]

[[gateway.keys]]
name = "tests"
key_env = "GATEWAY_TEST_KEY"

[profiles.duo]
strategy = "judge"
[[profiles.duo.branches]]
name = "alpha"
model = "{alpha}"
[[profiles.duo.branches]]
name = "beta"
model = "{beta}"
"""
    )
    return path


async def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *argv, env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_curl_and_llm_against_phi_serve(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path
) -> None:
    config = write_config(tmp_path, upstream)
    alpha, beta = (f"openai-compat:{m}@{upstream.url}/v1" for m in ("alpha", "beta"))
    env = {"GATEWAY_TEST_KEY": KEY}
    llm_dir = tmp_path / "llm"
    llm_dir.mkdir()
    async with phi_serve(config, env=env) as (url, process):
        (llm_dir / "extra-openai-models.yaml").write_text(
            f"- model_id: phi-duo\n  model_name: race:duo\n  api_base: {url}/v1\n"
            "  api_key_name: phi-gateway\n"
        )
        body = json.dumps({"model": "race:duo", "messages": [{"role": "user", "content": "hi"}]})
        curl = ["curl", "-sS", f"{url}/v1/chat/completions", "-H", "Content-Type: application/json"]
        code, out, _ = await run(*curl, "-H", f"Authorization: Bearer {KEY}", "-d", body, "-i")
        stream_body = json.dumps({**json.loads(body), "stream": True})
        _, streamed, _ = await run(*curl, "-N", "-H", f"Authorization: Bearer {KEY}",
                                   "-d", stream_body)  # fmt: skip
        _, denied, _ = await run(*curl, "-d", body, "-w", "\n%{http_code}")
        # a page whose domain was re-pointed at 127.0.0.1 (DNS rebinding) sends its own Host
        _, foreign, _ = await run(*curl, "-H", f"Authorization: Bearer {KEY}", "-H",
                                  "Host: evil.example", "-d", body, "-w", "\n%{http_code}")  # fmt: skip
        _, models, _ = await run(
            "curl", "-sS", f"{url}/v1/models", "-H", f"Authorization: Bearer {KEY}"
        )
        llm_env = {"LLM_USER_PATH": str(llm_dir)}
        llm = str(Path(sys.executable).with_name("llm"))
        llm_code, llm_out, llm_err = await run(
            llm, "-m", "phi-duo", "--key", KEY, "--no-stream", "hello llm", env=llm_env
        )
        llm_stream_code, llm_streamed, _ = await run(
            llm, "-m", "phi-duo", "--key", KEY, "hello again", env=llm_env
        )
    head, _, payload = out.partition("\r\n\r\n")
    assert code == 0 and head.startswith("HTTP/1.1 200")
    assert "x-phi-winner: alpha" in head.lower()
    assert json.loads(payload)["choices"][0]["message"]["content"] == "alpha says: hi"
    assert '"content": "alpha says: hi"' in streamed and streamed.rstrip().endswith("data: [DONE]")
    assert denied.rstrip().endswith("401") and KEY not in denied
    assert "value `Bearer <key>`" in denied  # the help is not taken for a secret and redacted
    assert foreign.rstrip().endswith("400") and "host_not_allowed" in foreign
    served = [m["id"] for m in json.loads(models)["data"]]
    assert served[:4] == ["race:duo", "route:duo", alpha, beta]  # then what passthrough can serve
    assert llm_code == 0, llm_err
    assert llm_out.strip() == "alpha says: hello llm"
    assert llm_stream_code == 0, llm_streamed
    assert llm_streamed.strip() == "alpha says: hello again"
    stdout, stderr = await process.stdout.read(), await process.stderr.read()  # type: ignore[union-attr]
    assert KEY.encode() not in stdout + stderr  # the key is never logged


async def test_sigterm_drains_a_stream_in_flight(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path
) -> None:
    pieces = [chunk({"content": f"w{i} "}) for i in range(20)]
    upstream.push(
        Stream(chat_stream(*pieces, chunk({}, "stop"), usage_chunk(5, 20)), interval=0.05)
    )
    config = write_config(tmp_path, upstream)
    model = f"openai-compat:alpha@{upstream.url}/v1"
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    async with phi_serve(config, env={"GATEWAY_TEST_KEY": KEY}) as (url, process):
        async with (
            httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as client,
            client.stream("POST", f"{url}/v1/chat/completions", json=body) as response,
        ):
            text = ""
            async for piece in response.aiter_text():
                if not text:
                    process.send_signal(signal.SIGTERM)  # shut down while the stream runs
                text += piece
        code = await asyncio.wait_for(process.wait(), timeout=30)
    assert "w19" in text and text.rstrip().endswith("data: [DONE]")
    # uvicorn re-raises the captured SIGTERM once it has shut down gracefully
    assert code in (0, -signal.SIGTERM)


async def test_a_bad_profile_fails_at_start_with_exit_code_2(
    strict_loop: Any, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[profiles.bad]\nstrategy = "judgee"\n')
    code, _, err = await run(PHI, "serve", "--config", str(config), "--port", "0")
    assert code == 2
    assert "judgee" in err and "Did you mean 'judge'" in err


@pytest.mark.parametrize("taken", [True, False], ids=["port in use", "bad host"])
async def test_an_address_it_cannot_listen_on_fails_at_start_like_phi_view(
    strict_loop: Any, taken: bool
) -> None:
    """The same one-line error and exit code as `phi view` and `phi mcp serve --http`, not
    uvicorn's log lines and its exit code 3."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        host = "127.0.0.1" if taken else "999.1.1.1"
        code, _, err = await run(PHI, "serve", "--host", host, "--port", str(port))
    assert code == 2
    assert err.startswith(f"Error: Cannot listen on {host}:{port} (")
    assert ("pass another --port (0 picks a free one)." in err) is taken
    assert ("pass another --host" in err) is not taken
    assert ("Address already in use" in err) is taken
    assert "ERROR:" not in err and "Errno" not in err and "warning:" not in err
