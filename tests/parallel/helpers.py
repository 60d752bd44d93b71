"""Shared builders for the race tests: scripted branch configs and an event recorder."""

from __future__ import annotations

from typing import Any

from phi_core.loop import AgentLoopConfig
from phi_core.providers import RetryPolicy
from phi_core.testing import Reply, ScriptedProvider, ScriptItem
from phi_core.types import Usage

NO_RETRY = RetryPolicy.none()


def branch(
    *script: ScriptItem | str,
    name: str = "scripted",
    config_id: str | None = None,
    default: ScriptItem | str | None = None,
    **kw: Any,
) -> AgentLoopConfig:
    """A branch config whose model is a ScriptedProvider playing ``script`` (then ``default``)."""
    provider = ScriptedProvider(list(script), name=name, default=default)
    return AgentLoopConfig(
        model=f"{name}:m", provider=provider, config_id=config_id, retry=NO_RETRY, **kw
    )


def answer(text: str, tokens: int = 10, delay: float = 0.0) -> Reply:
    """A reply reporting exactly ``tokens`` total tokens."""
    return Reply(text, usage=Usage(input=tokens // 2, output=tokens - tokens // 2), delay=delay)


def provider_of(config: AgentLoopConfig) -> ScriptedProvider:
    assert isinstance(config.provider, ScriptedProvider)
    return config.provider


class Recorder:
    """A sync event sink that keeps every event in order."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    def of_type(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def for_loop(self, loop_id: str) -> list[Any]:
        return [e for e in self.events if e.loop_id == loop_id]
