"""What a client receives: the answer of a race, a route or a passthrough call with its facts,
the status of a failure, and the run-log record of a request.

Pure functions of results (no I/O), so the HTTP app and the MCP server shape answers alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..config import RacePlan
from ..errors import GatewayError, ProviderError
from ..metering import Meter
from ..parallel import ParallelLoopOutcome, ParallelLoopResult
from ..race import BanditRaceResult
from ..runlog import BranchRecord, RunRecord
from ..types import Usage
from ._wire import ChatRequest, cut_at_stop, finish_reason, new_completion_id, tool_calls_dicts

__all__ = [
    "Answer",
    "error_of_kind",
    "failure_of",
    "header_text",
    "header_values",
    "race_answer",
    "request_record",
    "route_answer",
    "upstream_error",
    "without_content",
]


@dataclass
class Answer:
    """A decided answer (race, route or a whole passthrough reply) with its facts."""

    completion_id: str
    model: str
    text: str
    finish: str
    usage: Usage
    cost_usd: float
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    phi: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def error_of_kind(kind: str | None, message: str, retry_after: float | None) -> GatewayError:
    """An upstream failure's status: 429 rate limit, 400 bad request or over a per-request
    budget, 503 overloaded, 504 timeout, 502 else."""
    if kind == "rate_limited":
        headers = {"Retry-After": str(max(1, round(retry_after or 1)))}
        return GatewayError(
            429, message, type_="rate_limit_error", code="rate_limited", headers=headers
        )
    if kind == "budget":
        # Not a 429: clients retry those, and the same request is over the same budget again.
        return GatewayError(
            400,
            f"{message.rstrip('.')}. The request is over a per-request budget (tokens or "
            "cost), so sending it again fails the same way; send a shorter conversation or a "
            "lower `max_tokens`.",
            code="over_budget",
        )
    if kind in ("bad_request", "context_overflow"):
        return GatewayError(400, message, code=kind)
    if kind == "overloaded":
        return GatewayError(503, message, type_="upstream_error", code="overloaded")
    if kind == "timeout":
        return GatewayError(504, message, type_="upstream_error", code="timeout")
    return GatewayError(502, message, type_="upstream_error", code=kind or "upstream")


def upstream_error(exc: ProviderError) -> GatewayError:
    return error_of_kind(exc.kind, f"upstream: {exc}", getattr(exc, "retry_after", None))


def failure_of(outcomes: list[ParallelLoopOutcome], what: str) -> GatewayError:
    """One status for a race in which nothing answered: the most telling branch failure."""
    if not outcomes:
        return GatewayError(502, f"{what}: no branch ran.", type_="upstream_error")
    order = ["rate_limited", "overloaded", "timeout", "budget", "bad_request", "context_overflow"]
    kinds = [o.error_kind if o.status != "timeout" else "timeout" for o in outcomes]
    chosen = next((k for k in order if k in kinds), kinds[0])
    detail = "; ".join(f"{o.config.extra.get('arm', o.config_id)}: {o.status}"  # a route's arm
                       + (f" ({o.error})" if o.error else "") for o in outcomes)  # fmt: skip
    retry = max((o.retry_after or 0 for o in outcomes), default=0) or None
    return error_of_kind(chosen, f"{what}: every branch failed: {detail}", retry)


def race_answer(
    request: ChatRequest,
    profile: str,
    plan: RacePlan,
    result: ParallelLoopResult,
    meter: Meter,
    run_id: str,
) -> Answer:
    """The answer of a decided race with its facts (a 4xx/5xx when no branch answered)."""
    winner = result.selected
    if winner is None:
        raise failure_of(result.outcomes, f"race:{profile}")
    labels = plan.labels
    text, cut, calls = _reply(winner, request)
    branches = [
        {
            "name": labels[o.config_index],
            "model": o.config.model_config().spec,
            "status": o.status,
            "usage": o.usage.model_dump(mode="json"),
            "cost_usd": o.cost_usd,
            "latency_s": round(o.latency_s, 4),
        }
        for o in result.outcomes
    ]
    decision = result.decision
    winner_name = labels[winner.config_index]
    return Answer(
        completion_id=new_completion_id(),
        model=request.model,
        text=text,
        finish=finish_reason(winner.final_message, cut),
        usage=meter.paid_usage,
        cost_usd=meter.spent,
        tool_calls=calls,
        phi={
            "kind": "race",
            "profile": profile,
            "winner": winner_name,
            "strategy": plan.strategy,
            "rationale": decision.rationale,
            "scores": {labels[i]: s for i, s in decision.scores.items()},
            "branches": branches,
            "cost_usd": meter.spent,
            "run_id": run_id,
        },
        headers={
            "x-phi-kind": "race",
            "x-phi-winner": winner_name,
            "x-phi-strategy": plan.strategy,
            "x-phi-branches": str(len(branches)),
            "x-phi-cost-usd": f"{meter.spent:.6f}",
            "x-phi-rationale": header_text(decision.rationale or ""),
            "x-phi-branch-usage": branch_usage_header(
                (labels[o.config_index], o.usage.total, o.cost_usd) for o in result.outcomes
            ),
        },
    )


def _reply(
    outcome: ParallelLoopOutcome, request: ChatRequest
) -> tuple[str, bool, list[dict[str, Any]]]:
    """The chosen branch's reply: its text (cut at a stop sequence, and whether it was) and
    the tool calls it ended on, in OpenAI's shape (the client executes them)."""
    if outcome.pending_tool_calls:
        message = outcome.final_message
        text, cut = cut_at_stop(message.text if message else "", request.stop)
        return text, cut, tool_calls_dicts(message)
    text, cut = cut_at_stop(outcome.text, request.stop)
    return text, cut, []


