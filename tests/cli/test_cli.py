"""The `phi` command through typer's CliRunner, driven by scripted providers (hidden --script)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.config import BranchSpec, RaceSpec, plan_race
from phi_core.events import AGENT_EVENT_ADAPTER
from phi_core.loop import AgentContext, agent_loop
from phi_core.testing import ScriptedProvider

KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (*KEY_VARS, "PHI_SCRIPT", "PHI_MODEL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def write_script(tmp_path: Path, script: dict[str, Any]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script), encoding="utf-8")
    return str(path)


TWO_BRANCHES = {
    "scripted:a": ["Entanglement links two particles."],
    "scripted:b": [{"text": "Measuring one particle tells you about the other.", "chunks": 3}],
    "scripted:judge": {"default": "2"},
}
RACE_ARGS = ["-m", "scripted:a", "-m", "scripted:b", "--judge", "scripted:judge"]


def json_lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


# --------------------------------------------------------------------------- race: success


def test_race_prints_each_answer_the_winner_and_the_cost_table(
    runner: CliRunner, tmp_path: Path
) -> None:
    script = write_script(tmp_path, TWO_BRANCHES)
    result = runner.invoke(app, ["race", "What is entanglement?", *RACE_ARGS, "--script", script])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Racing 2 branches" in out
    assert "Entanglement links two particles." in out
    assert "Measuring one particle tells you about the other." in out
    assert "Winner: scripted:b (strategy judge)" in out
    assert "Why:" in out
    for column in ("latency", "tokens in", "tokens out", "cost", "total", "judging"):
        assert column in out
    assert "★ scripted:b" in out


def test_json_output_is_every_event_then_one_race_result(runner: CliRunner, tmp_path: Path) -> None:
    script = write_script(tmp_path, TWO_BRANCHES)
    result = runner.invoke(app, ["race", "Q?", *RACE_ARGS, "--json", "--script", script])
    assert result.exit_code == 0, result.output
    lines = json_lines(result.stdout)
    *events, last = lines
    # Every line but the last is an AgentEvent that parses back into its pydantic type.
    parsed = [AGENT_EVENT_ADAPTER.validate_python(e) for e in events]
    types = [e.type for e in parsed]
    assert types[0] == "parallel_loop_start"
    assert types[-1] == "parallel_loop_end"
    assert types.count("agent_start") == 3  # two branches and one judge call
    assert "message_update" in types
    # Branch and judge events name their loop; race-level events name the session.
    assert all(e["loop_id"] for e in events if not e["type"].startswith("parallel_loop"))
    assert {e["session_id"] for e in events if e["type"].startswith("parallel_loop")} == {
        last["session_id"]
    }
    assert last["type"] == "race_result"
    assert set(last) >= {
        "session_id",
        "status",
        "winner",
        "decision",
        "branches",
        "judge",
        "evaluation_usage",
        "total_usage",
        "cost_usd",
        "wall_time_s",
    }
    assert last["status"] == "ok"
    assert last["winner"]["name"] == "scripted:b"
    assert last["winner"]["text"] == "Measuring one particle tells you about the other."
    assert last["decision"]["strategy"] == "judge"
    assert last["judge"] == "scripted:judge"
    assert [b["status"] for b in last["branches"]] == ["ok", "ok"]
    assert {"index", "name", "loop_id", "model", "error", "text", "latency_s", "usage"} <= set(
        last["branches"][0]
    )
    assert last["total_usage"]["total"] >= sum(b["usage"]["total"] for b in last["branches"])


def test_prompt_dash_reads_stdin(runner: CliRunner, tmp_path: Path) -> None:
    script = write_script(tmp_path, TWO_BRANCHES)
    result = runner.invoke(
        app, ["race", "-", *RACE_ARGS, "--json", "--script", script], input="from stdin?\n"
    )
    assert result.exit_code == 0, result.output
    requests = [e for e in json_lines(result.stdout) if e.get("type") == "turn_request"]
    first_user = requests[0]["payload"]["messages"][0]["content"][0]["text"]
    assert first_user == "from stdin?"


def test_a_judge_fallback_is_printed_as_one_warning_with_the_trust_line(
    runner: CliRunner, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path,
        {
            "scripted:a": ["Paris"],
            "scripted:b": ["Lyon"],
            "scripted:judge": {"default": "Both are lovely."},
        },
    )
    result = runner.invoke(app, ["race", "Capital?", *RACE_ARGS, "--script", script])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1
    assert "judge strategy fell back" in warnings[0] and "names no response" in warnings[0]
    assert "Winner: scripted:a (strategy judge)" in result.stdout  # the first successful branch
    trust = [line for line in result.stdout.splitlines() if line.startswith("Trust: ")]
    assert trust == [
        "Trust: decided by judge; no consistency or agreement figure measured; it fell back "
        "to its default rule: low trust"
    ]


def test_consensus_states_how_it_decided_and_its_agreement_share(
    runner: CliRunner, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path, {"scripted:a": ["B"], "scripted:b": ["The answer is (A)."], "scripted:c": ["A"]}
    )
    models = ["-m", "scripted:a", "-m", "scripted:b", "-m", "scripted:c"]
    args = ["race", "Which?", *models, "--strategy", "consensus", "--script", script]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Winner: scripted:c (strategy consensus)" in result.stdout
    assert "Trust: decided by consensus/letters; agreement share 67%" in result.stdout
    as_json = runner.invoke(app, [*args, "--json"])
    trust = json_lines(as_json.stdout)[-1]["decision"]["trust"]
    assert trust["how"] == "consensus/letters" and trust["agreement_share"] == pytest.approx(
        2 / 3, abs=1e-3
    )


def test_vote_strategy_needs_no_judge(runner: CliRunner, tmp_path: Path) -> None:
    script = write_script(
        tmp_path, {"scripted:a": ["Paris"], "scripted:b": ["Lyon"], "scripted:c": ["paris"]}
    )
    result = runner.invoke(
        app,
        [
            "race",
            "Capital?",
            "-m",
            "scripted:a",
            "-m",
            "scripted:b",
            "-m",
            "scripted:c",
            "--strategy",
            "vote",
            "--json",
            "--script",
            script,
        ],
    )
    assert result.exit_code == 0, result.output
    last = json_lines(result.stdout)[-1]
    assert last["judge"] is None
    assert last["decision"]["strategy"] == "vote"
    assert last["winner"]["text"].lower() == "paris"


def test_exec_vote_strategy_picks_the_code_that_behaves_like_the_others(
    runner: CliRunner, tmp_path: Path
) -> None:
    good = "```python\ndef f(x):\n    return x * 2\n\nf(3)\n```"
    same = "```python\ndef double(n):\n    return n + n\n\ndouble(5)\n```"
    bad = "```python\ndef g(x):\n    return x ** 2\n\ng(2)\n```"
    script = write_script(
        tmp_path, {"scripted:a": [bad], "scripted:b": [good], "scripted:c": [same]}
    )
    args = [
        "race", "Double it.", "-m", "scripted:a", "-m", "scripted:b", "-m", "scripted:c",
        "--strategy", "exec-vote", "--json", "--script", script,
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    last = json_lines(result.stdout)[-1]
    assert last["judge"] is None and last["decision"]["strategy"] == "exec-vote"
    assert last["decision"]["index"] == 1


def test_max_concurrency_one_runs_branches_one_after_another(
    runner: CliRunner, tmp_path: Path
) -> None:
    script = write_script(tmp_path, TWO_BRANCHES)
    result = runner.invoke(
        app,
        ["race", "Q?", *RACE_ARGS, "--max-concurrency", "1", "--json", "--script", script],
    )
    assert result.exit_code == 0, result.output
    events = json_lines(result.stdout)[:-1]
    first, second = events[0]["loop_ids"]
    order = [
        (e["type"], e["loop_id"])
        for e in events
        if e["type"] in ("agent_start", "agent_end") and e["loop_id"] in (first, second)
    ]
    assert order == [
        ("agent_start", first),
        ("agent_end", first),
        ("agent_start", second),
        ("agent_end", second),
    ]


def test_timeout_turns_a_hanging_branch_into_a_timeout_and_the_other_wins(
    runner: CliRunner, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path,
        {"scripted:a": [{"hang": "never finishes"}], "scripted:b": ["done"], "scripted:j": ["1"]},
    )
    result = runner.invoke(
        app,
        [
            "race",
            "Q?",
            "-m",
            "scripted:a",
            "-m",
            "scripted:b",
            "--judge",
            "scripted:j",
            "--timeout",
            "0.2",
            "--json",
            "--script",
            script,
        ],
    )
    assert result.exit_code == 0, result.output
    last = json_lines(result.stdout)[-1]
    assert [b["status"] for b in last["branches"]] == ["timeout", "ok"]
    assert last["winner"]["name"] == "scripted:b"
    # the streamed text view says the same as the table and the JSON
    plain = runner.invoke(
        app,
        ["race", "Q?", "-m", "scripted:a", "-m", "scripted:b", "-s", "pick-first",
         "--timeout", "0.2", "--script", script],
    )  # fmt: skip
    assert "--- scripted:a (scripted:a): timeout: it ran past its timeout" in plain.stdout


def test_branch_settings_reach_the_model_request(tmp_path: Path) -> None:
    spec = BranchSpec(model="scripted:x", system="Be terse.", temperature=0.3, max_tokens=7)
    provider = ScriptedProvider(["ok"])
    config = spec.loop_config(provider=provider, max_tokens=100, system_prompt="ignored")

    import asyncio

    asyncio.run(agent_loop("hi", AgentContext(), config))
    request = provider.requests[0]
    assert request.system_prompt == "Be terse."
    assert request.temperature == 0.3
    assert request.max_tokens == 7


def test_inline_branch_settings_are_parsed_and_shown_in_the_label(
    runner: CliRunner, tmp_path: Path
) -> None:
    script = write_script(tmp_path, {"scripted:a": ["x"], "scripted:b": ["y"], "scripted:j": ["1"]})
    result = runner.invoke(
        app,
        [
            "race",
            "Q?",
            "-m",
            "scripted:a@temperature=0.2,max_tokens=5",
            "-m",
            "scripted:b",
            "--judge",
            "scripted:j",
            "--json",
            "--script",
            script,
        ],
    )
    assert result.exit_code == 0, result.output
    events = json_lines(result.stdout)
    last = events[-1]
    assert last["branches"][0]["name"] == "scripted:a@temperature=0.2,max_tokens=5"
    payloads = [e["payload"] for e in events if e.get("type") == "turn_request"]
    assert any(p["temperature"] == 0.2 and p["max_tokens"] == 5 for p in payloads)


# --------------------------------------------------------------------------- race: failures


def test_all_branches_failing_exits_1_and_says_why(runner: CliRunner, tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        {
            "scripted:a": [{"fail": "auth", "message": "bad credentials"}],
            "scripted:b": [{"fail": "bad_request", "message": "no such model"}],
        },
    )
    result = runner.invoke(app, ["race", "Q?", *RACE_ARGS, "--script", script])
    assert result.exit_code == 1, result.output
    assert "No winner" in result.stdout
    assert "bad credentials" in result.stdout
    assert "no such model" in result.stdout


def test_one_failing_branch_still_exits_0_with_the_other_as_winner(
    runner: CliRunner, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path,
        {"scripted:a": [{"fail": "auth", "message": "bad credentials"}], "scripted:b": ["fine"]},
    )
    result = runner.invoke(app, ["race", "Q?", *RACE_ARGS, "--json", "--script", script])
    assert result.exit_code == 0, result.output
    last = json_lines(result.stdout)[-1]
    assert last["winner"]["name"] == "scripted:b"
    assert last["branches"][0]["status"] == "error"
    assert "bad credentials" in last["branches"][0]["error"]


def test_missing_api_key_is_a_usage_error_naming_the_variable(runner: CliRunner) -> None:
    result = runner.invoke(app, ["race", "Q?", "-m", "openai:gpt-4o-mini", "-m", "local:smollm2"])
    assert result.exit_code == 2
    assert "OPENAI_API_KEY" in result.stderr
    assert "local:smollm2" in result.stderr  # points at the keyless default
    assert result.stdout == ""


def test_unknown_provider_is_a_usage_error_with_a_suggestion(runner: CliRunner) -> None:
    result = runner.invoke(app, ["race", "Q?", "-m", "opnai:gpt-4o-mini"])
    assert result.exit_code == 2
    assert "Unknown provider 'opnai'" in result.stderr
    assert "Did you mean 'openai'?" in result.stderr
    listed = result.stderr.split("Known providers:", 1)[1]
    assert "openai-compat" in listed and "scripted" not in listed  # no test double offered


def test_a_bare_name_no_provider_offers_is_a_usage_error_naming_the_form(
    runner: CliRunner,
) -> None:
    result = runner.invoke(app, ["race", "Q?", "-m", "gtp-4o"])
    assert result.exit_code == 2
    assert "provider:model" in result.stderr
    assert "Did you mean 'gpt-4o'" in result.stderr


def test_unknown_inline_setting_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["race", "Q?", "-m", "scripted:a@temprature=0.2"])
    assert result.exit_code == 2
    assert "Unknown setting 'temprature'" in result.stderr


@pytest.mark.parametrize("prompt", ["", "   \n"])
def test_empty_prompt_is_a_usage_error(runner: CliRunner, prompt: str) -> None:
    result = runner.invoke(app, ["race", prompt])
    assert result.exit_code == 2
    assert "The prompt is empty" in result.stderr


def test_empty_stdin_prompt_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["race", "-"], input="")
    assert result.exit_code == 2
    assert "The prompt is empty" in result.stderr


def test_unknown_strategy_is_a_usage_error_with_a_suggestion(runner: CliRunner) -> None:
    result = runner.invoke(app, ["race", "Q?", "-m", "scripted:a", "--strategy", "judgee"])
    assert result.exit_code == 2
    assert "Unknown strategy 'judgee'" in result.stderr
    assert "Did you mean 'judge'?" in result.stderr


def test_judge_with_a_strategy_that_uses_none_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["race", "Q?", "-m", "scripted:a", "--strategy", "vote", "--judge", "scripted:j"]
    )
    assert result.exit_code == 2
    assert "judge has no effect" in result.stderr


def test_bad_flag_value_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["race", "Q?", "--max-tokens", "0"])
    assert result.exit_code == 2
    assert "max-tokens" in result.stderr


# --------------------------------------------------------------------------- config files

TOML_CONFIG = """\
strategy = "judge"
max_tokens = 50

