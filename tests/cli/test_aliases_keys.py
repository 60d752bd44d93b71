"""`phi aliases` and `phi keys`: names that work wherever a model does, and keys stored 0600
that the provider registry finds — the environment winning — and that are never printed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from phi_core.cli import app
from phi_core.config import plan_race
from phi_core.errors import MissingApiKeyError, UserError
from phi_core.providers._common import api_key_for
from phi_core.providers.aliases import aliases_path
from phi_core.providers.keys import keys_path, stored_keys
from phi_core.providers.registry import get_provider, qualify_model_name, resolve_model

KEY = "sk-stored-0123456789abcdefABCDEF"


def phi(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(app, list(args), input=input)


# --------------------------------------------------------------------------- aliases


def test_an_alias_is_set_listed_used_and_removed(tmp_path: Path) -> None:
    made = phi("aliases", "set", "fast", "gpt-4o-mini")  # a bare name is stored qualified
    assert made.exit_code == 0, made.output
    assert "fast → openai:gpt-4o-mini" in made.stdout
    assert json.loads(phi("aliases", "--json").stdout) == {"fast": "openai:gpt-4o-mini"}
    assert "openai:gpt-4o-mini" in phi("aliases", "list").stdout
    assert phi("aliases", "path").stdout.strip() == str(aliases_path())
    assert qualify_model_name("fast") == "openai:gpt-4o-mini"
    assert resolve_model("fast").spec == "openai:gpt-4o-mini"  # library strings too

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripted:a": {"default": "from a"}}))
    assert phi("aliases", "set", "mine", "scripted:a").exit_code == 0
    ran = phi("run", "Q", "-m", "mine@temperature=0.1", "--json", "--script", str(script))
    assert ran.exit_code == 0, ran.output
    events = [json.loads(line) for line in ran.stdout.splitlines()]
    assert events[-1]["model"] == "scripted:a" and events[-1]["text"] == "from a"
    request = next(e for e in events if e["type"] == "turn_request")
    assert request["payload"]["temperature"] == 0.1  # settings follow an alias

    assert phi("aliases", "remove", "fast").exit_code == 0
    assert "fast" not in json.loads(phi("aliases", "--json").stdout)
    gone = phi("aliases", "remove", "fast")
    assert gone.exit_code == 2 and "No alias 'fast'" in gone.stderr


@pytest.mark.parametrize(
    ("name", "model", "message"),
    [
        ("a:b", "openai:gpt-4o", "no ':'"),
        ("fast", "openai:gpt-4o@temperature=0.2", "without settings"),
        ("fast", "gtp-4o", "Did you mean 'gpt-4o'"),
        ("fast", "nope:model", "Unknown provider 'nope'"),
    ],
)
def test_a_bad_alias_is_refused_saying_why(name: str, model: str, message: str) -> None:
    refused = phi("aliases", "set", name, model)
    assert refused.exit_code == 2 and message in refused.stderr
    assert not aliases_path().exists()


def test_an_alias_may_name_another_which_is_stored_resolved() -> None:
    phi("aliases", "set", "base", "claude-haiku-4-5")
    phi("aliases", "set", "judge", "base")
    assert json.loads(phi("aliases", "--json").stdout)["judge"] == "anthropic:claude-haiku-4-5"


# --------------------------------------------------------------------------- keys


def test_a_key_read_from_stdin_is_stored_0600_and_never_printed() -> None:
    stored = phi("keys", "set", "openai", input=KEY + "\n")
    assert stored.exit_code == 0, stored.output
    assert KEY not in stored.output
    path = keys_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"openai": KEY}
    listed = phi("keys")
    assert listed.exit_code == 0 and KEY not in listed.stdout
    rows = {r["provider"]: r for r in map(json.loads, phi("keys", "--json").stdout.splitlines())}
    assert rows["openai"]["stored"] and rows["openai"]["used"] == "stored"
    assert rows["openai-responses"]["stored"]  # same vendor, same variable
    assert not rows["anthropic"]["stored"]
    assert phi("keys", "path").stdout.strip() == str(path)
    models = phi("models")
    assert "stored (phi keys)" in models.stdout and KEY not in models.stdout


def test_the_registry_finds_a_stored_key_and_the_environment_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = resolve_model("openai:gpt-4o-mini")
    with pytest.raises(MissingApiKeyError, match="phi keys set openai"):
        api_key_for(model, "OPENAI_API_KEY")
    phi("keys", "set", "openai", input=KEY)
    assert api_key_for(model, "OPENAI_API_KEY") == KEY
    assert api_key_for(resolve_model("openai-responses:gpt-5"), "OPENAI_API_KEY") == KEY
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-9876543210")
    assert api_key_for(model, "OPENAI_API_KEY") == "sk-from-env-9876543210"
    noted = phi("keys", "set", "openai", input=KEY)
    assert "wins over the stored key" in noted.stdout


def test_a_race_plan_finds_the_stored_key() -> None:
    missing = phi("race", "Q?", "-m", "openai:gpt-4o-mini")
    assert missing.exit_code == 2 and "phi keys set openai" in missing.stderr
    with pytest.raises(MissingApiKeyError):
        plan_race(models=["openai:gpt-4o-mini"], strategy="pick-first")
    phi("keys", "set", "openai", input=KEY)
    plan = plan_race(models=["openai:gpt-4o-mini"], strategy="pick-first")  # no key error now
    assert plan.labels == ["openai:gpt-4o-mini"]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("opnai", KEY, "Did you mean 'openai'"),
        ("local", KEY, "No provider 'local' takes an API key"),
        ("openai", "\n", "empty"),
        ("openai", "sk-two words", "whitespace"),
    ],
)
def test_a_bad_key_is_refused_and_nothing_is_stored(name: str, value: str, message: str) -> None:
    refused = phi("keys", "set", name, input=value)
    assert refused.exit_code == 2 and message in refused.stderr
    assert not keys_path().exists()


def test_removing_a_key_forgets_it() -> None:
    phi("keys", "set", "anthropic", input=KEY)
    assert phi("keys", "remove", "anthropic").exit_code == 0
    assert json.loads(keys_path().read_text()) == {}
    assert phi("keys", "remove", "anthropic").exit_code == 2


def test_an_unreadable_keys_file_is_a_clear_error() -> None:
    keys_path().parent.mkdir(parents=True, exist_ok=True)
    keys_path().write_text("{not json")
    broken = phi("keys")
    assert broken.exit_code == 2 and "fix the file or delete it" in broken.stderr
    with pytest.raises(UserError, match=r"keys\.json"):
        api_key_for(resolve_model("openai:gpt-4o-mini"), "OPENAI_API_KEY")


def test_a_provider_client_follows_the_key_in_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    model = resolve_model("openai:gpt-4o-mini")
    phi("keys", "set", "openai", input=KEY)
    first = get_provider(model)
    assert get_provider(model) is first  # one client per key
    phi("keys", "set", "openai", input=KEY + "2")
    assert get_provider(model) is not first  # a new key, a new client
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-9876543210")
    from_env = get_provider(model)
    assert from_env is not first
    monkeypatch.delenv("OPENAI_API_KEY")
    phi("keys", "remove", "openai")
    with pytest.raises(MissingApiKeyError, match="phi keys set openai"):
        get_provider(model)  # no key any more: not a client built with the old one


# --------------------------------------------------------------------------- PHI_HOME, keys.json


@pytest.mark.parametrize(
    "args",
    [
        ("run", "hi", "-m", "openai-compat:m1@http://127.0.0.1:1/v1"),
        ("race", "hi", "-m", "openai-compat:m1@http://127.0.0.1:1/v1", "-m",
         "openai-compat:m2@http://127.0.0.1:1/v1"),
        ("keys", "list"),
        ("aliases", "set", "q", "openai-compat:m1@http://127.0.0.1:1/v1"),
        ("aliases", "list"),
    ],
    ids=["run", "race", "keys", "aliases-set", "aliases-list"],
)  # fmt: skip
def test_phi_home_that_is_a_file_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    home = tmp_path / "phi-home"
    home.write_text("not a folder\n")
    monkeypatch.setenv("PHI_HOME", str(home))
    result = phi(*args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    err = " ".join(result.stderr.split())
    assert err.count("is not a folder") == 1, err  # said once, not as a warning and an error
    assert f"PHI_HOME ('{home}') is not a folder" in err and "Point PHI_HOME at a folder" in err
    assert home.read_text() == "not a folder\n"  # nothing written over it


def test_a_phi_home_below_a_file_is_the_same_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("PHI_HOME", str(tmp_path / "file" / "phi"))
    with pytest.raises(UserError, match=r"is not a folder; .* Point PHI_HOME at a folder"):
        api_key_for(resolve_model("openai:gpt-4o-mini"), "OPENAI_API_KEY")


def test_a_broken_keys_file_fails_only_a_run_that_needs_a_stored_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys_path().parent.mkdir(parents=True, exist_ok=True)
    keys_path().write_text("{not json")
    compat = resolve_model("openai-compat:m1@http://127.0.0.1:1/v1")
    with caplog.at_level("WARNING", logger="phi_core.providers.keys"):
        assert api_key_for(compat, "OPENAI_COMPAT_API_KEY") is None  # no key needed: none
        assert api_key_for(compat, "OPENAI_COMPAT_API_KEY") is None
    warned = [r.getMessage() for r in caplog.records if "keys.json" in r.getMessage()]
    assert len(warned) == 1 and "fix the file or delete it" in warned[0]  # once per process
    with pytest.raises(UserError, match=r"keys\.json.*fix the file or delete it"):
        api_key_for(resolve_model("openai:gpt-4o-mini"), "OPENAI_API_KEY")  # needs one
    with pytest.raises(UserError, match=r"keys\.json"):
        api_key_for(compat, "OPENAI_COMPAT_API_KEY", required=True)


@pytest.mark.skipif(os.name != "posix", reason="file modes")
def test_a_keys_file_others_can_read_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert phi("keys", "set", "openai", input=KEY).exit_code == 0
    path = keys_path()
    with caplog.at_level("WARNING", logger="phi_core.providers.keys"):
        stored_keys()
        assert not caplog.records  # written 0600: nothing to say
        path.chmod(0o644)
        assert stored_keys() == {"openai": KEY}  # still used
        stored_keys()
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        f"{path} can be read by other users (mode 0644); your API keys are in it. "
        f"Run `chmod 600 {path}`."
    ]


def test_a_stored_value_that_is_not_a_key_is_warned_about_not_silently_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys_path().parent.mkdir(parents=True, exist_ok=True)
    keys_path().write_text(json.dumps({"openai": KEY, "xai": 5}))
    keys_path().chmod(0o600)
    with caplog.at_level("WARNING", logger="phi_core.providers.keys"):
        assert stored_keys() == {"openai": KEY}
    assert any("no key string for 'xai'" in r.getMessage() for r in caplog.records)
