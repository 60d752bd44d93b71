"""From a ``provider:model`` string to a :class:`ModelConfig`, and from a config to a provider.

Protocol implementations register a factory with :func:`register_protocol`; providers named in
``provider:model`` strings register with :func:`register_provider`. :func:`get_provider` keeps one
provider instance per (protocol, endpoint, key in effect — the model's own, the environment's or
the stored one), so every call to the same endpoint with the same key shares one client and one
connection pool, and a key changed since gets a client of its own.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from ..errors import AmbiguousModelError, PhiError, UnknownModelError, UserError, redact
from .aliases import lookup_alias
from .base import ApiProtocol, ModelConfig, Provider
from .keys import stored_key
from .pricing import PRICES

__all__ = [
    "ProviderSpec",
    "get_provider",
    "known_providers",
    "model_listing",
    "qualify_model_name",
    "register_protocol",
    "register_provider",
    "resolve_model",
    "servable_models",
    "split_model_settings",
]

ProtocolFactory = Callable[[ModelConfig], Provider]


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """A named provider: how a ``name:model`` string becomes a ModelConfig."""

    name: str
    build: Callable[[str], ModelConfig]
    description: str = ""
    key_env: str | None = None
    models: tuple[str, ...] = ()
    variant_of: str | None = None
    """Another API of the same vendor's models (``openai-responses`` → ``openai``): a bare model
    name both offer resolves to the vendor's own provider."""


_PROTOCOLS: dict[str, ProtocolFactory] = {}
_PROVIDERS: dict[str, ProviderSpec] = {}
_INSTANCES: dict[tuple[str, str, str, str], Provider] = {}


def register_protocol(api: ApiProtocol, factory: ProtocolFactory) -> None:
    _PROTOCOLS[api] = factory


def register_provider(spec: ProviderSpec) -> None:
    _PROVIDERS[spec.name] = spec


def known_providers() -> list[ProviderSpec]:
    _ensure_builtins()
    return sorted(_PROVIDERS.values(), key=lambda s: s.name)


def model_listing(stored: Collection[str] = ()) -> list[dict[str, Any]]:
    """One row per known model (``provider:<model>`` for a provider without a catalog): its
    provider, description, price per million tokens and whether its key is set in the
    environment or ``stored`` (the names of providers with a stored key) — never a key's value.
    The scripted test double is left out."""
    providers = [s for s in known_providers() if s.name != "scripted"]
    stored_envs = {s.key_env for s in providers if s.name in stored and s.key_env}
    rows: list[dict[str, Any]] = []
    for spec in providers:
        key_set = bool(os.environ.get(spec.key_env)) if spec.key_env else None
        key_stored = (spec.name in stored or spec.key_env in stored_envs) if spec.key_env else None
        for name in spec.models or ("",):
            price = None
            if name:
                try:
                    price = resolve_model(f"{spec.name}:{name}").pricing
                except PhiError:
                    price = None
            rows.append(
                {
                    "provider": spec.name,
                    "model": f"{spec.name}:{name}" if name else f"{spec.name}:<model>",
                    "description": spec.description,
                    "key_env": spec.key_env,
                    "key_set": key_set,
                    "key_stored": key_stored,
                    "input_per_mtok": price.input if price else None,
                    "output_per_mtok": price.output if price else None,
                }
            )
    return rows


def servable_models() -> list[str]:
    """``provider:model`` of every catalogue model this process can call now: its
    provider's key is set (environment or stored) or, for ``local``, the GGUF and llama-cpp are
    installed. Endpoints without a key to check (Bedrock's AWS chain, Ollama, vLLM) and a
    vendor's second API (``openai-responses``) are not listed."""
    out: list[str] = []
    for spec in known_providers():
        if spec.name == "scripted" or spec.variant_of is not None:
            continue
        if spec.key_env is None and spec.name != "local":
            continue
        for name in spec.models:
            try:
                model = resolve_model(f"{spec.name}:{name}")
            except PhiError:
                continue
            if _local_ready(model) if spec.key_env is None else _effective_key(model):
                out.append(f"{spec.name}:{name}")
    return out


def _local_ready(model: ModelConfig) -> bool:
    import importlib.util

    from .local import gguf_path_for

    if importlib.util.find_spec("llama_cpp") is None:
        return False
    try:
        gguf_path_for(model)
    except PhiError:
        return False
    return True


def resolve_model(spec: str | ModelConfig, **overrides: Any) -> ModelConfig:
    """Turn ``"openai:gpt-4o-mini"`` (or a ModelConfig) into a ModelConfig.

    A name without ``provider:`` is an alias or a bare catalog name (see
    :func:`qualify_model_name`). Raises :class:`UnknownModelError` listing the known providers
    when the prefix is unknown.
    """
    if isinstance(spec, ModelConfig):
        return _override(spec, overrides) if overrides else spec
    _ensure_builtins()
    if ":" not in spec and spec.strip():
        spec = qualify_model_name(spec)  # an alias, or a bare name one provider offers
    name, sep, model = spec.partition(":")
    if _URL_CREDENTIALS.search(model):
        raise UserError(
            f"The endpoint URL in model {redact(spec)!r} carries credentials (`user:password@`), "
            f"which would be shown and stored with the model's name. Remove them and give the "
            f"key through the provider's environment variable or `phi keys set {name}`."
        )
    if not sep or not name or not model:
        raise UnknownModelError(
            f"Model {spec!r} is not of the form `provider:model` "
            f"(for example `local:smollm2` or `openai:gpt-4o-mini`). "
            f"Known providers: {', '.join(_listed())}."
        )
    provider = _PROVIDERS.get(name)
    if provider is None:
        suggestion = _closest(name, _listed())
        hint = f" Did you mean {suggestion!r}?" if suggestion else ""
        raise UnknownModelError(
            f"Unknown provider {name!r} in model {spec!r}.{hint} "
            f"Known providers: {', '.join(_listed())}."
        )
    config = provider.build(model)
    return _override(config, overrides) if overrides else config


