"""The gateway's config file: profiles (race files) plus the server's own settings.

A gateway file is TOML, YAML or JSON, read like every other config (``${VAR}`` substituted,
located errors)::

    [gateway]
    state = "redis://127.0.0.1:6379/0"    # router state, preview cache, feedback links, limits
    log_content = false                   # keep prompts and answers out of the run log
    cors_origins = []                     # CORS is off unless origins are listed
    models = ["openai-compat:m@http://127.0.0.1:9000/v1"]   # passthrough models to advertise

    [[gateway.keys]]
    name = "team-a"
    key_env = "TEAM_A_KEY"                # or key = "${TEAM_A_KEY}"
    daily_usd = 5.0
    requests_per_minute = 120

    [profiles.fast]                       # a race file's contents: `race:fast`, `route:fast`
    strategy = "judge"
    [[profiles.fast.branches]]
    model = "openai:gpt-4o-mini"

A plain race file (what ``phi race --config`` reads) is one profile named after the file.
Keys may also come from ``$PHI_GATEWAY_KEYS`` (comma-separated, no limits).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from .._net import DEFAULT_MAX_BODY_BYTES, is_loopback
from ..config._load import read_source, validate
from ..config._race import RaceSpec
from ..config._schema import _Section
from ..errors import ConfigError, UserError, redact
from ..routing.state import check_redis_url, is_redis

__all__ = [
    "KEYS_ENV",
    "MAX_DAILY_USD",
    "ApiKey",
    "GatewayConfig",
    "GatewaySettings",
    "env_keys",
    "exposure_warning",
    "load_gateway_config",
    "model_problem",
]

KEYS_ENV = "PHI_GATEWAY_KEYS"

MAX_DAILY_USD = 1e9
"""The largest ``daily_usd`` a key may have: far beyond any real spend, so a larger value is a
typo (or ``inf``), not a limit; leave ``daily_usd`` out for none."""


class ApiKey(_Section):
    """One bearer key and its limits (``None``: unlimited)."""

    name: str = Field(min_length=1)
    key: SecretStr | None = Field(default=None, repr=False)
    key_env: str | None = None
    daily_usd: float | None = None
    """Dollars the key may spend per UTC day: finite, > 0 and at most :data:`MAX_DAILY_USD`.
    Every model call of its requests reserves its worst case against what is left, so the key
    never spends past it (a call that could is refused with 429 ``daily_spend_exceeded``)."""
    requests_per_minute: int | None = Field(default=None, ge=1)
    models: list[str] | None = None
    """The models this key may call (``race:fast``, ``openai:gpt-4o-mini``…); None: any."""

    @field_validator("daily_usd")
    @classmethod
    def _daily_usd(cls, value: float | None) -> float | None:
        if value is None:
            return None
        if not (math.isfinite(value) and 0 < value <= MAX_DAILY_USD):
            raise ValueError(
                f"daily_usd must be a finite number of dollars > 0 and at most {MAX_DAILY_USD:g} "
                f"(leave it out for no daily limit), got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ApiKey:
        if (self.key is None) == (self.key_env is None):
            raise ValueError(f"key {self.name!r}: give exactly one of `key` and `key_env`")
        return self

    def secret(self) -> str:
        """The key's value (from the environment for ``key_env``)."""
        if self.key is not None:
            return self.key.get_secret_value()
        assert self.key_env is not None
        value = os.environ.get(self.key_env, "")
        if not value:
            raise UserError(
                f"Gateway key {self.name!r} reads ${self.key_env}, which is not set; export it "
                "or remove the key from the config."
            )
        return value


