"""The static configuration of one run: model, sampling, tools policy, hooks, filters, limits."""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeVar

from ..context.compaction import CompactionConfig
from ..context.limits import ExecutionLimits
from ..providers.base import CacheConfig, ModelConfig, Provider
from ..providers.call import CallCache
from ..providers.credentials import CredentialProvider
from ..providers.deadlines import CallDeadlines
from ..providers.retry import RetryPolicy
from ..tools._approval import Approver
from ..tools._results import DEFAULT_MAX_RESULT_BYTES
from ..types import AgentMessage, Message, ResponseFormat, ThinkingLevel, ToolDefinition, Usage

__all__ = [
    "AgentLoopConfig",
    "Batched",
    "ExecutionLimits",
    "FilterResult",
    "InputFilter",
    "LoopHooks",
    "ToolExecution",
]

T = TypeVar("T")
MaybeAwaitable: TypeAlias = T | Awaitable[T]


@dataclass(frozen=True, slots=True)
class Batched:
    """Run tool calls in batches of ``size`` concurrently, checking steering between batches."""

    size: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"Batched size must be >= 1, got {self.size}.")


ToolExecution = Literal["parallel", "sequential"] | Batched


@dataclass(frozen=True, slots=True)
class FilterResult:
    action: Literal["pass", "warn", "reject"] = "pass"
    message: str = ""

    @classmethod
    def allow(cls) -> FilterResult:
        return cls("pass")

    @classmethod
    def warn(cls, message: str) -> FilterResult:
        return cls("warn", message)

    @classmethod
    def reject(cls, reason: str) -> FilterResult:
        return cls("reject", reason)


InputFilter = Callable[[str], MaybeAwaitable[FilterResult]]


@dataclass
class LoopHooks:
    """Lifecycle hooks; each may be sync or async. A ``before_*`` hook returning False vetoes.

    A hook that raises never crashes the loop: a veto hook that raises ends the run (or fails the
    tool call) with an error naming the hook; an observer hook that raises becomes a ``Warning``.
    """

    before_loop: Callable[[list[AgentMessage]], MaybeAwaitable[bool]] | None = None
    after_loop: Callable[[list[AgentMessage], Usage], MaybeAwaitable[None]] | None = None
    before_turn: Callable[[list[AgentMessage], int], MaybeAwaitable[bool]] | None = None
    after_turn: Callable[[list[AgentMessage], Usage], MaybeAwaitable[None]] | None = None
    before_tool_execution: Callable[[str, str, dict[str, Any]], MaybeAwaitable[bool]] | None = None
    after_tool_execution: Callable[[str, str, bool], MaybeAwaitable[None]] | None = None
    before_tool_execution_update: Callable[[str, str, str], MaybeAwaitable[bool]] | None = None
    after_tool_execution_update: Callable[[str, str, str], MaybeAwaitable[None]] | None = None
    on_error: Callable[[str], MaybeAwaitable[None]] | None = None
    before_compaction_start: Callable[[int, int], MaybeAwaitable[bool]] | None = None
    after_compaction_end: Callable[[int, int, int, int], MaybeAwaitable[None]] | None = None


MessageGetter = Callable[[], MaybeAwaitable[Sequence[AgentMessage]]]

DEFAULT_MODEL = "local:smollm2"

_SLUG = re.compile(r"[^\w-]|_", re.UNICODE)


