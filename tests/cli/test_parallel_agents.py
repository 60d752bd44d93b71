"""`parallel-agents`: the seed's flags and environment variables, each honoured with its
documented meaning or refused with what to use instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phi_core.cli import _parallel_agents
from phi_core.cli._parallel_agents import parallel_agents_app
from phi_core.providers import registry
from phi_core.providers.base import ModelConfig
from phi_core.providers.registry import ProviderSpec
from tests.routing.test_stores import redis_url  # noqa: F401  (the real redis-server fixture)

SEED_VARS = (
    "REDIS_URL", "ROUTER_STATE_KEY", "PREVIEW_CACHE_TTL", "BANDIT_ALPHA", "BANDIT_RIDGE",
    "BANDIT_STATE", "BANDIT_QUALITY_WEIGHT", "BANDIT_SPEED_WEIGHT", "BANDIT_COST_WEIGHT",
    "BANDIT_FEATURES", "BANDIT_LENGTH_THRESHOLD", "BANDIT_FALLBACK_PENALTY", "EMBEDDING_MODEL",
    "EMBEDDING_DIM", "LATENCY_BIAS_SCALE", "MODEL_PRICE_USD_PER_TOKEN_JSON", "OPENAI_API_KEY",
    "DEEP_RESEARCH_AGENT_MODELS", "DEEP_RESEARCH_JUDGE_MODEL", "PHI_SCRIPT",
)  # fmt: skip
SCORES = {
    "scores": [
        {"answer": n, "reason": "r", "relevance": s, "coverage": s, "faithfulness": s}
        for n, s in ((1, 0.9), (2, 0.2))
    ]
}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in SEED_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            {
                "scripted:a": {
                    "default": {"text": "Answer A.", "usage": {"input": 10, "output": 5}}
                },
                "scripted:b": {
                    "default": {"text": "Answer B.", "usage": {"input": 10, "output": 5}}
                },
                "scripted:j": {"default": json.dumps(SCORES)},
            }
        )
    )
    return str(path)


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(parallel_agents_app, list(args), env=env)


def captured_plans(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The plans handed to the bandit pipeline (the one seam)."""
    plans: list[Any] = []
    real = _parallel_agents.bandit_race_from_plan

    def spy(plan: Any, **kwargs: Any) -> Any:
        plans.append(plan)
        return real(plan, **kwargs)

    monkeypatch.setattr(_parallel_agents, "bandit_race_from_plan", spy)
    return plans


def test_bare_names_are_resolved_through_the_catalog() -> None:
    result = run("Q?", "--agent-models", "gpt-4o,claude-haiku-4-5")
    assert result.exit_code == 2
    # gpt-4o became openai:gpt-4o, whose key is what is missing (nothing was called)
    assert "No API key for provider 'openai'" in result.stderr


def test_an_ambiguous_bare_name_lists_the_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.known_providers()
    monkeypatch.setitem(
        registry._PROVIDERS,
        "acme",
        ProviderSpec(
            "acme", lambda m: ModelConfig(provider="acme", id=m, api="scripted"), models=("gpt-4o",)
        ),
    )
    result = run("Q?", "--agent-models", "gpt-4o")
    assert result.exit_code == 2
    assert "acme:gpt-4o, openai:gpt-4o" in result.stderr


