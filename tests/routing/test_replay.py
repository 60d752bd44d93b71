"""ReplayProvider: recorded answers through the real agent loop."""

import pytest

from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.providers.base import ModelConfig
from phi_core.routing import Recorded, ReplayProvider, prompt_key


def config(model: str, provider: ReplayProvider) -> AgentLoopConfig:
    return AgentLoopConfig(
        model=ModelConfig(provider="replay", id=model, api="replay"), provider=provider
    )


async def test_replay_answers_with_the_recorded_text_of_that_model():
    table = {
        ("m1", prompt_key("2+2?")): Recorded("4", cost_usd=0.001),
        ("m2", prompt_key("2+2?")): Recorded("5", cost_usd=0.002),
    }
    provider = ReplayProvider(table)
    r1 = await agent_loop("2+2?", AgentContext(), config("m1", provider))
    r2 = await agent_loop("2+2?", AgentContext(), config("m2", provider))
    assert (r1.text, r2.text) == ("4", "5")
    assert provider.calls == 2


async def test_replay_of_an_unrecorded_prompt_is_an_error_not_an_invented_answer():
    provider = ReplayProvider({})
    result = await agent_loop("new question", AgentContext(), config("m1", provider))
    assert result.reason == "error"
    assert "No recorded answer" in (result.error or "")


async def test_replay_honours_the_token_limit():
    provider = ReplayProvider({("m", prompt_key("q")): Recorded("x" * 400)})
    cfg = config("m", provider)
    cfg.max_tokens = 10
    result = await agent_loop("q", AgentContext(), cfg)
    assert len(result.text) == pytest.approx(40)
