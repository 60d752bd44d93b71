"""The OpenAI-compatible gateway (``phi serve``): racing, routing and passthrough over HTTP.

Owns the wire format of Chat Completions (:mod:`._wire`), the gateway config (profiles are race
files), per-key auth and limits, feedback links, metrics, and the Starlette app. Races are planned
by :mod:`phi_core.config`, run by :mod:`phi_core.parallel` and :mod:`phi_core.race`, and every
model call goes through :class:`~phi_core.providers.call.ModelCall`; nothing here is a second
engine. ``cli/serve.py`` and the MCP server are adapters over it.

::

    from phi_core.gateway import create_app, load_gateway_config
    app = create_app(load_gateway_config("gateway.toml"))   # a Starlette app
"""

from ..errors import ClientDisconnected, GatewayError
from ._answers import Answer
from ._app import CONFIG_ENV, app_from_env, create_app, serve
from ._config import KEYS_ENV, ApiKey, GatewayConfig, GatewaySettings, load_gateway_config
from ._metrics import GatewayMetrics, Metrics
from ._service import Caller, Gateway
from ._wire import ChatRequest, parse_chat_request

__all__ = [
    "CONFIG_ENV",
    "KEYS_ENV",
    "Answer",
    "ApiKey",
    "Caller",
    "ChatRequest",
    "ClientDisconnected",
    "Gateway",
    "GatewayConfig",
    "GatewayError",
    "GatewayMetrics",
    "GatewaySettings",
    "Metrics",
    "app_from_env",
    "create_app",
    "load_gateway_config",
    "parse_chat_request",
    "serve",
]
