"""The budget and the meter every model call goes through — loops, races, bandit races, judges
and selection alike.

A :class:`Meter` records every call made while it is active (``with metering(meter): ...`` —
a context variable, so it follows tasks and threads started inside the block) and, when it has
a :class:`Budget`, enforces it by **reservation**: before a call is sent it reserves the
worst case the call can cost, and

- a call gets at most the tokens that remain (its output limit is lowered to fit) — and, when it
  is one of several concurrent calls under one token budget (:func:`sharing`: a race's branches,
  a judge's orders), at most its share of them, so one call cannot starve its siblings;
- a call whose worst-case dollars exceed what remains, or that would exceed the call count or
  the wall clock, is refused before it is sent (:class:`~phi_core.errors.BudgetExceededError`,
  outcome status ``over_budget``);
- concurrent calls cannot jointly overshoot: what one reserved is unavailable to the others
  until it settles with its real usage.

Meters nest: a selection's meter (with the run's budget) holds the meters of its cells, a race's
meter holds its branches' calls; a call records into every active meter and must fit every
active budget.

Input tokens are estimated before a call (:func:`estimate_tokens`: a cautious three characters
a token, plus a few per message); the vendor's reported usage replaces the estimate when the call
settles. Output can never exceed the reserved limit; input can exceed its estimate only where a
tokenizer packs fewer than three characters a token (some non-Latin scripts), so a token budget
is exact for output and holds for input within that estimate. The one output phi cannot bound —
an intercepted SDK call that sets no output limit to a model outside the catalog — is reserved
against a dollar budget at :data:`UNBOUNDED_OUTPUT_ALLOWANCE` tokens.

A :class:`Budget` is enforced per run: each run it is passed to meters its own allowance; runs
share one allowance only under one :class:`Meter` (``with metering(Meter(budget)):``).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import BudgetExceededError, UserError
from .types import Usage

if TYPE_CHECKING:
    from .types import Pricing

__all__ = [
    "MAX_COUNT_LIMIT",
    "UNBOUNDED_OUTPUT_ALLOWANCE",
    "Budget",
    "CallRecord",
    "Meter",
    "Reservation",
    "active_meters",
    "call_metered_here",
    "check_amount_limit",
    "check_count_limit",
    "estimate_request_tokens",
    "estimate_tokens",
    "metered_here",
    "metering",
    "record_everywhere",
    "reserve",
    "settle",
    "sharing",
    "token_share",
]


MAX_COUNT_LIMIT = 10**15
"""The largest whole-number limit accepted (tokens, calls, turns): far beyond any real run, small
enough to stay exact in the float arithmetic limits go through."""

UNBOUNDED_OUTPUT_ALLOWANCE = 128_000
"""Output tokens a dollar budget reserves for a call whose output phi cannot bound — it sets no
output limit and its model is not in the catalog (an intercepted SDK call to an unknown model):
the largest output any catalogued model allows
(:data:`phi_core.providers.catalog.MODEL_INFO`). The request itself is not changed."""


def check_count_limit(what: str, value: object) -> None:
    """Refuse a whole-number limit (``None``: no limit) that is not an ``int`` (``bool``
    refused) in ``1 .. MAX_COUNT_LIMIT``; ``what`` names it in the error (``Budget.max_calls``).

    Raises:
        UserError: naming ``what``, the value and the accepted range.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(
            f"{what} must be a whole number from 1 to {MAX_COUNT_LIMIT:,} (an int; or None for "
            f"no limit), got {_shown(value)}."
        )
    if not 1 <= value <= MAX_COUNT_LIMIT:
        raise UserError(
            f"{what} must be > 0: a whole number from 1 to {MAX_COUNT_LIMIT:,} (or None for "
            f"no limit), got {_shown(value)}."
        )


