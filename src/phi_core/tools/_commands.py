"""What each family of commands does to paths, for the command policy (:mod:`._policy`).

One function per family — deleting (``rm``), finding (``find -delete/-exec``), copying, linking,
changing permissions, editing in place (``sed -i``), wrappers that run another command
(``sudo``, ``env``, ``timeout``, ``xargs``…), shells and interpreters given inline code — each
given the analysis of the whole command line, which it asks to refuse or to seek approval.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ._patterns import GLOB, escape, is_env_assignment, replace_braces, shown, strip_prefix
from ._shell import Command, Part, Word, parse

if TYPE_CHECKING:
    from ._policy import _Analysis

__all__ = ["HANDLERS", "handle"]

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
_SYSTEMCTL_DENY = {"poweroff", "reboot", "halt", "kexec", "suspend", "hibernate", "emergency",
                   "rescue", "isolate", "default"}  # fmt: skip
_FIND_TESTS = {
    "-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
    "-type", "-newer", "-mtime", "-mmin", "-atime", "-amin", "-ctime", "-cmin", "-size",
    "-empty", "-user", "-group", "-perm", "-links", "-inum", "-samefile", "-lname", "-uid",
}  # fmt: skip


def wrapper(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    if name in _AS_ANOTHER_USER and name not in a.policy.allow_commands:
        a.ask(f"{name!r} runs a command as another user")
    if name in ("strace", "ltrace") and any(a.literal == "-p" for a in args):
        a.ask(f"`{name} -p` attaches to another process and reads its memory")
    with_value = _WRAPPERS_WITH_VALUE[name]
    i = 0
    inner_line: str | None = None
    while i < len(args):
        literal = args[i].literal
        if literal is None:
            break
        if name == "env" and is_env_assignment(literal):
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
                a.ask(f"`{name}` runs a command line computed when it runs")
                return
            inner_line = value
        elif name == "env" and option in ("-C", "--chdir") and i + 1 < len(args):
            a.check_read(args[i + 1], "changes directory to")
            i += 1
        elif option in with_value and "=" not in literal:
            i += 1
        i += 1
    if inner_line is not None:
        a.script(parse(inner_line), depth + 1)
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
            a.ask("`watch` runs a command line computed when it runs")
        else:
            a.script(parse(line), depth + 1)
        return
    elif name == "command" and args and args[0].literal in ("-v", "-V"):
        return
    if name == "xargs":
        if not rest:
            return
        rest = [*rest, Word([Part("var", "xargs input")])]
    if rest:
        a.simple(rest, command, depth)


def shell(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    for i, arg in enumerate(args):
        literal = arg.literal
        if literal is None:
            a.ask(f"`{name}` gets an argument computed when it runs ({shown(arg)})")
            return
        if literal.startswith("-") and "c" in literal[1:] and not literal.startswith("--"):
            if i + 1 >= len(args):
                return
            line = args[i + 1].literal
            if line is None:
                a.ask(f"`{name} -c` runs a command line computed when it runs")
                return
            a.script(parse(line), depth + 1)
            return
        if literal.startswith("-") and literal != "-":
            continue
        if literal == "-":
            break
        a.check_read(arg, "runs")
        return  # a script file: opaque, like any program
    for redirect in command.redirects:
        if redirect.op in ("<<", "<<-", "<<<"):
            body = redirect.heredoc if redirect.op != "<<<" else redirect.target
            line = body.literal if body is not None else None
            if line is None:
                a.ask(f"`{name}` runs a script computed when it runs")
            else:
                a.script(parse(line), depth + 1)
            return
    if command.piped_input or any(r.op == "<" for r in command.redirects):
        a.ask(f"`{name}` runs a script read from its input, which cannot be checked")


def interpreter(a: _Analysis, name: str, args: list[Word], command: Command) -> None:
    flags = _INTERPRETERS.get(name, ("-c",))
    code: list[str] = []
    for i, arg in enumerate(args):
        literal = arg.literal
        for flag in flags:
            if literal == flag and i + 1 < len(args):
                inner = args[i + 1].literal
                if inner is None:
                    a.ask(f"`{name}` runs code computed when it runs")
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
                a.ask(f"`{name}` runs code computed when it runs")
                return
            code.append(body.literal)
    if (
        not code
        and command.piped_input
        and not any(
            (a.literal or "x") not in ("-",) and not (a.literal or "").startswith("-") for a in args
        )
    ):
        a.ask(f"`{name}` runs code read from its input, which cannot be checked")
    for text in code:
        match = _CODE_MARKERS.search(text)
        if match:
            a.ask(f"the inline {name} code uses {match.group(0)!r}, which the policy cannot check")
        for _quote, literal in _QUOTED.findall(text):
            if literal.startswith(("/", "~", "..")):
                code_path(a, name, literal)
    for arg in args:
        if arg.literal not in code:
            a.check_argument(arg)


def code_path(a: _Analysis, name: str, path: str) -> None:
    """A path written in inline code: it may be written to, so it must stay inside."""
    for located in a.locate(escape(path), a.cwds[0]):
        if not a.inside(located.real) and not a.under(located.real, a.policy.write_outside):
            a.ask(f"the inline {name} code names {located.real}, outside the workspace")


def rm(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    recursive = name in ("rmdir",)
    targets: list[Word] = []
    options_done = False
    for arg in args:
        literal = arg.literal
        if not options_done and literal is not None and literal.startswith("-") and literal != "-":
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
            a.ask(f"`{name}` gets options computed when it runs ({shown(arg)})")
        targets.append(arg)
    verb = "deletes" if name != "shred" else "overwrites"
    for target in targets:
        a.check_write(target, verb, recursive=recursive)


def find(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
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
        a.check_read(start, "searches")
    expression = args[i:]
    has_test = any(w.literal in _FIND_TESTS for w in expression)
    j = 0
    while j < len(expression):
        literal = expression[j].literal
        if literal == "-delete":
            for start in starts:
                a.check_write(start, "deletes files under", recursive=not has_test)
        elif literal in ("-exec", "-execdir", "-ok", "-okdir"):
            inner: list[Word] = []
            j += 1
            while j < len(expression) and expression[j].literal not in (";", "+"):
                inner.append(expression[j])
                j += 1
            if inner:
                for start in starts:
                    replaced = [replace_braces(w, start) for w in inner]
                    a.simple(replaced, command, depth)
        elif literal in ("-fprint", "-fprint0", "-fprintf", "-fls") and j + 1 < len(expression):
            a.check_write(expression[j + 1], "writes to")
        j += 1


def dd(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    for arg in args:
        literal = arg.literal
        first = arg.parts[0].text if arg.parts and arg.parts[0].kind == "lit" else ""
        if first.startswith("of="):
            a.check_write(strip_prefix(arg, "of="), "writes to")
        elif first.startswith("if="):
            a.check_read(strip_prefix(arg, "if="))
        elif literal is None:
            a.ask(f"`dd` gets an operand computed when it runs ({shown(arg)})")


def kill(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
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
            a.refuse("it signals every process (or init)")


def permissions(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
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
        a.check_write(target, f"changes ({name})", recursive=recursive)


def copy_like(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
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
            target_dir = strip_prefix(args[i], "--target-directory=")
        elif literal is not None and literal.startswith("-") and literal != "-":
            pass
        else:
            operands.append(args[i])
        i += 1
    if target_dir is None and operands:
        target_dir = operands.pop()
    if name == "mv":
        for source in operands:
            a.check_write(source, "moves", recursive=True)
    elif name == "ln":
        for source in operands:
            values = a.values(source)
            if values is None:
                a.ask(f"it links to a path computed when it runs ({shown(source)})")
                continue
            for value in values:
                for located in a.locate(value, a.cwds[0]):
                    if not a.inside(located.real):  # a write through it lands outside
                        a.ask(f"it links to {located.real}, outside the workspace")
    else:
        for source in operands:
            a.check_read(source)
    if target_dir is not None:
        a.check_write(target_dir, "writes to")


def writes_all(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
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
        a.check_write(args[i], "writes to")
        i += 1


def sed(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
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
                a.ask("the sed script is computed when the command runs")
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
                a.ask("the sed script runs commands or writes files (`e`/`w`)")
            continue
        if literal.startswith("-"):
            continue
        if in_place:
            a.check_write(arg, "edits")
        else:
            a.check_read(arg)


def awk(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    program_seen = False
    for i, arg in enumerate(args):
        literal = arg.literal
        previous = args[i - 1].literal if i else None
        if previous in ("-f", "-v", "-F", "--file", "--assign"):
            continue
        if literal is None:
            if not program_seen:
                a.ask("the awk program is computed when the command runs")
            program_seen = True
            continue
        if literal.startswith("-"):
            continue
        if not program_seen:
            program_seen = True
            if _AWK_MARKERS.search(literal):
                a.ask("the awk program runs commands or writes files")
            continue
        a.check_argument(arg)


def cd(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    operands = [a for a in args if not (a.literal or "x").startswith("-") or a.literal == "-"]
    if name == "popd":
        return
    if not operands:
        return  # cd alone goes HOME, which is the workspace
    target = operands[0]
    if target.literal == "-":
        a.ask("`cd -` goes back to a directory the policy cannot see")
        return
    values = a.values(target)
    if values is None:
        a.ask(f"it changes directory to a path computed when it runs ({shown(target)})")
        return
    for value in values:
        for located in a.locate(value, a.cwds[-1]):
            if GLOB in located.real:
                a.ask(f"it changes directory to a glob ({shown(target)})")
                continue
            if not a.inside(located.real):
                a.ask(f"it changes directory to {located.real}, outside the workspace")
            if located.real not in a.cwds:
                a.cwds.append(located.real)  # later relative paths may start there


def declaration(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    a.assignments(
        [a for a in args if a.parts and a.parts[0].kind == "lit" and "=" in a.parts[0].text]
    )
    if name == "export" and any(a.literal == "-f" for a in args):
        a.ask("`export -f` passes shell functions to other programs")


def eval_(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    if any(a.literal is None for a in args):
        a.ask(f"`{name}` runs a command line computed when it runs")
        return
    a.script(parse(" ".join(a.literal or "" for a in args)), depth + 1)


def source(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    if args:
        a.check_read(args[0], "runs")


def ps(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    for arg in args:
        literal = arg.literal or ""
        bsd_e = not literal.startswith("-") and re.fullmatch(r"[a-zA-Z]*e[a-zA-Z]*", literal)
        if bsd_e or "env" in literal:
            a.ask("`ps e` shows the environment of other processes")
            return


def systemctl(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
    if any(a.literal in _SYSTEMCTL_DENY for a in args):
        a.refuse("it powers off, reboots or isolates the system")


def tar(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> None:
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
                a.check_write(args[i + 1], "extracts into")
            else:
                a.check_read(args[i + 1])
        elif literal.startswith("--directory="):
            target = strip_prefix(arg, "--directory=")
            if extracting:
                a.check_write(target, "extracts into")
        elif not literal.startswith("-"):
            a.check_argument(arg)


HANDLERS: dict[str, Any] = {
    "rm": rm, "rmdir": rm, "unlink": rm, "shred": rm,
    "srm": rm, "wipe": rm, "find": find, "dd": dd,
    "kill": kill, "chmod": permissions, "chown": permissions,
    "chgrp": permissions, "chattr": permissions,
    "setfacl": permissions, "mv": copy_like, "cp": copy_like,
    "ln": copy_like, "install": copy_like, "rsync": copy_like,
    "touch": writes_all, "mkdir": writes_all, "truncate": writes_all,
    "tee": writes_all, "sed": sed, "gsed": sed,
    "awk": awk, "gawk": awk, "mawk": awk, "nawk": awk,
    "cd": cd, "pushd": cd, "popd": cd,
    "export": declaration, "declare": declaration,
    "typeset": declaration, "local": declaration,
    "readonly": declaration, "eval": eval_, "source": source,
    ".": source, "systemctl": systemctl, "tar": tar,
    "ps": ps,
}  # fmt: skip


def handle(a: _Analysis, name: str, args: list[Word], command: Command, depth: int) -> bool:
    """Analyse ``name args`` by its family; False when the command has no family here."""
    handler = HANDLERS.get(name)
    if handler is not None:
        handler(a, name, args, command, depth)
    elif name in _SHELLS:
        shell(a, name, args, command, depth)
    elif name in _INTERPRETERS or re.fullmatch(r"python\d+(\.\d+)?", name):
        interpreter(a, name, args, command)
    elif name in _WRAPPERS_WITH_VALUE:
        wrapper(a, name, args, command, depth)
    else:
        return False
    return True
