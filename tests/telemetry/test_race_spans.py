"""A race span parents its branches and its judge; a bandit race span parents its previews,
its answer race and the grading judge."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from phi_core.cancel import CancelToken
from phi_core.loop import AgentContext, AgentLoopConfig
from phi_core.parallel import LlmJudgeEvaluation, agent_loop_parallel
from phi_core.providers import RetryPolicy, StreamRequest
from phi_core.providers.base import ModelConfig
from phi_core.race import Arm, BanditRace, RaceSettings
from phi_core.routing import HashedFeatures, LinUCBRouter
from phi_core.telemetry import current_instrumentation
from phi_core.testing import Hang, Reply, ScriptedProvider
from phi_core.types import Pricing, Usage

from ..race.test_pipeline import judge_preferring
from .conftest import Spans

PRICING = Pricing(input=2.0, output=4.0)


def model(name: str, id: str = "m") -> ModelConfig:
    return ModelConfig(provider=name, id=id, api="scripted", pricing=PRICING)


def branch(name: str, *script: Any, config_id: str | None = None) -> AgentLoopConfig:
    return AgentLoopConfig(
        model=model(name),
        provider=ScriptedProvider(list(script), name=name),
        config_id=config_id,
        retry=RetryPolicy.none(),
    )


def reply(text: str, tokens: int) -> Reply:
    return Reply(text, usage=Usage(input=tokens, output=tokens))


class Streaming:
    """A script item that hangs mid-answer; :meth:`wait` returns once ``count`` calls do."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.event = asyncio.Event()

    def hang(self, request: StreamRequest) -> Hang:
        self.count -= 1
        if self.count == 0:
            self.event.set()
        return Hang("thinking")

    async def wait(self) -> None:
        await self.event.wait()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_race_span_parents_every_branch_and_the_judge(spans: Spans) -> None:
    judge = branch("judge", reply("2", 5))
    result = await agent_loop_parallel(
        "Which is better?",
        AgentContext(session_id="ses"),
        [branch("alpha", reply("A", 10), config_id="a"), branch("beta", reply("B", 20))],
        LlmJudgeEvaluation(judge),
    )
    assert result.selected_index == 1

    race = spans.one("invoke_workflow race")
    assert spans.roots() == [race]
    r = attrs(race)
    assert r["gen_ai.operation.name"] == "invoke_workflow"
    assert r["gen_ai.workflow.name"] == "race" and r["gen_ai.conversation.id"] == "ses"
    assert r["phi.race.size"] == 2
    assert r["phi.race.loop_ids"] == tuple(result.loop_ids)
    assert r["phi.race.config_ids"] == ("a", "beta.m")
    assert r["phi.race.selected_index"] == 1
    assert r["phi.race.selected_config_id"] == "beta.m"
    assert r["phi.race.selected_loop_id"] == result.loop_ids[1]
    assert r["phi.race.strategy"] == result.decision.strategy
    assert r["phi.race.evaluation_tokens"] == 10
    assert r["phi.cost_usd"] == pytest.approx(result.cost_usd)
    assert (r["phi.usage.input_tokens"], r["phi.usage.output_tokens"]) == (35, 35)
    assert race.status.status_code == StatusCode.UNSET

    children = spans.children(race)
    roles = {attrs(c)["phi.loop_id"]: attrs(c)["phi.role"] for c in children}
    judge_loop = result.decision.details["judge_loop_id"]
    assert roles == {
        result.loop_ids[0]: "branch",
        result.loop_ids[1]: "branch",
        judge_loop: "judge",
    }
    first = spans.one("invoke_agent a")
    assert attrs(first)["phi.race.branch_index"] == 0
    assert [c.name for c in spans.children(first)] == ["chat m"]
    judge_span = next(c for c in children if attrs(c)["phi.role"] == "judge")
    assert max(c.end_time for c in children if c is not judge_span) <= judge_span.start_time
    assert judge_span.end_time <= race.end_time

    verdicts = [e for e in race.events if e.name == "gen_ai.evaluation.result"]
    assert verdicts, "the judge's scores are evaluation events"
    labels = {e.attributes["phi.race.branch_index"]: e.attributes for e in verdicts}
    assert labels[1]["gen_ai.evaluation.score.label"] == "selected"
    assert labels[1]["phi.loop_id"] == result.loop_ids[1]


