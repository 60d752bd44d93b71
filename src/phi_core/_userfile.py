"""Small JSON files in the user directory (stored keys, model aliases): read tolerantly, written
atomically.

:func:`write_json` writes a unique temporary file next to the target (mode 0600 from its first
byte when ``secret``), fsyncs it and renames it over the target, so a reader sees the old file
or the new one, never half of one. :func:`read_json` re-reads a file only when its modification
time or size changed.

Writes go through the project's one atomic-write helper, :func:`phi_core._files.atomic_write`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._files import atomic_write
from ._paths import check_user_dir
from .errors import UserError

__all__ = ["read_json", "write_json"]

_CACHE: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (``{}`` when the file does not exist).

    Raises:
        UserError: the file exists but is not a JSON object, or cannot be read (no permission;
            ``PHI_HOME`` is a file, said as such): names the file and how to fix it.
    """
    try:
        stat = path.stat()
    except FileNotFoundError:
        _CACHE.pop(path, None)
        return {}
    except OSError as exc:  # a file where a folder of its path belongs, no permission
        _CACHE.pop(path, None)
        raise _unreadable(path, exc) from None
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _CACHE.get(path)
    if cached is not None and cached[0] == stamp:
        return dict(cached[1])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _unreadable(path, exc) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(
            f"Cannot read {str(path)!r} ({type(exc).__name__}: {exc}); fix the file or delete it."
        ) from None
    if not isinstance(data, dict):
        raise UserError(
            f"{str(path)!r} must hold a JSON object, got {type(data).__name__}; fix the file or "
            "delete it."
        )
    _CACHE[path] = (stamp, data)
    return dict(data)


def _unreadable(path: Path, exc: OSError) -> UserError:
    """Why ``path`` cannot be read, as the :class:`UserError` to show: ``PHI_HOME`` being a
    file is said as such (:func:`~phi_core._paths.check_user_dir`)."""
    if isinstance(exc, NotADirectoryError | IsADirectoryError):
        check_user_dir()  # raises when the user directory is the file in the way
        if isinstance(exc, IsADirectoryError):
            return UserError(f"{str(path)!r} is a folder, not a file; move it aside.")
        return UserError(
            f"Cannot read {str(path)!r}: a folder on its path is a file; move that file aside."
        )
    if isinstance(exc, PermissionError):
        return UserError(
            f"Cannot read {str(path)!r}: permission denied; give yourself read access to it "
            "(chmod u+r) or delete it."
        )
    return UserError(
        f"Cannot read {str(path)!r} ({exc.strerror or exc}); fix the file or delete it."
    )


def write_json(path: Path, data: dict[str, Any], *, secret: bool = False) -> None:
    """Replace ``path`` with ``data`` as pretty JSON, atomically (0600 when ``secret``)."""
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write(path, text.encode("utf-8"), mode=0o600 if secret else 0o644)
    _CACHE.pop(path, None)
