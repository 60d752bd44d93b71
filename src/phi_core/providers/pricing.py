"""The price table: US dollars per million tokens for the common models of each vendor.

Prices as published on the vendors' pricing pages (openai.com/api/pricing,
anthropic.com/pricing, ai.google.dev/gemini-api/docs/pricing, aws.amazon.com/bedrock/pricing,
x.ai/api, groq.com/pricing, cerebras.ai/pricing, mistral.ai/pricing,
api-docs.deepseek.com/quick_start/pricing), checked on :data:`PRICES_AS_OF`. Standard tier,
prompts under any long-context surcharge threshold.

Cached tokens are priced the way each vendor bills them:

* OpenAI, xAI, DeepSeek, Gemini: cached prompt tokens are read at a discount (``cache_read``);
  writing the cache costs nothing extra (``cache_write`` = ``input``).
* Anthropic (and Anthropic on Bedrock): cache reads cost 10 % of input, 5-minute cache writes
  125 % of input.

A :class:`~phi_core.providers.base.ModelConfig` built from a ``provider:model`` string gets the
price found here; pass ``pricing=`` (or set it in a config file) to override it. Models not in the
table cost 0 (their usage is still counted) — local and self-hosted models are free.
"""

from __future__ import annotations

from ..types import Pricing

__all__ = ["PRICES", "PRICES_AS_OF", "price_for"]

PRICES_AS_OF = "2025-11-01"


def _p(inp: float, out: float, read: float | None = None, write: float | None = None) -> Pricing:
    return Pricing(
        input=inp,
        output=out,
        cache_read=inp if read is None else read,
        cache_write=inp if write is None else write,
    )


def _anthropic(inp: float, out: float) -> Pricing:
    return _p(inp, out, read=round(inp * 0.1, 6), write=round(inp * 1.25, 6))


# Keyed by provider, then by model id (or id prefix: dated snapshots match their family).
PRICES: dict[str, dict[str, Pricing]] = {
    "openai": {
        "gpt-5": _p(1.25, 10.00, 0.125),
        "gpt-5-mini": _p(0.25, 2.00, 0.025),
        "gpt-5-nano": _p(0.05, 0.40, 0.005),
        "gpt-4.1": _p(2.00, 8.00, 0.50),
        "gpt-4.1-mini": _p(0.40, 1.60, 0.10),
        "gpt-4.1-nano": _p(0.10, 0.40, 0.025),
        "gpt-4o": _p(2.50, 10.00, 1.25),
        "gpt-4o-mini": _p(0.15, 0.60, 0.075),
        "o3": _p(2.00, 8.00, 0.50),
        "o3-mini": _p(1.10, 4.40, 0.55),
        "o4-mini": _p(1.10, 4.40, 0.275),
    },
    "anthropic": {
        "claude-opus-4-5": _anthropic(5.00, 25.00),
        "claude-opus-4-1": _anthropic(15.00, 75.00),
        "claude-opus-4": _anthropic(15.00, 75.00),
        "claude-sonnet-4-5": _anthropic(3.00, 15.00),
        "claude-sonnet-4": _anthropic(3.00, 15.00),
        "claude-3-7-sonnet": _anthropic(3.00, 15.00),
        "claude-haiku-4-5": _anthropic(1.00, 5.00),
        "claude-3-5-haiku": _anthropic(0.80, 4.00),
        "claude-3-haiku": _anthropic(0.25, 1.25),
    },
    "google": {
        "gemini-2.5-pro": _p(1.25, 10.00, 0.125),
        "gemini-2.5-flash": _p(0.30, 2.50, 0.03),
        "gemini-2.5-flash-lite": _p(0.10, 0.40, 0.01),
        "gemini-2.0-flash": _p(0.10, 0.40, 0.025),
        "gemini-2.0-flash-lite": _p(0.075, 0.30),
    },
    "bedrock": {
        "anthropic.claude-sonnet-4-5": _anthropic(3.00, 15.00),
        "anthropic.claude-sonnet-4": _anthropic(3.00, 15.00),
        "anthropic.claude-haiku-4-5": _anthropic(1.00, 5.00),
        "anthropic.claude-3-5-haiku": _anthropic(0.80, 4.00),
        "amazon.nova-pro": _p(0.80, 3.20, 0.20),
        "amazon.nova-lite": _p(0.06, 0.24, 0.015),
        "amazon.nova-micro": _p(0.035, 0.14, 0.00875),
        "meta.llama3-1-8b-instruct": _p(0.22, 0.22),
        "meta.llama3-1-70b-instruct": _p(0.72, 0.72),
    },
    "xai": {
        "grok-4": _p(3.00, 15.00, 0.75),
        "grok-4-fast": _p(0.20, 0.50, 0.05),
        "grok-3": _p(3.00, 15.00, 0.75),
        "grok-3-mini": _p(0.30, 0.50, 0.075),
        "grok-code-fast-1": _p(0.20, 1.50, 0.02),
    },
    "groq": {
        "llama-3.3-70b-versatile": _p(0.59, 0.79),
        "llama-3.1-8b-instant": _p(0.05, 0.08),
        "openai/gpt-oss-120b": _p(0.15, 0.75),
        "openai/gpt-oss-20b": _p(0.10, 0.50),
    },
    "cerebras": {
        "llama3.1-8b": _p(0.10, 0.10),
        "llama-3.3-70b": _p(0.85, 1.20),
        "gpt-oss-120b": _p(0.35, 0.75),
    },
    "mistral": {
        "mistral-large-latest": _p(2.00, 6.00),
        "mistral-medium-latest": _p(0.40, 2.00),
        "mistral-small-latest": _p(0.10, 0.30),
        "codestral-latest": _p(0.30, 0.90),
    },
    "deepseek": {
        "deepseek-chat": _p(0.28, 0.42, 0.028),
        "deepseek-reasoner": _p(0.28, 0.42, 0.028),
    },
}

# Providers that resell another vendor's models under ``vendor/model`` names at the same price.
_RESELLERS = {"openrouter"}
_VERTEX_ALIASES = {"vertex": "google", "azure": "openai", "openai-responses": "openai"}


def price_for(provider: str, model: str) -> Pricing | None:
    """The table price of ``provider:model`` (longest matching id prefix), or ``None``."""
    table = PRICES.get(_VERTEX_ALIASES.get(provider, provider))
    if provider in _RESELLERS and "/" in model:
        vendor, _, model = model.partition("/")
        table = PRICES.get(vendor)
    if provider == "bedrock":
        # Cross-region inference profiles ("us.anthropic...") price like the base model.
        head, _, rest = model.partition(".")
        if head in ("us", "eu", "apac", "global") and rest:
            model = rest
    if not table:
        return None
    if model in table:
        return table[model]
    best = max((k for k in table if model.startswith(k)), key=len, default=None)
    return table[best] if best else None
