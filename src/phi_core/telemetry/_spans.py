"""``EventSpans``: the one event stream, turned into OpenTelemetry GenAI spans.

A span per agent run (``invoke_agent``), per model call (``chat``: from ``TurnRequest`` to the
assistant's ``MessageEnd``) and per tool execution (``execute_tool``), in the GenAI semantic
conventions. A race is an ``invoke_workflow race`` span (``race.preview``/``race.answer`` for the
bandit race's two races) that parents its branches and its judge's runs, with the judge's scores
as ``gen_ai.evaluation.result`` span events; a bandit race is an ``invoke_workflow bandit_race``
span (from its ``RouteDecision`` to its ``BanditRaceEnd``) that parents its races and the
grading judge, with the router's ranking as attributes and each reward as a ``phi.route.update``
event. A selection run is an ``invoke_workflow select`` span with an ``invoke_agent`` span per
evaluation (combination x datapoint, with its score, usage and cost). Cost is ``phi.cost_usd`` (the conventions define none). Warnings (a judge that fell back,
a hook that raised) and compactions are ``phi.warning`` / ``phi.compaction`` events on their
run's span. Everything else phi-specific is under ``phi.*``.

Where a run sits comes from the events alone: a branch by its loop id in an open race of its
session, a sub-agent by its ``parent_loop_id`` (under the tool call that started it when that is
the only one running), a judge by its session having an open race, a grader by its session
having an open bandit race; anything else starts at the caller's current span, so runs nest under
an application's own spans. A run that continues an earlier one (``parent_loop_id`` of a finished
run) links to it.

Prompt and completion content (``gen_ai.input.messages``, ``gen_ai.output.messages``,
``gen_ai.system_instructions``, ``gen_ai.tool.definitions``, tool arguments and results, a judge's
rationale, a judge's reply quoted by a warning) is recorded only with ``capture_content=True``,
redacted and cut to ``max_content_chars``; without it a warning is recorded by its
``message_without_content``. Error descriptions are redacted too.

A race span's ``phi.race.status`` is the race's status as its ``ParallelLoopEnd`` gives it (the
result's ``status``, or ``cancelled``/``error`` when the race raised); any status but ``ok`` is
the span's ``error.type`` (``_OTHER`` for ``error``).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import MissingExtraError
from ..events import (
    AgentEnd,
    AgentStart,
    BanditRaceEnd,
    CompactionEnded,
    MessageEnd,
    MessageUpdate,
    ParallelLoopEnd,
    ParallelLoopStart,
    RouteDecision,
    RouteUpdate,
    SelectionEnd,
    SelectionEvaluation,
    SelectionStart,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnRequest,
    Warning,
)
from ..types import AssistantMessage, Pricing, Usage
from . import _content as content

try:
    from opentelemetry import trace
    from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, Tracer
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("OpenTelemetry spans", "otel") from exc

__all__ = ["EventSpans", "provider_name"]

_PROVIDER_NAMES = {
    "anthropic": "anthropic",
    "azure": "azure.ai.openai",
    "bedrock": "aws.bedrock",
    "deepseek": "deepseek",
    "google": "gcp.gemini",
    "groq": "groq",
    "mistral": "mistral_ai",
    "openai": "openai",
    "openai-responses": "openai",
    "vertex": "gcp.vertex_ai",
    "xai": "x_ai",
}
_IN_PROCESS = frozenset({"local"})
_ENDED_KEPT = 1024
"""Finished runs remembered so a continuation can link to the run it continues."""


def provider_name(provider: str) -> str:
    """The conventions' ``gen_ai.provider.name`` for a phi-core provider (else its own name)."""
    return _PROVIDER_NAMES.get(provider, provider or "_OTHER")


@dataclass
class _Race:
    span: Span
    session_id: str
    loop_ids: list[str]
    config_ids: list[str]
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0


@dataclass
class _Agent:
    span: Span
    session_id: str
    model: str
    provider: str
    kind: SpanKind
    pricing: Pricing | None
    race: _Race | None
    chat: Span | None = None
    chat_started: int = 0
    first_chunk: int | None = None
    last_error: str | None = None
    tools: dict[str, Span] = field(default_factory=dict)


