"""System prompts from config values: inline text, ``file:`` references and prompt strategies,
plus AgentSkills ``SKILL.md`` discovery for the skills a profile lists."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

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


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    location: Path


_FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*(\n|\Z)", re.DOTALL)


def _front_matter(text: str) -> dict[str, str]:
    match = _FRONT.match(text)
    if match is None:
        return {}
    out: dict[str, str] = {}
    for line in match.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip().strip("\"'")
    return out


def load_skills(directories: Sequence[Path], source: ConfigSource) -> dict[str, Skill]:
    """Every ``*/SKILL.md`` under ``directories`` (later directories win on a name clash)."""
    skills: dict[str, Skill] = {}
    for index, directory in enumerate(directories):
        if not directory.is_dir():
            continue
        for skill_file in sorted(directory.glob("*/SKILL.md")):
            meta = _front_matter(skill_file.read_text(encoding="utf-8"))
            if not meta.get("name") or not meta.get("description"):
                raise source.error(
                    f"{str(skill_file)!r} needs front matter with non-empty `name` and "
                    "`description` between `---` lines.",
                    ("skills", "paths", index),
                )
            name = skill_file.parent.name
            skills[name] = Skill(name=name, description=meta["description"], location=skill_file)
    return dict(sorted(skills.items()))


def format_skills(skills: Sequence[Skill]) -> str:
    if not skills:
        return ""
    rows = [
        "<skill>"
        f"<name>{escape(s.name)}</name>"
        f"<description>{escape(s.description)}</description>"
        f"<location>{escape(str(s.location))}</location>"
        "</skill>"
        for s in skills
    ]
    return "<available_skills>\n" + "\n".join(rows) + "\n</available_skills>"
