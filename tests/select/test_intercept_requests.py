"""Interception of agents that post to a model server with ``requests``: attributed to their
cell, metered from the usage the server reports (whole and streamed), cached, held to the budget
and limited like SDK calls — against the fake vendor server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import requests

from phi_core.metering import Budget, Meter, metering
from phi_core.providers.limiter import Limiter
from phi_core.select import ResponseCache
from phi_core.select._intercept import InterceptScope, intercepting
from tests.select.llm_server import LlmServer, answer
from tests.select.test_intercept import DATASET, assert_rows_billed, brute_force

HEADERS = {"authorization": "Bearer sk-requests-secret"}


def chat(base: str, model: str, prompt: str, **extra: Any) -> requests.Response:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], **extra}
    return requests.post(
        f"{base}/v1/chat/completions",
        json=body,
        headers=HEADERS,
        timeout=10,
        stream=bool(extra.get("stream")),
    )


def streamed_text(response: requests.Response) -> str:
    """The text of an OpenAI chat stream read line by line, as hand-written clients do."""
    text = []
    for line in response.iter_lines():
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        for choice in json.loads(line[6:])["choices"]:
            text.append(choice["delta"].get("content") or "")
    return "".join(text)


class RequestsAgent:
    """Two steps: a whole planner call, then a streamed solver call, both through ``requests``."""

    base = ""

    def __init__(self, models: dict[str, str]) -> None:
        self.models = models

    def run(self, question: str) -> str:
        plan = chat(self.base, self.models["planner"], f"Plan: {question}").json()
        with chat(
            self.base,
            self.models["solver"],
            f"{plan['id']} Answer: {question}",
            stream=True,
            stream_options={"include_usage": True},
        ) as reply:
            return streamed_text(reply)


async def test_requests_calls_are_metered_in_their_own_cell_whole_and_streamed() -> None:
    async with LlmServer(delay=0.002) as server:
        RequestsAgent.base = server.url
        result = await brute_force(RequestsAgent, datapoints=6, max_concurrent=8)

    assert server.server is not None and server.server.max_in_flight > 1
    assert_rows_billed(result, lambda p, s, q: [(p, f"Plan: {q}"), (s, f"c1 Answer: {q}")])
    assert sum(r.calls for r in result.datapoints) == len(server.reported) == 4 * 6 * 2
    for combo in result.combinations:
        solver = combo.name.split("solver=")[1]
        expected = [answer(solver, q) == "right" for q, _ in DATASET[:6]]
        assert combo.accuracy == pytest.approx(sum(expected) / 6)
    assert not result.warnings


async def test_requests_calls_are_cached_and_a_rerun_sends_nothing(tmp_path: Path) -> None:
    cache_path = tmp_path / "cache.sqlite"
    async with LlmServer() as server:
        RequestsAgent.base = server.url

        models = {"planner": ["model-b"], "solver": ["model-a", "model-c"]}
        first = await brute_force(RequestsAgent, 4, models, 2, cache=cache_path, journal=False)
        sent = len(server.requests)
        second = await brute_force(RequestsAgent, 4, models, 2, cache=cache_path, journal=False)

    assert sent == 4 + 2 * 4  # the planner's calls are shared by both combinations
    assert len(server.requests) == sent  # the re-run, streams included, came from the cache
    assert second.cost_usd == 0.0 < first.cost_usd
    assert [c.accuracy for c in second.combinations] == [c.accuracy for c in first.combinations]
    assert [c.cost_usd for c in second.combinations] == pytest.approx(
        [c.cost_usd for c in first.combinations]
    )
    assert b"sk-requests-secret" not in cache_path.read_bytes()


async def test_a_budget_refuses_a_requests_call_with_a_402_and_lowers_the_output_limit() -> None:
    async with LlmServer() as server:

        def calls() -> tuple[requests.Response, requests.Response]:
            with metering(Meter(Budget(max_cost_usd=0.005))):
                # gpt-4o: $2.50 / $10 per million: 100 output tokens may cost $0.001, 1000 $0.01
                ok = chat(server.url, "gpt-4o", "q1", max_tokens=100)
                refused = chat(server.url, "gpt-4o", "q2", max_tokens=1000)
            with metering(Meter(Budget(max_tokens=200))):
                chat(server.url, "gpt-4o-mini", "q3", max_tokens=5000)
            return ok, refused

        with intercepting(InterceptScope(limiter=None)):
            ok, refused = await asyncio.to_thread(calls)

    assert ok.status_code == 200
    assert refused.status_code == 402 and "budget" in refused.json()["error"]["message"]
    assert refused.headers["x-should-retry"] == "false"
    assert [r.json["messages"][0]["content"] for r in server.requests] == ["q1", "q3"]
    assert 0 < server.requests[1].json["max_tokens"] < 200


async def test_an_abandoned_requests_stream_is_estimated_releases_its_slot_and_is_not_cached() -> (
    None
):
    limiter = Limiter(per_model=1)
    cache = ResponseCache()
    async with LlmServer() as server:

        def two_calls() -> str:
            with chat(server.url, "gpt-4o-mini", "q1", stream=True) as stream:
                next(stream.iter_lines())  # one line, then the agent gives up
            # the one slot is free again: this call does not wait for ever
            return str(chat(server.url, "gpt-4o-mini", "q2").json()["choices"][0]["message"])

        with intercepting(InterceptScope(cache=cache, limiter=limiter)), metering(Meter()) as meter:
            # from a worker thread, as a sync agent runs: the slot is held on the run's loop
            await asyncio.wait_for(asyncio.to_thread(two_calls), timeout=20)

    first, second = meter.calls
    assert first.estimated and not second.estimated and second.usage.total > 0
    assert len(cache) == 1  # only the whole answer was cached
    stats = limiter.gate_stats("model:openai:gpt-4o-mini")
    assert stats is not None and stats.in_flight == 0


async def test_requests_outside_a_run_and_non_model_requests_pass_untouched() -> None:
    async with LlmServer() as server:
        scope = InterceptScope(limiter=None)

        def during() -> requests.Response:
            with metering(Meter()) as inside:
                other = requests.post(  # not a model call: passes as it is
                    f"{server.url}/v1/embeddings",
                    json={"model": "gpt-4o-mini", "messages": [{"content": "x"}]},
                    timeout=10,
                )
                chat(server.url, "gpt-4o-mini", "during")
            assert [c.usage.total > 0 for c in inside.calls] == [True]
            return other

        def outside(prompt: str) -> list[Any]:
            with metering(Meter()) as meter:
                chat(server.url, "gpt-4o-mini", prompt)
            return list(meter.calls)

        assert await asyncio.to_thread(outside, "before") == []
        with intercepting(scope):
            other = await asyncio.to_thread(during)
        assert await asyncio.to_thread(outside, "after") == []
    assert other.status_code == 200 and len(server.requests) == 4
    assert len(scope.calls) == 1
