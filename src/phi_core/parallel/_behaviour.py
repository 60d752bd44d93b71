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

The code runs in a separate ``python -I`` process with a temporary working directory, no
stdin, memory and CPU limits, a per-call timer and a timeout for the whole process. That is
isolation, not a sandbox: run races on untrusted code inside a container.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cancel import CancelToken
from ..errors import UserError
from ..events import Emitter
from ..types import AgentMessage
from ._strategies import BaseEvaluation, cost_key, successful
from ._types import EvaluationDecision, ParallelLoopOutcome

__all__ = [
    "BehaviourReport",
    "ExecVoteEvaluation",
    "code_agreement",
    "code_agreement_sync",
    "extract_code",
    "runnable_python",
]

logger = logging.getLogger("phi_core.parallel")
_WORKER = Path(__file__).with_name("_exec_worker.py")
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.S)
_PYTHON_TAGS = {"", "python", "py", "python3"}
_CODE_START = re.compile(r"^(def |class |import |from \w[\w.]* import )")


def _parses(code: str) -> bool:
    with warnings.catch_warnings():
        # Model code is full of "\d" in plain strings: not our warning to show.
        warnings.simplefilter("ignore", category=SyntaxWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        try:
            ast.parse(code)
        except (SyntaxError, ValueError):
            return False
    return True


def extract_code(text: str) -> str | None:
    """The Python code of an answer, or None when it has none.

    Fenced blocks tagged python/py/python3 or untagged that parse, joined; without such
    blocks, the longest parseable run of lines starting at the first ``def``/``class``/import
    line (some models answer with bare code). Blocks in other languages are not Python.
    """
    blocks = [body for tag, body in _FENCE.findall(text) if tag.lower() in _PYTHON_TAGS]
    good = [b for b in blocks if b.strip() and _parses(b)]
    if good:
        joined = "\n\n".join(good)
        return joined if _parses(joined) else good[0]
    if _FENCE.search(text):
        return None  # fenced, but not Python (or not valid Python)
    lines = text.splitlines()
    start = next((k for k, line in enumerate(lines) if _CODE_START.match(line)), None)
    if start is None:
        return None
    for end in range(len(lines), start, -1):
        chunk = "\n".join(lines[start:end])
        if _parses(chunk):
            return chunk if "def " in chunk or "class " in chunk else None
    return None


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


def _request(answers: Sequence[str], call_timeout: float) -> tuple[bytes, list[str | None]]:
    codes = [extract_code(a) for a in answers]
    body = json.dumps({"codes": codes, "call_timeout": call_timeout}).encode()
    return body, codes


def _report(raw: bytes, codes: list[str | None]) -> BehaviourReport:
    n = len(codes)
    try:
        reply = json.loads(raw)
        candidates: list[dict[str, Any]] = reply["candidates"]
        owners: list[int] = reply["owners"]
        if len(candidates) != n:
            raise ValueError(f"{len(candidates)} results for {n} answers")
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("code_agreement: unreadable reply from the worker (%s); nothing ran", exc)
        return _report(_empty_reply(n), codes)
    runnable = [bool(c["runnable"]) for c in candidates]
    agree = [[False] * n for _ in range(n)]
    compared = [[0] * n for _ in range(n)]
    for a in range(n):
        agree[a][a] = runnable[a]
        for b in range(a + 1, n):
            if not (runnable[a] and runnable[b]):
                continue
            out_a, out_b = candidates[a]["outputs"], candidates[b]["outputs"]
            shared = [key for key in out_a if key in out_b and owners[int(key)] in (a, b)]
            same = bool(shared) and all(out_a[k] == out_b[k] for k in shared)
            returned = any(not out_a[k].startswith("!") for k in shared)
            agree[a][b] = agree[b][a] = same and returned
            compared[a][b] = compared[b][a] = len(shared)
    return BehaviourReport(runnable, agree, compared)


def _env() -> dict[str, str]:
    # Nothing of the caller's environment (API keys!) reaches model-written code.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0"}


def code_agreement_sync(
    answers: Sequence[str],
    *,
    timeout: float = 30.0,
    call_timeout: float = 1.0,
    python: str | None = None,
) -> BehaviourReport:
    """:func:`code_agreement` for code without a running event loop (benchmarks, scripts);
    safe to call from several threads at once."""
    return asyncio.run(
        code_agreement(answers, timeout=timeout, call_timeout=call_timeout, python=python)
    )


def _empty_reply(n: int) -> bytes:
    return json.dumps(
        {"candidates": [{"runnable": False, "outputs": {}}] * n, "owners": []}
    ).encode()


async def code_agreement(
    answers: Sequence[str],
    *,
    timeout: float = 30.0,  # noqa: ASYNC109 - a deadline for the child process, which is killed
    call_timeout: float = 1.0,
    python: str | None = None,
) -> BehaviourReport:
    """Run the answers' code in one isolated subprocess and compare behaviours pairwise.

    Args:
        answers: answer texts (markdown with fenced code, or bare code).
        timeout: seconds for the whole subprocess; on expiry it is killed and no answer counts
            as runnable (nothing agrees).
        call_timeout: seconds for one call of one function on one input; a call that runs
            longer records ``!Timeout`` as its result.
        python: interpreter to run the code with (default: this one).
    """
    if timeout <= 0 or call_timeout <= 0:
        raise UserError(
            f"code_agreement timeouts must be > 0 seconds, got timeout={timeout}, "
            f"call_timeout={call_timeout}."
        )
    body, codes = _request(answers, call_timeout)
    if not any(codes):
        return _report(_empty_reply(len(codes)), codes)
    with tempfile.TemporaryDirectory(prefix="phi-exec-") as tmp:
        process = await asyncio.create_subprocess_exec(
            python or sys.executable,
            "-I",
            str(_WORKER),
            cwd=tmp,
            env=_env(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            async with asyncio.timeout(timeout):
                raw, _ = await process.communicate(body)
        except TimeoutError:
            raw = b""
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    if process.returncode != 0 or not raw:
        return _report(_empty_reply(len(codes)), codes)
    return _report(raw, codes)


async def runnable_python(text: str, *, timeout: float = 30.0) -> bool:  # noqa: ASYNC109
    """True when the answer contains Python whose function loads (its definitions execute).

    A cheap verifier for code answers (JavaScript, a syntax error or prose fail it); it says
    nothing about whether the function is right. Runs the code like :func:`code_agreement`."""
    if extract_code(text) is None:
        return False
    report = await code_agreement([text], timeout=timeout)
    return report.runnable[0]


class ExecVoteEvaluation(BaseEvaluation):
    """Majority vote over code answers by behaviour (see :func:`code_agreement`).

    The largest agreement class wins; between classes of equal size, and inside the winning
    class, the cheaper answer is chosen. Answers without runnable Python do not vote; when no
    answer is runnable the cheapest successful branch is picked and the decision says so
    (``fallback``).
    """

    name = "exec-vote"

    def __init__(self, *, timeout: float = 30.0, call_timeout: float = 1.0) -> None:
        if timeout <= 0 or call_timeout <= 0:
            raise UserError(
                f"ExecVoteEvaluation timeouts must be > 0 seconds, got timeout={timeout}, "
                f"call_timeout={call_timeout}."
            )
        self.timeout = timeout
        self.call_timeout = call_timeout

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
            [o.text for o in ok], timeout=self.timeout, call_timeout=self.call_timeout
        )
        classes = report.classes()
        sizes: dict[int, int] = {}
        for c in classes:
            if c is not None:
                sizes[c] = sizes.get(c, 0) + 1
        if not sizes:
            return self.decision(
                ok[0].config_index,
                fallback=True,
                rationale="no answer had runnable Python code; picked the cheapest",
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
