"""``-m``/``--judge`` values as branches, held to the race file's rules: a setting after ``@``
is given once, and no two branches share a name."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..config import BranchSpec, parse_branch
from ..errors import UserError, redact

__all__ = ["flag_branch", "flag_branches"]

_SETTINGS = re.compile(r"^[a-z_]+=")
_SAME_SETTING = {"system": "system_prompt", "thinking_level": "thinking"}


def flag_branch(text: str, named: Sequence[BranchSpec] = ()) -> BranchSpec:
    """One ``-m`` value (a branch ``named`` in the race file, an alias, a bare catalog name or
    ``provider:model``, with optional ``@settings``); a setting given twice is refused rather
    than the last one silently kept."""
    stripped = text.strip()
    at = stripped.rfind("@")
    suffix = stripped[at + 1 :]
    if at > 0 and _SETTINGS.match(suffix):
        seen: set[str] = set()
        for item in suffix.split(","):
            key = item.partition("=")[0].strip()
            key = _SAME_SETTING.get(key, key)
            if key in seen:
                raise UserError(
                    f"Model {redact(stripped)!r} sets {key!r} twice after '@'; give each "
                    "setting once."
                )
            seen.add(key)
    return parse_branch(text, named, qualify=True)


def flag_branches(texts: Sequence[str], named: Sequence[BranchSpec] = ()) -> list[BranchSpec]:
    """Every ``-m`` value as a branch; two that are named alike (``@name=x`` twice, or the race
    file's branch ``a`` given twice) are refused, as a race file refuses them."""
    branches: list[BranchSpec] = []
    first: dict[str, int] = {}
    for i, text in enumerate(texts):
        branch = flag_branch(text, named)
        if branch.name is not None:
            if branch.name in first:
                earlier, shown = redact(texts[first[branch.name]].strip()), redact(text.strip())
                given = (
                    f"-m {shown!r} is given twice"
                    if earlier == shown
                    else f"-m {earlier!r} and -m {shown!r} are both named {branch.name!r}"
                )
                raise UserError(
                    f"{given}; give each branch its own name (`@name=...`) and each race "
                    "file branch once."
                )
            first[branch.name] = i
        branches.append(branch)
    return branches
