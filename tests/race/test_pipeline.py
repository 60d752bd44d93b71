"""The bandit race on ``agent_loop_parallel``, driven by scripted providers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from phi_core.errors import ServerError, UserError
from phi_core.events import BanditRaceEnd, ParallelLoopStart, RouteDecision, RouteUpdate
from phi_core.loop import AgentLoopConfig
from phi_core.metering import Budget
from phi_core.parallel import runnable_python, shown_candidates
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.race import (
    Arm,
    BanditRace,
    RaceSettings,
    verifier_from_spec,
)
from phi_core.race.pipeline import preview_token_limit
from phi_core.routing import (
    HashedFeatures,
    LatencyTracker,
    LinUCBRouter,
    MemoryLatencyHistory,
    MemoryPreviewCache,
    MemoryStateStore,
    PreviewCallCache,
)
from phi_core.testing import Fail, Hang, Reply, ScriptedProvider
from phi_core.types import Pricing, Usage, message_text

DIM = 32


def arm(name: str, provider, pricing: Pricing | None = None, **config: Any) -> Arm:
    model = ModelConfig(provider="test", id=name, api="scripted", pricing=pricing or Pricing())
    return Arm(name, AgentLoopConfig(model=model, provider=provider, **config))


def rubric_reply(score_of, usage: Usage | None = None) -> Any:
    """A rubric judge reply scoring each shown answer with ``score_of(text)``, listed in reverse
    so that only the answer's number — never its position in the reply — can carry the score."""

    def reply(request: StreamRequest) -> Reply:
        text = message_text(request.messages[-1])
        answers = list(shown_candidates(text, "Answer").items())
        scores = [
            {"answer": int(n), "reason": "r", "relevance": s, "coverage": s, "faithfulness": s}
            for n, body in reversed(answers)
            for s in [score_of(body)]
        ]
        return Reply(json.dumps({"scores": scores}), usage=usage)

    return reply


def judge_preferring(marker: str, usage: Usage | None = None) -> ScriptedProvider:
    """Scores an answer containing ``marker`` 0.9 and any other 0.2 (previews and answers)."""
    return ScriptedProvider(
        name="judge", default=rubric_reply(lambda body: 0.9 if marker in body else 0.2, usage)
    )


def judge_config(provider) -> AgentLoopConfig:
    return AgentLoopConfig(
        model=ModelConfig(provider="test", id="judge", api="scripted"), provider=provider
    )


def race(arms, judge=None, router=None, **kwargs) -> BanditRace:
    router = router or LinUCBRouter(DIM, alpha=0.5)
    return BanditRace(arms, router, judge=judge, features=HashedFeatures(DIM), **kwargs)


async def test_previews_run_concurrently_the_judged_best_continues_its_branch():
    barrier = asyncio.Barrier(3)

    class Gate:
        def __init__(self, name: str, preview: str, full: str) -> None:
            self.name = name
            self.inner = ScriptedProvider([preview, full], name=name)

        async def stream(self, request: StreamRequest) -> AsyncIterator:
            if "Give a short preview" in message_text(request.messages[-1]):
                await asyncio.wait_for(barrier.wait(), timeout=10)
            async for item in self.inner.stream(request):
                yield item

    gates = [Gate("a", "plan a", "full a"), Gate("b", "plan b GOOD", "full b GOOD")]
    gates.append(Gate("c", "plan c", "full c"))
    arms = [arm(g.name, g) for g in gates]
    events: list[Any] = []
    r = race(arms, judge_config(judge_preferring("GOOD")), settings=RaceSettings(top_k=3))
    result = await r.run("What is the capital of France?", events=events.append)
    assert result.status == "ok" and result.action == "race"
    assert result.previews is not None and all(o.ok for o in result.previews.outcomes)
    assert result.winner == "b" and result.text == "full b GOOD"
    assert result.scores == pytest.approx({"a": 0.2, "b": 0.9, "c": 0.2})
    # the winner's answer continues its own preview branch
    answer_request = gates[1].inner.requests[1]
    texts = [message_text(m) for m in answer_request.messages]
    assert texts[1] == "plan b GOOD" and "complete answer" in texts[2]
    assert result.quality == pytest.approx(0.9)  # the full answer was graded by the judge
    assert result.rewards["b"].reward > result.rewards["a"].reward
    # ordinary race events, labelled, plus the routing events
    starts = [e for e in events if isinstance(e, ParallelLoopStart)]
    assert [s.label for s in starts] == ["preview", "answer"]
    assert [type(e) for e in events if isinstance(e, RouteDecision | RouteUpdate)] == [
        RouteDecision,
        RouteUpdate,
    ]
    update = next(e for e in events if isinstance(e, RouteUpdate))
    assert {row["arm"]: row["source"] for row in update.rewards} == {
        "b": "answer",
        "a": "preview",
        "c": "preview",
    }


