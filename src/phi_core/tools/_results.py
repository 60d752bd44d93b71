"""What a tool returned, made fit to send: valid JSON, valid Unicode, no secrets, bounded size.

* :func:`to_tool_result` turns any return value into a :class:`ToolResult`; data is serialised as
  strict JSON (``NaN`` and infinities become the strings ``"NaN"``, ``"Infinity"``,
  ``"-Infinity"``: bare ``NaN`` is not JSON and vendors reject it).
* :func:`finish_result` is applied by the executor to every result before the model sees it:
  lone surrogates (undecodable file names, half an emoji) become U+FFFD, the values of this
  process's secret environment variables and of registered API keys — plain, reversed, in hex
  or base64 — become ``[REDACTED]`` (a command that printed a key does not hand it to the
  model; a determined disguise still can, which is why commands never get the keys in the first
  place), and text beyond ``max_bytes`` is cut with a note saying how much was left out.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from pydantic import BaseModel

from .._logging import get_logger
from ..errors import (
    MIN_SECRET,
    UserError,
    redact,
    register_environment_secrets,
    registered_secrets,
)
from ..providers.keys import stored_keys
from ..types import Content, ImageContent, TextContent, scrub_surrogates
from .base import ToolResult

logger = get_logger("phi_core.tools")

__all__ = ["DEFAULT_MAX_RESULT_BYTES", "MAX_IMAGE_BYTES", "finish_result", "json_text"]

DEFAULT_MAX_RESULT_BYTES = 256 * 1024
MAX_IMAGE_BYTES = 20 * 1024 * 1024
_WINDOW = 12  # this many characters of a secret in a row (or their encoding) are redacted
_STEP = 4


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def json_text(value: Any) -> str:
    """Strict JSON for ``value`` (non-finite floats as strings); raises TypeError/ValueError."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        if "Out of range float" not in str(exc):
            raise
        return json.dumps(_finite(value), ensure_ascii=False, allow_nan=False)


def to_tool_result(value: Any) -> ToolResult:
    """Normalise whatever a tool returned into a ToolResult (error result if it cannot be sent)."""
    if isinstance(value, ToolResult):
        if not isinstance(value.content, list) or not all(
            isinstance(c, TextContent | ImageContent) for c in value.content
        ):
            return ToolResult.error(
                "The tool returned a ToolResult whose content is not a list of TextContent/"
                f"ImageContent (got {_kinds(value.content)}); nothing could be sent to the model."
            )
        return value
    if value is None:
        return ToolResult.text("")
    if isinstance(value, str):
        return ToolResult.text(value)
    if isinstance(value, TextContent | ImageContent):
        return ToolResult([value])
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, TextContent | ImageContent) for v in value)
    ):
        return ToolResult(list(value))
    if isinstance(value, BaseModel):
        try:
            data = value.model_dump(mode="json")
            return ToolResult.text(json_text(data), details=value)
        except (TypeError, ValueError) as exc:
            return _unsendable(value, exc)
    try:
        return ToolResult.text(json_text(value), details=value)
    except (TypeError, ValueError, RecursionError) as exc:
        return _unsendable(value, exc)


def _unsendable(value: Any, exc: BaseException) -> ToolResult:
    return ToolResult.error(
        f"The tool returned a value of type {type(value).__name__} that cannot be sent to the "
        f"model ({exc}). Return a str, a ToolResult or JSON-serialisable data."
    )


def secret_values() -> list[str]:
    """Registered API keys and the values of this process's secret-looking variables."""
    try:
        stored_keys()  # registers them: a key the environment overrides is still a secret
    except UserError as error:  # an unreadable keys file: the registered ones still count
        logger.warning("stored API keys not read for redaction: %s", error)
    register_environment_secrets()  # what was exported since the import too
    return sorted(registered_secrets(), key=len, reverse=True)


