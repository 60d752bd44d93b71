"""What a ``filesystem``-isolated command can read: the system, its toolchains and the
workspace — not the rest of the host (home folders, stored keys, other services' sockets).

The command policy only sees the command line; a script the model wrote, or a path computed
when the command runs, is read by the kernel's rules alone. These tests read through such
opaque scripts, from folders outside ``/tmp`` (which is private anyway).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from phi_core.tools import BashSettings, BashTool

from ..tools.helpers import run, text

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")

# the paths come from a file: nothing on the command line for the policy to see
READER = """\
import os
for p in open("paths.txt").read().split():
    try:
        print(p, sorted(os.listdir(p)) if os.path.isdir(p) else open(p).read())
    except OSError as e:
        print(p, type(e).__name__)
"""


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A folder outside ``/tmp`` and outside the workspace (under the home folder), removed
    afterwards: where a user's other files and secrets live."""
    home = Path.home()
    if not home.is_dir() or not os.access(home, os.W_OK):
        pytest.skip("the home folder is not writable here")
    base = home / ".cache"
    base.mkdir(exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="phi-hidden-", dir=base)).resolve()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def reads(result_text: str) -> dict[str, str]:
    """``path -> what the reader printed`` (the content, a folder's listing, or the error's
    class name)."""
    out: dict[str, str] = {}
    for line in result_text.splitlines()[1:]:
        if line.startswith("/"):
            path, _, rest = line.partition(" ")
            out[path] = rest
    return out


async def read_all(bash: BashTool, workspace: Path, *paths: Path) -> dict[str, str]:
    (workspace / "reader.py").write_text(READER)
    (workspace / "paths.txt").write_text("\n".join(str(p) for p in paths))
    result = await run(bash, command="python3 reader.py")
    assert not result.is_error, text(result)
    return reads(text(result))