def check_amount_limit(what: str, value: object, unit: str) -> None:
    """Refuse a limit in dollars or seconds (``None``: no limit) that is not a finite number
    > 0 (``bool`` refused); ``what`` names it in the error, ``unit`` says what it counts.

    Raises:
        UserError: naming ``what``, the value and the accepted range.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(
            f"{what} must be a number of {unit} > 0 (finite; or None for no limit), "
            f"got {_shown(value)}."
        )
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        number = math.inf
    if not (math.isfinite(number) and number > 0):
        raise UserError(
            f"{what} must be > 0 (a finite number of {unit}; or None for no limit), "
            f"got {_shown(value)}."
        )


def _shown(value: object) -> str:
    """``repr(value)``, shortened when it is long (a 400-digit int)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits on what a run may spend; ``None`` switches a limit off.

    Attributes:
        max_tokens: the tokens of every call together — input (cache reads and writes
            included) and output — as the agent loop's ``max_total_tokens`` counts them (an
            int, 1 to 10**15).
        max_cost_usd: dollars actually paid (cache hits are free; finite, > 0).
        max_wall_s: seconds since the meter started; a call never runs past it (finite, > 0).
        max_calls: model calls sent (cache hits do not count; an int, 1 to 10**15).

    **Per run.** A Budget is a description of limits, not a pool: every run it is passed to
    (``agent_loop_parallel(budget=...)``, ``BanditRace(budget=...)``, a selection, …) starts its
    own :class:`Meter` with its own allowance, so one Budget object passed to two concurrent
    runs lets each of them spend the whole of it. To share one allowance, run them under one
    meter — ``with metering(Meter(budget)): await asyncio.gather(run_a(), run_b())`` — every
    call made in the block must fit that meter's budget.

    **What a reservation assumes.** Before a call is sent its worst case is reserved: the input
    estimated cautiously (:func:`estimate_tokens`) plus the call's output limit — its own, else
    the model's from the catalog, else (when a dollar budget needs one, for an intercepted SDK
    call to a model outside the catalog that sets no limit) :data:`UNBOUNDED_OUTPUT_ALLOWANCE`
    tokens (128,000, the largest output any catalogued model allows). A token budget instead
    lowers an unbounded call's output limit to the tokens that remain. So a budget can be
    exceeded only by what calls in flight spend beyond their reservation: input beyond its
    estimate, or output beyond the allowance from a model that writes more than any catalogued
    one.
    """

    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_wall_s: float | None = None
    max_calls: int | None = None

    def __post_init__(self) -> None:
        check_count_limit("Budget.max_tokens", self.max_tokens)
        check_amount_limit("Budget.max_cost_usd", self.max_cost_usd, "dollars")
        check_amount_limit("Budget.max_wall_s", self.max_wall_s, "seconds")
        check_count_limit("Budget.max_calls", self.max_calls)

    @property
    def unlimited(self) -> bool:
        return (
            self.max_tokens is None
            and self.max_cost_usd is None
            and self.max_wall_s is None
            and self.max_calls is None
        )


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call as a meter saw it."""

    model: str
    usage: Usage
    cost_usd: float
    latency_s: float
    cached: bool = False
    estimated: bool = False
    """True when the stream was cut before the vendor reported usage (the usage is estimated)."""
    error_kind: str | None = None
    error: str | None = None

    @property
    def sent(self) -> bool:
        """Whether the call went out (cache hits and budget refusals did not)."""
        return not self.cached and self.error_kind != "budget"

    @property
    def cost(self) -> float:  # selection's name for it
        return self.cost_usd

    @property
    def latency(self) -> float:  # selection's name for it
        return self.latency_s


@dataclass(slots=True)
class Reservation:
    """What one call may spend, held against every active budget until it settles."""

    max_output: int | None
    """The output-token limit the call must be sent with (``None``: the call's own)."""
    tokens: int = 0
    cost_usd: float = 0.0
    meters: tuple[Meter, ...] = ()
    settled: bool = False


def estimate_tokens(text: str) -> int:
    """A cautious estimate of the tokens ``text`` takes, so budgets err on the safe side: one per
    three characters (English prose runs about four characters a token, code about three), plus
    one per UTF-8 byte past the first of every character outside ASCII (CJK text runs one to two
    tokens a character and emoji up to three in small vocabularies, where a character count
    would undercount them several times)."""
    estimate = (len(text) + 2) // 3
    if not text.isascii():
        estimate += len(text.encode("utf-8", "surrogatepass")) - len(text)
    return estimate


