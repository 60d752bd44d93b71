"""System prompts from config values: inline text, ``file:`` references and prompt strategies,
plus AgentSkills ``SKILL.md`` discovery for the skills a profile lists."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..context.skills import Skill, SkillError, SkillSet
from ._refs import Namespaces, parse_reference
from ._schema import PromptInstance, StrategyInstance
from ._source import ConfigSource

__all__ = ["Skill", "compose_prompt", "format_skills", "load_skills", "resolve_prompt"]


def _read_file(value: str, workspace: Path, source: ConfigSource, path: Sequence[str | int]) -> str:
    target = Path(value.removeprefix("file:").strip())
    if not target.is_absolute():
        target = workspace / target
    try:
        return target.read_text(encoding="utf-8")
    except OSError as exc:
        raise source.error(
            f"cannot read the prompt file {str(target)!r} ({exc.strerror}); relative `file:` "
            f"paths resolve against the workspace {str(workspace)!r}.",
            path,
        ) from None


def resolve_prompt(
    value: str,
    workspace: Path,
    namespaces: Namespaces,
    path: Sequence[str | int],
) -> str:
    """Turn one ``system_prompt`` value into prompt text."""
    if value.startswith("file:"):
        return _read_file(value, workspace, namespaces.source, path)
    if parse_reference(value) is not None:
        _name, instance, _ref = namespaces.resolve(value, "system_prompt", path)
        assert isinstance(instance, PromptInstance)
        return compose_prompt(instance, workspace, namespaces, path)
    return value


def compose_prompt(
    instance: PromptInstance,
    workspace: Path,
    namespaces: Namespaces,
    path: Sequence[str | int],
) -> str:
    """Blocks of the instance's strategy in ``order``, each cut to ``max_length`` characters,
    joined by a blank line; blocks the instance does not fill are skipped."""
    source = namespaces.source
    if not instance.type:
        raise source.error(
            f"system prompt instance {instance.id!r} has no `type`; set it to a strategy "
            "reference such as {{system_prompt_strategy.NAME}}.",
            path,
        )
    _name, strategy, _ref = namespaces.resolve(instance.type, "system_prompt_strategy", path)
    assert isinstance(strategy, StrategyInstance)
    block_names = {b.name for b in strategy.blocks}
    contents = instance.blocks()
    unknown = sorted(set(contents) - block_names)
    if unknown:
        raise source.error(
            f"system prompt instance {instance.id!r} fills block(s) {', '.join(unknown)} that "
            f"strategy {strategy.id!r} does not define (blocks: {', '.join(sorted(block_names))}).",
            path,
        )
    parts: list[str] = []
    for block in sorted(strategy.blocks, key=lambda b: b.order):
        content = contents.get(block.name)
        if content is None:
            continue
        if not isinstance(content, str):
            raise source.error(
                f"block {block.name!r} of {instance.id!r} must be text or a `file:` path, got "
                f"{type(content).__name__}.",
                path,
            )
        text = (
            _read_file(content, workspace, source, path) if content.startswith("file:") else content
        )
        if block.max_length is not None:
            text = text[: block.max_length]
        if text:
            parts.append(text)
    return "\n\n".join(parts)


def load_skills(directories: Sequence[Path], source: ConfigSource) -> SkillSet:
    """Every ``*/SKILL.md`` under ``directories`` (later directories win on a name clash); a
    malformed ``SKILL.md`` is a config error pointing at ``[skills].paths``."""
    skills = SkillSet()
    for index, directory in enumerate(directories):
        try:
            skills.merge(SkillSet.load_dir(directory, f"dir:{index}"))
        except SkillError as exc:
            raise source.error(str(exc), ("skills", "paths", index)) from None
    return skills


def format_skills(skills: Sequence[Skill] | SkillSet) -> str:
    """The ``<available_skills>`` index of ``skills`` ("" when there are none)."""
    return (skills if isinstance(skills, SkillSet) else SkillSet(skills)).format_for_prompt()
