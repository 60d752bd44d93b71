"""Config parsing and construction (study §4.17) and located errors."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from phi_core.config import (
    ScriptCallbackError,
    agent_from_config,
    agents_from_config,
    detect_interpreter,
    is_script_path,
    load_config,
    parse_config,
    parse_config_auto,
    parse_reference,
    run_script,
    substitute_env,
)
from phi_core.context import CompactionConfig
from phi_core.errors import ConfigError
from phi_core.events import AgentEnd
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import ToolRegistry, tool


def toml(text: str, **kw: Any) -> Any:
    return parse_config(textwrap.dedent(text), "toml", **kw)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# ---------------------------------------------------------------- §4.17.1 parsing + env


def test_minimal_and_full_configs_parse() -> None:
    assert toml('[provider]\nmodel = "scripted:x"\n').provider.model == "scripted:x"
    full = toml(
        """
        [agent]
        system_prompt = "hi"
        [agent.profile]
        name = "p"
        [provider]
        model = "scripted:x"
        [session]
        scope = "persistent"
        [tools]
        enabled = ["bash"]
        [compaction]
        max_context_tokens = 1000
        [execution]
        max_turns = 3
        max_cost = 0.5
        """
    )
    assert full.session.scope == "persistent" and full.execution.max_cost == 0.5
    assert full.tools.enabled == ["bash"] and full.compaction.max_context_tokens == 1000


def test_env_substitution_replaces_missing_errors_and_leaves_malformed_literal() -> None:
    env = {"KEY": "secret-value", "MODE": "test"}
    assert substitute_env("a = '${KEY}' ${MODE}", env) == "a = 'secret-value' test"
    assert substitute_env("x ${UNCLOSED and ${}", env) == "x ${UNCLOSED and ${}"
    assert substitute_env("plain", env) == "plain"
    with pytest.raises(ConfigError, match="MISSING") as info:
        substitute_env("a = 1\nb = '${MISSING}'\n", env, file="c.toml")
    assert info.value.line == 2 and info.value.file == "c.toml"


def test_env_substitution_leaves_comments_alone_but_not_hashes_in_strings() -> None:
    """A commented-out `${VAR}` (a whole line or after a value) needs no variable, as in the
    gateway's own example file; a `#` inside quotes or a URL is no comment."""
    env = {"KEY": "k1"}
    text = 'key_env = "KEY"   # or key = "${TEAM_KEY}"\n# ${ALSO_UNSET}\n'
    assert substitute_env(text, env) == text
    assert substitute_env('a = "x # ${KEY}"  # ${NOPE}', env) == 'a = "x # k1"  # ${NOPE}'
    assert substitute_env("a = 'it''s ${KEY}'", env) == "a = 'it''s k1'"
    assert substitute_env("url: http://h/#frag${KEY}", env) == "url: http://h/#fragk1"
    with pytest.raises(ConfigError, match="NOPE"):
        substitute_env('a = "${NOPE}" # ${KEY}', env)


# ---------------------------------------------------------------- §4.17.2 agent_from_config


def test_agent_from_config_applies_model_profile_and_limits() -> None:
    config = toml(
        """
        [provider]
        model = "scripted:m1"
        [agent.profile]
        name = "coder"
        thinking_level = "High"
        temperature = 0.9
        [execution]
        max_turns = 10
        max_total_tokens = 100000
        max_duration_secs = 60
        max_cost = 0.5
        """
    )
    agent = agent_from_config(config)
    built = agent.build_config()
    assert built.model_config().id == "m1"
    assert (built.thinking, built.temperature) == ("high", 0.9)
    assert built.limits is not None
    limits = built.limits
    assert (limits.max_turns, limits.max_total_tokens, limits.max_duration, limits.max_cost) == (
        10,
        100000,
        60,
        0.5,
    )


