"""`phi logs` and the run log as the commands use it: every race, run and selection is
recorded (unless --no-log, PHI_NO_LOG or `phi logs off`), listed, filtered and shown whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.runlog import RunLog, RunRecord, default_log_path

SCRIPT = {
    "scripted:a": {"default": "Entanglement links two particles."},
    "scripted:b": {"default": {"text": "Measuring one tells you about the other.", "chunks": 3}},
    "scripted:judge": {"default": "2"},
    "scripted:broken": [
        {"fail": "auth", "message": "Incorrect API key: sk-live-SECRET0123456789abcd"}
    ],
}
RACE = ["-m", "scripted:a", "-m", "scripted:b", "--judge", "scripted:judge"]


def phi(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_race_is_logged_and_phi_logs_lists_and_shows_it(script: str) -> None:
    raced = phi("race", "What is entanglement?", *RACE, "--json", "--script", script)
    assert raced.exit_code == 0, raced.output
    result = lines(raced.stdout)[-1]
    run_id = result["run_id"]

    listed = phi("logs", "--json")
    assert listed.exit_code == 0, listed.output
    (row,) = lines(listed.stdout)
    assert row["id"] == run_id and row["conversation_id"] == result["conversation_id"]
    assert row["kind"] == "race" and row["winner"] == "scripted:b"
    assert [b["text"] for b in row["branches"]] == [
        "Entanglement links two particles.",
        "Measuring one tells you about the other.",
    ]
    assert "messages" not in row  # listings leave out the history

    table = phi("logs")
    assert run_id in table.stdout and "What is entanglement?" in table.stdout

    shown = phi("logs", "show", run_id[:12])  # a prefix is enough
    assert shown.exit_code == 0, shown.output
    for part in (
        "What is entanglement?",
        "Entanglement links two particles.",
        "Measuring one tells you about the other.",
        "Winner: scripted:b",
        "judge: scripted:judge",
    ):
        assert part in shown.stdout
    whole = json.loads(phi("logs", "show", run_id, "--json").stdout)
    assert [m["role"] for m in whole["messages"]] == ["user", "assistant"]
    markdown = phi("logs", "show", "-o", "markdown").stdout  # the newest run
    assert markdown.startswith("## Winner: scripted:b")


def test_filters_pick_runs_by_model_strategy_kind_text_and_date(script: str) -> None:
    phi("race", "first about cats", *RACE, "--script", script)
    phi("race", "second about dogs", "-m", "scripted:a", "-s", "pick-first", "--script", script)
    phi("run", "third about birds", "-m", "scripted:b", "--script", script)

    def prompts(*filters: str) -> list[str]:
        out = phi("logs", "--json", *filters)
        assert out.exit_code == 0, out.output
        return [r["prompt"] for r in lines(out.stdout)]

    assert prompts() == ["third about birds", "second about dogs", "first about cats"]
    assert prompts("-n", "1") == ["third about birds"]
    assert prompts("-m", "scripted:b") == ["third about birds", "first about cats"]
    assert prompts("-s", "pick-first") == ["second about dogs"]
    assert prompts("--kind", "run") == ["third about birds"]
    assert prompts("-q", "dogs") == ["second about dogs"]
    assert prompts("--since", "1h") == prompts()
    assert prompts("--until", "2001-01-01") == []
    bad = phi("logs", "--since", "last tuesday")
    assert bad.exit_code == 2 and "an age" in bad.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "99999999999999999999"], "-n/--count must be at most 9223372036854775807"),
        (["list", "-n", "9223372036854775808"], "-n/--count must be at most"),
        (["--since", "99999999d"], "The age '99999999d' reaches back before the year 1"),
        (["--until", "99999999d"], "The age '99999999d' reaches back before the year 1"),
        (["--until", "9999999999w"], "The age '9999999999w' reaches back before the year 1"),
        (["--since", "99999999999999999999999999s"], "reaches back before the year 1"),
        (["--since", "-5d"], "cannot be negative, got '-5d'"),
        (["--since", "5y"], "Cannot read '5y' as a time"),
        (["--until", "2026-13-45"], "Cannot read '2026-13-45' as a time"),
        (["--since", "9999-12-31T23:59:59-05:00"], "outside the years 1 to 9999"),
        (["list", "--until", "0001-01-01T00:00+05:00"], "outside the years 1 to 9999"),
    ],
)
def test_a_count_or_time_out_of_range_is_a_usage_error_not_a_traceback(
    args: list[str], message: str
) -> None:
    with RunLog() as log:
        log.write(RunRecord(kind="run", prompt="logged", status="ok"))
    result = phi("logs", *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: ") and message in result.stderr
    assert "Traceback" not in result.output and result.stdout == ""


def test_the_edges_of_the_calendar_and_of_the_count_still_list_runs() -> None:
    with RunLog() as log:
        log.write(RunRecord(kind="run", prompt="logged", status="ok"))
    for args in (
        ["-n", "9223372036854775807"],
        ["--since", "0001-01-01", "--until", "9999-12-31"],
        ["--until", "0d"],
    ):
        result = phi("logs", "--json", *args)
        assert result.exit_code == 0, result.output
        assert [r["prompt"] for r in lines(result.stdout)] == ["logged"]
    assert lines(phi("logs", "--json", "--since", "0d").stdout) == []


def test_no_log_flag_env_and_logs_off_each_keep_a_run_out(script: str) -> None:
    phi("run", "kept", "-m", "scripted:a", "--script", script)
    phi("run", "skipped by flag", "-m", "scripted:a", "--no-log", "--script", script)
    phi("run", "skipped by env", "-m", "scripted:a", "--script", script, env={"PHI_NO_LOG": "1"})
    off = phi("logs", "off")
    assert off.exit_code == 0 and "off" in off.stdout
    assert "off" in phi("logs", "status").stdout
    phi("run", "skipped while off", "-m", "scripted:a", "--script", script)
    phi("logs", "on")
    phi("run", "kept again", "-m", "scripted:a", "--script", script)
    prompts = [r["prompt"] for r in lines(phi("logs", "--json").stdout)]
    assert prompts == ["kept again", "kept"]
    status = phi("logs", "status", "--json")
    info = json.loads(status.stdout)
    assert info["enabled"] and info["runs"] == 2 and info["path"] == str(default_log_path())
    assert phi("logs", "path").stdout.strip() == str(default_log_path())


def test_logs_before_anything_was_logged_and_an_unknown_id_say_what_to_do() -> None:
    empty = phi("logs")
    assert empty.exit_code == 0 and "No runs logged yet" in empty.stderr
    RunLog().close()
    missing = phi("logs", "show", "NOPE")
    assert missing.exit_code == 2 and "`phi logs` lists the runs" in missing.stderr


def test_a_bandit_race_is_logged_with_its_router_decisions(script: str, tmp_path: Path) -> None:
    rubric = {
        "scores": [
            {"answer": n, "reason": "r", "relevance": s, "coverage": s, "faithfulness": s}
            for n, s in ((1, 0.9), (2, 0.3))
        ]
    }
    path = Path(script)
    path.write_text(json.dumps({**SCRIPT, "scripted:judge": {"default": json.dumps(rubric)}}))
    raced = phi(
        "race",
        "Q?",
        *RACE,
        "-s",
        "bandit",
        "--state",
        str(tmp_path / "r.sqlite"),
        "--top-k",
        "2",
        "--script",
        script,
    )
    assert raced.exit_code == 0, raced.output
    record = json.loads(phi("logs", "show", "--json").stdout)
    assert record["kind"] == "bandit"
    assert [e["type"] for e in record["route_events"]] == ["route_decision", "route_update"]
    shown = phi("logs", "show").stdout
    assert "router decision" in shown and "router update" in shown


def test_a_selection_is_logged(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(
        "def agent(models, q):\n    return 'yes' if models['solver'].spec.endswith('b') else 'no'\n"
    )
    (tmp_path / "data.jsonl").write_text(
        "\n".join(json.dumps({"input": f"q{i}", "expected": "yes"}) for i in range(3))
    )
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'dataset = "data.jsonl"\nagent = "agent.py:agent"\nscorer = "exact"\n'
        'algorithm = "brute_force"\ncache = false\n[steps]\nsolver = ["scripted:a", "scripted:b"]\n'
    )
    selected = phi("select", str(spec))
    assert selected.exit_code == 0, selected.output
    (row,) = lines(phi("logs", "--json", "--kind", "select").stdout)
    assert row["winner"] == "solver=scripted:b" and row["prompt"] == f"phi select {spec}"
    assert phi("select", str(spec), "--no-log").exit_code == 0
    assert len(lines(phi("logs", "--json").stdout)) == 1


def test_a_piped_list_cuts_a_long_prompt_and_show_prints_it_whole() -> None:
    long_prompt = "word " * 200_000  # a megabyte: one row must not widen every other
    with RunLog() as log:
        long_id = log.write(RunRecord(kind="run", prompt=long_prompt, status="ok")).id
        log.write(RunRecord(kind="run", prompt="short question", status="ok"))
    listed = phi("logs")  # not a terminal
    assert listed.exit_code == 0, listed.output
    rows = listed.stdout.splitlines()
    assert max(len(row) for row in rows) < 250
    assert "word word" in listed.stdout and "…" in listed.stdout
    assert "short question" in listed.stdout
    shown = phi("logs", "show", long_id)
    assert shown.stdout.count("word") == 200_000


def test_logs_on_says_that_phi_no_log_still_keeps_runs_out() -> None:
    turned = phi("logs", "on", env={"PHI_NO_LOG": "1"})
    assert turned.exit_code == 0
    assert "still not recorded" in turned.stdout and "PHI_NO_LOG" in turned.stdout
    assert "Logging is on" not in turned.stdout
    assert "Logging is on" in phi("logs", "on").stdout


def test_a_run_the_log_cannot_record_warns_once_and_still_answers(
    script: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def full(self: RunLog, record: RunRecord) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunLog, "write", full)
    raced = phi("race", "What is entanglement?", *RACE, "--script", script)
    assert raced.exit_code == 0, raced.output
    # the command's own warning, and no second copy from the recorder's logger (which Python's
    # last-resort handler would print to the terminal as well)
    assert raced.stderr.count("this run was not logged") == 1
    assert "No space left on device" in raced.stderr
    assert not [r for r in caplog.records if "could not record" in r.getMessage()]