def _listed() -> list[str]:
    """The provider names an error lists: every one but the scripted test double (which still
    works; it is just not offered)."""
    return sorted(name for name in _PROVIDERS if name != "scripted")


def qualify_model_name(name: str) -> str:
    """``provider:model`` for an alias (``phi aliases set``) or a bare model name looked up in
    the catalog (``gpt-4o`` → ``openai:gpt-4o``); a name that already starts with a known
    provider is returned unchanged.

    A provider offers a name when it lists it, prices it, or prices a family it starts with (a
    dated snapshot such as ``gpt-4o-2024-08-06`` belongs to ``gpt-4o``). Another API of the same
    vendor (``openai-responses``) gives way to the vendor's own provider.

    Raises:
        AmbiguousModelError: several providers offer the name; ``candidates`` lists them.
        UnknownModelError: no provider offers it (with the closest known names).
    """
    _ensure_builtins()
    text = name.strip()
    head, sep, _ = text.partition(":")
    if sep and head in _PROVIDERS:
        return text
    if not text:
        raise UnknownModelError("An empty model name was given; write `provider:model`.")
    alias = lookup_alias(text)
    if alias is not None:
        return alias
    offered = {spec.name: _offered(spec) for spec in _PROVIDERS.values() if spec.name != "scripted"}
    owners = [p for p, names in offered.items() if text in names]
    if not owners:
        owners = [p for p, names in offered.items() if any(_in_family(text, n) for n in names)]
    owners = [
        p for p in owners if (variant := _PROVIDERS[p].variant_of) is None or variant not in owners
    ]
    if len(owners) == 1:
        return f"{owners[0]}:{text}"
    if owners:
        raise AmbiguousModelError(text, [f"{p}:{text}" for p in sorted(owners)])
    known = sorted({n for names in offered.values() for n in names})
    close = _closest_many(text, known)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise UnknownModelError(
        f"No known provider offers the model {text!r}.{hint} Write it as `provider:model` "
        f"(providers: {', '.join(sorted(offered))}); `phi models` lists the known models and `phi aliases` your aliases."
    )


def _in_family(name: str, family: str) -> bool:
    """``gpt-4o-2024-08-06`` is in the ``gpt-4o`` family; ``gpt-4oo`` is not."""
    return name.startswith(family) and name[len(family) : len(family) + 1] in ("-", ".", "_", "@")


def _offered(spec: ProviderSpec) -> set[str]:
    return {*spec.models, *PRICES.get(spec.name, {})}


def _closest_many(name: str, candidates: list[str]) -> list[str]:
    import difflib

    return difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)


def _override(config: ModelConfig, overrides: dict[str, Any]) -> ModelConfig:
    """A validated copy (so ``api_key="..."`` becomes a SecretStr and typos are rejected)."""
    return ModelConfig(**{**dict(config), **overrides})


_SETTINGS = re.compile(r"^[a-z_]+=.*$")
_URL_CREDENTIALS = re.compile(r"://[^/\s@]+@")


def split_model_settings(text: str) -> tuple[str, dict[str, str]]:
    """Split ``provider:model@key=value,key=value`` into the model and its settings.

    Only a suffix after the last ``@`` that starts with ``key=`` counts as settings, so
    ``openai-compat:m@http://host/v1`` keeps its base URL. Values stay strings; callers validate.
    """
    text = text.strip()
    at = text.rfind("@")
    suffix = text[at + 1 :]
    if at > 0 and not suffix:
        raise UserError(
            f"Model {text!r} ends in {('@' + suffix)!r}: settings after '@' are key=value pairs "
            f"separated by commas, for example `{text[:at]}@temperature=0.2`."
        )
    if at <= 0 or not _SETTINGS.match(suffix):
        return text, {}
    settings: dict[str, str] = {}
    for item in suffix.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(
                f"Model {text!r} has a setting {item!r} that is not key=value; write the "
                f"settings after '@' as key=value pairs separated by single commas."
            )
        settings[key.strip()] = value.strip()
    return text[:at], settings


def get_provider(model: ModelConfig) -> Provider:
    """The shared provider instance for ``model``'s protocol and endpoint."""
    _ensure_builtins()
    factory = _PROTOCOLS.get(model.api)
    if factory is None:
        raise UnknownModelError(
            f"No provider registered for protocol {model.api!r}. "
            f"Registered protocols: {', '.join(sorted(_PROTOCOLS)) or 'none'}."
        )
    key = _effective_key(model)
    cache_key = (
        model.api,
        model.base_url or "",
        hashlib.sha256(key.encode()).hexdigest(),
        model.provider,
    )
    instance = _INSTANCES.get(cache_key)
    if instance is None:
        instance = factory(model)
        _INSTANCES[cache_key] = instance
    return instance


def _effective_key(model: ModelConfig) -> str:
    """The key a provider built now would use: the model's own, else its environment variable,
    else the stored one — so a key set, stored or removed later gets its own client."""
    key = model.api_key_value()
    if not key and model.api_key_env:
        key = os.environ.get(model.api_key_env)
    return key or stored_key(model.provider, model.api_key_env) or ""


def _closest(name: str, candidates: list[str]) -> str | None:
    import difflib

    matches = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return matches[0] if matches else None


_builtins_loaded = False


def _ensure_builtins() -> None:
    """Import the modules that register the built-in providers (once, lazily)."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    from . import catalog  # noqa: F401  (registers providers and protocols)
