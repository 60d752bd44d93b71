"""The vendors' wire formats as interception sees them: which HTTP requests are model calls,
what they ask for, and what usage their responses report.

Recognised (host-agnostic, so OpenAI-compatible servers on any address count):

- OpenAI Chat Completions ``POST …/chat/completions`` and legacy ``POST …/completions``;
- OpenAI Responses ``POST …/responses``;
- Anthropic Messages ``POST …/messages`` (not ``…/messages/count_tokens`` or batches);
- Google ``POST …/models/{model}:generateContent`` and ``:streamGenerateContent`` (SSE with
  ``alt=sse`` or a streamed JSON array without it).

Usage is read from a whole JSON body or from a server-sent-event stream (the last report wins;
Anthropic's input arrives in ``message_start`` and its output in ``message_delta``). When a
stream carries no usage (an OpenAI stream without ``stream_options.include_usage``), the usage is
estimated from the request's text and the streamed text, and flagged as estimated.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from ..errors import UserError
from ..metering import estimate_tokens
from ..providers.catalog import VENDORS, _info
from ..providers.pricing import PRICES, price_for
from ..types import Pricing, Usage

__all__ = [
    "ModelPrices",
    "WireCall",
    "classify",
    "normalise_prices",
    "parse_usage",
    "price_of",
    "with_output_limit",
]

WireApi = Literal["openai_chat", "openai_completions", "openai_responses", "anthropic", "google"]

ModelPrices = Mapping[str, Any]
"""``{model: {"input_price": $/MTok, "output_price": $/MTok}}`` (AgentOpt's form) or
``{model: Pricing}``; a model is matched by its exact name, its ``provider:model`` name, or the
part after a ``/`` (``gpt-4o`` matches ``openai/gpt-4o``)."""

_LOOPBACK = {"", "localhost", "127.0.0.1", "0.0.0.0", "::1"}
_HOSTS: dict[str, str] = {
    host: v.name
    for v in VENDORS
    if v.base_url and (host := urlsplit(v.base_url).hostname or "") not in _LOOPBACK
} | {
    "api.anthropic.com": "anthropic",
    "generativelanguage.googleapis.com": "google",
}
_WIRE_VENDOR: dict[str, str] = {
    "openai_chat": "openai",
    "openai_completions": "openai",
    "openai_responses": "openai",
    "anthropic": "anthropic",
    "google": "google",
}
_OUTPUT_FIELDS: dict[str, tuple[str, ...]] = {
    "openai_chat": ("max_completion_tokens", "max_tokens"),
    "openai_completions": ("max_tokens",),
    "openai_responses": ("max_output_tokens",),
    "anthropic": ("max_tokens",),
}


@dataclass(frozen=True, slots=True)
class WireCall:
    """One recognised model request."""

    api: WireApi
    model: str
    """The model named by the request (body ``model``, or the Google URL path)."""
    provider: str
    """The vendor: by host when the host is a known vendor's, else by wire format."""
    stream: bool
    max_output: int | None
    """The output limit the request sets (``None``: it sets none)."""
    input_estimate: int
    """A cautious estimate of the request's input tokens, for budget reservations."""
    body: Any

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.model}"


def classify(method: str, url: str, content: bytes) -> WireCall | None:
    """The model call ``method url`` with body ``content`` makes, or ``None`` if it is none."""
    if method.upper() != "POST":
        return None
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    api: WireApi | None = None
    model = ""
    stream = False
    if ":generateContent" in path or ":streamGenerateContent" in path:
        api = "google"
        head, _, verb = path.rpartition(":")
        model = head.rsplit("/models/", 1)[-1] if "/models/" in head else head.rsplit("/", 1)[-1]
        stream = verb == "streamGenerateContent"
    elif path.endswith("/chat/completions"):
        api = "openai_chat"
    elif path.endswith("/completions"):
        api = "openai_completions"
    elif path.endswith("/responses"):
        api = "openai_responses"
    elif path.endswith("/messages"):
        api = "anthropic"
    if api is None:
        return None
    try:
        body = json.loads(content) if content else {}
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict):
        return None
    if api != "google":
        model = str(body.get("model") or "")
        stream = bool(body.get("stream"))
    host = (parts.hostname or "").lower()
    provider = _HOSTS.get(host) or _WIRE_VENDOR[api]
    return WireCall(
        api=api,
        model=model,
        provider=provider,
        stream=stream,
        max_output=_max_output(api, body),
        input_estimate=_input_estimate(api, body),
        body=body,
    )


