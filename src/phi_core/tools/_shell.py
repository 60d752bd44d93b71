"""A bash command line, tokenised the way bash reads it — enough for a safety policy.

:func:`parse` splits a command line into simple commands (across ``;``, ``&&``, ``||``, ``|``,
``&``, newlines, subshells, ``{ …; }`` groups, loops and conditionals), removes quotes (``'…'``,
``"…"``, ``$'…'`` and backslashes), and keeps what bash would compute at run time visible as
such: ``$VAR``, ``${…}``, ``$((…))``, ``~``, and command substitutions (``$(…)``, backticks,
``<(…)``), whose inner command lines are parsed too. Redirections, here-documents, function
definitions and ``for`` loop values are recorded. Whatever the tokeniser does not follow with
confidence (``case``, unterminated quotes, substitutions inside arithmetic, …) is listed in
:attr:`Script.problems`, so the policy can ask for approval instead of guessing.

This is not a shell: nothing is executed or expanded here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Command", "Part", "Redirect", "Script", "Word", "parse"]

PartKind = Literal["lit", "var", "cmd", "arith", "tilde"]

_META = set(" \t\n;&|<>()")
_PREFIX_KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "time"}
_END_KEYWORDS = {"fi", "done", "esac"}
_SPECIAL_PARAMS = set("@*#?$!-0123456789")
_MAX_DEPTH = 12


@dataclass
class Part:
    """One piece of a word: literal text, or something computed when the command runs."""

    kind: PartKind
    text: str  # literal text; the variable name; the tilde's user; the raw inner text
    quoted: bool = False
    script: Script | None = None  # the parsed inner command line of a command substitution


@dataclass
class Word:
    parts: list[Part] = field(default_factory=list)

    @property
    def literal(self) -> str | None:
        """The word's text when it holds no expansion at all (quotes removed)."""
        if all(p.kind == "lit" for p in self.parts):
            return "".join(p.text for p in self.parts)
        return None

    @property
    def pattern(self) -> str | None:
        """Like :attr:`literal`, but quoted glob/brace characters escaped with a backslash."""
        if not all(p.kind == "lit" for p in self.parts):
            return None
        out = []
        for part in self.parts:
            if part.quoted:
                out.append("".join("\\" + c if c in "\\*?[]{},~" else c for c in part.text))
            else:
                out.append(part.text)
        return "".join(out)

    def scripts(self) -> list[Script]:
        return [p.script for p in self.parts if p.script is not None]

    def __repr__(self) -> str:
        shown = "".join(
            p.text if p.kind == "lit" else f"<{p.kind}:{p.text[:20]}>" for p in self.parts
        )
        return f"Word({shown!r})"


@dataclass
class Redirect:
    op: str  # ">", ">>", ">|", "&>", "&>>", "<", "<>", "<<", "<<-", "<<<", ">&", "<&"
    fd: str = ""
    target: Word | None = None
    heredoc: Word | None = None  # the body of a here-document (expanded like "…" unless quoted)


@dataclass
class Command:
    """One simple command: assignments, words (command name first) and redirections."""

    assignments: list[Word] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    background: bool = False  # ended with a single ``&``
    piped_input: bool = False  # the previous command's output is its input
    functions: tuple[str, ...] = ()  # the functions whose bodies this command is in
    in_loop: bool = False

    @property
    def empty(self) -> bool:
        return not (self.assignments or self.words or self.redirects)


