"""Spans leave the process over OTLP/HTTP (decoded by a receiver on 127.0.0.1) or to the console,
from ``instrument()``, ``PHI_OTEL`` and ``phi --otel``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.errors import MissingExtraError, UserError
from phi_core.loop import AgentContext, AgentLoopConfig
from phi_core.parallel import LlmJudgeEvaluation, agent_loop_parallel
from phi_core.providers import RetryPolicy
from phi_core.telemetry import (
    TelemetrySettings,
    current_instrumentation,
    instrument,
    settings_from_env,
)
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import Usage

from .otlp_receiver import otlp_receiver

ENV = (
    "PHI_OTEL",
    "PHI_OTEL_ENDPOINT",
    "PHI_OTEL_CAPTURE_CONTENT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "PHI_SCRIPT",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def branch(name: str, text: str) -> AgentLoopConfig:
    return AgentLoopConfig(
        model=f"{name}:m",
        provider=ScriptedProvider([Reply(text, usage=Usage(input=7, output=3))], name=name),
        retry=RetryPolicy.none(),
    )


async def test_a_race_is_exported_over_otlp_http_and_decodes_with_its_tree() -> None:
    with otlp_receiver() as receiver:
        handle = instrument(endpoint=receiver.url)
        assert handle.owned
        result = await agent_loop_parallel(
            "q",
            AgentContext(session_id="ses"),
            [branch("alpha", "A"), branch("beta", "B")],
            LlmJudgeEvaluation(branch("judge", "2")),
        )
        await asyncio.to_thread(handle.close)  # shuts the batch processor down: all exported
    assert receiver.requests
    assert {r["path"] for r in receiver.requests} == {"/v1/traces"}
    assert {r["content_type"] for r in receiver.requests} == {"application/x-protobuf"}

    (race,) = receiver.named("invoke_workflow race")
    assert race.parent_span_id == b"" and race.scope == "phi_core"
    assert race.resource["service.name"] == "phi"
    assert race.attributes["phi.race.selected_index"] == result.selected_index == 1
    assert race.attributes["phi.race.loop_ids"] == tuple(result.loop_ids)
    assert any(name == "gen_ai.evaluation.result" for name, _ in race.events)
    agents = [s for s in receiver.spans if s.name.startswith("invoke_agent")]
    assert len(agents) == 3
    assert {receiver.parent_of(a).name for a in agents} == {"invoke_workflow race"}  # type: ignore[union-attr]
    assert sorted(a.attributes["phi.role"] for a in agents) == ["branch", "branch", "judge"]
    chats = [s for s in receiver.spans if s.name == "chat m"]
    assert len(chats) == 3 and all(c.kind == ProtoSpan.SPAN_KIND_CLIENT for c in chats)
    assert {receiver.parent_of(c).name for c in chats} <= {a.name for a in agents}  # type: ignore[union-attr]
    assert all(c.attributes["gen_ai.usage.input_tokens"] == 7 for c in chats)
    assert {s.trace_id for s in receiver.spans} == {race.trace_id}


SCRIPT = {"scripted:a": ["Hello there."]}


def _script(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT), encoding="utf-8")
    return str(path)


def test_phi_otel_sends_the_commands_spans_to_phis_endpoint_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with otlp_receiver() as receiver:
        monkeypatch.setenv("PHI_OTEL", "1")
        monkeypatch.setenv("PHI_OTEL_ENDPOINT", receiver.url)
        result = CliRunner().invoke(
            app, ["run", "hi", "-m", "scripted:a", "--script", _script(tmp_path)]
        )
    assert result.exit_code == 0, result.output
    assert "Hello there." in result.stdout
    assert sorted(s.name for s in receiver.spans) == ["chat a", "invoke_agent scripted:a"]
    assert current_instrumentation() is None  # flushed and shut down when the command ended


def test_the_otel_flag_honours_the_standard_otlp_endpoint_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "my-service")
        args = ["--otel", "run", "hi", "-m", "scripted:a", "--script", _script(tmp_path)]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (agent,) = receiver.named("invoke_agent scripted:a")
    assert agent.resource["service.name"] == "my-service"


def test_console_spans_go_to_stderr_and_leave_the_answer_alone(tmp_path: Path) -> None:
    args = [
        "--otel-exporter",
        "console",
        "run",
        "hi",
        "-m",
        "scripted:a",
        "--script",
        _script(tmp_path),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "Hello there."
    assert '"name": "invoke_agent scripted:a"' in result.stderr
    assert '"gen_ai.operation.name": "chat"' in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--otel-exporter", "zipkin"], {}, "exporter must be 'otlp' or 'console', got 'zipkin'"),
        (["--otel-endpoint", "localhost:4318"], {}, "must be an http(s) URL"),
        ([], {"PHI_OTEL": "maybe"}, "PHI_OTEL must be 1 (spans on), otlp, console or 0"),
        ([], {"PHI_OTEL": "1", "PHI_OTEL_CAPTURE_CONTENT": "please"}, "must be true or false"),
    ],
)
def test_a_bad_telemetry_setting_is_a_usage_error_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(
        app, [*args, "run", "hi", "-m", "scripted:a", "--script", _script(tmp_path)]
    )
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())
    assert current_instrumentation() is None


def test_settings_from_env_reads_the_switch_the_exporter_and_content_opt_in() -> None:
    assert settings_from_env({}) is None
    assert settings_from_env({"PHI_OTEL": "0"}) is None
    assert settings_from_env({"PHI_OTEL": "1", "OTEL_TRACES_EXPORTER": "none"}) is None
    assert settings_from_env({"PHI_OTEL": "1"}) == TelemetrySettings()
    assert settings_from_env({"PHI_OTEL": "true", "OTEL_TRACES_EXPORTER": "console"}) == (
        TelemetrySettings(exporter="console")
    )
    assert settings_from_env(
        {
            "PHI_OTEL": "OTLP",
            "PHI_OTEL_ENDPOINT": "http://collector:4318",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
        }
    ) == TelemetrySettings(exporter="otlp", endpoint="http://collector:4318", capture_content=True)
    with pytest.raises(UserError, match="must be an http"):
        settings_from_env({"PHI_OTEL": "1", "PHI_OTEL_ENDPOINT": "collector:4318"})


def test_instrument_refuses_what_it_cannot_use() -> None:
    with pytest.raises(UserError, match="max_content_chars must be >= 1"):
        instrument(exporter="console", max_content_chars=0)
    with pytest.raises(UserError, match="SpanExporter"):
        instrument(exporter=object())  # type: ignore[arg-type]
    assert current_instrumentation() is None


def test_without_the_extra_instrument_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "phi_core.telemetry._spans")
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if it were not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'phi-core\[otel\]'"):
        instrument(exporter="console")
    assert current_instrumentation() is None


def test_phi_otel_alone_traces_a_library_programs_runs(tmp_path: Path) -> None:
    program = (
        "import asyncio\n"
        "from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop\n"
        "from phi_core.testing import ScriptedProvider\n"
        "config = AgentLoopConfig(model='lib:m', provider=ScriptedProvider(['hi'], name='lib'))\n"
        "print(asyncio.run(agent_loop('q', AgentContext(), config)).text)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    env["PHI_OTEL"] = "console"
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hi"
    assert '"name": "invoke_agent lib:m"' in done.stderr  # no call: the variable was enough