def test_execution_deadlines_set_the_call_deadlines_and_keep_defaults_for_the_rest() -> None:
    config = toml(
        """
        [provider]
        model = "scripted:m1"
        [execution.deadlines]
        idle_secs = 15
        total_secs = 90.5
        """
    )
    deadlines = agent_from_config(config).build_config().deadlines
    assert (deadlines.connect, deadlines.first_byte, deadlines.idle, deadlines.total) == (
        10.0,
        120.0,
        15,
        90.5,
    )
    with pytest.raises(ConfigError, match="idle_secs"):
        toml('[provider]\nmodel = "scripted:x"\n[execution.deadlines]\nidle_secs = 0\n')


@pytest.mark.parametrize("level", ["off", "minimal", "low", "medium", "HIGH"])
def test_every_thinking_level_maps(level: str) -> None:
    config = toml(
        f'[agent.profile]\nthinking_level = "{level}"\n[provider]\nmodel = "scripted:x"\n'
    )
    assert agent_from_config(config).build_config().thinking == level.lower()


def test_invalid_thinking_level_names_the_key_line_and_choices() -> None:
    with pytest.raises(ConfigError, match=r"'extreme'.*off, minimal, low, medium, high") as info:
        toml('[provider]\nmodel = "scripted:x"\n\n[agent.profile]\nthinking_level = "extreme"\n')
    assert info.value.key == "agent.profile.thinking_level" and info.value.line == 5


# ---------------------------------------------------------------- §4.17.3 references


def test_reference_parsing() -> None:
    ref = parse_reference("{{agent_profile.coder}}")
    assert ref and (ref.namespace, ref.name, ref.recreate) == ("agent_profile", "coder", True)
    ref = parse_reference("{{%provider.openai%}}")
    assert ref and (ref.namespace, ref.name, ref.recreate) == ("provider", "openai", False)
    ref = parse_reference("{{coder}}")
    assert ref and ref.namespace is None and ref.effective_name == "coder" and ref.recreate
    ref = parse_reference("{{%coder%}}")
    assert ref and ref.name == "coder" and not ref.recreate
    ref = parse_reference("{{#abc-123#}}")
    assert ref and ref.system_id and ref.name == "abc-123" and not ref.recreate
    assert parse_reference("{{}}") is None
    assert parse_reference("plain text") is None


_TWO_NAMESPACES = """
[provider]
model = "scripted:x"

[[provider.instances]]
id = "{{%shared%}}"
model = "scripted:y"

[[agent.profile.instances]]
id = "{{shared}}"
temperature = 0.1

[[agent.instances]]
name = "a"
agent_profile = "{{shared}}"
"""


def test_unqualified_reference_to_a_name_in_two_namespaces_is_ambiguous() -> None:
    with pytest.raises(ConfigError, match=r"ambiguous.*agent_profile, provider") as info:
        agent_from_config(toml(_TWO_NAMESPACES))
    assert "{{agent_profile.shared}}" in str(info.value)
    assert info.value.key == "agent.instances[0].agent_profile" and info.value.line == 15


def test_qualified_reference_resolves_where_unqualified_is_ambiguous() -> None:
    text = _TWO_NAMESPACES.replace(
        'agent_profile = "{{shared}}"', 'agent_profile = "{{agent_profile.shared}}"'
    )
    agent = agent_from_config(toml(text))
    assert agent.build_config().temperature == 0.1


def test_reference_to_the_wrong_namespace_and_unknown_names_are_explained() -> None:
    text = _TWO_NAMESPACES.replace(
        'agent_profile = "{{shared}}"', 'agent_profile = "{{provider.shared}}"'
    )
    with pytest.raises(ConfigError, match="expects a `agent_profile` entry"):
        agent_from_config(toml(text))
    text = _TWO_NAMESPACES.replace(
        'agent_profile = "{{shared}}"', 'agent_profile = "{{agent_profile.sharde}}"'
    )
    with pytest.raises(ConfigError, match="Did you mean 'shared'"):
        agent_from_config(toml(text))


def test_duplicate_ids_in_one_namespace_are_refused() -> None:
    text = '[provider]\nmodel = "scripted:x"\n[[agent.profile.instances]]\nid = "{{a}}"\n[[agent.profile.instances]]\nid = "{{%a%}}"\n'
    with pytest.raises(ConfigError, match="declared twice"):
        agent_from_config(toml(text))


