"""What a selection result turns into: a text summary, a LiteLLM config, a ``phi race`` config."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import AmbiguousModelError, UserError
from ..providers.catalog import VENDORS
from ..providers.registry import qualify_model_name, split_model_settings

if TYPE_CHECKING:
    from ._results import CombinationResult, SelectionResult

__all__ = [
    "ExportedModel",
    "litellm_config",
    "litellm_model",
    "race_config",
    "race_model",
    "summary_text",
    "totals_text",
]

# phi-core provider -> LiteLLM's provider prefix, where they differ.
_LITELLM = {"google": "gemini", "vertex": "vertex_ai", "llamacpp": "openai", "vllm": "hosted_vllm"}
_KEYS = {v.name: v.key_env for v in VENDORS if v.key_env}
_SETTINGS = ("temperature", "top_p", "seed", "max_tokens")


# LiteLLM provider prefixes a ``vendor/model`` candidate may start with (kept as they are).
_LITELLM_PREFIXES = frozenset(
    {v.name for v in VENDORS}
    | set(_LITELLM.values())
    | {"azure_ai", "cohere", "fireworks_ai", "huggingface", "ollama_chat", "perplexity"}
    | {"together_ai", "text-completion-openai", "lm_studio", "nvidia_nim", "sagemaker"}
) - {"google", "vertex", "vllm", "llamacpp", "openai-responses"}


def _bare(label: str) -> tuple[str, dict[str, str]]:
    """The model name and settings of a candidate label, without the ``#n`` that tells apart
    candidates sharing a name (see :func:`~phi_core.select.step_labels`)."""
    model, settings = split_model_settings(label)
    return re.sub(r"#\d+$", "", model), settings


def _catalog(model: str) -> tuple[str | None, str]:
    """``(provider:model the catalog or an alias gives, or None; why not)``."""
    try:
        return qualify_model_name(model), ""
    except AmbiguousModelError as error:
        return None, f"several providers offer it: {', '.join(error.candidates)}"
    except UserError:
        return None, "not in phi-core's catalog"


def _guess_vendor(model: str) -> str:
    """AgentOpt's guess for a bare name: ``claude`` -> anthropic, ``gemini`` -> google, else
    openai (``gpt``/``o3``/``o4`` names, and any OpenAI-compatible server's model)."""
    low = model.lower()
    if "claude" in low:
        return "anthropic"
    if "gemini" in low:
        return "google"
    return "openai"


@dataclass(frozen=True, slots=True)
class ExportedModel:
    """Where an exported candidate goes (see :func:`litellm_model` and :func:`race_model`)."""

    provider: str
    """phi-core's provider (``openai``, ``anthropic``, ``google``...)."""
    model: str
    """The LiteLLM ``provider/model``, or phi-core's ``provider:model``."""
    settings: dict[str, str]
    guessed: str = ""
    """Why the provider was guessed from the name (empty: the catalog or an alias knows it)."""


def litellm_model(label: str) -> ExportedModel:
    """The LiteLLM model of a candidate label; never fails.

    The catalog (or one of your ``phi aliases``) decides when it knows the name. Otherwise,
    like AgentOpt, the provider is guessed from the name (and :attr:`ExportedModel.guessed` says
    why): a ``vendor/`` prefix LiteLLM knows is kept (``google/`` becomes ``gemini/``), another
    ``org/model`` (a Hugging Face name an OpenAI-compatible server serves) becomes
    ``openai/org/model``; a bare name with ``claude`` goes to ``anthropic/``, with ``gemini`` to
    ``gemini/``, anything else (``gpt-...``, ``o3``, a local or fine-tuned model) to
    ``openai/<name>``.
    """
    model, settings = _bare(label)
    spec, why = _catalog(model)
    if spec is not None:
        provider, _, name = spec.partition(":")
        return ExportedModel(provider, f"{_LITELLM.get(provider, provider)}/{name}", settings)
    head, slash, rest = model.partition("/")
    if slash and rest:
        prefix = _LITELLM.get(head.lower(), head.lower())
        if prefix in _LITELLM_PREFIXES:
            provider = {"gemini": "google", "vertex_ai": "vertex"}.get(prefix, prefix)
            return ExportedModel(provider, f"{prefix}/{rest}", settings, why)
        return ExportedModel("openai", f"openai/{model}", settings, why)
    vendor = _guess_vendor(model)
    return ExportedModel(vendor, f"{_LITELLM.get(vendor, vendor)}/{model}", settings, why)


def race_model(label: str) -> ExportedModel:
    """phi-core's ``provider:model`` of a candidate label; never fails.

    The catalog (or an alias) decides when it knows the name; an OpenRouter-style
    ``vendor/model`` goes to ``openrouter:``; any other name gets AgentOpt's guess as a phi-core
    provider: ``claude`` -> ``anthropic:``, ``gemini`` -> ``google:``, else ``openai:<name>``,
    which calls ``OPENAI_BASE_URL`` when it is set, as the official ``openai`` SDK the agent most
    likely called that model with does.
    """
    model, settings = _bare(label)
    spec, why = _catalog(model)
    if spec is not None:
        return ExportedModel(spec.partition(":")[0], spec, settings)
    if "/" in model and ":" not in model:
        return ExportedModel("openrouter", f"openrouter:{model}", settings, why)
    vendor = _guess_vendor(model)
    return ExportedModel(vendor, f"{vendor}:{model}", settings, why)


def _one_line(text: str) -> str:
    """``text`` fit for a comment line of YAML or TOML: whitespace runs (line breaks included)
    become one space and other control characters are escaped (``\\x1b``), so a step or model
    name cannot end the comment nor make the file unreadable."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
        for c in " ".join(text.split())
    )


def _comment(text: str) -> str:
    return "# " + _one_line(text)


def litellm_config(result: SelectionResult, api_key_env_vars: dict[str, str] | None = None) -> str:
    """A LiteLLM proxy ``model_list`` with the winner's model for each step.

    Each entry's ``model_name`` is the step (``planner``, ``solver``), so the agent keeps asking
    the proxy for its step's model whatever won; the header lists step -> model, and a comment
    above each entry names its model and says when its provider was guessed from the name (a
    model phi-core's catalog does not know, see :func:`litellm_model`): check those before use.
    """
    keys = api_key_env_vars or {}
    entries: list[dict[str, Any]] = []
    notes: list[str] = []
    mapping: list[str] = []
    for step, label in result.best.models.items():
        target = litellm_model(label)
        litellm_provider = target.model.split("/", 1)[0]
        params: dict[str, Any] = {"model": target.model}
        env = keys.get(target.provider) or keys.get(litellm_provider) or _KEYS.get(target.provider)
        if env:
            params["api_key"] = f"os.environ/{env}"
        for key in _SETTINGS:
            if key in target.settings:
                params[key] = _number(target.settings[key])
        entries.append({"model_name": step, "litellm_params": params})
        note = f"step {step} -> {label}"
        if target.guessed:
            note += (
                f" (provider guessed from the name, {target.guessed}: check {target.model}"
                + (
                    "; add api_base if an OpenAI-compatible server serves it"
                    if litellm_provider == "openai"
                    else ""
                )
                + ")"
            )
        notes.append(_comment(note))
        mapping.append("#   " + _one_line(f"{step} -> {label}"))
    header = (
        _comment(
            f"Selected by phi-core ({result.algorithm}, seed {result.seed}): {result.best.name}"
        )
        + "\n"
        f"# accuracy {_pct(result.best.accuracy)} on {result.best.evaluations} datapoints\n"
        "# each model_name is a step; step -> model:\n" + "".join(m + "\n" for m in mapping)
    )
    lines: list[str] = []
    notes.reverse()
    for line in yaml.safe_dump({"model_list": entries}, sort_keys=False).splitlines():
        if line.startswith("- model_name:") and notes:
            lines.append(notes.pop())
        lines.append(line)
    return header + "\n".join(lines) + "\n"


def race_config(result: SelectionResult, step: str | None = None) -> str:
    """A ``phi race --config`` file racing the models ``step`` uses on the Pareto front (the
    winner's first): the configurations worth racing live, once each.

    A model phi-core's catalog does not know never fails the export: its provider is guessed
    from the name (see :func:`race_model`; ``model-a`` -> ``openai:model-a``) and a comment above
    its branch says so."""
    steps = list(result.best.models)
    if step is None:
        if len(steps) != 1:
            raise UserError(
                f"This agent has several steps {steps!r}; say which one to race: "
                "export_config(path, 'phi-race', step='...')."
            )
        step = steps[0]
    if step not in result.best.models:
        raise UserError(f"No step {step!r} in this selection; steps: {steps!r}.")
    lines = [
        _comment(f"phi race --config <this file>: the Pareto front of step {step!r}, selected by"),
        _comment(f"phi-core ({result.algorithm}, seed {result.seed}); winner: {result.best.name}"),
        "",
    ]
    seen: set[str] = set()
    for combination in result.pareto_front():
        label = combination.models[step]
        if label in seen:
            continue
        seen.add(label)
        target = race_model(label)
        if target.guessed:
            lines.append(
                _comment(
                    f"{label}: provider guessed from the name ({target.guessed}): check "
                    f"{target.model}"
                    + (
                        " (it calls OPENAI_BASE_URL when set; a server of your own: "
                        f"openai-compat:{_bare(label)[0]}@http://host:port/v1)"
                        if target.provider == "openai"
                        else ""
                    )
                )
            )
        lines += [
            "[[branches]]",
            f"name = {json.dumps(label)}",
            f"model = {json.dumps(target.model)}",
        ]
        lines += [f"{k} = {_number(target.settings[k])}" for k in _SETTINGS if k in target.settings]
        lines.append("")
    return "\n".join(lines)


def _number(value: str) -> int | float:
    try:
        return int(value)
    except ValueError:
        return float(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.5f}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def totals_text(result: SelectionResult) -> str:
    """One line: the algorithm, evaluations of the grid, dollars (the scorer's and the
    proposer's shares), time."""
    return (
        f"{result.algorithm}: {result.evaluations}/{result.grid_evaluations} evaluations, "
        f"${result.cost_usd:.4f} spent"
        + _shares(result)
        + f", {result.wall_time_s:.1f}s"
        + (f", {result.resumed} resumed" if result.resumed else "")
    )


def _shares(result: SelectionResult) -> str:
    parts = [
        f"${cost:.4f} of it {what}"
        for cost, what in (
            (result.scoring_cost_usd, "scoring"),
            (result.proposal_cost_usd, "proposing"),
        )
        if cost
    ]
    return f" ({', '.join(parts)})" if parts else ""


def summary_text(result: SelectionResult, limit: int | None = 20) -> str:
    """The ranking as plain text: best first, the Pareto front marked, then totals and warnings.

    The cost of a combination that called a model without a price is ``n/a`` (unknown: those
    calls count as $0 in its numbers), as AgentOpt prints ``N/A``."""
    shown: list[CombinationResult] = result.evaluated()[:limit] if limit else result.evaluated()
    failed = any(c.failures for c in shown)  # the column only when something failed
    rows = [["#", "combination", "accuracy", "n", *(["failed"] if failed else []), "$/item"]]
    rows[0] += ["latency", ""]
    for rank, c in enumerate(shown, 1):
        marks = " ".join(
            m
            for m, on in (("best", c.is_best), ("pareto", c.pareto), ("out", not c.in_contention))
            if on
        )
        rows.append(
            [
                str(rank),
                c.name,
                _pct(c.accuracy),
                str(c.evaluations),
                *([str(c.failures)] if failed else []),
                _money(c.cost_per_datapoint) if c.cost_known else "n/a",
                _secs(c.latency_mean),
                marks,
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 1 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    hidden = len(result.evaluated()) - len(shown)
    if hidden > 0:
        lines.append(f"... and {hidden} more")
    lines.append(totals_text(result))
    lines.append(f"best: {result.best.name}")
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)
