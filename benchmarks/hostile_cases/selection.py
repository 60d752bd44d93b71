"""Hostile cases: selection (issue 20) against agents, scorers, datasets and state files that
misbehave.

Every case runs the real :class:`~phi_core.select.ModelSelector` (scripted model handles, or the
official ``openai`` SDK against the repository's fake OpenAI-compatible server on 127.0.0.1) and
decides its verdict from what happened:

- *hostile agent*: an agent that hangs (async or in a thread, with ``timeout=``), calls
  ``sys.exit()``, raises ``KeyboardInterrupt``, ``RecursionError`` or ``MemoryError``, raises a
  ``CancelledError`` nobody asked for, or returns an answer that breaks the scorer. ``contained``:
  the run ended within its bound, every other cell ran, the bad cell is a failure that scored 0
  with the right status, and nothing reached the event loop's exception handler or was left
  running; for ``KeyboardInterrupt``, the run stopped with it and the finished cells were in the
  journal.
- *hostile scorer*: NaN, infinities, out-of-range numbers, ``None``, words, an object whose
  ``__float__`` raises. ``blocked``: a :class:`~phi_core.errors.UserError` that names the value.
  A judge that never answers, with ``timeout=``: ``contained`` when every verdict was stopped
  and the run ended.
- *bad dataset*: a generator, a dict, a string, nothing, items of the wrong shape, a loader that
  raises. ``blocked``: a ``UserError`` before the agent ran once.
- *secret in a failure*: an agent, a scorer or a dataset loader fails with an API key in its
  message, and an SDK agent calls the fake server with a key. ``contained``: the key is in none of
  the result's JSON, CSV, summary and warnings, the exported configs, the journal and cache files,
  the log records or the error raised.
- *damaged state*: a response cache or a run journal that is not a database, a cache path under
  a file, a resume from an unreadable journal. ``contained``: the damaged file was moved aside
  (byte for byte) and the run finished; ``blocked``: a clear error before anything ran.

Not tried: ``os._exit()`` or a segfault in an in-process agent end the process itself — run such
agents in a subprocess or on Ray (``executor="ray"``).

Run through ``benchmarks/hostile.py --only selection`` or
``python benchmarks/hostile_cases/selection.py``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's test doubles

from tests.select.llm_server import LlmServer

from phi_core.errors import PhiError, UserError
from phi_core.providers.base import ModelConfig
from phi_core.select import MeteredModel, ModelSelector
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import Pricing, Usage

Row = dict[str, str]
SECRET = "sk-hostile-select-0123456789abcdef"
DATASET = [(f"q{i}", "right") for i in range(6)]


def _row(cls: str, case: str, result: str, detail: str) -> Row:
    return {"class": cls, "case": case, "result": result, "detail": detail}


def _handle(name: str) -> MeteredModel:
    provider = ScriptedProvider(name=name, default=Reply("right", usage=Usage(input=10, output=5)))
    config = ModelConfig(
        provider="scripted", id=name, api="scripted", pricing=Pricing(input=1.0, output=2.0)
    )
    return MeteredModel(config, provider=provider)


def _exact(expected: Any, actual: Any) -> float:
    return float(expected == actual)


class _Watch:
    """What reached the event loop's exception handler, and the tasks left behind."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    async def __aenter__(self) -> _Watch:
        loop = asyncio.get_running_loop()
        self._previous = loop.get_exception_handler()
        self._before = asyncio.all_tasks()
        loop.set_exception_handler(lambda _l, ctx: self.errors.append(str(ctx.get("message"))))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0)
        gc.collect()
        await asyncio.sleep(0)
        left = [t for t in asyncio.all_tasks() - self._before if t is not asyncio.current_task()]
        self.errors += [f"left running: {t.get_coro()!r}" for t in left]
        asyncio.get_running_loop().set_exception_handler(self._previous)


# -------------------------------------------------------------------------- hostile agent


