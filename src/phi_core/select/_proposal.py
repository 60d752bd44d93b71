"""LM proposal (``lm_proposal``): a language model proposes which combinations to evaluate.

AgentOpt's version (``reference/study-agentopt.md`` §2.7) asks ``gpt-4.1`` once for a single
combination and runs it on the full dataset. Here the proposer is any phi-core model (the
embedded ``local:smollm2`` by default, so it runs without a key) and it is asked in rounds: each
prompt shows the steps, the candidates with their prices, the objective, and every result so
far (accuracy, dollars per datapoint); the reply's combinations are evaluated on the full
dataset and the next round sees them. Replies are parsed leniently (a JSON object or list
anywhere in the text, or ``step=candidate`` names); when a round yields nothing usable after
``attempts`` tries, the round falls back to a rule (the unevaluated neighbours of the best so
far, cheapest first) and the run records a warning saying so.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from .._logging import get_logger
from ..errors import ProviderError, RunError, UserError
from ..metering import Meter, metering
from ..providers.base import ModelConfig, Provider
from ..providers.pricing import price_for
from ..types import Pricing
from ._algorithms import SelectionAlgorithm
from ._arena import Arena
from ._intercept_wire import ModelPrices, normalise_prices
from ._meter import MeteredModel
from ._space import SearchSpace

__all__ = ["LMProposal", "parse_proposals"]

logger = get_logger("phi_core.select")

DEFAULT_OBJECTIVE = "maximize accuracy, then minimize cost and latency"
_SYSTEM = (
    "You choose which model combinations of a multi-step AI agent to test next. "
    "Reply with JSON only."
)


class LMProposal(SelectionAlgorithm):
    """A language model proposes combinations in rounds; each is evaluated on the full dataset.

    Args:
        proposer: the model that proposes (a ``provider:model`` string, a
            :class:`~phi_core.providers.base.ModelConfig` or a
            :class:`~phi_core.select.MeteredModel`); default the embedded ``local:smollm2``.
        provider: call this provider instead of the registry's (tests: a ScriptedProvider).
        budget_fraction: evaluate at most ``ceil(budget_fraction * combinations)`` combinations
            (at least one).
        per_round: combinations asked for per round.
        attempts: tries per round before the rule-based fallback.
        objective: what the proposer is told to optimise.
        model_prices: ``{candidate: {"input_price": ..., "output_price": ...}}`` ($ per million
            tokens) shown to the proposer; ``provider:model`` candidates are also looked up in
            the price table.
        node_descriptions: ``{step: what the step does}`` shown to the proposer.
        max_tokens: reply length limit.
    """

    name = "lm_proposal"

    def __init__(
        self,
        proposer: str | ModelConfig | MeteredModel = "local:smollm2",
        *,
        provider: Provider | None = None,
        budget_fraction: float = 0.1,
        per_round: int = 3,
        attempts: int = 2,
        objective: str = DEFAULT_OBJECTIVE,
        model_prices: ModelPrices | None = None,
        node_descriptions: Mapping[str, str] | None = None,
        max_tokens: int = 300,
    ) -> None:
        super().__init__()
        if not 0 < budget_fraction <= 1:
            raise UserError(f"budget_fraction must be in (0, 1], got {budget_fraction!r}.")
        if per_round < 1 or attempts < 1 or max_tokens < 1:
            raise UserError("per_round, attempts and max_tokens must be >= 1.")
        self._model = (
            proposer
            if isinstance(proposer, MeteredModel)
            else MeteredModel(proposer, provider=provider, temperature=0.0, max_tokens=max_tokens)
        )
        self.proposer = self._model.name
        self.budget_fraction = budget_fraction
        self.per_round = per_round
        self.attempts = attempts
        self.objective = objective
        self._prices = normalise_prices(model_prices)
        self._descriptions = dict(node_descriptions or {})
        self.max_tokens = max_tokens
        self._last_error = ""
        self.proposed = 0
        """Combinations the proposer named that were evaluated (the rest came from fallbacks)."""
        self.proposal_cost_usd = 0.0
        """Dollars the proposer's calls of the last run cost (cache hits free): the selection
        counts them in its ``cost_usd`` and ``proposal_cost_usd``, in no combination's cost."""
        self.proposal_calls = 0
        """Model calls the proposer made in the last run (metered, refused and failed ones too)."""

    async def run(self, arena: Arena, space: SearchSpace) -> int:
        limit = min(arena.n_combos, max(1, math.ceil(self.budget_fraction * arena.n_combos)))
        seen: list[int] = []
        self.pool = set()
        self.proposed = 0
        self.proposal_cost_usd = 0.0
        self.proposal_calls = 0
        round_ = 0
        while len(seen) < limit:
            round_ += 1
            want = min(self.per_round, limit - len(seen))
            picks = await self._ask(arena, space, seen, want, round_)
            if picks:
                self.proposed += len(picks)
            else:
                picks = _fallback(arena, space, seen, want)
                self.warnings.append(
                    f"lm_proposal: round {round_}: {self.proposer} gave no usable combination "
                    f"in {self.attempts} tries (last: {self._last_error}); evaluated "
                    f"{len(picks)} chosen by rule (neighbours of the best so far, cheapest first)."
                )
                logger.warning("%s", self.warnings[-1])
            seen.extend(picks)
            self.pool.update(picks)
            await arena.evaluate_prefix(picks, arena.n_datapoints)
        return arena.best(seen)

    async def _ask(
        self, arena: Arena, space: SearchSpace, seen: list[int], want: int, round_: int
    ) -> list[int]:
        prompt = self._prompt(arena, space, seen, want)
        for attempt in range(self.attempts):
            meter = Meter()  # inside the run's meters: held to its budget, counted apart
            try:
                with metering(meter):
                    reply = await self._model.complete(
                        prompt, system=_SYSTEM, temperature=0.0, sample=round_ * 16 + attempt
                    )
            except (ProviderError, RunError) as error:  # advisory: a failed call falls back
                self._last_error = f"{type(error).__name__}: {error}"
                continue
            finally:
                self.proposal_cost_usd += meter.spent
                self.proposal_calls += len(meter.calls)
            self._last_error = f"unusable reply {reply[:120]!r}"
            picks = [k for k in parse_proposals(reply, space) if k not in seen][:want]
            if picks:
                return picks
        return []

    def _prompt(self, arena: Arena, space: SearchSpace, seen: list[int], want: int) -> str:
        lines = [f"Objective: {self.objective}.", "", "Steps and their candidate models:"]
        for step, candidates in zip(space.steps, space.candidates, strict=True):
            about = self._descriptions.get(step)
            lines.append(f"- {step}" + (f" ({about})" if about else "") + ":")
            for c in candidates:
                price = self._price(c)
                shown = (
                    f" (${price.input:g} in / ${price.output:g} out per million tokens)"
                    if price
                    else ""
                )
                lines.append(f"    {c}{shown}")
        if seen:
            lines += ["", f"Results so far ({arena.n_datapoints} questions each):"]
            for k in sorted(seen, key=arena.rank_key):
                _, acc, cost, _ = arena.summary(k)
                lines.append(
                    f"- {json.dumps(space.labels(k))}: accuracy {100 * acc:.1f} %, "
                    f"${cost:.5f} per question"
                )
        example = json.dumps(
            {
                "combinations": [
                    {s: c[0] for s, c in zip(space.steps, space.candidates, strict=True)}
                ]
            }
        )
        lines += [
            "",
            f"Propose {want} new combination(s) not tested yet, one candidate per step, "
            f"as JSON like {example}.",
        ]
        return "\n".join(lines)

    def _price(self, candidate: str) -> Pricing | None:
        if candidate in self._prices:
            return self._prices[candidate]
        provider, sep, model = candidate.partition(":")
        return price_for(provider, model) if sep else None


