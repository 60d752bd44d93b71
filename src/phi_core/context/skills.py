"""Skills (the AgentSkills standard): ``SKILL.md`` files whose name and description go into the
system prompt, so the model reads a skill's instructions only when it needs them::

    skills = SkillSet.load(["./skills", "~/.phi/skills"])   # later directories win on a clash
    agent = BasicAgent("openai:gpt-4o-mini").with_skills(skills)

A skill is a directory holding ``SKILL.md`` with YAML front matter (``name``, ``description``)
between ``---`` lines. Directories that do not exist, and sub-directories without a ``SKILL.md``,
are skipped; a ``SKILL.md`` without a name or description is an error naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import yaml

from ..errors import SkillError, UserError

__all__ = ["Skill", "SkillError", "SkillSet"]


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    location: Path
    """The ``SKILL.md`` file (the model reads it with a file tool)."""
    source: str = ""
    """Where it was loaded from (the label given to :meth:`SkillSet.load_dir`)."""

    @property
    def base_dir(self) -> Path:
        return self.location.parent


_FRONT = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|\Z)", re.DOTALL)


def _front_matter(path: Path) -> dict[str, str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    match = _FRONT.match(text)
    if match is None:
        raise SkillError(
            f"{str(path)!r} has no front matter; start it with `---`, then `name: …` and "
            "`description: …` lines, then `---`.",
            path=path,
        )
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise SkillError(
            f"{str(path)!r}: the front matter is not valid YAML ({exc}); write `name: …` and "
            "`description: …` lines (quote values that contain a colon).",
            path=path,
        ) from None
    if not isinstance(data, dict):
        raise SkillError(
            f"{str(path)!r}: the front matter must be `key: value` lines, got {data!r}.", path=path
        )
    return {str(k): str(v).strip() for k, v in data.items() if v is not None}


class SkillSet:
    """Skills by name (sorted), loadable from directories and mergeable."""

    def __init__(self, skills: Iterable[Skill] = ()) -> None:
        self._skills: dict[str, Skill] = {}
        for skill in skills:
            self._skills[skill.name] = skill

    @classmethod
    def load_dir(cls, directory: str | Path, source: str = "") -> SkillSet:
        """Every ``*/SKILL.md`` directly under ``directory`` (skipped if it does not exist)."""
        root = Path(directory).expanduser()
        found: list[Skill] = []
        if root.is_dir():
            for skill_file in sorted(root.glob("*/SKILL.md")):
                meta = _front_matter(skill_file)
                missing = [k for k in ("name", "description") if not meta.get(k)]
                if missing:
                    raise SkillError(
                        f"{str(skill_file)!r} needs a non-empty {' and '.join(missing)} in its "
                        "front matter.",
                        path=skill_file,
                    )
                found.append(
                    Skill(
                        name=skill_file.parent.name,
                        description=meta["description"],
                        location=skill_file.resolve(),
                        source=source or str(root),
                    )
                )
        return cls(found)

    @classmethod
    def load(cls, directories: Sequence[str | Path]) -> SkillSet:
        """Skills from several directories; a later directory wins on a name clash."""
        merged = cls()
        for index, directory in enumerate(directories):
            merged.merge(cls.load_dir(directory, f"dir:{index}"))
        return merged

    def merge(self, other: SkillSet) -> SkillSet:
        """Add ``other``'s skills, replacing same-named ones; returns ``self``."""
        self._skills.update(other._skills)
        return self

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name)

    def select(self, names: Sequence[str]) -> SkillSet:
        """Only the named skills; raises :class:`UserError` naming any that are missing."""
        missing = [n for n in names if n not in self._skills]
        if missing:
            raise UserError(
                f"Skill(s) {', '.join(map(repr, missing))} not found; loaded: "
                f"{', '.join(self.names) or 'none'}."
            )
        return SkillSet(self._skills[n] for n in names)

    @property
    def names(self) -> list[str]:
        return sorted(self._skills)

    def __iter__(self) -> Iterator[Skill]:
        return iter(self._skills[n] for n in self.names)

    def __len__(self) -> int:
        return len(self._skills)

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __repr__(self) -> str:
        return f"SkillSet({self.names!r})"

    def format_for_prompt(self) -> str:
        """The ``<available_skills>`` index for the system prompt ("" when empty)."""
        if not self._skills:
            return ""
        rows = [
            "  <skill>\n"
            f"    <name>{escape(s.name)}</name>\n"
            f"    <description>{escape(s.description)}</description>\n"
            f"    <location>{escape(str(s.location))}</location>\n"
            "  </skill>"
            for s in self
        ]
        return "<available_skills>\n" + "\n".join(rows) + "\n</available_skills>"
