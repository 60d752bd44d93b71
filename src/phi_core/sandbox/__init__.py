"""The sandbox for model-written code: every piece of phi-core that runs code a model wrote
(``exec-vote``, ``code_agreement``, ``runnable_python``, ``PythonTestsCheck``) runs it here.

Owns :class:`Sandbox` (one fresh bubblewrap or ``unshare`` sandbox per run: new user, PID,
network, IPC, UTS and mount namespaces, uid 65534 without capabilities, a read-only system, a
private ``/tmp``, its own ``/proc``, rlimits, an empty environment; everything in it dies with
it), the supervisor that runs inside, and the refusal when no sandbox can be made. Imports
nothing above ``errors.py``; knows nothing of answers, votes or tests.
"""

from ._sandbox import (
    Sandbox,
    SandboxLimits,
    SandboxResult,
    default_sandbox,
    set_default_sandbox,
)

__all__ = [
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "default_sandbox",
    "set_default_sandbox",
]