async def test_judge_scores_follow_the_shown_number_whatever_the_shuffle():
    for seed in range(5):
        arms = [
            arm(n, ScriptedProvider([f"plan {n}" + (" GOOD" if n == "c" else ""), "x"]))
            for n in "abc"
        ]
        settings = RaceSettings(shuffle_seed=seed, top_k=3)
        r = race(arms, judge_config(judge_preferring("GOOD")), settings=settings)
        result = await r.run("question?")
        assert max(result.scores, key=result.scores.__getitem__) == "c"
        assert result.order[0] == "c"


async def test_by_default_fewer_arms_are_previewed_than_exist_and_widths_come_apart():
    arms = [arm(n, ScriptedProvider(default=f"answer {n}")) for n in "abcd"]
    router = LinUCBRouter(DIM, alpha=1.0)
    r = race(arms, judge_config(judge_preferring("answer b")), router=router)
    x = r.features("Which arm is best?")
    previewed: list[list[str]] = []
    for _ in range(6):
        result = await r.run("Which arm is best?")
        previewed.append(result.contenders)
        assert len(result.contenders) == 2
    # every arm, the unexplored included, got previewed: the upper bounds chose them
    assert {a for c in previewed for a in c} == set("abcd")
    widths = {a: r.router.estimate(x, a)[1] for a in "abcd"}
    assert len({round(w, 6) for w in widths.values()}) > 1


async def test_the_sure_gate_fires_within_a_bounded_number_of_queries_on_a_stationary_world():
    quality = {"good": 0.95, "fair": 0.5, "poor": 0.1}

    def judge(request: StreamRequest) -> Reply:
        return rubric_reply(lambda body: quality[body.split()[-1]])(request)

    arms = [arm(n, ScriptedProvider(default=f"answer from {n}")) for n in quality]
    r = race(
        arms, judge_config(ScriptedProvider(default=judge)), router=LinUCBRouter(DIM, alpha=0.3)
    )
    actions = []
    for _ in range(40):
        result = await r.run("Same kind of question every time?")
        actions.append(result.action)
        if result.action == "sure":
            break
    assert actions[-1] == "sure", actions
    assert result.winner == "good" and result.previews is None
    assert len(actions) <= 40


async def test_the_sure_gate_fires_on_a_repeated_query_whose_previews_come_from_the_cache():
    """Cached previews are judged afresh every race: that score teaches the router about the
    arm, so "race only when unsure" can stop racing a query asked again and again."""
    good = ScriptedProvider(default="answer from good")
    poor = ScriptedProvider(default="answer from poor")
    cache = PreviewCallCache(MemoryPreviewCache())
    judge = judge_config(judge_preferring("good"))
    r = race(
        [arm("good", good), arm("poor", poor)],
        judge,
        router=LinUCBRouter(DIM, alpha=1.0),
        cache=cache,
        settings=RaceSettings(top_k=2),
    )
    actions = []
    for _ in range(40):
        result = await r.run("The same question, again?")
        actions.append(result.action)
        if result.action == "sure":
            break
    assert actions[-1] == "sure", actions
    assert result.winner == "good" and result.previews is None
    assert poor.calls == 1  # its one preview, served from the cache ever since


