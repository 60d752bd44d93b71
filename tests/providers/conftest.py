from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from phi_core.providers.limiter import Limiter, default_limiter, set_default_limiter

KEY_VARS = [
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
    "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "OPENROUTER_API_KEY", "XAI_API_KEY",
    "GROQ_API_KEY", "CEREBRAS_API_KEY", "MISTRAL_API_KEY", "DEEPSEEK_API_KEY",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
    "AWS_BEARER_TOKEN_BEDROCK", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
    "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "OPENAI_COMPAT_BASE_URL",
]  # fmt: skip


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No real key or endpoint from the developer's shell can leak into a test."""
    for name in KEY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(autouse=True)
def fresh_limiter() -> Iterator[Limiter]:
    """Each test gets its own process-wide limiter, so caps learnt in one test never leak."""
    previous = default_limiter()
    limiter = Limiter()
    set_default_limiter(limiter)
    yield limiter
    set_default_limiter(previous)


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog
