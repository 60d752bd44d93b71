"""Behavioural agreement of code answers: do two answers' functions do the same thing?

Code answers cannot be compared as text (names, style and comments differ), so a race over a
coding task cannot take a majority vote or stop on agreement the way it can for short answers.
:func:`code_agreement` runs every answer's Python function on the example inputs the answers
themselves use (the literal arguments of their example calls) and calls two answers *agreeing*
when, on the inputs taken from those two answers, both ran and gave the same results (return
value, and the arguments afterwards for in-place functions; the same exception counts as the
same result, but at least one input must return normally). Only the two answers' own inputs are
used for a pair, so the relation between the first k answers of a race never depends on answers
not yet asked for.

:class:`ExecVoteEvaluation` turns that into a race strategy (``--strategy exec-vote``): the
largest agreement class wins, ties go to the cheaper answer.

Every answer's code runs in a sandbox of its own (:class:`phi_core.sandbox.Sandbox`: no network,
no view of this machine's files or processes, rlimits, an empty environment), and only the
results it reports leave it; the comparison happens here, outside, so no answer can see or
change another's results. What is worth knowing about an answer without running it (its entry
function, the literal inputs of its example calls, which statements are definitions) is read
from its syntax tree here. Loading the definitions runs code too (class bodies, decorators,
default arguments): that runs in the sandbox as well.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .._tasks import run_all
from ..cancel import CancelToken
from ..errors import UserError
from ..events import Emitter
from ..sandbox import Sandbox, SandboxResult, default_sandbox
from ..types import AgentMessage
from ._code import Answer, analyse, extract_code
from ._strategies import BaseEvaluation, cost_key, race_loop_id, successful
from ._types import EvaluationDecision, ParallelLoopOutcome

__all__ = [
    "BehaviourReport",
    "ExecVoteEvaluation",
    "code_agreement",
    "code_agreement_sync",
    "extract_code",
    "runnable_python",
]

WORKER = Path(__file__).with_name("_exec_worker.py")
"""The script that runs one answer's code inside the sandbox."""
_MAX_REPR = 2000  # the worker cuts results to this many characters
WATCHDOG_GRACE = 1.0  # seconds beyond a call's own timer before the supervisor kills the worker
_PARALLEL = max(2, min(8, os.cpu_count() or 2))  # answers run at once, each in its sandbox


@dataclass(frozen=True)
class BehaviourReport:
    """Which answers ran, and which pairs behaved the same."""

    runnable: list[bool]
    agree: list[list[bool]]
    compared_inputs: list[list[int]] = field(repr=False)

    def classes(self, order: Sequence[int] | None = None) -> list[int | None]:
        """Agreement class of each answer, in ``order`` (default: as given): an answer joins
        the class of the first earlier answer it agrees with; answers without runnable code
        get None."""
        order = list(range(len(self.runnable))) if order is None else list(order)
        out: list[int | None] = []
        firsts: list[int] = []  # first member of each class
        for k in order:
            if not self.runnable[k]:
                out.append(None)
                continue
            joined = next((c for c, f in enumerate(firsts) if self.agree[f][k]), None)
            if joined is None:
                firsts.append(k)
                joined = len(firsts) - 1
            out.append(joined)
        return out


def _compare(outputs: list[dict[int, str] | None], owners: list[int]) -> BehaviourReport:
    """Pairwise agreement from each answer's results (None: the answer did not run)."""
    n = len(outputs)
    runnable = [o is not None for o in outputs]
    agree = [[False] * n for _ in range(n)]
    compared = [[0] * n for _ in range(n)]
    for a in range(n):
        agree[a][a] = runnable[a]
        for b in range(a + 1, n):
            out_a, out_b = outputs[a], outputs[b]
            if out_a is None or out_b is None:
                continue
            shared = [k for k in out_a if k in out_b and owners[k] in (a, b)]
            same = bool(shared) and all(out_a[k] == out_b[k] for k in shared)
            returned = any(not out_a[k].startswith("!") for k in shared)
            agree[a][b] = agree[b][a] = same and returned
            compared[a][b] = compared[b][a] = len(shared)
    return BehaviourReport(runnable, agree, compared)


def code_agreement_sync(
    answers: Sequence[str],
    *,
    timeout: float = 30.0,
    call_timeout: float = 1.0,
    python: str | None = None,
    sandbox: Sandbox | None = None,
) -> BehaviourReport:
    """:func:`code_agreement` for code without a running event loop (benchmarks, scripts);
    safe to call from several threads at once."""
    return asyncio.run(
        code_agreement(
            answers, timeout=timeout, call_timeout=call_timeout, python=python, sandbox=sandbox
        )
    )


async def code_agreement(
    answers: Sequence[str],
    *,
    timeout: float = 30.0,  # noqa: ASYNC109 - a deadline for each answer's sandbox
    call_timeout: float = 1.0,
    python: str | None = None,
    sandbox: Sandbox | None = None,
) -> BehaviourReport:
    """Run each answer's code in a sandbox of its own and compare behaviours pairwise.

    Args:
        answers: answer texts (markdown with fenced code, or bare code).
        timeout: seconds for one answer's whole run (loading and every call); on expiry its
            sandbox is killed and the answer counts as not runnable (it agrees with nothing).
        call_timeout: seconds for one call of one function on one input; a call that runs
            longer records ``!Timeout`` as its result.
        python: interpreter to run the code with (default: the sandbox's, this one).
        sandbox: where the code runs (default: :func:`phi_core.sandbox.default_sandbox`).

    Raises:
        SandboxUnavailableError: no sandbox can be made here and unsafe execution was not
            allowed (see :class:`phi_core.sandbox.Sandbox`).
    """
    if timeout <= 0 or call_timeout <= 0:
        raise UserError(
            f"code_agreement timeouts must be > 0 seconds, got timeout={timeout}, "
            f"call_timeout={call_timeout}."
        )
    box = _sandbox(sandbox, python)
    parsed = [analyse(extract_code(a)) for a in answers]
    inputs: list[str] = []
    owners: list[int] = []
    for k, answer in enumerate(parsed):
        for example in answer.examples if answer is not None else []:
            inputs.append(example)
            owners.append(k)
    numbered = list(enumerate(inputs))
    if any(a is not None and a.entry is not None for a in parsed):
        await box.prepare()  # no sandbox: one clear error, before any answer runs
    gate = asyncio.Semaphore(_PARALLEL)

    async def one(answer: Answer | None) -> dict[int, str] | None:
        if answer is None or answer.entry is None:
            return None
        async with gate:
            return await _run_answer(box, answer, numbered, call_timeout, timeout)

    return _compare(await run_all(one(answer) for answer in parsed), owners)


def _sandbox(sandbox: Sandbox | None, python: str | None) -> Sandbox:
    box = sandbox if sandbox is not None else default_sandbox()
    box = box if python is None else box.replace(python=python)
    box.check()
    return box


async def run_calls(
    box: Sandbox,
    answer: Answer,
    inputs: list[tuple[int, str]],
    call_timeout: float,
    timeout: float,  # noqa: ASYNC109 - the sandbox is killed at the deadline
) -> SandboxResult:
    """One sandbox running the worker: load the answer's definitions, call its entry on each
    input. The supervisor's watchdog allows a call its timeout plus a grace, whatever the code
    does to the worker's own timer."""
    request = {
        "mode": "calls",
        "definitions": answer.definitions,
        "entry": answer.entry,
        "inputs": inputs,
        "call_timeout": call_timeout,
    }
    return await box.run(
        WORKER,
        json.dumps(request) + "\n",
        timeout=timeout,
        deadline=call_timeout + WATCHDOG_GRACE,
    )


async def _run_answer(
    box: Sandbox,
    answer: Answer,
    inputs: list[tuple[int, str]],
    call_timeout: float,
    timeout: float,  # noqa: ASYNC109 - the answer's sandboxes are killed at the deadline
) -> dict[int, str] | None:
    """The answer's result per input number, or None when it does not load (or its runs took
    longer than ``timeout``: nothing of a killed run is trusted).

    A worker that stops reporting (its call ignored the timer, or the code ended the process)
    loses only the input it was on: that input records ``!Timeout`` or ``!Exit`` and a fresh
    sandbox runs the rest."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    outputs: dict[int, str] = {}
    pending = inputs
    while True:
        left = deadline - loop.time()
        if left <= 0:
            return None
        result = await run_calls(box, answer, pending, call_timeout, left)
        if result.killed in ("timeout", "overflow") or result.error is not None:
            return None
        if not any(m.get("loaded") is True for m in result.messages):
            return None
        wanted = {n for n, _ in pending}
        for m in result.messages:
            n, out = m.get("n"), m.get("out")
            if type(n) is int and n in wanted and (out is None or isinstance(out, str)):
                if out is not None:
                    outputs[n] = out[:_MAX_REPR]
                wanted.discard(n)
        rest = [(n, src) for n, src in pending if n in wanted]
        if not rest:
            return outputs
        outputs[rest[0][0]] = "!Timeout" if result.killed == "watchdog" else "!Exit"
        pending = rest[1:]
        if not pending:
            return outputs


async def runnable_python(
    text: str,
    *,
    timeout: float = 30.0,  # noqa: ASYNC109 - the sandbox is killed at the deadline
    sandbox: Sandbox | None = None,
) -> bool:
    """True when the answer contains Python whose function loads (its definitions execute).

    A cheap verifier for code answers (JavaScript, a syntax error or prose fail it); it says
    nothing about whether the function is right. Runs the code in a sandbox like
    :func:`code_agreement`."""
    if extract_code(text) is None:
        return False
    report = await code_agreement([text], timeout=timeout, sandbox=sandbox)
    return report.runnable[0]


class ExecVoteEvaluation(BaseEvaluation):
    """Majority vote over code answers by behaviour (see :func:`code_agreement`).

    The largest agreement class wins; between classes of equal size, and inside the winning
    class, the cheaper answer is chosen. Answers without runnable Python do not vote; when no
    answer is runnable the cheapest successful branch is picked and the decision says so
    (``fallback``).
    """

    name = "exec-vote"
    judges_tool_calls = False  # it runs each answer's code; a tool call has none

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        call_timeout: float = 1.0,
        sandbox: Sandbox | None = None,
    ) -> None:
        if timeout <= 0 or call_timeout <= 0:
            raise UserError(
                f"ExecVoteEvaluation timeouts must be > 0 seconds, got timeout={timeout}, "
                f"call_timeout={call_timeout}."
            )
        self.timeout = timeout
        self.call_timeout = call_timeout
        self.sandbox = _sandbox(sandbox, None)  # no sandbox here: refuse before the race

    async def evaluate(
        self,
        prompts: list[AgentMessage],
        outcomes: list[ParallelLoopOutcome],
        *,
        events: Emitter,
        cancel: CancelToken,
    ) -> EvaluationDecision:
        ok = sorted(successful(outcomes), key=cost_key)
        if not ok:
            return self.no_success(outcomes)
        report = await code_agreement(
            [o.text for o in ok],
            timeout=self.timeout,
            call_timeout=self.call_timeout,
            sandbox=self.sandbox,
        )
        classes = report.classes()
        sizes: dict[int, int] = {}
        for c in classes:
            if c is not None:
                sizes[c] = sizes.get(c, 0) + 1
        if not sizes:
            return self.fall_back(
                ok[0].config_index,
                events,
                loop_id=race_loop_id(ok),
                reason="no answer had runnable Python code; picked the cheapest",
            )
        top = max(sizes.values())
        # ``ok`` is sorted cheapest first, so the first member of a top class is the cheapest.
        k = next(k for k, c in enumerate(classes) if c is not None and sizes[c] == top)
        voters = sum(sizes.values())
        tie = sum(1 for s in sizes.values() if s == top) > 1
        if top == 1 and voters > 1:
            rationale = f"no two of the {voters} runnable answers behave the same; cheapest wins"
        else:
            rationale = f"{top} of {voters} runnable answers behave the same"
            if tie:
                rationale += "; tied with another group of that size, cheapest wins"
        return self.decision(
            ok[k].config_index,
            votes={f"behaviour {c}": size for c, size in sizes.items()},
            scores={
                ok[j].config_index: sizes[c] / voters
                for j, c in enumerate(classes)
                if c is not None
            },
            tie=tie,
            rationale=rationale,
            details={
                "classes": {ok[j].config_index: c for j, c in enumerate(classes)},
                "runnable": sum(report.runnable),
            },
        )