@pytest.mark.parametrize(
    "reply",
    [
        '{"scores": [{"answer": NaN, "reason": "r", "relevance": 1, "coverage": 1, '
        '"faithfulness": 1}]}',
        '{"scores": [{"answer": 1e400}]}',
        "[" * 1000 + "]" * 1000,
    ],
)
async def test_a_hostile_rubric_reply_leaves_a_bandit_race_ungraded_not_crashed(reply):
    events: list[Any] = []
    arms = [arm("a", ScriptedProvider(default="ans a")), arm("b", ScriptedProvider(default="b"))]
    r = race(arms, judge_config(ScriptedProvider(default=reply)), settings=RaceSettings(top_k=2))
    result = await r.run("q?", events=events.append)
    assert result.status == "ok" and result.text in ("ans a", "b")
    assert result.quality is None  # nothing could grade it
    assert result.grade is not None and result.grade.fallback
    ends = [e for e in events if isinstance(e, BanditRaceEnd)]
    assert len(ends) == 1 and events[-1] is ends[0] and ends[0].status == "ok"


async def test_the_router_learns_from_the_verified_full_answer_not_the_preview():
    # "a" previews brilliantly but its full answers fail the check; "b" previews badly, answers right.
    arms = [
        arm(
            "a",
            ScriptedProvider(
                default=lambda req: Reply(
                    "GOOD plan"
                    if "Give a short preview" in message_text(req.messages[-1])
                    else "no code here"
                )
            ),
        ),
        arm(
            "b",
            ScriptedProvider(
                default=lambda req: Reply(
                    "meh plan"
                    if "Give a short preview" in message_text(req.messages[-1])
                    else "```python\ndef f(x):\n    return x\n```"
                )
            ),
        ),
    ]
    verify = verifier_from_spec("regex:def f")
    r = race(
        arms, judge_config(judge_preferring("GOOD")), settings=RaceSettings(top_k=2), verify=verify
    )
    result = await r.run("Write f.")
    assert result.attempts == [("a", "unverified"), ("b", "ok")]
    assert result.winner == "b" and result.verified is True and result.quality == 1.0
    assert result.rewards["b"].quality == 1.0
    assert result.rewards["a"].quality == 0.0 and result.rewards["a"].penalty > 0


async def test_speculative_long_queries_take_the_first_acceptable_answer_and_cancel_the_rest(
    strict_loop,
):
    slow = ScriptedProvider(default=Hang("partial text " * 10))
    fast = ScriptedProvider(default=Reply("fast answer", delay=0.05))
    arms = [arm("slow", slow), arm("fast", fast)]
    r = race(arms, settings=RaceSettings(speculative_min_chars=10, top_k=2))
    result = await r.run("a long question " * 5)
    assert result.status == "ok" and result.winner == "fast"
    statuses = dict(result.attempts)
    assert statuses == {"slow": "cancelled", "fast": "ok"}
    cancelled = next(o for o in result.answers if o.status == "cancelled")
    assert cancelled.usage.output > 0  # what streamed before the cancel is counted
    assert "slow" not in result.rewards  # a cancelled arm did not fail


async def test_a_failed_candidate_does_not_end_the_race_and_is_penalised():
    bad = ScriptedProvider(default=Fail(ServerError("boom")))
    good = ScriptedProvider(default="fine")
    r = race([arm("bad", bad), arm("good", good)], settings=RaceSettings(policy="baseline"))
    result = await r.run("q?")
    assert result.winner == "good" and result.attempts == [("bad", "error"), ("good", "ok")]
    assert result.rewards["bad"].penalty > 0


async def test_a_timed_out_preview_is_a_failed_outcome_not_a_failed_race(strict_loop):
    arms = [
        arm("stuck", ScriptedProvider(default=Hang("..."))),
        arm("ok", ScriptedProvider(default="answer")),
    ]
    r = race(
        arms,
        judge_config(judge_preferring("answer")),
        settings=RaceSettings(top_k=2, preview_timeout_s=0.3, answer_timeout_s=0.3),
    )
    result = await r.run("q?")
    assert result.status == "ok" and result.winner == "ok"
    assert result.previews is not None
    stuck = next(o for o in result.previews.outcomes if o.config.extra["arm"] == "stuck")
    assert stuck.status == "timeout" and stuck.usage.output > 0