@dataclass
class AgentLoopConfig:
    """Everything one run needs that is not conversation state. Never mutated by the loop.

    ``model`` is a ``provider:model`` string or a :class:`ModelConfig` (default ``local:smollm2``,
    the embedded model); ``provider`` overrides the provider the registry would pick (a
    ``ScriptedProvider`` in tests). ``system_prompt``, when set, replaces the context's for this
    configuration (race branches that differ in system prompt). ``compaction`` shrinks what is
    sent to the model when the conversation nears the model's context window, and compacts harder
    and resends once when the provider still reports a context overflow; it is on by default
    (``None`` turns it off) and never rewrites the log. ``cache`` is a bool or a
    :class:`~phi_core.providers.base.CacheConfig` (prompt-cache mode). ``credentials`` supplies
    the API key per call and is refreshed once on an authentication error.
    ``approver`` answers tool calls that need approval (none: they are refused);
    ``tool_result_max_bytes`` caps the text of each tool result sent to the model (None: no cap).
    ``caller_tools`` are definitions of tools the *caller* executes (an OpenAI-compatible
    client's tools): they are sent to the model beside the context's tools, and a turn that
    calls only them ends the run there (reason ``completed``, no tool of that turn executed),
    its assistant message with the tool calls being the run's last message, so every call the
    caller is handed is one it can answer. A turn that calls them *and* the context's own tools
    runs the own ones, gives each caller call an error result asking the model to call it again
    in a turn of its own, and carries on (every call has its result; the model's next turn
    hands the caller its calls alone).
    """

    model: str | ModelConfig | None = None
    provider: Provider | None = None
    config_id: str | None = None
    system_prompt: str | None = None
    thinking: ThinkingLevel = "off"
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    response_format: ResponseFormat | None = None
    cache: bool | CacheConfig = True
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    deadlines: CallDeadlines = field(default_factory=CallDeadlines)
    """Connect, first-byte, idle and total deadlines of every model call (see
    :class:`~phi_core.providers.deadlines.CallDeadlines`); ``limits.max_duration`` also ends
    a call that is still streaming."""
    limits: ExecutionLimits | None = field(default_factory=ExecutionLimits)
    compaction: CompactionConfig | None = field(default_factory=CompactionConfig)
    credentials: CredentialProvider | None = None
    tool_execution: ToolExecution = "parallel"
    tool_timeout: float | None = None
    approver: Approver | None = None
    caller_tools: list[ToolDefinition] = field(default_factory=list)
    tool_result_max_bytes: int | None = DEFAULT_MAX_RESULT_BYTES
    hooks: LoopHooks = field(default_factory=LoopHooks)
    input_filters: list[InputFilter] = field(default_factory=list)
    get_steering_messages: MessageGetter | None = None
    get_follow_up_messages: MessageGetter | None = None
    transform_context: Callable[[list[AgentMessage]], MaybeAwaitable[list[AgentMessage]]] | None = (
        None
    )
    convert_to_llm: Callable[[list[AgentMessage]], list[Message]] | None = None
    first_turn_trigger: Literal["user", "sub_agent"] = "user"
    extra: dict[str, Any] = field(default_factory=dict)
    response_cache: CallCache | None = None
    """Answer model calls from / store them into this cache, keyed by the request actually sent
    (see :func:`~phi_core.providers.call.request_key`); a bandit race's previews use it."""

    _resolved: ModelConfig | None = field(default=None, init=False, repr=False, compare=False)

    def model_config(self) -> ModelConfig:
        """The resolved :class:`ModelConfig` (``provider:model`` strings resolved once)."""
        if self._resolved is None:
            if isinstance(self.model, ModelConfig):
                self._resolved = self.model
            elif self.model is None and self.provider is not None:
                name = getattr(self.provider, "name", "custom")
                self._resolved = ModelConfig(provider=name, id=name, api="scripted")
            elif self.model is None:
                from ..providers.registry import resolve_model

                self._resolved = resolve_model(DEFAULT_MODEL)
            elif self.provider is not None and not _known_prefix(self.model):
                # A provider override with a free-form name (tests, custom providers).
                name, _, model_id = self.model.partition(":")
                self._resolved = ModelConfig(
                    provider=name or "custom", id=model_id or name, api="scripted"
                )
            else:
                from ..providers.registry import resolve_model

                self._resolved = resolve_model(self.model)
        return self._resolved

    def segment(self) -> str:
        """phi-core's config segment of a loop id: ``config_id``, else ``provider.slug(model)``."""
        if self.config_id:
            return self.config_id
        model = self.model_config()
        segment = f"{model.provider}.{_SLUG.sub('-', model.id)}"
        if self.thinking != "off":
            segment += ".thinking"
        return segment

    def snapshot(self) -> dict[str, Any]:
        """What ran, for ``AgentStart`` and session records. Never includes credentials."""
        model = self.model_config()
        return {
            "model": model.spec,
            "api": model.api,
            "pricing": model.pricing.model_dump(),
            "config_id": self.config_id,
            "system_prompt": self.system_prompt is not None,
            "thinking": self.thinking,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "response_format": self.response_format is not None,
            "tool_execution": (
                self.tool_execution
                if isinstance(self.tool_execution, str)
                else f"batched:{self.tool_execution.size}"
            ),
            "caller_tools": [t.name for t in self.caller_tools],
        }


def _known_prefix(spec: str) -> bool:
    from ..providers.registry import known_providers

    name = spec.partition(":")[0]
    return any(p.name == name for p in known_providers())


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (hooks and getters may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value
