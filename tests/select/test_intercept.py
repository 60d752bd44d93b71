"""Interception: calls an agent makes itself through the official SDKs or httpx are attributed to
their (combination, datapoint), metered from the usage the server reports, priced, cached,
limited and held to the budget — against fake vendor servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import sqlite3
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest

from phi_core.metering import Budget, Meter, metering
from phi_core.providers.limiter import Limiter, default_limiter, set_default_limiter
from phi_core.select import ModelSelector, ResponseCache
from phi_core.select._intercept import InterceptScope, attribute, intercepting
from tests.select.llm_server import LlmServer, _unit, answer, usage_of

PRICES = {
    "model-a": {"input_price": 3.0, "output_price": 15.0},
    "model-b": {"input_price": 0.5, "output_price": 1.5},
    "model-c": {"input_price": 0.1, "output_price": 0.2},
}
DATASET = [(f"q{i}", "right") for i in range(10)]
_ORIGINAL_START, _ORIGINAL_SUBMIT = threading.Thread.start, ThreadPoolExecutor.submit


def exact(expected: str, actual: str) -> float:
    return float(expected == actual.strip())


def dollars(model: str, inp: int, out: int) -> float:
    p = PRICES[model]
    return (inp * p["input_price"] + out * p["output_price"]) / 1e6


def by_name(result: Any) -> dict[str, Any]:
    return {c.name: c for c in result.combinations}


TWO_STEPS = {"planner": ["model-b", "model-c"], "solver": ["model-a", "model-c"]}


async def brute_force(
    agent: Any, datapoints: int, models: Any = TWO_STEPS, max_concurrent: int = 4, **options: Any
) -> Any:
    """Every combination of ``models`` (default :data:`TWO_STEPS`) on the first datapoints;
    ``options`` override the selector's keywords (no cache by default)."""
    selector = ModelSelector(
        agent,
        models,
        DATASET[:datapoints],
        exact,
        algorithm="brute_force",
        max_concurrent=max_concurrent,
        **{"cache": False, "model_prices": PRICES, "model_handles": False, **options},
    )
    return await selector.select_best()


def assert_rows_billed(result: Any, prompts: Any) -> None:
    """Each per-datapoint row holds exactly the calls ``prompts(planner, solver, question)``
    lists as ``(model, prompt)``: their tokens and dollars, and nothing else."""
    for row in result.datapoints:
        planner, solver = (part.split("=")[1] for part in row.combination.split(" + "))
        sent = prompts(planner, solver, DATASET[row.datapoint][0])
        usage = [(model, *usage_of(model, prompt)) for model, prompt in sent]
        assert row.calls == len(sent)
        assert (row.input_tokens, row.output_tokens) == (
            sum(u[1] for u in usage),
            sum(u[2] for u in usage),
        )
        assert row.cost_usd == pytest.approx(sum(dollars(*u) for u in usage))


async def test_concurrent_combinations_are_metered_exactly_as_the_server_billed_each() -> None:
    async with LlmServer(delay=0.005) as server:
        client = server.openai(api_key="sk-test", max_retries=0)

        class Agent:
            def __init__(self, models: dict[str, str]) -> None:
                self.model = models["solver"]
                self.client = client

            async def run(self, question: str) -> str:
                reply = await self.client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": f"Answer: {question}"}]
                )
                return reply.choices[0].message.content or ""

        selector = ModelSelector(
            Agent,
            {"solver": ["model-a", "model-b", "model-c"]},
            DATASET,
            exact,
            algorithm="brute_force",
            max_concurrent=12,
            seed=1,
            cache=False,
            model_prices=PRICES,
            model_handles=False,
        )
        result = await selector.select_best()

    assert server.server is not None and server.server.max_in_flight > 1  # really concurrent
    combos = by_name(result)
    for model in PRICES:
        billed = [b for b in server.reported if b.model == model]
        combo = combos[f"solver={model}"]
        assert combo.input_tokens == sum(b.input for b in billed)
        assert combo.output_tokens == sum(b.output for b in billed)
        assert combo.cost_usd == pytest.approx(
            sum(dollars(model, b.input, b.output) for b in billed)
        )
        assert set(combo.usage_by_model) == {f"openai:{model}"}
        assert combo.accuracy == pytest.approx(
            sum(answer(model, q) == "right" for q, _ in DATASET) / len(DATASET)
        )
    for row in result.datapoints:
        model = row.combination.removeprefix("solver=")
        question = DATASET[row.datapoint][0]
        inp, out = usage_of(model, f"Answer: {question}")
        assert (row.input_tokens, row.output_tokens, row.calls) == (inp, out, 1)
        assert row.cost_usd == pytest.approx(dollars(model, inp, out))
    assert result.cost_usd == pytest.approx(sum(c.cost_usd for c in result.combinations))
    assert result.metered_calls == 30 and not result.warnings


