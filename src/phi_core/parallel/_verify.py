"""Verifiers: checks an answer must pass, the strategy that picks the cheapest (or fastest)
passing branch, early accept, and ``CompositeEvaluation`` (cheap filters, then a judge among
the survivors).

A check is anything with ``async check(outcome, *, cancel) -> CheckResult``. Built-in checks: a
predicate over the answer text (sync or async), a regex, a JSON-schema check of the JSON in the
answer, and Python unit tests run against the answer's code in a sandbox with a timeout.
"""

from __future__ import annotations

import inspect
import json
import re
import secrets
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import jsonschema

from .._tasks import STOPS, is_real_cancellation, run_all
from ..errors import UserError, redact
from ..sandbox import Sandbox, default_sandbox
from ..types import AgentMessage
from ._behaviour import WORKER as _WORKER
from ._race import describe_exception
from ._strategies import (
    BaseEvaluation,
    PickFirstEvaluation,
    cost_key,
    latency_key,
    race_loop_id,
    successful,
)
from ._types import EvaluationDecision, EvaluationStrategy, ParallelLoopOutcome

if TYPE_CHECKING:
    from ..cancel import CancelToken
    from ..events import Emitter

__all__ = [
    "Check",
    "CheckResult",
    "CompositeEvaluation",
    "JsonSchemaCheck",
    "PredicateCheck",
    "PythonTestsCheck",
    "RegexCheck",
    "VerifierEvaluation",
    "as_check",
]


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    reason: str = ""


@runtime_checkable
class Check(Protocol):
    """Decides whether one branch's answer is acceptable."""

    name: str

    async def check(self, outcome: ParallelLoopOutcome, *, cancel: CancelToken) -> CheckResult: ...


Predicate = Callable[[str], "bool | Awaitable[bool]"]


class PredicateCheck:
    """``fn(answer_text) -> bool`` (sync or async). A predicate that raises fails the answer."""

    def __init__(self, fn: Predicate, name: str | None = None) -> None:
        if not callable(fn):
            raise UserError(f"PredicateCheck needs a callable taking the answer text, got {fn!r}.")
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "predicate"))

    async def check(self, outcome: ParallelLoopOutcome, *, cancel: CancelToken) -> CheckResult:
        try:
            value = self.fn(outcome.text)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            return CheckResult(False, f"{self.name} raised {type(exc).__name__}: {exc}")
        return CheckResult(bool(value), f"{self.name} returned {bool(value)}")


class RegexCheck:
    """The answer matches ``pattern`` (``re.search``; ``full=True`` for a full match)."""

    def __init__(self, pattern: str, *, full: bool = False, flags: int = 0) -> None:
        try:
            self.pattern = re.compile(pattern, flags)
        except re.error as exc:
            raise UserError(f"RegexCheck pattern {pattern!r} is not a valid regex: {exc}.") from exc
        self.full = full
        self.name = f"regex {pattern!r}"

    async def check(self, outcome: ParallelLoopOutcome, *, cancel: CancelToken) -> CheckResult:
        text = outcome.text.strip()
        found = self.pattern.fullmatch(text) if self.full else self.pattern.search(text)
        return CheckResult(found is not None, "matched" if found else "no match")


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def _fenced(text: str, languages: Sequence[str]) -> str | None:
    """The last fenced block in one of ``languages`` (or untagged), if any."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    for lang, body in reversed(blocks):
        if lang in languages or lang == "":
            return str(body)
    return None


def extract_json(text: str) -> Any:
    """The JSON value in an answer: the whole text, a fenced block, or the outermost object."""
    candidates = [text.strip()]
    fenced = _fenced(text, ("json",))
    if fenced is not None:
        candidates.append(fenced)
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read
            continue
    raise ValueError("the answer contains no JSON value")


class JsonSchemaCheck:
    """The JSON in the answer validates against ``schema`` (checked when constructed)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        validator_cls = jsonschema.validators.validator_for(schema)
        try:
            validator_cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise UserError(f"JsonSchemaCheck got an invalid JSON schema: {exc.message}") from exc
        self.validator = validator_cls(schema)
        self.name = "json-schema"

    async def check(self, outcome: ParallelLoopOutcome, *, cancel: CancelToken) -> CheckResult:
        try:
            value = extract_json(outcome.text)
        except ValueError as exc:
            return CheckResult(False, str(exc))
        try:
            errors = sorted(self.validator.iter_errors(value), key=lambda e: list(e.path))
        except RecursionError:
            return CheckResult(False, "the answer's JSON is nested too deeply to validate")
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.path) or "(root)"
            return CheckResult(False, f"schema violation at {where}: {first.message}")
        return CheckResult(True, "valid against the schema")


