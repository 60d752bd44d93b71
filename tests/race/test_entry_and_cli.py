"""run_bandit_race (the CLI's entry) and `phi route show|reset|export`, `parallel-agents`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phi_core.cli._parallel_agents import parallel_agents_app
from phi_core.cli.route import app
from phi_core.errors import UnknownModelError, UserError
from phi_core.loop import AgentLoopConfig
from phi_core.parallel import shown_candidates
from phi_core.providers.base import ModelConfig, StreamRequest
from phi_core.race import BanditOptions, run_bandit_race
from phi_core.routing import SQLiteStateStore
from phi_core.testing import Reply, ScriptedProvider
from phi_core.types import message_text


def config(name: str, provider: ScriptedProvider) -> AgentLoopConfig:
    return AgentLoopConfig(
        model=ModelConfig(provider="test", id=name, api="scripted"), provider=provider
    )


def judge() -> ScriptedProvider:
    """Scores m2's preview and answer 0.8 and m1's 0.3, by the number they were shown as."""

    def reply(request: StreamRequest) -> Reply:
        text = message_text(request.messages[-1])
        shown = list(shown_candidates(text, "Answer").items())
        scores = [
            {"answer": int(n), "reason": "ok", "relevance": s, "coverage": s, "faithfulness": s}
            for n, body in shown
            for s in [0.8 if "2" in body else 0.3]
        ]
        return Reply(json.dumps({"scores": scores}))

    return ScriptedProvider(name="judge", default=reply)


async def race_once(state: Path) -> None:
    configs = {
        "m1": config("m1", ScriptedProvider(["plan 1", "answer 1"], name="m1")),
        "m2": config("m2", ScriptedProvider(["plan 2", "answer 2"], name="m2")),
        "j": config("j", judge()),
    }
    result = await run_bandit_race(
        "What is 2 + 2?",
        ["m1", "m2"],
        BanditOptions(judge_model="j", state=str(state), dim=32, top_k=2),
        configs=configs,
    )
    assert result.status == "ok" and set(result.rewards) == {"m1", "m2"}


async def test_run_bandit_race_persists_to_the_state_file(tmp_path: Path):
    state = tmp_path / "router.sqlite"
    await race_once(state)
    stored = SQLiteStateStore(state)
    (namespace,) = stored.namespaces()
    # m2 answered (its graded answer weighs 1); m1 was previewed (its preview score weighs 0.5)
    assert {arm: s.n for arm, s in stored.load(namespace).items()} == {"m1": 0.5, "m2": 1.0}


async def test_bad_options_fail_before_any_model_call(tmp_path: Path):
    with pytest.raises(UserError, match="No agent models"):
        await run_bandit_race("q", [" "], BanditOptions(state=str(tmp_path / "s.sqlite")))
    with pytest.raises(UnknownModelError):
        await run_bandit_race(
            "q", ["nosuch:model"], BanditOptions(state=str(tmp_path / "s.sqlite"))
        )
    with pytest.raises(UserError, match="cost_weight"):
        await run_bandit_race(
            "q",
            ["m"],
            BanditOptions(cost_weight=-1),
            configs={"m": config("m", ScriptedProvider())},
        )


async def test_route_show_export_and_reset(tmp_path: Path):
    state = tmp_path / "router.sqlite"
    await race_once(state)
    runner = CliRunner()
    shown = runner.invoke(app, ["show", "--state", str(state), "--json"])
    assert shown.exit_code == 0, shown.output
    summary = json.loads(shown.output)
    (arms,) = summary.values()
    assert arms["m2"]["n"] == 1.0 and arms["m2"]["mean_reward"] > arms["m1"]["mean_reward"]
    assert arms["m1"]["n"] == 0.5
    out = tmp_path / "export.json"
    exported = runner.invoke(app, ["export", "--state", str(state), "-o", str(out)])
    assert exported.exit_code == 0
    data = json.loads(out.read_text())
    assert len(next(iter(data["namespaces"].values()))["m1"]["xr"]) == 32
    reset = runner.invoke(app, ["reset", "--state", str(state), "--yes"])
    assert reset.exit_code == 0
    assert json.loads(runner.invoke(app, ["show", "--state", str(state), "--json"]).output) == {}


def test_route_show_without_state_says_how_to_create_it(tmp_path: Path):
    result = CliRunner().invoke(app, ["show", "--state", str(tmp_path / "none.sqlite")])
    assert result.exit_code == 2
    assert "race with --strategy bandit first" in result.output


def test_parallel_agents_rejects_bad_flags_with_usage_errors(tmp_path: Path):
    runner = CliRunner()
    missing = runner.invoke(parallel_agents_app, ["q"])
    assert missing.exit_code == 2 and "--agent-models" in missing.output
    bad = runner.invoke(parallel_agents_app, ["q", "--agent-models", "a:b", "--strategy", "greedy"])
    assert bad.exit_code == 2 and "bandit or baseline" in bad.output
    unknown = runner.invoke(
        parallel_agents_app,
        ["q", "--agent-models", "nosuch:model", "--bandit-state", str(tmp_path / "s.sqlite")],
    )
    assert unknown.exit_code == 2 and "nosuch" in unknown.output


async def test_verify_python_is_refused_before_any_call_when_no_sandbox_can_be_made(tmp_path: Path):
    from phi_core.errors import SandboxUnavailableError
    from phi_core.sandbox import Sandbox, set_default_sandbox

    provider = ScriptedProvider(default="def f(): return 1")
    set_default_sandbox(Sandbox(search_path=""))
    try:
        with pytest.raises(SandboxUnavailableError, match="bubblewrap"):
            await run_bandit_race(
                "Write f.",
                ["m"],
                BanditOptions(state=str(tmp_path / "s.sqlite"), verify="python"),
                configs={"m": config("m", provider)},
            )
    finally:
        set_default_sandbox(None)
    assert provider.calls == 0
