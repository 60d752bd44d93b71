"""A fake OpenAI upstream on 127.0.0.1 and a race file pointing at it, for ``phi mcp serve``.

The upstream answers every branch with ``"<model> says: Paris"`` and fixed usage (so the costs
follow from the price table), and plays the judge: ``"2"`` for the ``judge`` strategy's pick, a
rubric reply (JSON scores) when the request asks for the rubric schema.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.providers.fakes import FakeServer, Recorded, Respond, Stream
from tests.providers.fakes.openai_wire import text_reply

PROMPT_TOKENS = 100
COMPLETION_TOKENS = 20
JUDGE = "gpt-4.1-mini"
SECRET = "sk-test-mcp-secret-4242"

RACE_FILE = f"""\
strategy = "judge"

[judge]
model = "openai:{JUDGE}"

[[branches]]
name = "mini"
model = "openai:gpt-4o-mini"

[[branches]]
name = "big"
model = "openai:gpt-4o"
"""


def answer_of(model: str) -> str:
    return f"{model} says: Paris"


def reply(request: Recorded) -> Respond | Stream:
    body = request.json
    model = body["model"]
    schema = (body.get("response_format") or {}).get("json_schema") or {}
    if schema.get("name") == "rubric_scores":
        count = schema["schema"]["properties"]["scores"]["maxItems"]
        scores = [
            {"answer": n, "reason": "fine", "relevance": 0.9, "coverage": 0.8, "faithfulness": 0.9}
            for n in range(1, count + 1)
        ]
        text = json.dumps({"scores": scores})
    elif model == JUDGE:
        text = "2"  # the judge strategy: the second answer shown (branch `big`)
    else:
        text = answer_of(model)
    return Stream(text_reply(text, PROMPT_TOKENS, COMPLETION_TOKENS))


@dataclass
class Setup:
    upstream: FakeServer
    race_file: Path
    env: dict[str, str]
    """What ``phi mcp serve`` needs: the upstream's address, a key, its own user directory."""

    def branch_requests(self) -> list[str]:
        return [r.json["model"] for r in self.upstream.requests if r.json["model"] != JUDGE]


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    race_file = tmp_path / "capitals.toml"
    race_file.write_text(RACE_FILE, encoding="utf-8")
    async with FakeServer(default=reply) as upstream:
        env = {
            "OPENAI_BASE_URL": f"{upstream.url}/v1",
            "OPENAI_API_KEY": SECRET,
            "PHI_HOME": os.environ["PHI_HOME"],  # the test's own (see tests/conftest.py)
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }
        yield Setup(upstream, race_file, env)


def phi_command() -> str:
    """The ``phi`` script of the interpreter running the tests."""
    script = Path(sys.executable).with_name("phi")
    assert script.exists(), f"no phi script next to {sys.executable}; install the project"
    return str(script)