class EventSpans:
    """An event sink (and observer) that records spans through ``tracer``.

    Pass it as ``events=`` to one run, or let :func:`~phi_core.telemetry.instrument` register it
    for every run. It is thread-safe and never raises into the run.
    """

    def __init__(
        self, tracer: Tracer, *, capture_content: bool = False, max_content_chars: int | None = None
    ) -> None:
        self.tracer = tracer
        self.capture_content = capture_content
        self.max_content_chars = max_content_chars
        self._lock = threading.Lock()
        self._agents: dict[str, _Agent] = {}
        self._races: dict[str, list[_Race]] = {}
        self._bandits: dict[str, Span] = {}
        self._selections: dict[str, Span] = {}
        self._ended: OrderedDict[str, SpanContext] = OrderedDict()
        self._handlers: dict[type, Callable[[Any, int], None]] = {
            MessageUpdate: self._update,
            AgentStart: self._agent_start,
            AgentEnd: self._agent_end,
            TurnRequest: self._turn_request,
            MessageEnd: self._message_end,
            ToolExecutionStart: self._tool_start,
            ToolExecutionEnd: self._tool_end,
            ParallelLoopStart: self._race_start,
            ParallelLoopEnd: self._race_end,
            RouteDecision: self._route_decision,
            RouteUpdate: self._route_update,
            BanditRaceEnd: self._bandit_end,
            SelectionStart: self._selection_start,
            SelectionEvaluation: self._selection_evaluation,
            SelectionEnd: self._selection_end,
            Warning: self._warning,
            CompactionEnded: self._compaction,
        }

    def __call__(self, event: Any) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            with self._lock:
                handler(event, time.time_ns())

    @property
    def open_spans(self) -> int:
        """Spans started and not yet ended (0 once every run seen has ended)."""
        with self._lock:
            agents = sum(1 + (a.chat is not None) + len(a.tools) for a in self._agents.values())
            races = sum(map(len, self._races.values()))
            return agents + races + len(self._bandits) + len(self._selections)

    # ------------------------------------------------------------------ agent runs

    def _place(
        self, loop_id: str, session_id: str | None, parent_loop_id: str | None
    ) -> tuple[Span | None, str, _Race | None, int | None]:
        """(parent span, role, the race whose cost it adds to, branch index) of a run."""
        sessions = [session_id] if session_id is not None else list(self._races)
        for session in sessions:
            for race in reversed(self._races.get(session, ())):
                if loop_id in race.loop_ids:
                    return race.span, "branch", race, race.loop_ids.index(loop_id)
        parent = self._agents.get(parent_loop_id) if parent_loop_id else None
        if parent is not None:
            tools = list(parent.tools.values())
            return (tools[0] if len(tools) == 1 else parent.span), "sub_agent", None, None
        if session_id is not None:
            races = self._races.get(session_id)
            if races:
                return races[-1].span, "judge", races[-1], None
            bandit = self._bandits.get(session_id)
            if bandit is not None:
                return bandit, "grader", None, None
        return None, "agent", None, None

    def _start(
        self,
        name: str,
        parent: Span | None,
        attributes: dict[str, Any],
        now: int,
        kind: SpanKind = SpanKind.INTERNAL,
        links: list[Link] | None = None,
    ) -> Span:
        context = trace.set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(
            name, context=context, kind=kind, attributes=attributes, links=links, start_time=now
        )

    def _agent_start(self, event: AgentStart, now: int) -> None:
        snapshot = event.config_snapshot or {}
        spec = str(snapshot.get("model") or "")
        provider, _, model = spec.partition(":")
        parent, role, race, index = self._place(
            event.loop_id, event.session_id, event.parent_loop_id
        )
        name = str(snapshot.get("config_id") or spec or "agent")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider_name(provider),
            "gen_ai.agent.id": event.agent_id,
            "gen_ai.agent.name": name,
            "gen_ai.conversation.id": event.session_id,
            "gen_ai.request.model": model or spec,
            "phi.model": spec,
            "phi.loop_id": event.loop_id,
            "phi.role": role,
            "phi.continuation_kind": event.continuation_kind,
            **_request_attributes(snapshot),
        }
        if index is not None:
            attributes["phi.race.branch_index"] = index
        links = None
        if event.parent_loop_id:
            attributes["phi.parent_loop_id"] = event.parent_loop_id
            earlier = self._ended.get(event.parent_loop_id)
            if earlier is not None:
                links = [Link(earlier, {"phi.link": "continues"})]
        stale = self._agents.pop(event.loop_id, None)
        if stale is not None:  # a loop id reused before its run ended: close the old span
            self._finish_agent(stale, None, now)
        pricing = snapshot.get("pricing")
        self._agents[event.loop_id] = _Agent(
            span=self._start(f"invoke_agent {name}", parent, attributes, now, links=links),
            session_id=event.session_id,
            model=model or spec,
            provider=provider,
            kind=SpanKind.INTERNAL if provider in _IN_PROCESS else SpanKind.CLIENT,
            pricing=Pricing.model_validate(pricing) if isinstance(pricing, dict) else None,
            race=race,
        )

    def _agent_end(self, event: AgentEnd, now: int) -> None:
        agent = self._agents.pop(event.loop_id, None)
        if agent is None:  # vetoed before it started, or a branch that never got to run
            parent, role, race, index = self._place(event.loop_id, None, None)
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": "_OTHER",
                "phi.loop_id": event.loop_id,
                "phi.role": role,
            }
            if index is not None:
                attributes["phi.race.branch_index"] = index
            span = self._start("invoke_agent", parent, attributes, now)
            agent = _Agent(span, "", "", "", SpanKind.INTERNAL, None, race)
        self._finish_agent(agent, event, now)
        self._ended[event.loop_id] = agent.span.get_span_context()
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)

    def _finish_agent(self, agent: _Agent, event: AgentEnd | None, now: int) -> None:
        reason = event.reason if event is not None else "error"
        leftover = "cancelled" if reason == "cancelled" else "_OTHER"
        if agent.chat is not None:
            _fail(agent.chat, leftover, "the run ended before the model call did")
            agent.chat.end(now)
            agent.chat = None
        for span in agent.tools.values():
            _fail(span, leftover, "the run ended before the tool call did")
            span.end(now)
        agent.tools.clear()
        span = agent.span
        if event is None:
            _fail(span, "_OTHER", "the run's loop id was reused before it ended")
            span.end(now)
            return
        span.set_attributes(_usage_attributes(event.usage))
        span.set_attribute("phi.cost_usd", event.cost_usd)
        span.set_attribute("phi.end_reason", reason)
        if reason != "completed":
            kind = agent.last_error if reason in ("error", "limit") and agent.last_error else reason
            if kind == "error":
                kind = "_OTHER"
            # an input filter's reason may quote the input: content
            rejection = event.rejection if self.capture_content else None
            _fail(span, kind, event.error or rejection or reason)
        if agent.race is not None:
            agent.race.usage = agent.race.usage + event.usage
            agent.race.cost += event.cost_usd
        span.end(now)

    def _warning(self, event: Warning, now: int) -> None:
        """A warning (a judge that fell back, a hook that raised) as an event on its run's span
        (or its race's, for a race-level warning)."""
        agent = self._agents.get(event.loop_id)
        span = agent.span if agent is not None else None
        if span is None:  # a race's own, or its judge's before the judge ran: the race's span
            loop_id = event.loop_id
            for session, races in self._races.items():
                if loop_id == session or loop_id.startswith(session + "."):
                    span = races[-1].span
        if span is not None:
            # a message quoting model-written text (a judge's reply) is content
            text = event.message
            if not self.capture_content and event.message_without_content is not None:
                text = event.message_without_content
            message = content.scrub(text, 1000)
            span.add_event("phi.warning", {"phi.message": message}, timestamp=now)

    def _compaction(self, event: CompactionEnded, now: int) -> None:
        agent = self._agents.get(event.loop_id)
        if agent is not None:
            agent.span.add_event(
                "phi.compaction",
                {
                    "phi.compaction.reason": event.reason,
                    "phi.compaction.messages_before": event.messages_before,
                    "phi.compaction.messages_after": event.messages_after,
                    "phi.compaction.tokens_before": event.estimated_tokens_before,
                    "phi.compaction.tokens_after": event.estimated_tokens_after,
                    # only the kind of failure: a strategy's message may quote the conversation
                    **(
                        {"phi.compaction.error_type": event.error.split(":", 1)[0]}
                        if event.error
                        else {}
                    ),
                },
                timestamp=now,
            )

    # ------------------------------------------------------------------ model calls

    def _turn_request(self, event: TurnRequest, now: int) -> None:
        agent = self._agents.get(event.loop_id)
        if agent is None:
            return
        if agent.chat is not None:  # sent again after compacting on a context overflow
            _fail(agent.chat, "context_overflow", "the request did not fit; compacted and resent")
            agent.chat.end(now)
        payload = event.payload
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(agent.provider),
            "gen_ai.request.model": agent.model,
            "gen_ai.conversation.id": agent.session_id,
            "phi.turn_index": event.turn_index,
            **_request_attributes(payload),
        }
        if payload.get("response_format"):
            attributes["gen_ai.output.type"] = "json"
        if self.capture_content:
            limit = self.max_content_chars
            attributes["gen_ai.input.messages"] = content.input_messages(payload, limit)
            system = content.system_instructions(payload, limit)
            if system is not None:
                attributes["gen_ai.system_instructions"] = system
            tools = payload.get("tools")
            if tools:
                definitions = [{"type": "function", **t} for t in tools]
                attributes["gen_ai.tool.definitions"] = content.to_json(definitions, limit)
        agent.chat = self._start(
            f"chat {agent.model}", agent.span, attributes, now, kind=agent.kind
        )
        agent.chat_started, agent.first_chunk = now, None

    def _update(self, event: MessageUpdate, now: int) -> None:
        agent = self._agents.get(event.loop_id)
        if agent is not None and agent.chat is not None and agent.first_chunk is None:
            agent.first_chunk = now

    def _message_end(self, event: MessageEnd, now: int) -> None:
        message = event.message
        if not isinstance(message, AssistantMessage):
            return
        agent = self._agents.get(event.loop_id)
        if agent is None or agent.chat is None:
            return
        span, agent.chat = agent.chat, None
        span.set_attributes(_usage_attributes(message.usage))
        span.set_attribute("gen_ai.response.model", message.model or agent.model)
        span.set_attribute(
            "gen_ai.response.finish_reasons", [content.finish_reason(message.stop_reason)]
        )
        span.set_attribute("phi.cost_usd", message.usage.cost(agent.pricing))
        if agent.first_chunk is not None:
            span.set_attribute(
                "phi.time_to_first_chunk_s", (agent.first_chunk - agent.chat_started) / 1e9
            )
        if self.capture_content:
            span.set_attribute(
                "gen_ai.output.messages",
                content.output_messages(message.model_dump(mode="json"), self.max_content_chars),
            )
        if message.stop_reason in ("error", "aborted"):
            kind = message.error_kind or (
                "cancelled" if message.stop_reason == "aborted" else "_OTHER"
            )
            agent.last_error = kind
            _fail(span, kind, message.error_message or kind)
        span.end(now)

    # ------------------------------------------------------------------ tools

    def _tool_start(self, event: ToolExecutionStart, now: int) -> None:
        agent = self._agents.get(event.loop_id)
        if agent is None:
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.tool_name,
            "gen_ai.tool.call.id": event.tool_call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": agent.session_id,
        }
        if self.capture_content and event.args is not None:
            attributes["gen_ai.tool.call.arguments"] = content.to_json(
                event.args, self.max_content_chars
            )
        agent.tools[event.tool_call_id] = self._start(
            f"execute_tool {event.tool_name}", agent.span, attributes, now
        )

    def _tool_end(self, event: ToolExecutionEnd, now: int) -> None:
        agent = self._agents.get(event.loop_id)
        span = agent.tools.pop(event.tool_call_id, None) if agent is not None else None
        if span is None:
            return
        text = "".join(getattr(c, "text", "") for c in event.result.content)
        if event.child_loop_id:
            span.set_attribute("phi.child_loop_id", event.child_loop_id)
        if self.capture_content:
            span.set_attribute(
                "gen_ai.tool.call.result", content.scrub(text, self.max_content_chars)
            )
        if event.cancelled:
            _fail(span, "cancelled", "the tool was cancelled with its run")
        elif event.is_error:
            why = text if self.capture_content else "the tool reported an error"
            _fail(span, "tool_error", why)
        span.end(now)

    # ------------------------------------------------------------------ races

    def _race_start(self, event: ParallelLoopStart, now: int) -> None:
        workflow = f"race.{event.label}" if event.label else "race"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.workflow.name": workflow,
            "gen_ai.conversation.id": event.session_id,
            "phi.race.size": len(event.loop_ids),
            "phi.race.loop_ids": list(event.loop_ids),
            "phi.race.config_ids": list(event.config_ids),
        }
        if event.label:
            attributes["phi.race.label"] = event.label
        parent = self._bandits.get(event.session_id)
        span = self._start(f"invoke_workflow {workflow}", parent, attributes, now)
        self._races.setdefault(event.session_id, []).append(
            _Race(span, event.session_id, list(event.loop_ids), list(event.config_ids))
        )

    def _race_end(self, event: ParallelLoopEnd, now: int) -> None:
        stack = self._races.get(event.session_id)
        if not stack:
            return
        race = stack.pop()
        if not stack:
            del self._races[event.session_id]
        span = race.span
        decision = event.decision or {}
        strategy = str(decision.get("strategy") or "")
        selected = event.selected_config_index
        attributes: dict[str, Any] = {
            "phi.cost_usd": race.cost,
            "phi.usage.input_tokens": _input_tokens(race.usage),
            "phi.usage.output_tokens": race.usage.output,
            "phi.race.evaluation_tokens": event.evaluation_usage.total,
            "phi.race.cancelled": event.cancelled,
        }
        if strategy:
            attributes["phi.race.strategy"] = strategy
        for key in ("tie", "fallback", "early_accept"):
            if key in decision:
                attributes[f"phi.race.{key}"] = bool(decision[key])
        for key, value in (decision.get("details") or {}).items():
            if isinstance(value, bool | int | float):  # figures only: texts may quote answers
                attributes[f"phi.race.details.{key}"] = value
        if selected is not None:
            attributes["phi.race.selected_index"] = selected
            if event.selected_loop_id:
                attributes["phi.race.selected_loop_id"] = event.selected_loop_id
            if selected < len(race.config_ids):
                attributes["phi.race.selected_config_id"] = race.config_ids[selected]
        if self.capture_content and decision.get("rationale"):
            attributes["phi.race.rationale"] = content.scrub(
                str(decision["rationale"]), self.max_content_chars
            )
        span.set_attributes(attributes)
        for key, score in (decision.get("scores") or {}).items():
            index = int(key)
            span.add_event(
                "gen_ai.evaluation.result",
                {
                    "gen_ai.evaluation.name": strategy or "race",
                    "gen_ai.evaluation.score.value": float(score),
                    "gen_ai.evaluation.score.label": (
                        "selected" if index == selected else "not_selected"
                    ),
                    "phi.race.branch_index": index,
                    "phi.loop_id": race.loop_ids[index] if index < len(race.loop_ids) else "",
                },
                timestamp=now,
            )
        status = event.status
        if status is None:  # a record from before ParallelLoopEnd carried the race's status
            status = "cancelled" if event.cancelled else "all_failed" if selected is None else "ok"
        span.set_attribute("phi.race.status", status)
        if status == "cancelled":
            _fail(span, "cancelled", event.error or "the race was cancelled")
        elif status == "error":  # the race raised (its strategy failed, ...): not its branches
            _fail(span, "_OTHER", event.error or "the race raised")
        elif status != "ok":  # the rationale may quote a judge's reply: content
            rationale = decision.get("rationale") if self.capture_content else None
            _fail(span, status, str(rationale or event.error or "no branch was selected"))
        span.end(now)

    # ------------------------------------------------------------------ bandit races

    def _route_decision(self, event: RouteDecision, now: int) -> None:
        ranking = event.ranking
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.workflow.name": "bandit_race",
            "gen_ai.conversation.id": event.session_id,
            "phi.route.policy": event.policy,
            "phi.route.namespace": event.namespace,
            "phi.route.action": event.action,
            "phi.route.contenders": list(event.contenders),
            "phi.route.reason": event.reason,
            "phi.route.arms": [str(r.get("arm", "")) for r in ranking],
            "phi.route.scores": [float(r.get("score") or 0.0) for r in ranking],
            "phi.route.means": [float(r.get("mean") or 0.0) for r in ranking],
            "phi.route.widths": [float(r.get("width") or 0.0) for r in ranking],
            "phi.route.counts": [int(r.get("n") or 0) for r in ranking],
        }
        stale = self._bandits.pop(event.session_id, None)
        if stale is not None:
            _fail(stale, "_OTHER", "a second routing decision arrived for this race")
            stale.end(now)
        span = self._start("invoke_workflow bandit_race", None, attributes, now)
        span.add_event(
            "phi.route.decision",
            {
                "phi.route.action": event.action,
                "phi.route.contenders": list(event.contenders),
                "phi.route.explanation": [str(line) for line in event.explanation],
            },
            timestamp=now,
        )
        self._bandits[event.session_id] = span

    def _route_update(self, event: RouteUpdate, now: int) -> None:
        span = self._bandits.get(event.session_id)
        if span is None:
            return
        for row in event.rewards:
            attributes: dict[str, Any] = {"phi.route.arm": str(row.get("arm", ""))}
            for key in ("reward", "quality", "weight", "latency_term", "cost_term", "penalty"):
                value = row.get(key)
                if isinstance(value, int | float):
                    attributes[f"phi.route.{key}"] = float(value)
            if row.get("source"):
                attributes["phi.route.source"] = str(row["source"])
            span.add_event("phi.route.update", attributes, timestamp=now)

    def _bandit_end(self, event: BanditRaceEnd, now: int) -> None:
        span = self._bandits.pop(event.session_id, None)
        if span is None:  # it ended before it decided anything
            span = self._start(
                "invoke_workflow bandit_race",
                None,
                {
                    "gen_ai.operation.name": "invoke_workflow",
                    "gen_ai.workflow.name": "bandit_race",
                    "gen_ai.conversation.id": event.session_id,
                },
                now,
            )
        attributes: dict[str, Any] = {
            "phi.bandit.status": event.status,
            "phi.route.action": event.action,
            "phi.cost_usd": event.cost_usd,
            "phi.usage.input_tokens": _input_tokens(event.usage),
            "phi.usage.output_tokens": event.usage.output,
        }
        if event.winner is not None:
            attributes["phi.route.winner"] = event.winner
        if event.quality is not None:
            attributes["phi.bandit.quality"] = event.quality
        if event.verified is not None:
            attributes["phi.bandit.verified"] = event.verified
        span.set_attributes(attributes)
        if event.status != "ok":  # "error": the run raised, not its arms (as for races)
            kind = "_OTHER" if event.status == "error" else event.status
            _fail(span, kind, event.error or event.status)
        span.end(now)

    # ------------------------------------------------------------------ selection

    def _selection_start(self, event: SelectionStart, now: int) -> None:
        self._selections[event.session_id] = self._start(
            "invoke_workflow select",
            None,
            {
                "gen_ai.operation.name": "invoke_workflow",
                "gen_ai.workflow.name": "select",
                "gen_ai.conversation.id": event.session_id,
                "phi.select.algorithm": event.algorithm,
                "phi.select.combinations": event.combinations,
                "phi.select.datapoints": event.datapoints,
            },
            now,
        )

    def _selection_evaluation(self, event: SelectionEvaluation, now: int) -> None:
        """An ``invoke_agent`` span for one evaluation, placed at the time it ran (it ends
        now and lasted ``latency_s``). The agent's own model calls go through the selection's
        metered handles or interception, not an agent loop, so they appear as ``phi.models``
        and the usage attributes rather than as ``chat`` spans."""
        start = now - int(max(event.latency_s, 0.0) * 1e9)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": event.combination,
            "gen_ai.conversation.id": event.session_id,
            "phi.select.datapoint": event.datapoint,
            "phi.select.score": event.score,
            "phi.select.status": event.status,
            "phi.calls": event.calls,
            "phi.models": sorted(event.model_usage),
            "phi.cost_usd": event.cost_usd,
            **_usage_attributes(event.usage),
        }
        span = self._start(
            f"invoke_agent {event.combination}",
            self._selections.get(event.session_id),
            attributes,
            start,
        )
        if event.error is not None:
            _fail(span, event.error_kind or event.status, event.error)
        span.end(now)

    def _selection_end(self, event: SelectionEnd, now: int) -> None:
        span = self._selections.pop(event.session_id, None)
        if span is None:
            return
        attributes: dict[str, Any] = {
            "phi.select.status": event.status,
            "phi.select.evaluations": event.evaluations,
            "phi.cost_usd": event.cost_usd,
            **_usage_attributes(event.usage),
        }
        if event.best is not None:
            attributes["phi.select.best"] = event.best
        span.set_attributes(attributes)
        if event.status in ("error", "cancelled"):
            _fail(span, event.status, event.error or event.status)
        span.end(now)


def _fail(span: Span, kind: str, description: str) -> None:
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, content.scrub(description, 1000)))


def _input_tokens(usage: Usage) -> int:
    """Every input token, cached ones included (what ``gen_ai.usage.input_tokens`` counts)."""
    return usage.input + usage.cache_read + usage.cache_write


def _usage_attributes(usage: Usage) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": _input_tokens(usage),
        "gen_ai.usage.output_tokens": usage.output,
    }
    if usage.cache_read:
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read
    if usage.cache_write:
        attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write
    if usage.reasoning:
        attributes["phi.usage.reasoning_tokens"] = usage.reasoning
    return attributes


def _request_attributes(settings: dict[str, Any]) -> dict[str, Any]:
    """The sampling settings a request (or a config snapshot) set explicitly."""
    attributes: dict[str, Any] = {}
    for key, kind in (("max_tokens", int), ("temperature", float), ("top_p", float), ("seed", int)):
        value = settings.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[f"gen_ai.request.{key}"] = kind(value)
    return attributes
