"""Model-written code in the sandbox cannot see or change this machine: files, network, other
processes' ``/proc`` (the API key in the parent's environment), privileges. Each test runs the
attack in both sandboxes (bubblewrap and the ``unshare`` fallback)."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from pathlib import Path

import pytest

from phi_core.parallel import code_agreement
from phi_core.sandbox import Sandbox

from .sandbox_attacks import BACKENDS, exists, probe


@pytest.fixture(params=BACKENDS)
def box(request: pytest.FixtureRequest) -> Sandbox:
    return Sandbox(backend=request.param)


READ_ATTEMPTS = """
import os

def probe():
    seen = {}
    for path in PATHS:
        try:
            if os.path.isdir(path):
                seen[path] = 'listed ' + ','.join(sorted(os.listdir(path))[:3])
            else:
                with open(path, 'rb') as f:
                    seen[path] = 'read ' + f.read(40).decode('latin-1')
        except OSError as exc:
            seen[path] = type(exc).__name__
    return seen
"""


async def test_files_of_this_machine_cannot_be_read(box: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-FILE-CONTENT")
    paths = [
        str(secret), "/etc/passwd", "/etc/shadow", "/etc/hostname", "/root", "/home", "/work",
        os.getcwd(), str(Path.home()), "/var", "/run",
    ]  # fmt: skip
    seen = await probe(box, READ_ATTEMPTS.replace("PATHS", repr(paths)))
    leaked = {p: v for p, v in seen.items() if v.startswith(("read", "listed"))}
    assert not leaked, leaked
    assert all(v in ("FileNotFoundError", "PermissionError") for v in seen.values()), seen


async def test_files_cannot_be_written_outside_and_the_private_tmp_vanishes(
    box: Sandbox, tmp_path: Path
) -> None:
    name = f"phi-escape-{uuid.uuid4().hex}"
    targets = [f"/tmp/{name}", str(tmp_path / name), f"/usr/{name}", f"/{name}", f"/opt/{name}"]
    code = f"""
def probe():
    out = {{}}
    for path in {targets!r}:
        try:
            with open(path, 'w') as f:
                f.write('written by the model')
            out[path] = 'written'
        except OSError as exc:
            out[path] = type(exc).__name__
    return out
"""
    out = await probe(box, code)
    assert out[f"/tmp/{name}"] == "written"  # its own private /tmp ...
    assert not exists(f"/tmp/{name}")  # ... which is not this machine's
    assert not exists(tmp_path / name)
    assert [out[t] for t in targets[1:]] != ["written"] * 4, out
    assert all(out[t] in ("FileNotFoundError", "PermissionError", "OSError") for t in targets[1:])


async def test_no_network_not_even_loopback_to_this_machine(box: Sandbox) -> None:
    connections = 0

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    abstract = f"\0phi-test-{uuid.uuid4().hex}"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(abstract)
    unix.listen()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    udp_port = udp.getsockname()[1]
    code = f"""
import socket

def probe():
    out = {{}}
    for name, family, address in [
        ('tcp4', socket.AF_INET, ('127.0.0.1', {port})),
        ('tcp-localhost', socket.AF_INET, ('localhost', {port})),
        ('tcp6', socket.AF_INET6, ('::1', {port})),
        ('unix-abstract', socket.AF_UNIX, {abstract!r}),
        ('public', socket.AF_INET, ('1.1.1.1', 53)),
    ]:
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect(address)
            out[name] = 'connected'
        except OSError as exc:
            out[name] = type(exc).__name__
    try:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(b'x', ('127.0.0.1', {udp_port}))  # its own loopback, if any: not ours
    except OSError:
        pass
    return out
"""
    try:
        async with server:
            out = await probe(box, code)
        with pytest.raises(BlockingIOError):
            udp.recv(10)
    finally:
        unix.close()
        udp.close()
    assert "connected" not in out.values(), out
    assert connections == 0


async def test_the_parents_environment_and_processes_are_out_of_sight(
    box: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    code = f"""
import os

def probe():
    texts, pids = [], []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        pids.append(int(entry))
        for part in ('environ', 'cmdline'):
            try:
                with open(f'/proc/{{entry}}/{{part}}', 'rb') as f:
                    texts.append(f.read().decode('latin-1'))
            except OSError:
                pass
    texts.append(repr(dict(os.environ)))
    joined = ' '.join(texts)
    return {{'key': {key!r} in joined, 'pytest': 'pytest' in joined, 'pids': len(pids),
             'ppid': os.getppid(), 'environ': sorted(os.environ)}}
"""
    out = await probe(box, code)
    assert out["key"] is False and out["pytest"] is False, out
    assert out["pids"] <= 3  # the supervisor, the worker, maybe a reaper: nothing of ours
    assert "OPENAI_API_KEY" not in out["environ"]


async def test_code_runs_without_privileges_and_cannot_regain_them(box: Sandbox) -> None:
    code = """
import ctypes, os

def probe():
    status = dict(line.split(':\\t', 1) for line in open('/proc/self/status').read().splitlines()
                  if ':\\t' in line)
    libc = ctypes.CDLL(None, use_errno=True)
    return {
        'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(),
        'cap_eff': int(status['CapEff'], 16), 'cap_prm': int(status['CapPrm'], 16),
        'no_new_privs': status['NoNewPrivs'].strip(),
        'new_userns': libc.unshare(0x10000000),  # CLONE_NEWUSER: caps in a namespace of its own
        'mount': libc.mount(b'none', b'/tmp', b'tmpfs', 0, None),
        'chroot': libc.chroot(b'/tmp'),
    }
"""
    out = await probe(box, code)
    assert out["uid"] == out["euid"] == out["gid"] == 65534, out
    assert out["cap_eff"] == 0 and out["cap_prm"] == 0
    assert out["no_new_privs"] == "1"
    assert out["new_userns"] == out["mount"] == out["chroot"] == -1


async def test_code_run_while_loading_definitions_is_sandboxed_too(
    box: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Class bodies, default arguments and decorators run when "only the definitions" load.
    monkeypatch.setenv("PHI_LOAD_SECRET", "sk-load-time-secret")
    target = tmp_path / "written-at-load"
    code = f"""
import os

def mark(fn):
    try:
        open({str(target)!r} + '.decorator', 'w').write('x')
    except OSError:
        pass
    return fn

class Loader:
    try:
        open({str(target)!r}, 'w').write(os.environ.get('PHI_LOAD_SECRET', 'none'))
    except OSError:
        pass

@mark
def probe(env=os.environ.get('PHI_LOAD_SECRET', 'absent')):
    return env
"""
    out = await probe(box, code)
    assert out == "absent", out
    assert not exists(target) and not exists(f"{target}.decorator")


async def test_exec_vote_answers_never_see_the_callers_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-do-not-leak")
    reads = (
        "```python\nimport os\n\ndef probe(x):\n"
        "    return os.environ.get('ANTHROPIC_API_KEY', 'absent') + str(x)\n\nprobe(1)\n```"
    )
    constant = "```python\ndef probe(x):\n    return 'absent' + str(x)\n\nprobe(2)\n```"
    report = await code_agreement([reads, constant])
    assert report.agree[0][1]
