"""The curated public surface: every public name is exported and importable."""

from __future__ import annotations

import importlib

import phi_core


def test_every_name_in_all_is_importable_from_the_package() -> None:
    for name in phi_core.__all__:
        assert hasattr(phi_core, name), name


def test_public_classes_and_functions_are_listed_in_all() -> None:
    exported = set(phi_core.__all__)
    missing = [
        name
        for name, value in vars(phi_core).items()
        if not name.startswith("_")
        and getattr(value, "__module__", "").startswith("phi_core")
        and callable(value)
        and name not in exported
    ]
    assert not missing, f"public names missing from phi_core.__all__: {missing}"


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
    ):
        module = importlib.import_module(f"phi_core.{package}")
        assert module.__doc__ and len(module.__doc__.strip()) > 20, package
