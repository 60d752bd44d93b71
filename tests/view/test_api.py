"""The web view's JSON API over a run log holding a real recorded race, bandit race and
selection: search and pagination, one race whole, router state per namespace, selections with
their Pareto chart, clear 400/404 errors, escaping, and never a write to what it reads."""

from __future__ import annotations

import hashlib
import sqlite3
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from phi_core.view import STATIC_DIR, ViewData, create_app

from .conftest import XSS, Recorded

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def client(recorded: Recorded) -> Iterator[TestClient]:
    data = ViewData(recorded.log_path, recorded.state)
    with TestClient(create_app(data), base_url="http://127.0.0.1:8765") as client:
        yield client
    data.close()


def ids(client: TestClient, query: str = "") -> list[str]:
    response = client.get(f"/api/runs{query}")
    assert response.status_code == 200, response.text
    return [run["id"] for run in response.json()["runs"]]


def test_the_runs_list_holds_every_logged_run_newest_first(
    client: TestClient, recorded: Recorded
) -> None:
    body = client.get("/api/runs").json()
    assert body["total"] == 3 and body["note"] is None
    assert [r["id"] for r in body["runs"]] == [
        recorded.select_id,
        recorded.bandit_id,
        recorded.race_id,
    ]
    race = body["runs"][2]
    assert race["kind"] == "race" and race["winner"] == "scripted:b" and race["branches"] == 3
    assert race["models"] == ["scripted:a", "scripted:b", "scripted:c"]
    assert "messages" not in race  # listings leave the history out


def test_search_filters_by_text_model_strategy_kind_and_date(
    client: TestClient, recorded: Recorded
) -> None:
    assert ids(client, "?q=entanglement") == [recorded.race_id]
    assert ids(client, "?q=particles") == [recorded.race_id]  # a branch's answer
    assert ids(client, "?model=scripted:c") == [recorded.race_id]
    assert ids(client, "?model=solver%3Dscripted%3Agood") == [recorded.select_id]
    assert ids(client, "?strategy=bandit") == [recorded.bandit_id]
    assert ids(client, "?kind=select") == [recorded.select_id]
    assert len(ids(client, "?since=1d")) == 3
    assert ids(client, "?until=2000-01-01") == []
    assert ids(client, "?q=nothing-like-this") == []


def test_pages_partition_the_runs_and_report_the_total(client: TestClient) -> None:
    pages = [client.get(f"/api/runs?limit=2&offset={offset}").json() for offset in (0, 2)]
    assert [len(p["runs"]) for p in pages] == [2, 1]
    assert {p["total"] for p in pages} == {3}
    assert len({r["id"] for p in pages for r in p["runs"]}) == 3


def test_facets_offer_the_values_the_runs_use(client: TestClient) -> None:
    facets = client.get("/api/facets").json()
    assert {"scripted:a", "scripted:b", "scripted:c"} <= set(facets["models"])
    assert facets["strategies"] == ["bandit", "brute_force", "judge"]
    assert facets["kinds"] == ["bandit", "race", "select"]
    assert facets["first"] <= facets["last"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?limit=0", "limit must be between 1 and 200, got 0"),
        ("?limit=many", "limit must be a whole number, got 'many'"),
        ("?offset=-1", "offset must be >= 0"),
        ("?offset=99999999999999999999", "offset must be at most 9223372036854775807"),
        ("?offset=-99999999999999999999", "offset must be >= 0, got -99999999999999999999"),
        ("?offset=1e3", "offset must be a whole number, got '1e3'"),
        ("?limit=99999999999999999999", "limit must be between 1 and 200"),
        ("?limit=-5", "limit must be between 1 and 200, got -5"),
        ("?since=99999999d", "The age '99999999d' reaches back before the year 1"),
        ("?until=9999999999w", "The age '9999999999w' reaches back before the year 1"),
        ("?until=99999999d", "reaches back before the year 1"),
        ("?since=-5d", "cannot be negative, got '-5d'"),
        ("?until=2026-13-45", "Cannot read '2026-13-45' as a time"),
        ("?since=9999-12-31T23:59:59-05:00", "outside the years 1 to 9999"),
        ("?kind=chat", "Unknown kind 'chat'"),
        ("?since=yesterday-ish", "Cannot read 'yesterday-ish' as a time"),
        ("?colour=red", "Unknown search parameter 'colour'"),
    ],
)
def test_a_bad_search_parameter_is_a_400_saying_what_was_wrong(
    client: TestClient, query: str, message: str
) -> None:
    # /api/selections takes the same parameters, its kind fixed to `select`.
    routes = ["/api/runs"] if "kind=" in query else ["/api/runs", "/api/selections"]
    for route in routes:
        response = client.get(f"{route}{query}")
        assert response.status_code == 400, (route, response.text)
        assert message in response.json()["error"]


def test_the_last_page_sqlite_can_address_is_empty_not_an_error(client: TestClient) -> None:
    body = client.get("/api/runs?offset=9223372036854775807&until=9999-12-31&since=0001-01-01")
    assert body.status_code == 200, body.text
    assert body.json()["runs"] == [] and body.json()["total"] == 3


