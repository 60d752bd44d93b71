"""Telling async callables from sync ones, for every place that accepts either."""

from __future__ import annotations

import functools
import inspect
from typing import Any


def is_async_callable(fn: Any) -> bool:
    """``async def`` functions, partials of them and objects whose ``__call__`` is ``async def``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or (
        not inspect.isroutine(fn)
        and not inspect.isclass(fn)
        and inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004
    )


def accepts_positional(fn: Any, count: int) -> bool:
    """Whether ``fn`` can be called with ``count`` positional arguments, as far as its signature
    tells (``True`` when it has none to read, as for some builtins)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True
