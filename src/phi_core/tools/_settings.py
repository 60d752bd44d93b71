"""The limits of the built-in tools, with safe defaults; every one can be changed.

In a config file they live under ``[tools.builtin]`` (``[tools.builtin.bash]``,
``[tools.builtin.read_file]``, …); in code, pass :class:`BuiltinToolSettings` (or one section)
to :func:`default_tools` or to a tool's constructor.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ._isolation import Isolation
from ._policy import CommandPolicy

__all__ = [
    "BashSettings",
    "BuiltinToolSettings",
    "ListSettings",
    "ReadSettings",
    "SearchSettings",
    "WriteSettings",
]

KIB = 1024
MIB = 1024 * 1024

DEFAULT_ENV = (
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME",
    "TERM", "TZ", "USER", "LOGNAME", "TMPDIR",
)  # fmt: skip


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BashSettings(_Settings):
    """``bash``: where it runs is the workspace; what it may run is the command policy."""

    timeout: float = Field(default=120.0, gt=0)
    """Seconds a command may run when the model does not say."""
    max_timeout: float = Field(default=600.0, gt=0)
    """The most the model may ask for with ``timeout``; larger requests are capped."""
    max_output_bytes: int = Field(default=256 * KIB, ge=1024)
    """Output kept per command (stdout and stderr, half each; the start and the end of each)."""
    env: tuple[str, ...] = DEFAULT_ENV
    """Names passed from this process's environment when set (an allow-list: nothing else is
    passed, so API keys and tokens never reach commands). ``HOME`` and ``PWD`` are the
    workspace."""
    extra_env: dict[str, str] = Field(default_factory=dict)
    """Variables set for every command, on top of ``env``."""
    policy: CommandPolicy = Field(default_factory=CommandPolicy)
    isolate: Isolation = "auto"
    """How commands are confined by the kernel: ``filesystem`` (bubblewrap: of the host only
    the system directories and the toolchains on ``PATH``, read-only, and the workspace; no
    home folders, ``/var``, ``/run`` or stored keys; a private ``/tmp``, no disks in ``/dev``,
    its own processes),
    ``processes`` (``unshare``: its own processes and ``/proc`` only), ``never``; ``auto`` takes
    the strongest that works here. Isolated commands cannot see or signal other processes or
    read their environments, and everything they start dies with them."""
    network: bool = True
    """Whether ``filesystem``-isolated commands reach the network (``pip install``, ``git
    clone``). Off, they get their own network namespace with loopback only — which also keeps
    them from the host services' abstract Unix sockets."""
    visible: tuple[str, ...] = ()
    """More host paths that ``filesystem``-isolated commands may read (read-only), such as a
    data folder outside the workspace. ``~`` is expanded; missing paths are left out."""
    exit_grace: float = Field(default=1.0, ge=0)
    """Seconds to wait for the output of background processes after the shell exits; then the
    command's process group is killed."""
    max_processes: int | None = Field(default=512, ge=8)
    """Processes and threads an isolated command may have at once (``RLIMIT_NPROC``, set inside
    its own namespaces, where it counts only the command's own): a fork bomb fails instead of
    filling the machine. Not applied without isolation (it would count every process of the
    user), and the kernel does not enforce it for root. None: no limit."""
    max_file_bytes: int | None = Field(default=8 * 1024 * MIB, ge=MIB)
    """The largest file a command may write (``RLIMIT_FSIZE``): a write past it fails (``File
    too large``) instead of filling the disk. None: no limit. Memory is not limited: an
    address-space limit breaks runtimes that reserve large ranges up front (Node.js, the JVM,
    Go); the command's time limit bounds it."""


class ReadSettings(_Settings):
    """``read_file``: a window of lines, streamed; the file is never loaded whole."""

    max_lines: int = Field(default=2000, ge=1)
    """Lines returned when the model gives no ``limit`` (and the most it may ask for)."""
    max_line_chars: int = Field(default=2000, ge=16)
    """Longer lines are cut, with a note of how much was left out."""
    max_bytes: int = Field(default=256 * KIB, ge=1024)
    """The most text one read returns; the note says which ``offset`` continues."""
    max_image_bytes: int = Field(default=20 * MIB, ge=1)
    count_lines_up_to: int = Field(default=64 * MIB, ge=0)
    """Files up to this size have their total line count reported."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds one read may take (lines of a huge or sparse file are skipped, not loaded);
    then it stops with a note of where it got to."""


class WriteSettings(_Settings):
    """``write_file`` and ``edit_file``."""

    max_bytes: int = Field(default=10 * MIB, ge=1)
    """The largest file written, and the largest file ``edit_file`` will load."""


class ListSettings(_Settings):
    """``list_files``."""

    max_results: int = Field(default=200, ge=1)
    max_depth: int = Field(default=10, ge=1)
    timeout: float = Field(default=10.0, gt=0)
    skip_dirs: tuple[str, ...] = (".git", "target", "node_modules", "__pycache__", ".venv")


class SearchSettings(_Settings):
    """``search``: regular files only, no links followed, a result and a time budget."""

    max_results: int = Field(default=50, ge=1)
    timeout: float = Field(default=30.0, gt=0)
    """Seconds of searching; then the matches found so far are returned, with a note."""
    max_line_chars: int = Field(default=500, ge=16)
    max_file_bytes: int = Field(default=20 * MIB, ge=1)
    """Larger files are skipped (and named in the result)."""
    skip_dirs: tuple[str, ...] = (".git", "target", "node_modules", "__pycache__", ".venv")


class BuiltinToolSettings(_Settings):
    """The settings of all six built-in tools."""

    bash: BashSettings = Field(default_factory=BashSettings)
    read_file: ReadSettings = Field(default_factory=ReadSettings)
    write_file: WriteSettings = Field(default_factory=WriteSettings)
    list_files: ListSettings = Field(default_factory=ListSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
