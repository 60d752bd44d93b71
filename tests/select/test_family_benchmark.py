"""benchmarks/selection_family.py: the paired comparison with the anchor (sign test, intervals
over worlds) and the per-run outcomes it rests on, on one small world type (the family run
itself is a benchmark, not a test)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def family() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))  # the benchmarks import each other by plain name
    try:
        import selection_family

        yield selection_family
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_sign_test_is_exact_and_two_sided(family: ModuleType) -> None:
    assert family.sign_test(0, 3) == family.sign_test(3, 0) == 0.25  # 2 * (1/2)^3
    assert family.sign_test(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert family.sign_test(0, 0) == 1.0  # no discordant pair: no evidence either way
    assert family.sign_test(5, 5) == 1.0  # capped at 1
    assert 0 < family.sign_test(600, 500) < 0.01  # big counts stay exact (no float overflow)


def test_the_paired_intervals_are_taken_over_worlds(family: ModuleType) -> None:
    """Two worlds of two seeds: within each world the savings differ by a constant (+1 and +3
    points), so the interval is set by the two worlds' means (2 +- t(1) * 1), not by the four
    runs; one run is found by the default only, none by the anchor only."""
    ours = [[[1, 0.0, 51.0], [1, 0.0, 61.0]], [[1, 0.0, 73.0], [0, 0.5, 43.0]]]
    anchor = [[[1, 0.0, 50.0], [0, 1.0, 60.0]], [[1, 0.0, 70.0], [0, 0.5, 40.0]]]
    d = family.paired(ours, anchor)
    assert d["runs"] == 4
    assert (d["found_only_by_default"], d["found_only_by_anchor"]) == (1, 0)
    mean, lo, hi = d["saved_diff_pts"]
    assert mean == pytest.approx(2.0)
    assert hi - mean == pytest.approx(12.706 * math.sqrt(2) / math.sqrt(2))  # sd of (1, 3)
    assert lo == pytest.approx(2.0 - 12.706)
    assert d["regret_diff_pts"][0] == pytest.approx(-0.25)  # (-0.5 + 0) / 2


def test_the_family_run_records_each_run_and_the_table_flags_what_is_significant(
    family: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import selection_replay

    monkeypatch.setattr(
        selection_replay,
        "PHI_SELECTORS",
        {
            "arm_elimination": ("arm_elimination", {}),
            "regret_race": ("regret_race", {}),
        },
    )
    out = family.run_family(["gpqa"], [0, 1], 3)
    runs = out["gpqa"]["runs"]
    assert set(runs) == {"arm_elimination", "regret_race"}
    for name, worlds in runs.items():
        cells = np.asarray(worlds)  # world x seed x (found, regret, saved)
        assert cells.shape == (2, 3, 3)
        summary = out["gpqa"]["selectors"][name]
        assert 100 * cells[:, :, 0].mean() == pytest.approx(summary["find_rate"])
        assert cells[:, :, 1].mean() == pytest.approx(summary["mean_regret_pts"], abs=1e-5)
        assert cells[:, :, 2].mean() == pytest.approx(summary["cost_saved_pct"], abs=1e-3)
    line = next(x for x in family.paired_table(out) if x.startswith("| gpqa |"))
    assert line.startswith("| gpqa | 6 |")
    # a made-up anchor that finds nothing, with a point more regret and 5 points less saved in
    # every run: the default is better on all three
    out["gpqa"]["runs"]["arm_elimination"] = [
        [[0.0, regret + 1.0, saved - 5.0] for _, regret, saved in world]
        for world in runs["regret_race"]
    ]
    found = int(np.asarray(runs["regret_race"])[:, :, 0].sum())
    line = next(x for x in family.paired_table(out) if x.startswith("| gpqa |"))
    assert f"| {found} / 0 " in line
    assert "better: find, regret, savings" in line and "worse" not in line


def test_a_candidate_reads_numbers_bools_and_words(family: ModuleType) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    name, (algo, params) = family._candidate(
        parser, "t=regret_race:eta=0.001,exact_guard=false,strata=4,algorithm=hill_climbing"
    )
    assert (name, algo) == ("t", "regret_race")
    assert params == {
        "eta": 0.001,
        "exact_guard": False,
        "strata": 4.0,
        "algorithm": "hill_climbing",
    }
    assert params["exact_guard"] is False
    assert family._candidate(parser, "t=regret_race:exact_guard=True")[1][1] == {
        "exact_guard": True
    }
    with pytest.raises(SystemExit):  # parser.error
        family._candidate(parser, "t=regret_race:eta")


def _matrices(family: ModuleType, rows: dict[str, list[float]], cost: dict[str, float]) -> object:
    """A one-step ``Matrices`` from per-configuration scores and a cost per question (``family``
    is taken only so that the benchmarks are importable)."""
    from types import SimpleNamespace

    import selection_replay

    names = list(rows)
    accuracy = np.array([rows[n] for n in names])
    world = SimpleNamespace(
        names=names,
        accuracy=accuracy,
        cost=np.array([[cost[n]] * accuracy.shape[1] for n in names]),
        latency=np.zeros_like(accuracy),
    )
    return selection_replay.Matrices.from_world(world)


def test_the_oracle_limit_charges_for_telling_the_field_apart(family: ModuleType) -> None:
    """Ten questions. 'a' is right on all, 'b' on half: the paired differences have mean 1/2
    and variance 5/18, so one standard error (finite population) is at most 1/2 from n = 2 on
    (n = 1 leaves it at 1.58). 'c' ties 'a' at twice the cost, so only the full data tells it
    from 'a', and 'a' runs as long as the longest."""
    two = _matrices(family, {"a": [1.0] * 10, "b": [1.0] * 5 + [0.0] * 5}, {"a": 1.0, "b": 1.0})
    assert family.oracle_limit(two) == pytest.approx(100 * (1 - (2 + 2) / 20))
    three = _matrices(
        family,
        {"a": [1.0] * 10, "b": [1.0] * 5 + [0.0] * 5, "c": [1.0] * 10},
        {"a": 1.0, "b": 1.0, "c": 2.0},
    )
    assert family.oracle_limit(three) == pytest.approx(100 * (1 - (10 + 2 + 2 * 10) / 40))
    # a stricter oracle (two standard errors) needs more of 'b': 10 * 4 (5/18) / (9/4 + 4 (5/18))
    # = 3.3, so 4 questions
    assert family.oracle_limit(two, z=2.0) == pytest.approx(100 * (1 - (4 + 4) / 20))
    # near-ties only (the old limit) charges nothing for 'b': more than the oracle allows
    assert family.limit(three)["limit_saved_pct"] > family.oracle_limit(three)


def test_the_most_saved_is_taken_within_the_regret_and_the_anchor_s_quality(
    family: ModuleType,
) -> None:
    selectors = {
        "arm_elimination": {"find_rate": 90.0, "mean_regret_pts": 0.1, "cost_saved_pct": 50.0},
        "cheap": {"find_rate": 60.0, "mean_regret_pts": 0.19, "cost_saved_pct": 75.0},
        "cheaper": {"find_rate": 20.0, "mean_regret_pts": 0.9, "cost_saved_pct": 90.0},
        "careful": {"find_rate": 95.0, "mean_regret_pts": 0.05, "cost_saved_pct": 55.0},
    }
    assert family.attained(selectors) == ("cheap", 75.0)
    assert family.attained(selectors, match_anchor=True) == ("careful", 55.0)
    assert family.attained(selectors, regret_pts=0.01) is None
    # the goal table's verdict where the limit allows 70 %: who, if anyone, reaches it
    world = {"selectors": selectors}
    assert family._shortfall(world) == (
        "no (reached in this run only below the anchor's find rate or regret)"
    )
    selectors["careful"]["cost_saved_pct"] = 71.0
    assert family._shortfall(world) == "no (careful reaches it)"
    assert family._shortfall({"selectors": {"arm_elimination": selectors["arm_elimination"]}}) == (
        "no (nor any selector of this run)"
    )


def test_the_frontier_scan_refuses_a_selector_list_it_would_ignore(
    family: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        family.main(["--frontier", "--selectors", "regret_race"])
    assert exit_.value.code == 2
    assert "--frontier runs its own selectors" in capsys.readouterr().err