async def test_sync_agents_in_worker_threads_are_attributed_to_their_own_cell() -> None:
    async with LlmServer(delay=0.002) as server:
        client = server.openai_sync(api_key="k", max_retries=0)

        class SyncAgent:
            def __init__(self, models: dict[str, str]) -> None:
                self.models = models
                self.client = client

            def run(self, question: str) -> str:
                plan = self.client.chat.completions.create(
                    model=self.models["planner"],
                    messages=[{"role": "user", "content": f"Plan: {question}"}],
                )
                reply = self.client.chat.completions.create(
                    model=self.models["solver"],
                    messages=[{"role": "user", "content": f"{plan.id} Answer: {question}"}],
                    stream=True,
                    stream_options={"include_usage": True},
                )
                return "".join(c.choices[0].delta.content or "" for c in reply if c.choices)

        result = await brute_force(SyncAgent, datapoints=6, max_concurrent=8)

    assert_rows_billed(result, lambda p, s, q: [(p, f"Plan: {q}"), (s, f"c1 Answer: {q}")])
    assert sum(r.calls for r in result.datapoints) == len(server.reported) == 4 * 6 * 2


async def test_calls_an_agent_fans_out_over_its_own_threads_stay_in_their_cell() -> None:
    pool = ThreadPoolExecutor(max_workers=3)  # made before the run, reused by every cell
    async with LlmServer(delay=0.002) as server:
        client = server.openai_sync(api_key="k", max_retries=0)

        def ask(model: str, prompt: str) -> str:
            reply = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}]
            )
            return reply.choices[0].message.content or ""

        class FanOutAgent:
            def __init__(self, models: dict[str, str]) -> None:
                self.models = models

            def run(self, question: str) -> str:
                # a plain thread for the plan, the agent's pool for two drafts
                plan: list[str] = []
                thread = threading.Thread(
                    target=lambda: plan.append(ask(self.models["planner"], f"Plan: {question}"))
                )
                thread.start()
                thread.join()
                drafts = [
                    pool.submit(ask, self.models["solver"], f"Draft {i}: {question}")
                    for i in (1, 2)
                ]
                return drafts[0].result() if drafts[1].result() else ""

        result = await brute_force(FanOutAgent, datapoints=5)

        assert_rows_billed(
            result,
            lambda p, s, q: [(p, f"Plan: {q}"), (s, f"Draft 1: {q}"), (s, f"Draft 2: {q}")],
        )
        assert result.metered_calls == len(server.reported) == 4 * 5 * 3 and not result.warnings

    pool.shutdown()
    assert threading.Thread.start is _ORIGINAL_START
    assert ThreadPoolExecutor.submit is _ORIGINAL_SUBMIT


async def test_a_pool_thread_started_inside_a_closed_scope_meters_nothing_for_it_later() -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    async with LlmServer() as server:
        client = server.openai_sync(api_key="k", max_retries=0)

        def ask(prompt: str) -> None:
            client.chat.completions.create(
                model="model-c", messages=[{"role": "user", "content": prompt}]
            )

        first = InterceptScope(limiter=None)
        with intercepting(first), attribute("solver=model-c", 0):
            # the pool's only thread starts here, in this scope's context, and keeps it
            await asyncio.to_thread(pool.submit(ask, "q1").result)
        assert len(first.calls) == 1
        later = InterceptScope(limiter=None)
        with intercepting(later):
            stray = contextvars.Context().run(pool.submit, ask, "q2")  # from outside any scope
            await asyncio.to_thread(stray.result)
        assert len(server.reported) == 2
        assert len(first.calls) == 1 and later.calls == []
    pool.shutdown()


