"""Environment leaks: commands get an allow-listed environment, and a secret that still gets
printed (read from another process, passed on purpose) is redacted before the model sees it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import ApprovalRequest, BashSettings, BashTool, tool
from phi_core.types import MESSAGES_ADAPTER, ToolResultMessage

from ..tools.helpers import run, text
from .conftest import Layout


def allow_all(request: ApprovalRequest) -> bool:
    return True


@pytest.mark.parametrize(
    "command",
    [
        'env | grep -c "^OPENAI_API_KEY=" || true',
        '[ -z "${OPENAI_API_KEY+x}" ] && echo unset || echo set',
        "python3 -c 'import os; print(\"OPENAI_API_KEY\" in os.environ)'",
        "printenv OPENAI_API_KEY; echo status=$?",
        # the path is spelt in pieces so the command policy lets it run
        "python3 -c \"print(b'OPENAI' in open('/pro' + 'c/self/envi' + 'ron', 'rb').read())\"",
    ],
)
async def test_the_api_key_is_not_in_a_commands_environment(
    layout: Layout, api_key: str, command: str
) -> None:
    result = await run(BashTool(layout.workspace), approver=allow_all, command=command)
    out = text(result)
    assert not result.is_error, out
    assert api_key not in out and "[REDACTED]" not in out  # absent, not merely hidden
    assert any(word in out for word in ("\n0\n", "unset", "False", "status=1")), out


async def test_the_environment_is_an_allow_list_with_home_at_the_workspace(
    layout: Layout, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_hostile_token_123456")
    monkeypatch.setenv("SOME_UNRELATED_VAR", "x")
    result = await run(BashTool(layout.workspace), command="env | cut -d= -f1 | sort")
    names = set(text(result).split("\n")[1:]) - {""}
    assert {"PATH", "HOME", "PWD"} <= names
    assert not names & {"OPENAI_API_KEY", "GITHUB_TOKEN", "SOME_UNRELATED_VAR"}
    home = await run(BashTool(layout.workspace), command="echo $HOME; cd ~ && pwd")
    assert text(home).split("\n")[1:3] == [str(layout.workspace)] * 2


async def test_a_secret_printed_by_a_command_reaches_the_model_redacted(
    layout: Layout, api_key: str
) -> None:
    """Defence in depth: a user passes the key on purpose, the command prints it."""
    bash = BashTool(layout.workspace, BashSettings(extra_env={"PASSED": api_key}))
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("bash", {"command": "echo key=$PASSED"})]), Reply("done")]
    )
    context = AgentContext(tools=[bash])
    await agent_loop("go", context, AgentLoopConfig(provider=provider))
    results = [m for m in context.messages if isinstance(m, ToolResultMessage)]
    assert "key=[REDACTED]" in results[0].content[0].text  # type: ignore[union-attr]
    assert api_key not in json.dumps(provider.requests[-1].payload())
    assert api_key not in MESSAGES_ADAPTER.dump_json(context.messages).decode()


@pytest.mark.parametrize(
    "disguise", ["base64", "base64 -w0 | cut -c3-", "rev", "od -An -tx1 | tr -d ' \\n'"]
)
async def test_a_printed_secret_is_redacted_in_its_one_command_disguises(
    layout: Layout, api_key: str, disguise: str
) -> None:
    bash = BashTool(layout.workspace, BashSettings(extra_env={"PASSED": api_key}))
    result = await run(bash, command=f'printf %s "$PASSED" | {disguise}')
    assert "[REDACTED]" in text(result), text(result)
    assert api_key[12:] not in text(result)


async def test_a_custom_tool_returning_a_secret_is_redacted(api_key: str) -> None:
    @tool
    def leak() -> str:
        """Return the environment."""
        return f"env: {dict(os.environ)}"

    provider = ScriptedProvider([Reply(tool_calls=[call("leak", {})]), Reply("done")])
    await agent_loop("go", AgentContext(tools=[leak]), AgentLoopConfig(provider=provider))
    assert api_key not in json.dumps(provider.requests[-1].payload())


_PARENT = textwrap.dedent(
    """
    import asyncio, json, sys
    from phi_core.tools import BashSettings, BashTool
    from phi_core.tools._results import finish_result, to_tool_result
    from tests.tools.helpers import ctx

    async def main():
        bash = BashTool(sys.argv[1], BashSettings(isolate=sys.argv[3]))
        out = {}
        for name, command in json.loads(sys.argv[2]).items():
            value = await bash.execute({"command": command}, ctx(lambda request: True))
            result = finish_result(to_tool_result(value), 256 * 1024)
            out[name] = "".join(getattr(c, "text", "") for c in result.content)
        print(json.dumps(out))

    asyncio.run(main())
    """
)

_ATTACKS = {
    "cat": "cat /proc/$PPID/environ",
    # spelt in pieces so the command policy lets it run: what is left is isolation/redaction
    "python": "python3 -c \"import os; print(open('/pro' + 'c/%d/envi' % os.getppid() + 'ron')"
    '.read().replace(chr(0), chr(10)))"',
    "ancestors": "python3 -c \"import glob\nfor p in glob.glob('/pro' + 'c/*/envi' + 'ron'):\n"
    ' try: print(open(p).read().replace(chr(0), chr(10)))\n except OSError: pass"',
    "ps": "ps eww",
}


def attack_parent(layout: Layout, isolate: str) -> dict[str, str]:
    """Run the attacks from a process that has the key in its *initial* environment (as for a
    user who exported it), so /proc/<that process>/environ holds it."""
    key = "sk-hostile-parent-" + os.urandom(8).hex()
    env = {**os.environ, "OPENAI_API_KEY": key}
    done = subprocess.run(
        [sys.executable, "-c", _PARENT, str(layout.workspace), json.dumps(_ATTACKS), isolate],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert done.returncode == 0, done.stderr
    outputs: dict[str, str] = json.loads(done.stdout)
    for name, out in outputs.items():
        assert key not in out, name
    assert "refused by the safety policy" in outputs["cat"]
    assert "needs approval" not in outputs["ps"]  # the approver allowed it
    return outputs


def test_without_isolation_a_key_read_from_the_parent_is_redacted(layout: Layout) -> None:
    outputs = attack_parent(layout, "never")
    assert "[REDACTED]" in outputs["python"] and "[REDACTED]" in outputs["ancestors"]


@pytest.mark.parametrize("isolate", ["processes", "filesystem"])
def test_with_isolation_other_processes_are_not_even_visible(layout: Layout, isolate: str) -> None:
    needs = {"processes": "unshare", "filesystem": "bwrap"}[isolate]
    if shutil.which(needs) is None:
        pytest.skip(f"{needs} is missing")
    outputs = attack_parent(layout, isolate)
    assert "[REDACTED]" not in outputs["python"] + outputs["ancestors"] + outputs["ps"]