def test_one_race_has_every_branch_the_verdict_and_the_figures(
    client: TestClient, recorded: Recorded
) -> None:
    run = client.get(f"/api/runs/{recorded.race_id}").json()
    assert run["kind"] == "race" and run["prompt"] == "Explain entanglement."
    a, b, c = run["branches"]
    assert (a["status"], a["text"], a["output_tokens"]) == ("ok", f"A answers: {XSS}", 30)
    assert b["winner"] and not a["winner"] and b["score"] == 1.0
    assert c["status"] == "error" and c["error_kind"] == "auth" and "bad credentials" in c["error"]
    assert all(branch["latency_s"] is not None for branch in (a, b))
    assert run["verdict"]["judge"] == "scripted:judge"
    assert "response 2" in run["verdict"]["rationale"]
    assert [m["role"] for m in run["messages"]] == ["user", "assistant"]
    # An id prefix is enough, as in `phi logs show`.
    assert client.get(f"/api/runs/{recorded.race_id[:20]}").json()["id"] == recorded.race_id


def test_a_bandit_race_carries_its_router_decisions(client: TestClient, recorded: Recorded) -> None:
    run = client.get(f"/api/runs/{recorded.bandit_id}").json()
    assert [e["type"] for e in run["route_events"]] == ["route_decision", "route_update"]
    assert run["verdict"]["action"] == "race"
    assert {b["phase"] for b in run["branches"]} == {"preview", "answer"}


def test_an_unknown_run_is_a_404_naming_it(client: TestClient) -> None:
    response = client.get("/api/runs/01NOSUCHRUN")
    assert response.status_code == 404
    assert "No run '01NOSUCHRUN'" in response.json()["error"]


def test_the_router_state_shows_each_namespace_with_its_arms(
    client: TestClient, recorded: Recorded
) -> None:
    state = client.get("/api/routes").json()
    assert state["location"] == recorded.state and state["note"] is None
    (namespace,) = state["namespaces"]
    assert namespace["namespace"] == recorded.namespace
    arms = {arm["arm"]: arm for arm in namespace["arms"]}
    assert set(arms) == {"scripted:a", "scripted:b"}
    assert all(0.0 <= arm["mean_reward"] <= 1.0 and arm["n"] > 0 for arm in arms.values())


def test_a_namespace_shows_its_decisions_over_time_and_a_chart(
    client: TestClient, recorded: Recorded
) -> None:
    detail = client.get(f"/api/routes/{recorded.namespace}").json()
    assert [d["type"] for d in detail["decisions"]] == ["route_decision", "route_update"]
    assert detail["decisions"][0]["run_id"] == recorded.bandit_id
    assert detail["decisions"][0]["contenders"] == ["scripted:a", "scripted:b"]
    chart = client.get(f"/api/routes/{recorded.namespace}/rewards.svg")
    assert chart.headers["content-type"].startswith("image/svg+xml")
    points = ET.fromstring(chart.text).iter(f"{SVG}circle")
    rewards = [r["arm"] for r in detail["decisions"][1]["rewards"]]
    # One point per learned reward, plus one legend dot per arm.
    assert len(list(points)) == len(rewards) + len(set(rewards))


def test_an_unknown_namespace_is_a_404_listing_the_known_ones(
    client: TestClient, recorded: Recorded
) -> None:
    response = client.get("/api/routes/no-such-namespace")
    assert response.status_code == 404
    assert recorded.namespace in response.json()["error"]


def test_a_selection_lists_its_combinations_and_draws_its_pareto_front(
    client: TestClient, recorded: Recorded
) -> None:
    listing = client.get("/api/selections").json()
    assert [r["id"] for r in listing["runs"]] == [recorded.select_id]
    selection = client.get(f"/api/selections/{recorded.select_id}").json()
    combos = {c["name"]: c for c in selection["combinations"]}
    good, bad = combos["solver=scripted:good"], combos["solver=scripted:bad"]
    assert good["best"] and good["pareto"] and good["accuracy"] == 1.0
    assert bad["accuracy"] == 0.0 and bad["evaluations"] == 4 and not bad["best"]
    assert selection["evaluations"] == 8 and selection["algorithm"] == "brute_force"
    svg = ET.fromstring(client.get(f"/api/selections/{recorded.select_id}/pareto.svg").text)
    best_marks = [p for p in svg.iter(f"{SVG}path") if "best" in p.get("class", "")]
    assert len(best_marks) == 2  # the star on both panels (cost and latency)
    tips = [t.text for t in svg.iter(f"{SVG}title")]
    assert "solver=scripted:good: accuracy 1.000" in tips


def test_a_race_is_not_a_selection(client: TestClient, recorded: Recorded) -> None:
    response = client.get(f"/api/selections/{recorded.race_id}")
    assert response.status_code == 404
    assert "is a race, not a selection" in response.json()["error"]