async def test_cached_calls_are_free_shared_across_combinations_and_a_rerun_sends_nothing(
    tmp_path: Path,
) -> None:
    cache_path = tmp_path / "cache.sqlite"
    async with LlmServer() as server:
        client = server.openai(api_key="sk-secret-123")

        class TwoSteps:
            def __init__(self, models: dict[str, str]) -> None:
                self.models = models
                self.client = client

            async def run(self, question: str) -> str:
                plan = await self.client.chat.completions.create(
                    model=self.models["planner"],
                    messages=[{"role": "user", "content": f"Plan {question}"}],
                )
                reply = await self.client.chat.completions.create(
                    model=self.models["solver"],
                    messages=[
                        {"role": "user", "content": f"{plan.choices[0].message.content} {question}"}
                    ],
                )
                return reply.choices[0].message.content or ""

        models = {"planner": ["model-b", "model-c"], "solver": ["model-a", "model-b"]}
        first = await brute_force(TwoSteps, 5, models, 1, cache=cache_path, journal=False)
        sent_first = len(server.requests)
        second = await brute_force(TwoSteps, 5, models, 1, cache=cache_path, journal=False)

    # 4 combinations x 5 items x 2 calls, less those identical to one sent before: each planner
    # call is shared by two combinations, a solver call when both planners said the same
    distinct = {(p, f"Plan {q}") for p in ("model-b", "model-c") for q, _ in DATASET[:5]} | {
        (s, f"{answer(p, q)} {q}")
        for p in ("model-b", "model-c")
        for s in ("model-a", "model-b")
        for q, _ in DATASET[:5]
    }
    assert sent_first == len(distinct) < 4 * 5 * 2
    assert len(server.requests) == sent_first  # the re-run was answered from the cache
    assert second.cost_usd == 0.0 < first.cost_usd
    assert [c.cost_usd for c in second.combinations] == pytest.approx(
        [c.cost_usd for c in first.combinations]
    )
    assert [c.accuracy for c in second.combinations] == [c.accuracy for c in first.combinations]
    assert b"sk-secret-123" not in cache_path.read_bytes()


async def test_repeated_identical_requests_in_one_cell_are_separate_samples() -> None:
    async with LlmServer() as server:
        client = server.openai(api_key="k")
        scope = InterceptScope(cache=ResponseCache(), limiter=None)
        messages = [{"role": "user", "content": "same q1"}]
        with intercepting(scope):
            for cell in ("x", "y"):
                with attribute(cell, 0):
                    for _ in range(3):
                        await client.chat.completions.create(model="model-a", messages=messages)
    # three samples in cell x; cell y reuses them, in the same order
    assert len(server.requests) == 3
    assert [c.cached for c in scope.calls] == [False] * 3 + [True] * 3


async def test_anthropic_streamed_and_whole_messages_are_metered() -> None:
    anthropic = pytest.importorskip("anthropic")
    async with LlmServer() as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
        server.clients.append(client)
        with intercepting(InterceptScope(limiter=None)), metering(Meter()) as meter:
            whole = await client.messages.create(
                model="claude-haiku-4-5",
                max_tokens=50,
                messages=[{"role": "user", "content": "hi q1"}],
            )
            async with client.messages.stream(
                model="claude-haiku-4-5",
                max_tokens=50,
                messages=[{"role": "user", "content": "yo q2"}],
            ) as stream:
                text = await stream.get_final_text()
    assert whole.content[0].text in ("right", "wrong") and text in ("right", "wrong")
    billed = [(b.input, b.output) for b in server.reported]
    assert [(c.usage.input, c.usage.output) for c in meter.calls] == billed
    # claude-haiku-4-5 costs $1 / $5 per million tokens in the price table
    assert meter.cost == pytest.approx(sum(i * 1.0 + o * 5.0 for i, o in billed) / 1e6)
    assert all(c.model == "anthropic:claude-haiku-4-5" for c in meter.calls)