# ---------------------------------------------------------------- §4.17.4 instances, url alias


def test_url_alias_profile_and_provider_instances_parse_and_apply() -> None:
    config = toml(
        """
        [provider]
        model = "gpt-4o-mini"
        api = "openai"
        url = "http://127.0.0.1:9/v1"
        api_key = "sk-test-abcdefghijkl"

        [[provider.instances]]
        id = "{{%big%}}"
        description = "bigger"
        model = "gpt-4o"
        url = "http://127.0.0.1:8/v1"

        [[agent.instances]]
        name = "small"

        [[agent.instances]]
        name = "big"
        provider = "{{provider.big}}"
        system_prompt = "instance prompt"
        """
    )
    agents = agents_from_config(config)
    assert list(agents) == ["small", "big"]
    small, big = (a.build_config().model_config() for a in agents.values())
    assert (small.id, small.base_url, small.api) == (
        "gpt-4o-mini",
        "http://127.0.0.1:9/v1",
        "openai_completions",
    )
    assert (big.id, big.base_url) == ("gpt-4o", "http://127.0.0.1:8/v1")
    assert big.api_key is not None and big.api_key.get_secret_value() == "sk-test-abcdefghijkl"
    assert "sk-test" not in repr(agents["big"].build_config())
    assert agents["big"].system_prompt == "instance prompt"


def test_a_bare_model_without_api_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"provider:model.*openai:gpt-4o") as info:
        agent_from_config(toml('[provider]\nmodel = "gpt-4o"\n'))
    assert info.value.key == "provider.model" and info.value.line == 2


def test_no_provider_section_means_the_embedded_default() -> None:
    agent = agent_from_config(toml("[agent]\nsystem_prompt = 'x'\n"))
    assert agent.build_config().model_config().spec == "local:smollm2"


# ---------------------------------------------------------------- §4.17.5 / 4.17.7 workspace, prompts


def test_file_prompts_resolve_per_instance_workspace(tmp_path: Path) -> None:
    write(tmp_path, "projects/alpha/system_prompt.md", "alpha prompt")
    write(tmp_path, "projects/beta/system_prompt.md", "beta prompt")
    path = write(
        tmp_path,
        "agents.toml",
        """
        [provider]
        model = "scripted:x"
        [agent.profile]
        name = "base"
        [[agent.profile.instances]]
        id = "{{copywriter}}"
        system_prompt = "file:system_prompt.md"
        temperature = 0.7
        [[agent.instances]]
        name = "alpha"
        agent_profile = "{{agent_profile.copywriter}}"
        workspace = "projects/alpha"
        [[agent.instances]]
        name = "beta"
        agent_profile = "{{agent_profile.copywriter}}"
        workspace = "projects/beta"
        """,
    )
    agents = agents_from_config(path)
    assert agents["alpha"].system_prompt == "alpha prompt"
    assert agents["beta"].system_prompt == "beta prompt"
    assert agents["alpha"].workspace == str(tmp_path / "projects/alpha")


def test_missing_prompt_file_names_the_path_and_the_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "a.toml",
        '[provider]\nmodel = "scripted:x"\n[agent]\nsystem_prompt = "file:nope.md"\n',
    )
    with pytest.raises(ConfigError, match=r"nope\.md") as info:
        agent_from_config(path)
    assert info.value.key == "agent.system_prompt" and info.value.line == 4
    assert info.value.file == str(path)


def test_system_prompt_precedence_agent_then_profile_instance_then_base() -> None:
    base = """
    [provider]
    model = "scripted:x"
    [agent.profile]
    system_prompt = "base"
    [[agent.profile.instances]]
    id = "{{p}}"
    system_prompt = "profile instance"
    [[agent.instances]]
    name = "with_profile"
    agent_profile = "{{p}}"
    [[agent.instances]]
    name = "plain"
    """
    agents = agents_from_config(toml(base))
    assert agents["with_profile"].system_prompt == "profile instance"
    assert agents["plain"].system_prompt == "base"
    with_agent_level = base.replace(
        "[agent.profile]", '[agent]\nsystem_prompt = "agent level"\n[agent.profile]'
    )
    agents = agents_from_config(toml(with_agent_level))
    assert agents["with_profile"].system_prompt == "agent level"
    assert agents["plain"].system_prompt == "agent level"