[judge]
model = "scripted:judge"

[[branches]]
name = "terse"
model = "scripted:a"
temperature = 0.1

[[branches]]
name = "chatty"
model = "scripted:b"
system = "Explain."
"""


def test_config_file_describes_branches_and_judge(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "race.toml"
    config.write_text(TOML_CONFIG, encoding="utf-8")
    script = write_script(tmp_path, TWO_BRANCHES)
    result = runner.invoke(
        app, ["race", "Q?", "--config", str(config), "--json", "--script", script]
    )
    assert result.exit_code == 0, result.output
    last = json_lines(result.stdout)[-1]
    assert [b["name"] for b in last["branches"]] == ["terse", "chatty"]
    assert last["judge"] == "scripted:judge"
    assert last["winner"]["name"] == "chatty"
    assert ".terse.1" in last["branches"][0]["loop_id"]  # the name is the config segment


def test_model_flag_picks_a_named_branch_from_the_config(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "race.toml"
    config.write_text(TOML_CONFIG, encoding="utf-8")
    script = write_script(tmp_path, TWO_BRANCHES)
    result = runner.invoke(
        app,
        [
            "race",
            "Q?",
            "--config",
            str(config),
            "-m",
            "chatty",
            "--strategy",
            "pick-first",
            "--json",
            "--script",
            script,
        ],
    )
    assert result.exit_code == 0, result.output
    last = json_lines(result.stdout)[-1]
    assert [b["name"] for b in last["branches"]] == ["chatty"]


BAD_VALUE = {
    "race.toml": (TOML_CONFIG.replace('system = "Explain."', 'temperature = "hot"'), 15),
    "race.yaml": (
        "judge:\n  model: scripted:judge\nbranches:\n  - model: scripted:a\n"
        "  - model: scripted:b\n    temperature: hot\n",
        6,
    ),
    "race.json": (
        '{\n  "branches": [\n    {"model": "scripted:a"},\n    {\n      "model": "scripted:b",\n'
        '      "temperature": "hot"\n    }\n  ]\n}\n',
        6,
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_VALUE))
def test_bad_config_value_names_file_line_and_key(
    runner: CliRunner, tmp_path: Path, name: str
) -> None:
    text, line = BAD_VALUE[name]
    config = tmp_path / name
    config.write_text(text, encoding="utf-8")
    result = runner.invoke(app, ["race", "Q?", "--config", str(config)])
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert f"{name}:{line}" in message
    assert "key `branches[1].temperature`" in message
    assert "'hot'" in message


def test_unknown_config_key_lists_the_allowed_keys(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "race.toml"
    config.write_text('strategy = "vote"\nbranchs = []\n', encoding="utf-8")
    result = runner.invoke(app, ["race", "Q?", "--config", str(config)])
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "race.toml:2" in message
    assert "key `branchs`" in message
    assert "expected one of" in message.lower() and "branches" in message


def test_config_syntax_error_names_file_and_line(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "race.toml"
    config.write_text('strategy = "vote"\n\n[[branches]\nmodel = 1\n', encoding="utf-8")
    result = runner.invoke(app, ["race", "Q?", "--config", str(config)])
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "race.toml:3" in message
    assert "invalid TOML" in message


def test_unreadable_config_file_is_a_usage_error_naming_it(
    runner: CliRunner, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.yaml"
    result = runner.invoke(app, ["race", "Q?", "--config", str(missing)])
    assert result.exit_code == 2
    assert "nope.yaml" in result.stderr
    assert "does not exist" in result.stderr

    binary = tmp_path / "race.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    result = runner.invoke(app, ["race", "Q?", "--config", str(binary)])
    assert result.exit_code == 2
    assert "race.json" in result.stderr
    assert "not UTF-8" in result.stderr


def test_config_with_unknown_extension_is_rejected(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "race.ini"
    config.write_text("x=1", encoding="utf-8")
    result = runner.invoke(app, ["race", "Q?", "--config", str(config)])
    assert result.exit_code == 2
    assert "use .toml, .json, .yaml or .yml" in result.stderr


# --------------------------------------------------------------------------- run and models


def test_run_streams_one_agent_answer(runner: CliRunner, tmp_path: Path) -> None:
    script = write_script(tmp_path, {"scripted:a": [{"text": "Hello there.", "chunks": 3}]})
    result = runner.invoke(app, ["run", "Hi", "-m", "scripted:a", "--script", script])
    assert result.exit_code == 0, result.output
    assert result.stdout == "Hello there.\n"
    assert "scripted:a" in result.stderr and "completed" in result.stderr


def test_run_json_ends_with_the_run_result(runner: CliRunner, tmp_path: Path) -> None:
    script = write_script(tmp_path, {"scripted:a": ["Hello."]})
    result = runner.invoke(app, ["run", "Hi", "-m", "scripted:a", "--json", "--script", script])
    assert result.exit_code == 0, result.output
    *events, last = json_lines(result.stdout)
    assert events[0]["type"] == "agent_start"
    assert events[-1]["type"] == "agent_end"
    assert last == {
        "type": "run_result",
        "loop_id": events[0]["loop_id"],
        "model": "scripted:a",
        "reason": "completed",
        "error": None,
        "text": "Hello.",
        "usage": last["usage"],
        "cost_usd": 0.0,
        "run_id": last["run_id"],
        "conversation_id": last["conversation_id"],
    }
    assert last["run_id"] and last["conversation_id"]  # logged: `phi logs show RUN_ID`


def test_run_failure_exits_1_with_the_error(runner: CliRunner, tmp_path: Path) -> None:
    script = write_script(tmp_path, {"scripted:a": [{"fail": "auth", "message": "key revoked"}]})
    result = runner.invoke(app, ["run", "Hi", "-m", "scripted:a", "--script", script])
    assert result.exit_code == 1
    assert "key revoked" in result.stderr


def test_run_missing_key_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["run", "Hi", "-m", "anthropic:claude-haiku-4-5"])
    assert result.exit_code == 2
    assert "ANTHROPIC_API_KEY" in result.stderr


def test_models_shows_which_keys_are_set_but_never_their_values(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-do-not-print-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    result = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert secret not in result.output
    assert "OPENAI_API_KEY set" in result.stdout
    assert "ANTHROPIC_API_KEY missing" in result.stdout
    assert "local:smollm2" in result.stdout
    assert "openai:gpt-4o-mini" in result.stdout


def test_models_json_lists_prices_and_key_presence(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-do-not-print-0123456789")
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0
    assert "sk-test" not in result.stdout
    rows = {row["model"]: row for row in json_lines(result.stdout)}
    assert rows["openai:gpt-4o-mini"]["key_set"] is True
    assert rows["openai:gpt-4o-mini"]["output_per_mtok"] > 0
    assert rows["anthropic:claude-haiku-4-5"]["key_set"] is False
    assert rows["local:smollm2"]["key_env"] is None
    assert not any(model.startswith("scripted:") for model in rows)


def test_no_arguments_shows_help(runner: CliRunner) -> None:
    result = runner.invoke(app, [])
    assert "race" in result.output and "models" in result.output


def test_a_local_judge_is_constrained_to_answer_with_a_branch_number() -> None:
    plan = plan_race(RaceSpec(), strategy="judge")
    assert plan.judge_config is not None
    fmt = plan.judge_config.response_format
    assert fmt is not None and fmt.schema_ == {"enum": [1, 2, 3]}
    vendor_judged = plan_race(models=["scripted:a", "scripted:b"], judge="scripted:judge")
    assert vendor_judged.judge_config is not None
    assert vendor_judged.judge_config.response_format is None


def test_the_streamed_view_says_cancelled_once_and_a_spent_deadline_is_a_timeout(
    runner: CliRunner, tmp_path: Path
) -> None:
    script = tmp_path / "slow.json"
    script.write_text(
        json.dumps({"scripted:slow": {"default": {"text": "late", "delay": 5}}}), encoding="utf-8"
    )
    plain = runner.invoke(
        app,
        ["race", "Q?", "-m", "scripted:slow", "-m", "scripted:slow@temperature=0.5",
         "-s", "pick-first", "--deadline", "0.3", "--script", str(script)],
    )  # fmt: skip
    lines = [line for line in plain.stdout.splitlines() if line.startswith("--- ")]
    assert lines and all(
        line.endswith("timeout: the race's wall-clock budget (--deadline) ran out")
        for line in lines
    ), plain.stdout
    assert "cancelled: cancelled" not in plain.stdout
