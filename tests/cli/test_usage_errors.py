"""Every usage mistake is exit 2 with a message saying what to write instead; flags that would do
nothing say so; `--system` applies to the default race."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.config import DEFAULT_BRANCHES
from phi_core.routing import SQLiteStateStore

PREVIEW_SCORES = {
    "scores": [
        {"answer": n, "reason": "r", "relevance": s, "coverage": s, "faithfulness": s}
        for n, s in ((1, 0.9), (2, 0.2))
    ]
}
SCRIPT = {
    "scripted:a": {"default": "Answer A."},
    "scripted:b": {"default": "Answer B."},
    "scripted:judge": {"default": json.dumps(PREVIEW_SCORES)},
}


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PHI_SCRIPT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({**SCRIPT, "local:smollm2": {"default": "1"}}))
    return str(path)


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_an_empty_branch_list_is_exit_2_instead_of_the_default_race(tmp_path: Path) -> None:
    race = tmp_path / "race.toml"
    race.write_text("branches = []\n")
    code, out, err = invoke("race", "Q?", "--config", str(race))
    assert code == 2 and out == ""
    assert f"{race}:1, key `branches`" in err and "remove the key" in err


def test_a_missing_judge_key_is_exit_2_without_a_traceback(script: str) -> None:
    code, _, err = invoke(
        "race", "Q?", "-m", "scripted:a", "--judge", "openai:gpt-4o", "--script", script
    )
    assert code == 2 and "OPENAI_API_KEY" in err
    assert "Traceback" not in err and "ExceptionGroup" not in err


def test_a_bare_model_name_resolves_through_the_catalog_to_its_provider() -> None:
    # `gpt-4o` is OpenAI's, so the missing OpenAI key is what stops this race.
    code, _, err = invoke("race", "Q?", "-m", "gpt-4o")
    assert code == 2 and "OPENAI_API_KEY" in err and "phi keys set openai" in err


def test_system_on_the_default_race_applies_to_every_branch(script: str) -> None:
    code, out, err = invoke(
        "race", "Q?", "--system", "Answer in French.", "--json", "--script", script
    )
    assert code == 0, err
    requests = [e for e in map(json.loads, out.splitlines()) if e["type"] == "turn_request"]
    sent = {r["payload"]["system_prompt"] for r in requests}
    for branch in DEFAULT_BRANCHES:
        assert f"Answer in French.\n\n{branch.system_prompt}" in sent
    assert "warning" not in err


def test_system_that_every_branch_overrides_warns(script: str) -> None:
    code, _, err = invoke(
        "race", "Q?", "-m", "scripted:a@system=x", "-m", "scripted:b@system=y",
        "--system", "S", "--strategy", "vote", "--script", script,
    )  # fmt: skip
    assert code == 0
    assert "warning: --system has no effect: every branch sets its own." in err


def test_bandit_flags_on_a_parallel_race_warn(script: str, tmp_path: Path) -> None:
    code, _, err = invoke(
        "race", "Q?", "-m", "scripted:a", "--strategy", "vote", "--alpha", "2",
        "--state", str(tmp_path / "s.db"), "--script", script,
    )  # fmt: skip
    assert code == 0
    assert "warning: --alpha, --state only apply to --strategy bandit; ignored." in err
    assert not (tmp_path / "s.db").exists()
    code, _, err = invoke(
        "race", "Q?", "-m", "scripted:a", "--strategy", "vote", "--alpha", "2", "--script", script
    )  # fmt: skip
    assert "warning: --alpha only applies to --strategy bandit; ignored." in err


def learned_state(tmp_path: Path, script: str) -> tuple[str, list[str]]:
    """A router state a bandit race has written, and its namespaces."""
    state = str(tmp_path / "router.sqlite")
    code, _, err = invoke(
        "race", "Q?", "-m", "scripted:a", "-m", "scripted:b", "--strategy", "bandit",
        "--judge", "scripted:judge", "--state", state, "--script", script,
    )  # fmt: skip
    assert code == 0, err
    namespaces = SQLiteStateStore(state).namespaces()
    assert namespaces
    return state, namespaces


def test_route_reset_of_an_unknown_namespace_is_exit_2_listing_the_real_ones(
    tmp_path: Path, script: str
) -> None:
    state, before = learned_state(tmp_path, script)
    code, out, err = invoke("route", "reset", "--namespace", "nope", "-y", "--state", state)
    assert code == 2 and "Reset" not in out
    assert "There is no namespace 'nope'" in err and repr(before[0]) in err
    assert SQLiteStateStore(state).namespaces() == before  # nothing was reset


def test_route_reset_without_a_terminal_says_to_pass_yes_and_resets_nothing(
    tmp_path: Path, script: str
) -> None:
    state, before = learned_state(tmp_path, script)
    code, out, err = invoke("route", "reset", "--state", state)  # stdin is not a terminal
    assert code == 2 and out == ""
    assert "pass -y/--yes" in err and "Aborted" not in err
    assert SQLiteStateStore(state).namespaces() == before
    code, out, _ = invoke("route", "reset", "--state", state, "-y")
    assert code == 0 and "Reset every namespace" in out


def test_route_export_to_an_unwritable_path_is_exit_2(tmp_path: Path, script: str) -> None:
    state = str(tmp_path / "router.sqlite")
    invoke(
        "race", "Q?", "-m", "scripted:a", "-m", "scripted:b", "--strategy", "bandit",
        "--judge", "scripted:judge", "--state", state, "--script", script,
    )  # fmt: skip
    code, _, err = invoke("route", "export", "--state", state, "-o", str(tmp_path))
    assert code == 2 and "Cannot write" in err and "Is a directory" in err
    assert "Traceback" not in err
    # a missing folder is made, as for the selection's exports
    code, out, _ = invoke(
        "route", "export", "--state", state, "-o", str(tmp_path / "no" / "x.json")
    )
    assert code == 0 and "Wrote" in out
    assert json.loads((tmp_path / "no" / "x.json").read_text())["version"] == 1


def test_select_spec_with_a_word_for_a_number_is_exit_2_with_file_line_key(
    tmp_path: Path,
) -> None:
    (tmp_path / "data.jsonl").write_text('{"input": "q", "expected": "a"}\n')
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'dataset = "data.jsonl"\nmax_concurrent = "four"\n[steps]\ns = ["scripted:a"]\n'
        '[prompts]\ns = "{input}"\n'
    )
    code, out, err = invoke("select", str(spec))
    assert code == 2 and out == ""
    assert f"{spec}:2, key `max_concurrent`" in err and "'four'" in err
    # a number where a table belongs: the table's keys are named
    spec.write_text(
        'dataset = "data.jsonl"\nbudget = 5\n[steps]\ns = ["scripted:a"]\n[prompts]\ns = "{input}"\n'
    )
    code, out, err = invoke("select", str(spec))
    assert code == 2 and out == ""
    assert (
        f"{spec}:2, key `budget`: expected a table with the keys deadline, max_calls, max_cost, "
        "max_evaluations, max_total_tokens (got 5)." in " ".join(err.split())
    )


def test_select_exports_to_one_file_are_refused_before_any_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data.jsonl").write_text('{"input": "q", "expected": "a"}\n')
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'dataset = "data.jsonl"\ncache = false\n[steps]\ns = ["scripted:a"]\n'
        '[prompts]\ns = "{input}"\n'
    )
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke("select", str(spec), "--out-json", "r.json", "--csv", "./r.json")
    assert code == 2 and out == "" and "evaluations" not in err
    assert "--csv and --out-json both name 'r.json'" in err and "own file" in err
    assert not (tmp_path / "r.json").exists()


def test_select_prompt_with_an_unknown_placeholder_is_refused_before_any_call(
    tmp_path: Path,
) -> None:
    (tmp_path / "data.jsonl").write_text('{"input": "q", "expected": "a"}\n')
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'dataset = "data.jsonl"\ncache = false\n[steps]\ns = ["scripted:a"]\n'
        '[prompts]\ns = "Q: {question}"\n'
    )
    code, out, err = invoke("select", str(spec))
    assert code == 2 and out == "" and "evaluations" not in err
    assert "{question}" in err and "input, expected" in err


@pytest.mark.parametrize("command", ["race", "run"])
def test_a_prompt_that_is_not_utf8_is_refused_naming_the_byte(command: str) -> None:
    # A Latin-1 terminal's "café" reaches Python as a lone surrogate (surrogateescape).
    code, out, err = invoke(command, "caf\udce9?", "-m", "scripted:a")
    assert code == 2 and out == ""
    assert "not valid UTF-8 text (byte 0xe9 at position 3)" in err


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (["scripted:a@name=x", "scripted:b@name=x"], "are both named 'x'"),
        (["a", "a"], "-m 'a' is given twice"),
        (["scripted:a@temperature=0.1,temperature=0.9"], "sets 'temperature' twice"),
        (["scripted:a@system=x,system_prompt=y"], "sets 'system_prompt' twice"),
    ],
    ids=["two -m named alike", "a race file branch twice", "a setting twice", "alias twice"],
)
def test_a_name_or_setting_given_twice_is_refused_as_a_race_file_refuses_it(
    script: str, tmp_path: Path, models: list[str], message: str
) -> None:
    race = tmp_path / "race.toml"
    race.write_text(
        '[[branches]]\nname = "a"\nmodel = "scripted:a"\n'
        '[[branches]]\nname = "b"\nmodel = "scripted:b"\n'
    )
    flags = [arg for m in models for arg in ("-m", m)]
    code, out, err = invoke("race", "Q?", "--config", str(race), *flags, "--script", script)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err
    if message.startswith("sets"):  # `phi run -m` refuses it too
        assert "give each setting once" in err
        code, _, err = invoke("run", "Q?", "-m", models[0], "--script", script, "--no-log")
        assert code == 2 and message in err
    else:
        assert "give each branch its own name" in err


@pytest.mark.parametrize("command", ["run", "race"])
def test_an_empty_prompt_suggests_the_command_that_was_typed(command: str, script: str) -> None:
    code, out, err = invoke(command, "  ", "-m", "scripted:a", "--script", script)
    assert code == 2 and out == ""
    assert f'(phi {command} "...")' in err
