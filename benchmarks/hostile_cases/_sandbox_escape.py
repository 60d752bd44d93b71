"""Hostile cases of the sandbox: network, processes, ``/proc`` and the environment, privileges
(loaded by ``sandbox.py``)."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable
from typing import Any

from phi_hostile_sandbox_kit import CASES, Env, Verdict, case, judged, survivors, tag  # noqa: F401

# --------------------------------------------------------------------------- network

CONNECT = """
import json, socket

def probe():
    out = {}
    for name, family, kind, address in @TARGETS@:
        try:
            s = socket.socket(family, kind)
            s.settimeout(2)
            if kind == socket.SOCK_DGRAM:
                s.sendto(b'hostile', address)
                out[name] = 'sent'
            else:
                s.connect(address)
                s.sendall(b'hostile')
                out[name] = 'connected'
        except OSError as exc:
            out[name] = type(exc).__name__
    return json.dumps(out)
"""


def _host_address() -> str | None:
    """This machine's own non-loopback address, if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            address = str(s.getsockname()[0])
            return None if address.startswith("127.") else address
    except OSError:
        return None


def _network(
    name: str, targets: Callable[[int, int, str, str | None], list[tuple[Any, ...]]]
) -> None:
    async def run(env: Env) -> Verdict:
        hits: list[bytes] = []

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            hits.append(await reader.read(100))
            writer.close()

        server = await asyncio.start_server(accept, None, 0)  # every address, IPv4 and IPv6
        port = server.sockets[0].getsockname()[1]
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("0.0.0.0", 0))
        udp.setblocking(False)
        abstract = f"\0phi-hostile-{uuid.uuid4().hex}"
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(abstract)
        unix.listen()
        unix.setblocking(False)
        try:
            async with server:
                chosen = targets(port, udp.getsockname()[1], abstract, _host_address())
                code = CONNECT.replace(
                    "@TARGETS@", "[" + ", ".join(_target(t) for t in chosen) + "]"
                )
                value = await env.probe(code)
            for sock in (udp, unix):
                try:
                    hits.append(sock.recv(100) if sock is udp else sock.accept()[0].recv(100))
                except (BlockingIOError, OSError):
                    pass
        finally:
            udp.close()
            unix.close()
        if hits:
            return "leaked", f"{len(hits)} connection(s) or datagram(s) reached this machine"
        return judged(env, value, True, f"nothing reached this machine ({value})")

    case("network", name)(run)


def _target(t: tuple[Any, ...]) -> str:
    name, family, kind, address = t
    return f"({name!r}, socket.{family}, socket.{kind}, {address!r})"


_network("tcp-127.0.0.1", lambda p, u, a, h: [("tcp", "AF_INET", "SOCK_STREAM", ("127.0.0.1", p))])
_network(
    "tcp-localhost-name", lambda p, u, a, h: [("tcp", "AF_INET", "SOCK_STREAM", ("localhost", p))]
)
_network("tcp-ipv6-loopback", lambda p, u, a, h: [("tcp6", "AF_INET6", "SOCK_STREAM", ("::1", p))])
_network("udp-127.0.0.1", lambda p, u, a, h: [("udp", "AF_INET", "SOCK_DGRAM", ("127.0.0.1", u))])
_network("unix-abstract", lambda p, u, a, h: [("unix", "AF_UNIX", "SOCK_STREAM", a)])
_network(
    "host-own-address",
    lambda p, u, a, h: [
        ("tcp", "AF_INET", "SOCK_STREAM", (h or "127.0.0.1", p)),
        ("udp", "AF_INET", "SOCK_DGRAM", (h or "127.0.0.1", u)),
    ],
)
_network(
    "gateway-and-public",
    lambda p, u, a, h: [
        ("dns", "AF_INET", "SOCK_DGRAM", ("8.8.8.8", 53)),
        ("https", "AF_INET", "SOCK_STREAM", ("1.1.1.1", 443)),
        ("docker-host", "AF_INET", "SOCK_STREAM", ("172.17.0.1", p)),
    ],
)


@case("network", "raw-and-packet-sockets")
async def _raw(env: Env) -> Verdict:
    code = """
import json, socket

def probe():
    out = []
    for family, kind, proto in [(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                                (socket.AF_PACKET, socket.SOCK_RAW, 3)]:
        try:
            socket.socket(family, kind, proto)
            out.append('opened')
        except OSError as exc:
            out.append(type(exc).__name__)
    return json.dumps(out)
"""
    value = await env.probe(code)
    return judged(env, value, value is not None and "opened" not in value, f"refused: {value}")


@case("network", "interfaces-and-name-lookup")
async def _interfaces(env: Env) -> Verdict:
    code = """
import json, socket

def probe():
    names = [name for _, name in socket.if_nameindex()]
    try:
        socket.getaddrinfo('pypi.org', 443)
        looked_up = True
    except OSError:
        looked_up = False
    return json.dumps({'interfaces': names, 'dns': looked_up})
"""
    value = await env.probe(code) or {}
    ok = value.get("interfaces") in (["lo"], []) and value.get("dns") is False
    return judged(env, value, ok, f"only its own loopback, no name lookup ({value})")


