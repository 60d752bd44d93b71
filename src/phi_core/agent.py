"""``BasicAgent``: the stateful agent most users start from.

It keeps the conversation, the tools, the steering and follow-up queues, the identity (a fixed
``agent_id``, a rotatable ``session_id``) and deterministic loop ids ``{session}.{segment}.{N}``
(``N`` counted per config segment, from 1, reset by :meth:`BasicAgent.new_session`). Every
prompt sends the full history (phi-core's §3.10 defect is fixed in the loop)::

    agent = BasicAgent("openai:gpt-4o-mini").with_system_prompt("Be brief.")
    result = await agent.prompt("What is 2 + 2?")          # run to the end
    async for event in agent.prompt("And times 3?"):       # or watch it live
        ...
    race = await agent.prompt_parallel("Prove it.", ["openai:gpt-4o", "local:smollm2"], "judge")

Only one run at a time: a second ``prompt`` while one runs raises :class:`AgentBusyError`; use
:meth:`BasicAgent.steer` / :meth:`BasicAgent.follow_up` to add input to the running one.

With a session store (:meth:`BasicAgent.with_session_recorder`), a session is shared with every
other writer of it, this process's earlier agents and other processes included: each run's loop
id is numbered after every loop the store holds for the session and reserved there before the
run starts (so ids never repeat), and each save merges into the stored session (so no writer
drops another's loops). An agent whose history is the conversation of a stored loop — e.g. one
given ``build_context_from_session(store.load(sid))`` and ``session_id=sid`` — continues that
loop: its first run's ``parent_loop_id`` is that loop, so the session's conversation chain, and a
context rebuilt from it later, holds the whole conversation.

Context management is on by default (phi-core's default): execution limits, and compaction
against the model's context window (see :mod:`phi_core.context.compaction`);
:meth:`BasicAgent.without_context_management` turns both off. :meth:`BasicAgent.compact_context`
compacts the history on demand into a :class:`~phi_core.types.CompactionBlock` overlay: later
prompts send the compacted view, while :attr:`BasicAgent.messages` keeps every message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from ._logging import get_logger
from .cancel import CancelToken
from .context.blocks import (
    BlockCompactionStrategy,
    apply_compaction_block,
    compact_block,
    compacted_turn_range,
)
from .context.compaction import CompactionConfig, CompactionStrategy
from .context.limits import ExecutionLimits
from .context.prun import prun_tools
from .context.skills import SkillSet
from .context.tokens import TokenCounter, messages_tokens
from .errors import AgentBusyError, UserError
from .events import (
    AgentEnd,
    AgentStart,
    CompactionEnded,
    CompactionStarted,
    ContinuationKind,
    EventStream,
    Warning,
)
from .loop import (
    AgentContext,
    AgentLoopConfig,
    InputFilter,
    LoopHooks,
    LoopResult,
    MessageQueue,
    QueueMode,
    ToolExecution,
    agent_loop,
    agent_loop_continue,
)
from .loop.config import maybe_await
from .providers.base import CacheConfig, ManualCache, ModelConfig, Provider
from .providers.credentials import CredentialProvider
from .providers.deadlines import CallDeadlines
from .providers.retry import RetryPolicy
from .sessions import (
    Session,
    SessionNotFoundError,
    SessionRecorder,
    SessionRecorderConfig,
    SessionStore,
    build_context_from_session,
    conversation_chain,
)
from .subagents import SubAgentTool
from .tools import Approver
from .tools.mcp import DEFAULT_MCP_TIMEOUT, McpClient
from .tools.mcp_servers import McpHttpServer, McpReconnect, McpStdioServer
from .tools.openapi import OpenApiConfig, OperationFilter
from .tools.openapi_tools import OpenApiToolAdapter, OpenApiToolset
from .tools.toolset import Toolset, branch_tool_factory, close_toolsets, merge_tools
from .types import (
    AgentMessage,
    AssistantMessage,
    CompactionBlock,
    ThinkingLevel,
    UserMessage,
    now_ms,
)

__all__ = ["AgentBusyError", "BasicAgent"]

logger = get_logger("phi_core.agent")

_MESSAGES = TypeAdapter(list[AgentMessage])
_HOOK_NAMES = frozenset(f.name for f in dataclasses.fields(LoopHooks))


class BasicAgent:
    """A stateful agent; see the module docstring. Builder methods return ``self``."""

    def __init__(
        self,
        model: str | ModelConfig | None = None,
        *,
        provider: Provider | None = None,
        system_prompt: str | None = None,
        tools: Sequence[Any] = (),
        messages: Sequence[AgentMessage] = (),
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> None:
        self.config = AgentLoopConfig(model=model, provider=provider)
        self.system_prompt = system_prompt
        self.tools: list[Any] = list(tools)
        self.toolsets: list[Toolset] = []
        self.messages: list[AgentMessage] = list(messages)
        self.agent_id = agent_id or str(uuid.uuid4())
        self.session_id = session_id or str(uuid.uuid4())
        self.last_loop_id: str | None = None
        self.steering = MessageQueue()
        self.follow_ups = MessageQueue()
        self.skills = SkillSet()
        self.compaction_block: CompactionBlock | None = None
        """The overlay :meth:`compact_context` made over :attr:`messages` (None: none)."""
        self.block_strategy: BlockCompactionStrategy | None = None
        self.recorder: SessionRecorder | None = None
        self.store: SessionStore | None = None
        self.name: str | None = None
        self.workspace: str | None = None
        self._listeners: list[Callable[[Any], Any]] = []
        self._counters: dict[str, int] = {}
        self._counted_session = self.session_id
        """The session :attr:`_counters` count for (``session_id`` may be assigned directly)."""
        self._used_ids: set[str] = set()
        self._running = False
        self._cancel: CancelToken | None = None
        self._last_active: float | None = None

    def __repr__(self) -> str:
        model = self.config.model
        spec = model.spec if isinstance(model, ModelConfig) else model
        return (
            f"BasicAgent(model={spec!r}, session_id={self.session_id!r}, "
            f"messages={len(self.messages)})"
        )

    # ------------------------------------------------------------------ builder

    def _set(self, **changes: Any) -> BasicAgent:
        self.config = dataclasses.replace(self.config, **changes)
        return self

    def with_model(self, model: str | ModelConfig) -> BasicAgent:
        return self._set(model=model)

    def with_provider(self, provider: Provider | None) -> BasicAgent:
        return self._set(provider=provider)

    def with_system_prompt(self, prompt: str | None) -> BasicAgent:
        self.system_prompt = prompt
        return self

    def with_tools(self, tools: Sequence[Any]) -> BasicAgent:
        self.tools = list(tools)
        return self

    # ------------------------------------------------------------------ toolsets

    def with_toolset(self, toolset: Toolset) -> BasicAgent:
        """Add tools that come from elsewhere (an MCP server, an OpenAPI spec); they are fetched
        when a run starts, each race branch gets its own copy, and :meth:`aclose` closes them."""
        if not isinstance(toolset, Toolset):
            raise UserError(
                f"with_toolset() needs a Toolset (get_tools, for_branch, aclose), got {toolset!r}."
            )
        self.toolsets.append(toolset)
        return self

    def with_mcp_server_stdio(
        self,
        command: str,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        *,
        cwd: str | None = None,
        name: str | None = None,
        prefix: str | None = None,
        timeout: float | None = DEFAULT_MCP_TIMEOUT,
        reconnect: McpReconnect | None = None,
    ) -> BasicAgent:
        """Add the tools of an MCP server started as ``command args`` (started on the first run,
        stopped by :meth:`aclose`). ``env`` adds to the server's minimal environment; ``prefix``
        names its tools ``{prefix}__{name}``; ``timeout`` is per call (``None``: none)."""
        server = McpStdioServer(command, args, env, cwd, name)
        client = McpClient(server, prefix=prefix, timeout=timeout, reconnect=reconnect)
        return self.with_toolset(client)

    def with_mcp_server_http(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        name: str | None = None,
        prefix: str | None = None,
        timeout: float | None = DEFAULT_MCP_TIMEOUT,
        reconnect: McpReconnect | None = None,
    ) -> BasicAgent:
        """Add the tools of a streamable-HTTP MCP server at ``url`` (connected on the first run;
        ``headers``, e.g. ``Authorization``, go with every request and never into messages)."""
        server = McpHttpServer(url, headers, name)
        client = McpClient(server, prefix=prefix, timeout=timeout, reconnect=reconnect)
        return self.with_toolset(client)

    def with_openapi_file(
        self,
        path: str,
        config: OpenApiConfig | None = None,
        filter: OperationFilter | None = None,
    ) -> BasicAgent:
        """Add one tool per (matching) operation of the OpenAPI spec file at ``path``."""
        tools = OpenApiToolAdapter.from_file(path, config, filter)
        return self.with_toolset(OpenApiToolset(tools=tools, name=str(path)))

    def with_openapi_spec(
        self,
        spec: str,
        config: OpenApiConfig | None = None,
        filter: OperationFilter | None = None,
    ) -> BasicAgent:
        """Add one tool per (matching) operation of an OpenAPI spec given as JSON or YAML text."""
        tools = OpenApiToolAdapter.from_str(spec, config, filter)
        return self.with_toolset(OpenApiToolset(tools=tools, name="OpenAPI spec"))

    def with_openapi_url(
        self,
        url: str,
        config: OpenApiConfig | None = None,
        filter: OperationFilter | None = None,
    ) -> BasicAgent:
        """Add the tools of the OpenAPI spec at ``url`` (fetched when the first run starts)."""
        return self.with_toolset(OpenApiToolset(url=url, config=config, filter=filter, name=url))

    async def get_tools(self) -> list[Any]:
        """Every tool the next run gets: :attr:`tools` and the toolsets' (connecting them)."""
        return await merge_tools(self.tools, self.toolsets)

    async def aclose(self) -> None:
        """Close the toolsets (stops MCP server processes, ends their sessions)."""
        await close_toolsets(self.toolsets)

    async def __aenter__(self) -> BasicAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def with_messages(self, messages: Sequence[AgentMessage]) -> BasicAgent:
        self.messages = list(messages)
        self.compaction_block = None
        return self

    def with_thinking(self, level: ThinkingLevel) -> BasicAgent:
        return self._set(thinking=level)

    def with_temperature(self, temperature: float | None) -> BasicAgent:
        return self._set(temperature=temperature)

    def with_max_tokens(self, max_tokens: int | None) -> BasicAgent:
        return self._set(max_tokens=max_tokens)

    def with_config_id(self, config_id: str | None) -> BasicAgent:
        return self._set(config_id=config_id)

    def with_limits(self, limits: ExecutionLimits | None) -> BasicAgent:
        return self._set(limits=limits)

    def with_retry(self, retry: RetryPolicy) -> BasicAgent:
        return self._set(retry=retry)

    def with_deadlines(self, deadlines: CallDeadlines) -> BasicAgent:
        """Connect, first-byte, idle and total deadlines of every model call."""
        return self._set(deadlines=deadlines)

    def with_cache(self, cache: bool | str | ManualCache | CacheConfig) -> BasicAgent:
        """Prompt caching: ``True``/``"auto"``, ``False``/``"disabled"``, a
        :class:`~phi_core.providers.base.ManualCache` or a full ``CacheConfig``."""
        return self._set(cache=CacheConfig.of(cache))

    def with_credentials(self, credentials: CredentialProvider | None) -> BasicAgent:
        """Get the API key from ``credentials`` on every call (refreshed once when rejected)."""
        return self._set(credentials=credentials)

    def with_tool_execution(
        self, strategy: ToolExecution, *, timeout: float | None = None
    ) -> BasicAgent:
        return self._set(tool_execution=strategy, tool_timeout=timeout)

    def with_approver(self, approver: Approver | None) -> BasicAgent:
        """Who answers tool calls that need approval (none: such calls are refused)."""
        return self._set(approver=approver)

    def with_tool_result_limit(self, max_bytes: int | None) -> BasicAgent:
        """Cut the text of each tool result sent to the model beyond ``max_bytes`` (None: no cap)."""
        return self._set(tool_result_max_bytes=max_bytes)

    def with_hooks(self, hooks: LoopHooks) -> BasicAgent:
        return self._set(hooks=hooks)

    def with_hook(self, name: str, fn: Callable[..., Any] | None) -> BasicAgent:
        """Set one lifecycle hook by name (``before_loop``, ``after_turn``, …)."""
        if name not in _HOOK_NAMES:
            raise UserError(
                f"Unknown hook {name!r}; choose one of: {', '.join(sorted(_HOOK_NAMES))}."
            )
        return self._set(hooks=dataclasses.replace(self.config.hooks, **{name: fn}))

    def with_input_filter(self, input_filter: InputFilter) -> BasicAgent:
        return self._set(input_filters=[*self.config.input_filters, input_filter])

    @property
    def compaction(self) -> CompactionConfig | None:
        """The automatic compaction settings (None: off)."""
        return self.config.compaction

    def with_compaction(self, compaction: CompactionConfig | None) -> BasicAgent:
        return self._set(compaction=compaction)

    def with_compaction_strategy(
        self,
        strategy: CompactionStrategy | Callable[[list[AgentMessage], CompactionConfig], Any],
    ) -> BasicAgent:
        """Replace the compaction tiers: an object with ``compact(messages, config)`` or such a
        function (sync or async); it gets the resolved config (``target()`` says how small)."""
        if not isinstance(strategy, CompactionStrategy):
            if not callable(strategy):
                raise UserError(
                    f"A compaction strategy needs a compact(messages, config) method or must be a "
                    f"function of (messages, config), got {strategy!r}."
                )
            strategy = _FunctionStrategy(strategy)
        base = self.config.compaction or CompactionConfig()
        return self._set(compaction=dataclasses.replace(base, strategy=strategy))

    def with_block_compaction_strategy(self, strategy: BlockCompactionStrategy) -> BasicAgent:
        """How :meth:`compact_context` builds its overlay (e.g. an LLM summary of the middle)."""
        self.block_strategy = strategy
        return self

    def with_token_counter(self, counter: TokenCounter) -> BasicAgent:
        """Count tokens with ``counter`` for compaction (default: per model, see
        :func:`~phi_core.context.token_counter_for`)."""
        base = self.config.compaction or CompactionConfig()
        return self._set(compaction=dataclasses.replace(base, token_counter=counter))

    def without_context_management(self) -> BasicAgent:
        """No automatic compaction and no execution limits (phi-core's switch)."""
        return self._set(compaction=None, limits=None)

    def with_skills(self, skills: SkillSet | Sequence[str | Path] | str | Path) -> BasicAgent:
        """Add skills (a :class:`SkillSet` or skill directories; relative directories resolve
        against the workspace); their index is appended to the system prompt."""
        if not isinstance(skills, SkillSet):
            dirs = [skills] if isinstance(skills, str | Path) else list(skills)
            base = Path(self.workspace) if self.workspace else Path.cwd()
            skills = SkillSet.load(
                [d if Path(d).expanduser().is_absolute() else base / d for d in dirs]
            )
        self.skills = SkillSet(self.skills).merge(skills)
        return self

    def with_sub_agent(self, sub_agent: SubAgentTool) -> BasicAgent:
        """Add a sub-agent tool. One with no model and no provider runs on the model (and
        provider) this agent has when it is added."""
        if not isinstance(sub_agent, SubAgentTool):
            raise UserError(
                f"with_sub_agent() takes a SubAgentTool, got {type(sub_agent).__name__}; add "
                "other tools with with_tools()."
            )
        if any(t.name == sub_agent.name for t in self.tools):
            raise UserError(
                f"This agent already has a tool named {sub_agent.name!r}; give the sub-agent "
                "another name."
            )
        if sub_agent.inherits_model:
            sub_agent.with_model(self.config.model_config()).with_provider(self.config.provider)
        self.tools.append(sub_agent)
        return self

    def with_prun_tool(self) -> BasicAgent:
        """Let the model prune its own older work (``prun`` and ``prun_with_memo``)."""
        names = {t.name for t in self.tools}
        self.tools.extend(t for t in prun_tools() if t.name not in names)
        return self

    def with_workspace(self, path: str | Path) -> BasicAgent:
        """The directory relative skill paths (and config ``file:`` references) resolve
        against; it must exist."""
        directory = Path(path).expanduser()
        if not directory.is_dir():
            raise UserError(
                f"The workspace {str(directory)!r} is not a directory; create it or pass an "
                "existing one."
            )
        self.workspace = str(directory.resolve())
        return self

    def effective_system_prompt(self) -> str | None:
        """The system prompt with the skills index appended (what runs are sent)."""
        index = self.skills.format_for_prompt()
        if not index:
            return self.system_prompt
        return f"{self.system_prompt}\n\n{index}" if self.system_prompt else index

    def with_steering_mode(self, mode: QueueMode) -> BasicAgent:
        self.steering.mode = MessageQueue(mode).mode
        return self

    def with_follow_up_mode(self, mode: QueueMode) -> BasicAgent:
        self.follow_ups.mode = MessageQueue(mode).mode
        return self

    def with_config(self, **changes: Any) -> BasicAgent:
        """Set any :class:`AgentLoopConfig` field (``top_p``, ``seed``, ``response_format``, …)."""
        return self._set(**changes)

    def with_session_recorder(
        self,
        recorder: SessionRecorder | None = None,
        *,
        store: SessionStore | None = None,
    ) -> BasicAgent:
        """Record every run (a new recorder if none is given); with ``store``, save the session
        after every run."""
        self.recorder = recorder or SessionRecorder(SessionRecorderConfig())
        self.store = store
        return self

    def subscribe(self, listener: Callable[[Any], Any]) -> Callable[[], None]:
        """Call ``listener(event)`` for every event of every run; returns an unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # ------------------------------------------------------------------ state

    @property
    def is_running(self) -> bool:
        return self._running

    def build_config(self, **overrides: Any) -> AgentLoopConfig:
        """The :class:`AgentLoopConfig` of the next run: this agent's steering and follow-up
        queues wired in, then ``overrides`` (which may replace them too, e.g. with None)."""
        changes: dict[str, Any] = {
            "get_steering_messages": self.steering.get,
            "get_follow_up_messages": self.follow_ups.get,
        }
        changes.update(overrides)
        return dataclasses.replace(self.config, **changes)

    def steer(self, message: AgentMessage | str) -> None:
        """Queue a message the running loop takes at its next steering checkpoint."""
        self.steering.push(message)

    def follow_up(self, message: AgentMessage | str) -> None:
        """Queue a message the loop takes when it would otherwise stop."""
        self.follow_ups.push(message)

    def abort(self) -> None:
        """Cancel the running prompt (it ends with reason ``cancelled``); no-op when idle."""
        if self._cancel is not None:
            self._cancel.cancel()

    def reset(self) -> None:
        """Forget the conversation and the queued messages (identity and config stay)."""
        self._ensure_idle("reset()")
        self.messages = []
        self.compaction_block = None
        self.steering.clear()
        self.follow_ups.clear()
        self.last_loop_id = None

    def history_view(self) -> list[AgentMessage]:
        """What the next run is sent as history: :attr:`messages` under the compaction block."""
        return apply_compaction_block(self.messages, self.compaction_block)

    async def compact_context(
        self, *, focus: str | None = None, strategy: BlockCompactionStrategy | None = None
    ) -> int:
        """Compact the history now into a :class:`~phi_core.types.CompactionBlock` overlay.

        Keeps the first ``keep_first_turns`` turns, summarises the middle (steered by ``focus``,
        default the compaction config's ``focus_message``) and truncates tool outputs of the last
        ``keep_recent_turns`` turns; :attr:`messages` keeps the originals. The run is recorded as
        a loop of kind ``compaction`` (``AgentStart`` → ``CompactionStarted`` →
        ``CompactionEnded`` (with the block) → ``AgentEnd``) and the hooks
        ``before_compaction_start`` (may veto) / ``after_compaction_end`` fire. Returns how many
        earlier loops had messages summarised (1 for history that came from outside any loop; 0
        when there was nothing to compact or it was vetoed).
        """
        self._ensure_idle("compact_context()")
        settings = (self.config.compaction or CompactionConfig()).for_model(
            self.config.model_config()
        )
        if focus is not None:
            settings = dataclasses.replace(settings, focus_message=focus)
        block = await compact_block(self.messages, settings, strategy or self.block_strategy)
        if block is None:
            return 0
        before = self.history_view()
        counter = settings.counter
        tokens_before = messages_tokens(before, counter)
        hooks = self.config.hooks
        if hooks.before_compaction_start is not None:
            allowed = await maybe_await(hooks.before_compaction_start(tokens_before, len(before)))
            if allowed is False:
                return 0
        after = apply_compaction_block(self.messages, block)
        summarised = compacted_turn_range(self.messages, block)
        loops = {m.turn_id.loop_id for m in (self.messages[i] for i in summarised) if m.turn_id}
        self._begin()
        started = now_ms()
        try:
            [loop_id], resumed = await self._claim(lambda: [self.next_loop_id("compaction")])
            emit = self._sink(None)
            emit(
                AgentStart(
                    loop_id=loop_id,
                    agent_id=self.agent_id,
                    session_id=self.session_id,
                    parent_loop_id=self.last_loop_id or resumed,
                    continuation_kind="compaction",
                )
            )
            emit(
                CompactionStarted(
                    loop_id=loop_id,
                    estimated_tokens=tokens_before,
                    message_count=len(before),
                    reason="manual",
                )
            )
            self.compaction_block = block
            report = (len(before), len(after), tokens_before, messages_tokens(after, counter))
            emit(
                CompactionEnded(
                    loop_id=loop_id,
                    messages_before=report[0],
                    messages_after=report[1],
                    estimated_tokens_before=report[2],
                    estimated_tokens_after=report[3],
                    loops_compacted=len(loops) or 1,
                    reason="manual",
                    block=block,
                )
            )
            if hooks.after_compaction_end is not None:
                try:
                    await maybe_await(hooks.after_compaction_end(*report))
                except Exception as exc:
                    logger.warning("after_compaction_end hook raised", exc_info=True)
                    text = f"The after_compaction_end hook raised {type(exc).__name__}: {exc}"
                    emit(Warning(loop_id=loop_id, message=text))
            emit(AgentEnd(loop_id=loop_id, reason="completed"))
            self.last_loop_id = loop_id
        finally:
            self._end()
        await self._persist(started)
        return len(loops) or 1

    def save_messages(self) -> str:
        """The conversation as JSON (see :meth:`restore_messages`)."""
        return _MESSAGES.dump_json(self.messages).decode()

    def restore_messages(self, data: str | bytes) -> None:
        self._ensure_idle("restore_messages()")
        self.messages = _MESSAGES.validate_json(data)
        self.compaction_block = None

    def new_session(self) -> str:
        """Start a new session id; loop counters restart at 1."""
        self._ensure_idle("new_session()")
        self.session_id = str(uuid.uuid4())
        self._counters.clear()
        self._counted_session = self.session_id
        self.last_loop_id = None
        self._last_active = None
        return self.session_id

    def check_and_rotate(self, idle_seconds: float) -> str | None:
        """Rotate the session when the agent has been idle for at least ``idle_seconds``.

        Returns the new session id, or None (never prompted, not idle long enough, or running).
        """
        if self._running or self._last_active is None:
            return None
        if time.monotonic() - self._last_active < idle_seconds:
            return None
        return self.new_session()

    def next_loop_id(self, segment: str) -> str:
        """``{session}.{segment}.{N}`` with ``N`` counted per segment in this session (runs with
        a session store also count the loops stored for the session; see the module docstring)."""
        self._sync_counters()
        while True:
            n = self._counters.get(segment, 0) + 1
            self._counters[segment] = n
            loop_id = f"{self.session_id}.{segment}.{n}"
            if loop_id not in self._used_ids:
                self._used_ids.add(loop_id)
                return loop_id

    def _sync_counters(self) -> None:
        if self._counted_session != self.session_id:
            self._counters.clear()
            self._counted_session = self.session_id

    async def _claim(self, pick: Callable[[], list[str]]) -> tuple[list[str], str | None]:
        """The loop ids ``pick()`` chooses for the next run, and the stored loop this agent's
        history continues (None: none, or the agent has its own loops in the session).

        With a store, ``pick`` runs after the stored session's loop ids were counted (numbers
        go after the stored ones), and a store that can reserve (``claim_loop_ids``) stores the
        ids as pending loops in the same locked step, so a concurrent writer picks others."""
        store = self.store if self.recorder is not None else None
        if store is None:
            return pick(), None
        resumed: list[str | None] = [None]

        def choose(stored: Session) -> list[str]:
            self._count_stored(stored)
            resumed[0] = self._continued_loop(stored)
            return pick()

        claim = getattr(store, "claim_loop_ids", None)
        if claim is not None:
            ids = list(await claim(self.session_id, self.agent_id, choose))
            return ids, resumed[0]
        try:
            stored = await store.load(self.session_id)
        except SessionNotFoundError:
            return pick(), None
        return choose(stored), resumed[0]

    def _count_stored(self, stored: Session) -> None:
        """Count every stored loop id as used, and number each segment after its stored loops."""
        self._sync_counters()
        prefix = f"{self.session_id}."
        for record in stored.loops:
            self._used_ids.add(record.loop_id)
            head, _, number = record.loop_id.rpartition(".")
            if head.startswith(prefix) and number.isdigit():
                segment = head[len(prefix) :]
                self._counters[segment] = max(self._counters.get(segment, 0), int(number))

    def _continued_loop(self, stored: Session) -> str | None:
        """The newest stored loop whose conversation is exactly :attr:`messages` — when this
        agent has no loop of its own in the session yet (otherwise its own loops chain it)."""
        if not self.messages:
            return None
        started = [r for r in stored.loops if r.status != "pending"]
        if self.last_loop_id is not None and stored.get_loop(self.last_loop_id) is not None:
            return None
        if any(r.agent_id == self.agent_id for r in started):
            return None
        last = self.messages[-1]
        for record in reversed(started):
            if record.messages and record.messages[-1] != last:
                continue
            chain = conversation_chain(stored, record.loop_id)
            raw = [m for r in chain for m in r.messages]
            if raw == self.messages or (
                build_context_from_session(stored, record.loop_id) == self.messages
            ):
                return record.loop_id
        return None

    def _ensure_idle(self, what: str) -> None:
        if self._running:
            raise AgentBusyError(
                f"This agent is already running a prompt, so {what} is refused; await the run "
                "(or call abort()) first, or use steer()/follow_up() to add input to it."
            )

    # ------------------------------------------------------------------ running

    def prompt(
        self, prompts: str | AgentMessage | Sequence[AgentMessage]
    ) -> EventStream[LoopResult]:
        """Run on new input. ``await`` the result for the :class:`LoopResult`, or iterate it
        (``async for event in agent.prompt(...)``) to see every event as it happens."""
        self._ensure_idle("prompt()")
        if isinstance(prompts, str):
            if not prompts.strip():
                raise UserError("The prompt is empty; pass the text the agent should answer.")
            batch: list[AgentMessage] = [UserMessage.text(prompts)]
        elif isinstance(prompts, BaseModel):
            batch = [prompts]
        else:
            batch = list(prompts)
        if not batch:
            raise UserError("prompt() needs at least one message; use continue_() to resume.")
        return EventStream(lambda queue: self._run(queue, batch, "initial"))

    def continue_(self, kind: ContinuationKind = "default") -> EventStream[LoopResult]:
        """Resume from the history without new input (after tool results, an error, a restore).

        The run's parent is the previous run; ``kind`` is ``default``, ``rerun`` or ``branch``.
        """
        self._ensure_idle("continue_()")
        if not self.messages:
            raise UserError("continue_() needs a conversation; call prompt() first.")
        if isinstance(self.messages[-1], AssistantMessage):
            raise UserError(
                "continue_() cannot resume from an assistant message (the model would answer "
                "itself); call prompt() with the next user message instead."
            )
        return EventStream(lambda queue: self._run(queue, None, kind))

    def _sink(self, queue: Any) -> Callable[[Any], None]:
        listeners = list(self._listeners)
        if self.recorder is not None:
            listeners.insert(0, self.recorder.on_event)

        def sink(event: Any) -> None:
            for listener in listeners:
                try:
                    listener(event)
                except Exception:
                    logger.exception("agent event listener %r raised; continuing", listener)
            if queue is not None:
                queue.put_nowait(event)

        return sink

    def _begin(self) -> CancelToken:
        if self._running:
            raise AgentBusyError(
                "This agent is already running a prompt; await it (or call abort()) before "
                "starting another, or use steer()/follow_up() to add input to the running one."
            )
        self._running = True
        self._cancel = CancelToken()
        self._last_active = time.monotonic()
        return self._cancel

    def _end(self) -> None:
        self._running = False
        self._cancel = None
        self._last_active = time.monotonic()

    async def _run(
        self, queue: Any, prompts: list[AgentMessage] | None, kind: ContinuationKind
    ) -> LoopResult:
        cancel = self._begin()
        started = now_ms()
        try:
            config = self.build_config()
            segment = config.segment()
            [loop_id], resumed = await self._claim(lambda: [self.next_loop_id(segment)])
            parent_loop_id = self.last_loop_id if prompts is None else None
            sink = self._sink(queue)
            history = self.history_view()
            context = AgentContext(
                system_prompt=self.effective_system_prompt(),
                messages=list(history),
                tools=await self.get_tools(),
                agent_id=self.agent_id,
                session_id=self.session_id,
                loop_id=loop_id,
                parent_loop_id=parent_loop_id or resumed,
                continuation_kind=kind,
            )
            if prompts is not None:
                result = await agent_loop(prompts, context, config, events=sink, cancel=cancel)
            else:
                result = await agent_loop_continue(context, config, events=sink, cancel=cancel)
            self.messages = [*self.messages, *context.messages[len(history) :]]
            self.last_loop_id = loop_id
        finally:
            self._end()
        await self._persist(started)
        return result

    async def _persist(self, since: int) -> None:
        """Save every session the last run touched (sub-agent sessions included)."""
        if self.recorder is None or self.store is None:
            return
        for session in self.recorder.all_sessions():
            if session.session_id == self.session_id or session.last_active >= since:
                await self.store.save(session)

    # ------------------------------------------------------------------ racing

    def prompt_parallel(
        self,
        prompts: str | Sequence[AgentMessage] | None,
        configs: Sequence[AgentLoopConfig | str | ModelConfig],
        strategy: Any = "pick-first",
        **race_options: Any,
    ) -> EventStream[Any]:
        """Race ``configs`` on ``prompts`` (``None`` continues from the history) and continue
        the conversation with the winner.

        ``configs`` are :class:`AgentLoopConfig` objects, or model specs that inherit this
        agent's settings; ``strategy`` is an :class:`~phi_core.parallel.EvaluationStrategy` or a
        built-in name (``"pick-first"``, ``"judge"``, …). Every branch and judge loop runs in this
        agent's session. Awaiting gives the :class:`~phi_core.parallel.ParallelLoopResult`; when
        no branch succeeded the history is left unchanged.
        """
        self._ensure_idle("prompt_parallel()")
        if not configs:
            raise UserError("prompt_parallel() needs at least one config to race.")
        resolved = [
            c if isinstance(c, AgentLoopConfig) else self.build_config(model=c, provider=None)
            for c in configs
        ]
        if isinstance(strategy, str):
            from .parallel import strategy_from_name

            strategy = strategy_from_name(strategy)
        return EventStream(
            lambda queue: self._race(queue, prompts, resolved, strategy, race_options)
        )

    async def _race(
        self,
        queue: Any,
        prompts: str | Sequence[AgentMessage] | None,
        configs: list[AgentLoopConfig],
        strategy: Any,
        options: dict[str, Any],
    ) -> Any:
        from .parallel import agent_loop_parallel

        cancel = self._begin()
        started = now_ms()
        try:
            first = int(options.get("first_index", 0))
            branches = list(configs)

            def pick() -> list[str]:
                branches[:] = self._unique_branch_ids(configs, first)
                return [
                    f"{self.session_id}.{c.segment()}.{first + i + 1}"
                    for i, c in enumerate(branches)
                ]

            _ids, resumed = await self._claim(pick)
            configs = branches
            history = self.history_view()
            base = AgentContext(
                system_prompt=self.effective_system_prompt(),
                messages=list(history),
                tools=list(self.tools),
                agent_id=self.agent_id,
                session_id=self.session_id,
                parent_loop_id=self.last_loop_id or resumed,
            )
            async with contextlib.AsyncExitStack() as stack:
                if self.toolsets and "tool_factory" not in options:
                    # Every branch gets its own session of each toolset (MCP servers are stateful).
                    await merge_tools(self.tools, self.toolsets)  # one listing, shared by branches
                    options["tool_factory"] = await stack.enter_async_context(
                        branch_tool_factory(self.tools, self.toolsets, len(configs))
                    )
                result = await agent_loop_parallel(
                    prompts,
                    base,
                    configs,
                    strategy,
                    events=self._sink(queue),
                    cancel=cancel,
                    **options,
                )
            self._used_ids.update(result.loop_ids)
            winner = result.selected
            if winner is not None and winner.ok:
                self.messages = [*self.messages, *winner.context.messages[len(history) :]]
                self.last_loop_id = winner.loop_id
        finally:
            self._end()
        await self._persist(started)
        return result

    def _unique_branch_ids(
        self, configs: list[AgentLoopConfig], first: int = 0
    ) -> list[AgentLoopConfig]:
        """Branch ``i`` runs as ``{session}.{segment}.{first+i+1}``; give a branch whose id was
        already used in this session its own segment so loop ids stay unique within the session."""
        out = []
        for i, config in enumerate(configs):
            segment = config.segment()
            k = first + i + 1
            if f"{self.session_id}.{segment}.{k}" in self._used_ids:
                n = 2
                while f"{self.session_id}.{segment}-r{n}.{k}" in self._used_ids:
                    n += 1
                config = dataclasses.replace(config, config_id=f"{segment}-r{n}")
            out.append(config)
        return out


class _FunctionStrategy:
    """A compaction function as a :class:`CompactionStrategy`."""

    def __init__(self, fn: Callable[[list[AgentMessage], CompactionConfig], Any]) -> None:
        self.fn = fn

    def compact(self, messages: list[AgentMessage], config: CompactionConfig) -> Any:
        return self.fn(messages, config)