def test_the_page_and_its_assets_ship_in_the_package_with_a_strict_policy(
    client: TestClient,
) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'self'" in policy
    for asset in ("app.js", "style.css", "favicon.svg"):
        assert client.get(f"/static/{asset}").status_code == 200
    # the page is also reachable as a static file, and must not be framed or sniffed there
    for url in ("/static/index.html", "/static/app.js", "/favicon.ico"):
        headers = client.get(url).headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"], url
        assert headers["x-content-type-options"] == "nosniff", url
    # Nothing is fetched from elsewhere: no absolute URL in the page or its assets.
    for name in ("index.html", "app.js", "style.css"):
        text = (STATIC_DIR / name).read_text()
        assert "http://" not in text.replace('"http://www.w3.org/2000/svg"', "")
        assert "https://" not in text and "//cdn" not in text


def test_model_written_text_never_reaches_the_page_as_html(
    client: TestClient, recorded: Recorded
) -> None:
    # The API returns the answer as data (JSON), unchanged...
    run = client.get(f"/api/runs/{recorded.race_id}").json()
    assert XSS in run["branches"][0]["text"]
    # ...and the page's script only ever sets text: no HTML sink anywhere in it.
    script = (STATIC_DIR / "app.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script
    # The headless-browser test (test_browser.py) shows the answer and checks it did not run.


def test_an_unknown_page_is_a_404(client: TestClient) -> None:
    response = client.get("/settings")
    assert response.status_code == 404 and "the view starts at /" in response.json()["error"]


def test_viewing_never_writes_the_log_or_the_router_state(recorded: Recorded) -> None:
    def digest(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    state = Path(recorded.state)
    before = (digest(recorded.log_path), digest(state))
    data = ViewData(recorded.log_path, recorded.state)
    with TestClient(create_app(data), base_url="http://127.0.0.1:8765") as client:
        for url in (
            "/api/runs",
            f"/api/runs/{recorded.race_id}",
            "/api/routes",
            f"/api/routes/{recorded.namespace}",
            f"/api/selections/{recorded.select_id}/pareto.svg",
        ):
            assert client.get(url).status_code == 200
        with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|query_only"):
            data.log()._conn.execute("DELETE FROM runs")  # type: ignore[union-attr]
    data.close()
    assert (digest(recorded.log_path), digest(state)) == before
    # SQLite's WAL side files may be opened, but nothing is appended to them.
    for wal in (Path(f"{recorded.log_path}-wal"), Path(f"{state}-wal")):
        assert not wal.exists() or wal.stat().st_size == 0


def test_without_a_log_or_state_the_view_says_how_to_get_one(tmp_path: Path) -> None:
    data = ViewData(tmp_path / "logs.db", str(tmp_path / "router.sqlite"))
    with TestClient(create_app(data), base_url="http://127.0.0.1:8765") as client:
        runs = client.get("/api/runs").json()
        assert runs["runs"] == [] and "No runs logged yet" in runs["note"]
        routes = client.get("/api/routes").json()
        assert routes["namespaces"] == [] and "race with --strategy bandit" in routes["note"]
        assert client.get("/api/runs/01ABC").status_code == 404
    assert not (tmp_path / "logs.db").exists() and not (tmp_path / "router.sqlite").exists()


def test_a_request_for_a_foreign_host_is_refused(client: TestClient) -> None:
    # A page whose domain was re-pointed at 127.0.0.1 (DNS rebinding) sends its own Host.
    refused = client.get("/api/runs", headers={"Host": "attacker.example:8765"})
    assert refused.status_code == 400
    assert "not 'attacker.example:8765'" in refused.json()["error"]
    for host in ("localhost:8765", "127.0.0.1", "[::1]:8765"):
        assert client.get("/api/runs", headers={"Host": host}).status_code == 200, host


def test_served_to_the_network_on_purpose_any_host_is_answered(recorded: Recorded) -> None:
    data = ViewData(recorded.log_path, recorded.state)
    with TestClient(create_app(data, hosts=None), base_url="http://view.lan") as client:
        assert client.get("/api/runs").json()["total"] == 3
    data.close()


def test_a_label_with_control_characters_still_makes_a_readable_chart() -> None:
    from phi_core.view._svg import Series, scatter_svg

    svg = scatter_svg(
        [("cost", "accuracy", [Series("solver=a\x01b\x1f", [(1.0, 0.5, "tip\x00")])])],
        title="t\x0c",
        empty="none",
    )
    names = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert "solver=a\ufffdb\ufffd" in names


def test_a_namespace_holding_a_slash_is_reachable(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = ViewData(recorded.log_path, recorded.state)
    monkeypatch.setattr(data, "route", lambda ns: {"namespace": ns})
    monkeypatch.setattr(data, "route_chart", lambda ns: f"<svg>{ns}</svg>")
    with TestClient(create_app(data), base_url="http://127.0.0.1:8765") as client:
        assert client.get("/api/routes/team%2Fsupport").json() == {"namespace": "team/support"}
        chart = client.get("/api/routes/team%2Fsupport/rewards.svg")
        assert chart.text == "<svg>team/support</svg>"
    data.close()
