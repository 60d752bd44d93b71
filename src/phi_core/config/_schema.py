"""The config file schema (phi-core's sections, plus ``[session].store``).

Every section is optional. Unknown keys are errors (with a suggestion), not silently ignored:
a misspelt key that does nothing is the hardest config bug to find. The one open table is a
``[[system_prompt.instances]]`` entry, whose block contents are keys named after the blocks.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from ..tools._results import DEFAULT_MAX_RESULT_BYTES
from ..tools._settings import BuiltinToolSettings
from ..types import ThinkingLevel
from ._source import ConfigSource

__all__ = [
    "AgentConfig",
    "AgentInstance",
    "AgentSection",
    "BlockSpec",
    "BranchFields",
    "CacheSection",
    "CallbacksSection",
    "CompactionFields",
    "CompactionInstance",
    "CompactionSection",
    "ContextSection",
    "CostSection",
    "ExecutionSection",
    "HooksSection",
    "ProfileFields",
    "ProfileInstance",
    "ProfileSection",
    "PromptInstance",
    "PromptSection",
    "ProviderFields",
    "ProviderInstance",
    "ProviderSection",
    "RetrySection",
    "SessionSection",
    "SkillsSection",
    "StrategyInstance",
    "StrategySection",
    "SubAgentInstance",
    "SubAgentsSection",
    "ToolInstance",
    "ToolsSection",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class CostSection(_Section):
    """A model's price in US dollars per million tokens. A cache price left out costs what an
    input token costs (``0`` makes it free), as :class:`~phi_core.types.Pricing` does."""

    input_per_million: float = 0.0
    output_per_million: float = 0.0
    cache_read_per_million: float | None = None
    cache_write_per_million: float | None = None


class ProviderFields(_Section):
    model: str | None = None
    api_key: str | None = None
    api: str | None = None
    base_url: str | None = Field(default=None, validation_alias=AliasChoices("base_url", "url"))
    provider: str | None = None
    name: str | None = None
    reasoning: bool | None = None
    context_window: int | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    cost: CostSection | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    compat: dict[str, Any] = Field(default_factory=dict)


class ProviderInstance(ProviderFields):
    id: str | None = None
    description: str | None = None


class ProviderSection(ProviderFields):
    instances: list[ProviderInstance] = Field(default_factory=list)


class BranchFields(_Section):
    """What makes one configuration of a model differ from another.

    The one set of field names for a race file's branches, ``-m model@key=value`` settings and
    agent profiles — the names :class:`~phi_core.loop.AgentLoopConfig` uses. ``system`` (older
    race files) and ``thinking_level`` (phi-core's config files) are accepted spellings.
    """

    system_prompt: str | None = Field(
        default=None, validation_alias=AliasChoices("system_prompt", "system")
    )
    thinking: ThinkingLevel | None = Field(
        default=None, validation_alias=AliasChoices("thinking", "thinking_level")
    )
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    max_tokens: int | None = Field(default=None, gt=0)

    @field_validator("thinking", mode="before")
    @classmethod
    def _lowercase(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value


class ProfileFields(BranchFields):
    name: str | None = None
    description: str | None = None
    config_id: str | None = None
    skills: list[str] | None = None
    workspace: str | None = None
    compaction: str | None = None


class ProfileInstance(ProfileFields):
    id: str


class ProfileSection(ProfileFields):
    profile_id: str | None = None
    instances: list[ProfileInstance] = Field(default_factory=list)


class AgentInstance(_Section):
    name: str = "unnamed"
    agent_profile: str | None = None
    profile: ProfileFields | None = None
    system_prompt: str | None = None
    provider: str | None = None
    workspace: str | None = None


class AgentSection(_Section):
    system_prompt: str | None = None
    workspace: str | None = None
    profile: ProfileSection = Field(default_factory=ProfileSection)
    instances: list[AgentInstance] = Field(default_factory=list)


class SessionSection(_Section):
    scope: Literal["ephemeral", "persistent"] = "ephemeral"
    store: str | None = None
    """Where persistent sessions go: a directory of JSON files, ``json:DIR`` or ``sqlite:FILE``
    (default ``.phi/sessions`` in the workspace)."""
    include_streaming_events: bool = False
    capture_turn_requests: bool = False


class ToolInstance(_Section):
    """A ``[[tools.instances]]`` entry: an MCP server (``command`` + ``args``, or ``url``) or,
    with ``type = "openapi"``, the operations of an OpenAPI ``spec`` (a file or a URL)."""

    name: str
    type: Literal["mcp", "openapi"] = "mcp"
    prefix: str | None = None
    timeout: float | None = Field(default=None, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)
    # MCP
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    # OpenAPI
    spec: str | None = None
    base_url: str | None = None
    bearer_token: str | None = None
    api_key: str | None = None
    api_key_name: str | None = None
    api_key_in: Literal["header", "query"] = "header"
    username: str | None = None
    password: str | None = None
    max_response_bytes: int | None = Field(default=None, ge=1)
    tags: list[str] = Field(default_factory=list)
    operation_ids: list[str] = Field(default_factory=list)
    methods: list[str] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list)
    exclude_tags: list[str] = Field(default_factory=list)
    exclude_operation_ids: list[str] = Field(default_factory=list)
    exclude_methods: list[str] = Field(default_factory=list)
    exclude_paths: list[str] = Field(default_factory=list)


class ToolsSection(_Section):
    enabled: list[str] = Field(default_factory=list)
    tool_strategy: Literal["sequential", "parallel", "batched"] = "parallel"
    batch_size: int = Field(default=3, ge=1)
    timeout: float | None = Field(default=None, gt=0)
    instances: list[ToolInstance] = Field(default_factory=list)
    max_result_bytes: int | None = Field(default=DEFAULT_MAX_RESULT_BYTES, ge=1024)
    """The text of a tool result sent to the model is cut beyond this (with a note)."""
    require_approval: list[str] = Field(default_factory=list)
    """Tools every call of which waits for the approver."""
    approver: str | None = None
    """The name of a callable passed as ``callbacks={name: fn}`` that approves tool calls."""
    builtin: BuiltinToolSettings = Field(default_factory=BuiltinToolSettings)
    """``[tools.builtin.bash]``, ``[tools.builtin.read_file]``, …: the built-in tools' limits."""


class CompactionFields(_Section):
    enabled: bool | None = None
    """``false`` turns automatic compaction off (it is on by default, sized to the model)."""
    max_context_tokens: int | None = Field(default=None, gt=0)
    system_prompt_tokens: int | None = Field(default=None, ge=0)
    compact_at_pct: float | None = Field(default=None, gt=0.0, le=1.0)
    compact_budget_threshold_pct: float | None = Field(default=None, ge=0.0, le=1.0)
    keep_first_turns: int | None = Field(default=None, ge=0)
    keep_recent_turns: int | None = Field(default=None, ge=0)
    max_summary_tokens: int | None = Field(default=None, ge=0)
    tool_output_max_lines: int | None = Field(default=None, ge=2)
    focus_message: str | None = None


class CompactionInstance(CompactionFields):
    id: str


class CompactionSection(CompactionFields):
    instances: list[CompactionInstance] = Field(default_factory=list)


class ContextSection(_Section):
    """The book's ``[context]`` form: ``max_context_tokens`` / ``system_prompt_tokens`` here and
    the rest under ``[context.compaction]`` (equivalent to one ``[compaction]`` table)."""

    max_context_tokens: int | None = Field(default=None, gt=0)
    system_prompt_tokens: int | None = Field(default=None, ge=0)
    keep_first: Any = None
    keep_recent: Any = None
    tool_output_max_lines: int | None = Field(default=None, ge=2)
    compaction: CompactionSection = Field(default_factory=CompactionSection)


class RetrySection(_Section):
    max_retries: int | None = Field(default=None, ge=0)
    initial_delay_ms: int | None = Field(default=None, ge=0)
    backoff_multiplier: float | None = Field(default=None, ge=1.0)
    max_delay_ms: int | None = Field(default=None, ge=0)


class DeadlinesSection(_Section):
    """``[execution.deadlines]``: seconds per phase of every model call (see ``CallDeadlines``);
    a key left out keeps its default."""

    connect_secs: float | None = Field(default=None, gt=0)
    first_byte_secs: float | None = Field(default=None, gt=0)
    idle_secs: float | None = Field(default=None, gt=0)
    total_secs: float | None = Field(default=None, gt=0)


class CacheSection(_Section):
    enabled: bool = True
    strategy: Literal["auto", "disabled", "manual"] = "auto"
    cache_system: bool = True
    """With ``strategy = "manual"``: mark the system prompt for caching."""
    cache_tools: bool = True
    cache_messages: bool = True


class ExecutionSection(_Section):
    max_turns: int | None = Field(default=None, ge=1)
    max_total_tokens: int | None = Field(default=None, ge=1)
    max_duration_secs: float | None = Field(default=None, gt=0)
    max_cost: float | None = Field(default=None, gt=0)
    retry: RetrySection | None = None
    deadlines: DeadlinesSection | None = None
    cache: CacheSection | None = None


class BlockSpec(_Section):
    name: str
    order: int = 0
    max_length: int | None = Field(default=None, ge=1)


class StrategyInstance(_Section):
    id: str
    description: str | None = None
    blocks: list[BlockSpec] = Field(default_factory=list)


class StrategySection(_Section):
    instances: list[StrategyInstance] = Field(default_factory=list)


class PromptInstance(BaseModel):
    """A prompt instance; every extra key is the content of the strategy block of that name."""

    model_config = ConfigDict(extra="allow")

    id: str
    description: str | None = None
    type: str | None = None

    def blocks(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class PromptSection(_Section):
    instances: list[PromptInstance] = Field(default_factory=list)


class SubAgentInstance(_Section):
    name: str
    id: str | None = None
    description: str | None = None
    system_prompt: str | None = None
    model: str | None = None
    provider: str | None = None
    max_turns: int = Field(default=10, ge=1)
    tools: list[str] = Field(default_factory=list)
    thinking_level: str | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)


class SubAgentsSection(_Section):
    instances: list[SubAgentInstance] = Field(default_factory=list)


class CallbacksSection(_Section):
    """Each value is a script (``./x.sh``, ``scripts/y.py``, ``python3 z.py``) or the name of a
    Python callable passed to the builder as ``callbacks={name: fn}`` (``plugin::name`` too)."""

    before_loop: str | None = None
    after_loop: str | None = None
    before_turn: str | None = None
    after_turn: str | None = None
    on_error: str | None = None
    before_tool_execution: str | None = None
    after_tool_execution: str | None = None
    before_compaction_start: str | None = None
    after_compaction_end: str | None = None
    before_task: str | None = None
    after_task: str | None = None


class HooksSection(_Section):
    transform_context: str | None = None
    input_filters: list[str] = Field(default_factory=list)


class SkillsSection(_Section):
    paths: list[str] = Field(default_factory=list)


class AgentConfig(_Section):
    """A whole config file. Build agents with :func:`agent_from_config`."""

    default_workspace: str | None = None
    agent: AgentSection = Field(default_factory=AgentSection)
    provider: ProviderSection = Field(default_factory=ProviderSection)
    session: SessionSection = Field(default_factory=SessionSection)
    tools: ToolsSection = Field(default_factory=ToolsSection)
    compaction: CompactionSection = Field(default_factory=CompactionSection)
    context: ContextSection | None = None
    execution: ExecutionSection = Field(default_factory=ExecutionSection)
    system_prompt_strategy: StrategySection = Field(default_factory=StrategySection)
    system_prompt: PromptSection = Field(default_factory=PromptSection)
    sub_agents: SubAgentsSection = Field(default_factory=SubAgentsSection)
    callbacks: CallbacksSection = Field(default_factory=CallbacksSection)
    hooks: HooksSection = Field(default_factory=HooksSection)
    skills: SkillsSection = Field(default_factory=SkillsSection)

    _source: ConfigSource = PrivateAttr(default_factory=ConfigSource)

    @property
    def source(self) -> ConfigSource:
        """Where this config came from (file, text), for error locations."""
        return self._source
