"""Selection specs: a file (TOML, YAML or JSON) describing an offline model selection.

::

    dataset = "questions.jsonl"            # one {"input": ..., "expected": ...} per line
    scorer = "contains"                    # "exact", "contains", or "module:function" / "file.py:function"
    agent = "my_agent.py:PlannerSolver"    # optional: class(models) with run(input), or function(models, input)
    algorithm = "auto"                     # auto (= regret_race), regret_race_thrifty, arm_elimination, ...
    max_concurrent = 20
    seed = 0
    timeout = 120                          # optional: seconds one agent run may take (then it scores 0)
    cache = true                           # or a path to the SQLite cache file
    cost_weight = 0.0                      # optional: rank by score - w * norm(cost) - w' * norm(latency)
    latency_weight = 0.0                   #   during the search (AgentOpt's lambda_cost / lambda_latency)

    [steps]
    planner = ["openai:gpt-4o-mini", "local:smollm2"]
    solver = ["openai:gpt-4o", "openai:gpt-4o-mini"]

    [prompts]                              # used when there is no `agent`: steps run in order
    planner = "Write a short plan to answer: {input}"
    solver = "Question: {input}\\nPlan: {planner}\\nAnswer in a few words."

    [budget]                               # optional; each key also a `phi select` option
    max_evaluations = 400                  # (combination, datapoint) evaluations
    max_cost = 2.0                         # dollars actually paid (also max_cost_usd)
    max_total_tokens = 2_000_000           # tokens of every call (also max_tokens)
    max_calls = 5000                       # model calls sent
    deadline = 1800                        # seconds the whole run may take (also max_wall_s)

    [algorithm_params]                     # optional, e.g. delta = 0.1

A prompt may name ``{input}``, any earlier step and — when every input is an object — the
input's keys. Everything is checked when the spec is loaded, before any model is called: a wrong
type, an unknown key or placeholder, a missing dataset or scorer is a
:class:`~phi_core.errors.ConfigError` with the file, line and key.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import string
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, PrivateAttr, ValidationInfo, field_validator

from ..errors import ConfigError, UserError
from ..metering import Budget, check_amount_limit, check_count_limit
from ..select import MeteredModel, ModelSelector, default_cache_path, make_algorithm
from ._load import read_source, validate
from ._schema import _Section
from ._source import ConfigSource

__all__ = [
    "BUDGET_LIMITS",
    "BUILTIN_SCORERS",
    "SelectBudget",
    "SelectSpec",
    "check_budget_limit",
    "load_select_spec",
    "prompt_chain",
]


def _exact(expected: Any, actual: Any) -> float:
    return float(str(actual).strip().lower() == str(expected).strip().lower())


def _contains(expected: Any, actual: Any) -> float:
    return float(str(expected).strip().lower() in str(actual).lower())


BUILTIN_SCORERS: dict[str, Callable[[Any, Any], float]] = {"exact": _exact, "contains": _contains}


BUDGET_LIMITS: dict[str, tuple[str, str | None]] = {
    "max_evaluations": ("evaluations", None),
    "max_cost": ("dollars", "max_cost_usd"),
    "max_total_tokens": ("tokens", "max_tokens"),
    "max_calls": ("calls", None),
    "deadline": ("seconds", "max_wall_s"),
}
"""The keys of ``[budget]`` (the names of ``phi select``'s options): what each counts and the
other name it may be given by (the :class:`~phi_core.metering.Budget` field's)."""


def check_budget_limit(key: str, value: object, what: str | None = None) -> None:
    """Refuse a value of the ``[budget]`` limit ``key`` that :class:`~phi_core.metering.Budget`
    would refuse (:func:`~phi_core.metering.check_count_limit` for counts,
    :func:`~phi_core.metering.check_amount_limit` for dollars and seconds); ``what`` names it in
    the error (default: ``key``).

    Raises:
        UserError: naming it, the value and the accepted range.
    """
    unit, _ = BUDGET_LIMITS[key]
    if unit in ("dollars", "seconds"):
        check_amount_limit(what or key, value, unit)
    else:
        check_count_limit(what or key, value)


class SelectBudget(_Section):
    """``[budget]``: every limit of a :class:`~phi_core.metering.Budget`, and the number of
    evaluations. Each is optional (left out: no limit) and checked as ``Budget`` checks it."""

    max_evaluations: int | None = None
    """(combination, datapoint) evaluations the run may make (a whole number >= 1)."""
    max_cost: float | None = Field(
        default=None, validation_alias=AliasChoices("max_cost", "max_cost_usd")
    )
    """Dollars the run may pay (finite, > 0): ``Budget.max_cost_usd``."""
    max_total_tokens: int | None = Field(
        default=None, validation_alias=AliasChoices("max_total_tokens", "max_tokens")
    )
    """Input and output tokens of every call together (a whole number >= 1):
    ``Budget.max_tokens``."""
    max_calls: int | None = None
    """Model calls the run may send (a whole number >= 1): ``Budget.max_calls``."""
    deadline: float | None = Field(
        default=None, validation_alias=AliasChoices("deadline", "max_wall_s")
    )
    """Seconds the whole run may take (finite, > 0): ``Budget.max_wall_s``."""

    @field_validator("*", mode="before")
    @classmethod
    def _limit(cls, value: object, info: ValidationInfo) -> object:
        key = info.field_name
        if key is not None:  # a UserError is a ValueError: reported at the key given
            other = BUDGET_LIMITS[key][1]
            check_budget_limit(key, value, f"{key} (or {other})" if other else key)
        return value

    def budget(self) -> Budget | None:
        """The :class:`~phi_core.metering.Budget` of these limits (``None``: none is set)."""
        budget = Budget(
            max_tokens=self.max_total_tokens,
            max_cost_usd=self.max_cost,
            max_wall_s=self.deadline,
            max_calls=self.max_calls,
        )
        return None if budget.unlimited else budget


class SelectSpec(_Section):
    """The contents of a selection spec; build the selector with :meth:`selector`."""

    dataset: str
    scorer: str = "exact"
    agent: str | None = None
    algorithm: str = "auto"
    max_concurrent: int = Field(default=20, ge=1, strict=True)
    seed: int | None = Field(default=None, strict=True)
    timeout: float | None = Field(default=None, gt=0)
    cache: bool | str = True
    cost_weight: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Weight of the normalised cost in the objective the search ranks by (0: score alone)."""
    latency_weight: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Weight of the normalised latency in that objective."""
    steps: dict[str, list[str]]
    prompts: dict[str, str] | None = None
    budget: SelectBudget | None = None
    algorithm_params: dict[str, Any] = Field(default_factory=dict)

    _source: ConfigSource = PrivateAttr(default_factory=ConfigSource)

    @field_validator("steps")
    @classmethod
    def _candidates(cls, steps: dict[str, list[str]]) -> dict[str, list[str]]:
        if not steps:
            raise ValueError(
                'give at least one step with its candidate models, e.g. solver = ["openai:gpt-4o-mini"]'
            )
        for step, models in steps.items():
            if not models:
                raise ValueError(f"step {step!r} has no candidate models; list at least one")
        return steps

    @property
    def cache_path(self) -> Path | None:
        """Where the responses are cached (``None`` with ``cache = false``)."""
        if self.cache is False:
            return None
        if self.cache is True:
            return default_cache_path()
        return self._source.base_dir / self.cache

    def selector(self) -> ModelSelector:
        """The :class:`ModelSelector` this spec describes, checked before any model call."""
        source = self._source
        dataset, row_keys = _read_dataset(source.base_dir / self.dataset, source)
        scorer = BUILTIN_SCORERS.get(self.scorer)
        if scorer is None:
            if ":" not in self.scorer:  # not a reference: a misspelt built-in
                raise source.error(
                    f"unknown scorer {self.scorer!r}: use a built-in one "
                    f"({', '.join(map(repr, BUILTIN_SCORERS))}) or `module:function` / "
                    "`file.py:function`.",
                    ("scorer",),
                )
            scorer = _import(self.scorer, "scorer", source)
        if self.agent is not None:
            agent = _import(self.agent, "agent", source)
        else:
            agent = prompt_chain(self._prompts(dataset, row_keys))
        for key, params in (("algorithm", {}), ("algorithm_params", self.algorithm_params)):
            try:  # the name alone first, so a bad parameter is reported at its own table
                make_algorithm(self.algorithm, **params)
            except UserError as exc:
                raise source.error(str(exc), (key,)) from None
        limits = self.budget or SelectBudget()
        try:  # checked as Budget checks them when the spec was read; this is a last guard
            budget = limits.budget()
        except UserError as exc:
            raise source.error(str(exc), ("budget",)) from None
        cache = self.cache_path
        try:
            return ModelSelector(
                agent,
                self.steps,
                dataset,
                scorer,
                algorithm=self.algorithm,
                max_concurrent=self.max_concurrent,
                seed=self.seed,
                budget=budget,
                max_evaluations=limits.max_evaluations,
                cache=cache if cache is not None else False,
                algorithm_params=self.algorithm_params,
                timeout=self.timeout,
                cost_weight=self.cost_weight,
                latency_weight=self.latency_weight,
            )
        except ConfigError:
            raise
        except UserError as exc:
            raise ConfigError(str(exc), file=source.file) from exc

    def _prompts(self, dataset: Sequence[tuple[Any, Any]], row_keys: list[str]) -> dict[str, str]:
        """The step prompts in step order, every placeholder checked against what will exist."""
        source = self._source
        prompts = self.prompts
        if prompts is None:
            raise source.error(
                "without `agent`, give [prompts] with one template per step (the names of "
                f"[steps]: {', '.join(self.steps)}).",
                ("prompts",),
            )
        extra = sorted(set(prompts) - set(self.steps))
        if extra:
            raise source.error(
                f"prompt {extra[0]!r} names no step; the steps are: {', '.join(self.steps)}.",
                ("prompts", extra[0]),
            )
        missing = [s for s in self.steps if s not in prompts]
        if missing:
            raise source.error(f"no prompt for step {missing[0]!r}.", ("prompts",))
        inputs = [item[0] for item in dataset]
        input_keys: set[str] = (
            set.intersection(*(set(i) for i in inputs))
            if all(isinstance(i, Mapping) for i in inputs)
            else set()
        )
        available = ["input", *sorted(input_keys)]
        for step in self.steps:
            template = prompts[step]
            for name in _placeholders(template, source, step):
                if name not in available:
                    later = " (it is a later step)" if name in self.steps else ""
                    raise source.error(
                        f"the prompt names the placeholder {{{name}}}, which is not "
                        f"known{later}. Available here: "
                        f"{', '.join('{' + a + '}' for a in available)}. The dataset's rows "
                        f"have the keys: {', '.join(row_keys)} (the fields of an object "
                        '"input" can be named directly).',
                        ("prompts", step),
                    )
            available.append(step)
        return {step: prompts[step] for step in self.steps}


def load_select_spec(
    path: str | os.PathLike[str],
    *,
    budget: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> SelectSpec:
    """Read and validate a selection spec; ``overrides`` (not None) replace its top-level keys,
    ``budget`` (values not None) the keys of its ``[budget]`` table (:data:`BUDGET_LIMITS`).

    Raises:
        ConfigError: a value of the file's is wrong (with its file, line and key), or one of
            ``budget``'s (with its key).
    """
    source = read_source(path)
    data = source.parse()
    given = {k: v for k, v in overrides.items() if v is not None}
    data.update(given)
    source.overrides = given
    limits = {k: v for k, v in (budget or {}).items() if v is not None}
    if limits:
        data["budget"] = _with_limits(data.get("budget"), limits)
    spec = validate(SelectSpec, data, source)
    spec._source = source
    return spec


def _with_limits(table: Any, limits: Mapping[str, Any]) -> Any:
    """The file's ``[budget]`` table with ``limits`` in place of its own values (each checked
    here, so an error names the value given rather than a line of the file)."""
    for key, value in limits.items():
        if key not in BUDGET_LIMITS:
            raise UserError(
                f"Unknown budget limit {key!r}; use one of: {', '.join(BUDGET_LIMITS)}."
            )
        try:
            check_budget_limit(key, value)
        except UserError as exc:
            raise ConfigError(
                f"{value!r}, given in place of the file's value: {exc}", key=f"budget.{key}"
            ) from None
    if not isinstance(table, Mapping):  # none, or not a table: the file's own error, if any
        return dict(limits) if table is None else table
    merged = dict(table)
    for key, value in limits.items():
        merged.pop(key, None)
        other = BUDGET_LIMITS[key][1]
        if other is not None:
            merged.pop(other, None)  # the file's value under the Budget's name is replaced too
        merged[key] = value
    return merged


def prompt_chain(prompts: Mapping[str, str]) -> Callable[..., Any]:
    """An agent running the steps in order, each prompt filled with the input (and an object
    input's fields) and the earlier steps' replies."""

    async def chain(models: Mapping[str, MeteredModel], inputs: Any) -> str:
        values: dict[str, Any] = dict(inputs) if isinstance(inputs, Mapping) else {}
        values["input"] = inputs
        reply = ""
        for step, template in prompts.items():
            reply = await models[step].complete(template.format(**values))
            values[step] = reply
        return reply

    # what a resumed run must match (the prompts are the agent: see run_fingerprint)
    chain.fingerprint = json.dumps(dict(prompts), sort_keys=True)  # type: ignore[attr-defined]
    return chain


def _placeholders(template: str, source: ConfigSource, step: str) -> list[str]:
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise source.error(
            f"the prompt is not a valid template ({exc}); write a literal brace as {{{{ or }}}}.",
            ("prompts", step),
        ) from None
    names = []
    for field in fields:
        name = field.split(".", 1)[0].split("[", 1)[0]
        if not name or name.isdigit():
            raise source.error(
                f"the prompt has a positional placeholder {{{field}}}; name it, e.g. {{input}}.",
                ("prompts", step),
            )
        names.append(name)
    return names


def _read_dataset(path: Path, source: ConfigSource) -> tuple[list[tuple[Any, Any]], list[str]]:
    """The ``(input, expected)`` pairs of a JSONL file and the keys its rows have."""
    if not path.is_file():
        raise source.error(f"no dataset file at {str(path)!r}.", ("dataset",))
    items: list[tuple[Any, Any]] = []
    keys: dict[str, None] = {}
    try:
        with path.open("rb") as lines:
            for line_no, raw in enumerate(lines, 1):
                try:
                    line = raw.removeprefix(b"\xef\xbb\xbf" if line_no == 1 else b"").decode()
                except UnicodeDecodeError as error:
                    raise ConfigError(
                        f"the dataset is not UTF-8 text ({error.reason} at byte "
                        f"{error.start + 1} of the line); save it as UTF-8.",
                        file=str(path),
                        line=line_no,
                    ) from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    items.append((row["input"], row["expected"]))
                    keys.update(dict.fromkeys(row))
                except (json.JSONDecodeError, KeyError, TypeError) as error:
                    raise ConfigError(
                        f'each line must be a JSON object with "input" and "expected" ({error})',
                        file=str(path),
                        line=line_no,
                    ) from None
    except OSError as error:
        raise source.error(
            f"cannot read the dataset {str(path)!r}: {error.strerror or error}.", ("dataset",)
        ) from None
    if not items:
        raise source.error(f"the dataset {str(path)!r} has no items.", ("dataset",))
    return items, list(keys)


def _import(ref: str, what: str, source: ConfigSource) -> Any:
    module_name, sep, attr = ref.rpartition(":")
    if not sep or not module_name or not attr:
        raise source.error(f"expected `module:name` or `file.py:name`, got {ref!r}.", (what,))
    try:
        if module_name.endswith(".py"):
            path = (source.base_dir / module_name).resolve()
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None or not path.exists():
                raise source.error(f"no Python file at {str(path)!r}.", (what,))
            module = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(path.stem, module)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ConfigError:
        raise
    except ImportError as error:
        raise source.error(f"cannot import {module_name!r}: {error}.", (what,)) from None
    except Exception as error:  # the user's module failed while loading: say where and why
        raise source.error(
            f"importing {module_name!r} failed: {type(error).__name__}: {error}.", (what,)
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise source.error(f"{module_name!r} has no attribute {attr!r}.", (what,)) from None