def _hostile_agents() -> list[tuple[str, Callable[..., Any], dict[str, Any], str]]:
    """(case, agent, selector options, the status the bad cell must have)."""

    async def hang(models: dict[str, MeteredModel], q: str) -> str:
        answer = await models["solver"].complete(q)
        if q == "q2":
            await asyncio.sleep(3600)
        return answer

    def sync_hang(models: dict[str, Any], q: str) -> str:
        if q == "q2":
            time.sleep(1.5)  # abandoned at the timeout; the thread returns later
        return "right"

    def failing(exc: BaseException) -> Callable[..., Awaitable[str]]:
        async def agent(models: dict[str, MeteredModel], q: str) -> str:
            if q == "q2":
                raise exc
            return await models["solver"].complete(q)

        return agent

    async def recurse(models: dict[str, MeteredModel], q: str) -> str:
        def down(n: int) -> int:
            return down(n + 1) + 1

        if q == "q2":
            down(0)
        return await models["solver"].complete(q)

    class Poison:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("an answer that cannot be compared")

        __hash__ = object.__hash__

        def __str__(self) -> str:
            raise RuntimeError("an answer that cannot be printed")

    async def poison(models: dict[str, MeteredModel], q: str) -> Any:
        answer = await models["solver"].complete(q)
        return Poison() if q == "q2" else answer

    async def huge(models: dict[str, MeteredModel], q: str) -> str:
        answer = await models["solver"].complete(q)
        return "x" * 20_000_000 if q == "q2" else answer

    timed = {"timeout": 0.3}
    return [
        ("hangs forever (async), timeout=0.3", hang, timed, "timeout"),
        ("hangs in its thread (sync), timeout=0.3", sync_hang, {**timed, "model_handles": False}, "timeout"),
        ("calls sys.exit(3)", failing(SystemExit(3)), {}, "error"),
        ("raises a CancelledError nobody asked for", failing(asyncio.CancelledError("inner")), {}, "error"),
        ("recurses without end", recurse, {}, "error"),
        ("raises MemoryError", failing(MemoryError("pretend")), {}, "error"),
        ("returns an answer whose == and str() raise", poison, {}, "error"),
        ("returns a 20 MB answer (scored 0)", huge, {}, "ok"),
    ]  # fmt: skip


async def _agent_case(
    case: str, agent: Callable[..., Any], options: dict[str, Any], status: str
) -> Row:
    cls = "hostile agent"
    models: dict[str, list[Any]] = (
        {"solver": ["a"]} if options.get("model_handles") is False else {"solver": [_handle("a")]}
    )
    selector = ModelSelector(
        agent, models, DATASET, _exact, algorithm="brute_force", cache=False, journal=False,
        **options,
    )  # fmt: skip
    result, seconds, errors = await _watched(selector)
    if result is None:
        return _row(cls, case, "leaked", f"the run raised {errors[0]}")
    bad = [r for r in result.datapoints if r.datapoint == 2]
    others = [r for r in result.datapoints if r.datapoint != 2]
    ok = (
        len(bad) == 1
        and bad[0].status == status
        and bad[0].score == 0.0
        and len(others) == 5
        and all(r.status == "ok" and r.score == 1.0 for r in others)
        and not errors
    )
    detail = (
        f"{seconds:.1f} s; bad cell: {bad[0].status if bad else 'missing'} "
        f"({(bad[0].error or '')[:80] if bad else ''}); {len(others)} others ok; "
        f"loop errors: {errors or 'none'}"
    )
    return _row(cls, case, "contained" if ok else "leaked", detail)


async def _watched(selector: ModelSelector) -> tuple[Any, float, list[str]]:
    """Run ``selector`` (30 s at most) under a :class:`_Watch`: ``(result or None, seconds,
    loop errors)``; with no result, the first error is what the run raised."""
    started = time.monotonic()
    async with _Watch() as watch:
        try:
            result = await asyncio.wait_for(selector.select_best(), 30)
        except BaseException as exc:  # the verdict reports what escaped
            return None, time.monotonic() - started, [f"{type(exc).__name__}: {exc}"]
    return result, time.monotonic() - started, watch.errors


