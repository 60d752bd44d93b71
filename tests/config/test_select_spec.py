"""Selection specs: checked (file, line, key) before any model is called."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phi_core.config import load_select_spec, prompt_chain
from phi_core.errors import ConfigError
from phi_core.providers.base import ModelConfig
from phi_core.select import MeteredModel
from phi_core.testing import Reply, ScriptedProvider

SPEC = """dataset = "data.jsonl"
scorer = "contains"
max_concurrent = 4
cache = false

[steps]
planner = ["scripted:p"]
solver = ["scripted:a", "scripted:b"]

[prompts]
planner = "Plan for {input}"
solver = "Question: {input}\\nPlan: {planner}"
"""


def write(tmp_path: Path, spec: str = SPEC, rows: list[dict[str, object]] | None = None) -> Path:
    rows = rows or [{"input": "2+2", "expected": "4"}, {"input": "3+3", "expected": "6"}]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    path = tmp_path / "spec.toml"
    path.write_text(spec)
    return path


def test_a_good_spec_builds_a_selector(tmp_path: Path) -> None:
    spec = load_select_spec(write(tmp_path))
    selector = spec.selector()
    assert selector.max_concurrent == 4 and len(selector.dataset) == 2
    assert spec.cache_path is None and selector.timeout is None
    timed = load_select_spec(
        write(tmp_path, SPEC.replace("cache = false", "cache = false\ntimeout = 90"))
    )
    assert timed.selector().timeout == 90.0


def test_a_word_where_a_number_belongs_names_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, SPEC.replace("max_concurrent = 4", 'max_concurrent = "four"'))
    with pytest.raises(ConfigError) as info:
        load_select_spec(path)
    assert (info.value.file, info.value.line, info.value.key) == (str(path), 3, "max_concurrent")
    assert "'four'" in str(info.value)


def test_an_unknown_placeholder_is_refused_naming_it_and_the_datasets_keys(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        SPEC.replace("Plan for {input}", "Plan for {question}"),
        rows=[{"input": "2+2", "expected": "4", "id": 1}],
    )
    spec = load_select_spec(path)
    with pytest.raises(ConfigError) as info:
        spec.selector()
    message = str(info.value)
    assert info.value.key == "prompts.planner" and info.value.line == 11
    assert "{question}" in message and "{input}" in message
    assert "input, expected, id" in message


def test_a_placeholder_naming_a_later_step_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, SPEC.replace("Plan for {input}", "Plan for {solver}"))
    with pytest.raises(ConfigError, match=r"\{solver\}.*later step"):
        load_select_spec(path).selector()


def test_a_broken_template_is_located(tmp_path: Path) -> None:
    path = write(tmp_path, SPEC.replace("Plan for {input}", "Plan for {input"))
    with pytest.raises(ConfigError, match="not a valid template") as info:
        load_select_spec(path).selector()
    assert info.value.key == "prompts.planner"


async def test_an_object_inputs_fields_are_placeholders_too(tmp_path: Path) -> None:
    spec = SPEC.replace("Plan for {input}", "Plan for {question} ({topic})")
    rows = [{"input": {"question": "2+2?", "topic": "maths"}, "expected": "4"}]
    load_select_spec(write(tmp_path, spec, rows)).selector()  # accepted
    provider = ScriptedProvider(default=Reply("ok"))
    model = MeteredModel(
        ModelConfig(provider="scripted", id="p", api="scripted"), provider=provider
    )
    chain = prompt_chain({"planner": "Plan for {question} ({topic})"})
    await chain({"planner": model}, rows[0]["input"])
    assert provider.requests[0].messages[0].content[0].text == "Plan for 2+2? (maths)"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (('solver = ["scripted:a", "scripted:b"]', "solver = []"), "steps"),
        (("[steps]", "colour = 1\n[steps]"), "colour"),
        (('scorer = "contains"', 'scorer = "nothere.py:score"'), "scorer"),
        (("cache = false", 'cache = false\nalgorithm = "bruteforce"'), "algorithm"),
        (("cache = false", "cache = false\ntimeout = 0"), "timeout"),
        (
            ("[steps]", 'algorithm = "regret_race"\n[algorithm_params]\nperfect_lok = 4\n[steps]'),
            "algorithm_params",
        ),
        (
            ("cache = false", "cache = false\n[budget]\nmax_evaluations = 0"),
            "budget.max_evaluations",
        ),
        (('solver = "Question', 'judge = "x"\nsolver = "Question'), "prompts.judge"),
    ],
)
def test_each_mistake_is_a_located_config_error(
    tmp_path: Path, change: tuple[str, str], key: str
) -> None:
    path = write(tmp_path, SPEC.replace(*change))
    with pytest.raises(ConfigError) as info:
        load_select_spec(path).selector()
    assert info.value.key == key and info.value.line is not None


def test_a_misspelt_built_in_scorer_lists_the_built_in_ones(tmp_path: Path) -> None:
    path = write(tmp_path, SPEC.replace('scorer = "contains"', 'scorer = "contain"'))
    with pytest.raises(ConfigError, match="unknown scorer 'contain': use a built-in one") as info:
        load_select_spec(path).selector()
    assert "'exact', 'contains'" in str(info.value)
    assert info.value.key == "scorer" and info.value.line is not None


def test_an_agent_file_that_fails_to_import_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("def broken(:\n")
    path = write(tmp_path, SPEC.replace("[prompts]", 'agent = "agent.py:run"\n[prompts]', 1))
    path.write_text('agent = "agent.py:run"\n' + SPEC)
    with pytest.raises(ConfigError, match="SyntaxError") as info:
        load_select_spec(path).selector()
    assert info.value.key == "agent"


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_yaml_and_json_specs_are_read_too(tmp_path: Path, suffix: str) -> None:
    write(tmp_path)
    data = {
        "dataset": "data.jsonl",
        "cache": False,
        "steps": {"solver": ["scripted:a"]},
        "prompts": {"solver": "Q: {input}"},
        "max_concurrent": "four",
    }
    path = tmp_path / f"spec{suffix}"
    text = json.dumps(data, indent=2)  # JSON is valid YAML
    path.write_text(text)
    with pytest.raises(ConfigError, match="max_concurrent") as info:
        load_select_spec(path)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if '"max_concurrent"' in t)
    assert info.value.line == line
    data["max_concurrent"] = 2
    path.write_text(json.dumps(data, indent=2))
    assert load_select_spec(path).selector().max_concurrent == 2


def test_a_wrong_value_of_a_union_key_names_the_key_as_written(tmp_path: Path) -> None:
    """`cache` is a bool or a path: the error names `cache`, not pydantic's `cache.bool`."""
    path = write(tmp_path, SPEC.replace("cache = false", "cache = 5"))
    with pytest.raises(ConfigError) as info:
        load_select_spec(path)
    assert (info.value.line, info.value.key) == (4, "cache")
    assert "cache.bool" not in str(info.value) and "(got 5)" in str(info.value)


def test_an_error_in_a_nested_table_after_inline_arrays_names_its_line(tmp_path: Path) -> None:
    spec = SPEC.replace(
        "cache = false", 'cache = false\n[budget]\nmax_evaluations = "many"'
    ).replace('solver = ["scripted:a", "scripted:b"]', 'solver = [\n  "scripted:a",\n  5,\n]')
    with pytest.raises(ConfigError) as element:
        load_select_spec(write(tmp_path, spec))
    assert (element.value.line, element.value.key) == (12, "steps.solver[1]")
    with pytest.raises(ConfigError) as info:
        load_select_spec(write(tmp_path, spec.replace("  5,", '  "scripted:b",')))
    assert (info.value.line, info.value.key) == (6, "budget.max_evaluations")
