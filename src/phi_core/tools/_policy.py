"""The command policy of the ``bash`` tool: what a command line would do, read from its parse.

:meth:`CommandPolicy.check` tokenises the command line (:mod:`._shell`) and looks at every simple
command in it, including those inside ``$(…)``, backticks, ``sh -c``/``bash -c`` strings,
``eval``, ``xargs``, ``find -exec``, wrappers (``env``, ``sudo``, ``timeout``, ``nice``, …),
here-documents fed to a shell, and function bodies. Each path a command deletes, moves, writes or
changes is resolved against the workspace (and the directories ``cd`` moved to, and symbolic links
on disk) and must stay inside it. The verdict is one of:

* ``deny`` — destructive: deleting or writing outside the workspace, ``--no-preserve-root``,
  writing to devices, making or wiping file systems, powering the machine off, signalling every
  process, a recursive function (fork bomb), reading ``/proc/*/environ``;
* ``approve`` — the policy cannot tell with confidence, or the command reaches outside the
  workspace without destroying anything: a command name or a deleted path computed at run time
  (``$(echo rm) -rf /``), a script piped into a shell, inline interpreter code that starts
  processes or reads other processes, reads of paths outside the workspace and the system
  directories, ``sudo``, ``cd`` out of the workspace, background jobs started in a loop, syntax
  the tokeniser does not follow (``case``);
* ``allow`` — everything else. Text inside quotes that is only data (``grep -r "rm -rf" .``,
  ``echo "dd if="``) is never mistaken for a command.

Every verdict carries the reasons, which the tool shows to the approver and to the model.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ._commands import handle
from ._patterns import (
    GLOB,
    MAX_ALTERNATIVES,
    escape,
    expand_braces,
    has_glob,
    shown,
    unescape,
    word_of,
)
from ._shell import Command, Part, Script, Word, parse

__all__ = ["CommandPolicy", "PolicyVerdict"]

Action = Literal["allow", "approve", "deny"]

DEFAULT_READ_OUTSIDE = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/tmp",
    "/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/stdin", "/dev/stdout",
    "/dev/stderr", "/dev/tty", "/dev/fd",
)  # fmt: skip
DEFAULT_WRITE_OUTSIDE = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd")

_MAX_NESTING = 8

_ALWAYS_DENY = {
    "mkfs", "mke2fs", "mkswap", "mkdosfs", "mkntfs", "mkfs.ext4", "wipefs", "fdisk", "sfdisk",
    "cfdisk", "gdisk", "sgdisk", "parted", "blkdiscard", "hdparm", "badblocks", "dmsetup",
    "cryptsetup", "mdadm", "debugfs", "tune2fs", "shutdown", "reboot", "halt", "poweroff",
    "kexec", "telinit", "pvremove", "vgremove", "lvremove", "zpool", "killall5",
}  # fmt: skip
_NEEDS_APPROVAL = {
    "crontab", "at", "batch", "useradd", "userdel", "usermod", "groupadd", "groupdel", "passwd",
    "chpasswd", "visudo", "chroot", "nsenter", "unshare", "insmod", "rmmod", "modprobe",
    "sysctl", "iptables", "ip6tables", "nft", "ufw", "setcap", "setenforce", "mount", "umount",
    "swapon", "swapoff", "losetup", "fsck", "service", "systemctl", "alias", "enable", "hash",
    "coproc", "pkill", "killall", "skill", "slay", "init", "launchctl", "diskutil", "gdb",
    "lldb", "gcore", "pstack", "eu-stack", "criu", "capsh",
}  # fmt: skip
_PRINT_ONLY = {"echo", "printf", "true", "false", ":", "test", "[", "[[", "]]", "type",
               "which", "help", "let", "read", "return", "exit", "shift", "set", "unset",
               "shopt", "export", "declare", "typeset", "local", "readonly", "wait", "jobs",
               "trap", "umask", "for", "getopts", "sleep", "seq", "expr", "basename",
               "dirname", "date", "whoami", "id", "uname", "hostname", "printenv", "env"}  # fmt: skip
_SECRET_PROC = re.compile(r"/proc/[^/]+/(environ|mem|maps|smaps|auxv|stack|syscall|cwd|root|fd)")


@dataclass(frozen=True)
class PolicyVerdict:
    """What the policy decided about a command line, and why."""

    action: Action
    reasons: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)

    @property
    def allowed(self) -> bool:
        return self.action == "allow"


class CommandPolicy(BaseModel):
    """Settings of the command policy, and :meth:`check`.

    ``read_outside``: paths outside the workspace commands may read without approval (the system
    directories, ``/tmp``, the harmless devices). ``write_outside``: paths outside the workspace
    commands may write (``/dev/null`` and the standard streams). ``deny_commands`` and
    ``approve_commands`` add command names to the built-in lists; ``allow_commands`` takes names
    off the approval list (``sudo`` in a throwaway container, say). ``deny_patterns`` are
    regular expressions refused anywhere in the raw command line (phi-core's ``deny_patterns``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    read_outside: tuple[str, ...] = DEFAULT_READ_OUTSIDE
    write_outside: tuple[str, ...] = DEFAULT_WRITE_OUTSIDE
    deny_commands: tuple[str, ...] = ()
    approve_commands: tuple[str, ...] = ()
    allow_commands: tuple[str, ...] = ()
    deny_patterns: tuple[str, ...] = Field(default=())

    def check(self, command: str, root: str) -> PolicyVerdict:
        """The verdict for ``command`` run with its working directory at ``root`` (a real path)."""
        for pattern in self.deny_patterns:
            if re.search(pattern, command):
                return PolicyVerdict("deny", (f"the command matches the deny pattern {pattern!r}",))
        analysis = _Analysis(self, root)
        analysis.script(parse(command), depth=0)
        return analysis.verdict()


@dataclass
class _Located:
    real: str
    glob_last: str | None  # the last component's glob pattern, when it is one


@dataclass
class _Analysis:
    policy: CommandPolicy
    root: str
    cwds: list[str] = field(default_factory=list)
    known: dict[str, list[str] | None] = field(default_factory=dict)
    deny: list[str] = field(default_factory=list)
    approve: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cwds = [self.root]
        self.known = {"HOME": [escape(self.root)], "PWD": [escape(self.root)]}

    # ------------------------------------------------------------------ verdicts

    def verdict(self) -> PolicyVerdict:
        if self.deny:
            return PolicyVerdict("deny", tuple(dict.fromkeys(self.deny)))
        if self.approve:
            return PolicyVerdict("approve", tuple(dict.fromkeys(self.approve)))
        return PolicyVerdict("allow")

    def refuse(self, reason: str) -> None:
        self.deny.append(reason)

    def ask(self, reason: str) -> None:
        self.approve.append(reason)

    # ------------------------------------------------------------------ scripts and words

    def script(self, script: Script, depth: int) -> None:
        if depth > _MAX_NESTING:
            self.ask("the command nests shells too deeply to be analysed")
            return
        for problem in script.problems:
            self.ask(f"the command could not be fully analysed ({problem})")
        for name, words in script.loop_values.items():
            values: list[str] = []
            for word in words:
                got = self.values(word)
                if got is None:
                    values = []
                    self.known[name] = None
                    break
                values.extend(got)
            else:
                self.known[name] = values[:MAX_ALTERNATIVES] or None
        for command in script.commands:
            self.command(command, depth)

    def nested(self, words: Iterable[Word], depth: int) -> None:
        """Analyse the command substitutions inside ``words``; flag sensitive references."""
        for word in words:
            for sub in word.scripts():
                self.script(sub, depth + 1)
            self.sensitive(word)

    def sensitive(self, word: Word) -> None:
        text = "".join(p.text if p.kind == "lit" else "\x00" for p in word.parts)
        if any(p.kind == "var" and p.text in ("PPID", "{PPID}") for p in word.parts):
            self.ask("the command refers to the parent process ($PPID)")
        if word.literal == "--no-preserve-root":
            self.refuse("`--no-preserve-root` lets rm delete /")
        if "/proc" in text:
            if _SECRET_PROC.search(text.replace("\x00", "x")) or "environ" in text:
                self.refuse(f"the command reads process internals ({shown(word)})")
            else:
                self.ask(f"the command reads {shown(word)} in /proc")

    def values(self, word: Word) -> list[str] | None:
        """Possible glob patterns of ``word`` (quoted specials escaped), None if unknowable."""
        results = [""]
        for part in word.parts:
            options: list[str] | None
            if part.kind == "lit":
                options = [escape(part.text) if part.quoted else part.text]
            elif part.kind == "tilde":
                options = [escape(self.root)] if part.text == "" else None
            elif part.kind == "var":
                options = self.known.get(part.text.strip("{}"))
            else:
                options = None
            if options is None:
                return None
            results = [r + o for r in results for o in options][:MAX_ALTERNATIVES]
        return results

    def locate(self, pattern: str, cwd: str) -> list[_Located]:
        out: list[_Located] = []
        for alternative in expand_braces(pattern):
            components = alternative.split("/")
            parts: list[str] = []
            glob_last: str | None = None
            for i, component in enumerate(components):
                plain = unescape(component)
                if has_glob(component):
                    if plain.startswith(".") and fnmatch.fnmatchcase("..", plain):
                        parts.append("..")
                    else:
                        parts.append(GLOB)
                        if i == len(components) - 1:
                            glob_last = plain
                else:
                    parts.append(plain)
            joined = "/".join(parts)
            path = joined if joined.startswith("/") else posixpath.join(cwd, joined)
            lexical = posixpath.normpath(path)
            if lexical.startswith("//"):
                lexical = "/" + lexical.lstrip("/")
            special = lexical.split("/")[1:2] in (["dev"], ["proc"], ["sys"])
            real = lexical if special else os.path.realpath(lexical)
            out.append(_Located(real, glob_last))
        return out

    def inside(self, real: str) -> bool:
        return real == self.root or real.startswith(self.root.rstrip("/") + "/")

    @staticmethod
    def under(real: str, prefixes: Sequence[str]) -> bool:
        return any(real == p or real.startswith(p.rstrip("/") + "/") for p in prefixes)

    # ------------------------------------------------------------------ path checks

    def check_write(self, word: Word, verb: str, *, recursive: bool = False) -> None:
        values = self.values(word)
        if values is None:
            self.ask(f"it {verb} a path computed when the command runs ({shown(word)})")
            return
        for value in values:
            for cwd in self.cwds:
                for located in self.locate(value, cwd):
                    self._write_target(located, verb, recursive, word)

    def _write_target(self, located: _Located, verb: str, recursive: bool, word: Word) -> None:
        real = located.real.replace(GLOB, "*")
        if self.inside(located.real):
            whole = located.real == self.root or (
                located.glob_last in ("*", ".*", "*.*")
                and posixpath.dirname(located.real) == self.root
            )
            if whole and recursive:
                self.ask(f"it {verb} the whole workspace ({shown(word)})")
            return
        if self.under(located.real, self.policy.write_outside):
            return
        if located.real.startswith("/dev/"):
            self.refuse(f"it {verb} the device {real}")
        elif located.real == "/":
            self.refuse(f"it {verb} / (the whole file system)")
        else:
            self.refuse(f"it {verb} {real}, outside the workspace")

    def check_read(self, word: Word, verb: str = "reads") -> None:
        values = self.values(word)
        if values is None:
            return
        for value in values:
            for cwd in self.cwds:
                for located in self.locate(value, cwd):
                    if self.inside(located.real) or self.under(
                        located.real, self.policy.read_outside
                    ):
                        continue
                    real = located.real.replace(GLOB, "*")
                    self.ask(f"it {verb} {real}, outside the workspace")

    def check_argument(self, word: Word) -> None:
        """Any argument of a command that looks like a path outside the workspace."""
        literal = word.literal
        if literal is None:
            values = self.values(word)
            if not values:
                return
            literal = values[0]
        if literal.startswith("-"):
            if "=" not in literal:
                return
            candidate = literal.split("=", 1)[1]
        else:
            candidate = literal
        if candidate.startswith(("/", "~", "../")) or candidate in ("..", "~"):
            self.check_read(word_of(candidate, word) if candidate != literal else word)

    # ------------------------------------------------------------------ commands

    def command(self, command: Command, depth: int) -> None:
        self.nested(command.assignments, depth)
        for redirect in command.redirects:
            if redirect.target is not None:
                self.nested([redirect.target], depth)
            if redirect.heredoc is not None:
                self.nested([redirect.heredoc], depth)
        self.redirects(command)
        self.assignments(command.assignments)
        if not command.words:
            return
        self.nested(command.words, depth)
        self.simple(command.words, command, depth)

    def assignments(self, words: Sequence[Word]) -> None:
        for word in words:
            first = word.parts[0]
            name, _, rest = first.text.partition("=")
            name = name.removesuffix("+")
            if name in ("PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "BASH_ENV", "ENV", "SHELLOPTS",
                        "BASHOPTS", "PROMPT_COMMAND", "GLOBIGNORE"):  # fmt: skip
                self.ask(f"it sets {name}, which changes what commands run")
            value = Word([Part("lit", rest, first.quoted), *word.parts[1:]])
            self.known[name] = self.values(value)

    def redirects(self, command: Command) -> None:
        for redirect in command.redirects:
            target = redirect.target
            if target is None or redirect.op in ("<<", "<<-", "<<<"):
                continue
            literal = target.literal
            if (
                redirect.op in (">&", "<&")
                and literal is not None
                and (literal.isdigit() or literal == "-")
            ):
                continue
            if redirect.op in ("<", "<&"):
                self.check_read(target)
            else:
                self.check_write(target, "writes to")

    def simple(self, words: Sequence[Word], command: Command, depth: int) -> None:
        head = words[0]
        values = self.values(head)
        if values is None or any(has_glob(v) for v in values):
            self.ask(f"the command name is computed when the command runs ({shown(head)})")
            return
        for value in values:
            name = unescape(value)
            if "/" in name:
                self.check_read(head, "runs")
            self.dispatch(posixpath.basename(name), list(words[1:]), command, depth)

    def dispatch(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        policy = self.policy
        if name in command.functions:
            self.refuse(f"the function {name!r} calls itself (a fork bomb)")
            return
        if command.in_loop and command.background:
            self.ask(f"it starts {name!r} in the background inside a loop")
        if name in policy.deny_commands or name in _ALWAYS_DENY or name.startswith("mkfs."):
            self.refuse(f"{name!r} is a destructive system command")
            return
        approval = (_NEEDS_APPROVAL | set(policy.approve_commands)) - set(policy.allow_commands)
        if name in approval:
            self.ask(f"{name!r} changes the system or other processes")
        if not handle(self, name, args, command, depth) and name not in _PRINT_ONLY:
            for arg in args:
                self.check_argument(arg)