async def _interrupt_case(folder: Path) -> Row:
    cls, case = "hostile agent", "raises KeyboardInterrupt (a Ctrl-C) mid-run"
    done: list[str] = []

    async def agent(models: dict[str, MeteredModel], q: str) -> str:
        if q == "q2":
            await asyncio.sleep(0.05)
            raise KeyboardInterrupt
        answer = await models["solver"].complete(q)
        done.append(q)
        return answer

    journal = folder / "interrupt.sqlite"
    selector = ModelSelector(
        agent, {"solver": [_handle("a")]}, DATASET, _exact, algorithm="brute_force",
        cache=False, journal=journal,
    )  # fmt: skip
    raised = "nothing"
    async with _Watch() as watch:
        try:
            await selector.select_best()
        except KeyboardInterrupt:
            raised = "KeyboardInterrupt"
        except BaseException as exc:  # the verdict reports what escaped
            raised = type(exc).__name__
    rows = _journal_rows(journal)
    ok = raised == "KeyboardInterrupt" and not watch.errors and rows == len(done) == 5
    detail = f"raised {raised}; {len(done)} runs finished, {rows} in the journal; loop errors: {watch.errors or 'none'}"
    return _row(cls, case, "contained" if ok else "leaked", detail)


def _journal_rows(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path) as db:
        runs = db.execute("SELECT run, COUNT(*) FROM cells GROUP BY run ORDER BY rowid").fetchall()
    return int(runs[0][1]) if runs else 0


def _recording(ran: list[Any]) -> Callable[[Any, Any], str]:
    """A sync agent that answers "right" and notes every input it was run on."""

    def agent(models: Any, q: Any) -> str:
        ran.append(q)
        return "right"

    return agent


def _set_aside(folder: Path, name: str) -> list[bytes]:
    """The contents of the files moved aside as damaged copies of ``name``."""
    companions = ("-wal", "-shm", "-journal")
    return [
        p.read_bytes() for p in folder.glob(f"{name}.corrupt-*") if not p.name.endswith(companions)
    ]


# -------------------------------------------------------------------------- hostile scorer


async def _scorer_cases() -> list[Row]:
    class Unfloatable:
        def __float__(self) -> float:
            raise ValueError("no number here")

    rows = []
    values: list[tuple[str, Any]] = [
        ("NaN", float("nan")), ("+inf", float("inf")), ("-inf", float("-inf")), ("-0.5", -0.5),
        ("1.5", 1.5), ("None", None), ("a word", "right"), ("a list", [1]),
        ("an object whose __float__ raises", Unfloatable()),
    ]  # fmt: skip
    for name, value in values:
        selector = ModelSelector(
            lambda models, q: "right", {"solver": ["a"]}, DATASET, lambda e, a, v=value: v,
            algorithm="brute_force", cache=False, journal=False, model_handles=False,
        )  # fmt: skip
        try:
            await selector.select_best()
            result, detail = "leaked", "accepted as a score"
        except UserError as exc:
            named = "scorer returned" in str(exc)
            result = "blocked" if named else "leaked"
            detail = str(exc)[:120]
        except Exception as exc:  # the verdict reports what escaped
            result, detail = "leaked", f"{type(exc).__name__}: {exc}"[:120]
        rows.append(_row("hostile scorer", f"returns {name}", result, detail))
    rows.append(await _hung_judge_case())
    return rows


async def _hung_judge_case() -> Row:
    case = "never answers (an LLM judge that hangs), timeout=0.3"

    async def judge(expected: Any, actual: Any) -> float:
        await asyncio.sleep(3600)
        return 1.0

    selector = ModelSelector(
        lambda models, q: "right", {"solver": ["a"]}, DATASET, judge, algorithm="brute_force",
        cache=False, journal=False, model_handles=False, timeout=0.3,
    )  # fmt: skip
    result, seconds, errors = await _watched(selector)
    if result is None:
        return _row("hostile scorer", case, "leaked", f"the run raised {errors[0]}")
    timed_out = [f for f in result.failures if "scorer ran longer than timeout" in f.error]
    ok = len(timed_out) == len(DATASET) and not errors
    detail = f"{seconds:.1f} s; {len(timed_out)} verdicts stopped; loop errors: {errors or 'none'}"
    return _row("hostile scorer", case, "contained" if ok else "leaked", detail)


# -------------------------------------------------------------------------- bad dataset


