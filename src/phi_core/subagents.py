"""``SubAgentTool``: a child agent loop the parent model calls like any other tool.

::

    researcher = (
        SubAgentTool("researcher", "openai:gpt-4o-mini")
        .with_description("Searches and reads files to gather information.")
        .with_system_prompt("You are a research assistant. Be thorough and concise.")
        .with_tools([read_file, search])
        .with_max_turns(10)
    )
    agent = BasicAgent("anthropic:claude-sonnet-4-5").with_sub_agent(researcher)

The tool takes ``{"task": str}`` and answers with the child's final text. Each call is a fresh
conversation in its own session (loop id ``{child_session}.sub.1``) whose ``AgentStart`` names the
calling loop as its parent, so session records link the two both ways.

* **Events**: every event of the child (text deltas, tool calls, progress, its ``AgentEnd``)
  reaches the parent's event sink and session recorder with the child's ``loop_id``; the parent
  also sees the child's text as ``ToolExecutionUpdate`` and the child's tool calls as
  ``ProgressMessage`` lines of the calling tool.
* **Usage**: the child's usage and cost are added to the parent run's totals (and count against
  the parent's token and cost limits) however the child ends: completed, failed, timed out or
  cancelled (what it had spent by then, a partial reply included).
* **Limits**: when the calling run says what its :class:`ExecutionLimits` have left
  (``ToolContext.limits_left``), the child runs within it: its ``max_total_tokens``,
  ``max_cost`` and ``max_duration`` are lowered to what is left (its own stay when tighter;
  its ``max_turns`` is its own), and a call is refused when one of them is used up. Sub-agents
  the model calls in one parallel batch split the tokens and dollars left when the batch starts
  equally, so together they stay within the parent's limits (each child checks its own share
  before each turn; the time left is shared as it passes); sub-agents called one after another
  in a turn (sequential execution, or later batches) each get what the earlier ones left.
* **Cancellation**: cancelling the parent (token or task) cancels the child.
* **No nesting**: a sub-agent cannot be given sub-agent tools (phi-core's rule against endless
  delegation chains). This is checked again on every call: a sub-agent with sub-agent tools (one
  appended to ``tools`` directly), or one already running further up the call chain, is not run
  and the call gets an error result. A tool that builds a fresh sub-agent on every call (from
  an agent that has the tool) escapes both checks, so the depth of the chain is capped too: a
  call is refused when ``max_depth`` sub-agents (default :data:`DEFAULT_MAX_DEPTH`, set with
  :meth:`SubAgentTool.with_max_depth`) are already running above it.
* **From an agent**: :meth:`SubAgentTool.from_agent` copies an agent's settings, but not its
  steering and follow-up queues: messages sent to the agent stay the agent's.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .context.compaction import CompactionConfig
from .context.limits import ExecutionLimits
from .errors import UserError
from .events import AgentEnd, MessageUpdate, ToolExecutionStart
from .loop import AgentContext, AgentLoopConfig, LoopResult, ToolExecution, agent_loop
from .providers.base import CacheConfig, ModelConfig, Provider
from .providers.retry import RetryPolicy
from .tools.base import ToolContext, ToolResult
from .types import TextDelta, ThinkingLevel

if TYPE_CHECKING:
    from .agent import BasicAgent

__all__ = ["DEFAULT_MAX_DEPTH", "SubAgentTool"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_MAX_TURNS = 10
DEFAULT_MAX_DEPTH = 8
"""How many sub-agents may run one inside another in one call chain, by default."""

_RUNNING: ContextVar[tuple[SubAgentTool, ...]] = ContextVar("phi_core_sub_agents", default=())
"""The sub-agents running in this call chain, outermost first (see ``_nesting_refusal``)."""


class SubAgentTool:
    """A sub-agent as a tool; see the module docstring. Builder methods return ``self``."""

    spends_limits = True
    """Its model calls count against the calling run's limits: calls of it started together
    split what is left (see ``ToolRunner``)."""

    def __init__(
        self,
        name: str,
        model: str | ModelConfig | None = None,
        *,
        provider: Provider | None = None,
        description: str | None = None,
        system_prompt: str | None = None,
        tools: Sequence[Any] = (),
        max_turns: int = DEFAULT_MAX_TURNS,
        config: AgentLoopConfig | None = None,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise UserError(
                f"A sub-agent name must be 1-64 letters, digits, '_' or '-' (it becomes a tool "
                f"name), got {name!r}."
            )
        self.name = name
        self.description = description or f"Delegate a task to the {name} sub-agent."
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "What the sub-agent should do."}
            },
            "required": ["task"],
            "additionalProperties": False,
        }
        self.timeout: float | None = None
        self.max_depth = DEFAULT_MAX_DEPTH
        """The most sub-agents running one inside another, this one included: a call made
        with that many already running above it is refused."""
        self.system_prompt = system_prompt
        self.tools: list[Any] = []
        base = config or AgentLoopConfig()
        self.config = dataclasses.replace(
            base,
            model=model if model is not None else base.model,
            provider=provider if provider is not None else base.provider,
            first_turn_trigger="sub_agent",
        )
        self.with_tools(tools).with_max_turns(max_turns)

    def __repr__(self) -> str:
        return f"SubAgentTool({self.name!r}, tools={[t.name for t in self.tools]!r})"

    @classmethod
    def from_agent(
        cls, name: str, agent: BasicAgent, description: str | None = None
    ) -> SubAgentTool:
        """A sub-agent with ``agent``'s model, settings, system prompt (skills included) and
        tools; later changes to ``agent`` do not affect it."""
        # Not the agent's steering and follow-up queues: what is sent to the agent is for it,
        # not for a copy of it running as its tool.
        config = agent.build_config(get_steering_messages=None, get_follow_up_messages=None)
        return cls(
            name,
            description=description,
            system_prompt=agent.effective_system_prompt(),
            tools=agent.tools,
            config=config,
        )

    # ------------------------------------------------------------------ builder

    def _set(self, **changes: Any) -> SubAgentTool:
        self.config = dataclasses.replace(self.config, **changes)
        return self

    @property
    def inherits_model(self) -> bool:
        """No model and no provider set: ``BasicAgent.with_sub_agent`` fills in its own."""
        return self.config.model is None and self.config.provider is None

    def with_description(self, description: str) -> SubAgentTool:
        self.description = description
        return self

    def with_system_prompt(self, prompt: str | None) -> SubAgentTool:
        self.system_prompt = prompt
        return self

    def with_tools(self, tools: Sequence[Any]) -> SubAgentTool:
        nested = [t.name for t in tools if isinstance(t, SubAgentTool)]
        if nested:
            raise UserError(
                f"Sub-agent {self.name!r} cannot be given sub-agent tools ({', '.join(nested)}): "
                "sub-agents do not nest. Register every sub-agent on the parent agent instead."
            )
        self.tools = list(tools)
        return self

    def with_model(self, model: str | ModelConfig) -> SubAgentTool:
        return self._set(model=model)

    def with_provider(self, provider: Provider | None) -> SubAgentTool:
        """Bypass the provider registry (a ``ScriptedProvider`` in tests)."""
        return self._set(provider=provider)

    def with_max_turns(self, max_turns: int) -> SubAgentTool:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise UserError(f"max_turns must be an integer >= 1, got {max_turns!r}.")
        limits = self.config.limits or ExecutionLimits()
        return self._set(limits=dataclasses.replace(limits, max_turns=max_turns))

    def with_limits(self, limits: ExecutionLimits | None) -> SubAgentTool:
        return self._set(limits=limits)

    def with_max_tokens(self, max_tokens: int | None) -> SubAgentTool:
        return self._set(max_tokens=max_tokens)

    def with_thinking(self, level: ThinkingLevel) -> SubAgentTool:
        return self._set(thinking=level)

    def with_temperature(self, temperature: float | None) -> SubAgentTool:
        return self._set(temperature=temperature)

    def with_cache(self, cache: bool | str | CacheConfig) -> SubAgentTool:
        return self._set(cache=CacheConfig.of(cache))

    def with_tool_execution(self, strategy: ToolExecution) -> SubAgentTool:
        return self._set(tool_execution=strategy)

    def with_retry(self, retry: RetryPolicy) -> SubAgentTool:
        return self._set(retry=retry)

    def with_compaction(self, compaction: CompactionConfig | None) -> SubAgentTool:
        return self._set(compaction=compaction)

    def with_max_depth(self, depth: int) -> SubAgentTool:
        """Cap the chain of sub-agents running one inside another, this one included (default
        :data:`DEFAULT_MAX_DEPTH`); 1 refuses to run inside any other sub-agent."""
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise UserError(f"max_depth must be an integer >= 1, got {depth!r}.")
        self.max_depth = depth
        return self

    def with_timeout(self, seconds: float | None) -> SubAgentTool:
        """Bound each call (the parent gets a timeout error result and the child is cancelled)."""
        self.timeout = seconds
        return self

    def with_config(self, **changes: Any) -> SubAgentTool:
        """Set any other :class:`AgentLoopConfig` field."""
        return self._set(**changes)

    # ------------------------------------------------------------------ running

    def _nesting_refusal(self) -> str | None:
        """Why this sub-agent may not run (sub-agents do not nest), or None.

        ``with_tools`` refuses sub-agent tools, but ``tools`` is a plain list; this is checked
        again on every call, and a sub-agent already running further up the call chain (reached
        again through some other tool) is refused too, so delegation cannot recurse.
        """
        nested = [t.name for t in self.tools if isinstance(t, SubAgentTool)]
        if nested:
            return (
                f"The sub-agent {self.name!r} was not run: it has sub-agent tools "
                f"({', '.join(nested)}) and sub-agents do not nest. Register every sub-agent on "
                "the parent agent instead."
            )
        chain = _RUNNING.get()
        if any(running is self for running in chain):
            return (
                f"The sub-agent {self.name!r} was not run: it is already running further up this "
                "call chain, and sub-agents do not nest."
            )
        if len(chain) >= self.max_depth:
            names = " > ".join(running.name for running in chain)
            return (
                f"The sub-agent {self.name!r} was not run: the sub-agents running one inside "
                f"another above this call ({names}) are already {len(chain)} deep, and at most "
                f"{self.max_depth} may be. Do this task yourself instead of delegating it further."
            )
        return None

    def _config_for(self, ctx: ToolContext) -> AgentLoopConfig | str:
        """The child's config: its limits tightened to what the calling run's limits have left
        (``ToolContext.limits_left``, when the run gives it), or why the child cannot run."""
        left = ctx.limits_left
        if left is None:
            return self.config
        used_up = left.used_up()
        if used_up is not None:
            return (
                f"The sub-agent {self.name!r} was not run: the calling run's {used_up} is used up."
            )
        limits = left.bound(self.config.limits)
        if limits is self.config.limits:
            return self.config
        return dataclasses.replace(self.config, limits=limits)

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        task = args.get("task")
        if not isinstance(task, str) or not task.strip():
            return ToolResult.error("The `task` argument (a non-empty string) is required.")
        refusal = self._nesting_refusal()
        if refusal is not None:
            return ToolResult.error(refusal)
        config = self._config_for(ctx)
        if isinstance(config, str):
            return ToolResult.error(config)
        child = AgentContext(
            system_prompt=self.system_prompt, tools=list(self.tools), parent_loop_id=ctx.loop_id
        )
        child.ensure_ids()
        child.loop_id = f"{child.session_id}.sub.1"
        parent = ctx.emitter
        ended: list[AgentEnd] = []

        def forward(event: Any) -> None:
            if isinstance(event, AgentEnd) and event.loop_id == child.loop_id:
                ended.append(event)
            if parent is not None:
                parent.emit(event)
            if isinstance(event, MessageUpdate) and isinstance(event.delta, TextDelta):
                ctx.update(event.delta.text)
            elif isinstance(event, ToolExecutionStart):
                ctx.progress(f"{self.name}: calling {event.tool_name}")

        result: LoopResult | None = None
        chain = _RUNNING.set((*_RUNNING.get(), self))
        try:
            result = await agent_loop(task, child, config, events=forward, cancel=ctx.cancel)
        finally:
            _RUNNING.reset(chain)
            # The child's usage (what it had spent when it stopped, a partial reply included)
            # counts in the parent's totals however it ended: completed, failed, timed out or
            # cancelled with the parent. Its AgentEnd carries it on every path.
            if ended:
                ctx.add_usage(ended[0].usage, ended[0].cost_usd)
            elif result is not None:
                ctx.add_usage(result.usage, result.cost_usd)
        details = {
            "sub_agent": self.name,
            "child_loop_id": child.loop_id,
            "child_session_id": child.session_id,
            "turns": sum(1 for m in result.messages if m.role == "assistant"),
            "usage": result.usage.model_dump(),
            "cost_usd": result.cost_usd,
        }
        if not result.ok:
            why = result.error or result.rejection or result.reason
            return ToolResult.text(
                f"The sub-agent {self.name!r} failed ({result.reason}): {why}",
                is_error=True,
                details=details,
            )
        return ToolResult.text(
            result.text or "(sub-agent produced no text output)", details=details
        )