async def test_a_token_budget_caps_every_call_so_the_race_ends_within_it():
    arms = [arm(n, ScriptedProvider(default="word " * 200)) for n in "ab"]
    r = race(
        arms,
        judge_config(judge_preferring("word")),
        budget=Budget(max_tokens=60),
        settings=RaceSettings(top_k=2),
    )
    result = await r.run("q?")
    assert result.usage.total <= 60


async def test_a_dollar_budget_refuses_a_call_whose_worst_case_does_not_fit_before_sending_it():
    dear = ScriptedProvider(default="expensive")
    price = Pricing(input=1_000_000.0, output=1_000_000.0)  # $1 a token: one call costs dollars
    r = race(
        [arm("dear", dear, pricing=price, max_tokens=6)],
        budget=Budget(max_cost_usd=0.5),
    )
    result = await r.run("q?")
    assert dear.calls == 0  # refused before it was sent
    assert result.status == "over_budget" and result.cost_usd == 0.0
    assert "dollar budget" in (result.error or "")


async def test_the_wall_clock_budget_returns_the_partial_result(strict_loop):
    arms = [arm(n, ScriptedProvider(default=Hang("thinking"))) for n in "ab"]
    r = race(arms, budget=Budget(max_wall_s=0.3))
    result = await r.run("q?")
    assert result.status == "timeout" and result.winner is None
    assert result.answers and result.answers[0].status == "timeout"
    assert result.rewards == {}  # the race's clock ran out: no arm is blamed


async def test_previews_are_skipped_when_the_top_arm_is_clearly_ahead():
    arms = [arm(n, ScriptedProvider(default=f"ans {n}")) for n in "ab"]
    router = LinUCBRouter(DIM, alpha=0.1)
    r = race(arms, judge_config(judge_preferring("ans a")), router=router)
    x = r.features("q?")
    for _ in range(40):
        router.update(x, "a", 0.95)
        router.update(x, "b", 0.05)
    result = await r.run("q?")
    assert result.action == "sure" and result.previews_skipped and result.winner == "a"


async def test_baseline_keeps_the_given_order_whatever_the_router_learned():
    arms = [arm(n, ScriptedProvider(default=f"ans {n}")) for n in "abc"]
    router = LinUCBRouter(DIM, alpha=0.1)
    r = race(arms, router=router, settings=RaceSettings(policy="baseline"))
    x = r.features("q?")
    for _ in range(30):
        router.update(x, "c", 1.0)
        router.update(x, "a", 0.0)
    result = await r.run("q?")
    assert result.order == ["a", "b", "c"] and result.winner == "a"
    assert result.action == "single"  # no judge: the given order decides


async def test_updates_and_latency_history_persist_and_a_new_race_loads_them():
    store, history = MemoryStateStore(), MemoryLatencyHistory()

    def build() -> BanditRace:
        arms = [arm(n, ScriptedProvider(default=f"ans {n}")) for n in "ab"]
        return race(
            arms,
            judge_config(judge_preferring("ans a")),
            store=store,
            tracker=LatencyTracker(history=history, namespace="ns"),
        )

    first = build()
    await first.run("q?")
    assert {a for a in store.load(first.namespace)} <= {"a", "b"} and store.load(first.namespace)
    second = build()
    await second.load()
    for name, stats in store.load(first.namespace).items():
        assert np.allclose(second.router.stats(name).xr, stats.xr)
    assert second.tracker.snapshot()  # the answer latencies came back


async def test_two_arms_of_one_model_differing_only_in_system_prompt_never_share_a_cached_preview():
    provider = ScriptedProvider(default=lambda req: Reply(f"preview as {req.system_prompt}"))
    model = ModelConfig(provider="test", id="same", api="scripted")
    arms = [
        Arm("terse", AgentLoopConfig(model=model, provider=provider, system_prompt="terse")),
        Arm("verbose", AgentLoopConfig(model=model, provider=provider, system_prompt="verbose")),
    ]
    cache = PreviewCallCache(MemoryPreviewCache())
    judge = judge_preferring("verbose")
    for _ in range(2):
        r = race(arms, judge_config(judge), cache=cache, settings=RaceSettings(top_k=2))
        result = await r.run("Same question")
        assert result.previews is not None
        texts = {o.config.extra["arm"]: o.text for o in result.previews.outcomes}
        assert texts == {"terse": "preview as terse", "verbose": "preview as verbose"}


