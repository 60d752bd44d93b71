"""What a race runs: branch specs and race files.

A branch is written as ``provider:model`` with optional settings after an ``@``
(``openai:gpt-4o-mini@temperature=0.2,max_tokens=200``), or as a table in a race file (TOML, YAML
or JSON) that describes the whole race::

    strategy = "judge"
    max_tokens = 200

    [judge]
    model = "local:smollm2"

    [[branches]]
    name = "precise"
    model = "local:smollm2"
    system_prompt = "Answer precisely and briefly."
    temperature = 0.2

A branch's settings use one set of names everywhere (:class:`BranchFields`: ``system_prompt``,
``thinking``, ``temperature``, ``top_p``, ``seed``, ``max_tokens``); the older ``system`` and
``thinking_level`` are accepted. Every mistake in a file is a :class:`~phi_core.errors.ConfigError`
naming the file, the line and the key (``branches[1].temperature``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from pydantic import AliasChoices, Field, ValidationError, field_validator

from ..errors import UnknownModelError, UserError
from ..loop import AgentLoopConfig
from ..parallel import STRATEGY_NAMES
from ..providers.base import Provider
from ..providers.registry import get_provider, qualify_model_name, split_model_settings
from ._load import read_source, validate
from ._schema import BranchFields, _Section
from ._source import ConfigSource

__all__ = [
    "DEFAULT_BRANCHES",
    "DEFAULT_JUDGE",
    "RACE_STRATEGIES",
    "BranchSpec",
    "RaceSpec",
    "load_race_spec",
    "parse_branch",
    "parse_race_spec",
    "split_branch_list",
]

RACE_STRATEGIES: tuple[str, ...] = (*STRATEGY_NAMES, "bandit")
"""Every strategy a race can use: the parallel strategies plus the learned ``bandit`` router."""

_SLUG = re.compile(r"[^\w-]+")


class BranchSpec(BranchFields):
    """One configuration to race: a model plus the settings that make it different."""

    name: str | None = None
    model: str = Field(min_length=3)

    @property
    def label(self) -> str:
        """The branch's display name: its own name, else the model with its settings."""
        if self.name:
            return self.name
        settings = [
            f"{key}={value}"
            for key, value in self.model_dump(exclude={"name", "model", "system_prompt"}).items()
            if value is not None
        ]
        return self.model + (f"@{','.join(settings)}" if settings else "")

    def loop_config(
        self,
        *,
        provider: Provider | None = None,
        max_tokens: int | None = None,
        system_prompt: str | None = None,
    ) -> AgentLoopConfig:
        """The :class:`AgentLoopConfig` that runs this branch, checked now.

        ``max_tokens`` and ``system_prompt`` apply when the branch sets none. Without a
        ``provider`` the registry's client is built at once, so an unknown provider, a missing
        key or a missing extra raises a :class:`~phi_core.errors.UserError` before anything runs.
        """
        config = AgentLoopConfig(
            model=self.model,
            provider=provider,
            config_id=(_SLUG.sub("-", self.name).strip("-") or None) if self.name else None,
            thinking=self.thinking or "off",
            max_tokens=self.max_tokens if self.max_tokens is not None else max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            seed=self.seed,
            system_prompt=self.system_prompt if self.system_prompt is not None else system_prompt,
        )
        if provider is None:
            get_provider(config.model_config())
        return config


class RaceSpec(_Section):
    """A whole race as a file describes it; every key is optional.

    ``branches`` left out races the default configurations; an empty list is a mistake.
    """

    strategy: str | None = None
    judge: BranchSpec | None = None
    system_prompt: str | None = Field(
        default=None, validation_alias=AliasChoices("system_prompt", "system")
    )
    """For branches that set none (added before each default configuration's own prompt)."""
    max_tokens: int | None = Field(default=None, ge=1)
    timeout: float | None = Field(default=None, gt=0)
    max_concurrency: int | None = Field(default=None, ge=1)
    branches: list[BranchSpec] | None = None

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str | None) -> str | None:
        return None if value is None else strategy_name(value)

    @field_validator("judge", mode="before")
    @classmethod
    def _judge_string(cls, value: object) -> object:
        return {"model": value} if isinstance(value, str) else value

    @field_validator("branches")
    @classmethod
    def _not_empty(cls, value: list[BranchSpec] | None) -> list[BranchSpec] | None:
        if value is not None and not value:
            raise ValueError(
                "`branches` is empty, so there is nothing to race; add at least one branch "
                '(`[[branches]]` with `model = "provider:model"`), or remove the key to race the '
                "default configurations"
            )
        return value


