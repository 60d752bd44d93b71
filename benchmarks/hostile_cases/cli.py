"""Hostile cases for the command line (issue 15 point 7), run by ``benchmarks/hostile.py``.

Each case really runs ``phi`` (or ``parallel-agents``) in a subprocess the way a careless user or
a closed pipe would, and the result is read off what happened:

* ``blocked``: the command stopped cleanly — exit code 2 with a message for a usage mistake,
  141 for a reader that went away — and printed no traceback;
* ``leaked``: a traceback reached the terminal, or the mistake was accepted (exit 0), or the
  exit code was another one.

Scripted models (``PHI_SCRIPT``) stand in for real ones; nothing needs a key or the network.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PHI = "from phi_core.cli import main; main()"
PARALLEL_AGENTS = "from phi_core.cli import parallel_agents_main as m; m()"
SLOW = {"text": "one two three four five six seven eight nine ten", "chunks": 10, "delay": 0.02}
SCRIPT = {
    "scripted:a": {"default": SLOW},
    "scripted:b": {"default": SLOW},
    "scripted:judge": {"default": "1"},
}
RACE = ["race", "Q?", "-m", "scripted:a", "-m", "scripted:b", "--judge", "scripted:judge"]
SPEC = (
    'dataset = "data.jsonl"\ncache = false\n[steps]\nsolver = ["scripted:a"]\n'
    '[prompts]\nsolver = "Q: {input}"\n'
)


@dataclass
class Case:
    klass: str
    case: str
    args: list[str]
    expect: int = 2
    entry: str = PHI
    stdin: bytes = b""
    close_stdout_after: int | None = None
    """Read this many lines of stdout, then close it (``| head -N``); 0 closes at once."""
    files: dict[str, str] = field(default_factory=dict)


def _cases() -> list[Case]:
    spec = SPEC
    return [
        # ------------------------------------------------------------------ a closed pipe
        Case("closed pipe", "race | head -2", RACE, 141, close_stdout_after=2),
        Case("closed pipe", "race --json | head -2", [*RACE, "--json"], 141, close_stdout_after=2),
        Case("closed pipe", "race, reader gone at once", RACE, 141, close_stdout_after=0),
        Case("closed pipe", "run | head -1", ["run", "Q?", "-m", "scripted:a"], 141,
             close_stdout_after=0),
        Case("closed pipe", "models | head", ["models"], 141, close_stdout_after=0),
        Case("closed pipe", "models --json | head", ["models", "--json"], 141,
             close_stdout_after=0),
        Case("closed pipe", "race --strategy bandit --json | head", [*RACE, "--strategy",
             "bandit", "--json"], 141, close_stdout_after=0),
        Case("closed pipe", "select --json | head", ["select", "spec.toml", "--json"], 141,
             close_stdout_after=0, files={"spec.toml": spec}),
        # ------------------------------------------------------------------ bad race files
        Case("bad race file", "branches = []", ["race", "Q?", "--config", "race.toml"],
             files={"race.toml": "branches = []\n"}),
        Case("bad race file", "max_concurrency = 'four'", ["race", "Q?", "--config", "race.toml"],
             files={"race.toml": 'max_concurrency = "four"\n'}),
        Case("bad race file", "misspelt key", ["race", "Q?", "--config", "race.yaml"],
             files={"race.yaml": "branches:\n  - modle: scripted:a\n"}),
        Case("bad race file", "unknown strategy", ["race", "Q?", "--config", "race.json"],
             files={"race.json": '{"strategy": "jugde"}'}),
        Case("bad race file", "not UTF-8", ["race", "Q?", "--config", "race.toml"],
             files={"race.toml": "\udcff\udcfe"}),
        Case("bad race file", "a directory", ["race", "Q?", "--config", "."]),
        Case("bad race file", "missing file", ["race", "Q?", "--config", "nope.toml"]),
        # ------------------------------------------------------------------ bad select specs
        Case("bad select spec", "max_concurrent = 'four'", ["select", "spec.toml"],
             files={"spec.toml": spec.replace("cache = false",
                                              'cache = false\nmax_concurrent = "four"')}),
        Case("bad select spec", "unknown placeholder", ["select", "spec.toml"],
             files={"spec.toml": spec.replace("{input}", "{question}")}),
        Case("bad select spec", "broken template", ["select", "spec.toml"],
             files={"spec.toml": spec.replace("{input}", "{input")}),
        Case("bad select spec", "agent file does not parse", ["select", "spec.toml"],
             files={"spec.toml": 'agent = "agent.py:run"\n' + spec,
                    "agent.py": "def run(:\n"}),
        Case("bad select spec", "missing dataset", ["select", "spec.toml"],
             files={"spec.toml": spec.replace("data.jsonl", "none.jsonl")}),
        Case("bad select spec", "dataset line without expected", ["select", "spec.toml"],
             files={"spec.toml": spec, "data.jsonl": '{"input": "q"}\n'}),
        Case("bad select spec", "--max-concurrent 0", ["select", "spec.toml",
             "--max-concurrent", "0"], files={"spec.toml": spec}),
        # ------------------------------------------------------------------ bad flags, models, prompts
        Case("bad flag or model", "empty -m", ["race", "Q?", "-m", ""]),
        Case("bad flag or model", "bare model name", ["race", "Q?", "-m", "gpt-4o"]),
        Case("bad flag or model", "unknown provider", ["race", "Q?", "-m", "opnai:gpt-4o"]),
        Case("bad flag or model", "judge without its key", [*RACE[:6], "--judge",
             "openai:gpt-4o"]),
        Case("bad flag or model", "judge with vote", [*RACE, "--strategy", "vote"]),
        Case("bad flag or model", "bad --verify", [*RACE, "--strategy", "bandit",
             "--verify", "json"]),
        Case("bad flag or model", "repeated bandit arms", ["race", "Q?", "-m", "scripted:a",
             "-m", "scripted:a", "--strategy", "bandit"]),
        Case("bad flag or model", "empty prompt", ["race", "  "]),
        Case("bad flag or model", "prompt that is not UTF-8", ["race", "caf\udce9",
             "-m", "scripted:a"]),
        Case("bad flag or model", "empty stdin prompt", ["run", "-"]),
        Case("bad flag or model", "route reset of an unknown namespace", ["route", "reset",
             "--namespace", "nope", "-y", "--state", "router.sqlite"]),
        Case("bad flag or model", "route export to a missing folder", ["route", "export",
             "--state", "router.sqlite", "-o", "no/such/dir.json"]),
        Case("bad flag or model", "route show without state", ["route", "show", "--state",
             "none.sqlite"]),
        Case("bad flag or model", "parallel-agents judge without key", ["Q?",
             "--agent-models", "scripted:a", "--judge-model", "gpt-4o"], entry=PARALLEL_AGENTS),
        Case("bad flag or model", "parallel-agents empty model list", ["Q?",
             "--agent-models", ","], entry=PARALLEL_AGENTS),
        Case("bad flag or model", "parallel-agents latency bias", ["Q?", "--agent-models",
             "scripted:a", "--latency-bias-scale", "0.05"], entry=PARALLEL_AGENTS),
        Case("bad flag or model", "parallel-agents bad price JSON", ["Q?", "--agent-models",
             "scripted:a", "--model-prices", "{oops"], entry=PARALLEL_AGENTS),
    ]  # fmt: skip


async def _run(case: Case, root: Path, gate: asyncio.Semaphore) -> dict[str, Any]:
    async with gate:
        return await asyncio.to_thread(_attack, case, root)


def _attack(case: Case, root: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(dir=root))
    (work / "script.json").write_text(json.dumps(SCRIPT))
    (work / "data.jsonl").write_text('{"input": "q", "expected": "a"}\n')
    for name, text in case.files.items():
        (work / name).write_bytes(text.encode("utf-8", "surrogateescape"))
    if "router.sqlite" in case.args:
        _bandit_state(work)
    proc = subprocess.Popen(
        [sys.executable, "-c", case.entry, *[_arg(a) for a in case.args]],
        cwd=work, env=_env(work, "script.json"), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(case.stdin)
    proc.stdin.close()
    if case.close_stdout_after is not None:
        for _ in range(case.close_stdout_after):
            proc.stdout.readline()
        proc.stdout.close()  # the reader goes away, as `head` does
    try:
        if case.close_stdout_after is None:
            proc.stdout.read()
        errors = proc.stderr.read().decode("utf-8", "replace")
        code = proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
        errors = ""
    leaked = "Traceback" in errors or "Exception ignored" in errors
    blocked = code == case.expect and not leaked
    detail = f"exit {code} (want {case.expect})"
    first = next((line for line in errors.splitlines() if line.strip()), "")
    if first:
        detail += f": {first[:160]}"
    return {
        "class": case.klass,
        "case": case.case,
        "result": "blocked" if blocked else "leaked",
        "detail": detail,
    }


def _arg(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")  # invalid bytes stay invalid on purpose


def _env(work: Path, script: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("REDIS_URL", None)
    env.update(PHI_SCRIPT=str(work / script), PHI_HOME=str(work / "home"), COLUMNS="100")
    return env


def _bandit_state(work: Path) -> None:
    """A router state with one namespace, made by a real bandit race."""
    scores = {
        "scores": [
            {"answer": n, "reason": "r", "relevance": s, "coverage": s, "faithfulness": s}
            for n, s in ((1, 0.9), (2, 0.2))
        ]
    }
    (work / "bandit.json").write_text(
        json.dumps({**SCRIPT, "scripted:judge": {"default": json.dumps(scores)}})
    )
    subprocess.run(
        [sys.executable, "-c", PHI, *RACE, "--strategy", "bandit", "--state", "router.sqlite"],
        cwd=work, env=_env(work, "bandit.json"), capture_output=True, timeout=90, check=False,
    )  # fmt: skip


async def run_cases() -> list[dict[str, Any]]:
    """Run every CLI case (two at a time: the machine's cores are shared)."""
    gate = asyncio.Semaphore(2)
    with tempfile.TemporaryDirectory(prefix="phi-hostile-cli-") as root:
        return list(await asyncio.gather(*(_run(c, Path(root), gate) for c in _cases())))


if __name__ == "__main__":  # a table of this module's cases alone
    for row in asyncio.run(run_cases()):
        print(f"{row['result']:8s} {row['class']:18s} {row['case']:40s} {row['detail']}")
