"""``race:`` and ``route:`` with the client's tools, and routes over the whole conversation: the
official ``openai`` client against a live gateway over a fake OpenAI-compatible upstream.

The upstream's models behave by name: ``alpha`` and ``beta`` call ``get_weather`` for Paris when
sent tools (the same call, with the arguments' keys in a different order and spacing), ``delta``
calls it without a unit, ``gamma`` answers in text; a request whose last message is a tool result is answered in text from it; the
``judge`` model names the response that calls a tool unless the query asks for text.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from phi_core.gateway import GatewayConfig
from phi_core.parallel import shown_candidates

from ..providers.fakes import FakeServer, Recorded, Respond, Stream
from ..providers.fakes.openai_wire import text_reply
from .helpers import gateway_client, live_gateway, reply_rule, tool_call_reply

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        },
    },
}
ARGUMENTS = {
    "alpha": '{"city": "Paris", "unit": "C"}',
    "beta": '{"unit":"C","city":"Paris"}',
    "delta": '{"city":"Paris"}',
}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def tool_rule(record: Recorded) -> Respond | Stream:
    body = record.json
    model, messages = body["model"], body["messages"]
    last = messages[-1]
    if model == "judge" and '"scores"' not in json.dumps(messages):
        prompt = _text(last["content"])
        responses = shown_candidates(prompt)
        want_text = "prefer text" in prompt
        pick = [n for n, r in responses.items() if r.startswith("call ") != want_text]
        return Stream(text_reply(str(pick[0]) if pick else "none", prompt=20, completion=1))
    if model == "judge":
        return reply_rule(record)  # the route's rubric judge scores every answer
    if last["role"] == "tool":
        return Stream(text_reply(f"{model}: Paris is {_text(last['content'])}", completion=4))
    history = " ".join(_text(m.get("content")) for m in messages[:-1])
    named = re.search(r"My name is (\w+)", history)
    if named:
        return Stream(text_reply(f"{model}: your name is {named.group(1)}"))
    if body.get("tools") and model in ARGUMENTS:
        return Stream(tool_call_reply("get_weather", ARGUMENTS[model]))
    return Stream(
        text_reply(f"{model} says: {_text(last.get('content'))}", prompt=10, completion=5)
    )


def config(url: str) -> GatewayConfig:
    def model(name: str) -> str:
        return f"openai-compat:{name}@{url}/v1"

    trio = [{"name": n, "model": model(n)} for n in ("alpha", "beta", "gamma")]
    return GatewayConfig.model_validate(
        {
            "gateway": {"retries": 0},
            "profiles": {
                "vote": {"strategy": "vote", "branches": trio},
                "consensus": {"strategy": "consensus", "branches": trio},
                "judged": {"strategy": "judge", "judge": model("judge"), "branches": trio[1:]},
                "callers": {
                    "strategy": "judge",
                    "judge": model("judge"),
                    "branches": [
                        {"name": n, "model": model(n)} for n in ("alpha", "beta", "delta")
                    ],
                },
                "exec": {"strategy": "exec-vote", "branches": trio},
            },
        }
    )


def answers(upstream: FakeServer) -> list[dict[str, Any]]:
    """The bodies of the requests the branches (not the judge) sent."""
    bodies = [r.json for r in upstream.requests if r.path.endswith("/chat/completions")]
    return [b for b in bodies if b["model"] != "judge"]


def follow_up(first: Any) -> list[dict[str, Any]]:
    """The conversation after ``first``'s tool call, with the client's tool result."""
    message = first.choices[0].message
    return [
        {"role": "user", "content": "Weather in Paris?"},
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "sunny"},
    ]


@pytest.fixture
async def upstream() -> Any:
    async with FakeServer(default=tool_rule) as server:
        yield server


@pytest.mark.parametrize("profile", ["vote", "consensus"])
async def test_a_race_answers_with_the_tool_call_two_of_three_branches_make(
    strict_loop: Any, upstream: FakeServer, profile: str
) -> None:
    user = [{"role": "user", "content": "Weather in Paris?"}]
    async with gateway_client(config(upstream.url)) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model=f"race:{profile}",
            messages=user,
            tools=[WEATHER],
            tool_choice="auto",
            parallel_tool_calls=False,
        )
        first = raw.parse()
        sent = answers(upstream)
        stream = await client.chat.completions.create(
            model=f"race:{profile}", messages=user, tools=[WEATHER], stream=True
        )
        chunks = [c async for c in stream]
        upstream.requests.clear()
        done = await client.chat.completions.create(
            model=f"race:{profile}", messages=follow_up(first), tools=[WEATHER]
        )
        again = answers(upstream)
    choice = first.choices[0]
    call = choice.message.tool_calls[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert call.type == "function" and call.id == "call_1" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "C"}
    assert raw.headers["x-phi-winner"] in ("alpha", "beta")
    assert raw.headers["x-phi-strategy"] == profile and raw.headers["x-phi-branches"] == "3"
    # usage: two tool-call turns (12 + 7 each) and gamma's text (10 + 5); no judge call
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (34, 19)
    assert len(sent) == 3
    for body in sent:  # every branch got the client's tools and tool settings
        assert body["tools"][0]["function"]["name"] == "get_weather"
        assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is False
    deltas = [c.choices[0] for c in chunks if c.choices]
    pieces = [t for d in deltas for t in d.delta.tool_calls or []]
    assert [(p.index, p.id, p.function.name) for p in pieces] == [(0, "call_1", "get_weather")]
    assert json.loads(pieces[0].function.arguments) == {"city": "Paris", "unit": "C"}
    assert deltas[-1].finish_reason == "tool_calls"
    # the follow-up races the next turn over the whole conversation: a text answer
    assert done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.content.endswith("Paris is sunny")
    assert len(again) == 3
    for body in again:
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["user", "assistant", "tool"]
        assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_the_judge_decides_between_a_text_answer_and_a_tool_call(
    strict_loop: Any, upstream: FakeServer
) -> None:
    async with gateway_client(config(upstream.url)) as client:
        called = await client.chat.completions.with_raw_response.create(
            model="race:judged",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER],
        )
        judge_prompts = [
            _text(r.json["messages"][-1]["content"])
            for r in upstream.requests
            if r.json.get("model") == "judge"
        ]
        texted = await client.chat.completions.with_raw_response.create(
            model="race:judged",
            messages=[{"role": "user", "content": "Weather in Paris? I prefer text."}],
            tools=[WEATHER],
        )
    # beta calls the tool, gamma answers in text: the judge read both and chose
    assert called.headers["x-phi-winner"] == "beta"
    reply = called.parse().choices[0]
    assert reply.finish_reason == "tool_calls"
    assert reply.message.tool_calls[0].function.name == "get_weather"
    # the judge saw the call as text, its arguments canonical JSON (sorted keys)
    assert judge_prompts and all(
        'call get_weather({"city": "Paris", "unit": "C"})' in p for p in judge_prompts
    )
    assert texted.headers["x-phi-winner"] == "gamma"
    other = texted.parse().choices[0]
    assert other.finish_reason == "stop" and other.message.tool_calls is None
    assert other.message.content == "gamma says: Weather in Paris? I prefer text."


async def test_a_route_returns_the_arm_tool_call_and_answers_the_tool_result(
    strict_loop: Any, upstream: FakeServer
) -> None:
    async with gateway_client(config(upstream.url)) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="route:callers",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER],
            tool_choice="required",
        )
        first = raw.parse()
        sent = answers(upstream)
        stream = await client.chat.completions.create(
            model="route:callers", messages=follow_up(first), tools=[WEATHER], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    choice = first.choices[0]
    arm = raw.headers["x-phi-winner"]
    assert raw.headers["x-phi-kind"] == "route" and arm in ARGUMENTS
    assert choice.finish_reason == "tool_calls"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == json.loads(ARGUMENTS[arm])
    assert first.model_extra["phi"]["winner"] == arm
    assert sent and all(b["tool_choice"] == "required" and b["tools"] for b in sent)
    # the previews called the tool too (scored as calls); the arm then answered from the
    # conversation itself, not after a preview whose tool calls nobody answered
    assert raw.headers["x-phi-action"] == "race" and len(sent) == 3
    assert sent[-1]["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert text.endswith("Paris is sunny")


async def test_a_route_answers_from_the_whole_conversation(
    strict_loop: Any, upstream: FakeServer
) -> None:
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "What is my name?"},
    ]
    async with gateway_client(config(upstream.url)) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="route:callers", messages=conversation
        )
    assert raw.parse().choices[0].message.content.endswith("your name is Ada")
    sent = answers(upstream)
    assert raw.headers["x-phi-action"] == "race" and len(sent) == 3  # two previews, one answer
    for body in sent:  # previews and answers alike were sent every earlier turn
        assert body["messages"][:4] == conversation


async def test_a_strategy_that_cannot_judge_tool_calls_and_unsendable_tools_are_400s(
    strict_loop: Any, upstream: FakeServer
) -> None:
    body = {
        "model": "race:exec",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER],
    }
    async with live_gateway(config(upstream.url)) as url, httpx.AsyncClient() as raw:
        refused = await raw.post(f"{url}/v1/chat/completions", json=body)
        plain = await raw.post(f"{url}/v1/chat/completions", json={**body, "tools": None})
        bad_tool = {"type": "function", "function": {"name": "get weather"}}
        unsendable = await raw.post(
            f"{url}/v1/chat/completions",
            json={**body, "model": "route:callers", "tools": [WEATHER, bad_tool]},
        )
    error = refused.json()["error"]
    assert refused.status_code == 400
    assert error["param"] == "tools" and error["code"] == "strategy_cannot_judge_tool_calls"
    assert "'exec-vote'" in error["message"] and "consensus or vote" in error["message"]
    assert not any(r.json.get("tools") for r in upstream.requests)  # refused before any call
    assert plain.status_code == 200  # the same profile races without tools
    # a tool no provider would accept is the client's mistake, named before any branch runs
    assert unsendable.status_code == 400 and unsendable.json()["error"]["param"] == "tools"
    assert unsendable.json()["error"]["message"].startswith(
        "tools[1] ('get weather'): the tool name"
    )
