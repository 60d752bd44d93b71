"""Hostile cases of the sandbox: reading and writing this machine's files (loaded by ``sandbox.py``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

from phi_hostile_sandbox_kit import CASES, Env, Verdict, case, judged, survivors, tag  # noqa: F401

# --------------------------------------------------------------------------- files: reading

READ = """
import json, os

def probe():
    out = {}
    for path in @PATHS@:
        try:
            if os.path.isdir(path):
                out[path] = 'listed:' + ','.join(sorted(os.listdir(path))[:5])
            else:
                with open(path, 'rb') as f:
                    out[path] = 'read:' + f.read(60).decode('latin-1')
        except OSError as exc:
            out[path] = type(exc).__name__
    return json.dumps(out)
"""


def _reader(name: str, paths: Callable[[Env], list[str]]) -> None:
    async def run(env: Env) -> Verdict:
        value = await env.probe(READ, PATHS=repr(paths(env)))
        opened = {p: v for p, v in (value or {}).items() if v.startswith(("read", "listed"))}
        return judged(env, value, not opened, f"nothing readable ({value})")

    case("files-read", name)(run)


_reader("etc-passwd-and-shadow", lambda e: ["/etc/passwd", "/etc/shadow", "/etc/hostname"])
_reader("secret-file-by-absolute-path", lambda e: [str(e.secret_file), str(e.dir)])
_reader("home-and-root", lambda e: ["/root", "/home", str(Path.home()), "/root/.ssh"])
_reader("project-tree", lambda e: ["/work", os.getcwd(), str(Path(__file__).resolve())])
_reader("phi-user-dir", lambda e: [str(Path.home() / ".phi"), os.environ.get("PHI_HOME", "/x")])
_reader("through-proc-root", lambda e: ["/proc/1/root/etc/passwd", "/proc/1/cwd"])
_reader("dot-dot-walk", lambda e: ["/tmp/../../../../etc/passwd", "/../../etc/shadow"])
_reader("devices", lambda e: ["/dev/sda", "/dev/vda", "/dev/mem", "/dev/kmsg", "/dev/shm"])
_reader("sysfs-and-var", lambda e: ["/sys/class/net", "/var/log", "/run", "/mnt"])


@case("files-read", "symlink-out-of-tmp")
async def _symlink(env: Env) -> Verdict:
    code = """
import json, os

def probe():
    out = []
    for k, target in enumerate(['/etc/passwd', '@SECRET_FILE@', '/proc/1/root/etc/passwd']):
        link = f'/tmp/link{k}'
        try:
            os.symlink(target, link)
            out.append(open(link).read(60))
        except OSError as exc:
            out.append(type(exc).__name__)
    return json.dumps(out)
"""
    value = await env.probe(code)
    return judged(env, value, value is not None, "links point at nothing outside")


@case("files-read", "inherited-descriptors")
async def _fds(env: Env) -> Verdict:
    code = """
import json, os

def probe():
    out = {}
    for fd in os.listdir('/proc/self/fd'):
        try:
            out[fd] = os.readlink(f'/proc/self/fd/{fd}')
        except OSError:
            pass
    return json.dumps(out)
"""
    value = await env.probe(code)
    if not isinstance(value, dict):
        return "leaked", f"no answer from the probe: {value!r}"
    outside = [v for v in value.values() if v.startswith(("/work", "/root", "/home", str(env.dir)))]
    return judged(env, value, not outside, f"only pipes and /dev/null open: {sorted(value)}")


@case("files-read", "host-python-packages")
async def _packages(env: Env) -> Verdict:
    code = """
import json, sys

def probe():
    found = []
    for name in ('phi_core', 'openai', 'pydantic', 'anthropic'):
        try:
            __import__(name)
            found.append(name)
        except ImportError:
            pass
    return json.dumps(found)
"""
    value = await env.probe(code)
    return judged(env, value, value == [], "no installed package importable")


# --------------------------------------------------------------------------- files: writing

WRITE = """
import json

def probe():
    out = {}
    for path in @PATHS@:
        try:
            with open(path, 'w') as f:
                f.write('written by a model')
            out[path] = 'written'
        except OSError as exc:
            out[path] = type(exc).__name__
    return json.dumps(out)
"""


def _snapshot(targets: list[str]) -> dict[str, bytes | None]:
    """What each target holds on this machine (None: it does not exist)."""
    out: dict[str, bytes | None] = {}
    for path in targets:
        try:
            out[path] = Path(path).read_bytes()
        except FileNotFoundError:
            out[path] = None
        except OSError as exc:
            out[path] = repr(exc).encode()
    return out


def _writer(name: str, paths: Callable[[Env], list[str]]) -> None:
    async def run(env: Env) -> Verdict:
        targets = paths(env)
        before = _snapshot(targets)
        value = await env.probe(WRITE, PATHS=repr(targets))
        after = _snapshot(targets)
        changed = [p for p in targets if before[p] != after[p]]
        if changed:
            return "leaked", f"changed outside: {changed}"
        wrote = [p for p, v in (value or {}).items() if v == "written"]
        if wrote:
            return "contained", f"wrote {wrote} in its private tmpfs only"
        return "blocked", f"every write refused ({value})"

    case("files-write", name)(run)


_writer("host-dir-open-to-all", lambda e: [str(e.dir / "dropped.txt"), str(e.secret_file)])
_writer("host-tmp", lambda e: [f"/tmp/phi-hostile-{uuid.uuid4().hex}"])
_writer("system-dirs", lambda e: ["/usr/phi-hostile", "/etc/phi-hostile", "/phi-hostile"])
_writer("python-stdlib", lambda e: ["/opt/python/lib/python3.11/phi_hostile.py"])
_writer("dev-and-proc", lambda e: ["/dev/phi-hostile", "/proc/sys/kernel/hostname"])
_writer("home", lambda e: [str(Path.home() / f".phi-hostile-{uuid.uuid4().hex}")])


@case("files-write", "remount-root-read-write")
async def _remount(env: Env) -> Verdict:
    code = """
import ctypes, json

def probe():
    libc = ctypes.CDLL(None, use_errno=True)
    MS_REMOUNT, MS_BIND = 32, 4096
    results = [libc.mount(None, p, None, MS_REMOUNT | MS_BIND, None) for p in (b'/', b'/usr')]
    try:
        open('/usr/phi-hostile', 'w').write('x')
        results.append('written')
    except OSError as exc:
        results.append(type(exc).__name__)
    return json.dumps(results)
"""
    value = await env.probe(code)
    ok = (
        value is not None
        and "written" not in value
        and _snapshot(["/usr/phi-hostile"]) == {"/usr/phi-hostile": None}
    )
    return judged(env, value, ok, f"remount refused: {value}")


@case("files-write", "hard-link-to-worker")
async def _link(env: Env) -> Verdict:
    code = """
import json, os

def probe():
    try:
        os.link('/opt/phi/worker.py', '/tmp/w.py')
        open('/tmp/w.py', 'a').write('# poisoned')
        return json.dumps('linked')
    except OSError as exc:
        return json.dumps(type(exc).__name__)
"""
    from phi_core.parallel._behaviour import WORKER

    before = WORKER.read_bytes()
    value = await env.probe(code)
    return judged(env, value, WORKER.read_bytes() == before, f"worker unchanged ({value})")
