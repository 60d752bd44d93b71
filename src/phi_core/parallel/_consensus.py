"""``ConsensusEvaluation``: minimum-Bayes-risk selection, the answer that agrees most with the
others. No judge call, so no position bias: the answers' order never changes the pick.

How two answers are compared depends on what they are (the first rule that fits a majority of
the answers decides the *method*, reported in the decision):

* ``letters``: a multiple-choice letter (``B``, ``(B)``, ``B)``, ``Answer: B``) — same letter;
* ``numbers``: a final number (the whole answer, ``the answer is 42``, ``#### 42``,
  ``\\boxed{42}``) — numerically equal;
* ``json``: a JSON value (bare or fenced) — equal after canonical serialisation;
* ``code``: Python with an entry function — same behaviour on the answers' own example inputs
  (:func:`~phi_core.parallel.code_agreement`, every answer in its own sandbox);
* otherwise text similarity: ``lexical`` (cosine of word unigram + bigram counts, the default)
  or ``embedding`` (cosine of all-MiniLM-L6-v2 sentence embeddings, the ``embed`` extra, loaded
  from the package's files without network).

An answer's *consensus score* is its mean agreement with every other answer; the highest wins.
Equal scores are a tie, broken by cost, then tokens, then branch order (``tie`` in the decision).
``details`` holds the method, each answer's extracted value, the agreement matrix and
``agreement_share`` (discrete methods: the share of answers that agree with the winner, the
winner included; similarity methods: the winner's mean similarity to the others). When code
cannot be run (no runnable answer, no sandbox here) the strategy falls back to lexical
similarity and emits one ``Warning``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from ..errors import SandboxUnavailableError, UserError
from ..types import AgentMessage
from ._behaviour import code_agreement
from ._code import analyse, extract_code
from ._strategies import BaseEvaluation, cost_key, normalize_answer, race_loop_id, successful
from ._types import EvaluationDecision, ParallelLoopOutcome

if TYPE_CHECKING:
    from ..cancel import CancelToken
    from ..events import Emitter
    from ..sandbox import Sandbox

__all__ = [
    "ConsensusEvaluation",
    "Similarity",
    "extract_json",
    "extract_letter",
    "extract_number",
    "lexical_similarity",
]

Similarity = Literal["lexical", "embedding"]
Method = Literal["letters", "numbers", "json", "code", "lexical", "embedding"]

_LETTER_ALONE = re.compile(r"^\s*[(\[]?([A-E])[)\].:]?\s*$")
_LETTER_LEAD = re.compile(r"^\s*(?:\(([A-E])\)|([A-E])[).:])(?:\s|$)")
_LETTER_SAID = re.compile(
    r"\b(?:answer|option|choice)\s*(?:is|:)?\s*(?:option\s*)?[(\[]?((?-i:[A-E]))\b", re.I
)
_NUMBER = r"[-+]?\$?\d[\d,]*(?:\.\d+)?"
_NUMBER_ALONE = re.compile(rf"^\s*({_NUMBER})\s*\.?\s*$")
_NUMBER_SAID = re.compile(rf"(?:answer\s*(?:is|:|=)\s*\**|####\s*|\\boxed\{{\s*)({_NUMBER})", re.I)
_JSON_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.S)
_WORD = re.compile(r"\w+")
TIE_TOLERANCE = 1e-9


def extract_letter(text: str) -> str | None:
    """The multiple-choice letter an answer gives, or None (a leading article "A" is not one)."""
    for pattern in (_LETTER_ALONE, _LETTER_LEAD):
        found = pattern.match(text)
        if found:
            return next(g for g in found.groups() if g)
    said = _LETTER_SAID.findall(text)
    return said[-1] if said else None


def extract_number(text: str) -> str | None:
    """The final number an answer states (normalised: ``1,000.50`` is ``1000.5``), or None."""
    found = _NUMBER_ALONE.match(text)
    raw = found.group(1) if found else None
    if raw is None:
        said = _NUMBER_SAID.findall(text)
        raw = said[-1] if said else None
    if raw is None:
        return None
    try:
        value = float(raw.replace(",", "").replace("$", ""))
    except ValueError:
        return None
    return f"{value:.10g}" if math.isfinite(value) else None


def extract_json(text: str) -> str | None:
    """The JSON value of an answer (bare, or its first fenced block), canonically serialised."""
    fenced = _JSON_FENCE.search(text)
    for candidate in (text.strip(), fenced.group(1).strip() if fenced else None):
        if not candidate or candidate[0] not in "[{":
            continue
        try:
            value = json.loads(candidate)
            return json.dumps(value, sort_keys=True, separators=(",", ":"))
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read
            continue
    return None


def _grams(text: str) -> Counter[str]:
    words = _WORD.findall(normalize_answer(text))
    return Counter(words) + Counter(f"{a} {b}" for a, b in itertools.pairwise(words))


def lexical_similarity(a: str, b: str) -> float:
    """Cosine similarity of word unigram + bigram counts (case- and punctuation-insensitive)."""
    one, two = _grams(a), _grams(b)
    if not one or not two:
        return 0.0
    dot = sum(count * two[gram] for gram, count in one.items())
    norm = math.sqrt(sum(c * c for c in one.values()) * sum(c * c for c in two.values()))
    return dot / norm


_EXTRACTORS: tuple[tuple[Method, Callable[[str], str | None]], ...] = (
    ("letters", extract_letter),
    ("numbers", extract_number),
    ("json", extract_json),
)


class ConsensusEvaluation(BaseEvaluation):
    """The answer that agrees most with the others (minimum Bayes risk); see the module docstring.

    ``similarity`` is the text measure when no answer format is recognised: ``"lexical"``
    (default, no dependency) or ``"embedding"`` (the ``embed`` extra; ``encoder`` replaces the
    model with any ``text -> vector`` callable). ``timeout``/``call_timeout``/``sandbox`` apply to
    code answers as in :class:`~phi_core.parallel.ExecVoteEvaluation`.

    Raises:
        MissingExtraError: ``similarity="embedding"`` without the ``embed`` extra.
    """

    name = "consensus"

    def __init__(
        self,
        *,
        similarity: Similarity = "lexical",
        encoder: Callable[[str], Sequence[float]] | None = None,
        timeout: float = 30.0,
        call_timeout: float = 1.0,
        sandbox: Sandbox | None = None,
    ) -> None:
        if similarity not in ("lexical", "embedding"):
            raise UserError(
                f"ConsensusEvaluation similarity must be 'lexical' or 'embedding', got "
                f"{similarity!r}."
            )
        if timeout <= 0 or call_timeout <= 0:
            raise UserError(
                f"ConsensusEvaluation timeouts must be > 0 seconds, got timeout={timeout}, "
                f"call_timeout={call_timeout}."
            )
        self.similarity: Similarity = similarity
        if similarity == "embedding" and encoder is None:
            from .._embedding import load_minilm

            encoder = load_minilm()
        self._encoder = encoder
        self.timeout = timeout
        self.call_timeout = call_timeout
        self.sandbox = sandbox

    async def evaluate(
        self,
        prompts: list[AgentMessage],
        outcomes: list[ParallelLoopOutcome],
        *,
        events: Emitter,
        cancel: CancelToken,
    ) -> EvaluationDecision:
        ok = successful(outcomes)
        if not ok:
            return self.no_success(outcomes)
        if len(ok) == 1:
            return self.decision(
                ok[0].config_index,
                rationale="only one branch succeeded; nothing to compare",
                details={"method": None, "agreement_share": None},
            )
        texts = [o.text for o in ok]
        if not any(t.strip() for t in texts):
            cheapest = min(ok, key=cost_key)
            return self.fall_back(
                cheapest.config_index,
                events,
                loop_id=race_loop_id(ok),
                reason="no successful branch gave a non-empty answer; picked the cheapest",
            )
        method, values, agree, problem = await self._agreement(texts)
        decision = self._pick(ok, method, values, agree)
        if problem is None:
            return decision
        reason = f"{problem}; compared the answers by lexical similarity instead"
        return self.fall_back(
            decision.index if decision.index is not None else ok[0].config_index,
            events,
            loop_id=race_loop_id(ok),
            reason=f"{reason}: {decision.rationale}",
            scores=decision.scores,
            tie=decision.tie,
            details=decision.details,
        )

    async def _agreement(
        self, texts: list[str]
    ) -> tuple[Method, list[str | None], list[list[float]], str | None]:
        """The method, each answer's extracted value (None where it has none or the method
        extracts nothing), the agreement matrix, and why code could not be compared (if so)."""
        n = len(texts)
        for method, extract in _EXTRACTORS:
            values = [extract(t) for t in texts]
            if sum(v is not None for v in values) * 2 > n:
                return method, values, _equal(values), None
        problem: str | None = None
        parsed = [analyse(extract_code(t)) for t in texts]
        if sum(a is not None and a.entry is not None for a in parsed) * 2 > n:
            try:
                report = await code_agreement(
                    texts,
                    timeout=self.timeout,
                    call_timeout=self.call_timeout,
                    sandbox=self.sandbox,
                )
            except SandboxUnavailableError as exc:
                problem = f"the answers are code but no sandbox can run them here ({exc})"
            else:
                if any(report.runnable):
                    classes = report.classes()
                    values = [None if c is None else f"behaviour {c}" for c in classes]
                    agree = [[1.0 if cell else 0.0 for cell in row] for row in report.agree]
                    return "code", values, agree, None
                problem = "the answers are code but none of it runs"
        if self.similarity == "embedding" and problem is None:
            # Encoding is CPU work: off the event loop, so the race's other tasks keep running.
            matrix = await asyncio.to_thread(self._embedding_matrix, texts)
            return "embedding", [None] * n, matrix, None
        matrix = [[lexical_similarity(a, b) for b in texts] for a in texts]
        return "lexical", [None] * n, matrix, problem

    def _embedding_matrix(self, texts: list[str]) -> list[list[float]]:
        assert self._encoder is not None
        vectors = [[float(x) for x in self._encoder(t)] for t in texts]
        norms = [math.sqrt(sum(x * x for x in v)) or 1.0 for v in vectors]
        return [
            [
                max(0.0, sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb))
                for b, nb in zip(vectors, norms, strict=True)
            ]
            for a, na in zip(vectors, norms, strict=True)
        ]

    def _pick(
        self,
        ok: list[ParallelLoopOutcome],
        method: Method,
        values: list[str | None],
        agree: list[list[float]],
    ) -> EvaluationDecision:
        n = len(ok)
        scores = [sum(agree[i][j] for j in range(n) if j != i) / (n - 1) for i in range(n)]
        top = max(scores)
        leaders = [k for k in range(n) if top - scores[k] <= TIE_TOLERANCE]
        discrete = method in ("letters", "numbers", "json", "code")
        # An answer with a recognisable value beats one without in a tie, then the cheaper.
        k = min(leaders, key=lambda j: (discrete and values[j] is None, cost_key(ok[j])))
        winner = ok[k]
        # Leaders that agree with each other (one answer given twice) are not a tie.
        tie = any(agree[a][b] < 1.0 for a in leaders for b in leaders if a != b)
        rivals = sum(1 for j in leaders if j != k and agree[k][j] < 1.0)
        if discrete:
            agreeing = 1 + sum(1 for j in range(n) if j != k and agree[k][j] >= 1.0)
            share = agreeing / n
            what = values[k] if values[k] is not None else "no recognisable answer"
            rationale = f"{agreeing} of {n} answers agree on {what!r} ({method})"
        else:
            share = top
            rationale = (
                f"highest mean {method} similarity to the other answers ({top:.2f}, branch "
                f"{winner.config_index})"
            )
        if tie:
            rationale += f"; tied with {rivals} other answer(s), cheapest wins"
        votes: dict[str, int] = {}
        if discrete:
            votes = dict(Counter(v for v in values if v is not None))
        return self.decision(
            winner.config_index,
            scores={o.config_index: round(s, 6) for o, s in zip(ok, scores, strict=True)},
            votes=votes,
            tie=tie,
            rationale=rationale,
            details={
                "method": method,
                "agreement_share": share,
                "answers": {o.config_index: v for o, v in zip(ok, values, strict=True)},
                "agreement": {
                    o.config_index: [round(x, 4) for x in row]
                    for o, row in zip(ok, agree, strict=True)
                },
            },
        )


def _equal(values: Sequence[str | None]) -> list[list[float]]:
    """1 where two answers extracted the same value (an answer without one agrees with none)."""
    return [[1.0 if a is not None and a == b else 0.0 for b in values] for a in values]
