"""Fixtures of the selection tests."""

from __future__ import annotations

import pytest

from phi_core.select import SearchSpace


@pytest.fixture
def space_3x4() -> SearchSpace:
    return SearchSpace({"planner": ["p0", "p1", "p2"], "solver": ["s0", "s1", "s2", "s3"]})
