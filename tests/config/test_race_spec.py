"""Race files and branch specs: one set of field names, located errors, no silent defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from phi_core.config import (
    BranchSpec,
    RaceSpec,
    agent_from_config,
    load_race_spec,
    parse_branch,
    parse_config,
    parse_race_spec,
    split_branch_list,
)
from phi_core.errors import ConfigError, UserError


def test_old_and_new_field_names_give_the_same_branch() -> None:
    old = parse_race_spec(
        '[[branches]]\nmodel = "local:smollm2"\nsystem = "Be brief."\nthinking_level = "HIGH"\n'
    )
    new = parse_race_spec(
        '[[branches]]\nmodel = "local:smollm2"\nsystem_prompt = "Be brief."\nthinking = "high"\n'
    )
    assert old == new
    assert old.branches is not None and old.branches[0].system_prompt == "Be brief."
    assert old.branches[0].thinking == "high"


def test_inline_settings_use_the_same_names_and_accept_the_old_ones() -> None:
    assert parse_branch("scripted:a@system=Hi,temperature=0.3") == BranchSpec(
        model="scripted:a", system_prompt="Hi", temperature=0.3
    )
    assert parse_branch("scripted:a@thinking_level=low").thinking == "low"
    with pytest.raises(UserError, match=r"Unknown setting 'colour'.*system_prompt"):
        parse_branch("scripted:a@colour=red")
    with pytest.raises(UserError, match=r"`temperature`.*'hot'"):
        parse_branch("scripted:a@temperature=hot")


def test_giving_a_field_and_its_old_name_together_is_a_located_error() -> None:
    text = '[[branches]]\nmodel = "scripted:a"\nsystem = "x"\nsystem_prompt = "y"\n'
    with pytest.raises(ConfigError, match="another name for 'system_prompt'") as info:
        parse_race_spec(text, file="race.toml")
    assert info.value.line == 3 and info.value.key == "branches[0].system"


def test_an_agent_profile_takes_the_branch_field_names_and_applies_top_p_and_seed() -> None:
    config = parse_config(
        '[provider]\nmodel = "scripted:x"\n\n[agent.profile]\nthinking = "low"\ntop_p = 0.5\n'
        "seed = 7\n",
        "toml",
    )
    agent = agent_from_config(config)
    assert (agent.config.thinking, agent.config.top_p, agent.config.seed) == ("low", 0.5, 7)


def test_an_empty_branch_list_is_refused_instead_of_racing_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "race.toml"
    path.write_text('strategy = "vote"\nbranches = []\n')
    with pytest.raises(ConfigError, match="nothing to race") as info:
        load_race_spec(path)
    assert (info.value.line, info.value.key) == (2, "branches")
    assert "remove the key to race the default" in str(info.value)
    assert RaceSpec().branches is None  # leaving the key out still means the defaults


def test_an_unknown_strategy_in_a_file_is_located_with_a_suggestion() -> None:
    with pytest.raises(
        ConfigError, match=r"Unknown strategy 'jugde'. Did you mean 'judge'"
    ) as info:
        parse_race_spec('max_tokens = 5\nstrategy = "jugde"\n', file="r.toml")
    assert info.value.line == 2
    assert parse_race_spec('strategy = "Exec_Vote"').strategy == "exec-vote"


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("race.toml", 'timeout = 1\nmax_concurrency = "four"\n', 2),
        ("race.yaml", "timeout: 1\nmax_concurrency: four\n", 2),
        ("race.json", '{\n  "timeout": 1,\n  "max_concurrency": "four"\n}\n', 3),
    ],
)
def test_a_wrong_type_names_file_line_key_and_the_value(
    tmp_path: Path, name: str, text: str, line: int
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_race_spec(path)
    assert (info.value.line, info.value.key) == (line, "max_concurrency")
    assert "'four'" in str(info.value) and name in str(info.value)


def test_a_misspelt_key_is_reported_rather_than_the_key_it_leaves_missing() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'modle'. Did you mean 'model'"):
        parse_race_spec('[[branches]]\nmodle = "scripted:a"\n')


def test_a_judge_may_be_a_plain_model_string() -> None:
    spec = parse_race_spec('judge = "scripted:j"')
    assert spec.judge == BranchSpec(model="scripted:j")


def test_a_comma_list_keeps_each_models_settings_together() -> None:
    assert split_branch_list(
        "gpt-4o@temperature=0.2,max_tokens=50, gpt-4o-mini,,local:smollm2"
    ) == [
        "gpt-4o@temperature=0.2,max_tokens=50",
        "gpt-4o-mini",
        "local:smollm2",
    ]


def test_a_bare_name_is_qualified_on_request_and_hinted_otherwise() -> None:
    assert parse_branch("gpt-4o@seed=3", qualify=True) == BranchSpec(model="openai:gpt-4o", seed=3)
    with pytest.raises(UserError, match=r"Did you mean 'openai:gpt-4o'"):
        parse_branch("gpt-4o")


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (
            '[[branches]]\nmodel = "nosuch:a"\n',
            "line 2, key `branches[0].model`",
            "Unknown provider 'nosuch'",
        ),
        (
            '[[branches]]\nmodel = "scripted:a"\n[judge]\nmodel = "gpt-nonexist"\n',
            "line 4, key `judge.model`",
            "No known provider",
        ),
        (
            '[[branches]]\nname = "x"\nmodel = "scripted:a"\n[[branches]]\nname = "x"\nmodel = "scripted:b"\n',
            "line 5, key `branches[1].name`",
            "both named 'x'",
        ),
        (
            '[[branches]]\nmodel = "scripted:a@temperature=0.5"\ntemperature = 0.2\n',
            "line 3, key `branches[0].temperature`",
            "set both after '@'",
        ),
        (
            '[[branches]]\nmodel = "scripted:a@colour=red"\n',
            "line 2, key `branches[0].model`",
            "unknown setting 'colour'",
        ),
        (
            '[[branches]]\nmodel = "scripted:a@temperature=0.2,,"\n',
            "line 2, key `branches[0].model`",
            "not key=value",
        ),
    ],
    ids=[
        "provider",
        "judge-model",
        "duplicate-name",
        "set-twice",
        "unknown-setting",
        "empty-setting",
    ],
)
def test_model_problems_in_a_race_file_name_the_line_and_key(
    text: str, where: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_race_spec(text, file="race.toml")
    assert _located(caught.value) == where
    assert message in str(caught.value)


def _located(error: ConfigError) -> str:
    return f"line {error.line}, key `{error.key}`"


def test_settings_after_at_in_a_race_file_work_as_on_the_command_line() -> None:
    spec = parse_race_spec('[[branches]]\nmodel = "scripted:a@temperature=0.5,system=Hi"\n')
    assert spec.branches == [BranchSpec(model="scripted:a", temperature=0.5, system_prompt="Hi")]
    assert parse_race_spec('judge = "scripted:j@temperature=0"\n').judge == BranchSpec(
        model="scripted:j", temperature=0.0
    )


@pytest.mark.parametrize("fmt", ["toml", "json", "yaml"])
def test_an_empty_race_file_is_refused_instead_of_racing_the_defaults(fmt: str) -> None:
    with pytest.raises(ConfigError, match="the race file is empty"):
        parse_race_spec("", fmt, file=f"race.{fmt}")


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("local:smollm2@", "ends in '@'"),
        ("local:smollm2@temperature", "without a value"),
        ("local:smollm2@temperature=0.2,,", "not key=value"),
    ],
)
def test_a_malformed_setting_after_at_says_so(model: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_branch(model)


_BRANCHES = """[[branches]]
name = "a"
model = "scripted:a"

