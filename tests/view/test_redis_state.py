"""The router page over a router state in Redis (a real ``redis-server`` on 127.0.0.1): it
reads what workers added and writes nothing; an unreachable Redis is said, not shown as empty."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest
import redis

from phi_core.errors import UserError
from phi_core.routing import RedisStateStore
from phi_core.routing.bandits import ArmStats
from phi_core.view import ViewData

from ..routing.test_stores import redis_url  # noqa: F401  (the redis-server fixture)


@pytest.mark.server
def test_the_router_page_reads_a_redis_state_without_writing_it(
    redis_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    writer = RedisStateStore(redis_url)
    writer.add("hashed-v1:dim=2", "openai:gpt-4o", ArmStats.of(np.array([1.0, 0.0]), 0.9))
    writer.add("hashed-v1:dim=2", "openai:gpt-4o", ArmStats.of(np.array([0.0, 1.0]), 0.5))
    writer.add("hashed-v1:dim=2", "local:smollm2", ArmStats.of(np.array([1.0, 1.0]), 0.2))
    client = redis.Redis.from_url(redis_url)
    before = {key: client.dump(key) for key in client.keys("*")}

    data = ViewData(tmp_path / "logs.db", redis_url)
    state = data.routes()
    detail = data.route("hashed-v1:dim=2")

    assert state["note"] is None and state["location"] == redis_url
    arms = {arm["arm"]: arm for arm in detail["arms"]}
    assert arms["openai:gpt-4o"]["n"] == 2 and arms["openai:gpt-4o"]["mean_reward"] == 0.7
    assert arms["openai:gpt-4o"]["reward_sd"] == pytest.approx(0.2)
    assert arms["local:smollm2"]["ci95"] is None  # one observation: no interval
    assert detail["decisions"] == []  # no run log yet
    assert {key: client.dump(key) for key in client.keys("*")} == before
    client.close()


def test_an_unreachable_redis_is_reported(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    state = ViewData(tmp_path / "logs.db", f"redis://127.0.0.1:{port}/0").routes()
    assert state["namespaces"] == []
    assert "cannot be reached" in state["note"]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again: nothing listens there


def test_a_redis_password_is_never_shown(tmp_path: Path) -> None:
    """The router page gives the state's location, and its errors name it: a password in the
    URL is starred in both (the page may be served to others with --host)."""
    url = f"redis://:hunter2@127.0.0.1:{_closed_port()}/0"
    data = ViewData(tmp_path / "logs.db", url)
    state = data.routes()
    assert "hunter2" not in json.dumps(state)
    assert state["location"] == url.replace("hunter2", "***")
    assert "cannot be reached" in state["note"]
    with pytest.raises(UserError) as caught:
        data.route("hashed-v1:dim=2")
    assert "hunter2" not in str(caught.value) and ":***@" in str(caught.value)


@pytest.mark.server
def test_the_router_page_finds_a_state_under_its_key_prefix(
    redis_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A state written under a custom key prefix (``ROUTER_STATE_KEY``) is empty under the
    default one and whole under its own; the URL's password (accepted by a server without
    one, for the ``default`` user) is starred in the location."""
    writer = RedisStateStore(redis_url, prefix="team-a:router", spool=None)
    writer.add("hashed-v1:dim=2", "openai:gpt-4o", ArmStats.of(np.array([1.0, 0.0]), 0.9))
    secret = redis_url.replace("redis://", "redis://default:hunter2@")
    default = ViewData(tmp_path / "logs.db", secret).routes()
    assert default["namespaces"] == [] and "no statistics yet" in default["note"]
    data = ViewData(tmp_path / "logs.db", secret, state_key="team-a:router")
    state = data.routes()
    assert [ns["namespace"] for ns in state["namespaces"]] == ["hashed-v1:dim=2"]
    assert state["location"] == redis_url.replace("redis://", "redis://default:***@")
    detail = data.route("hashed-v1:dim=2")
    assert [arm["arm"] for arm in detail["arms"]] == ["openai:gpt-4o"]
    assert "hunter2" not in json.dumps(state) + json.dumps(detail)
