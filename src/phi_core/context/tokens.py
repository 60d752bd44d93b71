"""Token counting: a pluggable :class:`TokenCounter`, the heuristic default and llama.cpp's exact
tokenizer for local GGUF models.

Compaction, its trigger, the context tracker and the ``prun`` tools all count through one
:class:`TokenCounter` (``CompactionConfig.token_counter``). Only text is model-specific, so a
counter implements :meth:`TokenCounter.count_text`; the per-message rules are shared:

* text and thinking: the counter's count of the text;
* an image: ``clamp(raw_bytes / 750, 85, 16000)`` where ``raw_bytes`` is the decoded size;
* a tool call: its name plus its JSON arguments, plus 8;
* a message: its content plus 4 (tool results: plus the tool name and 8; extension messages:
  their JSON data plus 4).

Which counter runs by default (:func:`token_counter_for`):

* a local GGUF model (``local:smollm2``, ``local:/path.gguf``) gets :class:`LlamaCppTokenCounter`:
  exact counts from the model's own vocabulary, loaded once with ``vocab_only=True`` (about
  0.1 s and a few MB, no weights, no network);
* every vendor model gets :class:`HeuristicTokenCounter` (⌈UTF-8 bytes / 4⌉). No vendor tokenizer
  ships as a default because none works offline: ``tiktoken`` downloads its BPE files on first
  use, Gemini's local tokenizer downloads its SentencePiece model, and Anthropic counts only
  through its API. Plug one in yourself with :class:`CallableTokenCounter`, e.g.
  ``CallableTokenCounter(lambda text: len(encoding.encode(text)))``.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from .._logging import get_logger
from ..errors import UserError
from ..types import (
    AgentMessage,
    ExtensionMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
)

if TYPE_CHECKING:
    from ..providers.base import ModelConfig

__all__ = [
    "HEURISTIC",
    "CallableTokenCounter",
    "HeuristicTokenCounter",
    "LlamaCppTokenCounter",
    "TokenCounter",
    "content_tokens",
    "message_tokens",
    "messages_tokens",
    "token_counter_for",
]


logger = get_logger("phi_core.context")


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of text for one model family. Must be cheap and thread-safe."""

    def count_text(self, text: str) -> int: ...


class HeuristicTokenCounter:
    """⌈UTF-8 bytes / 4⌉: phi-core's estimate, no tokenizer needed."""

    def count_text(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8")) / 4)

    def __repr__(self) -> str:
        return "HeuristicTokenCounter()"


HEURISTIC = HeuristicTokenCounter()


class CallableTokenCounter:
    """A counter from any ``text -> int`` function (a vendor tokenizer you already have)."""

    def __init__(self, count: Callable[[str], int], name: str = "custom") -> None:
        self._count = count
        self.name = name

    def count_text(self, text: str) -> int:
        return int(self._count(text))

    def __repr__(self) -> str:
        return f"CallableTokenCounter({self.name!r})"


class LlamaCppTokenCounter:
    """Exact counts from a GGUF file's own tokenizer (``llama_cpp.Llama.tokenize``).

    Only the vocabulary is loaded (``vocab_only=True``), lazily on the first count and once per
    file per process. A file whose vocabulary cannot be read raises :class:`UserError`, unless a
    ``fallback`` counter is given: then that one counts (the default counter of a local model
    has the heuristic as fallback, so a broken file is reported once, by the model call itself).
    """

    _vocabs: ClassVar[dict[str, Any]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: str | Path, fallback: TokenCounter | None = None) -> None:
        self.path = str(path)
        self.fallback = fallback
        self._unreadable = False

    def _vocab(self) -> Any:
        """The vocabulary; ``None`` when it cannot be read and a fallback counts instead."""
        if self._unreadable:
            return None
        with self._lock:
            vocab = self._vocabs.get(self.path)
            if vocab is None:
                from ..providers.local import load_vocab

                try:
                    vocab = load_vocab(Path(self.path))
                except UserError as exc:
                    if self.fallback is None:
                        raise
                    logger.debug("counting with %r instead: %s", self.fallback, exc)
                    self._unreadable = True
                    return None
                self._vocabs[self.path] = vocab
            return vocab

    def warm(self) -> None:
        """Load the vocabulary now (blocking; call it from a worker thread)."""
        self._vocab()

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        vocab = self._vocab()
        if vocab is None:
            assert self.fallback is not None
            return self.fallback.count_text(text)
        return len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def __repr__(self) -> str:
        return f"LlamaCppTokenCounter({Path(self.path).name!r})"


def token_counter_for(model: ModelConfig | None) -> TokenCounter:
    """The default counter for ``model`` (see the module docstring)."""
    if model is not None and model.api == "local_gguf":
        from ..providers.local import gguf_path_for

        return LlamaCppTokenCounter(gguf_path_for(model), fallback=HEURISTIC)
    return HEURISTIC


# --------------------------------------------------------------------------- message rules


def content_tokens(block: Any, counter: TokenCounter = HEURISTIC) -> int:
    if isinstance(block, TextContent):
        return counter.count_text(block.text)
    if isinstance(block, ThinkingContent):
        return counter.count_text(block.thinking)
    if isinstance(block, ImageContent):
        raw = len(block.data) * 3 // 4
        return min(max(raw // 750, 85), 16_000)
    if isinstance(block, ToolCall):
        return counter.count_text(block.name + json.dumps(block.arguments)) + 8
    return 0


def message_tokens(message: AgentMessage, counter: TokenCounter = HEURISTIC) -> int:
    """Tokens of one message under ``counter`` (the rules in the module docstring)."""
    if isinstance(message, ToolResultMessage):
        body = sum(content_tokens(b, counter) for b in message.content)
        return body + counter.count_text(message.tool_name) + 8
    if isinstance(message, ExtensionMessage):
        return counter.count_text(json.dumps(message.data, default=str)) + 4
    return sum(content_tokens(b, counter) for b in message.content) + 4


def messages_tokens(messages: Iterable[AgentMessage], counter: TokenCounter = HEURISTIC) -> int:
    return sum(message_tokens(m, counter) for m in messages)