[[branches]]
name = "b"
model = "scripted:b"
{bad}

[[branches]]
name = "c"
model = "scripted:c"
temperature = 0.5
max_tokens = 10
"""


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        # the report's file: a later branch sets the same key to a good value
        (_BRANCHES.format(bad='temperature = "hot"'), 8, "branches[1].temperature"),
        # no later branch sets it, and an earlier one does not either
        (_BRANCHES.format(bad="top_p = -5"), 8, "branches[1].top_p"),
        # the last branch's key, with every earlier branch leaving it out
        (
            _BRANCHES.format(bad="").replace("max_tokens = 10", "max_tokens = -5"),
            14,
            "branches[2].max_tokens",
        ),
        # a missing key is placed at its own branch's header
        (
            '[[branches]]\nmodel = "scripted:a"\n\n[[branches]]\nname = "b"\n',
            4,
            "branches[1].model",
        ),
        # an inline array of inline tables over several lines
        (
            'branches = [\n  { model = "scripted:a" },  # first\n\n'
            '  { model = "scripted:b", temperature = "hot" },\n]\n',
            4,
            "branches[1].temperature",
        ),
        # a table after the branches
        (
            '[[branches]]\nmodel = "scripted:a"\ntemperature = 0.1\n[[branches]]\n'
            'model = "scripted:b"\n[judge]\nmodel = "scripted:j"\ntemperature = "hot"\n',
            8,
            "judge.temperature",
        ),
        # dotted keys
        (
            'judge.model = "scripted:j"\njudge.temperature = "hot"\n',
            2,
            "judge.temperature",
        ),
    ],
    ids=[
        "later-good-value",
        "only-one",
        "last-branch",
        "missing",
        "inline-array",
        "table-after",
        "dotted",
    ],
)
def test_an_error_in_a_branch_names_that_branchs_own_line(text: str, line: int, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_race_spec(text, file="race.toml")
    assert (info.value.line, info.value.key) == (line, key)


def test_an_error_in_a_gateway_files_profile_branch_names_its_line(tmp_path: Path) -> None:
    from phi_core.gateway import load_gateway_config

    path = tmp_path / "gateway.toml"
    path.write_text(
        '[gateway]\nmodels = ["scripted:a"]\n\n[profiles.p]\nstrategy = "vote"\n'
        '[[profiles.p.branches]]\nmodel = "scripted:a"\n'
        '[[profiles.p.branches]]\nmodel = "scripted:b"\nmax_tokens = "lots"\n'
        '[[profiles.p.branches]]\nmodel = "scripted:c"\nmax_tokens = 5\n'
    )
    with pytest.raises(ConfigError) as info:
        load_gateway_config(path)
    assert (info.value.file, info.value.line) == (str(path), 10)
    assert info.value.key == "profiles.p.branches[1].max_tokens"