def estimate_request_tokens(
    system_prompt: str | None, messages: Sequence[Any], tools: Sequence[Any] = ()
) -> int:
    """Estimated input tokens of a request: its text plus a few tokens of framing per message."""
    total = estimate_tokens(system_prompt or "") + 4
    for message in messages:
        total += 4
        for block in getattr(message, "content", ()) or ():
            text = getattr(block, "text", None) or getattr(block, "thinking", None)
            if text:
                total += estimate_tokens(text)
            elif getattr(block, "type", "") == "tool_call":
                total += estimate_tokens(str(getattr(block, "arguments", ""))) + 8
            elif getattr(block, "type", "") == "image":
                total += 768
    for tool in tools:
        dump = tool.model_dump_json() if hasattr(tool, "model_dump_json") else str(tool)
        total += estimate_tokens(dump)
    return total


class Meter:
    """Records the calls made while it is active and enforces its :class:`Budget`.

    Thread-safe: sync agents under selection call models from worker threads.
    """

    def __init__(
        self,
        budget: Budget | None = None,
        *,
        seed: int | None = None,
        refusal: Callable[[BudgetExceededError], BudgetExceededError] | None = None,
    ) -> None:
        self.budget = budget if budget is not None and not budget.unlimited else None
        self.seed = seed
        """A selection run's seed: calls without their own seed derive one from it."""
        self.refusal = refusal
        """How this meter words a call its budget refuses (the refusal, in; what is raised,
        out): a gateway key's allowance names the key's own limit. ``None``: as it is."""
        self.calls: list[CallRecord] = []
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._reserved_tokens = 0
        self._reserved_cost = 0.0
        self._reserved_calls = 0

    # ------------------------------------------------------------------ totals

    @property
    def usage(self) -> Usage:
        """Tokens of every call, cache hits included (what the work takes without a cache)."""
        with self._lock:
            return Usage.sum(c.usage for c in self.calls)

    @property
    def paid_usage(self) -> Usage:
        """Tokens of the calls actually sent (cache hits and budget refusals excluded)."""
        with self._lock:
            return Usage.sum(c.usage for c in self.calls if c.sent)

    @property
    def cost(self) -> float:
        """Dollars of every call, cache hits included (what the work costs without a cache)."""
        with self._lock:
            return sum(c.cost_usd for c in self.calls)

    @property
    def spent(self) -> float:
        """Dollars actually paid (cache hits are free)."""
        with self._lock:
            return sum(c.cost_usd for c in self.calls if not c.cached)

    @property
    def tokens(self) -> int:
        """Tokens of the calls actually sent: input (cache reads and writes included) and
        output."""
        with self._lock:
            return sum(_tokens(c.usage) for c in self.calls if c.sent)

    @property
    def calls_sent(self) -> int:
        """Calls actually sent (cache hits and budget refusals excluded)."""
        with self._lock:
            return sum(1 for c in self.calls if c.sent)

    @property
    def input_tokens(self) -> int:
        with self._lock:
            return sum(c.usage.input + c.usage.cache_read + c.usage.cache_write for c in self.calls)

    @property
    def output_tokens(self) -> int:
        with self._lock:
            return sum(c.usage.output for c in self.calls)

    @property
    def model_latency(self) -> float:
        with self._lock:
            return sum(c.latency_s for c in self.calls)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining_wall(self) -> float | None:
        """Seconds left on the wall-clock budget (``None``: no such limit)."""
        if self.budget is None or self.budget.max_wall_s is None:
            return None
        return self.budget.max_wall_s - self.elapsed()

    # ------------------------------------------------------------------ recording

    def record(self, call: CallRecord) -> None:
        with self._lock:
            self.calls.append(call)

    def _check(
        self,
        input_tokens: int,
        max_output: int | None,
        pricing: Pricing | None,
        parties: int = 1,
    ) -> int | None:
        """The output limit this meter allows a call (under its lock); raises when none fits.

        ``parties`` (see :func:`sharing`): the call is one of that many sharing the tokens left;
        it gets what is left divided among the parties without a call in flight (itself
        included), so the first of N concurrent calls cannot reserve the whole budget."""
        budget = self.budget
        if budget is None:
            return max_output
        if budget.max_wall_s is not None and self.elapsed() >= budget.max_wall_s:
            raise BudgetExceededError(
                f"wall-clock budget of {budget.max_wall_s:g}s spent ({self.elapsed():.1f}s)",
                limit="wall",
            )
        if budget.max_calls is not None:
            made = sum(1 for c in self.calls if c.sent) + self._reserved_calls
            if made + 1 > budget.max_calls:
                raise BudgetExceededError(
                    f"call budget of {budget.max_calls} spent ({made} sent or in flight)",
                    limit="calls",
                )
        cap = max_output
        if budget.max_tokens is not None:
            used = sum(_tokens(c.usage) for c in self.calls if c.sent)
            left = budget.max_tokens - used - self._reserved_tokens - input_tokens
            if left < 1:
                raise BudgetExceededError(
                    f"token budget of {budget.max_tokens} cannot fit another call "
                    f"({used} used, {self._reserved_tokens} reserved, ~{input_tokens} input "
                    "tokens needed)",
                    limit="tokens",
                )
            if parties > 1:
                waiting = max(1, parties - self._reserved_calls)
                left = max(1, left // waiting)
            cap = left if cap is None else min(cap, left)
        if budget.max_cost_usd is not None:
            spent = sum(c.cost_usd for c in self.calls if c.sent)
            left_usd = budget.max_cost_usd - spent - self._reserved_cost
            worst = _worst_cost(input_tokens, cap, pricing)
            if worst > left_usd + 1e-12:
                assumed = (
                    f"; it sets no output limit and its model's is unknown, so "
                    f"{UNBOUNDED_OUTPUT_ALLOWANCE:,} output tokens are assumed"
                    if cap is None
                    else ""
                )
                raise BudgetExceededError(
                    f"dollar budget ${budget.max_cost_usd:g}: this call may cost up to "
                    f"${worst:.4f} but ${max(left_usd, 0.0):.4f} remains (${spent:.4f} spent, "
                    f"${self._reserved_cost:.4f} reserved{assumed})",
                    limit="cost",
                )
        return cap


def _tokens(usage: Usage) -> int:
    return usage.input + usage.cache_read + usage.cache_write + usage.output


def _worst_cost(input_tokens: int, max_output: int | None, pricing: Pricing | None) -> float:
    """The most a call can cost: its input estimate and its output limit at full price; a call
    with no output limit (none known to phi) at :data:`UNBOUNDED_OUTPUT_ALLOWANCE`."""
    if pricing is None:
        return 0.0
    output = max_output if max_output is not None else UNBOUNDED_OUTPUT_ALLOWANCE
    return (input_tokens * pricing.input + output * pricing.output) / 1_000_000


_active: ContextVar[tuple[Meter, ...]] = ContextVar("phi_active_meters", default=())


def active_meters() -> tuple[Meter, ...]:
    """The meters active in this context, outermost first."""
    return _active.get()


@contextlib.contextmanager
def metering(meter: Meter | None = None) -> Iterator[Meter]:
    """Make ``meter`` (a new one by default) record — and budget — every call in the block."""
    meter = meter if meter is not None else Meter()
    token = _active.set((*_active.get(), meter))
    try:
        yield meter
    finally:
        _active.reset(token)


def reserve(
    *,
    input_tokens: int,
    max_output: int | None,
    model_max_output: int | None,
    pricing: Pricing | None,
    meters: tuple[Meter, ...] | None = None,
) -> Reservation:
    """Reserve a call's worst case on every active meter (all or none).

    ``max_output`` is the call's own output limit; ``model_max_output`` the model's, used as the
    worst case when the call sets none but a budget needs one. With neither, a token budget
    lowers the output limit to what remains and a dollar budget reserves
    :data:`UNBOUNDED_OUTPUT_ALLOWANCE` output tokens (the request is not changed for it).

    Raises:
        BudgetExceededError: a budget cannot fit the call; nothing stays reserved.
    """
    meters = active_meters() if meters is None else meters
    parties = _parties.get()
    budgeted = [m for m in meters if m.budget is not None]
    if not budgeted:
        return Reservation(max_output=max_output, meters=meters)
    # Lock in a fixed order (by id) so two calls reserving on the same meters cannot deadlock.
    ordered = sorted(budgeted, key=id)
    for meter in ordered:
        meter._lock.acquire()
    try:
        worst_output = max_output if max_output is not None else model_max_output
        cap = worst_output
        for meter in ordered:
            try:
                cap = meter._check(input_tokens, cap, pricing, parties)
            except BudgetExceededError as exc:
                if meter.refusal is None:
                    raise
                raise meter.refusal(exc) from None
        cost = _worst_cost(input_tokens, cap, pricing)
        tokens = input_tokens + (cap or 0)
        for meter in ordered:
            meter._reserved_tokens += tokens
            meter._reserved_cost += cost
            meter._reserved_calls += 1
    finally:
        for meter in reversed(ordered):
            meter._lock.release()
    lowered = (
        cap if cap is not None and (worst_output is None or cap < worst_output) else max_output
    )
    return Reservation(max_output=lowered, tokens=tokens, cost_usd=cost, meters=meters)


def settle(reservation: Reservation, call: CallRecord) -> None:
    """Release ``reservation`` and record what the call really used, on every meter it held."""
    for meter in reservation.meters:
        with meter._lock:
            if not reservation.settled and meter.budget is not None:
                meter._reserved_tokens -= reservation.tokens
                meter._reserved_cost -= reservation.cost_usd
                meter._reserved_calls -= 1
            meter.calls.append(call)
    reservation.settled = True


def record_everywhere(call: CallRecord, meters: tuple[Meter, ...] | None = None) -> None:
    """Record a call that needed no reservation (a cache hit) on every active meter."""
    for meter in active_meters() if meters is None else meters:
        meter.record(call)


_T = TypeVar("_T")
_metered_here: ContextVar[bool] = ContextVar("phi_call_metered_here", default=False)


_parties: ContextVar[int] = ContextVar("phi_token_parties", default=1)


@contextlib.contextmanager
def sharing(parties: int) -> Iterator[None]:
    """Calls made in the block (tasks started in it included) are among ``parties`` concurrent
    callers of the active token budgets: each call's output limit is at most an equal share of
    the tokens left among the parties that have no call in flight (``left // (parties -
    calls in flight)``), so the first of a race's branches cannot reserve the whole budget and
    starve the others. The total is enforced as ever; ``parties`` 1 is no sharing. A race counts
    room for its judge among its parties (``agent_loop_parallel``)."""
    token = _parties.set(max(1, parties))
    try:
        yield
    finally:
        _parties.reset(token)


def token_share(count: int) -> int | None:
    """Tokens each of ``count`` concurrent calls may take from the active token budgets
    (``None``: no token budget is active)."""
    shares = [
        (m.budget.max_tokens - m.tokens) // max(1, count)
        for m in active_meters()
        if m.budget is not None and m.budget.max_tokens is not None
    ]
    return min(shares) if shares else None


def call_metered_here() -> bool:
    """Whether the code running now is a call path that meters its own calls (``ModelCall``).

    Interception of SDK calls (selection) leaves HTTP requests sent from such code alone, so a
    call is never counted twice.
    """
    return _metered_here.get()


async def metered_here(stream: AsyncIterator[_T]) -> AsyncGenerator[_T, None]:
    """Iterate ``stream`` with :func:`call_metered_here` true while each of its steps runs — and
    only then: the flag is reset before every item is handed on, so the consumer never sees it."""
    try:
        while True:
            token = _metered_here.set(True)
            try:
                item = await anext(stream)
            except StopAsyncIteration:
                return
            finally:
                _metered_here.reset(token)
            yield item
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            token = _metered_here.set(True)
            try:
                await close()
            finally:
                _metered_here.reset(token)