# --------------------------------------------------------------------------- processes


def _spawner(name: str, code: str) -> None:
    async def run(env: Env) -> Verdict:
        marker = tag()
        value = await env.probe(code, MARK=marker)
        alive = survivors(marker)
        if alive:
            return "leaked", f"{len(alive)} process(es) outlived the sandbox"
        return "contained", f"ran ({value}); nothing survived the sandbox"

    case("processes", name)(run)


_spawner(
    "fork-bomb",
    """
import json, os

def probe():
    made = 0
    while made < 2000:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.execv('/usr/bin/sleep', ['sleep', '@MARK@'])
        made += 1
    return json.dumps(made)
""",
)
_spawner(
    "popen-new-session",
    """
import json, subprocess

def probe():
    p = subprocess.Popen(['sleep', '@MARK@'], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.dumps(p.pid)
""",
)
_spawner(
    "double-fork-daemon",
    """
import json, os

def probe():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv('/usr/bin/sleep', ['sleep', '@MARK@'])
        os._exit(0)
    os.wait()
    return json.dumps('daemonised')
""",
)
_spawner(
    "ignores-signals",
    """
import json, os, signal, subprocess

def probe():
    def stubborn():
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        os.setsid()
    subprocess.Popen(['sleep', '@MARK@'], preexec_fn=stubborn, stdin=subprocess.DEVNULL)
    return json.dumps('stubborn')
""",
)
_spawner(
    "spawn-from-atexit-and-handlers",
    """
import atexit, json, signal, subprocess

def probe():
    spawn = lambda *a: subprocess.Popen(['sleep', '@MARK@'], start_new_session=True)
    atexit.register(spawn)
    signal.signal(signal.SIGTERM, spawn)
    signal.signal(signal.SIGALRM, spawn)
    return json.dumps('armed')
""",
)
_spawner(
    "thread-bomb",
    """
import json, threading, time

def probe():
    started = 0
    try:
        while started < 5000:
            threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
            started += 1
    except RuntimeError:
        pass
    return json.dumps(started)
""",
)


@case("processes", "kill-everything-visible")
async def _kill_all(env: Env) -> Verdict:
    visible = await env.probe(
        "import json, os\ndef probe():\n    return json.dumps(sum(p.isdigit() for p in os.listdir('/proc')))"
    )
    if not isinstance(visible, int) or visible > 5:  # a broken sandbox: do not fire kill(-1)
        return "leaked", f"not run: the sandbox sees {visible} processes, not just its own"
    marker = tag()
    sentinel = await asyncio.create_subprocess_exec("sleep", marker)  # a process of ours, outside
    code = """
import json, os, signal

def probe():
    visible = [int(p) for p in os.listdir('/proc') if p.isdigit()]
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    return json.dumps(visible)
"""
    alive = False
    try:
        value = await env.probe(code)
    finally:
        alive = bool(survivors(marker))  # finds the sentinel alive, and ends it, or finds nothing
        await sentinel.wait()
    if not alive:
        return "leaked", "a process outside the sandbox was killed"
    return "contained", f"kill(-1) reached only its own sandbox ({value})"


@case("processes", "ptrace-and-kill-the-supervisor")
async def _ptrace(env: Env) -> Verdict:
    code = """
import ctypes, json, os, signal

def probe():
    libc = ctypes.CDLL(None, use_errno=True)
    attached = libc.ptrace(16, 1, None, None)  # PTRACE_ATTACH to PID 1, the supervisor
    os.kill(1, signal.SIGKILL)  # PID 1 of a namespace ignores it from inside
    return json.dumps({'ptrace': attached})
"""
    value = await env.probe(code)
    ok = isinstance(value, dict) and value.get("ptrace") == -1
    return judged(env, value, ok, f"ptrace refused, supervisor alive and answering ({value})")


# --------------------------------------------------------------------------- /proc and environment

SCAN = """
import json, os

def probe():
    texts, pids = [repr(dict(os.environ))], []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        pids.append(entry)
        for part in ('environ', 'cmdline', 'mem', 'maps'):
            try:
                with open(f'/proc/{entry}/{part}', 'rb') as f:
                    texts.append(f.read(1 << 16).decode('latin-1'))
            except OSError:
                pass
    joined = ' '.join(texts)
    return json.dumps({'key': '@KEY@' in joined, 'host': 'hostile.py' in joined or 'pytest' in joined,
                       'pids': len(pids), 'ppid': os.getppid(), 'env': sorted(os.environ)})
"""