def _encodings(secret: str) -> dict[str, int]:
    """The secret as it reads plainly, reversed, in hex and in base64 at each byte alignment
    (the characters that depend on neighbouring bytes left out) — the one-command disguises —
    each with the run length that stands for about 12 characters of the secret."""
    raw = secret.encode()
    found = {secret: _WINDOW, secret[::-1]: _WINDOW, raw.hex(): 2 * _WINDOW}
    found[raw.hex().upper()] = 2 * _WINDOW
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"\0" * shift + raw).decode()
            core = encoded[(shift * 8 + 5) // 6 : -4]
            if len(core) >= MIN_SECRET:
                found[core] = _WINDOW * 4 // 3
    return found


def _spans(text: str, form: str, window: int) -> list[tuple[int, int]]:
    """Where ``text`` holds a run of at least ``window`` characters of ``form`` (a cut-off or
    shifted copy included), each run grown to its full length."""
    window = min(window, len(form))
    spans: list[tuple[int, int]] = []
    for offset in range(0, len(form) - window + 1, _STEP):
        chunk = form[offset : offset + window]
        position = text.find(chunk)
        while position != -1:
            start, end, left, right = position, position + len(chunk), offset, offset + len(chunk)
            while start > 0 and left > 0 and text[start - 1] == form[left - 1]:
                start, left = start - 1, left - 1
            while end < len(text) and right < len(form) and text[end] == form[right]:
                end, right = end + 1, right + 1
            spans.append((start, end))
            position = text.find(chunk, end)
    return spans


def _redact(text: str, secrets: list[str]) -> str:
    spans = [
        span
        for secret in secrets
        for form, window in _encodings(secret).items()
        for span in _spans(text, form, window)
    ]
    if not spans:
        return text
    out: list[str] = []
    done = 0
    for start, end in sorted(spans):
        if end <= done:
            continue
        out.append(text[done : max(start, done)] + ("[REDACTED]" if start >= done else ""))
        done = end
    out.append(text[done:])
    return "".join(out)


_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
    "image/bmp": (b"BM",),
}


def is_image(head: bytes, mime: str) -> bool:
    """Whether ``head`` (a file's first 16 bytes) starts as an image of type ``mime`` does (an
    unknown type: no)."""
    signatures = _SIGNATURES.get(mime, ())
    if mime == "image/webp":
        return head.startswith(b"RIFF") and head[8:12] == b"WEBP"
    return any(head.startswith(signature) for signature in signatures)


def _image_problem(block: ImageContent, secrets: list[str]) -> str | None:
    """Why an image block may not be sent to the model: too big, not an image of its type
    (text renamed ``.png`` would reach the model unredacted), or holding a secret's bytes."""
    size = len(block.data) * 3 // 4
    if size > MAX_IMAGE_BYTES:
        return (
            f"[An image of about {size} bytes was left out: the limit is {MAX_IMAGE_BYTES} bytes.]"
        )
    try:
        raw = base64.b64decode(block.data, validate=True)
    except ValueError:
        return "[An image was left out: its data is not base64.]"
    if not is_image(raw[:16], block.mime_type):
        return f"[An image was left out: its bytes are not a {block.mime_type} image.]"
    text = raw.decode("latin-1")  # the bytes as they are (a key is ASCII)
    if any(secret in text for secret in secrets) or redact(text) != text:
        return "[An image was left out: its bytes hold a secret (an API key or a password).]"
    return None


def finish_result(result: ToolResult, max_bytes: int | None) -> ToolResult:
    """The result as it is sent: valid Unicode, secrets removed, text capped at ``max_bytes``."""
    secrets = secret_values()
    # Only what is kept is redacted (a 50 MB result costs what its first max_bytes cost), with
    # a margin past the cut so a secret that straddles it is still recognised whole.
    margin = max((len(form) for secret in secrets for form in _encodings(secret)), default=0)
    budget = max_bytes
    content: list[Content] = []
    dropped = 0
    total = 0
    for block in result.content:
        if isinstance(block, TextContent):
            text = scrub_surrogates(block.text)
            size = len(text.encode("utf-8"))
            total += size
            if budget is not None and size > budget:
                head = _redact(text[: budget + margin], secrets)
                kept = head.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
                dropped += size - len(kept.encode("utf-8"))
                text = kept
                budget = 0
            else:
                text = _redact(text, secrets)
                if budget is not None:
                    budget = max(0, budget - len(text.encode("utf-8")))
            if text or not content:
                content.append(TextContent(text=text))
        elif isinstance(block, ImageContent) and (problem := _image_problem(block, secrets)):
            content.append(TextContent(text=problem))
        else:
            content.append(block)
    if dropped:
        note = (
            f"\n[... tool result truncated: {dropped} of {total} bytes left out (the limit is "
            f"{max_bytes} bytes). Ask for less, e.g. a narrower search or a line window.]"
        )
        content.append(TextContent(text=note))
    return ToolResult(content, is_error=result.is_error, details=result.details)


def _kinds(content: Any) -> str:
    if not isinstance(content, list):
        return type(content).__name__
    return "a list of " + ", ".join(sorted({type(c).__name__ for c in content}) or {"nothing"})
