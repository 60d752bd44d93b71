"""The web view's API against hostile input: a search holding a NUL, a run log that is garbage or
damaged inside, a namespace asked for before any router state exists. Each is a JSON
``{"error": ...}`` saying what was wrong (400 for a bad parameter or file, 404 for what does not
exist), never a 500."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from phi_core.runlog import RunLog, RunRecord
from phi_core.view import ViewData, create_app


def _fill(path: Path, runs: int = 3, size: int = 10) -> list[str]:
    with RunLog(path) as log:
        stored = log.write_many(
            [
                RunRecord(kind="run", prompt=f"question {i} " + "x" * size, status="ok")
                for i in range(runs)
            ]
        )
    return [r.id for r in stored]


@contextlib.contextmanager
def _client(log: Path, state: Path) -> Iterator[TestClient]:
    data = ViewData(log, str(state))
    app = create_app(data)
    with TestClient(app, base_url="http://127.0.0.1:8765", raise_server_exceptions=False) as c:
        yield c
    data.close()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    _fill(tmp_path / "logs.db")
    with _client(tmp_path / "logs.db", tmp_path / "router.sqlite") as c:
        yield c


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("q=%00", "The search parameter 'q' contains a NUL character (at position 0)"),
        ("q=question%00x", "The search parameter 'q' contains a NUL character (at position 8)"),
        ("status=%00", "The search parameter 'status' contains a NUL character"),
        ("model=a%00", "The search parameter 'model' contains a NUL character"),
    ],
)
def test_a_nul_in_the_search_is_a_400_saying_so(client: TestClient, query: str, said: str) -> None:
    for route in ("/api/runs", "/api/selections"):
        response = client.get(f"{route}?{query}")
        assert response.status_code == 400, response.text
        assert said in response.json()["error"]


def test_ordinary_searches_still_answer(client: TestClient) -> None:
    assert client.get("/api/runs?q=question%201").json()["total"] == 1
    for q in ("%22", "%5C", "NOT", "%C3%28", "%FF%FE", "capital%20OR"):
        assert client.get(f"/api/runs?q={q}").status_code == 200, q


@pytest.mark.parametrize("damage", ["garbage", "damaged inside"])
def test_a_corrupt_log_is_a_400_naming_the_file(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "logs.db"
    routes = ["/api/runs", "/api/runs?q=question", "/api/facets"]
    if damage == "garbage":
        path.write_bytes(b"not a database, just text\n" * 40)
    else:
        # opens (schema and migrations intact); the runs table's root page is garbage
        routes.append(f"/api/runs/{_fill(path, runs=60, size=2000)[0]}")
        with sqlite3.connect(path) as conn:
            size = conn.execute("PRAGMA page_size").fetchone()[0]
            root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()
        conn.close()
        with open(path, "r+b") as f:
            f.seek((root[0] - 1) * size)
            f.write(b"\xa5" * size)
    with _client(path, tmp_path / "router.sqlite") as c:
        for route in routes:
            response = c.get(route)
            assert response.status_code == 400, (route, response.text)
            error = response.json()["error"]
            assert str(path) in error and "phi run log" in error, error


def test_a_namespace_before_any_router_state_is_a_404(tmp_path: Path) -> None:
    with _client(tmp_path / "logs.db", tmp_path / "router.sqlite") as c:
        for route in ("/api/routes/support", "/api/routes/support/rewards.svg"):
            response = c.get(route)
            assert response.status_code == 404, (route, response.text)
            error = response.json()["error"]
            assert "No namespace 'support'" in error
            assert "router.sqlite" in error and "--strategy bandit" in error
        assert c.get("/api/routes").status_code == 200  # the overview still says why it is empty
    assert not (tmp_path / "router.sqlite").exists()