async def test_google_genai_calls_sync_and_async_streamed_and_whole_are_metered() -> None:
    genai = pytest.importorskip("google.genai")
    async with LlmServer() as server:
        client = genai.Client(
            api_key="AIza-secret", http_options={"base_url": server.url, "api_version": "v1beta"}
        )
        with intercepting(InterceptScope(limiter=None)), metering(Meter()) as meter:
            a = await client.aio.models.generate_content(model="gemini-2.0-flash", contents="hi q1")
            chunks = [
                c.text
                async for c in await client.aio.models.generate_content_stream(
                    model="gemini-2.0-flash", contents="yo q2"
                )
            ]
            b = await asyncio.to_thread(
                lambda: client.models.generate_content(model="gemini-2.0-flash", contents="hey q3")
            )
        await client.aio.aclose()
        client.close()
    assert a.text and b.text and "".join(chunks)
    billed = [(r.input, r.output) for r in server.reported]
    assert [(c.usage.input, c.usage.output) for c in meter.calls] == billed
    assert {c.model for c in meter.calls} == {"google:gemini-2.0-flash"}
    assert meter.cost == pytest.approx(sum(i * 0.10 + o * 0.40 for i, o in billed) / 1e6)


async def test_plain_httpx_and_the_responses_api_are_metered() -> None:
    async with LlmServer() as server:
        with intercepting(InterceptScope(limiter=None)), metering(Meter()) as meter:
            async with httpx.AsyncClient() as client:
                r = await client.post(
                    server.url + "/v1/chat/completions",
                    json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "q1"}]},
                )

            def sync_post() -> None:  # a sync client, in a worker thread (asyncio.to_thread)
                with httpx2.Client() as client2:
                    client2.post(
                        server.url + "/v1/chat/completions",
                        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "q2"}]},
                    )

            await asyncio.to_thread(sync_post)
            responses = server.openai(api_key="k")
            made = await responses.responses.create(model="gpt-4o-mini", input="hello q3")
    assert r.json()["choices"][0]["message"]["content"] in ("right", "wrong")
    assert made.output_text in ("right", "wrong")
    billed = [(b.input, b.output) for b in server.reported]
    assert [(c.usage.input, c.usage.output) for c in meter.calls] == billed
    assert [c.model for c in meter.calls] == [
        "openai:gpt-4o-mini",
        "openai:gpt-4o",
        "openai:gpt-4o-mini",
    ]


async def test_a_stream_without_usage_is_estimated_and_flagged() -> None:
    async with LlmServer() as server:
        client = server.openai(api_key="k")
        with intercepting(InterceptScope(limiter=None)), metering(Meter()) as meter:
            stream = await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "x" * 300}], stream=True
            )
            async for _ in stream:
                pass
    (call,) = meter.calls
    assert call.estimated and call.usage.input >= 100 and call.usage.output >= 1


async def test_a_budget_refuses_calls_before_they_are_sent_and_the_sdk_raises_cleanly() -> None:
    async with LlmServer() as server:
        client = server.openai(api_key="k", max_retries=3)
        # gpt-4o: $2.50 / $10 per million: 100 output tokens may cost $0.001, 1000 $0.01
        with (
            intercepting(InterceptScope(limiter=None)),
            metering(Meter(Budget(max_cost_usd=0.005))),
        ):
            await client.chat.completions.create(
                model="gpt-4o", max_tokens=100, messages=[{"role": "user", "content": "q1"}]
            )
            with pytest.raises(openai.APIStatusError) as refused:
                await client.chat.completions.create(
                    model="gpt-4o", max_tokens=1000, messages=[{"role": "user", "content": "q2"}]
                )
    assert refused.value.status_code == 402 and "budget" in str(refused.value).lower()
    assert len(server.requests) == 1  # refused before sending, and not retried


async def test_a_token_budget_lowers_the_output_limit_the_server_receives() -> None:
    async with LlmServer() as server:
        client = server.openai(api_key="k")
        with intercepting(InterceptScope(limiter=None)), metering(Meter(Budget(max_tokens=200))):
            await client.chat.completions.create(
                model="gpt-4o-mini", max_tokens=5000, messages=[{"role": "user", "content": "q1"}]
            )
    sent = server.requests[0].json
    assert 0 < sent["max_tokens"] < 200


