"""The official ``openai`` client against a live gateway: sync, async, streaming, tools, the
request settings that reach the upstream, race facts, and every error status."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import httpx
import openai
import pytest

from phi_core.context import ExecutionLimits
from phi_core.gateway import Gateway
from phi_core.runlog import RunLog

from ..providers.fakes import FakeServer, Stream
from ..providers.fakes.openai_wire import text_reply
from .helpers import gateway_client, gateway_config, live_gateway


def passthrough(upstream: FakeServer, model: str = "alpha") -> str:
    return f"openai-compat:{model}@{upstream.url}/v1"


def chat_bodies(upstream: FakeServer) -> list[dict[str, Any]]:
    return [r.json for r in upstream.requests if r.path.endswith("/chat/completions")]


async def test_sync_and_async_clients_parse_passthrough_answers(
    strict_loop: Any, upstream: FakeServer, run_log: RunLog
) -> None:
    async with live_gateway(gateway_config(upstream.url), run_log) as url:
        model = passthrough(upstream)
        sync = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        reply = await asyncio.to_thread(
            sync.chat.completions.create,
            model=model,
            messages=[{"role": "user", "content": "hello"}],
        )
        sync.close()
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client:
            areply = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "again"}]
            )
            listed = await client.models.list()
            one = await client.models.retrieve("route:duo")
            listed_passthrough = await client.models.retrieve(model)
            with pytest.raises(openai.NotFoundError) as unknown:
                await client.models.retrieve("race:nope")
    assert (one.id, one.owned_by) == ("route:duo", "phi")
    assert (listed_passthrough.id, listed_passthrough.owned_by) == (model, "openai-compat")
    assert "race:duo" in unknown.value.message  # the 404 lists the known models
    assert reply.choices[0].message.content == "alpha says: hello"
    assert reply.choices[0].finish_reason == "stop"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (10, 5)
    assert areply.choices[0].message.content == "alpha says: again"
    profiles = ["race:duo", "race:first", "route:duo", "route:first"]
    configured = [*profiles, model, passthrough(upstream, "beta")]
    assert [m.id for m in listed.data][: len(configured)] == configured
    runs = run_log.list_runs()
    assert [r.source for r in runs] == ["gateway", "gateway"]
    assert all(r.prompt == "" and r.text == "" for r in runs)  # content is not logged by default


async def test_streaming_passthrough_ends_with_done_and_usage(
    strict_loop: Any, upstream: FakeServer
) -> None:
    async with (
        live_gateway(gateway_config(upstream.url)) as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client,
    ):
        stream = await client.chat.completions.create(
            model=passthrough(upstream, "beta"),
            messages=[{"role": "user", "content": "stream me"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
        async with httpx.AsyncClient() as raw:
            body = {
                "model": passthrough(upstream),
                "stream": True,
                "messages": [{"role": "user", "content": "x"}],
            }
            text = (await raw.post(f"{url}/v1/chat/completions", json=body)).text
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "beta says: stream me"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 15
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert text.rstrip().endswith("data: [DONE]")


async def test_tools_and_tool_results_pass_through(strict_loop: Any, upstream: FakeServer) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    async with gateway_client(gateway_config(upstream.url)) as client:
        model = passthrough(upstream)
        first = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "weather?"}],
            tools=tools,
            tool_choice="auto",
        )
        call = first.choices[0].message.tool_calls[0]
        streamed = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "weather?"}],
            tools=tools,
            stream=True,
        )
        deltas = [c.choices[0].delta for c in [c async for c in streamed] if c.choices]
        answer = await client.chat.completions.create(
            model=model,
            messages=[
                {"role": "user", "content": "weather?"},
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
                {"role": "user", "content": "so?"},
            ],
        )
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        {"city": "Paris"},
    )
    pieces = [t for d in deltas for t in d.tool_calls or []]
    assert pieces[0].id == "call_1" and pieces[0].function.name == "get_weather"
    assert "".join(p.function.arguments or "" for p in pieces) == '{"city": "Paris"}'
    assert answer.choices[0].message.content == "alpha says: so?"
    sent = chat_bodies(upstream)
    assert sent[0]["tools"][0]["function"]["name"] == "get_weather"
    assert sent[0]["tool_choice"] == "auto"
    tool_message = next(m for m in sent[-1]["messages"] if m["role"] == "tool")
    assert tool_message["tool_call_id"] == call.id and "sunny" in json.dumps(tool_message)


async def test_request_settings_reach_the_upstream(strict_loop: Any, upstream: FakeServer) -> None:
    async with gateway_client(gateway_config(upstream.url)) as client:
        await client.chat.completions.create(
            model=passthrough(upstream),
            messages=[
                {"role": "system", "content": "Be terse."},
                {"role": "user", "content": "hi"},
            ],
            max_completion_tokens=33,
            temperature=0.3,
            stop=["\n\n"],
            user="user-42",
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "r", "schema": {"type": "object"}, "strict": True},
            },
        )
        await client.chat.completions.create(
            model=passthrough(upstream), messages=[{"role": "user", "content": "x"}], max_tokens=7
        )
    first, second = chat_bodies(upstream)
    assert first["messages"][0] == {"role": "system", "content": "Be terse."}
    assert first["temperature"] == 0.3 and first["stop"] == ["\n\n"] and first["user"] == "user-42"
    assert first["response_format"]["type"] == "json_schema"
    assert 33 in (first.get("max_tokens"), first.get("max_completion_tokens"))
    assert 7 in (second.get("max_tokens"), second.get("max_completion_tokens"))


async def test_stop_sequences_cut_a_race_answer(strict_loop: Any, upstream: FakeServer) -> None:
    async with gateway_client(gateway_config(upstream.url)) as client:
        reply = await client.chat.completions.create(
            model="race:first", messages=[{"role": "user", "content": "a"}], stop=[" says"]
        )
    assert reply.choices[0].message.content == "alpha"


async def test_race_branches_get_the_clients_stop_penalties_and_reasoning_effort(
    strict_loop: Any, upstream: FakeServer
) -> None:
    async with gateway_client(gateway_config(upstream.url)) as client:
        for model in ("race:duo", passthrough(upstream)):
            await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "a"}],
                stop=["END"],
                frequency_penalty=0.4,
                reasoning_effort="low",
                user="u-1",
            )
    answers = [b for b in chat_bodies(upstream) if b["messages"][-1]["content"] == "a"]
    assert len(answers) == 3  # two branches, then the passthrough
    for body in answers:
        assert body["stop"] == ["END"] and body["frequency_penalty"] == 0.4
        assert body["user"] == "u-1"
        # the effort reaches each provider as thinking, in its upstream's own spelling (a
        # generic OpenAI-compatible server takes Qwen's switch; OpenAI's own reasoning_effort)
        assert body["enable_thinking"] is True


async def test_race_facts_in_headers_and_extra_field_and_usage_sums_every_call(
    strict_loop: Any, upstream: FakeServer
) -> None:
    async with gateway_client(gateway_config(upstream.url)) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="race:duo", messages=[{"role": "user", "content": "which?"}]
        )
        reply = raw.parse()
        stream = await client.chat.completions.create(
            model="race:duo", messages=[{"role": "user", "content": "which?"}], stream=True
        )
        streamed = [c async for c in stream]
    calls = chat_bodies(upstream)[:3]  # two branches and the judge of the first race
    assert raw.headers["x-phi-winner"] == "alpha"
    assert raw.headers["x-phi-strategy"] == "judge"
    assert raw.headers["x-phi-branches"] == "2"
    assert "judge chose response 1" in raw.headers["x-phi-rationale"]
    assert raw.headers["x-phi-branch-usage"] == "alpha=15:$0.000000;beta=15:$0.000000"
    assert reply.choices[0].message.content == "alpha says: which?"
    extra = reply.model_extra["phi"]
    assert extra["winner"] == "alpha" and [b["name"] for b in extra["branches"]] == [
        "alpha",
        "beta",
    ]
    # usage = both branches (10+5 each) and the judge (10+3), every call the request caused
    assert len(calls) == 3
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (30, 13)
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == "alpha says: which?"
    assert streamed[-1].model_extra["phi"]["winner"] == "alpha"


async def test_route_answers_and_feedback_teaches_the_answering_arm(
    strict_loop: Any, upstream: FakeServer, tmp_path: Any
) -> None:
    from phi_core.routing.stores import open_state_store

    state = str(tmp_path / "router.sqlite")
    async with (
        live_gateway(gateway_config(upstream.url, state=state)) as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client,
        httpx.AsyncClient(base_url=url) as raw,
    ):
        reply = await client.chat.completions.create(
            model="route:duo", messages=[{"role": "user", "content": "route me"}]
        )
        arm = reply.model_extra["phi"]["winner"]
        before = open_state_store(state)
        namespace = before.namespaces()[0] if before.namespaces() else None
        n_before = before.load(namespace)[arm].n if namespace else 0.0
        ok = await raw.post("/v1/feedback", json={"id": reply.id, "score": 0.25})
        unknown = await raw.post("/v1/feedback", json={"id": "chatcmpl-nope", "score": 1})
        bad = await raw.post("/v1/feedback", json={"id": reply.id, "score": 7})
    store = open_state_store(state)
    stats = store.load(store.namespaces()[0])[arm]
    assert ok.status_code == 200 and ok.json()["arm"] == arm
    assert stats.n == pytest.approx(n_before + 1.0)
    assert unknown.status_code == 404 and "chatcmpl-nope" in unknown.json()["error"]["message"]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "score"


async def test_every_error_status_in_openai_format(strict_loop: Any, upstream: FakeServer) -> None:
    keys = [
        {"name": "team", "key": "sk-team-secret", "requests_per_minute": 2},
        {"name": "narrow", "key": "sk-narrow-secret", "models": ["race:first"]},
    ]
    config = gateway_config(upstream.url, keys=keys)
    config.profiles["slow"] = config.profiles["first"].model_copy(update={"timeout": 0.3})
    user = [{"role": "user", "content": "hi"}]
    async with live_gateway(config) as url:

        def client(key: str) -> openai.AsyncOpenAI:
            return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)

        team, narrow, wrong = client("sk-team-secret"), client("sk-narrow-secret"), client("bad")
        with pytest.raises(openai.AuthenticationError) as e401:
            await wrong.chat.completions.create(model="race:first", messages=user)
        with pytest.raises(openai.PermissionDeniedError) as e403:
            await narrow.chat.completions.create(model="race:duo", messages=user)
        with pytest.raises(openai.BadRequestError) as e400:
            await team.chat.completions.create(model="race:first", messages=user, temperature=9)
        with pytest.raises(openai.NotFoundError) as e404:
            await team.chat.completions.create(model="race:missing", messages=user)
        with pytest.raises(openai.PermissionDeniedError) as endpoint:  # not listed: refused
            await team.chat.completions.create(
                model="openai-compat:x@http://127.0.0.1:9/v1", messages=user
            )
        async with client("sk-narrow-secret") as n2:
            errors = {}
            for status in (429, 500, 503):
                with pytest.raises(openai.APIStatusError) as caught:
                    await n2.with_options(max_retries=0).chat.completions.create(
                        model="race:first",
                        messages=[{"role": "user", "content": f"status:{status}"}],
                    )
                errors[status] = caught.value
        upstream.push(
            Stream(text_reply("late"), interval=1.0), Stream(text_reply("late"), interval=1.0)
        )
        with pytest.raises(openai.APIStatusError) as e504:
            await team.chat.completions.create(model="race:slow", messages=user)
        # a fixed one-minute window: within three more requests the key's limit of 2 is hit
        # even if a minute boundary falls between two of them
        with pytest.raises(openai.RateLimitError) as e429:
            for _ in range(3):
                await team.chat.completions.create(model="race:first", messages=user)
        for c in (team, narrow, wrong):
            await c.close()
    assert e401.value.status_code == 401 and e401.value.code == "invalid_api_key"
    assert e403.value.status_code == 403 and "race:first" in e403.value.message
    assert e400.value.status_code == 400 and e400.value.param == "temperature"
    assert e404.value.status_code == 404
    assert endpoint.value.status_code == 403 and endpoint.value.code == "endpoint_not_allowed"
    assert "race:first" in e404.value.message and "route:duo" in e404.value.message
    upstream_429 = errors[429]
    assert upstream_429.status_code == 429 and upstream_429.response.headers["retry-after"] == "7"
    assert errors[500].status_code == 502
    assert errors[503].status_code == 503
    assert e504.value.status_code == 504
    assert e429.value.status_code == 429 and int(e429.value.response.headers["retry-after"]) >= 1
    for error in (e401, e403, e400, e404, e429, e504):
        body = error.value.body
        assert isinstance(body, dict) and {"message", "type", "code"} <= set(body)
        assert "sk-team-secret" not in json.dumps(body)


async def test_a_request_over_a_per_request_budget_is_a_400_clients_do_not_retry(
    strict_loop: Any, upstream: FakeServer
) -> None:
    """A request that can never fit the branches' `max_total_tokens` is the client's to fix:
    not the 429 of a rate or spend limit (which clients retry), and no `Retry-After`."""
    gateway = Gateway(gateway_config(upstream.url), run_log=None)
    plan = gateway.race_plans["first"]
    small = ExecutionLimits(max_total_tokens=50)
    configs = [dataclasses.replace(c, limits=small) for c in plan.configs]
    gateway.race_plans["first"] = dataclasses.replace(plan, configs=configs)
    long = [{"role": "user", "content": "tell me about this: " + "word " * 400}]
    async with gateway_client(gateway) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="race:first", messages=long)
    error = caught.value
    assert error.status_code == 400 and error.code == "over_budget"
    assert error.type == "invalid_request_error"
    assert "retry-after" not in error.response.headers
    assert "max_total_tokens" in error.message and "send a shorter conversation" in error.message
    assert not chat_bodies(upstream)  # refused before anything was sent


async def test_a_streamed_passthrough_the_upstream_refuses_answers_with_its_status(
    strict_loop: Any, upstream: FakeServer, run_log: RunLog
) -> None:
    """The stream starts with the upstream's first chunk: a refusal before it is an ordinary
    HTTP error (status, Retry-After), not a 200 stream carrying an error event."""
    async with gateway_client(gateway_config(upstream.url, retries=0), run_log) as client:
        with pytest.raises(openai.RateLimitError) as limited:
            await client.chat.completions.create(
                model=passthrough(upstream),
                messages=[{"role": "user", "content": "status:429 slow down"}],
                stream=True,
            )
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(
                model=passthrough(upstream),
                messages=[{"role": "user", "content": "status:400 no"}],
                stream=True,
            )
    assert limited.value.response.headers["retry-after"] == "7"
    assert sorted(r.status for r in run_log.list_runs()) == ["error", "error"]


async def test_stop_sequences_cut_a_stream_even_when_the_upstream_ignores_them(
    strict_loop: Any, upstream: FakeServer
) -> None:
    # the fake upstream ignores `stop` (as the embedded model or a vendor API may): the gateway
    # cuts the stream itself, across chunk boundaries, and ends it with finish_reason "stop"
    upstream.push(Stream(text_reply("one two three four")))
    async with gateway_client(gateway_config(upstream.url)) as client:
        stream = await client.chat.completions.create(
            model=passthrough(upstream),
            messages=[{"role": "user", "content": "count"}],
            stop=["three"],
            stream=True,
        )
        chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two "
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_stop_cutter_holds_back_a_possible_stop_across_pieces() -> None:
    from phi_core.gateway._wire import StopCutter

    cutter = StopCutter(["END"])
    sent = [cutter.feed(piece) for piece in ("abc E", "N", "xyz", " and EN", "D more")]
    assert "".join(sent) == "abc ENxyz and " and cutter.stopped and cutter.flush() == ""
    open_end = StopCutter(["END"])
    assert open_end.feed("tail E") + open_end.flush() == "tail E"


@pytest.mark.parametrize(
    "delta",
    [{"role": "assistant", "content": ""}, {"content": 'quote " slash \\ é 🙂\n'},
     {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]}],
)  # fmt: skip
def test_a_delta_frame_is_the_chunk_it_stands_for(delta: dict[str, Any]) -> None:
    from phi_core.gateway._wire import chunk, delta_frames

    frame = delta_frames("chatcmpl-1", 'model "x"', 1_700_000_000)(delta)
    assert frame.startswith("data: ") and frame.endswith("}\n\n")
    assert json.loads(frame[len("data: ") :]) == chunk(
        "chatcmpl-1", 'model "x"', 1_700_000_000, delta
    )
