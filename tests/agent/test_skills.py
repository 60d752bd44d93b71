"""Skills from Python: SkillSet.load / load_dir / merge and BasicAgent.with_skills."""

from __future__ import annotations

from pathlib import Path

import pytest

from phi_core.agent import BasicAgent
from phi_core.context import SkillSet
from phi_core.errors import SkillError
from phi_core.testing import ScriptedProvider


def skill(root: Path, name: str, description: str, body: str = "Do it well.") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"
    )
    return folder / "SKILL.md"


def test_load_dir_reads_front_matter_and_skips_folders_without_skill_md(tmp_path: Path) -> None:
    skill(tmp_path, "git", '"Git operations: commit, branch, merge."')
    (tmp_path / "notes").mkdir()
    skills = SkillSet.load_dir(tmp_path, "workspace")
    assert skills.names == ["git"] and len(skills) == 1
    git = skills.get("git")
    assert git is not None and git.description == "Git operations: commit, branch, merge."
    assert git.source == "workspace" and git.location == (tmp_path / "git" / "SKILL.md").resolve()
    assert SkillSet.load_dir(tmp_path / "missing").names == []


def test_later_directories_and_merges_win(tmp_path: Path) -> None:
    skill(tmp_path / "bundled", "git", "old")
    skill(tmp_path / "bundled", "sql", "queries")
    skill(tmp_path / "user", "git", "new")
    loaded = SkillSet.load([tmp_path / "bundled", tmp_path / "user"])
    assert loaded.get("git").description == "new"  # type: ignore[union-attr]
    base = SkillSet.load_dir(tmp_path / "bundled")
    base.merge(SkillSet.load_dir(tmp_path / "user"))
    assert base.get("git").description == "new" and base.names == ["git", "sql"]  # type: ignore[union-attr]


def test_a_skill_without_description_is_an_error_naming_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: bad\n---\nbody\n")
    with pytest.raises(SkillError, match=r"SKILL.md' needs a non-empty description"):
        SkillSet.load_dir(tmp_path)
    (folder / "SKILL.md").write_text("no front matter")
    with pytest.raises(SkillError, match="has no front matter"):
        SkillSet.load_dir(tmp_path)


async def test_with_skills_appends_the_escaped_index_to_the_system_prompt(tmp_path: Path) -> None:
    skill(tmp_path, "review", "Review code <carefully> & kindly.")
    provider = ScriptedProvider(["ok"])
    agent = BasicAgent(provider=provider, system_prompt="You are a coder.")
    agent.with_skills([tmp_path])
    await agent.prompt("hi")
    sent = provider.requests[0].system_prompt or ""
    assert sent.startswith("You are a coder.\n\n<available_skills>")
    assert "<description>Review code &lt;carefully&gt; &amp; kindly.</description>" in sent
    assert agent.system_prompt == "You are a coder."  # the prompt itself is unchanged


async def test_relative_skill_dirs_resolve_against_the_workspace(tmp_path: Path) -> None:
    skill(tmp_path / "skills", "deploy", "Ship it.")
    agent = BasicAgent("scripted:m").with_workspace(tmp_path).with_skills("skills")
    assert agent.skills.names == ["deploy"]