@dataclass
class Script:
    commands: list[Command] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    loop_values: dict[str, list[Word]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


class _Parser:
    def __init__(self, src: str, depth: int) -> None:
        self.src = src
        self.pos = 0
        self.depth = depth
        self.script = Script()
        self.current = Command()
        self.pending_heredocs: list[tuple[Redirect, str, bool, bool]] = []
        self.frames: list[str] = []  # "{", "(", "loop", "func:<name>" …
        self.pending_function: str | None = None
        self.expect_words_only = False  # after `for NAME in`
        self.for_name: str | None = None
        self.after_for = False

    # ------------------------------------------------------------------ helpers

    def problem(self, text: str) -> None:
        if text not in self.script.problems:
            self.script.problems.append(text)

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.src[i] if i < len(self.src) else ""

    def startswith(self, text: str) -> bool:
        return self.src.startswith(text, self.pos)

    def end_command(self, *, background: bool = False, pipe: bool = False) -> None:
        command = self.current
        if not command.empty:
            command.background = background
            command.functions = tuple(f[5:] for f in self.frames if f.startswith("func:"))
            command.in_loop = "loop" in self.frames
            self.script.commands.append(command)
        self.current = Command(piped_input=pipe)
        self.after_for = False
        self.expect_words_only = False

    # ------------------------------------------------------------------ the main loop

    def parse(self, closer: str | None = None) -> int:
        """Parse until the end (or an unmatched ``closer`` such as ``)``); return the end pos."""
        src = self.src
        while self.pos < len(src):
            c = src[self.pos]
            if c in " \t":
                self.pos += 1
            elif c == "\\" and self.peek(1) == "\n":
                self.pos += 2
            elif c == "#" and self._at_word_start():
                while self.pos < len(src) and src[self.pos] != "\n":
                    self.pos += 1
            elif c == "\n":
                self.pos += 1
                self.end_command()
                self._read_heredocs()
            elif c == ";":
                if self.startswith(";;"):
                    self.problem("`case` patterns are not analysed")
                    self.pos += 2
                else:
                    self.pos += 1
                self.end_command()
            elif c == "&":
                if self.startswith("&&"):
                    self.pos += 2
                    self.end_command()
                elif self.startswith("&>"):
                    self._redirect()
                else:
                    self.pos += 1
                    self.end_command(background=True)
            elif c == "|":
                if self.startswith("||"):
                    self.pos += 2
                    self.end_command()
                else:
                    self.pos += 2 if self.startswith("|&") else 1
                    self.end_command(pipe=True)
            elif c == "(":
                if self.startswith("((") and self.current.empty:
                    self._arith_command()
                elif self.current.empty:
                    self.pos += 1
                    self._open("(")
                elif len(self.current.words) == 1 and self._empty_parens():
                    self._function_definition(self.current.words[0].literal)
                else:
                    self.problem("a `(` in an unexpected place")
                    self.pos += 1
            elif c == ")":
                if closer == ")" and "(" not in self.frames:
                    self.end_command()
                    return self.pos + 1
                self.pos += 1
                self.end_command()
                self._pop("(")
            elif c in "<>" or (c.isdigit() and self._digit_redirect()):
                if c in "<>" and self.peek(1) == "(":
                    self._word()
                else:
                    self._redirect()
            else:
                self._word()
        self.end_command()
        if self.pending_heredocs:
            self._read_heredocs()
        if closer is not None:
            self.problem(f"an unterminated `{closer}`")
        if self.frames:
            self.problem("an unterminated group or loop")
        return self.pos

    def _open(self, kind: str) -> None:
        """Open a group; a pending function definition takes it as its body."""
        if self.pending_function is not None:
            self.frames.append(f"func:{self.pending_function}")
            self.pending_function = None
        self.frames.append(kind)

    def _pop(self, kind: str) -> None:
        while self.frames:
            top = self.frames.pop()
            if top == kind:
                if self.frames and self.frames[-1].startswith("func:"):
                    self.frames.pop()  # the function whose body this group was
                return
        self.problem(f"an unmatched closing `{'}' if kind == '{' else ')'}`")

    def _at_word_start(self) -> bool:
        return self.pos == 0 or self.src[self.pos - 1] in " \t\n;&|()"

    def _digit_redirect(self) -> bool:
        i = self.pos
        while i < len(self.src) and self.src[i].isdigit():
            i += 1
        return i < len(self.src) and self.src[i] in "<>" and self._at_word_start()

    def _empty_parens(self) -> bool:
        i = self.pos + 1
        while i < len(self.src) and self.src[i] in " \t":
            i += 1
        if i < len(self.src) and self.src[i] == ")":
            self.pos = i + 1
            return True
        return False

    def _function_definition(self, name: str | None) -> None:
        if name is None:
            self.problem("a function with a computed name")
            name = "?"
        self.script.functions.append(name)
        self.current = Command()
        self.pending_function = name

    def _arith_command(self) -> None:
        end = self.src.find("))", self.pos + 2)
        inner = self.src[self.pos + 2 : end if end >= 0 else len(self.src)]
        if "$(" in inner or "`" in inner:
            self.problem("a command substitution inside an arithmetic expression")
        self.pos = end + 2 if end >= 0 else len(self.src)
        if end < 0:
            self.problem("an unterminated `((`")

    # ------------------------------------------------------------------ words and keywords

    def _word(self) -> None:
        word = self._read_word()
        if word is None:
            return
        command = self.current
        literal = word.literal
        if self.after_for:
            self._for_word(word)
            return
        if not command.words and not command.redirects:
            if literal is not None and not command.assignments:
                if literal in _PREFIX_KEYWORDS:
                    if literal in ("while", "until"):
                        self.frames.append("loop")
                    return
                if literal in _END_KEYWORDS or literal == "}":
                    self.end_command()
                    if literal == "}":
                        self._pop("{")
                    elif literal == "done":
                        self._pop("loop")
                    return
                if literal == "{":
                    self._open("{")
                    return
                if literal in ("for", "select"):
                    self.frames.append("loop")
                    self.after_for = True
                    self.for_name = None
                    return
                if literal == "case":
                    self.problem("`case` statements are not analysed")
                if literal == "function":
                    name = self._read_word()
                    self._function_definition(name.literal if name else None)
                    self._skip_blanks()
                    if self.startswith("()"):
                        self.pos += 2
                    return
                if literal in ("coproc", "select"):
                    self.problem(f"`{literal}` is not analysed")
            if _is_assignment(word):
                command.assignments.append(word)
                return
        command.words.append(word)

    def _for_word(self, word: Word) -> None:
        literal = word.literal
        if self.for_name is None:
            if literal is None:
                self.problem("a `for` loop over a computed name")
            self.for_name = literal or "?"
            self.script.loop_values.setdefault(self.for_name, [])
            return
        if literal == "in" and not self.expect_words_only:
            self.expect_words_only = True
            return
        if literal == "do":
            self.after_for = False
            self.expect_words_only = False
            return
        self.script.loop_values[self.for_name].append(word)
        # the words of a `for` list may hold command substitutions: keep them visible
        if word.scripts():
            self.current.words.append(Word([Part("lit", "for")]))
            self.current.words.append(word)

    def _skip_blanks(self) -> None:
        while self.peek() in (" ", "\t"):
            self.pos += 1

    def _read_word(self) -> Word | None:
        self._skip_blanks()
        parts: list[Part] = []
        src = self.src
        start = self.pos
        while self.pos < len(src):
            c = src[self.pos]
            if c in _META:
                if c in "<>" and self.peek(1) == "(" and self.pos == start:
                    parts.append(self._subst(self.pos + 2, ")", "cmd"))
                    continue
                break
            if c == "\\":
                nxt = self.peek(1)
                if nxt == "\n":
                    self.pos += 2
                    continue
                parts.append(Part("lit", nxt, quoted=True))
                self.pos += 2
            elif c == "'":
                end = src.find("'", self.pos + 1)
                if end < 0:
                    self.problem("an unterminated single quote")
                    end = len(src)
                parts.append(Part("lit", src[self.pos + 1 : end], quoted=True))
                self.pos = end + 1
            elif c == '"':
                self.pos += 1
                parts.extend(self._double_quoted('"'))
            elif c == "$":
                parts.append(self._dollar(quoted=False))
            elif c == "`":
                parts.append(self._backtick())
            elif c == "~" and self.pos == start:
                i = self.pos + 1
                while i < len(src) and src[i] not in _META and src[i] not in "/:'\"\\$`":
                    i += 1
                parts.append(Part("tilde", src[self.pos + 1 : i]))
                self.pos = i
            else:
                parts.append(Part("lit", c))
                self.pos += 1
        if self.pos == start:
            return None
        return Word(_merge(parts))

    def _double_quoted(self, terminator: str) -> list[Part]:
        parts: list[Part] = []
        src = self.src
        while self.pos < len(src):
            c = src[self.pos]
            if c == terminator:
                self.pos += 1
                return parts
            if c == "\\" and self.peek(1) in ('"', "\\", "$", "`", "\n"):
                if self.peek(1) != "\n":
                    parts.append(Part("lit", self.peek(1), quoted=True))
                self.pos += 2
            elif c == "$":
                parts.append(self._dollar(quoted=True))
            elif c == "`":
                parts.append(self._backtick(quoted=True))
            else:
                parts.append(Part("lit", c, quoted=True))
                self.pos += 1
        if terminator:
            self.problem("an unterminated double quote")
        return parts

    def _dollar(self, *, quoted: bool) -> Part:
        src = self.src
        nxt = self.peek(1)
        if src.startswith("$((", self.pos):
            end = src.find("))", self.pos + 3)
            inner = src[self.pos + 3 : end if end >= 0 else len(src)]
            if "$(" in inner or "`" in inner:
                self.problem("a command substitution inside an arithmetic expression")
            self.pos = end + 2 if end >= 0 else len(src)
            return Part("arith", inner, quoted)
        if nxt == "(":
            return self._subst(self.pos + 2, ")", "cmd", quoted=quoted)
        if nxt == "{":
            end = _matching_brace(src, self.pos + 2)
            inner = src[self.pos + 2 : end]
            self.pos = end + 1 if end < len(src) else end
            if end >= len(src):
                self.problem("an unterminated `${`")
            if "$(" in inner or "`" in inner:
                # ${x:-$(cmd)}: the substitution runs; parse what we can see of it
                part = Part("var", inner, quoted)
                start = inner.find("$(")
                if start >= 0:
                    sub = _Parser(inner[start + 2 :], self.depth + 1)
                    sub.parse(closer=")")
                    part.script = sub.script
                else:
                    self.problem("a backtick substitution inside `${…}`")
                return part
            return Part("var", inner, quoted)
        if nxt == "'" and not quoted:
            end = _ansi_c_end(src, self.pos + 2)
            text, ok = _ansi_c(src[self.pos + 2 : end])
            if not ok:
                self.problem("an ANSI-C quoted string that could not be decoded")
            self.pos = end + 1
            return Part("lit", text, quoted=True)
        if nxt == '"' and not quoted:
            self.pos += 2
            parts = self._double_quoted('"')
            if len(parts) == 1:
                return parts[0]
            # a $"…" string with expansions: treat as computed
            return Part("var", "".join(p.text for p in parts), True)
        if nxt.isalpha() or nxt == "_":
            i = self.pos + 1
            while i < len(src) and (src[i].isalnum() or src[i] == "_"):
                i += 1
            name = src[self.pos + 1 : i]
            self.pos = i
            return Part("var", name, quoted)
        if nxt and nxt in _SPECIAL_PARAMS:
            self.pos += 2
            return Part("var", nxt, quoted)
        self.pos += 1
        return Part("lit", "$", quoted)

    def _subst(self, start: int, closer: str, kind: PartKind, *, quoted: bool = False) -> Part:
        if self.depth >= _MAX_DEPTH:
            self.problem("command substitutions nested too deeply")
            self.pos = len(self.src)
            return Part(kind, "", quoted)
        sub = _Parser(self.src[start:], self.depth + 1)
        end = sub.parse(closer=closer)
        for problem in sub.script.problems:
            self.problem(problem)
        self.pos = start + end
        return Part(kind, self.src[start : start + end - 1], quoted, script=sub.script)

    def _backtick(self, *, quoted: bool = False) -> Part:
        src = self.src
        i = self.pos + 1
        inner: list[str] = []
        while i < len(src) and src[i] != "`":
            if src[i] == "\\" and i + 1 < len(src) and src[i + 1] in "`\\$":
                inner.append(src[i + 1])
                i += 2
                continue
            inner.append(src[i])
            i += 1
        if i >= len(src):
            self.problem("an unterminated backtick")
        self.pos = i + 1
        text = "".join(inner)
        if self.depth >= _MAX_DEPTH:
            self.problem("command substitutions nested too deeply")
            return Part("cmd", text, quoted)
        sub = _Parser(text, self.depth + 1)
        sub.parse()
        for problem in sub.script.problems:
            self.problem(problem)
        return Part("cmd", text, quoted, script=sub.script)

    # ------------------------------------------------------------------ redirections

    def _redirect(self) -> None:
        src = self.src
        fd = ""
        while self.peek().isdigit():
            fd += self.peek()
            self.pos += 1
        for op in ("&>>", "&>", "<<<", "<<-", "<<", ">>", ">|", "<>", ">&", "<&", ">", "<"):
            if src.startswith(op, self.pos):
                self.pos += len(op)
                break
        else:  # pragma: no cover - only called at < or >
            op = src[self.pos]
            self.pos += 1
        redirect = Redirect(op=op, fd=fd)
        self._skip_blanks()
        target = self._read_word()
        if target is None:
            self.problem(f"a `{op}` redirection without a target")
        redirect.target = target
        if op in ("<<", "<<-") and target is not None:
            quoted = any(p.quoted for p in target.parts)
            delimiter = target.literal or "".join(p.text for p in target.parts)
            self.pending_heredocs.append((redirect, delimiter, quoted, op == "<<-"))
        self.current.redirects.append(redirect)

    def _read_heredocs(self) -> None:
        pending, self.pending_heredocs = self.pending_heredocs, []
        src = self.src
        for redirect, delimiter, quoted, strip_tabs in pending:
            lines: list[str] = []
            while self.pos < len(src):
                end = src.find("\n", self.pos)
                line = src[self.pos : end if end >= 0 else len(src)]
                self.pos = end + 1 if end >= 0 else len(src)
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                lines.append(line)
            body = "\n".join(lines)
            if quoted:
                redirect.heredoc = Word([Part("lit", body, quoted=True)])
            else:
                sub = _Parser(body, self.depth + 1)
                parts = sub._double_quoted("")
                for problem in sub.script.problems:
                    self.problem(problem)
                redirect.heredoc = Word(_merge(parts))


def _is_assignment(word: Word) -> bool:
    first = word.parts[0] if word.parts else None
    if first is None or first.kind != "lit" or first.quoted:
        return False
    name, eq, _ = first.text.partition("=")
    if not eq:
        return False
    name = name.removesuffix("+")
    return (
        bool(name)
        and (name[0].isalpha() or name[0] == "_")
        and all(ch.isalnum() or ch == "_" for ch in name)
    )


def _merge(parts: list[Part]) -> list[Part]:
    out: list[Part] = []
    for part in parts:
        if out and part.kind == "lit" and out[-1].kind == "lit" and out[-1].quoted == part.quoted:
            out[-1] = Part("lit", out[-1].text + part.text, part.quoted)
        else:
            out.append(part)
    return out


def _matching_brace(src: str, start: int) -> int:
    depth = 1
    i = start
    while i < len(src):
        c = src[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(src)


def _ansi_c_end(src: str, start: int) -> int:
    i = start
    while i < len(src):
        if src[i] == "\\":
            i += 2
            continue
        if src[i] == "'":
            return i
        i += 1
    return len(src)


_SIMPLE_ESCAPES = {
    "n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v",
    "e": "\x1b", "E": "\x1b", "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip


def _ansi_c(body: str) -> tuple[str, bool]:
    """Decode the inside of ``$'…'``; ``ok`` is False for escapes this decoder does not know."""
    out: list[str] = []
    ok = True
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\" or i + 1 >= len(body):
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
            i += 2
        elif e in "xuU0123456789":
            limit = {"x": 2, "u": 4, "U": 8}.get(e, 3)
            j = i + 2 if e in "xuU" else i + 1
            digits = ""
            base = 8 if e not in "xuU" else 16
            valid = "01234567" if base == 8 else "0123456789abcdefABCDEF"
            while j < len(body) and len(digits) < limit and body[j] in valid:
                digits += body[j]
                j += 1
            if digits:
                try:
                    out.append(chr(int(digits, base)))
                except (ValueError, OverflowError):
                    ok = False
            else:
                ok = False
            i = j
        else:
            ok = False
            out.append(body[i : i + 2])
            i += 2
    return "".join(out), ok


def parse(command: str) -> Script:
    """Tokenise a bash command line (see the module docstring)."""
    parser = _Parser(command, 0)
    parser.parse()
    return parser.script