async def test_cached_previews_are_reused_without_calling_the_model_and_their_fresh_score_counts():
    a = ScriptedProvider(default="ans a")
    b = ScriptedProvider(default="ans b")
    cache = PreviewCallCache(MemoryPreviewCache())
    arms = [arm("a", a), arm("b", b)]
    settings = RaceSettings(top_k=2, race_only_when_unsure=False)
    first = await race(
        arms, judge_config(judge_preferring("ans a")), cache=cache, settings=settings
    ).run("q?")
    calls = (a.calls, b.calls)
    events: list[Any] = []
    second = await race(
        arms, judge_config(judge_preferring("ans a")), cache=cache, settings=settings
    ).run("q?", events=events.append)
    assert first.previews is not None and second.previews is not None
    assert a.calls - calls[0] == 1 and b.calls == calls[1]  # only the winner's full answer
    assert second.previews.outcomes[0].result.cached_calls == 1
    # the cached preview was judged afresh: its score is evidence about b; a learns once, from
    # its full answer (not also from its preview)
    (update,) = [e for e in events if isinstance(e, RouteUpdate)]
    assert sorted((row["arm"], row["source"]) for row in update.rewards) == [
        ("a", "answer"),
        ("b", "preview"),
    ]


def test_preview_limit_scales_from_75_to_150_percent_with_query_length():
    settings = RaceSettings(preview_tokens=100, length_threshold=1000)
    assert preview_token_limit("x", settings) == 75
    assert preview_token_limit("x" * 1000, settings) == 150


def test_bad_configuration_fails_at_construction():
    with pytest.raises(UserError, match="at least one arm"):
        race([])
    a = arm("a", ScriptedProvider(default="x"))
    with pytest.raises(UserError, match="distinct"):
        race([a, a])
    with pytest.raises(UserError, match="top_k"):
        RaceSettings(top_k=0)
    with pytest.raises(UserError, match="preview_weight"):
        RaceSettings(preview_weight=2)
    with pytest.raises(UserError, match="max_cost_usd"):
        Budget(max_cost_usd=0)


async def test_an_empty_query_is_refused_before_anything_runs():
    provider = ScriptedProvider(default="x")
    with pytest.raises(UserError, match="empty"):
        await race([arm("a", provider)]).run("   ")
    assert provider.calls == 0


async def test_when_no_answer_passes_the_first_unverified_one_is_returned_and_flagged():
    arms = [arm(n, ScriptedProvider(default=f"prose {n}")) for n in "ab"]
    r = race(arms, verify=runnable_python)
    result = await r.run("Write code.")
    assert result.status == "ok" and result.verified is False
    assert result.attempts == [("a", "unverified"), ("b", "unverified")] or result.attempts == [
        ("b", "unverified"),
        ("a", "unverified"),
    ]
    assert result.text == f"prose {result.winner}" and result.quality == 0.0


async def test_a_verify_that_raises_rejects_the_answer_not_the_race(caplog):
    def broken(text: str) -> bool:
        raise RuntimeError("checker bug")

    r = race([arm("a", ScriptedProvider(default="x"))], verify=broken)
    result = await r.run("q?")
    assert result.verified is False and "checker bug" in caplog.text


def test_verifier_specs_are_checked_with_a_clear_error():
    assert verifier_from_spec("regex:^[A-D]$")(" B ") is True
    with pytest.raises(UserError, match="Unknown verify check"):
        verifier_from_spec("json")
    with pytest.raises(UserError, match="does not compile"):
        verifier_from_spec("regex:(")


