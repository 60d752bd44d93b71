"""``phi race --strategy bandit``: the learned racing pipeline behind the ``race`` command.

Each branch is an arm named by its label (so three configurations of one model are three arms);
the router state persists between runs (``--state``, default ``router_state.sqlite`` in the user directory).
"""

from __future__ import annotations

import dataclasses
from typing import TextIO

from ..cancel import CancelToken
from ..loop import AgentLoopConfig
from ..race.entry import BanditOptions, run_bandit_race, verifier_from_spec
from ..testing import ScriptedProvider
from ._spec import DEFAULT_JUDGE, BranchSpec, RaceFile, parse_branch, select_branches
from ._view import JsonLines

__all__ = ["plan_bandit", "run_bandit"]


def plan_bandit(
    models: list[str],
    race_file: RaceFile,
    scripts: dict[str, ScriptedProvider],
    judge: str | None,
    system: str | None,
    max_tokens: int | None,
    flags: BanditOptions,
) -> tuple[list[str], dict[str, AgentLoopConfig], BanditOptions]:
    """Arms, their configs and ``flags`` with the judge filled in; raises UserError for bad input
    before anything runs."""
    from ._app import JUDGE_MAX_TOKENS, loop_config

    branches = select_branches(models, race_file)
    configs: dict[str, AgentLoopConfig] = {}
    for branch in branches:
        name = branch.label
        configs[name] = loop_config(branch, scripts, max_tokens=max_tokens, system=system)
    judge_spec: BranchSpec | None
    if judge is not None:
        judge_spec = parse_branch(judge)
    elif race_file.judge is not None:
        judge_spec = race_file.judge
    elif all(b.model.startswith("local:") for b in branches):
        judge_spec = DEFAULT_JUDGE
    else:
        judge_spec = BranchSpec(name="judge", model=branches[0].model, temperature=0.0)
    judge_name = f"judge:{judge_spec.model}"
    configs[judge_name] = loop_config(judge_spec, scripts, max_tokens=JUDGE_MAX_TOKENS)
    options = dataclasses.replace(flags, judge_model=judge_name)
    if flags.verify is not None:
        verifier_from_spec(flags.verify)  # a bad spec is a usage error, raised before any call
    return [b.label for b in branches], configs, options


async def run_bandit(
    text: str,
    arms: list[str],
    configs: dict[str, AgentLoopConfig],
    options: BanditOptions,
    out: TextIO,
    err: TextIO,
    as_json: bool,
    token: CancelToken,
) -> int:
    """Race once with the learned router; print the answer (or JSON); return the exit code."""
    from .route import result_payload

    sink = JsonLines(out) if as_json else None
    result = await run_bandit_race(text, arms, options, configs=configs, cancel=token, events=sink)
    if sink is not None:
        sink.result({"type": "race_result", **result_payload(result)})
    else:
        out.write(result.text.rstrip() + "\n")
        skipped = " (previews skipped: the router was sure)" if result.previews_skipped else ""
        if result.verified is False:
            skipped += " · no answer passed --verify; showing the first one"
        order = ", ".join(result.order)
        err.write(
            f"[{result.status}] winner: {result.winner} · order: {order}{skipped} · "
            f"cost ${result.cost_usd:.4f}\n"
        )
    out.flush()
    return 0 if result.status == "ok" else 1
