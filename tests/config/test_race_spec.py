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
