"""Output that behaves: `--version`, `-o text|json|jsonl|markdown|answer` and `-a`, tables that
fit a terminal and print whole values when piped."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from phi_core import __version__
from phi_core.cli import app
from phi_core.cli._output import print_table

from ..providers.fakes.openai_wire import text_reply

SCRIPT = {
    "scripted:a": {"default": "Short answer."},
    "scripted:b": {"default": "The winning answer, in full."},
    "scripted:judge": {"default": "2"},
    "scripted:down": {"default": {"fail": "auth", "message": "revoked"}},
}
RACE = ["-m", "scripted:a", "-m", "scripted:b", "--judge", "scripted:judge"]


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # widths are the terminal's or the pipe's


def phi(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_version_prints_the_package_version() -> None:
    shown = phi("--version")
    assert shown.exit_code == 0 and shown.stdout.strip() == f"phi {__version__}"


def test_answer_only_prints_just_the_winners_text(script: str) -> None:
    for flag in (["-a"], ["--answer-only"], ["-o", "answer"]):
        raced = phi("race", "Q?", *RACE, *flag, "--script", script)
        assert raced.exit_code == 0, raced.output
        assert raced.stdout == "The winning answer, in full.\n"
    ran = phi("run", "Q?", "-m", "scripted:a", "-a", "--script", script)
    assert ran.stdout == "Short answer.\n" and ran.stderr == ""


def test_answer_only_with_no_winner_prints_nothing_and_says_why_on_stderr(script: str) -> None:
    failed = phi("race", "Q?", "-m", "scripted:down", "-s", "pick-first", "-a", "--script", script)
    assert failed.exit_code == 1 and failed.stdout == ""
    assert "No answer" in failed.stderr and "revoked" in failed.stderr


def test_json_is_the_result_object_alone(script: str) -> None:
    raced = phi("race", "Q?", *RACE, "-o", "json", "--script", script)
    assert raced.exit_code == 0, raced.output
    result = json.loads(raced.stdout)  # one object, not JSON lines
    assert result["type"] == "race_result" and result["winner"]["name"] == "scripted:b"
    assert result["run_id"] and result["conversation_id"]
    ran = json.loads(phi("run", "Q?", "-m", "scripted:a", "-o", "json", "--script", script).stdout)
    assert ran["type"] == "run_result" and ran["text"] == "Short answer."


def test_jsonl_equals_the_json_flag(script: str) -> None:
    a = phi("race", "Q?", *RACE, "-o", "jsonl", "--script", script).stdout.splitlines()
    b = phi("race", "Q?", *RACE, "--json", "--script", script).stdout.splitlines()
    assert [json.loads(x)["type"] for x in a] == [json.loads(x)["type"] for x in b]


def test_markdown_has_the_winner_the_why_the_branches_and_the_others_answers(
    script: str,
) -> None:
    raced = phi("race", "Q?", *RACE, "-o", "markdown", "--script", script)
    assert raced.exit_code == 0, raced.output
    text = raced.stdout
    assert text.startswith("## Winner: scripted:b (scripted:b)\n\nThe winning answer, in full.")
    assert "**Why:**" in text and "| branch | model | status |" in text
    assert "| ★ scripted:b | scripted:b | ok |" in text
    assert "### scripted:a (scripted:a) — ok\n\nShort answer." in text


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["-o", "yaml"], "Unknown output mode 'yaml'"), (["-o", "json", "-a"], "Choose one output")],
)
def test_a_bad_or_double_output_choice_is_a_usage_error(
    script: str, flags: list[str], message: str
) -> None:
    refused = phi("race", "Q?", *RACE, *flags, "--script", script)
    assert refused.exit_code == 2 and message in refused.stderr and refused.stdout == ""


def test_piped_models_table_prints_every_value_whole() -> None:
    shown = phi("models")  # CliRunner's stdout is not a terminal
    assert shown.exit_code == 0
    assert "…" not in shown.stdout
    assert "anthropic:claude-haiku-4-5" in shown.stdout
    widest = max(len(line) for line in shown.stdout.splitlines())
    assert widest > 80  # as wide as the values need, not cut to a default width
    for line in shown.stdout.splitlines():
        if "openai:gpt-4o-mini " in line:
            assert "OPENAI_API_KEY missing" in line  # one row, one line


def test_a_table_fits_an_80_column_terminal_by_wrapping_not_cutting() -> None:
    table = Table()
    for name in ("combination", "accuracy", "notes"):
        table.add_column(name)
    long = "planner=anthropic:claude-sonnet-4-5,solver=openai:gpt-4o-mini@temperature=0.7"
    table.add_row(long, "62.5%", "pareto best " * 4)
    out = io.StringIO()
    print_table(Console(file=out, width=80, force_terminal=True, color_system=None), table)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in out.getvalue() and "62.5%" in out.getvalue()
    joined = "".join(line.split("│")[1].strip() for line in lines if line.startswith("│"))
    assert long in joined  # wrapped over lines, every character kept


def test_piped_select_table_keeps_combination_names_and_accuracies(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(
        "def agent(models, q):\n    return 'yes' if models['solver'].spec.endswith('b') else 'no'\n"
    )
    (tmp_path / "data.jsonl").write_text(
        "\n".join(json.dumps({"input": f"q{i}", "expected": "yes"}) for i in range(3))
    )
    long_a = "scripted:a-model-with-a-rather-long-name-that-would-not-fit"
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'dataset = "data.jsonl"\nagent = "agent.py:agent"\nscorer = "exact"\n'
        f'algorithm = "brute_force"\ncache = false\n[steps]\nsolver = ["{long_a}", "scripted:b"]\n'
    )
    shown = phi("select", str(spec), "--no-log")
    assert shown.exit_code == 0, shown.output
    assert "…" not in shown.stdout
    assert f"solver={long_a}" in shown.stdout and "100.0%" in shown.stdout


def test_printed_answers_are_the_models_own_while_the_log_keeps_a_redacted_copy(
    tmp_path: Path,
) -> None:
    answer = "Set Authorization: Bearer abcdefgh12345678 in the header."
    path = tmp_path / "echo.json"
    path.write_text(json.dumps({"scripted:echo": {"default": answer}}))
    for flags in (["-a"], ["-o", "markdown"]):
        shown = phi(
            "race", "How?", "-m", "scripted:echo", "-s", "pick-first", *flags, "--script", str(path)
        )
        assert answer in shown.stdout
    logged = json.loads(phi("logs", "show", "--json").stdout)
    assert "abcdefgh12345678" not in logged["text"] and "[REDACTED]" in logged["text"]


class _Compat(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint answering every chat call with one streamed reply."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b"".join(text_reply("Paris."))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def compat_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Compat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("output", ["text", "markdown"])
def test_a_token_in_an_endpoint_url_is_redacted_in_race_text_and_markdown(
    compat_url: str, output: str
) -> None:
    secret = "SECRETTOKEN1234567"
    shown = phi(
        "race", "Capital?", "-m", f"openai-compat:m1@{compat_url}?api_key={secret}",
        "-m", f"openai-compat:m2@{compat_url}", "-s", "consensus", "-o", output, "--no-log",
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    assert secret not in shown.output
    assert "api_key=[REDACTED]" in shown.stdout and "Paris." in shown.stdout
