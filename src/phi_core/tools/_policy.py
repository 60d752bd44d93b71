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

from ._shell import Command, Part, Script, Word, parse

__all__ = ["CommandPolicy", "PolicyVerdict"]

Action = Literal["allow", "approve", "deny"]
_RANK = {"allow": 0, "approve": 1, "deny": 2}

DEFAULT_READ_OUTSIDE = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/tmp",
    "/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/stdin", "/dev/stdout",
    "/dev/stderr", "/dev/tty", "/dev/fd",
)  # fmt: skip
DEFAULT_WRITE_OUTSIDE = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd")

_GLOB = "\uf8ff"  # stands for a glob component while a path is resolved
_MAX_ALTERNATIVES = 32
_MAX_NESTING = 8

_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "rbash"}
_INTERPRETERS = {
    "python": ("-c",), "python2": ("-c",), "python3": ("-c",), "pypy": ("-c",),
    "pypy3": ("-c",), "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "--eval", "-p",
    "--print"), "nodejs": ("-e", "--eval", "-p", "--print"), "php": ("-r",), "lua": ("-e",),
    "Rscript": ("-e",), "julia": ("-e",), "tclsh": (), "deno": ("eval",), "bun": ("-e",),
}  # fmt: skip
_CODE_MARKERS = re.compile(
    r"/proc|environ|getppid|PPID|fork|system\s*\(|subprocess|popen|spawn|exec[lv]?p?e?\s*\(|"
    r"rmtree|unlink|remove\s*\(|rmdir|ctypes|__import__|\beval\s*\(|\bkill|`|\bqx\b|child_process|"
    r"shell_exec|passthru|os\.rename|\bmkfs|/dev/[sh]d|/dev/nvme",
    re.IGNORECASE,
)
_QUOTED = re.compile(r"""(['"])((?:(?!\1).){1,4096})\1""")
_AWK_MARKERS = re.compile(r"system\s*\(|\|\s*\"|\"\s*\||\|&|>\s*\"?/|getline\s*<\s*\"?/")
_SED_EXEC = re.compile(r"(^|[;\n{}])\s*([0-9$,/!]+\s*)?[eEwWrR]\s|/[gpiImM0-9]*[ew]\b")
_WRAPPERS_WITH_VALUE = {
    "nice": {"-n", "--adjustment"},
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "stdbuf": {"-i", "-o", "-e", "--input", "--output", "--error"},
    "ionice": {"-c", "-n", "-p", "--class", "--classdata"},
    "sudo": {"-u", "-g", "-h", "-p", "-C", "-r", "-t", "-U", "--user", "--group"},
    "doas": {"-u", "-C"},
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
    "xargs": {"-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a", "--arg-file", "--max-args",
              "--max-procs", "--delimiter", "--max-lines", "--replace", "--max-chars"},
    "flock": {"-w", "--timeout", "-E", "--conflict-exit-code"},
    "setsid": set(), "nohup": set(), "time": set(), "command": set(), "builtin": set(),
    "exec": {"-a"}, "unbuffer": set(), "chrt": set(), "taskset": set(), "caffeinate": set(),
    "strace": {"-o", "-e", "-p", "-s", "-u"}, "ltrace": {"-o", "-e", "-p", "-s", "-u"},
    "watch": {"-n", "--interval", "-d"}, "busybox": set(), "catchsegv": set(),
    "runuser": {"-u", "-g"}, "pkexec": {"--user"}, "su": {"-c", "-s", "--shell", "--command"},
}  # fmt: skip
_AS_ANOTHER_USER = {"sudo", "doas", "su", "runuser", "pkexec"}
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
_SYSTEMCTL_DENY = {"poweroff", "reboot", "halt", "kexec", "suspend", "hibernate", "emergency",
                   "rescue", "isolate", "default"}  # fmt: skip
_PRINT_ONLY = {"echo", "printf", "true", "false", ":", "test", "[", "[[", "]]", "type",
               "which", "help", "let", "read", "return", "exit", "shift", "set", "unset",
               "shopt", "export", "declare", "typeset", "local", "readonly", "wait", "jobs",
               "trap", "umask", "for", "getopts", "sleep", "seq", "expr", "basename",
               "dirname", "date", "whoami", "id", "uname", "hostname", "printenv", "env"}  # fmt: skip
