"""The Ray executor on a local two-CPU cluster started and stopped by the test: same algorithm,
same result as the local executor for the same seed, the same global concurrency cap, the same
response cache, and interception working inside the Ray workers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from phi_core.select import ModelSelector
from phi_core.select._ray import RayEvaluator
from tests.select.llm_server import LlmServer

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
DATASET = [(f"q{i}", "right") for i in range(12)]
PRICES = {"model-a": {"input_price": 3.0, "output_price": 15.0},
          "model-b": {"input_price": 0.5, "output_price": 1.5},
          "model-c": {"input_price": 0.1, "output_price": 0.2}}  # fmt: skip

_clients: dict[str, object] = {}
_lock = threading.Lock()


class SdkAgent:
    """Calls the fake server with the official sync openai client (one per process)."""

    def __init__(self, models: dict[str, str]) -> None:
        import openai

        url = os.environ["PHI_TEST_LLM_URL"]
        with _lock:
            if url not in _clients:
                _clients[url] = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        self.client = _clients[url]
        self.model = models["solver"]

    def run(self, question: str) -> str:
        reply = self.client.chat.completions.create(  # type: ignore[attr-defined]
            model=self.model, messages=[{"role": "user", "content": f"Answer: {question}"}]
        )
        return str(reply.choices[0].message.content)


def exact(expected: str, actual: str) -> float:
    return float(expected == actual)


def selector(executor: str, cache: Path) -> ModelSelector:
    return ModelSelector(
        SdkAgent,
        {"solver": ["model-a", "model-b", "model-c"]},
        DATASET,
        exact,
        algorithm="auto",
        max_concurrent=4,
        seed=3,
        cache=cache,
        model_prices=PRICES,
        model_handles=False,
        executor=executor,  # type: ignore[arg-type]
        journal=False,
    )


def summary(result):  # type: ignore[no-untyped-def]
    return [
        (c.name, c.evaluations, c.accuracy, c.input_tokens, c.output_tokens, round(c.cost_usd, 12))
        for c in result.combinations
    ]


async def test_a_selection_on_a_local_ray_cluster_matches_the_local_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with LlmServer(delay=0.01) as server:
        monkeypatch.setenv("PHI_TEST_LLM_URL", server.url)
        monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        paths = [str(REPO), str(REPO / "src"), os.environ.get("PYTHONPATH", "")]
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            distributed = selector("ray", tmp_path / "ray-cache.sqlite")
            on_ray = await distributed.select_best()
            evaluator = distributed.last_evaluator
            assert isinstance(evaluator, RayEvaluator) and evaluator.tasks > 0
            assert not evaluator.connected_here  # it used the cluster this test started
        finally:
            ray.shutdown()
        sent_by_ray = len(server.requests)
        assert server.server is not None and server.server.max_in_flight <= 4
        local = await selector("local", tmp_path / "local-cache.sqlite").select_best()
        assert len(server.requests) == 2 * sent_by_ray  # the same cells, run again locally
        cached = await selector("local", tmp_path / "ray-cache.sqlite").select_best()
        assert len(server.requests) == 2 * sent_by_ray  # the Ray workers filled the run's cache
        _clients.pop(server.url).close()  # type: ignore[attr-defined]

    assert on_ray.best.name == local.best.name == cached.best.name
    assert summary(on_ray) == summary(local) == summary(cached)
    assert [(r.combination, r.datapoint, r.score, r.input_tokens) for r in on_ray.datapoints] == [
        (r.combination, r.datapoint, r.score, r.input_tokens) for r in local.datapoints
    ]
    assert on_ray.cost_usd == pytest.approx(local.cost_usd) and cached.cost_usd == 0.0
    assert on_ray.metered_calls == on_ray.evaluations and not on_ray.warnings


class StubRay:
    """Records how the executor starts and stops a cluster (no processes)."""

    def __init__(self) -> None:
        self.initialised = False
        self.init_kwargs: dict[str, object] = {}
        self.shutdowns = 0

    def is_initialized(self) -> bool:
        return self.initialised

    def init(self, **kwargs: object) -> None:
        self.initialised = True
        self.init_kwargs = kwargs

    def shutdown(self) -> None:
        self.shutdowns += 1

    def remote(self, fn: object) -> object:
        return self

    def options(self, **_: object) -> object:
        return self

    def put(self, value: object) -> object:
        return value


@pytest.mark.parametrize("address", [None, "ray://head:10001"])
async def test_the_executor_starts_an_offline_local_cluster_or_joins_the_given_one(
    address: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    stub = StubRay()
    monkeypatch.setitem(sys.modules, "ray", stub)
    monkeypatch.delenv("RAY_USAGE_STATS_ENABLED", raising=False)
    evaluator = selector("ray", Path(":memory:"))._evaluator({}, None)
    assert isinstance(evaluator, RayEvaluator)
    evaluator.address = address
    await evaluator._connect()
    await evaluator.aclose()
    assert stub.init_kwargs["include_dashboard"] is False
    assert stub.init_kwargs.get("address") == address
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
    assert stub.shutdowns == 1  # it stops what it started, or disconnects from what it joined
