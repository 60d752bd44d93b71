"""benchmarks/routing_replay.py: the verified-cascade helpers and the results.json contract on a
small slice of the shipped RouterBench split (the full run is a benchmark, not a test)."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data" / "routerbench"


@pytest.fixture(scope="module")
def rr() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "routing_replay", ROOT / "benchmarks" / "routing_replay.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["routing_replay"] = module  # its worker processes pickle functions by module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def small_split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 40 rows of each task's CSV."""
    out = tmp_path_factory.mktemp("routerbench-small")
    csv.field_size_limit(1 << 30)
    for path in sorted(DATA.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows = [row for _, row in zip(range(40), reader, strict=False)]
            fields = reader.fieldnames
        assert fields is not None
        with (out / path.name).open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    return out


def test_results_json_has_every_router_the_issue_names(
    rr: ModuleType, small_split: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rr, "CACHE_DIR", tmp_path / "cache")
    out = tmp_path / "out"
    code = rr.main(["--data", str(small_split), "--out", str(out), "--shuffles", "1"])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["n_prompts"] == 120
    routers = results["routers"]
    required = {"zero_hull", "knn", "linucb", "thompson", "oracle", "random"}
    required |= {"vote_k", "cascade_k", "router_cascade", "gpt-4-1106-preview"}
    assert required <= set(routers)
    for entry in routers.values():
        assert {"accuracy", "cost_usd", "aiq", "oracle_gap_closed"} <= set(entry)
        assert "cost_to_match_gpt4_usd" in entry
        assert 0.0 <= entry["accuracy"] <= 1.0 and entry["cost_usd"] >= 0.0
    assert routers["oracle"]["aiq"] >= routers["zero_hull"]["aiq"]
    assert (out / "cost_accuracy.png").stat().st_size > 1000
    assert list((tmp_path / "cache").glob("exec_agreement-*.json"))  # code answers were run


def _data(rr: ModuleType, letters: list[list[str | None]], correct: list[list[float]]) -> object:
    n, m = len(letters), len(letters[0])
    return rr.Data(
        models=[f"m{j}" for j in range(m)],
        prompts=["p"] * n,
        tasks=["t"] * n,
        correct=np.array(correct),
        cost=np.ones((n, m)),
        latency=np.ones((n, m)),
        letters=letters,
        responses=[[""] * m for _ in range(n)],
        features=np.zeros((n, 2)),
        intent=np.zeros(n, dtype=int),
        code_agree={},
    )


def test_an_answer_without_a_letter_is_replaced_by_the_next_cheap_arm(rr: ModuleType) -> None:
    d = _data(rr, [["A", None, "B", "A"]], [[1, 0, 0, 1]])
    voters, asked = rr.verified_letters(d, 0, [0, 1, 2, 3], 2)
    assert voters == [0, 2] and asked == [0, 1, 2]
    voters, asked = rr.verified_letters(d, 0, [1, 3, 0, 2], 2)
    assert voters == [3, 0] and asked == [1, 3, 0]


def test_code_cascade_keeps_the_first_runnable_answer_and_vote_the_largest_class(
    rr: ModuleType,
) -> None:
    d = _data(rr, [[None] * 4], [[0, 1, 0, 1]])
    runnable = np.array([False, True, True, True])
    agree = np.diag(runnable)
    agree[2, 3] = agree[3, 2] = True
    d.code_agree = {0: agree}  # type: ignore[attr-defined]
    right, asked = rr.verified_code_answer(d, 0, [0, 1, 2])
    assert asked == [0, 1] and right == 1.0
    # Classes among [1, 2, 3]: {1}, {2, 3}; the larger class's first member (2) answers.
    assert rr.behaviour_vote(d, 0, [1, 2, 3]) == 0.0
    assert rr.behaviour_vote(d, 0, [1, 0]) == 1.0
    d.code_agree = {}  # type: ignore[attr-defined]
    assert rr.verified_code_answer(d, 0, [0, 1]) == (0.0, [0])