def parse_proposals(text: str, space: SearchSpace) -> list[int]:
    """Combinations named in a proposer's reply, in order, without repeats.

    Accepts a JSON object ``{"combinations": [{step: candidate}, ...]}`` or
    ``{"combination": {...}}``, a bare list of such objects, or one object, anywhere in the text
    (code fences and prose around it are ignored); candidates match exactly, then
    case-insensitively, then as the one candidate containing (or contained in) the text. Without
    usable JSON, ``step=candidate`` pairs in the text are read. Nothing usable: ``[]``.
    """
    out: list[int] = []
    for labels in _json_objects(text):
        k = _match(labels, space)
        if k is not None and k not in out:
            out.append(k)
    if out:
        return out
    for chunk in re.split(r"[\n;]|\},?", text):
        pairs = dict(re.findall(r"([\w.-]+)\s*[=:]\s*\"?([^\s\",+]+(?:\s[^\s\",+=]+)*)", chunk))
        k = _match(pairs, space)
        if k is not None and k not in out:
            out.append(k)
    return out


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every ``{step: candidate}`` mapping in the first decodable JSON value(s) of ``text``."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    i = 0
    while i < len(text):
        start = min((j for j in (text.find("{", i), text.find("[", i)) if j >= 0), default=-1)
        if start < 0:
            break
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            i = start + 1
            continue
        found.extend(_mappings(value))
        i = end
    return found