class GatewaySettings(_Section):
    """The ``[gateway]`` table."""

    keys: list[ApiKey] = Field(default_factory=list)
    state: str | None = None
    """Router state location (a .sqlite/.json file or ``redis://…``); default: the user
    directory's (``$PHI_ROUTER_STATE``). With Redis, feedback links and key limits live there too."""
    log_content: bool = False
    run_log: bool = True
    cors_origins: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)
    passthrough: bool = True
    """Serve any ``provider:model`` (False: only the listed ``models`` and the profiles). A
    model naming its own endpoint (``openai-compat:m@http://…``) must be listed either way."""
    link_ttl_s: float = Field(default=86_400.0, gt=0)
    """How long a completion can still receive feedback."""
    drain_timeout_s: float = Field(default=30.0, gt=0)
    """On shutdown, streams in flight get this long to finish."""
    retries: int = Field(default=2, ge=0)
    """Retries of a failed upstream call (rate limits, overload, 5xx, network) before the
    gateway answers with the upstream's error."""
    keepalive_s: float = Field(default=10.0, gt=0)
    """A streamed race or route still deciding after this long starts its stream with an SSE
    comment, repeated this often (proxies close silent connections); its ``x-phi-*`` facts are
    then in the last chunk's ``phi`` field only, and a failure is an error event."""
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)
    """The largest request body accepted (a larger one is a 413, read no further): images sent
    inline make bodies large, and a worker must not be made to hold any size in memory."""


class GatewayConfig(_Section):
    """A whole gateway config: settings and profiles."""

    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    profiles: dict[str, RaceSpec] = Field(default_factory=dict)

    @field_validator("profiles")
    @classmethod
    def _names(cls, value: dict[str, RaceSpec]) -> dict[str, RaceSpec]:
        for name in value:
            if not name or ":" in name or name != name.strip():
                raise ValueError(f"profile name {name!r} must be non-empty, without ':' or spaces")
        return value

    def api_keys(self) -> list[tuple[ApiKey, str]]:
        """Every key with its value: the config's, then ``$PHI_GATEWAY_KEYS``."""
        return [(k, k.secret()) for k in self.gateway.keys] + env_keys()


def env_keys() -> list[tuple[ApiKey, str]]:
    """The keys of ``$PHI_GATEWAY_KEYS`` (comma-separated; named ``env-1``, ``env-2``, …)."""
    values = [v.strip() for v in os.environ.get(KEYS_ENV, "").split(",") if v.strip()]
    return [(ApiKey(name=f"env-{i}", key=SecretStr(v)), v) for i, v in enumerate(values, 1)]


def exposure_warning(has_keys: bool, host: str, what: str = "your providers") -> str | None:
    """What is wrong with serving on ``host`` (``None``: nothing): a server without keys
    reachable from other machines spends your providers' money for anyone."""
    if is_loopback(host) or has_keys:
        return None
    return (
        f"listening on {host} without keys: anyone who can reach it can call {what}. "
        "Add [[gateway.keys]] to the config or set $PHI_GATEWAY_KEYS."
    )


def model_problem(name: str) -> str | None:
    """Why the ``gateway.models`` entry ``name`` cannot be served (``None``: it can), so an
    unknown provider or model stops the gateway at start instead of being listed."""
    from ..providers.registry import resolve_model

    try:
        resolve_model(name)
    except UserError as exc:
        return redact(str(exc))
    return None


def load_gateway_config(path: str | os.PathLike[str] | None) -> GatewayConfig:
    """Read a gateway file, or a race file as one profile named after it (``None``: no
    profiles, passthrough only)."""
    if path is None:
        return GatewayConfig()
    source = read_source(path)
    data: Any = source.parse()
    if isinstance(data, dict) and ("profiles" in data or "gateway" in data):
        config = validate(GatewayConfig, data, source)
        state = config.gateway.state
        if state is not None and is_redis(state):
            try:  # here, with its line, rather than as a traceback when the server starts
                check_redis_url(state)
            except UserError as exc:
                raise source.error(str(exc), ("gateway", "state")) from None
        for i, name in enumerate(config.gateway.models):
            problem = model_problem(name)
            if problem is not None:
                raise source.error(problem, ("gateway", "models", i))
        return config
    spec = validate(RaceSpec, data, source)
    name = Path(path).stem
    if not name or ":" in name:
        raise ConfigError(f"cannot name a profile after the file ({name!r}).", file=str(path))
    return GatewayConfig(profiles={name: spec})
