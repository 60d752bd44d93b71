"""The bandit racing pipeline, driven by scripted providers."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

import numpy as np
import pytest

from phi_core.errors import ServerError, UserError
from phi_core.loop import AgentLoopConfig
from phi_core.parallel import runnable_python
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.race import (
    Arm,
    BanditRace,
    RaceBudget,
    RaceSettings,
    parse_judge_scores,
    preview_token_limit,
    verifier_from_spec,
)
from phi_core.routing import HashedFeatures, LinUCBRouter, MemoryPreviewCache, MemoryStateStore
from phi_core.testing import Fail, Hang, Reply, ScriptedProvider
from phi_core.types import Pricing, message_text

DIM = 32


def arm(name: str, provider, pricing: Pricing | None = None) -> Arm:
    model = ModelConfig(provider="test", id=name, api="scripted", pricing=pricing or Pricing())
    return Arm(name, AgentLoopConfig(model=model, provider=provider))


def judge_preferring(marker: str) -> ScriptedProvider:
    """A judge that scores the preview containing ``marker`` 0.9 and the others 0.2, by number."""

    def reply(request: StreamRequest) -> Reply:
        text = message_text(request.messages[-1])
        previews = re.findall(r"Preview (\d+):\n(.*?)\n(?=Preview \d+:|Score each)", text, re.S)
        scores = [
            {"preview": int(n), "reason": "r", "relevance": s, "coverage": s, "faithfulness": s}
            for n, body in reversed(previews)  # listed in reverse: position must not matter
            for s in [0.9 if marker in body else 0.2]
        ]
        return Reply(json.dumps({"scores": scores}))

    return ScriptedProvider(name="judge", default=reply)


def judge_config(provider) -> AgentLoopConfig:
    return AgentLoopConfig(
        model=ModelConfig(provider="test", id="judge", api="scripted"), provider=provider
    )


def race(arms, judge=None, router=None, **kwargs) -> BanditRace:
    router = router or LinUCBRouter(DIM, alpha=0.5)
    return BanditRace(arms, router, judge=judge, features=HashedFeatures(DIM), **kwargs)


async def test_previews_run_concurrently_and_the_judged_best_answers():
    barrier = asyncio.Barrier(3)

    class Gate:
        def __init__(self, name: str, preview: str, full: str) -> None:
            self.name = name
            self.inner = ScriptedProvider([preview, full], name=name)

        async def stream(self, request: StreamRequest) -> AsyncIterator:
            if request.max_tokens is not None and request.max_tokens < 500:  # previews only
                await asyncio.wait_for(barrier.wait(), timeout=10)
            async for item in self.inner.stream(request):
                yield item

    arms = [
        arm("a", Gate("a", "plan a", "full a")),
        arm("b", Gate("b", "plan b GOOD", "full b")),
        arm("c", Gate("c", "plan c", "full c")),
    ]
    r = race(arms, judge_config(judge_preferring("GOOD")))
    result = await r.run("What is the capital of France?")
    assert result.status == "ok"
    assert all(p.ok for p in result.previews.values())  # all three passed the barrier together
    assert result.winner == "b" and result.text == "full b"
    assert result.scores["b"] == pytest.approx(0.9)
    assert result.scores["a"] == pytest.approx(0.2) and result.scores["c"] == pytest.approx(0.2)
    assert result.rewards["b"].reward > result.rewards["a"].reward
    assert set(result.rewards) == {"a", "b", "c"}


async def test_judge_scores_follow_the_shown_number_whatever_the_shuffle():
    for seed in range(5):
        arms = [
            arm(n, ScriptedProvider([f"plan {n}" + (" GOOD" if n == "c" else ""), "x"]))
            for n in "abc"
        ]
        r = race(
            arms, judge_config(judge_preferring("GOOD")), settings=RaceSettings(shuffle_seed=seed)
        )
        result = await r.run("question?")
        assert max(result.scores, key=result.scores.__getitem__) == "c"
        assert result.order[0] == "c"


def test_parse_judge_scores_uses_numbers_and_drops_bad_entries():
    reply = json.dumps(
        {
            "scores": [
                {"preview": 2, "reason": "", "relevance": 1, "coverage": 1, "faithfulness": 0.7},
                {"preview": 1, "reason": "", "relevance": 0, "coverage": 0, "faithfulness": 0},
                {"preview": 2, "reason": "", "relevance": 0, "coverage": 0, "faithfulness": 0},
                {"preview": 9, "reason": "", "relevance": 1, "coverage": 1, "faithfulness": 1},
                {"preview": 3, "reason": "", "relevance": "high", "coverage": 1, "faithfulness": 1},
            ]
        }
    )
    assert parse_judge_scores(reply, 3) == {2: pytest.approx(0.9), 1: 0.0}


async def test_speculative_top_two_takes_the_first_successful_answer_and_cancels_the_other(
    strict_loop,
):
    slow = ScriptedProvider(["plan slow GOOD", Hang("partial")], name="slow")
    fast = ScriptedProvider(["plan fast", "fast full answer"], name="fast")
    r = race(
        [arm("slow", slow), arm("fast", fast)],
        judge_config(judge_preferring("GOOD")),
        settings=RaceSettings(speculative_min_chars=10),
    )
    result = await r.run("a long enough query to speculate on")
    assert result.status == "ok"
    assert result.winner == "fast"
    assert ("slow", "cancelled") in result.attempts
    assert slow.calls == 2 and fast.calls == 2
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_a_failed_speculative_candidate_does_not_end_the_race_and_is_not_retried(
    strict_loop,
):
    broken = ScriptedProvider(["plan GOOD", Fail(ServerError("boom"))], name="broken")
    ok = ScriptedProvider(["plan", Reply("late answer", delay=0.05)], name="ok")
    r = race(
        [arm("broken", broken), arm("ok", ok)],
        judge_config(judge_preferring("GOOD")),
        settings=RaceSettings(speculative_min_chars=10),
    )
    r.arms["broken"].config.retry = r.arms["broken"].config.retry.none()
    result = await r.run("a long enough query to speculate on")
    assert result.winner == "ok" and result.text == "late answer"
    assert broken.calls == 2  # one preview, one full attempt: never retried by the fallback
    assert result.rewards["broken"].penalty > 0


async def test_sequential_fallback_moves_on_and_penalises_the_failed_arm():
    first = ScriptedProvider(["plan GOOD", Fail(ServerError("down"))], name="first")
    second = ScriptedProvider(["plan", "second answer"], name="second")
    r = race([arm("first", first), arm("second", second)], judge_config(judge_preferring("GOOD")))
    r.arms["first"].config.retry = r.arms["first"].config.retry.none()
    result = await r.run("short query")
    assert result.winner == "second"
    assert result.attempts[0][0] == "first" and result.attempts[0][1] != "ok"
    assert result.rewards["first"].penalty == pytest.approx(0.05)


async def test_a_timed_out_preview_is_a_failed_outcome_not_a_failed_race(strict_loop):
    r = race(
        [
            arm("a", ScriptedProvider([Hang()], name="a")),
            arm("b", ScriptedProvider(["plan b", "answer b"], name="b")),
            arm("c", ScriptedProvider(["plan c GOOD", "answer c"], name="c")),
        ],
        judge_config(judge_preferring("GOOD")),
        budget=RaceBudget(call_timeout_s=0.3),
    )
    result = await r.run("question")
    assert result.status == "ok" and result.winner == "c"
    assert not result.previews["a"].ok and "timed out" in (result.previews["a"].error or "")
    assert result.rewards["a"].quality == 0.0


async def test_token_budget_stops_cleanly_with_the_partial_result():
    arms = [arm(n, ScriptedProvider([f"plan {n} " * 40, "answer"], name=n)) for n in "ab"]
    judge = ScriptedProvider(name="judge", default=Reply("{}"))
    r = race(arms, judge_config(judge), budget=RaceBudget(max_total_tokens=60))
    result = await r.run("question")
    assert result.status == "budget_exceeded"
    assert "token budget" in (result.error or "")
    assert set(result.previews) == {"a", "b"}  # the previews that ran are kept
    assert result.winner is None
    assert all(p.usage.total > 0 for p in result.previews.values())


async def test_dollar_budget_stops_before_the_full_answer():
    price = Pricing(input=100_000.0, output=100_000.0)  # absurd prices: previews exhaust $1
    arms = [arm(n, ScriptedProvider([f"plan {n}", "answer"], name=n), price) for n in "ab"]
    r = race(arms, judge_config(judge_preferring("a")), budget=RaceBudget(max_cost_usd=1.0))
    result = await r.run("question")
    assert result.status == "budget_exceeded" and "dollar budget" in (result.error or "")
    assert result.cost_usd > 1.0 and result.winner is None


async def test_total_timeout_returns_the_partial_result(strict_loop):
    arms = [arm("a", ScriptedProvider([Hang("partial")], name="a"))]
    r = race(arms, budget=RaceBudget(total_timeout_s=0.3))
    result = await r.run("question")
    assert result.status == "timeout" and result.winner is None


async def test_previews_are_skipped_when_the_top_arm_is_clearly_ahead():
    router = LinUCBRouter(DIM, alpha=0.1)
    x = HashedFeatures(DIM)("question")
    for _ in range(200):
        router.update(x, "a", 1.0)
        router.update(x, "b", 0.0)
    judge = ScriptedProvider(name="judge", default=Reply("{}"))
    a = ScriptedProvider(["direct answer"], name="a")
    r = race(
        [arm("a", a), arm("b", ScriptedProvider([], name="b"))], judge_config(judge), router=router
    )
    result = await r.run("question")
    assert result.previews_skipped and result.winner == "a"
    assert judge.calls == 0 and a.requests[0].max_tokens is None


async def test_updates_are_persisted_and_a_new_race_loads_them():
    store = MemoryStateStore()
    arms = [
        arm(n, ScriptedProvider([f"plan {n}" + (" GOOD" if n == "b" else ""), "x"])) for n in "ab"
    ]
    r = race(arms, judge_config(judge_preferring("GOOD")), store=store)
    await r.run("question")
    fresh = race(arms, judge_config(judge_preferring("GOOD")), store=store)
    await fresh.load()
    assert np.allclose(fresh.router.a_inverse("b"), r.router.a_inverse("b"))
    assert store.load(r.namespace)["b"].n == 1


async def test_cached_previews_are_reused_without_calling_the_model():
    cache = MemoryPreviewCache()
    pa = ScriptedProvider(["plan a GOOD", "answer a", "answer a again"], name="a")
    pb = ScriptedProvider(["plan b", "answer b"], name="b")
    arms = [arm("a", pa), arm("b", pb)]
    settings = RaceSettings(race_only_when_unsure=False)
    await race(arms, judge_config(judge_preferring("GOOD")), cache=cache, settings=settings).run(
        "q?"
    )
    second = await race(
        arms, judge_config(judge_preferring("GOOD")), cache=cache, settings=settings
    ).run("q?")
    assert all(p.cached for p in second.previews.values())
    assert second.text == "answer a again" and pb.calls == 1 and pa.calls == 3
    assert second.rewards == {}  # a cached preview carries no new evidence: no second update


def test_preview_limit_scales_from_75_to_150_percent_with_query_length():
    s = RaceSettings(preview_tokens=120, length_threshold=2000)
    assert preview_token_limit("x", s) == 90
    assert preview_token_limit("x" * 5000, s) == 180


def test_bad_configuration_fails_at_construction():
    with pytest.raises(UserError, match="max_cost_usd"):
        RaceBudget(max_cost_usd=0)
    with pytest.raises(UserError, match="distinct"):
        race([arm("a", ScriptedProvider()), arm("a", ScriptedProvider())])
    with pytest.raises(UserError, match="dimensions"):
        BanditRace([arm("a", ScriptedProvider())], LinUCBRouter(8), features=HashedFeatures(16))


# ---------------------------------------------------------------- verification before acceptance

PY_ANSWER = "```python\ndef double(x):\n    return 2 * x\n\ndouble(4)\n```"
JS_ANSWER = "```javascript\nconst double = (x) => 2 * x;\n```"


async def test_an_answer_that_fails_verify_falls_back_to_the_next_and_is_penalised():
    first = ScriptedProvider(["plan GOOD", JS_ANSWER], name="first")
    second = ScriptedProvider(["plan", PY_ANSWER], name="second")
    r = race(
        [arm("first", first), arm("second", second)],
        judge_config(judge_preferring("GOOD")),
        verify=runnable_python,
    )
    result = await r.run("write double(x)")
    assert result.status == "ok" and result.winner == "second" and result.verified is True
    assert result.attempts == [("first", "unverified"), ("second", "ok")]
    assert result.text == PY_ANSWER
    assert result.rewards["first"].penalty == pytest.approx(0.05)
    assert result.rewards["second"].penalty == 0


async def test_when_no_answer_passes_the_first_unverified_one_is_returned_and_flagged():
    first = ScriptedProvider(["plan GOOD", "answer one"], name="first")
    second = ScriptedProvider(["plan", "answer two"], name="second")
    checked: list[str] = []

    async def never(text: str) -> bool:
        checked.append(text)
        return False

    r = race([arm("first", first), arm("second", second)], judge_config(judge_preferring("GOOD")))
    r.verify = never
    result = await r.run("q")
    assert checked == ["answer one", "answer two"]
    assert result.status == "ok" and result.verified is False
    assert result.winner == "first" and result.text == "answer one"
    assert [s for _, s in result.attempts] == ["unverified", "unverified"]


async def test_a_verify_that_raises_rejects_the_answer_not_the_race(caplog):
    only = ScriptedProvider(["the answer"], name="only")  # no judge: no previews

    def broken(text: str) -> bool:
        raise ValueError("bad check")

    r = race([arm("only", only)], None, verify=broken)
    result = await r.run("q")
    assert result.status == "ok" and result.verified is False and result.text == "the answer"
    assert "verify raised ValueError" in caplog.text


async def test_speculative_race_accepts_only_a_verified_answer(strict_loop):
    fast = ScriptedProvider(["plan GOOD", "fast but no letter"], name="fast")
    slow = ScriptedProvider(["plan", Reply("B", delay=0.05)], name="slow")
    r = race(
        [arm("fast", fast), arm("slow", slow)],
        judge_config(judge_preferring("GOOD")),
        settings=RaceSettings(speculative_min_chars=10),
        verify=verifier_from_spec("regex:^[A-D]$"),
    )
    result = await r.run("a long enough query to speculate on")
    assert result.winner == "slow" and result.text == "B" and result.verified is True
    assert ("fast", "unverified") in result.attempts


def test_verifier_specs_are_checked_with_a_clear_error():
    letter = verifier_from_spec("regex:^[A-D]$")
    assert letter(" C\n") is True and letter("C is right") is False
    assert verifier_from_spec("python") is runnable_python
    with pytest.raises(UserError, match="Use 'python'"):
        verifier_from_spec("json")
    with pytest.raises(UserError, match="does not compile"):
        verifier_from_spec("regex:([")