def test_strategy_composes_blocks_in_order_truncates_and_skips_missing(tmp_path: Path) -> None:
    write(tmp_path, "task.md", "the task text")
    path = write(
        tmp_path,
        "p.toml",
        """
        [provider]
        model = "scripted:x"
        [[system_prompt_strategy.instances]]
        id = "{{s}}"
        [[system_prompt_strategy.instances.blocks]]
        name = "task"
        order = 1
        [[system_prompt_strategy.instances.blocks]]
        name = "identity"
        order = 0
        max_length = 5
        [[system_prompt_strategy.instances.blocks]]
        name = "constraints"
        order = 2
        [[system_prompt.instances]]
        id = "{{p}}"
        type = "{{system_prompt_strategy.s}}"
        task = "file:task.md"
        identity = "hello world"
        [agent]
        system_prompt = "{{system_prompt.p}}"
        """,
    )
    assert agent_from_config(path).system_prompt == "hello\n\nthe task text"


def test_a_prompt_block_the_strategy_lacks_is_an_error() -> None:
    text = """
    [provider]
    model = "scripted:x"
    [[system_prompt_strategy.instances]]
    id = "{{s}}"
    [[system_prompt_strategy.instances.blocks]]
    name = "identity"
    [[system_prompt.instances]]
    id = "{{p}}"
    type = "{{s}}"
    identty = "typo"
    [agent]
    system_prompt = "{{p}}"
    """
    with pytest.raises(ConfigError, match="identty"):
        agent_from_config(toml(text))


# ---------------------------------------------------------------- §4.17.6 callbacks and scripts


def test_script_path_detection_and_interpreter() -> None:
    assert is_script_path("./hook.sh") and is_script_path("scripts/x.py")
    assert is_script_path("python3 scripts/after.py")
    assert not is_script_path("plugin::name") and not is_script_path("audit")
    assert detect_interpreter("x.py") == sys.executable and detect_interpreter("x.sh") == "sh"


async def test_scripts_get_json_on_stdin_run_in_the_workspace_and_fail_loudly(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "echo.py",
        "import json, os, sys\nd = json.load(sys.stdin)\nd['cwd'] = os.getcwd()\nprint(json.dumps(d))\n",
    )
    write(tmp_path, "fail.sh", "echo nope >&2\nexit 1\n")
    out = await run_script("echo.py", {"allow": True, "n": 1}, tmp_path)
    assert out == {"allow": True, "n": 1, "cwd": str(tmp_path)}
    with pytest.raises(ScriptCallbackError, match="code 1: nope") as info:
        await run_script("fail.sh", {}, tmp_path)
    assert info.value.code == 1