def strategy_name(name: str) -> str:
    """``name`` normalised (``Exec_Vote`` → ``exec-vote``); an unknown one is a usage error."""
    import difflib

    key = name.strip().lower().replace("_", "-")
    if key not in RACE_STRATEGIES:
        close = difflib.get_close_matches(key, RACE_STRATEGIES, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UserError(
            f"Unknown strategy {name!r}.{hint} Choose one of: {', '.join(RACE_STRATEGIES)}."
        )
    return key


# Three configurations of the embedded model that differ in system prompt and temperature, so the
# keyless default race compares configurations rather than three samples of one.
DEFAULT_BRANCHES: tuple[BranchSpec, ...] = (
    BranchSpec(
        name="precise",
        model="local:smollm2",
        system_prompt="You are a precise assistant. Answer accurately in a few clear sentences.",
        temperature=0.2,
    ),
    BranchSpec(
        name="teacher",
        model="local:smollm2",
        system_prompt="You are a patient teacher. Explain simply, with one concrete example.",
        temperature=0.7,
    ),
    BranchSpec(
        name="storyteller",
        model="local:smollm2",
        system_prompt="You are a vivid writer. Explain with an everyday analogy.",
        temperature=1.0,
    ),
)
DEFAULT_JUDGE = BranchSpec(name="judge", model="local:smollm2", temperature=0.0)

_SETTING_KEYS = ("name", *BranchFields.model_fields)
_SETTING_ALIASES = {"system": "system_prompt", "thinking_level": "thinking"}


def parse_branch(
    text: str, named: Sequence[BranchSpec] = (), *, qualify: bool = False
) -> BranchSpec:
    """``provider:model[@key=value,...]``, or the name of one of the ``named`` branches.

    With ``qualify``, an alias or a bare model name is looked up (``phi aliases``, then the
    catalog: ``gpt-4o`` → ``openai:gpt-4o``; an ambiguous one raises, listing the candidates).

    Raises:
        UserError: an empty text, a model without provider, an unknown or invalid setting.
    """
    text = text.strip()
    if not text:
        raise UserError("An empty model was given; write `provider:model`.")
    for branch in named:
        if branch.name == text:
            return branch
    model, settings = split_model_settings(text)
    head, at, tail = model.rpartition("@")
    if at and _SETTING_ALIASES.get(tail, tail) in _SETTING_KEYS:
        raise UserError(
            f"Model {text!r} ends in '@{tail}' without a value: write settings after '@' as "
            f"key=value pairs, for example `{head}@{tail}=...`."
        )
    if ":" in model:
        pass  # `provider:model`: an unknown provider is named when the model is resolved
    elif qualify:
        model = qualify_model_name(model)
    else:
        raise UserError(_bare_name_message(text, model, named))
    fields: dict[str, Any] = {"model": model}
    for key, value in settings.items():
        key = _SETTING_ALIASES.get(key, key)
        if key not in _SETTING_KEYS:
            raise UserError(
                f"Unknown setting {key!r} in model {text!r}; use one of: {', '.join(_SETTING_KEYS)}."
            )
        fields[key] = value
    try:
        return BranchSpec.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise UserError(
            f"Bad setting `{key}` in model {text!r}: {first['msg']} (got {first['input']!r})."
        ) from None


def _bare_name_message(text: str, model: str, named: Sequence[BranchSpec]) -> str:
    names = [b.name for b in named if b.name]
    known = f" The race file names: {', '.join(names)}." if names else ""
    try:
        hint = f" Did you mean {qualify_model_name(model)!r}?"
    except UnknownModelError:
        hint = ""
    return (
        f"Model {text!r} is neither `provider:model` (for example `local:smollm2` or "
        f"`openai:gpt-4o-mini@temperature=0.2`) nor a branch named in the race file.{hint}{known}"
    )


def split_branch_list(text: str) -> list[str]:
    """Split a comma-separated list of branches whose ``@settings`` contain commas too:
    ``a@temperature=0.2,max_tokens=50,b`` → ``["a@temperature=0.2,max_tokens=50", "b"]``."""
    items: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if items and "@" in items[-1] and re.match(r"^[a-z_]+=", part):
            items[-1] += "," + part
        else:
            items.append(part)
    return items


# --------------------------------------------------------------------------- race files


def load_race_spec(path: str | os.PathLike[str]) -> RaceSpec:
    """Read and validate a race file (``.toml``, ``.yaml``/``.yml`` or ``.json``)."""
    return _race_spec(read_source(path))


def parse_race_spec(text: str, fmt: str = "toml", *, file: str | None = None) -> RaceSpec:
    """Validate race-file ``text`` in format ``fmt`` (``toml``, ``json`` or ``yaml``)."""
    if fmt not in ("toml", "json", "yaml"):
        raise UserError(f"Unknown race-file format {fmt!r}; use 'toml', 'json' or 'yaml'.")
    return _race_spec(ConfigSource(text=text, fmt=fmt, file=file))  # type: ignore[arg-type]


def _race_spec(source: ConfigSource) -> RaceSpec:
    data = source.parse()
    if not data:
        raise source.error(
            "the race file is empty: add `[[branches]]` (or `strategy`, `judge`, ...), or leave "
            "out --config to race the default configurations."
        )
    branches = data.get("branches")
    for i, branch in enumerate(branches if isinstance(branches, list) else []):
        _split_settings(branch, source, ("branches", i))
    if isinstance(data.get("judge"), str):
        data["judge"] = {"model": data["judge"]}
    _split_settings(data.get("judge"), source, ("judge",))
    spec = validate(RaceSpec, data, source)
    _check_branches(spec, source)
    return spec


def _split_settings(branch: object, source: ConfigSource, where: tuple[str | int, ...]) -> None:
    """A race file's ``model = "provider:model@key=value,..."``: the settings become the
    branch's keys, as they do on the command line (in place)."""
    if not isinstance(branch, dict) or not isinstance(branch.get("model"), str):
        return
    try:
        model, settings = split_model_settings(branch["model"])
    except UserError as error:
        raise source.error(str(error), (*where, "model")) from None
    for key, value in settings.items():
        key = _SETTING_ALIASES.get(key, key)
        if key not in _SETTING_KEYS or key == "model":
            raise source.error(
                f"unknown setting {key!r} after '@'; use one of: "
                f"{', '.join(k for k in _SETTING_KEYS if k != 'model')}.",
                (*where, "model"),
            )
        if key in branch:
            raise source.error(
                f"{key!r} is set both after '@' and as a key of the branch; keep one.",
                (*where, key),
            )
        branch[key] = value
    branch["model"] = model


def _check_branches(spec: RaceSpec, source: ConfigSource) -> None:
    """Every model names a known provider (checked here, so the error has file, line and
    key), and no two branches share a name."""
    from ..providers.registry import resolve_model

    named: dict[str, int] = {}
    places: list[tuple[BranchSpec, tuple[str | int, ...]]] = [
        (b, ("branches", i)) for i, b in enumerate(spec.branches or [])
    ]
    if spec.judge is not None:
        places.append((spec.judge, ("judge",)))
    for branch, where in places:
        try:
            resolve_model(branch.model)
        except UserError as error:
            raise source.error(str(error), (*where, "model")) from None
        if branch.name and where[0] == "branches":
            if branch.name in named:
                raise source.error(
                    f"branches {named[branch.name]} and {where[1]} are both named "
                    f"{branch.name!r}; give each branch its own name.",
                    (*where, "name"),
                )
            named[branch.name] = int(where[1])