_DECLARATIONS = {"export", "declare", "typeset", "local", "readonly"}
_FIND_TESTS = {
    "-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
    "-type", "-newer", "-mtime", "-mmin", "-atime", "-amin", "-ctime", "-cmin", "-size",
    "-empty", "-user", "-group", "-perm", "-links", "-inum", "-samefile", "-lname", "-uid",
}  # fmt: skip
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
        self.known = {"HOME": [_escape(self.root)], "PWD": [_escape(self.root)]}

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
                self.known[name] = values[:_MAX_ALTERNATIVES] or None
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
                self.refuse(f"the command reads process internals ({_shown(word)})")
            else:
                self.ask(f"the command reads {_shown(word)} in /proc")

    def values(self, word: Word) -> list[str] | None:
        """Possible glob patterns of ``word`` (quoted specials escaped), None if unknowable."""
        results = [""]
        for part in word.parts:
            options: list[str] | None
            if part.kind == "lit":
                options = [_escape(part.text) if part.quoted else part.text]
            elif part.kind == "tilde":
                options = [_escape(self.root)] if part.text == "" else None
            elif part.kind == "var":
                options = self.known.get(part.text.strip("{}"))
            else:
                options = None
            if options is None:
                return None
            results = [r + o for r in results for o in options][:_MAX_ALTERNATIVES]
        return results

    def locate(self, pattern: str, cwd: str) -> list[_Located]:
        out: list[_Located] = []
        for alternative in _expand_braces(pattern):
            components = alternative.split("/")
            parts: list[str] = []
            glob_last: str | None = None
            for i, component in enumerate(components):
                plain = _unescape(component)
                if _has_glob(component):
                    if plain.startswith(".") and fnmatch.fnmatchcase("..", plain):
                        parts.append("..")
                    else:
                        parts.append(_GLOB)
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
            self.ask(f"it {verb} a path computed when the command runs ({_shown(word)})")
            return
        for value in values:
            for cwd in self.cwds:
                for located in self.locate(value, cwd):
                    self._write_target(located, verb, recursive, word)

    def _write_target(self, located: _Located, verb: str, recursive: bool, word: Word) -> None:
        real = located.real.replace(_GLOB, "*")
        if self.inside(located.real):
            whole = located.real == self.root or (
                located.glob_last in ("*", ".*", "*.*")
                and posixpath.dirname(located.real) == self.root
            )
            if whole and recursive:
                self.ask(f"it {verb} the whole workspace ({_shown(word)})")
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
                    real = located.real.replace(_GLOB, "*")
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
            self.check_read(_word_of(candidate, word) if candidate != literal else word)

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
        if values is None or any(_has_glob(v) for v in values):
            self.ask(f"the command name is computed when the command runs ({_shown(head)})")
            return
        for value in values:
            name = _unescape(value)
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
        handler = _HANDLERS.get(name)
        if handler is not None:
            handler(self, name, args, command, depth)
        elif name in _SHELLS:
            self.shell(name, args, command, depth)
        elif name in _INTERPRETERS or re.fullmatch(r"python\d+(\.\d+)?", name):
            self.interpreter(name, args, command)
        elif name in _WRAPPERS_WITH_VALUE:
            self.wrapper(name, args, command, depth)
        elif name in approval:
            self.ask(f"{name!r} changes the system or other processes")
        elif name not in _PRINT_ONLY:
            for arg in args:
                self.check_argument(arg)
        if name in approval and name in _HANDLERS:
            self.ask(f"{name!r} changes the system or other processes")

    # ------------------------------------------------------------------ command families

    def wrapper(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        if name in _AS_ANOTHER_USER and name not in self.policy.allow_commands:
            self.ask(f"{name!r} runs a command as another user")
        if name in ("strace", "ltrace") and any(a.literal == "-p" for a in args):
            self.ask(f"`{name} -p` attaches to another process and reads its memory")
        with_value = _WRAPPERS_WITH_VALUE[name]
        i = 0
        inner_line: str | None = None
        while i < len(args):
            literal = args[i].literal
            if literal is None:
                break
            if name == "env" and _is_env_assignment(literal):
                i += 1
                continue
            if literal == "--":
                i += 1
                break
            if not literal.startswith("-") or literal == "-":
                break
            option = literal.split("=", 1)[0]
            if name in ("env", "su") and option in ("-S", "--split-string", "-c", "--command"):
                value = literal.split("=", 1)[1] if "=" in literal else None
                if value is None and i + 1 < len(args):
                    value = args[i + 1].literal
                    i += 1
                if value is None:
                    self.ask(f"`{name}` runs a command line computed when it runs")
                    return
                inner_line = value
            elif name == "env" and option in ("-C", "--chdir") and i + 1 < len(args):
                self.check_read(args[i + 1], "changes directory to")
                i += 1
            elif option in with_value and "=" not in literal:
                i += 1
            i += 1
        if inner_line is not None:
            self.script(parse(inner_line), depth + 1)
            return
        rest = args[i:]
        if name == "timeout" and rest:
            rest = rest[1:]  # the duration
        elif name in ("chrt", "taskset") and rest:
            rest = rest[1:]
        elif name == "flock" and rest:
            rest = rest[1:]  # the lock file
        elif name == "watch":
            line = " ".join(w.literal or "" for w in rest)
            if any(w.literal is None for w in rest):
                self.ask("`watch` runs a command line computed when it runs")
            else:
                self.script(parse(line), depth + 1)
            return
        elif name == "command" and args and args[0].literal in ("-v", "-V"):
            return
        if name == "xargs":
            if not rest:
                return
            rest = [*rest, Word([Part("var", "xargs input")])]
        if rest:
            self.simple(rest, command, depth)

    def shell(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        for i, arg in enumerate(args):
            literal = arg.literal
            if literal is None:
                self.ask(f"`{name}` gets an argument computed when it runs ({_shown(arg)})")
                return
            if literal.startswith("-") and "c" in literal[1:] and not literal.startswith("--"):
                if i + 1 >= len(args):
                    return
                line = args[i + 1].literal
                if line is None:
                    self.ask(f"`{name} -c` runs a command line computed when it runs")
                    return
                self.script(parse(line), depth + 1)
                return
            if literal.startswith("-") and literal != "-":
                continue
            if literal == "-":
                break
            self.check_read(arg, "runs")
            return  # a script file: opaque, like any program
        for redirect in command.redirects:
            if redirect.op in ("<<", "<<-", "<<<"):
                body = redirect.heredoc if redirect.op != "<<<" else redirect.target
                line = body.literal if body is not None else None
                if line is None:
                    self.ask(f"`{name}` runs a script computed when it runs")
                else:
                    self.script(parse(line), depth + 1)
                return
        if command.piped_input or any(r.op == "<" for r in command.redirects):
            self.ask(f"`{name}` runs a script read from its input, which cannot be checked")

    def interpreter(self, name: str, args: list[Word], command: Command) -> None:
        flags = _INTERPRETERS.get(name, ("-c",))
        code: list[str] = []
        for i, arg in enumerate(args):
            literal = arg.literal
            for flag in flags:
                if literal == flag and i + 1 < len(args):
                    inner = args[i + 1].literal
                    if inner is None:
                        self.ask(f"`{name}` runs code computed when it runs")
                        return
                    code.append(inner)
                elif literal is not None and literal.startswith(flag) and len(literal) > len(flag):
                    if flag.startswith("--"):
                        continue
                    code.append(literal[len(flag) :])
        for redirect in command.redirects:
            if redirect.op in ("<<", "<<-", "<<<"):
                body = redirect.heredoc if redirect.op != "<<<" else redirect.target
                if body is None or body.literal is None:
                    self.ask(f"`{name}` runs code computed when it runs")
                    return
                code.append(body.literal)
        if (
            not code
            and command.piped_input
            and not any(
                (a.literal or "x") not in ("-",) and not (a.literal or "").startswith("-")
                for a in args
            )
        ):
            self.ask(f"`{name}` runs code read from its input, which cannot be checked")
        for text in code:
            match = _CODE_MARKERS.search(text)
            if match:
                self.ask(
                    f"the inline {name} code uses {match.group(0)!r}, which the policy cannot check"
                )
            for _quote, literal in _QUOTED.findall(text):
                if literal.startswith(("/", "~", "..")):
                    self.code_path(name, literal)
        for arg in args:
            if arg.literal not in code:
                self.check_argument(arg)

    def code_path(self, name: str, path: str) -> None:
        """A path written in inline code: it may be written to, so it must stay inside."""
        for located in self.locate(_escape(path), self.cwds[0]):
            if not self.inside(located.real) and not self.under(
                located.real, self.policy.write_outside
            ):
                self.ask(f"the inline {name} code names {located.real}, outside the workspace")

    def rm(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        recursive = name in ("rmdir",)
        targets: list[Word] = []
        options_done = False
        for arg in args:
            literal = arg.literal
            if (
                not options_done
                and literal is not None
                and literal.startswith("-")
                and literal != "-"
            ):
                if literal == "--":
                    options_done = True
                elif literal in ("--recursive", "--dir") or (
                    not literal.startswith("--") and set(literal[1:]) & {"r", "R"}
                ):
                    recursive = True
                continue
            if (
                not options_done
                and literal is None
                and arg.parts[0].kind == "lit"
                and (arg.parts[0].text.startswith("-"))
            ):
                self.ask(f"`{name}` gets options computed when it runs ({_shown(arg)})")
            targets.append(arg)
        verb = "deletes" if name != "shred" else "overwrites"
        for target in targets:
            self.check_write(target, verb, recursive=recursive)

    def find(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        starts: list[Word] = []
        i = 0
        while i < len(args):
            literal = args[i].literal
            if literal is not None and (
                literal.startswith(("-", "(", "!", ")")) and literal not in ("-",)
            ):
                break
            starts.append(args[i])
            i += 1
        if not starts:
            starts = [Word([Part("lit", ".")])]
        for start in starts:
            self.check_read(start, "searches")
        expression = args[i:]
        has_test = any(w.literal in _FIND_TESTS for w in expression)
        j = 0
        while j < len(expression):
            literal = expression[j].literal
            if literal == "-delete":
                for start in starts:
                    self.check_write(start, "deletes files under", recursive=not has_test)
            elif literal in ("-exec", "-execdir", "-ok", "-okdir"):
                inner: list[Word] = []
                j += 1
                while j < len(expression) and expression[j].literal not in (";", "+"):
                    inner.append(expression[j])
                    j += 1
                if inner:
                    for start in starts:
                        replaced = [_replace_braces(w, start) for w in inner]
                        self.simple(replaced, command, depth)
            elif literal in ("-fprint", "-fprint0", "-fprintf", "-fls") and j + 1 < len(expression):
                self.check_write(expression[j + 1], "writes to")
            j += 1

    def dd(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        for arg in args:
            literal = arg.literal
            first = arg.parts[0].text if arg.parts and arg.parts[0].kind == "lit" else ""
            if first.startswith("of="):
                self.check_write(_strip_prefix(arg, "of="), "writes to")
            elif first.startswith("if="):
                self.check_read(_strip_prefix(arg, "if="))
            elif literal is None:
                self.ask(f"`dd` gets an operand computed when it runs ({_shown(arg)})")

    def kill(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        targets: list[str | None] = []
        i = 0
        while i < len(args):
            literal = args[i].literal
            if literal in ("-s", "-n", "--signal"):
                i += 2
                continue
            if literal == "--":
                targets.extend(a.literal for a in args[i + 1 :])
                break
            if i == 0 and literal is not None and literal.startswith("-") and len(args) > 1:
                i += 1  # the signal
                continue
            targets.append(literal)
            i += 1
        for target in targets:
            if target in ("-1", "1"):
                self.refuse("it signals every process (or init)")

    def permissions(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        recursive = False
        operands: list[Word] = []
        for arg in args:
            literal = arg.literal
            if (
                literal is not None
                and literal.startswith("-")
                and not re.fullmatch(r"-[rwxXstugo]+", literal)
            ):
                if literal in ("-R", "--recursive") or (
                    not literal.startswith("--") and "R" in literal
                ):
                    recursive = True
                if literal.startswith("--reference="):
                    operands.insert(0, Word([Part("lit", "")]))
                continue
            operands.append(arg)
        for target in operands[1:]:
            self.check_write(target, f"changes ({name})", recursive=recursive)

    def copy_like(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        operands: list[Word] = []
        target_dir: Word | None = None
        i = 0
        while i < len(args):
            literal = args[i].literal
            if literal in ("-t", "--target-directory") and i + 1 < len(args):
                target_dir = args[i + 1]
                i += 2
                continue
            if literal is not None and literal.startswith("--target-directory="):
                target_dir = _strip_prefix(args[i], "--target-directory=")
            elif literal is not None and literal.startswith("-") and literal != "-":
                pass
            else:
                operands.append(args[i])
            i += 1
        if target_dir is None and operands:
            target_dir = operands.pop()
        if name == "mv":
            for source in operands:
                self.check_write(source, "moves", recursive=True)
        elif name == "ln":
            for source in operands:
                values = self.values(source)
                if values is None:
                    self.ask(f"it links to a path computed when it runs ({_shown(source)})")
                    continue
                for value in values:
                    for located in self.locate(value, self.cwds[0]):
                        if not self.inside(located.real):  # a write through it lands outside
                            self.ask(f"it links to {located.real}, outside the workspace")
        else:
            for source in operands:
                self.check_read(source)
        if target_dir is not None:
            self.check_write(target_dir, "writes to")

    def writes_all(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        skip_next = {"truncate": {"-s", "--size", "-r", "--reference"}, "mkdir": {"-m", "--mode"},
                     "touch": {"-d", "-t", "-r", "--date", "--reference"}}.get(name, set())  # fmt: skip
        i = 0
        while i < len(args):
            literal = args[i].literal
            if literal in skip_next:
                i += 2
                continue
            if literal is not None and literal.startswith("-") and literal != "-":
                i += 1
                continue
            self.check_write(args[i], "writes to")
            i += 1

    def sed(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        in_place = any(
            (a.literal or "").startswith(("-i", "--in-place"))
            or re.fullmatch(r"-[a-zA-Z]*i[a-zA-Z]*", a.literal or "") is not None
            for a in args
        )
        script_seen = False
        for i, arg in enumerate(args):
            literal = arg.literal
            if literal is None:
                if not script_seen:
                    self.ask("the sed script is computed when the command runs")
                script_seen = True
                continue
            if literal in ("-e", "--expression", "-f", "--file"):
                continue
            previous = args[i - 1].literal if i else None
            is_script = previous in ("-e", "--expression") or (
                not script_seen and not literal.startswith("-") and previous not in ("-f", "--file")
            )
            if is_script:
                script_seen = True
                if _SED_EXEC.search(literal):
                    self.ask("the sed script runs commands or writes files (`e`/`w`)")
                continue
            if literal.startswith("-"):
                continue
            if in_place:
                self.check_write(arg, "edits")
            else:
                self.check_read(arg)

    def awk(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        program_seen = False
        for i, arg in enumerate(args):
            literal = arg.literal
            previous = args[i - 1].literal if i else None
            if previous in ("-f", "-v", "-F", "--file", "--assign"):
                continue
            if literal is None:
                if not program_seen:
                    self.ask("the awk program is computed when the command runs")
                program_seen = True
                continue
            if literal.startswith("-"):
                continue
            if not program_seen:
                program_seen = True
                if _AWK_MARKERS.search(literal):
                    self.ask("the awk program runs commands or writes files")
                continue
            self.check_argument(arg)

    def cd(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        operands = [a for a in args if not (a.literal or "x").startswith("-") or a.literal == "-"]
        if name == "popd":
            return
        if not operands:
            return  # cd alone goes HOME, which is the workspace
        target = operands[0]
        if target.literal == "-":
            self.ask("`cd -` goes back to a directory the policy cannot see")
            return
        values = self.values(target)
        if values is None:
            self.ask(f"it changes directory to a path computed when it runs ({_shown(target)})")
            return
        for value in values:
            for located in self.locate(value, self.cwds[-1]):
                if _GLOB in located.real:
                    self.ask(f"it changes directory to a glob ({_shown(target)})")
                    continue
                if not self.inside(located.real):
                    self.ask(f"it changes directory to {located.real}, outside the workspace")
                if located.real not in self.cwds:
                    self.cwds.append(located.real)  # later relative paths may start there

    def declaration(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        self.assignments(
            [a for a in args if a.parts and a.parts[0].kind == "lit" and "=" in a.parts[0].text]
        )
        if name == "export" and any(a.literal == "-f" for a in args):
            self.ask("`export -f` passes shell functions to other programs")

    def eval_(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        if any(a.literal is None for a in args):
            self.ask(f"`{name}` runs a command line computed when it runs")
            return
        self.script(parse(" ".join(a.literal or "" for a in args)), depth + 1)

    def source(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        if args:
            self.check_read(args[0], "runs")

    def ps(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        for arg in args:
            literal = arg.literal or ""
            bsd_e = not literal.startswith("-") and re.fullmatch(r"[a-zA-Z]*e[a-zA-Z]*", literal)
            if bsd_e or "env" in literal:
                self.ask("`ps e` shows the environment of other processes")
                return

    def systemctl(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        if any(a.literal in _SYSTEMCTL_DENY for a in args):
            self.refuse("it powers off, reboots or isolates the system")

    def tar(self, name: str, args: list[Word], command: Command, depth: int) -> None:
        literals = [a.literal or "" for a in args]
        extracting = any(
            lit in ("-x", "--extract", "--get")
            or re.fullmatch(r"-?[a-zA-Z]*x[a-zA-Z]*", lit) is not None
            for lit in literals[:1] + [x for x in literals if x.startswith("-")]
        )
        for i, arg in enumerate(args):
            literal = arg.literal or ""
            if literal in ("-C", "--directory") and i + 1 < len(args):
                if extracting:
                    self.check_write(args[i + 1], "extracts into")
                else:
                    self.check_read(args[i + 1])
            elif literal.startswith("--directory="):
                target = _strip_prefix(arg, "--directory=")
                if extracting:
                    self.check_write(target, "extracts into")
            elif not literal.startswith("-"):
                self.check_argument(arg)


_HANDLERS = {
    "rm": _Analysis.rm, "rmdir": _Analysis.rm, "unlink": _Analysis.rm, "shred": _Analysis.rm,
    "srm": _Analysis.rm, "wipe": _Analysis.rm, "find": _Analysis.find, "dd": _Analysis.dd,
    "kill": _Analysis.kill, "chmod": _Analysis.permissions, "chown": _Analysis.permissions,
    "chgrp": _Analysis.permissions, "chattr": _Analysis.permissions,
    "setfacl": _Analysis.permissions, "mv": _Analysis.copy_like, "cp": _Analysis.copy_like,
    "ln": _Analysis.copy_like, "install": _Analysis.copy_like, "rsync": _Analysis.copy_like,
    "touch": _Analysis.writes_all, "mkdir": _Analysis.writes_all, "truncate": _Analysis.writes_all,
    "tee": _Analysis.writes_all, "sed": _Analysis.sed, "gsed": _Analysis.sed,
    "awk": _Analysis.awk, "gawk": _Analysis.awk, "mawk": _Analysis.awk, "nawk": _Analysis.awk,
    "cd": _Analysis.cd, "pushd": _Analysis.cd, "popd": _Analysis.cd,
    "export": _Analysis.declaration, "declare": _Analysis.declaration,
    "typeset": _Analysis.declaration, "local": _Analysis.declaration,
    "readonly": _Analysis.declaration, "eval": _Analysis.eval_, "source": _Analysis.source,
    ".": _Analysis.source, "systemctl": _Analysis.systemctl, "tar": _Analysis.tar,
    "ps": _Analysis.ps,
}  # fmt: skip


# --------------------------------------------------------------------------- helpers


def _escape(text: str) -> str:
    return "".join("\\" + c if c in "\\*?[]{}," else c for c in text)


def _unescape(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def _has_glob(pattern: str) -> bool:
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c in "*?[":
            return True
        i += 1
    return False


def _expand_braces(pattern: str, limit: int = _MAX_ALTERNATIVES) -> list[str]:
    """Bash brace expansion of unescaped ``{a,b}`` and ``{x..y}`` (ranges give their ends)."""
    depth = 0
    start = -1
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                inner = pattern[start + 1 : i]
                options = _split_top(inner)
                if len(options) == 1:
                    ends = re.fullmatch(r"(-?\w+)\.\.(-?\w+)(\.\.-?\d+)?", inner)
                    options = [ends.group(1), ends.group(2)] if ends else []
                if options:
                    prefix, suffix = pattern[:start], pattern[i + 1 :]
                    out: list[str] = []
                    for option in options:
                        out.extend(_expand_braces(prefix + option + suffix, limit))
                        if len(out) >= limit:
                            break
                    return out[:limit]
        i += 1
    return [pattern]


def _split_top(inner: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    i = 0
    while i < len(inner):
        c = inner[i]
        if c == "\\" and i + 1 < len(inner):
            current.append(inner[i : i + 2])
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1
    parts.append("".join(current))
    return parts


def _shown(word: Word) -> str:
    text = "".join(
        p.text
        if p.kind == "lit"
        else (
            "~" + p.text
            if p.kind == "tilde"
            else f"${{{p.text}}}"
            if p.kind == "var"
            else f"$({p.text})"
        )
        for p in word.parts
    )
    return text if len(text) <= 80 else text[:77] + "..."


def _word_of(text: str, like: Word) -> Word:
    return Word([Part("lit", text, quoted=all(p.quoted for p in like.parts))])


def _strip_prefix(word: Word, prefix: str) -> Word:
    first = word.parts[0]
    return Word([Part("lit", first.text[len(prefix) :], first.quoted), *word.parts[1:]])


def _replace_braces(word: Word, start: Word) -> Word:
    if word.literal == "{}":
        return Word([*start.parts, Part("lit", "/{}", quoted=True)])
    return word


def _is_env_assignment(literal: str) -> bool:
    name, eq, _ = literal.partition("=")
    return bool(eq) and bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name))
