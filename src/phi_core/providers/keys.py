"""API keys stored in the user directory (``phi keys set openai``), as ``llm keys`` does.

Keys live in ``$PHI_HOME/keys.json`` (mode 0600), one per provider name. A provider's key is
looked up in this order: the model's own ``api_key``, the environment variable
(``OPENAI_API_KEY``, …), then the stored key — so the environment always wins. A stored key of
one provider also serves another API of the same vendor that reads the same variable
(``openai-responses`` uses the ``openai`` key). Every stored key is registered as a secret, so
:func:`~phi_core.errors.redact` removes it from errors, events and logs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .._logging import get_logger
from .._paths import check_user_dir, user_path
from .._userfile import read_json, write_json
from ..errors import UserError, register_secret

__all__ = ["KEYS_FILE", "keys_path", "remove_key", "set_key", "stored_key", "stored_keys"]

KEYS_FILE = "keys.json"

logger = get_logger("phi_core.providers.keys")


def keys_path() -> Path:
    """``$PHI_HOME/keys.json``."""
    return user_path(KEYS_FILE)


def stored_keys() -> dict[str, str]:
    """Every stored key by provider name (each registered as a secret).

    A keys file other users can read, or one holding a value that is not a key, is warned
    about once per process (naming the file and what to do).

    Raises:
        UserError: the file cannot be read or is not a JSON object (names it and what to do).
    """
    path = keys_path()
    data = read_json(path)
    keys = {k: v for k, v in data.items() if isinstance(v, str) and v}
    for value in keys.values():
        register_secret(value)
    if data:
        _check_mode(path)
    ignored = sorted(k for k in data if k not in keys)
    if ignored:
        _warn_once(
            f"{path} holds no key string for {', '.join(map(repr, ignored))}; that entry is "
            "ignored. Store the key again with `phi keys set PROVIDER`."
        )
    return keys


def stored_key(
    provider: str, env_var: str | None = None, *, required: bool | None = None
) -> str | None:
    """The stored key of ``provider``, else of a provider that reads the same ``env_var``.

    A keys file that cannot be read fails only a call that needs a key (``required``; by
    default the vendors that always do, :data:`~phi_core.providers._common.KEY_REQUIRED`):
    for any other it is a warning, once, and no key.

    Raises:
        UserError: the keys file cannot be read and a key is ``required``, or the user
            directory (``PHI_HOME``) is a file.
    """
    try:
        keys = stored_keys()
    except UserError as exc:
        check_user_dir()  # PHI_HOME being a file stops every run: nothing could be kept
        if required is None:
            from ._common import KEY_REQUIRED

            required = provider in KEY_REQUIRED
        if required:
            raise
        _warn_once(f"{exc} The stored API keys are not used until then.")
        return None
    if provider in keys:
        return keys[provider]
    if env_var:
        from .registry import known_providers

        for spec in known_providers():
            if spec.key_env == env_var and spec.name in keys:
                return keys[spec.name]
    return None


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning("%s", message)


def _check_mode(path: Path) -> None:
    """Warn (once) when other users may read the keys file: keys are written 0600, so a wider
    mode was set by hand or by a copy."""
    if os.name != "posix":
        return
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return
    if mode & 0o077:
        _warn_once(
            f"{path} can be read by other users (mode {mode:04o}); your API keys are in it. "
            f"Run `chmod 600 {path}`."
        )


def _check_name(name: str) -> str:
    from .registry import known_providers

    name = name.strip().lower()
    keyed = sorted(s.name for s in known_providers() if s.key_env)
    if name in keyed:
        return name
    import difflib

    close = difflib.get_close_matches(name, keyed, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise UserError(
        f"No provider {name!r} takes an API key.{hint} Store keys for: {', '.join(keyed)}."
    )


def set_key(provider: str, key: str) -> str:
    """Store ``key`` for ``provider`` (a provider name that takes a key); returns the name.

    Raises:
        UserError: an unknown provider, or a key that is empty or contains whitespace.
    """
    name = _check_name(provider)
    key = key.strip()
    if not key:
        raise UserError(f"The key for {name!r} is empty; paste the key or pipe it in on stdin.")
    if any(ch.isspace() for ch in key) or not key.isprintable():
        raise UserError(
            f"The key for {name!r} contains whitespace or control characters; paste only the "
            "key itself."
        )
    register_secret(key)
    keys = read_json(keys_path())
    keys[name] = key
    write_json(keys_path(), keys, secret=True)
    return name


def remove_key(provider: str) -> bool:
    """Forget the stored key of ``provider``; ``False`` when none was stored."""
    name = provider.strip().lower()
    keys = read_json(keys_path())
    if name not in keys:
        return False
    del keys[name]
    write_json(keys_path(), keys, secret=True)
    return True
