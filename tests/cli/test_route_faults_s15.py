"""`phi race --strategy bandit` and `phi route` on router states they cannot use: a state that
cannot be opened or read is one `Error:` line naming it and what to do (exit 1), never a
traceback; a Redis key of the wrong type reads as a state of the wrong shape; the route commands
find a state under its key prefix (`--router-state-key` / `ROUTER_STATE_KEY`); a reset forgets
the cached previews too; a router parameter that is not a finite number is a usage error."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.routing import ArmStats, HashedFeatures, RedisStateStore
from tests.routing.test_stores import redis_url  # noqa: F401  (the real redis-server fixture)

JUDGE_REPLY = json.dumps(
    {
        "scores": [
            {"answer": 1, "reason": "r", "relevance": 0.9, "coverage": 0.9, "faithfulness": 0.9},
            {"answer": 2, "reason": "r", "relevance": 0.2, "coverage": 0.2, "faithfulness": 0.2},
        ]
    }
)
SCRIPT = {
    "scripted:a": {"default": "Answer from A."},
    "scripted:b": {"default": "Answer from B."},
    "scripted:judge": {"default": JUDGE_REPLY},
}
NAMESPACE = HashedFeatures(64, length_scale=2000).schema  # the bandit options' defaults


def race(state: str, script: str, *extra: str, env: dict[str, str] | None = None) -> Result:
    args = [
        "race", "What is entanglement?", "-m", "scripted:a", "-m", "scripted:b",
        "--strategy", "bandit", "--judge", "scripted:judge", "--state", state,
        "--script", script, "--top-k", "2", *extra,
    ]  # fmt: skip
    return CliRunner().invoke(app, args, env=env)


def route(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, ["route", *args], env=env)


def assert_clean_error(result: Result, *fragments: str, code: int = 1) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    err = " ".join(result.stderr.split())  # the line may be wrapped
    assert err.startswith("Error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


# ---------------------------------------------------------------- states that cannot be used


@pytest.mark.parametrize("mode", [("-o", "answer"), ("--json",), ()])
def test_a_state_that_is_a_directory_is_an_error_line_not_a_traceback(
    tmp_path: Path, script: str, mode: tuple[str, ...]
) -> None:
    for name in ("router.sqlite", "router.json"):
        state = tmp_path / name
        state.mkdir()
        result = race(str(state), script, *mode)
        assert_clean_error(
            result, f"Cannot open the router state {state}", "it is a directory", "--state"
        )
        assert result.stdout == ""  # nothing was raced


def test_a_state_whose_folder_cannot_be_made_is_an_error_line(tmp_path: Path, script: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = race(str(blocker / "router.sqlite"), script)
    assert_clean_error(result, "Cannot create the folder of the router state", "--state")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores file modes")
def test_a_read_only_state_is_an_error_line(tmp_path: Path, script: str) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    state = folder / "router.sqlite"
    assert race(str(state), script).exit_code == 0
    state.chmod(0o444)
    folder.chmod(0o555)
    try:
        result = race(str(state), script)
    finally:
        folder.chmod(0o755)
    assert_clean_error(result, f"router state {state}", "read-only", "--state")


@pytest.mark.server
def test_redis_arm_keys_that_are_not_statistics_are_error_lines_and_reset_clears_them(
    script: str,
    redis_url: str,  # noqa: F811
) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    assert race(redis_url, script).exit_code == 0
    key = f"phi:router:v1:{NAMESPACE}:scripted:a"
    client.set(key, "not json")
    assert_clean_error(race(redis_url, script), f"Redis key {key} is not router statistics")
    client.delete(key)
    client.hset(key, "f", "v")  # WRONGTYPE: a hash where the statistics belong
    for result in (
        race(redis_url, script),
        route("show", "--state", redis_url),
        route("export", "--state", redis_url),
    ):
        assert_clean_error(result, f"Redis key {key} is not router statistics", "phi route reset")
    assert route("reset", "--state", redis_url, "--yes").exit_code == 0
    assert client.exists(key) == 0
    assert race(redis_url, script).exit_code == 0
    client.close()


# ---------------------------------------------------------------- the key prefix


@pytest.mark.server
def test_route_commands_find_a_redis_state_under_its_key_prefix(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    store = RedisStateStore(redis_url, prefix="myprefix", spool=None)
    store.add(NAMESPACE, "scripted:a", ArmStats.of(np.ones(64), 0.7))
    shown = route("show", "--state", redis_url)
    assert shown.exit_code == 0 and "no router statistics yet" in shown.stdout
    assert "phi:router:v1" in shown.stdout  # which prefix was looked under
    shown = route("show", "--state", redis_url, "--router-state-key", "myprefix", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)[NAMESPACE]["scripted:a"]["n"] == 1.0
    env = {"ROUTER_STATE_KEY": "myprefix"}
    exported = route("export", "--state", redis_url, env=env)
    assert exported.exit_code == 0, exported.output
    assert set(json.loads(exported.stdout)["namespaces"]) == {NAMESPACE}
    reset = route("reset", "--state", redis_url, "--yes", env=env)
    assert reset.exit_code == 0, reset.output
    assert store.load(NAMESPACE) == {}
    # on a file the prefix does nothing, and says so
    state = tmp_path / "s.sqlite"
    ignored = route("reset", "--state", str(state), "--router-state-key", "x", "--yes")
    assert "only applies to state in Redis" in ignored.stderr


@pytest.mark.server
def test_a_bandit_race_learns_under_the_key_prefix_route_shows(
    script: str,
    redis_url: str,  # noqa: F811
) -> None:
    learned = race(redis_url, script, env={"ROUTER_STATE_KEY": "teamA"})
    assert learned.exit_code == 0, learned.output
    flagged = race(redis_url, script, "--router-state-key", "teamB")
    assert flagged.exit_code == 0, flagged.output
    for prefix in ("teamA", "teamB"):
        shown = route("show", "--state", redis_url, "--router-state-key", prefix, "--json")
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)[NAMESPACE], prefix  # learned under its own prefix
    default = route("show", "--state", redis_url)
    assert "no router statistics yet" in default.stdout  # nothing under phi:router:v1


@pytest.mark.server
def test_route_show_never_prints_the_redis_password(
    redis_url: str,  # noqa: F811
) -> None:
    """An empty state names where it looked: the URL's password (accepted by a server without
    one, for the ``default`` user) is starred."""
    secret = redis_url.replace("redis://", "redis://default:hunter2@")
    shown = route("show", "--state", secret)
    assert shown.exit_code == 0, shown.output
    assert "no router statistics yet" in shown.stdout
    assert "hunter2" not in shown.output and "default:***@" in shown.stdout


# ---------------------------------------------------------------- a reset forgets the previews


def _previews(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM previews").fetchone()[0])


def _learned(state: str) -> float:
    shown = route("show", "--state", state, "--json")
    assert shown.exit_code == 0, shown.output
    return sum(arm["n"] for arm in json.loads(shown.stdout)[NAMESPACE].values())


def test_a_reset_router_learns_from_its_previews_again(tmp_path: Path, script: str) -> None:
    """The reset used to leave the previews cached: the reset router found them and learned
    only from the answer (n 1 instead of 1.5)."""
    state = str(tmp_path / "router.sqlite")
    assert race(state, script).exit_code == 0
    first = _learned(state)
    assert first == 1.5 and _previews(Path(state)) == 2  # answer (1) + the other preview (0.5)
    reset = route("reset", "--state", state, "--yes")
    assert reset.exit_code == 0 and "forgot 2 cached preview(s)" in reset.stdout
    assert _previews(Path(state)) == 0
    assert race(state, script).exit_code == 0
    assert _learned(state) == first  # as much as a fresh state learns


@pytest.mark.server
def test_a_reset_forgets_the_redis_previews_of_its_prefix_only(  # as parallel-agents keeps them
    script: str,
    redis_url: str,  # noqa: F811
) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    env = {"ROUTER_STATE_KEY": "teamA"}
    client.set("phi:gateway:link:abc", "{}")
    client.set("teamB:preview:xyz", "{}")
    raced = CliRunner().invoke(
        app,
        [
            "parallel-agents", "Q?", "--agent-models", "scripted:a,scripted:b",
            "--judge-model", "scripted:judge", "--redis-url", redis_url, "--top-k", "2",
            "--script", script,
        ],
        env=env,
    )  # fmt: skip
    assert raced.exit_code == 0, raced.output
    previews = client.keys("teamA:preview:*")
    assert len(previews) == 2
    reset = route("reset", "--state", redis_url, "--yes", env=env)
    assert reset.exit_code == 0 and "forgot 2 cached preview(s)" in reset.stdout
    assert client.keys("teamA:preview:*") == []
    assert client.exists("phi:gateway:link:abc", "teamB:preview:xyz") == 2
    client.close()


# ---------------------------------------------------------------- router parameters


@pytest.mark.parametrize(("flag", "value"), [("--alpha", "nan"), ("--alpha", "inf")])
def test_a_router_parameter_that_is_not_finite_is_a_usage_error(
    tmp_path: Path, script: str, flag: str, value: str
) -> None:
    result = race(str(tmp_path / "router.sqlite"), script, flag, value)
    assert_clean_error(result, "alpha must be >= 0 and finite", code=2)


BAD_REDIS_URLS = [
    ("redis://127.0.0.1:abc/0", "Port could not be cast"),
    ("redis://[::1", "Invalid IPv6 URL"),
]


@pytest.mark.parametrize(("url", "why"), BAD_REDIS_URLS)
def test_a_malformed_redis_state_is_a_usage_error_naming_the_url_and_its_form(
    script: str, url: str, why: str
) -> None:
    result = race(url, script)
    assert_clean_error(result, f"{url} is not a valid Redis URL ({why}", "redis://", code=2)
    assert result.stdout == ""  # nothing was raced


def test_a_malformed_redis_state_never_shows_its_password(script: str) -> None:
    result = race("redis://:hunter2@127.0.0.1:abc/0", script)
    assert_clean_error(result, "redis://:***@127.0.0.1:abc/0 is not a valid Redis URL", code=2)
    assert "hunter2" not in result.output
