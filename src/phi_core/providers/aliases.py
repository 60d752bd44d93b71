"""Model aliases stored in the user directory (``phi aliases set fast openai:gpt-4o-mini``).

An alias is a short name for one ``provider:model``; it is accepted wherever a model name is
(``-m fast``, ``--judge fast``, race and select files, ``AgentLoopConfig(model="fast")``), and
settings can follow it as they follow a model (``-m fast@temperature=0.2``). Aliases live in
``$PHI_HOME/aliases.json``. An alias name has no ``:`` (so it never hides a ``provider:model``
string) and may shadow a bare catalog name (``gpt-4o``), as ``llm aliases`` allows.
"""

from __future__ import annotations

import re
from pathlib import Path

from .._paths import user_path
from .._userfile import read_json, write_json
from ..errors import UserError

__all__ = [
    "ALIASES_FILE",
    "aliases_path",
    "load_aliases",
    "lookup_alias",
    "remove_alias",
    "set_alias",
]

ALIASES_FILE = "aliases.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def aliases_path() -> Path:
    """``$PHI_HOME/aliases.json``."""
    return user_path(ALIASES_FILE)


def load_aliases() -> dict[str, str]:
    """Every alias and the ``provider:model`` it names."""
    return {k: v for k, v in read_json(aliases_path()).items() if isinstance(v, str)}


def lookup_alias(name: str) -> str | None:
    """The ``provider:model`` that ``name`` stands for, or ``None``."""
    if ":" in name or not aliases_path().exists():
        return None
    return load_aliases().get(name.strip())


def set_alias(name: str, model: str) -> str:
    """Make ``name`` stand for ``model``; returns the ``provider:model`` stored.

    ``model`` may be a bare catalog name (``gpt-4o-mini``) or another alias; both are stored
    resolved, so an alias never depends on another.

    Raises:
        UserError: a name with ``:``, ``@`` or spaces, a model with settings, or a model that no
            provider offers.
    """
    from .registry import qualify_model_name, resolve_model

    name = name.strip()
    if not _NAME.match(name):
        raise UserError(
            f"Alias name {name!r} may hold only letters, digits, '_', '.' and '-' (no ':', which "
            "marks `provider:model`, and no '@', which starts settings)."
        )
    target = model.strip()
    if "@" in target and "=" in target.rsplit("@", 1)[1]:
        raise UserError(
            f"An alias names a model without settings, got {model!r}; add settings where you use "
            f"it: `-m {name}@temperature=0.2`."
        )
    qualified = target if ":" in target else qualify_model_name(target)
    resolve_model(qualified)  # an unknown provider raises here, naming the known ones
    aliases = read_json(aliases_path())
    aliases[name] = qualified
    write_json(aliases_path(), aliases)
    return qualified


def remove_alias(name: str) -> bool:
    """Forget alias ``name``; ``False`` when there was none."""
    aliases = read_json(aliases_path())
    if name.strip() not in aliases:
        return False
    del aliases[name.strip()]
    write_json(aliases_path(), aliases)
    return True