async def _dataset_cases() -> list[Row]:
    class Lazy:
        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int) -> tuple[str, str]:
            if i == 1:
                raise OSError("shard 1 is missing")
            return f"q{i}", "right"

    datasets: list[tuple[str, Any]] = [
        ("a generator", (q for q in DATASET)), ("a dict", {"q": "a"}), ("a string", "q0,right"),
        ("nothing", []), ("None", None), ("an item without input/expected", [{"question": "q"}]),
        ("a three-item tuple", [("q", "a", "x")]), ("a bare string item", ["oops"]),
        ("a loader that raises on item 1", Lazy()),
    ]  # fmt: skip
    rows = []
    for name, dataset in datasets:
        ran: list[Any] = []
        try:
            selector = ModelSelector(
                _recording(ran), {"solver": ["a"]}, dataset, _exact,
                algorithm="brute_force", cache=False, journal=False, model_handles=False,
            )  # fmt: skip
            await selector.select_best()
            result, detail = "leaked", "accepted"
        except UserError as exc:
            result = "blocked" if not ran else "leaked"
            detail = f"{str(exc)[:110]} (agent runs: {len(ran)})"
        except Exception as exc:  # the verdict reports what escaped
            result, detail = "leaked", f"{type(exc).__name__}: {exc}"[:120]
        rows.append(_row("bad dataset", name, result, detail))
    return rows


# -------------------------------------------------------------------------- secrets


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.text: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.text.append(self.format(record))


def _places(result: Any, folder: Path, logs: _Records) -> dict[str, str]:
    """Everything a run leaves behind that a person or a program reads later."""
    result.to_csv(folder / "r.csv")
    result.export_config(folder / "litellm.yaml")
    out = {
        "result JSON": result.to_json(),
        "CSV": (folder / "r.csv").read_text(),
        "summary": result.summary(),
        "warnings": "\n".join(result.warnings),
        "LiteLLM config": (folder / "litellm.yaml").read_text(),
        "logs": "\n".join(logs.text),
    }
    for path in folder.glob("*.sqlite*"):
        out[path.name] = path.read_bytes().decode("latin-1")
    return out


async def _secret_cases(folder: Path) -> list[Row]:
    cls = "secret in a failure"
    logs = _Records()
    logging.getLogger().addHandler(logs)
    rows = []
    try:

        async def agent_raises(models: dict[str, MeteredModel], q: str) -> str:
            if q == "q1":
                raise RuntimeError(f"401 from the API with api_key={SECRET}")
            return await models["solver"].complete(q)

        def scorer_raises(expected: Any, actual: Any) -> float:
            raise PermissionError(f"judge refused Bearer {SECRET}")

        cases: list[tuple[str, Any, Any]] = [
            ("the agent's exception holds a key", agent_raises, _exact),
            ("the scorer's exception holds a key", agent_raises, scorer_raises),
        ]
        for name, agent, scorer in cases:
            here = folder / name.replace(" ", "_").replace("'", "")
            here.mkdir()
            logs.text.clear()
            result = await ModelSelector(
                agent, {"solver": [_handle("a")]}, DATASET, scorer, algorithm="brute_force",
                cache=here / "cache.sqlite", journal=here / "journal.sqlite",
            ).select_best()  # fmt: skip
            found = [k for k, v in _places(result, here, logs).items() if SECRET in v]
            failed = len(result.failures)
            rows.append(
                _row(cls, name, "leaked" if found or not failed else "contained",
                     f"{failed} failures recorded; key found in: {found or 'nothing'}")
            )  # fmt: skip

        class Lazy:
            def __len__(self) -> int:
                return 2

            def __getitem__(self, i: int) -> tuple[str, str]:
                raise OSError(f"GET https://hub.example/shard?api_key={SECRET} failed")

        try:
            ModelSelector(lambda m, q: "x", {"solver": ["a"]}, Lazy(), _exact, model_handles=False)
            rows.append(_row(cls, "a dataset loader's error holds a key", "leaked", "accepted"))
        except UserError as exc:
            leaked = SECRET in str(exc)
            rows.append(
                _row(cls, "a dataset loader's error holds a key",
                     "leaked" if leaked else "blocked", str(exc)[:120])
            )  # fmt: skip

        here = folder / "sdk"
        here.mkdir()
        logs.text.clear()
        async with LlmServer() as server:
            client = server.openai(api_key=SECRET)

            async def sdk_agent(models: dict[str, str], q: str) -> str:
                reply = await client.chat.completions.create(
                    model=models["solver"], messages=[{"role": "user", "content": q}]
                )
                return reply.choices[0].message.content or ""

            result = await ModelSelector(
                sdk_agent, {"solver": ["gpt-4o-mini", "gpt-4o"]}, DATASET, _exact,
                algorithm="brute_force", cache=here / "cache.sqlite",
                journal=here / "journal.sqlite", model_handles=False,
            ).select_best()  # fmt: skip
            sent = sum(SECRET in str(r.headers) for r in server.requests)
        found = [k for k, v in _places(result, here, logs).items() if SECRET in v]
        metered = sum(c.input_tokens for c in result.combinations)
        rows.append(
            _row(cls, "an SDK agent calls the server with a key (interception, cache, journal)",
                 "leaked" if found or not metered or not sent else "contained",
                 f"{sent} requests carried it to the server; {metered} input tokens metered; "
                 f"key found in: {found or 'nothing'}")
        )  # fmt: skip
    finally:
        logging.getLogger().removeHandler(logs)
    return rows


