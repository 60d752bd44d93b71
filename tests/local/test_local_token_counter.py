"""Exact token counts for local GGUF models from llama.cpp's tokenizer (vocabulary only)."""

from __future__ import annotations

import pytest

from phi_core.context import CompactionConfig, LlamaCppTokenCounter, token_counter_for
from phi_core.context.window import ContextWindow
from phi_core.providers import ModelConfig
from phi_core.types import UserMessage

pytestmark = pytest.mark.local_model


def test_local_models_count_with_their_own_tokenizer(smollm2: ModelConfig) -> None:
    counter = token_counter_for(smollm2)
    assert isinstance(counter, LlamaCppTokenCounter)
    import llama_cpp

    from phi_core.providers.local import gguf_path_for

    reference = llama_cpp.Llama(
        model_path=str(gguf_path_for(smollm2)), vocab_only=True, verbose=False
    )
    text = "Tokenizers split words like antidisestablishmentarianism into pieces."
    expected = len(reference.tokenize(text.encode(), add_bos=False, special=False))
    assert counter.count_text(text) == expected
    assert counter.count_text("") == 0
    # Not the byte heuristic: the two disagree on this text.
    assert expected != -(-len(text.encode()) // 4)


async def test_a_local_run_measures_its_context_with_the_exact_counter(
    smollm2: ModelConfig,
) -> None:
    window = ContextWindow(CompactionConfig(), smollm2, system_prompt="You are terse.")
    await window.start()
    assert isinstance(window.settings.counter, LlamaCppTokenCounter)
    assert window.settings.window == smollm2.context_window
    exact = window.settings.counter.count_text("You are terse.")
    assert window.settings.system_prompt_tokens == exact
    assert (
        window.measure([UserMessage.text("hello there")])
        == exact + window.settings.counter.count_text("hello there") + 4
    )