async def test_a_script_cannot_read_the_users_other_files_or_the_stored_keys(
    tmp_path: Path, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    marker = "SECRET-" + secrets.token_hex(8)
    other = host_dir / "other-project" / ".env"
    other.parent.mkdir()
    other.write_text(f"TOKEN={marker}\n")
    phi_home = host_dir / "phi"
    phi_home.mkdir()
    keys = phi_home / "keys.json"
    keys.write_text(json.dumps({"openai": marker}))
    monkeypatch.setenv("PHI_HOME", str(phi_home))
    bash = BashTool(workspace, BashSettings(isolate="filesystem"))
    seen = await read_all(bash, workspace, other, keys)
    assert seen == {str(other): "FileNotFoundError", str(keys): "FileNotFoundError"}


async def test_visible_paths_are_readable_but_not_writable_and_keys_stay_hidden(
    tmp_path: Path, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    data = host_dir / "data.csv"
    data.write_text("a,b\n")
    phi_home = host_dir / "phi"  # stored keys inside a folder the user made visible
    phi_home.mkdir()
    (phi_home / "keys.json").write_text('{"openai": "sk-should-not-show"}')
    monkeypatch.setenv("PHI_HOME", str(phi_home))
    bash = BashTool(workspace, BashSettings(isolate="filesystem", visible=(str(host_dir),)))
    seen = await read_all(bash, workspace, data, phi_home / "keys.json")
    assert seen[str(data)] == "a,b"
    assert seen[str(phi_home / "keys.json")] == "FileNotFoundError"
    wrote = await run(bash, command=f"echo x >> {data} || echo refused")
    assert data.read_text() == "a,b\n"
    assert "refused" in text(wrote) or wrote.is_error


async def test_a_toolchain_on_path_outside_the_system_still_runs(
    tmp_path: Path, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/.cargo/bin`` on ``PATH``: the installation is visible (its programs read their own
    files), its credential store is not, nor the rest of the home folder."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    cargo = host_dir / ".cargo"
    (cargo / "bin").mkdir(parents=True)
    (cargo / "share").mkdir()
    (cargo / "share" / "greeting").write_text("hello from the toolchain\n")
    tool = cargo / "bin" / "greet"
    tool.write_text(f"#!/bin/sh\ncat {cargo}/share/greeting\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (cargo / "credentials.toml").write_text('[registry]\ntoken = "cio-secret"\n')
    (host_dir / "diary.txt").write_text("private\n")
    monkeypatch.setenv("HOME", str(host_dir))
    monkeypatch.setenv("PATH", f"{cargo / 'bin'}{os.pathsep}{os.environ['PATH']}")
    bash = BashTool(workspace, BashSettings(isolate="filesystem"))
    result = await run(bash, command="greet")
    assert text(result).splitlines()[1:] == ["hello from the toolchain"], text(result)
    seen = await read_all(bash, workspace, cargo / "credentials.toml", host_dir / "diary.txt")
    assert seen[str(cargo / "credentials.toml")] == "PermissionError"  # blanked
    assert seen[str(host_dir / "diary.txt")] == "FileNotFoundError"


async def test_a_user_bin_on_path_shows_its_libraries_not_the_users_histories_or_tokens(
    tmp_path: Path, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/.local/bin`` (pip --user, pipx) and ``~/.cargo/bin`` on ``PATH`` make their parents
    visible; the shell histories (passwords typed on command lines) and the registry token
    cargo also reads from its config stay hidden."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    local, cargo = host_dir / ".local", host_dir / ".cargo"
    for folder in (local / "bin", local / "lib", local / "share" / "fish", local / "state",
                   cargo / "bin"):  # fmt: skip
        folder.mkdir(parents=True)
    (local / "lib" / "module.py").write_text("VALUE = 1\n")
    history = local / "share" / "fish" / "fish_history"
    history.write_text("- cmd: mysql -psecret-password\n")
    (local / "state" / "less_history").write_text("secret-search\n")
    (cargo / "config.toml").write_text('[registry]\ntoken = "cio-secret"\n')
    monkeypatch.setenv("HOME", str(host_dir))
    path = f"{local / 'bin'}{os.pathsep}{cargo / 'bin'}{os.pathsep}{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    bash = BashTool(workspace, BashSettings(isolate="filesystem"))
    files = (local / "lib" / "module.py", history, local / "state" / "less_history",
             cargo / "config.toml")  # fmt: skip
    seen = await read_all(bash, workspace, *files)
    assert seen[str(local / "lib" / "module.py")] == "VALUE = 1"
    assert seen[str(history)] == "FileNotFoundError"
    assert seen[str(local / "state" / "less_history")] == "FileNotFoundError"
    assert seen[str(cargo / "config.toml")] == "PermissionError"  # blanked


async def test_python_and_the_system_still_work(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    bash = BashTool(workspace, BashSettings(isolate="filesystem"))
    result = await run(
        bash,
        command="python3 -c 'import json, sqlite3; print(json.dumps([1]))' && ls /usr/bin "
        "| grep -c '^env$' && echo made > out.txt && cat out.txt",
    )
    assert text(result).splitlines()[1:] == ["[1]", "1", "made"], text(result)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root could read /etc/shadow anyway")
@pytest.mark.skipif(not os.path.exists("/etc/shadow"), reason="no /etc/shadow here")
async def test_run_by_root_what_other_users_cannot_read_in_etc_stays_unreadable(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    bash = BashTool(workspace, BashSettings(isolate="filesystem"))
    seen = await read_all(bash, workspace, Path("/etc/shadow"), Path("/etc/passwd"))
    assert seen["/etc/shadow"] == "PermissionError"
    assert "root:" in seen["/etc/passwd"]


async def test_other_services_sockets_and_var_are_not_there(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    bash = BashTool(workspace, BashSettings(isolate="filesystem"))
    paths = [Path(p) for p in ("/run", "/var", "/root", "/home", "/srv", "/mnt")]
    seen = await read_all(bash, workspace, *paths)
    assert seen.pop("/var") == "['tmp']"  # the private one
    assert set(seen.values()) == {"FileNotFoundError"}, seen


@pytest.mark.skipif(os.geteuid() != 0, reason="only a command run by root had capabilities")
async def test_run_by_root_a_command_cannot_unmount_or_remount_what_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    visible = tmp_path / "vis"
    (visible / "phi").mkdir(parents=True)
    keys = visible / "phi" / "keys.json"
    keys.write_text('{"openai": "sk-stored-not-for-the-model"}')
    monkeypatch.setenv("PHI_HOME", str(visible / "phi"))
    # the commands come from a file, so the policy sees only `sh escape.sh`
    (workspace / "escape.sh").write_text(
        f"umount {visible / 'phi'}; umount /etc/shadow; mount -o remount,rw,bind {visible}\n"
        f"echo x > {visible / 'ESCAPED.txt'}; mknod disk b 8 0\n"
    )
    bash = BashTool(workspace, BashSettings(isolate="filesystem", visible=(str(visible),)))
    result = await run(bash, command="sh escape.sh; echo done")
    assert "done" in text(result)
    assert not (visible / "ESCAPED.txt").exists() and not (workspace / "disk").exists()
    seen = await read_all(bash, workspace, keys, Path("/etc/shadow"))
    assert seen[str(keys)] == "FileNotFoundError"
    assert seen["/etc/shadow"] in ("PermissionError", "FileNotFoundError")


async def test_without_network_a_command_reaches_neither_loopback_nor_abstract_sockets(
    tmp_path: Path,
) -> None:
    import socket

    workspace = tmp_path / "ws"
    workspace.mkdir()
    name = "\0phi-test-" + secrets.token_hex(4)
    with socket.socket(socket.AF_UNIX) as unix, socket.socket() as tcp:
        unix.bind(name)
        unix.listen()
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        (workspace / "reach.py").write_text(
            "import socket\n"
            f"for family, address in ((socket.AF_UNIX, {name!r}), "
            f"(socket.AF_INET, ('127.0.0.1', {tcp.getsockname()[1]}))):\n"
            "    try:\n"
            "        socket.socket(family).connect(address); print('reached')\n"
            "    except OSError as e:\n"
            "        print(type(e).__name__)\n"
        )
        closed = BashTool(workspace, BashSettings(isolate="filesystem", network=False))
        shut = text(await run(closed, command="python3 reach.py")).splitlines()[1:]
        assert "reached" not in shut and len(shut) == 2, shut
        open_ = BashTool(workspace, BashSettings(isolate="filesystem"))
        assert text(await run(open_, command="python3 reach.py")).count("reached") == 2


async def test_the_file_tools_never_touch_the_user_directory_inside_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace of ``~`` holds ``~/.phi``: its stored keys stay out of every tool."""
    from phi_core.tools import ListFilesTool, ReadFileTool, SearchTool

    workspace = tmp_path / "home"
    (workspace / ".phi").mkdir(parents=True)
    (workspace / ".phi" / "keys.json").write_text('{"anthropic": "sk-ant-stored-777777"}')
    (workspace / "notes.txt").write_text("STORED nothing here\n")
    monkeypatch.setenv("PHI_HOME", str(workspace / ".phi"))
    read = await run(ReadFileTool(workspace), path=".phi/keys.json")
    assert read.is_error and "user directory" in text(read)
    found = text(await run(SearchTool(workspace), pattern="STORED|sk-ant"))
    assert "notes.txt" in found and "keys.json" not in found and "sk-ant" not in found
    listed = text(await run(ListFilesTool(workspace), path="."))
    assert "notes.txt" in listed and ".phi" not in listed


async def test_a_stored_key_is_redacted_even_when_the_environment_supplies_the_providers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    phi_home = tmp_path / "phi"
    phi_home.mkdir()
    (phi_home / "keys.json").write_text('{"gemini": "pw-stored-gemini-7f3a9c2e1b55"}')
    monkeypatch.setenv("PHI_HOME", str(phi_home))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "leak.txt").write_text("the key is pw-stored-gemini-7f3a9c2e1b55 ok\n")
    shown = text(await run(BashTool(workspace), command="cat leak.txt"))
    assert "pw-stored-gemini-7f3a9c2e1b55" not in shown and "[REDACTED]" in shown