class PythonTestsCheck:
    """Runs ``tests`` (Python code with asserts, or ``unittest.main()``) after the answer's code,
    in a sandbox (:class:`phi_core.sandbox.Sandbox`).

    The answer's code is its last fenced ``python`` (or untagged) block, else its whole text. It
    runs as ``__main__`` first; the tests then run in the same module and the answer passes when
    they end normally within ``timeout`` seconds. Code that exits early (``sys.exit(0)`` while
    loading, or from a function the tests call) fails. The reason of a failure carries the end
    of the output, with anything that looks like a key redacted. The tests run in the same
    process as the answer's code, so code written to cheat (patching what the tests use) can
    still pass them: the sandbox contains what it does, it cannot make it honest.
    """

    def __init__(
        self,
        tests: str,
        *,
        timeout: float = 10.0,
        python: str | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        if timeout <= 0:
            raise UserError(f"PythonTestsCheck timeout must be > 0 seconds, got {timeout}.")
        try:
            compile(tests, "<tests>", "exec")
        except SyntaxError as exc:
            raise UserError(f"PythonTestsCheck tests do not compile: {exc}") from exc
        self.tests = tests
        self.timeout = timeout
        box = sandbox if sandbox is not None else default_sandbox()
        self.sandbox = box if python is None else box.replace(python=python)
        self.sandbox.check()  # no sandbox here: refuse now, before any model is called
        self.name = "python-tests"

    @staticmethod
    def code_of(text: str) -> str:
        fenced = _fenced(text, ("python", "py", "python3"))
        return fenced if fenced is not None else text

    async def check(self, outcome: ParallelLoopOutcome, *, cancel: CancelToken) -> CheckResult:
        token = secrets.token_hex(16)
        result = await self.sandbox.run(
            _WORKER,
            json.dumps({"mode": "tests", "code": self.code_of(outcome.text), "tests": self.tests})
            + "\n",
            timeout=self.timeout,
            after_ready=token + "\n",
            capture_output=True,
        )
        if result.killed == "timeout":
            return CheckResult(False, f"tests timed out after {self.timeout}s")
        passed = any(m.get("passed") == token for m in result.messages)
        if passed and result.exit_code == 0 and result.killed is None:
            return CheckResult(True, "tests passed")
        tail = redact(result.output.strip()[-500:] or (result.error or ""))
        if not any(m.get("ready") is True for m in result.messages):
            return CheckResult(False, f"the answer's code failed to load: {tail}")
        return CheckResult(False, f"tests failed (exit {result.exit_code}): {tail}")


def as_check(item: Check | Predicate) -> Check:
    """A Check as given, or a callable wrapped in :class:`PredicateCheck`."""
    if isinstance(item, Check):
        return item
    if callable(item):
        return PredicateCheck(item)
    raise UserError(
        f"A verifier check must be a Check (RegexCheck, JsonSchemaCheck, PythonTestsCheck, ...) "
        f"or a callable taking the answer text, got {item!r}."
    )


class _CheckCache:
    """Check results per outcome, so early accept and the final evaluation check once."""

    def __init__(self, checks: list[Check]) -> None:
        self.checks = checks
        self._results: weakref.WeakKeyDictionary[ParallelLoopOutcome, list[CheckResult]] = (
            weakref.WeakKeyDictionary()
        )

    async def run(self, outcome: ParallelLoopOutcome, cancel: CancelToken) -> list[CheckResult]:
        cached = self._results.get(outcome)
        if cached is None:
            cached = []
            for check in self.checks:
                try:
                    result = await check.check(outcome, cancel=cancel)
                except BaseException as exc:  # a broken check fails the answer, not the race
                    if is_real_cancellation(exc) or isinstance(exc, STOPS):
                        raise
                    name = getattr(check, "name", type(check).__name__)
                    result = CheckResult(False, f"check {name} raised {describe_exception(exc)}")
                cached.append(result)
                if not result.passed:
                    break  # later (usually dearer) checks are skipped
            self._results[outcome] = cached
        return cached

    async def run_all(
        self, outcomes: Sequence[ParallelLoopOutcome], cancel: CancelToken
    ) -> dict[int, list[CheckResult]]:
        results = await run_all(self.run(o, cancel) for o in outcomes)
        return {o.config_index: r for o, r in zip(outcomes, results, strict=True)}


def _passed(results: list[CheckResult]) -> bool:
    return bool(results) and all(r.passed for r in results)


def _explain(results: list[CheckResult]) -> str:
    return "; ".join(r.reason for r in results)


class VerifierEvaluation(BaseEvaluation):
    """Selects the cheapest (``prefer="cost"``) or fastest (``"latency"``) branch that passes
    every check. With ``early_accept=True`` the first branch to finish and pass wins at once and
    the still-running siblings are cancelled. When no branch passes, ``on_fail="cheapest"``
    selects the cheapest successful branch (``fallback=True`` in the decision) and
    ``on_fail="none"`` selects nothing.
    """

    name = "verify"

    def __init__(
        self,
        *checks: Check | Predicate,
        prefer: Literal["cost", "latency"] = "cost",
        early_accept: bool = False,
        on_fail: Literal["cheapest", "none"] = "cheapest",
    ) -> None:
        if not checks:
            raise UserError(
                "VerifierEvaluation needs at least one check: a callable, RegexCheck, "
                "JsonSchemaCheck or PythonTestsCheck."
            )
        if prefer not in ("cost", "latency"):
            raise UserError(f"prefer must be 'cost' or 'latency', got {prefer!r}.")
        if on_fail not in ("cheapest", "none"):
            raise UserError(f"on_fail must be 'cheapest' or 'none', got {on_fail!r}.")
        self._cache = _CheckCache([as_check(c) for c in checks])
        self.prefer = prefer
        self.early_accept = early_accept
        self.on_fail = on_fail

    @property
    def checks(self) -> list[Check]:
        return self._cache.checks

    async def accept(self, outcome: ParallelLoopOutcome, *, cancel: CancelToken) -> bool:
        """Whether ``outcome`` passes every check (used for early accept)."""
        return outcome.ok and _passed(await self._cache.run(outcome, cancel))

    async def passing(
        self, outcomes: Sequence[ParallelLoopOutcome], cancel: CancelToken
    ) -> tuple[list[ParallelLoopOutcome], dict[int, str]]:
        """The successful outcomes passing every check, and a reason per checked branch."""
        ok = successful(outcomes)
        results = await self._cache.run_all(ok, cancel)
        reasons = {i: _explain(r) for i, r in results.items()}
        return [o for o in ok if _passed(results[o.config_index])], reasons

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
        passed, reasons = await self.passing(outcomes, cancel)
        scores = {o.config_index: 0.0 for o in ok}
        scores.update({o.config_index: 1.0 for o in passed})
        details: dict[str, Any] = {"reasons": reasons, "passed": [o.config_index for o in passed]}
        if not passed:
            if self.on_fail == "none":
                return self.decision(
                    None,
                    scores=scores,
                    rationale="no branch passed verification",
                    details=details,
                )
            cheapest = min(ok, key=cost_key)
            return self.fall_back(
                cheapest.config_index,
                events,
                loop_id=race_loop_id(ok),
                reason="no branch passed verification; picked the cheapest successful branch",
                scores=scores,
                details=details,
            )
        key = cost_key if self.prefer == "cost" else latency_key
        winner = min(passed, key=key)
        return self.decision(
            winner.config_index,
            scores=scores,
            rationale=(
                f"{len(passed)} of {len(ok)} successful branches passed; "
                f"branch {winner.config_index} is the {'cheapest' if self.prefer == 'cost' else 'fastest'}"
            ),
            details=details,
        )


class CompositeEvaluation(BaseEvaluation):
    """Cheap filters first, then ``then`` (typically a judge) among the survivors only.

    ``filters`` are checks (or callables on the answer text, or a VerifierEvaluation). With one
    survivor it wins without running ``then``; with none, ``then`` runs over every successful
    branch and the decision is marked ``fallback``.
    """

    name = "composite"

    def __init__(
        self,
        filters: Sequence[Check | Predicate | VerifierEvaluation],
        then: EvaluationStrategy | None = None,
    ) -> None:
        checks: list[Check | Predicate] = []
        for item in filters:
            if isinstance(item, VerifierEvaluation):
                checks.extend(item.checks)
            else:
                checks.append(item)
        self.verifier = VerifierEvaluation(*checks)
        self.then: EvaluationStrategy = then if then is not None else PickFirstEvaluation()
        self.uses_judge = bool(getattr(self.then, "uses_judge", False))  # type: ignore[misc]

    def check_race(self, count: int) -> None:
        check = getattr(self.then, "check_race", None)
        if callable(check):
            check(count)

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
        survivors, reasons = await self.verifier.passing(outcomes, cancel)
        filtered = {
            "survivors": [o.config_index for o in survivors],
            "filter_reasons": reasons,
        }
        if len(survivors) == 1:
            return self.decision(
                survivors[0].config_index,
                rationale="the only branch that passed the filters",
                details=filtered,
            )
        pool = survivors or ok
        inner = await self.then.evaluate(prompts, pool, events=events, cancel=cancel)
        then_name = inner.strategy or type(self.then).__name__
        prefix = (
            f"{len(survivors)} of {len(ok)} passed the filters; {then_name}: "
            if survivors
            else f"no branch passed the filters; {then_name} over all successful branches: "
        )
        return inner.model_copy(
            update={
                "strategy": f"{self.name}({then_name})",
                "fallback": inner.fallback or not survivors,
                "rationale": prefix + inner.rationale,
                "details": {**inner.details, **filtered},
            }
        )