def _mappings(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [m for item in value for m in _mappings(item)]
    if not isinstance(value, dict):
        return []
    for key in ("combinations", "combination", "proposals", "proposal"):
        if key in value:
            return _mappings(value[key])
    return [value]


def _match(labels: Mapping[str, Any], space: SearchSpace) -> int | None:
    if not labels:
        return None
    lowered = {str(k).strip().lower(): str(v).strip() for k, v in labels.items()}
    coords = []
    for step, candidates in zip(space.steps, space.candidates, strict=True):
        given = lowered.get(step.lower())
        if given is None:
            return None
        choice = _candidate(given, candidates)
        if choice is None:
            return None
        coords.append(choice)
    return space.index(coords)


def _candidate(given: str, candidates: list[str]) -> int | None:
    if given in candidates:
        return candidates.index(given)
    low = given.lower()
    exact = [i for i, c in enumerate(candidates) if c.lower() == low]
    if len(exact) == 1:
        return exact[0]
    loose = [i for i, c in enumerate(candidates) if low and (low in c.lower() or c.lower() in low)]
    if len(loose) == 1:
        return loose[0]
    if len(loose) > 1:  # the longest candidate name the text contains ("a-mini" over "a")
        inside = [i for i in loose if candidates[i].lower() in low]
        if inside:
            return max(inside, key=lambda i: len(candidates[i]))
    return None


def _fallback(arena: Arena, space: SearchSpace, seen: list[int], want: int) -> list[int]:
    """Unevaluated neighbours of the best evaluated combination (cheapest known step prices
    first, then index), or, before any result, evenly spread combinations; random fill."""
    picks: list[int] = []
    if seen:
        best = arena.best(seen)
        cost = _step_costs(arena, space, seen)
        options = [k for k in space.neighbours(best) if k not in seen]
        options.sort(key=lambda k: (sum(cost.get(x, math.inf) for x in _items(space, k)), k))
        picks = options[:want]
    rest = [k for k in range(arena.n_combos) if k not in seen and k not in picks]
    if len(picks) < want and rest:
        picks += arena.rng.sample(rest, min(want - len(picks), len(rest)))
    return picks


def _items(space: SearchSpace, k: int) -> list[tuple[str, str]]:
    return list(space.labels(k).items())


def _step_costs(arena: Arena, space: SearchSpace, seen: list[int]) -> dict[tuple[str, str], float]:
    """Mean observed cost per question of the combinations each (step, candidate) appeared in."""
    sums: dict[tuple[str, str], list[float]] = {}
    for k in seen:
        _, _, cost, _ = arena.summary(k)
        for item in _items(space, k):
            sums.setdefault(item, []).append(cost)
    return {item: sum(v) / len(v) for item, v in sums.items()}
