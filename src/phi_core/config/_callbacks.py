"""Callbacks from config: external scripts or named Python callables, bridged to loop hooks.

A script receives the hook's context as JSON on stdin (``hook``, ``message_count``,
``turn_index``, ``tool_name``, …), runs in the agent's workspace and may print JSON. For a
``before_*`` hook, a non-zero exit or ``{"allow": false}`` vetoes the action; for an observer
hook a non-zero exit is reported as a warning by the loop.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ScriptCallbackError

__all__ = [
    "detect_interpreter",
    "is_script_path",
    "run_script",
    "run_script_sync",
    "script_hook",
]


def is_script_path(value: str) -> bool:
    """Scripts: ``.sh``/``.py`` files, paths and commands; not ``plugin::name`` or bare names."""
    if "::" in value:
        return False
    return value.endswith((".sh", ".py")) or "/" in value or " " in value.strip()


def detect_interpreter(path: str) -> str:
    return sys.executable if path.endswith(".py") else "sh"


def _argv(command: str, workspace: Path) -> list[str]:
    parts = shlex.split(command)
    if len(parts) == 1:
        script = parts[0]
        return [detect_interpreter(script), str(workspace / script)]
    if parts[0] in ("python", "python3"):
        parts[0] = sys.executable
    return parts


def _decode(stdout: str) -> Any:
    text = stdout.strip()
    if not text:
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"output": text}


async def run_script(command: str, payload: Mapping[str, Any], workspace: Path) -> Any:
    """Run a callback script with ``payload`` as JSON on stdin; its JSON output (or ``{}``)."""
    process = await asyncio.create_subprocess_exec(
        *_argv(command, workspace),
        cwd=workspace,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await process.communicate(json.dumps(payload, default=str).encode())
    except BaseException:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    if process.returncode != 0:
        raise ScriptCallbackError(command, process.returncode or 0, err.decode(errors="replace"))
    return _decode(out.decode(errors="replace"))


def run_script_sync(command: str, payload: Mapping[str, Any], workspace: Path) -> Any:
    done = subprocess.run(
        _argv(command, workspace),
        cwd=workspace,
        input=json.dumps(payload, default=str),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ScriptCallbackError(command, done.returncode, done.stderr)
    return _decode(done.stdout)


def _context(hook: str, args: tuple[Any, ...]) -> dict[str, Any]:
    ctx: dict[str, Any] = {"hook": hook}
    if hook in ("before_loop", "after_loop", "before_turn", "after_turn"):
        ctx["message_count"] = len(args[0])
    if hook == "before_turn":
        ctx["turn_index"] = args[1]
    if hook in ("after_loop", "after_turn"):
        ctx["usage"] = args[1].model_dump()
    if hook in ("before_tool_execution", "after_tool_execution"):
        ctx["tool_name"], ctx["tool_call_id"] = args[0], args[1]
        if hook == "before_tool_execution":
            ctx["args"] = args[2]
        else:
            ctx["is_error"] = args[2]
    if hook == "on_error":
        ctx["error"] = args[0]
    if hook == "before_compaction_start":
        ctx["estimated_tokens"], ctx["message_count"] = args
    if hook == "after_compaction_end":
        keys = ("messages_before", "messages_after", "tokens_before", "tokens_after")
        ctx.update(zip(keys, args, strict=True))
    return ctx


def script_hook(hook: str, command: str, workspace: Path) -> Callable[..., Any]:
    """A loop hook that runs ``command``; see the module docstring for veto rules."""
    veto = hook.startswith("before_")

    async def call(*args: Any) -> Any:
        payload = _context(hook, args)
        try:
            result = await run_script(command, payload, workspace)
        except ScriptCallbackError:
            if veto:
                return False
            raise
        if veto and isinstance(result, dict) and result.get("allow") is False:
            return False
        return True if veto else None

    call.__name__ = f"script_{hook}"
    return call
