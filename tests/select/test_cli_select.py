"""``phi select SPEC.toml`` end to end with a pure-Python agent (no model calls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from phi_core.cli.select import command

AGENT = """
QUALITY = {"scripted:a": 0.2, "scripted:b": 0.9, "scripted:c": 0.5}

def agent(models, question):
    skill = QUALITY[models["solver"].spec]
    return "yes" if (int(question[1:]) % 10) / 10 < skill else "no"

def scorer(expected, actual):
    return float(expected == actual)
"""


def make_app() -> typer.Typer:
    app = typer.Typer()
    app.command()(command)
    return app


def write_spec(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "data.jsonl").write_text(
        "\n".join(json.dumps({"input": f"q{i}", "expected": "yes"}) for i in range(40))
    )
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'dataset = "data.jsonl"\n'
        'agent = "agent.py:agent"\n'
        'scorer = "agent.py:scorer"\n'
        'algorithm = "brute_force"\n'
        "seed = 1\n"
        "cache = false\n"
        + extra
        + '\n[steps]\nsolver = ["openai:a", "openai:b", "openai:c"]\n'.replace(
            "openai:", "scripted:"
        )
    )
    return spec


def test_phi_select_prints_the_ranked_table_and_writes_exports(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    result = CliRunner().invoke(
        make_app(),
        [
            str(spec),
            "--csv",
            str(tmp_path / "r.csv"),
            "--out-json",
            str(tmp_path / "r.json"),
            "--plot",
            str(tmp_path / "p.png"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "best: solver=scripted:b" in result.output
    assert "120/120 evaluations" in result.output
    assert json.loads((tmp_path / "r.json").read_text())["best"]["models"] == {
        "solver": "scripted:b"
    }
    assert (tmp_path / "r.csv").exists() and (tmp_path / "p.png").exists()


@pytest.mark.parametrize("algorithm", ["paired_race", "regret_race_thrifty"])
def test_phi_select_json_output_and_algorithm_override(tmp_path: Path, algorithm: str) -> None:
    spec = write_spec(tmp_path)
    result = CliRunner().invoke(make_app(), [str(spec), "--json", "--algorithm", algorithm])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["algorithm"] == algorithm
    assert payload["best"]["name"] == "solver=scripted:b"


def test_failed_evaluations_are_reported_once_with_what_raised(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    agent = tmp_path / "agent.py"
    agent.write_text(
        agent.read_text().replace(
            "    skill = QUALITY",
            '    if question == "q7" and models["solver"].spec == "scripted:c":\n'
            '        raise ValueError("no answer for q7")\n'
            "    skill = QUALITY",
        )
    )
    # a real process: Python's last-resort log handler (which pytest's own handlers replace
    # in-process) would print the library's warning a second time
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    run = subprocess.run(
        [sys.executable, "-c", "from phi_core.cli import main; main()", "select", str(spec)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "best: solver=scripted:b" in run.stdout
    output = run.stdout + run.stderr
    assert output.count("1 of 120 evaluations failed") == 1, output
    assert "(ValueError x1; first: solver=scripted:c on dataset item 7:" in run.stderr
    assert "no answer for q7" in run.stderr


def test_a_bad_spec_names_the_file_and_key(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, extra='colour = "blue"')
    result = CliRunner().invoke(make_app(), [str(spec)])
    assert result.exit_code == 2
    assert "colour" in result.output and "spec.toml" in result.output


def test_a_bad_dataset_line_names_the_line(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    (tmp_path / "data.jsonl").write_text('{"input": "q", "expected": "yes"}\n{"input": "q2"}\n')
    result = CliRunner().invoke(make_app(), [str(spec)])
    assert result.exit_code == 2
    assert "data.jsonl:2" in result.output


async def test_the_prompt_chain_agent_feeds_each_step_the_input_and_earlier_replies() -> None:
    from phi_core.config import prompt_chain
    from phi_core.providers.base import ModelConfig
    from phi_core.select import MeteredModel
    from phi_core.testing import Reply, ScriptedProvider

    planner_provider = ScriptedProvider(default=Reply("PLAN"))
    solver_provider = ScriptedProvider(default=Reply("ANSWER"))
    models = {
        "planner": MeteredModel(
            ModelConfig(provider="scripted", id="p", api="scripted"), provider=planner_provider
        ),
        "solver": MeteredModel(
            ModelConfig(provider="scripted", id="s", api="scripted"), provider=solver_provider
        ),
    }
    chain = prompt_chain({"planner": "plan for {input}", "solver": "{input} using {planner}"})
    assert await chain(models, "Q") == "ANSWER"
    assert planner_provider.requests[0].messages[0].content[0].text == "plan for Q"  # type: ignore[union-attr]
    assert solver_provider.requests[0].messages[0].content[0].text == "Q using PLAN"  # type: ignore[union-attr]


def test_timeout_stops_a_slow_run_and_reports_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import time\n"
        + agent.read_text().replace(
            "    skill = QUALITY",
            '    if question == "q3" and models["solver"].spec == "scripted:b":\n'
            "        time.sleep(2)\n"
            "    skill = QUALITY",
        )
    )
    result = CliRunner().invoke(make_app(), [str(spec), "--timeout", "0.5", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    (late,) = [r for r in payload["datapoints"] if r["status"] != "ok"]
    assert (late["combination"], late["datapoint"], late["status"]) == (
        "solver=scripted:b",
        3,
        "timeout",
    )
    assert "ran longer than timeout=0.5 s" in late["error"]


def test_a_folder_as_an_export_path_is_refused_before_anything_runs(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    (tmp_path / "out").mkdir()
    result = CliRunner().invoke(
        make_app(),
        [str(spec), "--csv", str(tmp_path / "out"), "--out-json", str(tmp_path / "r.json")],
    )
    assert result.exit_code == 2
    assert "Is a directory" in result.output and "finished" not in result.output
    assert not (tmp_path / "r.json").exists()


def test_an_export_that_fails_after_the_run_keeps_the_result_and_the_other_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phi_core.errors import UserError
    from phi_core.runlog import RunLog
    from phi_core.select import SelectionResult

    def broken(self: SelectionResult, path: object) -> None:
        raise UserError("Cannot write 'r.csv': No space left on device; pass a writable file path.")

    monkeypatch.setattr(SelectionResult, "to_csv", broken)
    spec = write_spec(tmp_path)
    result = CliRunner().invoke(
        make_app(),
        [str(spec), "--csv", str(tmp_path / "r.csv"), "--out-json", str(tmp_path / "r.json")],
    )
    assert result.exit_code == 2
    assert "best: solver=scripted:b" in result.output  # the table and the pick are shown
    assert (
        "No space left on device" in result.output
        and "The selection itself finished" in result.output
    )
    assert json.loads((tmp_path / "r.json").read_text())["best"]["models"] == {
        "solver": "scripted:b"
    }
    assert [r.kind for r in RunLog().list_runs()] == ["select"]  # and it is in `phi logs`


def test_a_dataset_that_is_not_utf8_names_the_file_and_line(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    (tmp_path / "data.jsonl").write_bytes(b'{"input": "a", "expected": "b"}\n\xff{"input": "c"}\n')
    result = CliRunner().invoke(make_app(), [str(spec)])
    assert result.exit_code == 2, result.output
    assert "data.jsonl:2" in result.output and "not UTF-8" in result.output


def test_a_bad_command_line_override_is_not_blamed_on_the_spec_file(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    result = CliRunner().invoke(make_app(), [str(spec), "-a", "nosuch"])
    assert result.exit_code == 2
    assert "key `algorithm`: 'nosuch', given in place of the file's value" in result.output
    assert "spec.toml" not in result.output  # the file's own algorithm line is fine


def test_cost_and_latency_weights_come_from_the_spec_or_the_command_line(tmp_path: Path) -> None:
    """The README's `cost_weight` / `latency_weight` are spec keys and options, weighting the
    objective of the search; a negative weight is a located error."""
    spec = write_spec(tmp_path, "cost_weight = 0.25\n")
    done = CliRunner().invoke(make_app(), [str(spec), "--json", "--latency-weight", "0.5"])
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout[done.stdout.index("{") :])
    assert (result["cost_weight"], result["latency_weight"]) == (0.25, 0.5)
    assert result["best"]["objective"] is not None  # the search ranked by the weighted objective
    bad = write_spec(tmp_path, "latency_weight = -1\n")
    refused = CliRunner().invoke(make_app(), [str(bad)])
    assert refused.exit_code == 2
    assert "spec.toml:7" in refused.output and "latency_weight" in refused.output