async def test_a_branch_that_never_ran_is_a_failed_branch_span_under_the_race(
    spans: Spans,
) -> None:
    def tools(index: int, config: AgentLoopConfig) -> list[Any]:
        if index == 1:
            raise RuntimeError("no tools for you")
        return []

    result = await agent_loop_parallel(
        "q",
        AgentContext(session_id="ses"),
        [branch("alpha", reply("A", 1)), branch("beta", reply("B", 1))],
        LlmJudgeEvaluation(branch("judge", reply("1", 1))),
        tool_factory=tools,
    )
    assert result.outcomes[1].status == "error"
    race = spans.one("invoke_workflow race")
    failed = next(c for c in spans.children(race) if attrs(c)["phi.loop_id"] == result.loop_ids[1])
    assert attrs(failed)["phi.role"] == "branch" and attrs(failed)["phi.race.branch_index"] == 1
    assert failed.status.status_code == StatusCode.ERROR and "no tools" in failed.status.description


async def test_a_cancelled_race_says_so_and_leaves_no_span_open(spans: Spans) -> None:
    token, both = CancelToken(), Streaming(2)
    slow = [branch("alpha", both.hang), branch("beta", both.hang)]
    race_task = asyncio.create_task(
        agent_loop_parallel(
            "q", AgentContext(session_id="ses"), slow, LlmJudgeEvaluation(branch("j")), cancel=token
        )
    )
    await both.wait()
    token.cancel()
    result = await race_task
    assert result.cancelled
    race = spans.one("invoke_workflow race")
    assert race.status.status_code == StatusCode.ERROR
    assert attrs(race)["error.type"] == "cancelled"
    assert {attrs(c)["error.type"] for c in spans.children(race)} == {"cancelled"}
    instrumentation = current_instrumentation()
    assert instrumentation is not None and instrumentation.spans.open_spans == 0


# --------------------------------------------------------------------------- bandit race


def bandit(arms: list[Arm]) -> BanditRace:
    # a rubric judge scoring answers that mention GOOD 0.9, others 0.2
    judge = AgentLoopConfig(model=model("judge", "rubric"), provider=judge_preferring("GOOD"))
    return BanditRace(
        arms,
        LinUCBRouter(16, alpha=0.5),
        judge=judge,
        features=HashedFeatures(16),
        settings=RaceSettings(top_k=2),
    )


def arm(name: str, *script: Any) -> Arm:
    provider = ScriptedProvider(
        [reply(s, 4) if isinstance(s, str) else s for s in script], name=name
    )
    return Arm(name, AgentLoopConfig(model=model(name, name), provider=provider))


async def test_a_bandit_race_span_parents_its_previews_answer_race_and_grading(
    spans: Spans,
) -> None:
    race = bandit([arm("a", "plan a", "full a"), arm("b", "plan b GOOD", "full b GOOD")])
    result = await race.run("What is the capital of France?")
    assert result.status == "ok" and result.winner == "b"

    top = spans.one("invoke_workflow bandit_race")
    assert spans.roots() == [top]
    t = attrs(top)
    assert t["gen_ai.workflow.name"] == "bandit_race"
    assert t["gen_ai.conversation.id"] == result.session_id
    assert t["phi.route.action"] == "race" and t["phi.route.contenders"] == ("a", "b")
    assert set(t["phi.route.arms"]) == {"a", "b"} and len(t["phi.route.scores"]) == 2
    assert t["phi.route.winner"] == "b" and t["phi.bandit.status"] == "ok"
    assert t["phi.bandit.quality"] == pytest.approx(result.quality)
    assert t["phi.cost_usd"] == pytest.approx(result.cost_usd) and result.cost_usd > 0

    children = spans.children(top)
    preview = spans.one("invoke_workflow race.preview")
    answer = spans.one("invoke_workflow race.answer")
    grader = next(c for c in children if attrs(c).get("phi.role") == "grader")
    assert children == [preview, answer, grader]
    assert {attrs(c)["phi.role"] for c in spans.children(preview)} == {"branch", "judge"}
    assert [attrs(c)["phi.role"] for c in spans.children(answer)] == ["branch"]
    assert attrs(answer)["phi.race.selected_config_id"] == "b.b"
    assert attrs(preview)["phi.race.label"] == "preview"

    (decision,) = [e for e in top.events if e.name == "phi.route.decision"]
    assert decision.attributes["phi.route.explanation"]
    updates = {
        e.attributes["phi.route.arm"]: e.attributes
        for e in top.events
        if e.name == "phi.route.update"
    }
    assert set(updates) == set(result.rewards)
    assert updates["b"]["phi.route.source"] == "answer"
    assert updates["b"]["phi.route.reward"] == pytest.approx(result.rewards["b"].reward)


