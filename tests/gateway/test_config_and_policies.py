"""The gateway's config (profiles are race files, with their errors), keys from the config and
the environment, daily spend limits on a priced model, CORS off by default, content kept out of
the run log unless configured, health, readiness and metrics."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.errors import ConfigError, GatewayError, UserError
from phi_core.gateway import (
    Gateway,
    GatewayConfig,
    create_app,
    load_gateway_config,
    parse_chat_request,
    serve,
)
from phi_core.gateway import _service as gateway_service
from phi_core.race import BanditOptions, route_scope
from phi_core.routing.bandits import ArmStats
from phi_core.routing.features import HashedFeatures
from phi_core.routing.stores import open_state_store
from phi_core.runlog import RunLog

from ..providers.fakes import FakeServer
from .helpers import gateway_config, live_gateway


def test_a_race_file_is_one_profile_named_after_the_file(tmp_path: Path) -> None:
    race = tmp_path / "quick.toml"
    race.write_text('strategy = "vote"\n[[branches]]\nmodel = "local:smollm2"\n')
    config = load_gateway_config(race)
    assert list(config.profiles) == ["quick"]
    assert config.profiles["quick"].strategy == "vote"


def test_gateway_file_errors_name_the_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text("[gateway]\nlog_contents = true\n")
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    assert "log_contents" in str(caught.value) and "Did you mean 'log_content'" in str(caught.value)
    path.write_text('[profiles.p]\nstrategy = "judge"\n[[profiles.p.branches]]\nmodel = "nope:x"\n')
    with pytest.raises(UserError) as unknown:
        Gateway(load_gateway_config(path), run_log=None)
    assert "Profile 'p'" in str(unknown.value) and "nope" in str(unknown.value)


def test_an_unknown_listed_model_stops_the_gateway_at_start_naming_the_entry(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[gateway]\nmodels = ["local:smollm2", "nosuch:x"]\n')
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(path)
    message = str(caught.value)
    assert str(path) in message and "gateway.models[1]" in message
    assert "Unknown provider 'nosuch'" in message and "Known providers: " in message
    with pytest.raises(UserError) as unknown:  # a config built in code is checked too
        Gateway(GatewayConfig.model_validate({"gateway": {"models": ["nosuch:x"]}}), run_log=None)
    assert "gateway.models entry 'nosuch:x'" in str(unknown.value)
    result = CliRunner().invoke(app, ["serve", "--config", str(path), "--port", "0"])
    assert result.exit_code == 2 and "gateway.models[1]" in result.stderr
    assert "Traceback" not in result.output


def test_an_unknown_log_level_is_a_usage_error_listing_the_levels() -> None:
    result = CliRunner().invoke(app, ["serve", "--log-level", "bogus", "--port", "0"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "--log-level must be one of critical, error, warning, info, debug, trace" in (
        result.stderr
    )
    assert "got 'bogus'" in result.stderr and "Traceback" not in result.stderr
    with pytest.raises(UserError, match="log_level must be one of"):
        serve(None, port=0, log_level="loud")  # the library says so too, before listening


def test_a_router_state_that_cannot_be_used_stops_serve_before_it_listens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"input": 1}\n')
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'[gateway]\nstate = "{data}"\n[profiles.p]\nstrategy = "pick-first"\n'
        '[[profiles.p.branches]]\nmodel = "scripted:a"\n'
    )
    foreign = CliRunner().invoke(app, ["serve", "--config", str(path), "--port", "0"])
    assert foreign.exit_code == 2 and "is not a router state" in foreign.stderr
    assert data.read_text() == '{"input": 1}\n' and "Traceback" not in foreign.output
    (tmp_path / "home").write_text("a file")  # PHI_HOME, where the default state lives
    monkeypatch.setenv("PHI_HOME", str(tmp_path / "home"))
    path.write_text(
        '[profiles.p]\nstrategy = "pick-first"\n[[profiles.p.branches]]\nmodel = "scripted:a"\n'
    )
    homeless = CliRunner().invoke(app, ["serve", "--config", str(path), "--port", "0"])
    assert homeless.exit_code == 2 and "is not a folder" in homeless.stderr
    assert "Traceback" not in homeless.output


def test_keys_from_config_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHI_GATEWAY_KEYS", "sk-env-one, sk-env-two")
    monkeypatch.setenv("TEAM_KEY", "sk-team")
    config = GatewayConfig.model_validate(
        {"gateway": {"keys": [{"name": "team", "key_env": "TEAM_KEY"}]}}
    )
    gateway = Gateway(config, run_log=None)
    assert gateway.authenticate("Bearer sk-team").name == "team"
    assert gateway.authenticate("Bearer sk-env-two").name == "env-2"
    for header in (None, "Bearer", "Basic sk-team", "Bearer sk-tea"):
        with pytest.raises(GatewayError) as caught:
            gateway.authenticate(header)
        assert caught.value.status == 401 and "sk-team" not in caught.value.message
    assert "sk-team" not in repr(config)  # a configured key never shows in a repr or log line
    monkeypatch.delenv("TEAM_KEY")
    with pytest.raises(UserError, match=r"\$TEAM_KEY"):
        Gateway(config, run_log=None)


WRONG_SHAPED_MESSAGES: dict[str, list[Any]] = {
    "an image url as a string": [
        {"role": "user", "content": [{"type": "image_url", "image_url": "data:image/png;base64,A"}]}
    ],
    "tool calls as a number": [
        {"role": "assistant", "tool_calls": 5},
        {"role": "user", "content": "x"},
    ],
    "a tool call without an id": [
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]},
        {"role": "tool", "content": "r"},
    ],
    "arguments as a number": [
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": 5}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            "max_tokens",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]}, "tools"),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "response_format": {"type": "xml"},
            },
            "response_format",
        ),
        (
            {"model": "m", "messages": [{"role": "tool", "tool_call_id": "c", "content": "x"}]},
            "messages",
        ),
        (
            {"model": "m", "messages": [{"role": "assistant", "tool_calls": ["call"]}]},
            "messages",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "any"},
            "tool_choice",
        ),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": {"type": "function", "function": {}},
            },
            "tool_choice",
        ),
        *[
            ({"model": "m", "messages": [{"role": "user", "content": "x"}], key: value}, key)
            for key, value in [
                ("logprobs", True),
                ("top_logprobs", 3),
                ("logit_bias", {"50256": -100}),
                ("audio", {"voice": "alloy", "format": "wav"}),
                ("modalities", ["text", "audio"]),
                ("prediction", {"type": "content", "content": "x"}),
                ("reasoning_effort", "extreme"),
                ("frequency_penalty", 3),
                ("n", True),
                ("stream_options", {"include_usage": "no"}),
                ("tools", [{"type": "function", "function": {"name": "f", "parameters": "zzz"}}]),
                ("response_format", {"type": "json_schema", "json_schema": {"schema": "x"}}),
            ]
        ],
        *[
            ({"model": "m", "messages": messages}, "messages")
            for messages in WRONG_SHAPED_MESSAGES.values()
        ],
    ],
)
def test_bad_requests_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(GatewayError) as caught:
        parse_chat_request(body)
    assert caught.value.status == 400 and caught.value.param == param


def test_tool_call_arguments_sent_as_an_object_are_passed_on_as_json() -> None:
    request = parse_chat_request(
        {"model": "m", "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]}
    )  # fmt: skip
    [call] = request.messages[1].content  # type: ignore[union-attr]
    assert call.raw_arguments == '{"city": "Paris"}' and call.arguments == {"city": "Paris"}


async def test_wrong_shaped_fields_are_400s_and_the_connection_serves_on(
    strict_loop: Any, upstream: FakeServer
) -> None:
    model = f"openai-compat:alpha@{upstream.url}/v1"
    async with (
        live_gateway(gateway_config(upstream.url)) as url,
        httpx.AsyncClient(base_url=url) as client,  # one keep-alive connection for every call
    ):
        for name, messages in WRONG_SHAPED_MESSAGES.items():
            refused = await client.post(
                "/v1/chat/completions", json={"model": model, "messages": messages}
            )
            assert refused.status_code == 400, (name, refused.text)
            assert refused.json()["error"]["param"] == "messages", name
        served = await client.post(
            "/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
        )
        metrics = (await client.get("/metrics")).text
    assert served.status_code == 200
    count = len(WRONG_SHAPED_MESSAGES)
    assert (
        f'phi_gateway_requests_total{{kind="unknown",route="chat",status="400"}} {count}' in metrics
    )


def test_default_values_of_unsupported_fields_pass_and_settings_are_read() -> None:
    request = parse_chat_request(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "x"}],
            "logprobs": False,
            "top_logprobs": None,
            "logit_bias": {},
            "modalities": ["text"],
            "frequency_penalty": 0,
            "presence_penalty": 0.5,
            "reasoning_effort": "none",
        }
    )
    assert request.thinking == "off"
    assert request.extra == {"presence_penalty": 0.5}  # a zero penalty is not sent
    high = parse_chat_request(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high"}
    )
    assert high.thinking == "high"


async def test_daily_spend_limit_refuses_a_key_that_spent_its_dollars(
    strict_loop: Any, upstream: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{upstream.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-test")
    # room for one call's worst case (its input and 5 output tokens), not for two
    keys = [{"name": "cheap", "key": "sk-cheap", "daily_usd": 0.000006}]
    body = {
        "model": "openai:gpt-4o-mini",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    headers = {"Authorization": "Bearer sk-cheap"}
    async with (
        live_gateway(gateway_config(upstream.url, keys=keys)) as url,
        httpx.AsyncClient(base_url=url, headers=headers) as client,
    ):
        first = await client.post("/v1/chat/completions", json=body)
        second = await client.post("/v1/chat/completions", json=body)
        metrics = (await client.get("/metrics")).text
    assert first.status_code == 200 and first.headers["x-phi-model"] == "openai:gpt-4o-mini"
    assert first.json()["phi"]["cost_usd"] > 0  # 10 input + 5 output tokens, priced
    assert second.status_code == 429
    assert second.json()["error"]["code"] == "daily_spend_exceeded"
    assert int(second.headers["retry-after"]) >= 1
    assert len(upstream.requests) == 1  # the refused request never reached the upstream
    assert 'phi_gateway_cost_usd_total{model="openai:gpt-4o-mini"}' in metrics


async def test_cors_is_off_by_default_and_on_for_listed_origins(
    strict_loop: Any, upstream: FakeServer
) -> None:
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    async with live_gateway(gateway_config(upstream.url)) as url, httpx.AsyncClient() as client:
        closed = await client.options(f"{url}/v1/chat/completions", headers=preflight)
    config = gateway_config(upstream.url, cors_origins=["https://app.example"])
    async with live_gateway(config) as url, httpx.AsyncClient() as client:
        opened = await client.options(f"{url}/v1/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in closed.headers
    assert opened.headers["access-control-allow-origin"] == "https://app.example"


async def test_content_is_logged_only_when_configured(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path
) -> None:
    body = {"model": "race:duo", "messages": [{"role": "user", "content": "secret plans"}]}
    logs = {}
    for log_content in (False, True):
        log = RunLog(tmp_path / f"log-{log_content}.db")
        config = gateway_config(upstream.url, log_content=log_content)
        async with live_gateway(config, log) as url, httpx.AsyncClient() as client:
            assert (await client.post(f"{url}/v1/chat/completions", json=body)).status_code == 200
        logs[log_content] = log.list_runs()
    [hidden], [kept] = logs[False], logs[True]
    assert hidden.source == "gateway" and hidden.winner == "alpha"
    assert hidden.prompt == "" and hidden.text == "" and all(not b.text for b in hidden.branches)
    assert kept.prompt == "secret plans" and kept.text == "alpha says: secret plans"


async def test_health_readiness_and_metrics(strict_loop: Any, upstream: FakeServer) -> None:
    body = {"model": "route:duo", "messages": [{"role": "user", "content": "hi"}]}
    async with live_gateway(gateway_config(upstream.url)) as url, httpx.AsyncClient() as client:
        health = await client.get(f"{url}/healthz")
        ready = await client.get(f"{url}/readyz")
        await client.post(f"{url}/v1/chat/completions", json=body)
        metrics = await client.get(f"{url}/metrics")
        missing = await client.get(f"{url}/v1/nothing")
    assert health.status_code == 200 and ready.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = metrics.text
    assert 'phi_gateway_requests_total{kind="route",route="chat",status="200"} 1' in text
    assert 'phi_gateway_router_decisions_total{action="single",profile="duo"} 1' in text
    assert 'phi_gateway_request_duration_seconds_count{kind="route"} 1' in text
    assert 'phi_gateway_tokens_total{direction="output",model="openai-compat:alpha"}' in text
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert "POST /v1/chat/completions" in missing.json()["error"]["message"]  # where to go


async def test_a_sure_router_skips_the_race_and_counts_it(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path
) -> None:
    state = str(tmp_path / "router.sqlite")
    query = "which arm?"
    store, namespace, x = route_state(state, "duo", query)
    store.add(namespace, "alpha", ArmStats.of(x, 1.0, weight=500))
    store.add(namespace, "beta", ArmStats.of(x, 0.0, weight=500))
    body = {"model": "route:duo", "messages": [{"role": "user", "content": query}]}
    async with (
        live_gateway(gateway_config(upstream.url, state=state)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        reply = await client.post("/v1/chat/completions", json=body)
        metrics = (await client.get("/metrics")).text
    assert reply.headers["x-phi-action"] == "sure" and reply.headers["x-phi-winner"] == "alpha"
    assert 'phi_gateway_races_skipped_total{profile="duo"} 1' in metrics
    assert upstream.requests[0].json["model"] == "alpha"  # the first call answers: no preview race


def route_state(state: str, profile: str, query: str) -> tuple[Any, str, Any]:
    """The router state file ``state``, the namespace of ``route:PROFILE`` in it (the bandit
    options' default features) and ``query``'s features."""
    features = HashedFeatures(64, length_scale=2000)  # the bandit options' defaults
    namespace = BanditOptions(scope=route_scope(profile)).namespace(features)
    return open_state_store(state), namespace, features(query)


async def test_route_profiles_whose_branches_share_a_name_learn_apart(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path
) -> None:
    alpha = f"openai-compat:alpha@{upstream.url}/v1"
    beta = f"openai-compat:beta@{upstream.url}/v1"
    config = GatewayConfig.model_validate(
        {"gateway": {"retries": 0, "state": str(tmp_path / "router.sqlite")},
         "profiles": {
             "one": {"strategy": "judge", "branches": [
                 {"name": "fast", "model": alpha}, {"name": "slow", "model": beta}]},
             "two": {"strategy": "judge", "branches": [
                 {"name": "fast", "model": beta}, {"name": "slow", "model": alpha}]},
         }}
    )  # fmt: skip
    query = "which arm?"
    store, one, x = route_state(str(tmp_path / "router.sqlite"), "one", query)
    store.add(one, "fast", ArmStats.of(x, 1.0, weight=500))  # route:one is sure of its `fast`
    store.add(one, "slow", ArmStats.of(x, 0.0, weight=500))
    body = {"messages": [{"role": "user", "content": query}]}
    async with live_gateway(config) as url, httpx.AsyncClient(base_url=url) as client:
        first = await client.post("/v1/chat/completions", json={**body, "model": "route:one"})
        second = await client.post("/v1/chat/completions", json={**body, "model": "route:two"})
    assert first.headers["x-phi-action"] == "sure" and first.headers["x-phi-winner"] == "fast"
    assert upstream.requests[0].json["model"] == "alpha"
    # route:two's `fast` (beta) learned nothing from route:one's `fast` (alpha): not sure of it
    assert second.status_code == 200 and second.headers["x-phi-action"] != "sure"
    _, two, _ = route_state(str(tmp_path / "router.sqlite"), "two", query)
    assert one != two and set(store.namespaces()) == {one, two}
    # each learned from its own answers only: route:one from its sure answer (one more), the
    # previews and answer of route:two in its own namespace
    assert {arm: s.n for arm, s in store.load(one).items()} == {"fast": 501, "slow": 500}
    assert store.load(two) and all(s.n < 2 for s in store.load(two).values())


def test_serving_beyond_loopback_without_keys_is_warned(monkeypatch: pytest.MonkeyPatch) -> None:
    from phi_core.gateway._config import env_keys, exposure_warning

    monkeypatch.delenv("PHI_GATEWAY_KEYS", raising=False)
    assert env_keys() == []
    assert exposure_warning(False, "127.0.0.1") is None
    assert "without keys" in (exposure_warning(False, "0.0.0.0") or "")
    assert exposure_warning(True, "0.0.0.0") is None
    monkeypatch.setenv("PHI_GATEWAY_KEYS", " sk-a , ,sk-b")
    assert [(k.name, v) for k, v in env_keys()] == [("env-1", "sk-a"), ("env-2", "sk-b")]


async def test_a_profile_that_cannot_be_routed_is_still_raced(
    strict_loop: Any, upstream: FakeServer
) -> None:
    same = {"model": f"openai-compat:alpha@{upstream.url}/v1"}
    config = GatewayConfig.model_validate(
        {"gateway": {"retries": 0},
         "profiles": {"twins": {"strategy": "pick-first", "branches": [same, same]}}}
    )  # fmt: skip
    body = {"messages": [{"role": "user", "content": "hi"}]}
    async with live_gateway(config) as url, httpx.AsyncClient(base_url=url) as client:
        raced = await client.post("/v1/chat/completions", json={**body, "model": "race:twins"})
        routed = await client.post("/v1/chat/completions", json={**body, "model": "route:twins"})
    assert raced.status_code == 200
    assert routed.status_code == 404
    assert "cannot be routed" in routed.json()["error"]["message"]
    assert "distinct `name`" in routed.json()["error"]["message"]


class _CountingLog(RunLog):
    """A real run log that remembers the size of every batch written to it."""

    batches: list[int]

    def write_many(self, records: Any) -> Any:
        self.batches.append(len(records))
        return super().write_many(records)


async def test_run_records_are_written_in_batches_and_all_of_them_by_shutdown(
    strict_loop: Any, upstream: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gateway_service, "RECORD_BATCH_S", 600.0)  # shutdown must not wait it
    log = _CountingLog(tmp_path / "logs.db")
    log.batches = []
    model = f"openai-compat:alpha@{upstream.url}/v1"
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with live_gateway(gateway_config(upstream.url), log) as url, httpx.AsyncClient() as c:
        for _ in range(6):
            reply = await c.post(f"{url}/v1/chat/completions", json=body)
            assert reply.status_code == 200 and reply.text.endswith("data: [DONE]\n\n")
    # Six requests inside one batching window share one transaction, written when the gateway
    # closed (not 600 s later).
    assert log.batches == [6]
    assert len(log.list_runs()) == 6
    assert all(r.source == "gateway" and r.status == "ok" for r in log.list_runs())


async def test_a_body_past_the_limit_is_a_413_whether_its_length_is_declared_or_not(
    strict_loop: Any, upstream: FakeServer
) -> None:
    config = gateway_config(upstream.url, max_body_bytes=4096)
    big = {"model": "race:duo", "messages": [{"role": "user", "content": "x" * 10_000}]}
    payload = json.dumps(big).encode()

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: read until the limit
        for start in range(0, len(payload), 1000):
            yield payload[start : start + 1000]

    as_json = {"Content-Type": "application/json"}
    async with live_gateway(config) as url, httpx.AsyncClient(headers=as_json) as client:
        declared = await client.post(f"{url}/v1/chat/completions", content=payload)
        streamed = await client.post(f"{url}/v1/chat/completions", content=chunked())
        nested = await client.post(f"{url}/v1/chat/completions", content=b"[" * 3000)
        small = await client.post(
            f"{url}/v1/chat/completions",
            json={"model": "race:duo", "messages": [{"role": "user", "content": "hi"}]},
        )
    for reply in (declared, streamed):
        assert reply.status_code == 413
        assert reply.json()["error"]["code"] == "request_too_large"
        assert "4096 bytes" in reply.json()["error"]["message"]
    assert nested.status_code == 400 and "too deeply" in nested.json()["error"]["message"]
    assert small.status_code == 200
    assert len(upstream.requests) == 3  # only the small request raced (two branches + judge)


def test_n_may_be_left_null_or_one_and_nothing_else() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert parse_chat_request({**base, "n": None}).model == "m"
    assert parse_chat_request({**base, "n": 1}).model == "m"
    with pytest.raises(GatewayError, match="Only `n` = 1"):
        parse_chat_request({**base, "n": 2})


async def test_the_model_list_shows_what_the_caller_can_be_served(
    strict_loop: Any, upstream: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Profiles, listed models and — with passthrough on — the catalogue models whose key this
    process holds; a key limited to some models sees only those."""
    for env in ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-test")
    keys = [
        {"name": "all", "key": "sk-all"},
        {"name": "narrow", "key": "sk-narrow", "models": ["race:duo", "openai:gpt-4o-mini"]},
    ]
    listings: dict[str, list[dict[str, Any]]] = {}
    for passthrough_on in (True, False):
        config = gateway_config(upstream.url, keys=keys, passthrough=passthrough_on)
        async with live_gateway(config) as url, httpx.AsyncClient(base_url=url) as client:
            for key in ("sk-all", "sk-narrow"):
                reply = await client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
                assert reply.status_code == 200
                listings[f"{key}/{passthrough_on}"] = reply.json()["data"]
    everything = {m["id"]: m["owned_by"] for m in listings["sk-all/True"]}
    assert everything["race:duo"] == "phi" and everything["route:first"] == "phi"
    assert everything["openai:gpt-4o-mini"] == "openai"  # OPENAI_API_KEY is set
    assert not any(name.startswith(("anthropic:", "google:")) for name in everything)  # no key
    assert not any(name.startswith("openai-responses:") for name in everything)
    assert [m["id"] for m in listings["sk-narrow/True"]] == ["race:duo", "openai:gpt-4o-mini"]
    closed = [m["id"] for m in listings["sk-all/False"]]
    assert closed == [n for n in everything if n.startswith(("race:", "route:", "openai-compat:"))]
    assert [m["id"] for m in listings["sk-narrow/False"]] == ["race:duo"]


async def test_what_a_web_page_could_send_is_refused_before_any_upstream_call(
    strict_loop: Any, upstream: FakeServer
) -> None:
    """A page can POST text/plain (or no type) to 127.0.0.1 without a CORS preflight; the
    gateway answers only JSON bodies, and only for a model name a header can carry."""
    body = json.dumps({"model": "race:duo", "messages": [{"role": "user", "content": "hi"}]})
    url_of = "/v1/chat/completions"
    async with live_gateway(gateway_config(upstream.url)) as url, httpx.AsyncClient() as client:
        plain = await client.post(
            url + url_of, content=body, headers={"Content-Type": "text/plain"}
        )
        untyped = await client.post(url + url_of, content=body.encode())
        form = await client.post(url + url_of, data={"model": "race:duo"})
        crlf = await client.post(
            url + url_of,
            json={"model": "x\r\nSet-Cookie: a=b", "messages": [{"role": "user", "content": "hi"}]},
        )
    for reply in (plain, untyped, form):
        assert reply.status_code == 415, reply.text
        assert "Content-Type: application/json" in reply.json()["error"]["message"]
    assert crlf.status_code == 400 and crlf.json()["error"]["code"] == "invalid_model"
    assert "set-cookie" not in crlf.headers
    assert upstream.requests == []


def test_a_foreign_host_is_refused_when_the_gateway_answers_loopback_names_only() -> None:
    from starlette.testclient import TestClient

    from phi_core._net import LOOPBACK_HOSTS

    app = create_app(GatewayConfig(), hosts=LOOPBACK_HOSTS)
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        refused = client.get("/v1/models", headers={"Host": "evil.example:8000"})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "host_not_allowed"
        assert client.get("/v1/models", headers={"Host": "localhost:8000"}).status_code == 200


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_branch_names_no_header_can_carry_still_answer(
    strict_loop: Any, upstream: FakeServer, stream: bool
) -> None:
    alpha = f"openai-compat:alpha@{upstream.url}/v1"
    config = GatewayConfig.model_validate(
        {
            "gateway": {"retries": 0, "models": [alpha]},
            "profiles": {
                "one": {
                    "strategy": "pick-first",
                    "branches": [{"name": "日本語\u0001ブランチ", "model": alpha}],
                }
            },
        }
    )
    gateway = Gateway(config)
    async with live_gateway(gateway) as url, httpx.AsyncClient() as client:
        reply = await client.post(
            f"{url}/v1/chat/completions",
            json={"model": "race:one", "stream": stream,
                  "messages": [{"role": "user", "content": "hi"}]},
        )  # fmt: skip
        assert reply.status_code == 200, reply.text
        assert "alpha says: hi" in reply.text
        assert reply.headers["x-phi-winner"].startswith("???")
        assert gateway.in_flight == 0


def test_a_client_cannot_make_the_gateway_open_local_files() -> None:
    """`local:/etc/passwd` used to reach the GGUF check, whose error said whether the file
    exists and echoed its first bytes; a path is refused unless the config lists it, with one
    answer whatever is at the path."""
    gateway = Gateway(gateway_config("http://127.0.0.1:9"))
    answers = []
    for name in ("local:/etc/passwd", "local:/no/such/model.gguf"):
        with pytest.raises(GatewayError) as refused:
            gateway.resolve(name)
        assert refused.value.status == 403 and refused.value.code == "local_file_not_allowed"
        answers.append(str(refused.value).replace(name, "NAME"))
        assert "root" not in str(refused.value) and "exist" not in str(refused.value)
    assert answers[0] == answers[1]
    assert gateway.resolve("local:smollm2") == ("passthrough", "local:smollm2")


class _DownCounters:
    """Per-key counters whose store is down (Redis unreachable): every read raises."""

    async def hit(self, key: str, window: str, ttl_s: float) -> int:
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6390. Connection refused.")

    async def spend(self, key: str, window: str, usd: float, ttl_s: float) -> float:
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6390. Connection refused.")


@pytest.mark.parametrize("limit", [{"requests_per_minute": 5}, {"daily_usd": 1.0}])
async def test_a_key_whose_limits_cannot_be_counted_gets_a_503_to_retry(
    strict_loop: Any, upstream: FakeServer, limit: dict[str, Any]
) -> None:
    keys = [{"name": "team", "key": "sk-team-0123456789", **limit}]
    gateway = Gateway(gateway_config(upstream.url, keys=keys), run_log=None)
    body = {"model": "race:duo", "messages": [{"role": "user", "content": "hi"}]}
    async with (
        live_gateway(gateway) as url,
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": "Bearer sk-team-0123456789"}
        ) as client,
    ):
        gateway.counters = _DownCounters()  # type: ignore[assignment]
        refused = await client.post("/v1/chat/completions", json=body)
    assert refused.status_code == 503 and refused.headers["retry-after"]
    error = refused.json()["error"]
    assert error["code"] == "limits_store_unavailable" and "'team'" in error["message"]
    assert "ConnectionError" in error["message"] and "Retry later" in error["message"]
    assert upstream.requests == []  # nothing was sent unchecked


