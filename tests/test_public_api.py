"""The curated public surface, in the manner of httpx's ``tests/test_exported_members.py``.

For the top-level package, every public subpackage and every public module:

* each name in ``__all__`` exists, once;
* every public class or function in the namespace that phi-core defines is in ``__all__`` (or in
  :data:`DELIBERATELY_UNLISTED` with a reason) — a new public name cannot slip in unlisted;
* each exported class or function was defined in that package (its ``__module__`` is inside
  it), or is a deliberate re-export from another layer listed in :data:`RE_EXPORTS` — a
  subpackage cannot silently become a second home for another layer's names.

Private modules (``_name.py``) are private by location; their helpers stay out of the lists.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType
from typing import Any

import pytest

import phi_core

# Packages whose public surface is checked (the CLI is an application, not an API).
PUBLIC_PACKAGES = (
    "phi_core",
    "phi_core.config",
    "phi_core.context",
    "phi_core.loop",
    "phi_core.parallel",
    "phi_core.providers",
    "phi_core.race",
    "phi_core.routing",
    "phi_core.runlog",
    "phi_core.select",
    "phi_core.sessions",
    "phi_core.telemetry",
    "phi_core.tools",
)

# Names a package re-exports from another layer on purpose: (package, name) -> owning module.
RE_EXPORTS: dict[tuple[str, str], str] = {
    ("phi_core.config", "ScriptCallbackError"): "phi_core.errors",
    ("phi_core.loop", "ExecutionLimits"): "phi_core.context.limits",
    ("phi_core.sessions", "SessionLockedError"): "phi_core.errors",
    ("phi_core.sessions", "SessionNotFoundError"): "phi_core.errors",
    ("phi_core.select", "BudgetExhausted"): "phi_core.errors",
    ("phi_core.select", "Budget"): "phi_core.metering",
    ("phi_core.select", "CallRecord"): "phi_core.metering",
    ("phi_core.select", "Meter"): "phi_core.metering",
    ("phi_core.select", "metered"): "phi_core.metering",
    ("phi_core.select", "CachedResponse"): "phi_core.providers.call",
    ("phi_core.tools", "ToolError"): "phi_core.errors",
    ("phi_core.runlog", "RunNotFoundError"): "phi_core.errors",
}

# Public-looking names that are deliberately not in a module's __all__: module -> {name: why}.
DELIBERATELY_UNLISTED: dict[str, dict[str, str]] = {
    "phi_core.loop.config": {"maybe_await": "a helper the loop modules share"},
    "phi_core.tools.mcp_servers": {"sdk": "imports the optional `mcp` SDK for the MCP modules"},
    "phi_core.tools.mcp_tools": {"result_of": "the MCP modules' CallToolResult conversion"},
    "phi_core.tools.base": {
        "definition_of": "the tool-execution helper that builds a tool's definition",
        "tool_timeout": "the tool-execution helper that reads a tool's timeout",
    },
}


def _modules() -> list[str]:
    """Every public package above plus every public (non-underscore) module inside them."""
    found: list[str] = []
    for name in PUBLIC_PACKAGES:
        found.append(name)
        package = importlib.import_module(name)
        if name == "phi_core":
            for info in pkgutil.iter_modules(package.__path__):
                if not info.name.startswith("_") and not info.ispkg and info.name != "testing":
                    found.append(f"phi_core.{info.name}")
            continue
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_"):
                found.append(f"{name}.{info.name}")
    return sorted(set(found))


def _ours(value: Any) -> bool:
    return (inspect.isclass(value) or inspect.isfunction(value)) and getattr(
        value, "__module__", ""
    ).startswith("phi_core")


def _load(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # an optional extra is missing: that module cannot be checked
        pytest.skip(f"{name} needs an optional dependency ({exc})")


@pytest.mark.parametrize("name", _modules())
def test_every_name_in_all_exists_once(name: str) -> None:
    module = _load(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


@pytest.mark.parametrize("name", _modules())
def test_every_public_name_is_listed_in_all(name: str) -> None:
    module = _load(name)
    exported = set(module.__all__)
    unlisted = DELIBERATELY_UNLISTED.get(name, {})
    # A package's namespace is its surface (everything in it was put there on purpose); a
    # module's own surface is what it defines (imports from other modules are theirs).
    is_package = hasattr(module, "__path__")
    missing = sorted(
        n
        for n, value in vars(module).items()
        if not n.startswith("_")
        and _ours(value)
        and (is_package or value.__module__ == name)
        and n not in exported
        and n not in unlisted
    )
    assert not missing, f"public names missing from {name}.__all__: {missing}"


@pytest.mark.parametrize("name", [n for n in PUBLIC_PACKAGES if n != "phi_core"])
def test_exported_names_belong_to_their_package_or_are_listed_re_exports(name: str) -> None:
    package = _load(name)
    strays = []
    for exported in package.__all__:
        value = getattr(package, exported)
        if not _ours(value):
            continue
        owner = value.__module__
        if owner == name or owner.startswith(name + "."):
            continue
        if RE_EXPORTS.get((name, exported)) != owner:
            strays.append(f"{exported} (from {owner})")
    assert not strays, f"{name} re-exports other layers' names unlisted in RE_EXPORTS: {strays}"


def test_the_top_level_package_exports_only_phi_core_names() -> None:
    for exported in phi_core.__all__:
        value = getattr(phi_core, exported)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("phi_core."), exported


def test_every_exception_class_lives_in_errors_under_phi_error() -> None:
    """No exception class is defined anywhere but ``errors.py``, and every one is a PhiError
    (the exec worker's internal timeout, which sandbox15 is rewriting, excepted)."""
    import phi_core.errors as errors

    strays = []
    for info in pkgutil.walk_packages(phi_core.__path__, "phi_core."):
        if info.name.startswith("phi_core.cli") or info.name == "phi_core.parallel._exec_worker":
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and info.name != "phi_core.errors"
            ):
                strays.append(f"{info.name}.{attr}")
    assert not strays, f"exception classes outside errors.py: {strays}"
    for attr in errors.__all__:
        value = getattr(errors, attr)
        if inspect.isclass(value) and issubclass(value, BaseException):
            assert issubclass(value, errors.PhiError), attr


def test_each_subpackage_states_what_it_owns() -> None:
    for package in (
        "loop",
        "tools",
        "providers",
        "context",
        "parallel",
        "agent",
        "sessions",
        "config",
        "select",
        "routing",
        "race",
        "runlog",
        "cli",
        "sandbox",
        "gateway",
    ):
        module = importlib.import_module(f"phi_core.{package}")
        assert module.__doc__ and len(module.__doc__.strip()) > 20, package