async def test_a_selection_over_budget_stops_and_reports_it() -> None:
    async with LlmServer() as server:
        client = server.openai(api_key="k")

        class Agent:
            def __init__(self, models: dict[str, str]) -> None:
                self.model = models["solver"]
                self.client = client

            async def run(self, question: str) -> str:
                reply = await self.client.chat.completions.create(
                    model=self.model,
                    max_tokens=10,
                    messages=[{"role": "user", "content": question}],
                )
                return reply.choices[0].message.content or ""

        result = await ModelSelector(
            Agent,
            {"solver": ["model-a", "model-b"]},
            DATASET,
            exact,
            algorithm="brute_force",
            max_concurrent=2,
            cache=False,
            budget=Budget(max_cost_usd=0.001),
            model_prices=PRICES,
            model_handles=False,
        ).select_best()
    assert result.budget_exhausted and 0 < result.evaluations < result.grid_evaluations
    assert result.cost_usd <= 0.001


async def test_intercepted_calls_share_the_limiter() -> None:
    previous = default_limiter()
    set_default_limiter(Limiter(per_model=2))
    try:
        async with LlmServer(delay=0.01) as server:
            client = server.openai(api_key="k")

            async def ask(i: int) -> None:
                await client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": f"q{i}"}]
                )

            with intercepting(InterceptScope()):
                await asyncio.gather(*(ask(i) for i in range(8)))
            assert server.server is not None
            assert server.server.max_in_flight == 2
    finally:
        set_default_limiter(previous)


async def test_nothing_is_intercepted_outside_a_run_and_the_patch_is_removed() -> None:
    originals = (httpx.AsyncClient.send, httpx2.AsyncClient.send, httpx2.Client.send)
    async with LlmServer() as server:
        client = server.openai(api_key="k")
        outside = Meter()
        scope = InterceptScope(limiter=None)

        async def elsewhere() -> None:  # started before the scope: not in its context
            await asyncio.sleep(0.01)
            with metering(outside):
                await client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "q9"}]
                )

        task = asyncio.create_task(elsewhere())
        with intercepting(scope):
            await task
    assert scope.calls == [] and outside.calls == []
    assert (httpx.AsyncClient.send, httpx2.AsyncClient.send, httpx2.Client.send) == originals


async def test_calls_through_phi_providers_are_counted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from phi_core.select import MeteredModel

    async with LlmServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        handle = MeteredModel("openai:gpt-4o-mini")
        with intercepting(InterceptScope(limiter=None)) as scope, metering(Meter()) as meter:
            await handle.complete("q1")
    assert len(server.requests) == 1
    assert len(meter.calls) == 1 and scope.calls == []


async def test_a_run_that_meters_no_call_warns(caplog: pytest.LogCaptureFixture) -> None:
    def pure_python(models: dict[str, str], question: str) -> str:
        return "right"

    with caplog.at_level(logging.WARNING, logger="phi_core.select"):
        result = await ModelSelector(
            pure_python,
            {"solver": ["a", "b"]},
            DATASET[:3],
            exact,
            algorithm="brute_force",
            cache=False,
            model_handles=False,
        ).select_best()
    assert result.metered_calls == 0
    assert any("No model call was metered" in w for w in result.warnings)
    assert any("No model call was metered" in r.message for r in caplog.records)


async def test_evaluations_whose_calls_went_unseen_are_counted_in_a_warning() -> None:
    async with LlmServer() as server:
        client = server.openai_sync(api_key="k", max_retries=0)

        def agent(models: dict[str, str], question: str) -> str:
            body = {"model": models["solver"], "messages": [{"role": "user", "content": question}]}
            if models["solver"] == "model-c":  # urllib: an HTTP stack interception cannot see
                request = urllib.request.Request(
                    server.url + "/v1/chat/completions",
                    data=json.dumps(body).encode(),
                    headers={"content-type": "application/json", "authorization": "Bearer k"},
                )
                with urllib.request.urlopen(request, timeout=10) as response:
                    reply = json.load(response)
                return str(reply["choices"][0]["message"]["content"])
            if question == "q2":
                raise RuntimeError("no answer")  # failed evaluations are not "unseen calls"
            completion = client.chat.completions.create(**body)
            return completion.choices[0].message.content or ""

        result = await brute_force(agent, 4, {"solver": ["model-a", "model-c"]})

    assert len(server.reported) == 3 + 4  # every call reached the server
    assert result.metered_calls == 3
    unseen = [w for w in result.warnings if "without metering a single model call" in w]
    assert len(unseen) == 1
    assert unseen[0].startswith("4 of 8 evaluations") and "first: solver=model-c" in unseen[0]