@case("proc-environ", "every-proc-environ-cmdline-mem")
async def _scan(env: Env) -> Verdict:
    value = await env.probe(SCAN) or {}
    ok = value.get("key") is False and value.get("host") is False and value.get("pids", 99) <= 3
    return judged(env, value, ok, f"only its own sandbox visible ({value})")


@case("proc-environ", "own-environment")
async def _own_env(env: Env) -> Verdict:
    code = """
import json, os

def probe():
    return json.dumps({k: v for k, v in os.environ.items()})
"""
    value = await env.probe(code) or {}
    secretish = [k for k in value if any(w in k.upper() for w in ("KEY", "TOKEN", "SECRET"))]
    return judged(env, value, not secretish, f"environment is {sorted(value)}")


@case("proc-environ", "parent-by-ppid")
async def _ppid(env: Env) -> Verdict:
    code = """
import json, os

def probe():
    out = {'ppid': os.getppid()}
    for pid in {os.getppid(), 1, 0}:
        try:
            out[pid] = open(f'/proc/{pid}/environ', 'rb').read(200).decode('latin-1')
        except OSError as exc:
            out[pid] = type(exc).__name__
    return json.dumps(out)
"""
    value = await env.probe(code)
    return judged(env, value, value is not None, f"no parent in sight ({value})")


@case("proc-environ", "supervisor-fds-and-memory")
async def _supervisor(env: Env) -> Verdict:
    code = """
import json

def probe():
    out = {}
    for path in ('/proc/1/fd/0', '/proc/1/fd/1', '/proc/1/mem', '/proc/1/environ', '/proc/1/maps'):
        try:
            with open(path, 'rb') as f:
                out[path] = 'opened'
        except OSError as exc:
            out[path] = type(exc).__name__
    return json.dumps(out)
"""
    value = await env.probe(code) or {}
    opened = [p for p, v in value.items() if v == "opened"]
    return judged(env, value, not opened and bool(value), f"all refused ({value})")


@case("proc-environ", "keys-in-kernel-keyrings")
async def _keyrings(env: Env) -> Verdict:
    code = """
import json

def probe():
    try:
        return json.dumps(open('/proc/keys').read()[:300])
    except OSError as exc:
        return json.dumps(type(exc).__name__)
"""
    value = await env.probe(code)
    return judged(env, value, value is not None, f"nothing of ours ({value})")


# --------------------------------------------------------------------------- privileges


@case("privileges", "uid-and-capabilities")
async def _caps(env: Env) -> Verdict:
    code = """
import json, os

def probe():
    status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)
    return json.dumps({'uid': os.getuid(), 'euid': os.geteuid(),
                       'eff': int(status['CapEff'], 16), 'prm': int(status['CapPrm'], 16),
                       'nnp': status['NoNewPrivs'].strip()})
"""
    value = await env.probe(code) or {}
    ok = value.get("uid") == 65534 and value.get("eff") == 0 and value.get("prm") == 0
    return judged(
        env, value, ok and value.get("nnp") == "1", f"uid 65534, no capabilities ({value})"
    )


SYSCALLS = {
    "new-user-namespace": "libc.unshare(0x10000000)",
    "mount-tmpfs": "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)",
    "chroot": "libc.chroot(b'/tmp')",
    "setuid-0": "libc.setuid(0)",
    "reboot": "libc.reboot(0x4321FEDC)",
    "sethostname": "libc.sethostname(b'owned', 5)",
    "kernel-module": "libc.syscall(313, 0, b'', 0)",  # finit_module
}


def _syscall(name: str, call: str) -> None:
    async def run(env: Env) -> Verdict:
        code = f"""
import ctypes, json

def probe():
    libc = ctypes.CDLL(None, use_errno=True)
    return json.dumps([{call}, ctypes.get_errno()])
"""
        value = await env.probe(code)
        ok = isinstance(value, list) and value[0] == -1
        return judged(env, value, ok, f"{call.split('(')[0]} refused (errno {value})")

    case("privileges", name)(run)


for _name, _call in SYSCALLS.items():
    _syscall(_name, _call)


@case("privileges", "setuid-binaries")
async def _setuid(env: Env) -> Verdict:
    code = """
import json, os, subprocess

def probe():
    out = {}
    for tool in ('/usr/bin/su', '/usr/bin/passwd', '/usr/bin/mount', '/usr/bin/newgrp'):
        if os.path.exists(tool):
            try:
                r = subprocess.run([tool, '--help'], capture_output=True, timeout=3)
                out[tool] = os.stat(tool).st_mode & 0o4000 and 'ran as uid %d' % os.getuid()
            except Exception as exc:
                out[tool] = type(exc).__name__
    out['uid'] = subprocess.run(['/usr/bin/id', '-u'], capture_output=True, text=True).stdout
    return json.dumps(out)
"""
    value = await env.probe(code) or {}
    return judged(env, value, value.get("uid", "").strip() == "65534", f"still uid 65534 ({value})")