async def test_a_secret_in_a_listed_models_url_is_never_shown_and_its_shown_name_calls_it(
    strict_loop: Any, upstream: FakeServer
) -> None:
    secret = "hunter2hunter2"
    model = f"openai-compat:alpha@{upstream.url}/v1?api_key={secret}"
    keys = [{"name": "team", "key": "sk-team-0123456789"}]
    config = GatewayConfig.model_validate(
        {"gateway": {"retries": 0, "models": [model], "keys": keys}, "profiles": {}}
    )
    headers = {"Authorization": "Bearer sk-team-0123456789"}
    async with (
        live_gateway(config) as url,
        httpx.AsyncClient(base_url=url, headers=headers) as client,
    ):
        listing = await client.get("/v1/models")
        [shown] = [m["id"] for m in listing.json()["data"] if m["id"].startswith("openai-compat:")]
        one = await client.get(f"/v1/models/{quote(shown, safe=':@/')}")
        called = await client.post(
            "/v1/chat/completions",
            json={"model": shown, "messages": [{"role": "user", "content": "hi"}]},
        )
        unknown = await client.post(
            "/v1/chat/completions",
            json={"model": "openai-compat:nope", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert secret not in listing.text and "[REDACTED]" in shown
    assert one.status_code == 200 and secret not in one.text
    assert called.status_code == 200, called.text
    assert secret not in called.text and secret not in str(called.headers)
    assert upstream.requests[-1].json["model"] == "alpha"  # the configured endpoint answered
    assert unknown.status_code == 404 and secret not in unknown.text


async def test_a_key_limited_to_some_models_sees_and_is_told_of_only_those(
    strict_loop: Any, upstream: FakeServer
) -> None:
    keys = [{"name": "team", "key": "sk-team-0123456789", "models": ["race:first"]}]
    headers = {"Authorization": "Bearer sk-team-0123456789"}
    async with (
        live_gateway(gateway_config(upstream.url, keys=keys)) as url,
        httpx.AsyncClient(base_url=url, headers=headers) as client,
    ):
        mine = await client.get("/v1/models/race:first")
        other = await client.get("/v1/models/race:duo")
        unknown = await client.post(
            "/v1/chat/completions",
            json={"model": "race:nope", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert mine.status_code == 200
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"
    message = unknown.json()["error"]["message"]
    assert unknown.status_code == 404 and message.endswith("Known models: race:first.")
    assert "race:duo" not in message and upstream.url not in message