def test_settings_after_at_work_as_in_phi_race_even_inside_the_comma_list(
    script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = captured_plans(monkeypatch)
    result = run(
        "Q?", "--agent-models", "scripted:a@temperature=0.2,max_tokens=50,scripted:b",
        "--judge-model", "scripted:j", "--bandit-state", str(tmp_path / "s.sqlite"),
        "--top-k", "2", "--script", script, "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (plan,) = plans
    assert plan.labels == ["scripted:a@temperature=0.2,max_tokens=50", "scripted:b"]
    assert (plan.configs[0].temperature, plan.configs[0].max_tokens) == (0.2, 50)
    payload = json.loads(result.stdout)
    assert payload["status"] == "ok" and set(payload["rewards"]) == set(plan.labels)


def test_the_seeds_environment_variables_reach_the_router(
    script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = captured_plans(monkeypatch)
    state = tmp_path / "from-env.sqlite"
    env = {
        "BANDIT_ALPHA": "2.5", "BANDIT_RIDGE": "0.5", "BANDIT_QUALITY_WEIGHT": "0.6",
        "BANDIT_SPEED_WEIGHT": "0.4", "BANDIT_STATE": str(state),
        "DEEP_RESEARCH_AGENT_MODELS": "scripted:a,scripted:b",
        "DEEP_RESEARCH_JUDGE_MODEL": "scripted:j", "PHI_SCRIPT": script,
    }  # fmt: skip
    result = run("Q?", env=env)
    assert result.exit_code == 0, result.output
    options = plans[0].bandit
    assert (options.alpha, options.ridge, options.quality_weight, options.speed_weight) == (
        2.5, 0.5, 0.6, 0.4,
    )  # fmt: skip
    assert state.exists()  # the router state went where BANDIT_STATE said


def test_model_prices_per_token_set_the_cost(script: str, tmp_path: Path) -> None:
    result = run(
        "Q?", "--agent-models", "scripted:a,scripted:b", "--judge-model", "scripted:j",
        "--bandit-state", str(tmp_path / "s.sqlite"), "--script", script, "--json",
        env={"MODEL_PRICE_USD_PER_TOKEN_JSON": '{"scripted:a": 0.001, "scripted:b": 0.001}'},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cost_usd"] > 0
    bad = run("Q?", "--agent-models", "scripted:a", env={"MODEL_PRICE_USD_PER_TOKEN_JSON": "[1]"})
    assert bad.exit_code == 2 and "dollars per token" in bad.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--latency-bias-scale", "0.05"], "--bandit-speed-weight"),
        (["--bandit-features", "embedding", "--embedding-model", "text-embedding-3-small"], "all-MiniLM-L6-v2"),
        (["--bandit-features", "tfidf"], "hashed"),
        (["--speculative-top-k", "3", "--top-k", "2"], "disagree"),
        (["--speculative-top-k", "1"], "--speculative-top-k"),
        (["--strategy", "greedy"], "bandit or baseline"),
    ],
)  # fmt: skip
def test_what_phi_core_cannot_honour_is_refused_with_what_to_use(
    flags: list[str], message: str
) -> None:
    result = run("Q?", "--agent-models", "scripted:a", *flags)
    assert result.exit_code == 2 and message in result.stderr


def test_documented_no_ops_are_accepted_and_the_length_features_explained(
    script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = captured_plans(monkeypatch)
    result = run(
        "Q?", "--agent-models", "scripted:a,scripted:b", "--judge-model", "scripted:j",
        "--bandit-state", str(tmp_path / "s.sqlite"), "--script", script,
        "--bandit-features", "length", "--latency-bias-scale", "0", "--no-web-search",
        "--embedding-model", "text-embedding-3-small",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert plans[0].bandit.features == "hashed"
    assert "include the seed's length features" in result.stderr
    assert "--embedding-model 'text-embedding-3-small'" in result.stderr  # it would do nothing


@pytest.mark.server
def test_redis_url_keeps_state_under_router_state_key_and_previews_for_the_ttl(
    script: str,
    redis_url: str,  # noqa: F811
) -> None:
    import redis

    env = {"REDIS_URL": redis_url, "ROUTER_STATE_KEY": "seed_state", "PREVIEW_CACHE_TTL": "30"}
    result = run(
        "Q?", "--agent-models", "scripted:a,scripted:b", "--judge-model", "scripted:j",
        "--top-k", "2", "--script", script, env=env,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    client = redis.Redis.from_url(redis_url)
    keys = [k.decode() for k in client.keys("*")]
    assert any(k.startswith("seed_state") for k in keys), keys
    # The cached previews (not the markers of applied router updates, kept for a day).
    expiring = [k for k in keys if client.ttl(k) > 0 and ":applied:" not in k]
    assert expiring and all(client.ttl(k) <= 30 for k in expiring)
    client.close()


def test_the_console_script_reads_a_dotenv_file_like_the_seed(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("BANDIT_FEATURES=from-dotenv\n")
    env = {k: v for k, v in os.environ.items() if k not in SEED_VARS}
    done = subprocess.run(
        [sys.executable, "-c", "from phi_core.cli import parallel_agents_main as m; m()",
         "Q?", "--agent-models", "scripted:a"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--bandit-features 'from-dotenv'" in done.stderr and "Traceback" not in done.stderr


def test_the_seeds_speculative_width_sets_the_previewed_arms(
    script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = captured_plans(monkeypatch)
    result = run(
        "Q?", "--agent-models", "scripted:a,scripted:b", "--judge-model", "scripted:j",
        "--bandit-state", str(tmp_path / "s.sqlite"), "--script", script,
        env={"SPECULATIVE_TOP_K": "2"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert plans[0].bandit.top_k == 2


def test_a_bandit_state_that_cannot_be_opened_is_one_error_line(
    script: str, tmp_path: Path
) -> None:
    state = tmp_path / "state.sqlite"
    state.mkdir()  # a folder where the state file belongs
    result = run(
        "Q?", "--agent-models", "scripted:a,scripted:b", "--judge-model", "scripted:j",
        "--bandit-state", str(state), "--script", script,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    assert result.stderr.startswith("Error: ") and str(state) in " ".join(result.stderr.split())


def test_a_router_state_key_for_a_file_state_is_reported_as_ignored(
    script: str, tmp_path: Path
) -> None:
    result = run(
        "Q?", "--agent-models", "scripted:a,scripted:b", "--judge-model", "scripted:j",
        "--bandit-state", str(tmp_path / "s.sqlite"), "--script", script,
        env={"ROUTER_STATE_KEY": "seed_state"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "--router-state-key (ROUTER_STATE_KEY) only applies to state in Redis" in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (("--redis-url", "redis://127.0.0.1:abc"), None, "Port could not be cast"),
        ((), {"REDIS_URL": "redis://[::1"}, "Invalid IPv6 URL"),
        (("--bandit-state", "redis://127.0.0.1:abc"), None, "Port could not be cast"),
        (("--redis-url", "notaurl"), None, "'notaurl' is not a Redis URL"),
    ],
    ids=["redis-url", "REDIS_URL", "bandit-state", "not-a-url"],
)
def test_a_redis_url_that_cannot_be_opened_is_a_usage_error_and_never_a_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: str,
    args: tuple[str, ...],
    env: dict[str, str] | None,
    expected: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.iterdir())
    result = run(
        "Q?", "--agent-models", "scripted:a,scripted:b", "--judge-model", "scripted:j",
        "--script", script, *args, env=env,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and expected in result.stderr
    assert "redis://[:password@]host:port/db" in result.stderr  # the form to write
    assert set(tmp_path.iterdir()) == before  # no ./notaurl.cache.sqlite, no lock file