async def test_no_unseen_call_warning_when_every_finished_evaluation_metered_one() -> None:
    async with LlmServer() as server:
        client = server.openai(api_key="k", max_retries=0)

        async def agent(models: dict[str, str], question: str) -> str:
            if question == "q1":
                raise RuntimeError("no answer")  # fails before calling: not an unseen call
            reply = await client.chat.completions.create(
                model=models["solver"], messages=[{"role": "user", "content": question}]
            )
            return reply.choices[0].message.content or ""

        result = await brute_force(agent, 3, {"solver": ["model-a", "model-c"]})

    assert result.metered_calls == 4 == len(server.reported)
    assert len(result.warnings) == 1 and "2 of 6 evaluations failed" in result.warnings[0]


async def test_a_model_without_a_price_is_named_in_a_warning() -> None:
    async with LlmServer() as server:
        client = server.openai(api_key="k")

        async def agent(models: dict[str, str], question: str) -> str:
            reply = await client.chat.completions.create(
                model=models["solver"], messages=[{"role": "user", "content": question}]
            )
            return reply.choices[0].message.content or ""

        result = await ModelSelector(
            agent,
            {"solver": ["model-z"]},
            DATASET[:2],
            exact,
            algorithm="brute_force",
            cache=False,
            model_handles=False,
        ).select_best()
    assert any("model-z" in w and "model_prices" in w for w in result.warnings)


async def test_gemini_api_keys_in_the_query_never_reach_the_cache(tmp_path: Path) -> None:
    async with LlmServer() as server:
        cache = ResponseCache(tmp_path / "c.sqlite")
        with intercepting(InterceptScope(cache=cache, limiter=None)) as scope:
            async with httpx.AsyncClient() as client:
                for cell, key in enumerate(("AIza-first-secret", "AIza-second-secret")):
                    with attribute("combination", cell):
                        await client.post(
                            f"{server.url}/v1beta/models/gemini-2.0-flash:generateContent?key={key}",
                            json={"contents": [{"parts": [{"text": "hi q1"}]}]},
                        )
        cache.close()
    assert len(server.requests) == 1 and [c.cached for c in scope.calls] == [False, True]
    rows = sqlite3.connect(tmp_path / "c.sqlite").execute("SELECT * FROM responses").fetchall()
    assert rows and "secret" not in repr(rows)


async def test_an_api_key_an_sdk_error_echoes_never_reaches_results_or_the_journal(
    tmp_path: Path,
) -> None:
    key = "zz-custom-key-83749201"  # shaped like no known key format

    def unauthorised(record: Any) -> Any:
        from tests.providers.fakes import Respond

        return Respond(401, {"error": {"message": f"Incorrect API key provided: {key}.",
                                       "type": "invalid_request_error"}})  # fmt: skip

    from tests.providers.fakes import FakeServer

    async with (
        FakeServer(default=unauthorised) as server,
        openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0) as client,
    ):

        async def agent(models: dict[str, str], question: str) -> str:
            reply = await client.chat.completions.create(
                model=models["solver"], messages=[{"role": "user", "content": question}]
            )
            return reply.choices[0].message.content or ""

        journal = tmp_path / "runs.sqlite"
        result = await ModelSelector(
            agent, {"solver": ["gpt-4o-mini"]}, DATASET[:2], exact, algorithm="brute_force",
            cache=False, model_handles=False, journal=journal,
        ).select_best()  # fmt: skip
    assert len(result.failures) == 2 and "AuthenticationError" in result.failures[0].error
    assert key not in result.to_json() and "[REDACTED]" in result.failures[0].error
    assert key.encode() not in journal.read_bytes()