# -------------------------------------------------------------------------- damaged state


async def _state_cases(folder: Path) -> list[Row]:
    cls = "damaged state"
    rows = []
    garbage = b"\x00 not a database, or a truncated one \xff" * 300

    def run(**options: Any) -> Awaitable[Any]:
        return ModelSelector(
            lambda m, q: "right", {"solver": ["a"]}, DATASET, _exact, algorithm="brute_force",
            model_handles=False, **options,
        ).select_best()  # fmt: skip

    for what, key in (("response cache", "cache"), ("run journal", "journal")):
        path = folder / f"damaged-{key}.sqlite"
        path.write_bytes(garbage)
        other = {"journal": False} if key == "cache" else {"cache": False}
        try:
            result = await run(**{key: path}, **other)
            aside = _set_aside(folder, path.name)
            ok = aside == [garbage] and result.evaluations == len(DATASET)
            detail = f"moved aside intact: {aside == [garbage]}; {result.evaluations} evaluations"
            rows.append(
                _row(cls, f"the {what} is not a database", "contained" if ok else "lost", detail)
            )
        except Exception as exc:  # the verdict reports what escaped
            rows.append(
                _row(cls, f"the {what} is not a database", "lost", f"{type(exc).__name__}: {exc}")
            )

    blocker = folder / "a-file"
    blocker.write_text("a file where a folder should be")
    cases: list[tuple[str, dict[str, Any], bool]] = [
        ("the cache's folder is a file", {"cache": blocker / "c.sqlite", "journal": False}, False),
        ("resume from a journal that cannot be read", {"cache": False, "journal": blocker / "j.sqlite"}, True),
    ]  # fmt: skip
    for name, options, resume in cases:
        ran: list[str] = []
        try:
            await ModelSelector(
                _recording(ran), {"solver": ["a"]}, DATASET, _exact,
                algorithm="brute_force", model_handles=False, **options,
            ).select_best(resume=resume)  # fmt: skip
            rows.append(_row(cls, name, "lost", "ran as if nothing were wrong"))
        except PhiError as exc:
            named = str(blocker) in str(exc)
            result = "blocked" if named and not ran else "lost"
            rows.append(
                _row(
                    cls, name, result, f"{type(exc).__name__}: {str(exc)[:100]} (runs: {len(ran)})"
                )
            )
    return rows


async def run_cases() -> list[Row]:
    rows: list[Row] = []
    for case in _hostile_agents():
        rows.append(await _agent_case(*case))
    with tempfile.TemporaryDirectory(prefix="phi-hostile-select-") as tmp:
        folder = Path(tmp)
        rows.append(await _interrupt_case(folder))
        rows += await _scorer_cases()
        rows += await _dataset_cases()
        rows += await _secret_cases(folder)
        rows += await _state_cases(folder)
    return rows


if __name__ == "__main__":
    for row in asyncio.run(run_cases()):
        print(f"{row['result']:9} {row['class']:20} {row['case']}: {row['detail']}")