async def test_a_bandit_race_cancelled_from_outside_ends_its_span_cancelled(spans: Spans) -> None:
    both = Streaming(2)
    race = bandit([arm("a", both.hang), arm("b", both.hang)])
    task = asyncio.create_task(race.run("q"))
    await both.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    top = spans.one("invoke_workflow bandit_race")
    assert top.status.status_code == StatusCode.ERROR
    assert attrs(top)["error.type"] == "cancelled"
    assert spans.parent_of(spans.one("invoke_workflow race.preview")) == top
    instrumentation = current_instrumentation()
    assert instrumentation is not None and instrumentation.spans.open_spans == 0


async def test_a_judge_that_cannot_fit_the_answers_warns_on_the_race_span(spans: Spans) -> None:
    long_answers = [branch(name, reply("word " * 400, 1)) for name in ("alpha", "beta")]
    await agent_loop_parallel(
        "q",
        AgentContext(session_id="ses"),
        long_answers,
        LlmJudgeEvaluation(branch("judge", reply("1", 1)), max_context_tokens=60),
    )
    race = spans.one("invoke_workflow race")
    (warning,) = [e for e in race.events if e.name == "phi.warning"]
    assert "could not be fitted within the judge budget" in warning.attributes["phi.message"]


async def test_compacting_a_long_conversation_is_an_event_on_the_run(spans: Spans) -> None:
    from phi_core.context import CompactionConfig
    from phi_core.loop import agent_loop
    from phi_core.types import AssistantMessage, TextContent, UserMessage

    history: list[Any] = []
    for n in range(30):
        history.append(UserMessage.text(f"question {n} " + "words " * 40))
        history.append(AssistantMessage(content=[TextContent(text=f"answer {n} " + "more " * 60)]))
    small = ModelConfig(provider="p", id="m", api="scripted", context_window=3_000)
    config = AgentLoopConfig(
        model=small, provider=ScriptedProvider(default="ok"), compaction=CompactionConfig()
    )
    await agent_loop("next", AgentContext(messages=history), config)
    agent = spans.one("invoke_agent p:m")
    (compaction,) = [e for e in agent.events if e.name == "phi.compaction"]
    assert compaction.attributes["phi.compaction.messages_after"] < 61
    assert (
        compaction.attributes["phi.compaction.tokens_after"]
        < compaction.attributes["phi.compaction.tokens_before"]
    )
    assert "phi.compaction.error_type" not in compaction.attributes  # it succeeded


async def test_a_failed_compaction_names_only_its_kind_on_the_run(spans: Spans) -> None:
    """The event carries the strategy's error; the span only its type (a strategy's message
    may quote the conversation, which spans keep out unless content capture is on)."""
    from phi_core.context import CompactionConfig
    from phi_core.loop import agent_loop

    class Leaky:
        def compact(self, messages: Any, config: Any) -> Any:
            raise ValueError("cannot shorten 'my card is 4111 1111 1111 1111'")

    events: list[Any] = []
    config = AgentLoopConfig(
        model=ModelConfig(provider="p", id="m", api="scripted", context_window=3_000),
        provider=ScriptedProvider(default="ok"),
        compaction=CompactionConfig(max_context_tokens=200, strategy=Leaky()),
    )
    await agent_loop("next " + "words " * 300, AgentContext(), config, events=events.append)
    (ended,) = [e for e in events if e.type == "compaction_ended"]
    assert ended.error is not None and ended.error.startswith("ValueError: cannot shorten")
    agent = spans.one("invoke_agent p:m")
    (compaction,) = [e for e in agent.events if e.name == "phi.compaction"]
    assert compaction.attributes["phi.compaction.error_type"] == "ValueError"
    assert "4111" not in str(dict(compaction.attributes))