async def test_usage_of_every_call_is_counted_once_including_the_judge():
    a = ScriptedProvider(default=Reply("ans a", usage=Usage(input=10, output=5)))
    b = ScriptedProvider(default=Reply("ans b", usage=Usage(input=10, output=5)))
    judge = judge_preferring("ans a", usage=Usage(input=7, output=3))
    r = race([arm("a", a), arm("b", b)], judge_config(judge), settings=RaceSettings(top_k=2))
    result = await r.run("q?")
    assert judge.calls == 2  # the preview ranking and the answer's grade
    assert a.calls + b.calls == 3  # two previews and one full answer
    assert result.usage.total == 15 * 3 + 10 * 2


async def test_a_conversation_reaches_every_call_and_a_preview_calling_a_tool_is_not_continued():
    from phi_core.loop import AgentContext
    from phi_core.testing import call
    from phi_core.types import AssistantMessage, TextContent, ToolDefinition, UserMessage

    history = [
        UserMessage.text("My name is Ada."),
        AssistantMessage(content=[TextContent(text="Hello Ada.")]),
        UserMessage.text("Weather where I live? I live in Paris."),
    ]
    weather = ToolDefinition(name="get_weather", description="", parameters={"type": "object"})
    caller = ScriptedProvider(  # its preview calls the caller's tool, so does its answer
        name="a", default=Reply(tool_calls=[call("get_weather", {"city": "Paris"})])
    )
    talker = ScriptedProvider(["plan b", "full b"], name="b")
    arms = [arm("a", caller, caller_tools=[weather]), arm("b", talker, caller_tools=[weather])]
    r = race(arms, judge_config(judge_preferring("get_weather")), settings=RaceSettings(top_k=2))
    conversation = AgentContext(messages=list(history))
    result = await r.run("Weather where I live? I live in Paris.", context=conversation)
    assert result.action == "race" and result.winner == "a"
    assert result.text == 'call get_weather({"city": "Paris"})'
    assert result.answer is not None and result.answer.pending_tool_calls[0].name == "get_weather"
    # the router learns from the tool-call turn: the judge graded the call, read as text
    assert result.quality == pytest.approx(0.9) and result.rewards["a"].reward > 0
    for request in [*caller.requests, *talker.requests]:
        assert [message_text(m) for m in request.messages[:3]] == [message_text(m) for m in history]
    preview, answer = caller.requests
    assert "Give a short preview" in message_text(preview.messages[-1])
    # the preview ended on a tool call nobody answered: the arm answers from the conversation
    assert len(answer.messages) == 3 and answer.tools[0].name == "get_weather"
    assert conversation.messages == history and conversation.session_id is None  # not mutated


async def test_a_preview_weight_of_zero_learns_from_the_answer_only():
    arms = [arm(name, ScriptedProvider(default=f"{name} says hi")) for name in ("a", "b", "c")]
    router = LinUCBRouter(DIM, alpha=0.5)
    r = race(
        arms,
        judge_config(judge_preferring("b says")),
        router=router,
        settings=RaceSettings(top_k=3, preview_weight=0),
    )
    result = await r.run("Say hi.")
    assert result.winner == "b"
    assert set(result.rewards) == {"b"}  # no update from the previews of a and c
    assert router.stats("b").n == 1.0


async def test_every_agent_run_of_a_bandit_race_has_its_own_loop_id_and_one_end():
    """The answer continues its preview's conversation under a loop id of its own (the two
    used to share ``<session>.a.1``: two starts and two ends for one id)."""
    from collections import Counter

    from phi_core.runlog import RunRecorder

    arms = [arm(name, ScriptedProvider(default=f"{name} says hi")) for name in ("a", "b", "c")]
    seen: list[Any] = []
    recorder = RunRecorder(None, prompt="Say hi.")

    def sink(event: Any) -> None:
        seen.append(event)
        recorder(event)

    r = race(arms, judge_config(judge_preferring("a says")), settings=RaceSettings(top_k=3))
    result = await r.run("Say hi.", events=sink)
    starts = Counter(e.loop_id for e in seen if e.type == "agent_start")
    ends = Counter(e.loop_id for e in seen if e.type == "agent_end")
    assert starts == ends and set(starts.values()) == {1}
    assert len(starts) == 3 + 1 + 1 + 1  # three previews, the judge, the answer, its grading
    phases = Counter(b.phase for b in recorder.build(result).branches)
    assert phases["preview"] == 3 and phases["answer"] == 1