def _max_output(api: WireApi, body: Mapping[str, Any]) -> int | None:
    if api == "google":
        config = body.get("generationConfig") or body.get("generation_config") or {}
        value = config.get("maxOutputTokens", config.get("max_output_tokens"))
    else:
        value = next((body[f] for f in _OUTPUT_FIELDS[api] if body.get(f) is not None), None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _input_estimate(api: WireApi, body: Mapping[str, Any]) -> int:
    """Tokens of every string in the request's input parts (a cautious three characters each)."""
    keys = {
        "openai_chat": ("messages", "tools"),
        "openai_completions": ("prompt",),
        "openai_responses": ("input", "instructions", "tools"),
        "anthropic": ("system", "messages", "tools"),
        "google": ("contents", "systemInstruction", "system_instruction", "tools"),
    }[api]
    text = "".join(_strings(body.get(k)) for k in keys)
    return estimate_tokens(text) + 8


def _strings(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return " ".join(_strings(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(_strings(v) for v in value)
    return ""


def with_output_limit(call: WireCall, limit: int) -> bytes:
    """The request body with its output limit lowered to ``limit`` (a budget's cap)."""
    body = dict(call.body)
    if call.api == "google":
        key = "generationConfig" if "generation_config" not in body else "generation_config"
        config = dict(body.get(key) or {})
        config["maxOutputTokens" if key == "generationConfig" else "max_output_tokens"] = limit
        body[key] = config
    else:
        fields = _OUTPUT_FIELDS[call.api]
        field = next((f for f in fields if body.get(f) is not None), fields[0])
        body[field] = limit
    return json.dumps(body, separators=(",", ":")).encode()


def model_max_output(model: str) -> int | None:
    """The model family's output limit from the catalog (``None`` when unknown)."""
    info = _info(model)
    return info.max_tokens if info else None


# --------------------------------------------------------------------------- prices


def normalise_prices(prices: ModelPrices | None) -> dict[str, Pricing]:
    """``model_prices`` in our :class:`Pricing` form; a clear error for anything else."""
    out: dict[str, Pricing] = {}
    for model, value in (prices or {}).items():
        if isinstance(value, Pricing):
            out[str(model)] = value
            continue
        if not isinstance(value, Mapping):
            raise UserError(
                f"model_prices[{model!r}] must be a dict like "
                f'{{"input_price": 0.15, "output_price": 0.60}} ($ per million tokens), got {value!r}.'
            )
        inp = value.get("input_price", value.get("input"))
        outp = value.get("output_price", value.get("output"))
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (inp, outp)):
            raise UserError(
                f"model_prices[{model!r}] needs numeric `input_price` and `output_price` "
                f"($ per million tokens), got {dict(value)!r}."
            )
        assert isinstance(inp, int | float) and isinstance(outp, int | float)
        if inp < 0 or outp < 0:
            raise UserError(f"model_prices[{model!r}] must not be negative, got {dict(value)!r}.")
        read = value.get("cache_read_price", value.get("cache_read", inp))
        write = value.get("cache_write_price", value.get("cache_write", inp))
        out[str(model)] = Pricing(
            input=float(inp), output=float(outp), cache_read=float(read), cache_write=float(write)
        )
    return out


def price_of(call: WireCall, prices: Mapping[str, Pricing]) -> Pricing | None:
    """The user's price for the call's model, else the price table's, else ``None``."""
    model = call.model
    for name in (model, call.spec):
        if name in prices:
            return prices[name]
    tail = model.rsplit("/", 1)[-1]
    suffix = next((p for n, p in prices.items() if n.rsplit("/", 1)[-1] == tail), None)
    if suffix is not None:
        return suffix
    found = price_for(call.provider, model)
    if found is None and "/" in model:  # a reseller's "vendor/model" name
        vendor, _, rest = model.partition("/")
        found = price_for(vendor, rest)
    if found is None:  # an OpenAI-compatible server serving another vendor's model
        found = next((p for v in PRICES if (p := price_for(v, tail)) is not None), None)
    return found


# --------------------------------------------------------------------------- usage


def parse_usage(call: WireCall, body: bytes) -> tuple[Usage | None, str]:
    """``(usage reported by the response, or None; the text it carried)`` from a whole body."""
    text = body.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            payloads: list[Any] = [json.loads(text)]
        except ValueError:
            return None, ""
    elif stripped.startswith("["):  # Google's streamed JSON array
        try:
            loaded = json.loads(text)
        except ValueError:
            return None, ""
        payloads = loaded if isinstance(loaded, list) else []
    else:
        payloads = list(_sse_payloads(text))
    usage: Usage | None = None
    pieces: list[str] = []
    state: dict[str, int] = {}
    for payload in payloads:
        if not isinstance(payload, Mapping):
            continue
        found = _usage_of(call.api, payload, state)
        if found is not None:
            usage = found
        pieces.extend(_text_of(call.api, payload))
    return usage, "".join(pieces)


def estimated_usage(call: WireCall, text: str) -> Usage:
    """The usage of a call whose response reported none."""
    return Usage(input=call.input_estimate, output=estimate_tokens(text))


def _sse_payloads(text: str) -> Iterator[Any]:
    for frame in text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(
            line[5:].lstrip() for line in frame.split("\n") if line.startswith("data:")
        )
        if not data or data == "[DONE]":
            continue
        try:
            yield json.loads(data)
        except ValueError:
            continue


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _usage_of(api: WireApi, payload: Mapping[str, Any], state: dict[str, int]) -> Usage | None:
    if api in ("openai_chat", "openai_completions"):
        raw = payload.get("usage")
        if not isinstance(raw, Mapping):
            return None
        prompt = _int(raw.get("prompt_tokens"))
        cached = _int((raw.get("prompt_tokens_details") or {}).get("cached_tokens"))
        reasoning = _int((raw.get("completion_tokens_details") or {}).get("reasoning_tokens"))
        return Usage(
            input=max(prompt - cached, 0),
            cache_read=cached,
            output=_int(raw.get("completion_tokens")),
            reasoning=reasoning,
        )
    if api == "openai_responses":
        response = payload.get("response") if "response" in payload else payload
        raw = response.get("usage") if isinstance(response, Mapping) else None
        if not isinstance(raw, Mapping):
            return None
        prompt = _int(raw.get("input_tokens"))
        cached = _int((raw.get("input_tokens_details") or {}).get("cached_tokens"))
        reasoning = _int((raw.get("output_tokens_details") or {}).get("reasoning_tokens"))
        return Usage(
            input=max(prompt - cached, 0),
            cache_read=cached,
            output=_int(raw.get("output_tokens")),
            reasoning=reasoning,
        )
    if api == "anthropic":
        message = payload.get("message")
        raw = message.get("usage") if isinstance(message, Mapping) else payload.get("usage")
        if not isinstance(raw, Mapping):
            return None
        # message_start reports the input (and a first output count); message_delta the running
        # output and, on some servers, the input again: keep the latest non-zero of each.
        for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            if _int(raw.get(key)):
                state[key] = _int(raw.get(key))
        if "output_tokens" in raw:
            state["output_tokens"] = _int(raw.get("output_tokens"))
        return Usage(
            input=state.get("input_tokens", 0),
            cache_read=state.get("cache_read_input_tokens", 0),
            cache_write=state.get("cache_creation_input_tokens", 0),
            output=state.get("output_tokens", 0),
        )
    raw = payload.get("usageMetadata") or payload.get("usage_metadata")
    if not isinstance(raw, Mapping):
        return None
    prompt = _int(raw.get("promptTokenCount", raw.get("prompt_token_count")))
    cached = _int(raw.get("cachedContentTokenCount", raw.get("cached_content_token_count")))
    thoughts = _int(raw.get("thoughtsTokenCount", raw.get("thoughts_token_count")))
    candidates = _int(raw.get("candidatesTokenCount", raw.get("candidates_token_count")))
    return Usage(
        input=max(prompt - cached, 0),
        cache_read=cached,
        output=candidates + thoughts,  # thoughts are billed as output
        reasoning=thoughts,
    )


def _text_of(api: WireApi, payload: Mapping[str, Any]) -> Iterator[str]:
    """The generated text a payload (a whole response or one stream event) carries."""
    if api in ("openai_chat", "openai_completions"):
        for choice in payload.get("choices") or ():
            if not isinstance(choice, Mapping):
                continue
            if isinstance(choice.get("text"), str):
                yield choice["text"]
            for part in (choice.get("delta"), choice.get("message")):
                if isinstance(part, Mapping):
                    yield _strings(part.get("content"))
                    yield _strings(part.get("tool_calls"))
    elif api == "openai_responses":
        if payload.get("type") == "response.output_text.delta":
            yield _strings(payload.get("delta"))
        elif isinstance(payload.get("output"), list):
            yield _strings(payload["output"])
    elif api == "anthropic":
        delta = payload.get("delta")
        if isinstance(delta, Mapping):
            yield _strings(delta.get("text")) + _strings(delta.get("partial_json"))
        elif isinstance(payload.get("content"), list):
            yield _strings(payload["content"])
    else:
        for candidate in payload.get("candidates") or ():
            if isinstance(candidate, Mapping):
                yield _strings(candidate.get("content"))