async def test_script_callbacks_from_config_veto_and_observe(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    write(
        tmp_path,
        "deny.py",
        "import json, sys\nd = json.load(sys.stdin)\nprint(json.dumps({'allow': d['tool_name'] != 'add'}))\n",
    )
    write(tmp_path, "after.sh", f"cat >> {log}\n")
    path = write(
        tmp_path,
        "cb.toml",
        """
        [provider]
        model = "scripted:x"
        [tools]
        enabled = ["add"]
        [callbacks]
        before_tool_execution = "deny.py"
        after_loop = "./after.sh"
        """,
    )

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    tools = ToolRegistry()
    tools.register("add", add)
    provider = ScriptedProvider([Reply(tool_calls=[call("add", {"a": 1, "b": 2})]), "blocked"])
    agent = agent_from_config(path, tools=tools, provider=provider)
    await agent.prompt("add")
    result = agent.messages[2]
    assert result.role == "tool_result" and result.is_error  # type: ignore[union-attr]
    assert '"hook": "after_loop"' in log.read_text()


def test_unknown_callback_name_lists_the_known_ones() -> None:
    text = '[provider]\nmodel = "scripted:x"\n[callbacks]\nbefore_turn = "plugin::missing"\n'
    with pytest.raises(ConfigError, match="known: audit") as info:
        agent_from_config(toml(text), callbacks={"audit": print})
    assert info.value.key == "callbacks.before_turn" and info.value.line == 4


async def test_named_python_callbacks_and_session_task_callbacks_take_effect() -> None:
    seen: list[str] = []
    text = """
    [provider]
    model = "scripted:x"
    [callbacks]
    before_loop = "plugin::gate"
    before_task = "started"
    after_task = "finished"
    [hooks]
    input_filters = ["shout_check"]
    """
    from phi_core.loop import FilterResult

    callbacks = {
        "gate": lambda messages: seen.append("gate") or True,
        "started": lambda session: seen.append("started"),
        "finished": lambda session: seen.append("finished"),
        "shout_check": lambda text: (
            FilterResult.reject("no shouting") if text.isupper() else FilterResult.allow()
        ),
    }
    agent = agent_from_config(toml(text), callbacks=callbacks, provider=ScriptedProvider(["ok"]))
    assert (await agent.prompt("hello")).ok
    rejected = await agent.prompt("HELLO")
    assert rejected.reason == "rejected"
    assert agent.recorder is not None
    agent.recorder.flush()
    assert seen == ["gate", "started", "gate", "finished"]


# ---------------------------------------------------------------- §4.17.8 compaction


def test_compaction_is_on_by_default_off_when_disabled_and_instances_override() -> None:
    default = agent_from_config(toml('[provider]\nmodel = "scripted:x"\n')).compaction
    assert default == CompactionConfig()  # on, sized to the model's context window
    disabled = toml('[provider]\nmodel = "scripted:x"\n[compaction]\nenabled = false\n')
    assert agent_from_config(disabled).compaction is None
    text = """
    [provider]
    model = "scripted:x"
    [compaction]
    max_context_tokens = 5000
    focus_message = "base focus"
    [[compaction.instances]]
    id = "{{%coding%}}"
    focus_message = "Focus on code."
    keep_recent_turns = 6
    [agent.profile]
    compaction = "{{compaction.coding}}"
    """
    compaction = agent_from_config(toml(text)).compaction
    assert compaction is not None
    assert (
        compaction.max_context_tokens,
        compaction.focus_message,
        compaction.keep_recent_turns,
    ) == (5000, "Focus on code.", 6)
    base = agent_from_config(
        toml(text.replace('compaction = "{{compaction.coding}}"', ""))
    ).compaction
    assert base is not None and base.focus_message == "base focus"


# ---------------------------------------------------------------- §4.17.9 registry, instances


def test_tools_by_name_and_unknown_tool_is_located() -> None:
    agent = agent_from_config(
        toml('[provider]\nmodel = "scripted:x"\n[tools]\nenabled = ["bash", "read_file"]\n')
    )
    assert [t.name for t in agent.tools] == ["bash", "read_file"]
    with pytest.raises(ConfigError, match=r"Unknown tool 'read_fil'.*read_file") as info:
        agent_from_config(
            toml('[provider]\nmodel = "scripted:x"\n[tools]\nenabled = ["bash", "read_fil"]\n')
        )
    assert info.value.key == "tools.enabled[1]" and info.value.line == 4


def test_no_instances_gives_one_default_agent() -> None:
    assert list(agents_from_config(toml('[provider]\nmodel = "scripted:x"\n'))) == ["default"]


async def test_sub_agents_run_as_tools_in_their_own_session() -> None:
    text = """
    [provider]
    model = "scripted:x"
    [[sub_agents.instances]]
    name = "researcher"
    description = "Finds things."
    system_prompt = "You research."
    max_turns = 2
    """
    provider = ScriptedProvider(
        [
            Reply(tool_calls=[call("researcher", {"task": "find 42"})]),
            "42 is the answer",
            "done: 42",
        ]
    )
    agent = agent_from_config(toml(text), provider=provider)
    events: list[Any] = []
    agent.subscribe(events.append)
    result = await agent.prompt("delegate")
    assert result.text == "done: 42"
    tool_result = agent.messages[2]
    assert tool_result.content[0].text == "42 is the answer"  # type: ignore[union-attr]
    assert provider.requests[1].system_prompt == "You research."
    ends = [e for e in events if isinstance(e, AgentEnd)]
    # the child's events reach the parent's stream too, under the child's loop id
    assert [e.loop_id for e in ends][-1] == agent.last_loop_id
    assert ends[0].loop_id.endswith(".sub.1") and len(ends) == 2
    assert agent.recorder is not None
    [child] = [s for s in agent.recorder.all_sessions() if s.session_id != agent.session_id]
    assert child.parent_spawn_ref is not None
    assert child.parent_spawn_ref.parent_loop_id == agent.last_loop_id
    assert child.parent_spawn_ref.parent_session_id == agent.session_id
    assert child.loops[0].loop_id == f"{child.session_id}.sub.1"
    assert child.loops[0].turns[0].triggered_by == "sub_agent"


# ---------------------------------------------------------------- §4.17.10 compat


def test_compat_section_is_passed_to_the_model() -> None:
    config = toml(
        '[provider]\nmodel = "scripted:x"\n[provider.compat]\nmax_tokens_field = "max_completion_tokens"\n'
    )
    assert (
        agent_from_config(config).build_config().model_config().compat["max_tokens_field"]
        == "max_completion_tokens"
    )


# ---------------------------------------------------------------- errors point at the problem


def test_syntax_errors_give_the_parser_line_in_every_format(tmp_path: Path) -> None:
    cases = {
        "bad.toml": '[provider]\nmodel = "x"\nmodel = = 3\n',
        "bad.json": '{\n  "provider": {\n    "model": "x",\n  }\n}\n',
        "bad.yaml": "provider:\n  model: x\n   bad: [1, 2\n",
    }
    for name, text in cases.items():
        path = write(tmp_path, name, text)
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert info.value.file == str(path), name
        assert info.value.line is not None and info.value.line >= 3, (name, info.value)
        assert f"{path}:{info.value.line}" in str(info.value)


def test_unknown_keys_are_errors_with_a_suggestion_and_their_line() -> None:
    text = '[provider]\nmodel = "scripted:x"\n\n[execution]\nmax_turn = 3\n'
    with pytest.raises(
        ConfigError, match=r"unknown key 'max_turn'.*Did you mean 'max_turns'"
    ) as info:
        toml(text)
    assert info.value.key == "execution.max_turn" and info.value.line == 5


def test_wrong_types_name_the_key_path_line_and_value_in_yaml_and_json(tmp_path: Path) -> None:
    yaml_text = "provider:\n  model: scripted:x\nagent:\n  instances:\n    - name: a\n    - name: b\n      profile:\n        temperature: hot\n"
    with pytest.raises(ConfigError, match="'hot'") as info:
        parse_config(yaml_text, "yaml", file="a.yaml")
    assert info.value.key == "agent.instances[1].profile.temperature" and info.value.line == 8
    json_text = '{\n "execution": {\n  "max_turns": 0\n }\n}\n'
    with pytest.raises(ConfigError, match="greater than or equal to 1") as info:
        parse_config(json_text, "json")
    assert info.value.key == "execution.max_turns" and info.value.line == 3


def test_unknown_extension_and_auto_detection(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\.ini"):
        load_config(write(tmp_path, "a.ini", "x"))
    assert parse_config_auto('{"provider": {"model": "scripted:j"}}').provider.model == "scripted:j"
    assert parse_config_auto("provider:\n  model: scripted:y\n").provider.model == "scripted:y"
    assert parse_config_auto('[provider]\nmodel = "scripted:t"\n').provider.model == "scripted:t"