async def test_a_429_is_metered_as_rate_limited_and_cuts_the_limiter() -> None:
    from tests.providers.fakes import FakeServer, Respond

    limiter = Limiter(per_model=8)
    script = [Respond(429, {"error": {"message": "slow down", "type": "rate_limit"}})]
    async with (
        FakeServer(script) as server,
        openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0) as client,
    ):
        with (
            intercepting(InterceptScope(limiter=limiter)),
            metering(Meter()) as meter,
            pytest.raises(openai.RateLimitError),
        ):
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "q"}]
            )
    (call,) = meter.calls
    assert call.error_kind == "rate_limited" and call.usage.total == 0
    stats = limiter.gate_stats("model:openai:gpt-4o-mini")
    assert stats is not None and stats.rate_limited == 1 and stats.cap == 4.0


async def test_an_abandoned_stream_is_metered_estimated_releases_its_slot_and_is_not_cached() -> (
    None
):
    limiter = Limiter(per_model=1)
    cache = ResponseCache()
    async with LlmServer() as server:
        client = server.openai(api_key="k")
        with intercepting(InterceptScope(cache=cache, limiter=limiter)), metering(Meter()) as meter:
            stream = await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "q1"}], stream=True
            )
            async for _ in stream:
                break
            await stream.close()
            # the one slot is free again: a second call goes through
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "q2"}]
            )
    first, second = meter.calls
    assert first.estimated and not second.estimated
    assert len(cache) == 1  # only the whole answer was cached


@pytest.mark.timeout(30)
async def test_a_sync_stream_closed_on_the_loops_own_thread_frees_its_slot_without_waiting() -> (
    None
):
    """A garbage collection on the event loop's thread may close a sync stream an agent left
    open: its limiter slot is handed back to that same loop, which must not wait for itself."""
    limiter = Limiter(per_model=1)
    async with LlmServer() as server:
        client = server.openai_sync(api_key="k", max_retries=0)

        def first_chunk_only() -> Any:
            stream = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "q1"}], stream=True
            )
            next(iter(stream))
            return stream  # neither read to its end nor closed

        with intercepting(InterceptScope(limiter=limiter)), metering(Meter()) as meter:
            stream = await asyncio.to_thread(first_chunk_only)
            stream.close()  # here, on the loop's thread, as a collection there would
            # the one slot is free again: a second call (from a worker thread) goes through
            await asyncio.to_thread(
                client.chat.completions.create,
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": "q2"}],
            )
    first, second = meter.calls
    assert first.estimated and not second.estimated


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_stream_an_agent_leaves_open_is_metered_in_its_cell_and_frees_its_slot(
    kind: str,
) -> None:
    """`for chunk in stream: return ...` leaves the stream neither read to its end nor closed;
    when the cell ends the call is settled with what had arrived (estimated, in that cell) and
    its limiter slot is freed, so the next cell's call is not kept waiting for it."""
    previous = default_limiter()
    set_default_limiter(Limiter(per_model=1))
    left_open: list[Any] = []  # never closed during the run (not even by a collection)
    try:
        async with LlmServer() as server:
            sync_client = server.openai_sync(api_key="k", max_retries=0)
            async_client = server.openai(api_key="k", max_retries=0)
            messages = lambda q: [{"role": "user", "content": q}]  # noqa: E731

            class SyncAgent:
                def __init__(self, models: dict[str, str]) -> None:
                    self.model = models["solver"]

                def run(self, question: str) -> str:
                    stream = sync_client.chat.completions.create(
                        model=self.model, messages=messages(question), stream=True
                    )
                    left_open.append(stream)
                    for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            return str(chunk.choices[0].delta.content)
                    return ""

            class AsyncAgent:
                def __init__(self, models: dict[str, str]) -> None:
                    self.model = models["solver"]

                async def run(self, question: str) -> str:
                    stream = await async_client.chat.completions.create(
                        model=self.model, messages=messages(question), stream=True
                    )
                    left_open.append(stream)
                    async for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            return str(chunk.choices[0].delta.content)
                    return ""

            agent = SyncAgent if kind == "sync" else AsyncAgent
            result = await brute_force(agent, datapoints=4, models={"solver": ["gpt-4o-mini"]})
            for stream in left_open:
                closed = stream.close()
                if asyncio.iscoroutine(closed):
                    await closed
    finally:
        set_default_limiter(previous)
    assert len(server.reported) == 4
    assert [row.calls for row in result.datapoints] == [1] * 4
    assert all(row.input_tokens > 0 for row in result.datapoints)  # estimated from the prompt
    assert result.metered_calls == 4
    assert not any("No model call was metered" in w for w in result.warnings)
    assert any("estimated" in w for w in result.warnings)