def route_answer(
    request: ChatRequest,
    profile: str,
    result: BanditRaceResult,
    meter: Meter,
    run_id: str,
    completion_id: str,
    ranked: list[dict[str, Any]],
    updates: list[dict[str, Any]],
) -> Answer:
    """The answer of a routed request with the router's facts: its ranking (``ranked``, from
    the ``RouteDecision`` event) and the updates it learned (``updates``, the ``RouteUpdate``
    event's rows: arm, reward, weight, source)."""
    if result.answer is not None:
        text, cut, tool_calls = _reply(result.answer, request)
    else:
        (text, cut), tool_calls = cut_at_stop(result.text, request.stop), []
    scores = {a["arm"]: round(a["score"], 4) for a in ranked}
    ranking = result.ranking.explain() if result.ranking is not None else []
    rewards = [
        {"arm": u["arm"], "reward": u["reward"], "weight": u["weight"], "source": u["source"]}
        for u in updates
    ]
    previews = result.previews.outcomes if result.previews is not None else []
    calls = [
        (str(o.config.extra.get("arm", o.config_id)), call, o)
        for call, outcomes in (("preview", previews), ("answer", result.answers))
        for o in outcomes
    ]
    branches = [
        {
            "arm": arm,
            "call": call,
            "status": o.status,
            "usage": o.usage.model_dump(mode="json"),
            "cost_usd": o.cost_usd,
        }
        for arm, call, o in calls
    ]
    return Answer(
        completion_id=completion_id,
        model=request.model,
        text=text,
        finish=finish_reason(result.answer.final_message if result.answer else None, cut),
        usage=meter.paid_usage,
        cost_usd=meter.spent,
        tool_calls=tool_calls,
        phi={
            "kind": "route",
            "profile": profile,
            "winner": result.winner,
            "action": result.action,
            "contenders": result.contenders,
            "scores": result.scores,
            "ranking": ranking,
            "rewards": rewards,
            "quality": result.quality,
            "cost_usd": meter.spent,
            "run_id": run_id,
            "branches": branches,
        },
        headers={
            "x-phi-kind": "route",
            "x-phi-winner": str(result.winner),
            "x-phi-action": result.action,
            "x-phi-strategy": "bandit",
            "x-phi-cost-usd": f"{meter.spent:.6f}",
            "x-phi-router-scores": header_text(json.dumps(scores)),
            "x-phi-branch-usage": branch_usage_header(
                (f"{arm}/{call}", o.usage.total, o.cost_usd) for arm, call, o in calls
            ),
        },
    )


def request_record(
    request: ChatRequest, meter: Meter, status: str, text: str, started: float
) -> RunRecord:
    """The run-log record of a passthrough call, or of any request that ended before a
    result existed (the client went away): what it asked and what its calls used."""

    usage, model = meter.paid_usage, request.model
    return RunRecord(
        kind="run",
        source="gateway",
        prompt=request.prompt_text,
        status=status,
        winner=model if status == "ok" else None,
        winner_model=model if status == "ok" else None,
        text=text,
        input_tokens=usage.input,
        output_tokens=usage.output,
        cost_usd=meter.spent,
        duration_s=round(time.time() - started, 4),
        plan={"branches": [{"model": model}]},
        extra={"model": model},
        branches=[
            BranchRecord(
                index=0,
                label=model,
                model=model,
                status=status,
                text=text,
                input_tokens=usage.input,
                output_tokens=usage.output,
                cost_usd=meter.spent,
                winner=status == "ok",
                spec={"model": model},
            )
        ],
    )


def branch_usage_header(rows: Iterable[tuple[str, int, float]]) -> str:
    """``name=tokens:$cost`` per branch call, ``;``-separated (a branch answering twice — a
    route's preview and answer — appears twice)."""
    return header_text(";".join(f"{name}={tokens}:${cost:.6f}" for name, tokens, cost in rows))


def header_text(text: str, limit: int = 512) -> str:
    """A header-safe one-line (latin-1, printable) version of ``text``, cut at ``limit``
    characters."""
    flat = "".join(c if c.isprintable() else "?" for c in " ".join(text.split())[:limit])
    return flat.encode("latin-1", "replace").decode("latin-1")


def header_values(headers: dict[str, str] | None) -> dict[str, str] | None:
    """Every value made header-safe (:func:`header_text`): branch and profile names come from
    configs and may hold any character, which a response header cannot carry."""
    if headers is None:
        return None
    return {k: header_text(v, limit=8192) for k, v in headers.items()}


def without_content(record: RunRecord) -> RunRecord:
    return record.model_copy(
        update={
            "prompt": "",
            "system": None,
            "text": "",
            "messages": None,
            "branches": [b.model_copy(update={"text": ""}) for b in record.branches],
        }
    )