@pytest.mark.parametrize("concurrent", [True, False])
async def test_a_cached_call_counts_its_original_latency_once_along_the_runs_critical_path(
    concurrent: bool,
) -> None:
    """A cache hit answers at once; the run's latency counts the hit's original latency where
    it lay on the run's path: beside a concurrent call it overlaps (not on top of it), after a
    call it waited for in full. So the latency does not depend on what the cache answered, and
    a fully cached rerun reports the first run's."""
    delay = 0.1  # the server answers in delay * (1 + _unit(prompt, model)) seconds: 0.1 to 0.2
    async with LlmServer(delay=delay) as server:
        client = server.openai(api_key="k")

        class PlanAndSolve:
            def __init__(self, models: dict[str, str]) -> None:
                self.models = models

            async def run(self, question: str) -> str:
                ask = lambda step: client.chat.completions.create(  # noqa: E731
                    model=self.models[step], messages=[{"role": "user", "content": question}]
                )
                if concurrent:
                    await asyncio.gather(ask("planner"), ask("solver"))
                else:
                    await ask("planner")
                    await ask("solver")
                return "right"

        # one at a time: the second combination's planner call is answered from the cache
        models = {"planner": ["model-c"], "solver": ["model-a", "model-b"]}
        cache = ResponseCache()
        first = await brute_force(PlanAndSolve, 1, models, 1, cache=cache)
        rerun = await brute_force(PlanAndSolve, 1, models, 1, cache=cache)  # all from the cache
    assert len(server.requests) == 3
    question = DATASET[0][0]
    took = {m: delay * (1 + _unit(question, m)) for m in ("model-a", "model-b", "model-c")}
    for result in (first, rerun):
        for row in result.datapoints:
            solver = row.combination.split("solver=")[1]
            pair = (took["model-c"], took[solver])
            expected = max(pair) if concurrent else sum(pair)
            # the server's time plus the client's and the loop's own (a few ms, more when busy)
            assert expected <= row.latency_s <= expected + min(pair) / 2, (row, took)


async def test_a_thread_pool_made_during_one_run_and_kept_serves_later_runs_in_their_cells() -> (
    None
):
    """A lazily made `multiprocessing.pool.ThreadPool` starts its threads inside the first cell
    and keeps them: the work later cells give it still runs (and is metered) in theirs."""
    from multiprocessing.pool import ThreadPool

    pools: list[ThreadPool] = []
    async with LlmServer(delay=0.002) as server:
        client = server.openai_sync(api_key="k", max_retries=0)

        def ask(model: str, prompt: str) -> str:
            reply = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}]
            )
            return reply.choices[0].message.content or ""

        class PooledAgent:
            def __init__(self, models: dict[str, str]) -> None:
                self.models = models

            def run(self, question: str) -> str:
                if not pools:
                    pools.append(ThreadPool(2))  # made inside the first cell, kept after it
                pool = pools[0]
                pool.apply_async(ask, (self.models["planner"], f"Plan: {question}")).get()
                drafts = pool.map(lambda i: ask(self.models["solver"], f"D{i}: {question}"), [1])
                fixes = list(
                    pool.imap(lambda i: ask(self.models["solver"], f"F{i}: {question}"), [1])
                )
                return drafts[0] if fixes else ""

        result = await brute_force(PooledAgent, datapoints=3, max_concurrent=1)
    for pool in pools:
        pool.terminate()
        pool.join()
    assert not [row.error for row in result.datapoints if row.error]
    assert_rows_billed(
        result,
        lambda p, s, q: [(p, f"Plan: {q}"), (s, f"D1: {q}"), (s, f"F1: {q}")],
    )
    assert result.metered_calls == len(server.reported) == 4 * 3 * 3
