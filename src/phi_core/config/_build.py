"""From an :class:`AgentConfig` to ready :class:`BasicAgent` objects.

Precedence (first set wins):

* system prompt: agent instance → ``[agent]`` → profile instance → ``[agent.profile]`` → none;
* profile fields: the agent instance's inline ``profile`` → the profile instance it references →
  ``[agent.profile]`` (phi-core applied the base profile *after* the instance; fixed here);
* workspace: agent instance → ``[agent]`` → profile → ``default_workspace`` → the config file's
  directory; relative paths resolve against the config file's directory;
* model: the referenced ``[[provider.instances]]`` entry's fields over ``[provider]``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, get_args

from pydantic import SecretStr

from ..agent import BasicAgent
from ..context.compaction import CompactionConfig
from ..context.limits import ExecutionLimits
from ..context.prun import prun_tools
from ..context.skills import SkillSet
from ..errors import ConfigError, ProviderError, UserError, register_secret
from ..loop import AgentLoopConfig, Batched
from ..loop.config import DEFAULT_MODEL
from ..providers.base import ApiProtocol, CacheConfig, ManualCache, ModelConfig, Provider
from ..providers.deadlines import CallDeadlines
from ..providers.registry import known_providers, resolve_model
from ..providers.retry import RetryPolicy
from ..sessions import SessionRecorder, SessionRecorderConfig, open_session_store
from ..subagents import SubAgentTool
from ..tools import ToolRegistry
from ..types import Pricing, ThinkingLevel
from ._callbacks import is_script_path, run_script_sync, script_hook
from ._load import load_config
from ._prompts import load_skills, resolve_prompt
from ._refs import Namespaces
from ._schema import (
    AgentConfig,
    AgentInstance,
    CompactionFields,
    CompactionSection,
    ProfileFields,
    ProviderFields,
    SubAgentInstance,
)
from ._tool_instances import tool_instance

__all__ = ["ScaledRetryPolicy", "agent_from_config", "agents_from_config"]

_THINKING: tuple[str, ...] = get_args(ThinkingLevel)
_TOOL_ALIASES = {"file_read": "read_file", "file_write": "write_file"}
_API_ALIASES: dict[str, ApiProtocol] = {
    "anthropic": "anthropic_messages",
    "openai": "openai_completions",
    "azure": "azure_openai_responses",
    "google": "google_generative_ai",
    "gemini": "google_generative_ai",
    "vertex": "google_vertex",
    "bedrock": "bedrock_converse_stream",
    "local": "local_gguf",
}
_APIS: tuple[str, ...] = get_args(ApiProtocol)
_LOOP_HOOKS = (
    "before_loop",
    "after_loop",
    "before_turn",
    "after_turn",
    "on_error",
    "before_tool_execution",
    "after_tool_execution",
    "before_compaction_start",
    "after_compaction_end",
)

Callbacks = Mapping[str, Callable[..., Any]]


@dataclass(frozen=True, slots=True)
class ScaledRetryPolicy(RetryPolicy):
    """A :class:`RetryPolicy` whose delays grow by ``multiplier`` (``[execution.retry]``)."""

    multiplier: float = 2.0

    def delay_for(self, attempt: int, error: ProviderError) -> float:
        if error.retry_after is not None:
            return min(max(float(error.retry_after), 0.0), self.max_retry_after)
        delay = min(self.base_delay * self.multiplier ** (attempt - 1), self.max_delay)
        if self.jitter:
            delay *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(delay, 0.0)


def agent_from_config(
    config: AgentConfig | str | Path,
    *,
    instance: str | None = None,
    tools: ToolRegistry | None = None,
    callbacks: Callbacks | None = None,
    provider: Provider | None = None,
) -> BasicAgent:
    """One agent from a config (a path or a parsed :class:`AgentConfig`).

    ``instance`` picks an ``[[agent.instances]]`` entry by name (default: the first, or the
    single agent of a config without instances). ``tools`` resolves ``[tools].enabled`` (default:
    the built-in tools), ``callbacks`` maps names used in ``[callbacks]``/``[hooks]`` to Python
    callables, and ``provider`` overrides the model provider (a ``ScriptedProvider`` in tests).
    """
    agents = agents_from_config(config, tools=tools, callbacks=callbacks, provider=provider)
    if instance is None:
        return next(iter(agents.values()))
    if instance not in agents:
        raise UserError(
            f"No agent instance named {instance!r}; the config defines: {', '.join(agents)}."
        )
    return agents[instance]


def agents_from_config(
    config: AgentConfig | str | Path,
    *,
    tools: ToolRegistry | None = None,
    callbacks: Callbacks | None = None,
    provider: Provider | None = None,
) -> dict[str, BasicAgent]:
    """Every agent a config defines, by name, in file order (``"default"`` without instances)."""
    parsed = config if isinstance(config, AgentConfig) else load_config(config)
    return _Builder(parsed, tools or ToolRegistry(), dict(callbacks or {}), provider).build_all()


class _Builder:
    def __init__(
        self,
        config: AgentConfig,
        registry: ToolRegistry,
        callbacks: dict[str, Callable[..., Any]],
        provider: Provider | None,
    ) -> None:
        self.config = config
        self.source = config.source
        self.registry = registry
        self.callbacks = callbacks
        self.provider = provider
        self.ns = Namespaces(self.source)
        self.compaction_section = self._compaction_section()
        self._declare()

    def _declare(self) -> None:
        c = self.config
        for i, p in enumerate(c.agent.profile.instances):
            self.ns.declare("agent_profile", p.id, p, ("agent", "profile", "instances", i, "id"))
        for i, pi in enumerate(c.provider.instances):
            declared = pi.id or pi.name
            if declared is None:
                raise self.source.error(
                    "a provider instance needs an `id` (or a `name`).", ("provider", "instances", i)
                )
            self.ns.declare(
                "provider", declared, pi, ("provider", "instances", i, "id" if pi.id else "name")
            )
        where = ("context", "compaction") if c.context is not None else ("compaction",)
        for i, ci in enumerate(self.compaction_section.instances):
            self.ns.declare("compaction", ci.id, ci, (*where, "instances", i, "id"))
        for i, si in enumerate(c.system_prompt_strategy.instances):
            self.ns.declare(
                "system_prompt_strategy",
                si.id,
                si,
                ("system_prompt_strategy", "instances", i, "id"),
            )
        for i, pr in enumerate(c.system_prompt.instances):
            self.ns.declare("system_prompt", pr.id, pr, ("system_prompt", "instances", i, "id"))
        for i, sa in enumerate(c.sub_agents.instances):
            self.ns.declare(
                "sub_agent",
                sa.id or sa.name,
                sa,
                ("sub_agents", "instances", i, "id" if sa.id else "name"),
            )

    # ------------------------------------------------------------------ agents

    def build_all(self) -> dict[str, BasicAgent]:
        instances = self.config.agent.instances
        if not instances:
            return {"default": self._agent(None, ())}
        agents: dict[str, BasicAgent] = {}
        for i, inst in enumerate(instances):
            path = ("agent", "instances", i)
            if inst.name in agents:
                raise self.source.error(
                    f"agent instance name {inst.name!r} is used twice.", (*path, "name")
                )
            agents[inst.name] = self._agent(inst, path)
        return agents

    def _path(self, *parts: str | int) -> Path:
        base = self.source.base_dir
        out = base
        for part in parts:
            out = out / str(part)
        return out

    def _workspace(self, inst: AgentInstance | None, profile: ProfileFields) -> Path:
        c = self.config
        chosen = (
            (inst.workspace if inst else None)
            or c.agent.workspace
            or profile.workspace
            or c.default_workspace
        )
        if chosen is None:
            return self.source.base_dir
        path = Path(chosen).expanduser()
        return path if path.is_absolute() else self.source.base_dir / path

    def _profile(
        self, inst: AgentInstance | None, path: tuple[str | int, ...]
    ) -> tuple[ProfileFields, str | None]:
        """The merged profile and the profile instance's own system prompt."""
        base = self.config.agent.profile
        merged = ProfileFields.model_validate(
            base.model_dump(include=set(ProfileFields.model_fields))
        )
        instance_prompt: str | None = None
        if inst is not None and inst.agent_profile:
            _name, chosen, _ref = self.ns.resolve(
                inst.agent_profile, "agent_profile", (*path, "agent_profile")
            )
            overrides = chosen.model_dump(
                include=set(ProfileFields.model_fields), exclude_none=True
            )
            instance_prompt = overrides.pop("system_prompt", None)
            merged = merged.model_copy(update=overrides)
        if inst is not None and inst.profile is not None:
            merged = merged.model_copy(update=inst.profile.model_dump(exclude_none=True))
        return merged, instance_prompt

    def _agent(self, inst: AgentInstance | None, path: tuple[str | int, ...]) -> BasicAgent:
        profile, instance_prompt = self._profile(inst, path)
        workspace = self._workspace(inst, profile)
        model = self._model(inst, path)
        agent = BasicAgent(model, provider=self.provider)
        agent.name = inst.name if inst else "default"
        agent.workspace = str(workspace)
        agent.system_prompt = self._system_prompt(inst, path, instance_prompt, workspace)
        agent.with_skills(self._skills(profile))
        if profile.thinking is not None:
            agent.with_thinking(profile.thinking)
        agent.with_temperature(profile.temperature).with_max_tokens(profile.max_tokens)
        agent.with_config(top_p=profile.top_p, seed=profile.seed)
        agent.with_config_id(profile.config_id)
        self._execution(agent)
        self._tools(agent, workspace)
        agent.with_compaction(self._compaction(profile, path))
        self._hooks(agent, workspace)
        self._sessions(agent, workspace)
        return agent

    # ------------------------------------------------------------------ pieces

    def _model(self, inst: AgentInstance | None, path: tuple[str | int, ...]) -> ModelConfig:
        base = self.config.provider
        fields = base.model_dump(include=set(ProviderFields.model_fields), exclude_defaults=True)
        where: tuple[str | int, ...] = ("provider",)
        if inst is not None and inst.provider:
            _name, chosen, _ref = self.ns.resolve(inst.provider, "provider", (*path, "provider"))
            fields.update(
                chosen.model_dump(include=set(ProviderFields.model_fields), exclude_defaults=True)
            )
            where = (*path, "provider")
        return self.model_config(ProviderFields.model_validate(fields), where)

    def model_config(self, p: ProviderFields, where: tuple[str | int, ...]) -> ModelConfig:
        if not p.model:
            if p.api or p.api_key or p.base_url:
                raise self.source.error(
                    'the provider has no `model`; set it, e.g. model = "openai:gpt-4o-mini".',
                    (*where, "model"),
                )
            return resolve_model(DEFAULT_MODEL)
        api = self._api(p.api, where) if p.api else None
        known = {spec.name for spec in known_providers()}
        prefix, sep, _rest = p.model.partition(":")
        try:
            if api is None and sep and prefix in known:
                config = resolve_model(p.model)
            elif api is None and p.provider in known:
                config = resolve_model(f"{p.provider}:{p.model}")
            elif api is None:
                raise self.source.error(
                    f"cannot tell which API serves model {p.model!r}: write it as `provider:model` "
                    f'(e.g. "openai:{p.model}") or set `api` (one of: {", ".join(sorted(_API_ALIASES))} '
                    f"or a protocol name). Known providers: {', '.join(sorted(known))}.",
                    (*where, "model"),
                )
            else:
                config = ModelConfig(
                    provider=p.provider or _default_provider(api), id=p.model, api=api
                )
        except UserError as exc:
            if isinstance(exc, ConfigError):
                raise
            raise self.source.error(str(exc), (*where, "model")) from None
        updates: dict[str, Any] = {}
        if p.api_key:
            register_secret(p.api_key)
            updates["api_key"] = SecretStr(p.api_key)
        for key in ("base_url", "name", "reasoning", "context_window", "max_tokens"):
            value = getattr(p, key)
            if value is not None:
                updates[key] = value
        if p.provider and api is not None:
            updates["provider"] = p.provider
        if p.cost is not None:
            updates["pricing"] = Pricing(
                input=p.cost.input_per_million,
                output=p.cost.output_per_million,
                cache_read=p.cost.cache_read_per_million,
                cache_write=p.cost.cache_write_per_million,
            )
        if p.headers:
            updates["headers"] = {**config.headers, **p.headers}
        if p.compat:
            updates["compat"] = {**config.compat, **p.compat}
        return config.model_copy(update=updates)

    def _api(self, value: str, where: tuple[str | int, ...]) -> ApiProtocol:
        key = value.strip().lower().replace("-", "_")
        if key in _API_ALIASES:
            return _API_ALIASES[key]
        if key in _APIS:
            return cast(ApiProtocol, key)
        raise self.source.error(
            f"unknown API protocol {value!r}; expected one of: {', '.join(sorted({*_API_ALIASES, *_APIS}))}.",
            (*where, "api"),
        )

    def _thinking(self, value: str, path: tuple[str | int, ...]) -> ThinkingLevel:
        level = value.strip().lower()
        if level not in _THINKING:
            raise self.source.error(
                f"invalid thinking level {value!r}; expected one of: {', '.join(_THINKING)}.",
                self._profile_key_path(path, "thinking_level"),
            )
        return cast(ThinkingLevel, level)

    def _profile_key_path(self, path: tuple[str | int, ...], key: str) -> tuple[str | int, ...]:
        # Point at whichever profile table actually set the key.
        if path:
            inst = self.config.agent.instances[cast(int, path[2])]
            if inst.profile is not None and getattr(inst.profile, key) is not None:
                return (*path, "profile", key)
            if inst.agent_profile:
                for i, p in enumerate(self.config.agent.profile.instances):
                    if (
                        getattr(p, key) is not None
                        and inst.agent_profile.strip("{}%").split(".")[-1] in p.id
                    ):
                        return ("agent", "profile", "instances", i, key)
        return ("agent", "profile", key)

    def _system_prompt(
        self,
        inst: AgentInstance | None,
        path: tuple[str | int, ...],
        instance_prompt: str | None,
        workspace: Path,
    ) -> str | None:
        c = self.config
        candidates: list[tuple[str | None, tuple[str | int, ...]]] = [
            (inst.system_prompt if inst else None, (*path, "system_prompt")),
            (c.agent.system_prompt, ("agent", "system_prompt")),
            (instance_prompt, (*path, "agent_profile")),
            (c.agent.profile.system_prompt, ("agent", "profile", "system_prompt")),
        ]
        for value, where in candidates:
            if value:
                return resolve_prompt(value, workspace, self.ns, where) or None
        return None

    def _skills(self, profile: ProfileFields) -> SkillSet:
        paths = self.config.skills.paths
        wanted = profile.skills or []
        if not paths:
            if wanted:
                raise self.source.error(
                    f"the profile lists skills ({', '.join(wanted)}) but `[skills].paths` names no "
                    "directory to load SKILL.md files from.",
                    ("agent", "profile", "skills"),
                )
            return SkillSet()
        found = load_skills([self._path(p) for p in paths], self.source)
        if not wanted:
            return found
        try:
            return found.select(wanted)
        except UserError as exc:
            raise self.source.error(
                f"{exc} (searched {', '.join(paths)})", ("agent", "profile", "skills")
            ) from None

    def _execution(self, agent: BasicAgent) -> None:
        e = self.config.execution
        if any(
            v is not None
            for v in (e.max_turns, e.max_total_tokens, e.max_duration_secs, e.max_cost)
        ):
            defaults = ExecutionLimits()
            agent.with_limits(
                ExecutionLimits(
                    max_turns=e.max_turns if e.max_turns is not None else defaults.max_turns,
                    max_total_tokens=e.max_total_tokens
                    if e.max_total_tokens is not None
                    else defaults.max_total_tokens,
                    max_duration=e.max_duration_secs
                    if e.max_duration_secs is not None
                    else defaults.max_duration,
                    max_cost=e.max_cost,
                )
            )
        r = e.retry
        if r is not None:
            base = RetryPolicy()
            agent.with_retry(
                ScaledRetryPolicy(
                    max_retries=r.max_retries if r.max_retries is not None else base.max_retries,
                    base_delay=r.initial_delay_ms / 1000
                    if r.initial_delay_ms is not None
                    else base.base_delay,
                    max_delay=r.max_delay_ms / 1000
                    if r.max_delay_ms is not None
                    else base.max_delay,
                    multiplier=r.backoff_multiplier if r.backoff_multiplier is not None else 2.0,
                )
            )
        if e.deadlines is not None:
            d, base_deadlines = e.deadlines, CallDeadlines()
            agent.with_deadlines(
                CallDeadlines(
                    connect=d.connect_secs or base_deadlines.connect,
                    first_byte=d.first_byte_secs or base_deadlines.first_byte,
                    idle=d.idle_secs or base_deadlines.idle,
                    total=d.total_secs or base_deadlines.total,
                )
            )
        if e.cache is not None:
            c = e.cache
            agent.with_cache(
                CacheConfig(
                    enabled=c.enabled,
                    strategy=ManualCache(c.cache_system, c.cache_tools, c.cache_messages)
                    if c.strategy == "manual"
                    else c.strategy,
                )
            )

    def _resolve_tools(
        self, names: list[str], path: tuple[str | int, ...], workspace: Path
    ) -> list[Any]:
        """Tools by name; the book's ``file_read`` / ``file_write`` are ``read_file`` /
        ``write_file``, and ``prun`` adds both pruning tools."""
        tools: list[Any] = []
        for i, name in enumerate(names):
            if name == "prun" and "prun" not in self.registry.names:
                tools.extend(prun_tools())
                continue
            alias = _TOOL_ALIASES.get(name)
            if alias is not None and name not in self.registry.names:
                name = alias
            try:
                tools.extend(
                    self.registry.resolve(
                        [name], root=workspace, settings=self.config.tools.builtin
                    )
                )
            except UserError as exc:
                raise self.source.error(str(exc), (*path, i)) from None
        return tools

    def _tools(self, agent: BasicAgent, workspace: Path) -> None:
        t = self.config.tools
        tools = self._resolve_tools(t.enabled, ("tools", "enabled"), workspace)
        for i, sub in enumerate(self.config.sub_agents.instances):
            tools.append(self._sub_agent(sub, ("sub_agents", "instances", i), workspace))
        self._approvals(tools)
        agent.with_tools(tools)
        for i, instance in enumerate(t.instances):
            agent.with_toolset(tool_instance(instance, workspace, self.source, i))
        strategy: Any = Batched(t.batch_size) if t.tool_strategy == "batched" else t.tool_strategy
        agent.with_tool_execution(strategy, timeout=t.timeout)
        agent.with_tool_result_limit(t.max_result_bytes)
        if t.approver is not None:
            approver = self.callbacks.get(t.approver) or self.callbacks.get(
                t.approver.split("::", 1)[-1]
            )
            if approver is None:
                known = ", ".join(sorted(self.callbacks)) or "none were passed"
                raise self.source.error(
                    f"The approver {t.approver!r} is not a callable passed as "
                    f"callbacks={{{t.approver!r}: fn}} (known: {known}).",
                    ("tools", "approver"),
                )
            agent.with_approver(approver)

    def _approvals(self, tools: list[Any]) -> None:
        names = {getattr(tool, "name", None): tool for tool in tools}
        for i, name in enumerate(self.config.tools.require_approval):
            tool = names.get(name)
            if tool is None:
                raise self.source.error(
                    f"require_approval names {name!r}, which is not an enabled tool "
                    f"(enabled: {', '.join(str(n) for n in names) or 'none'}).",
                    ("tools", "require_approval", i),
                )
            tool.needs_approval = True

    def _sub_agent(
        self, sub: SubAgentInstance, path: tuple[str | int, ...], workspace: Path
    ) -> SubAgentTool:
        if sub.provider:
            _n, chosen, _r = self.ns.resolve(sub.provider, "provider", (*path, "provider"))
            fields = self.config.provider.model_dump(
                include=set(ProviderFields.model_fields), exclude_defaults=True
            )
            fields.update(
                chosen.model_dump(include=set(ProviderFields.model_fields), exclude_defaults=True)
            )
            if sub.model:
                fields["model"] = sub.model
            model = self.model_config(ProviderFields.model_validate(fields), (*path, "provider"))
        elif sub.model:
            fields = self.config.provider.model_dump(
                include=set(ProviderFields.model_fields), exclude_defaults=True
            )
            fields["model"] = sub.model
            model = self.model_config(ProviderFields.model_validate(fields), path)
        else:
            model = self._model(None, ())
        config = AgentLoopConfig(
            model=model,
            provider=self.provider,
            thinking=self._thinking(sub.thinking_level, path) if sub.thinking_level else "off",
            max_tokens=sub.max_tokens,
            temperature=sub.temperature,
            limits=ExecutionLimits(max_turns=sub.max_turns, max_duration=300.0),
        )
        tools = self._resolve_tools(sub.tools, (*path, "tools"), workspace)
        try:
            return SubAgentTool(
                sub.name,
                description=sub.description,
                system_prompt=sub.system_prompt,
                tools=tools,
                max_turns=sub.max_turns,
                config=config,
            )
        except UserError as exc:
            raise self.source.error(str(exc), path) from None

    def _compaction_section(self) -> CompactionSection:
        """``[compaction]``, or the book's ``[context]`` + ``[context.compaction]`` form."""
        ctx = self.config.context
        if ctx is None:
            return self.config.compaction
        if self.config.compaction.model_dump(exclude_defaults=True):
            raise self.source.error(
                "both `[compaction]` and `[context]` are set; use one form: `[compaction]` with "
                "`max_context_tokens` and the compaction keys, or `[context]` with "
                "`[context.compaction]`.",
                ("context",),
            )
        for legacy, modern in (
            ("keep_first", "keep_first_turns"),
            ("keep_recent", "keep_recent_turns"),
        ):
            if getattr(ctx, legacy) is not None:
                raise self.source.error(
                    f"`[context].{legacy}` counted messages and is not supported; set "
                    f"`{modern}` (counted in turns) under `[context.compaction]`.",
                    ("context", legacy),
                )
        merged = ctx.compaction.model_copy()
        for key in ("max_context_tokens", "system_prompt_tokens", "tool_output_max_lines"):
            value = getattr(ctx, key)
            if value is not None:
                if getattr(merged, key) is not None:
                    raise self.source.error(
                        f"`{key}` is set in both `[context]` and `[context.compaction]`; keep one.",
                        ("context", key),
                    )
                setattr(merged, key, value)
        return merged

    def _compaction(
        self, profile: ProfileFields, path: tuple[str | int, ...]
    ) -> CompactionConfig | None:
        """Compaction is on by default (sized to the model's window); ``enabled = false`` turns
        it off. A profile's ``compaction = "{{compaction.NAME}}"`` overrides the base keys."""
        section = self.compaction_section
        fields = section.model_dump(include=set(CompactionFields.model_fields), exclude_none=True)
        if profile.compaction:
            _n, chosen, _r = self.ns.resolve(
                profile.compaction, "compaction", self._profile_key_path(path, "compaction")
            )
            fields.update(
                chosen.model_dump(include=set(CompactionFields.model_fields), exclude_none=True)
            )
        if fields.pop("enabled", True) is False:
            return None
        try:
            return CompactionConfig(**fields)
        except (TypeError, ValueError) as exc:
            raise self.source.error(str(exc), ("compaction",)) from None

    def _callback(
        self, hook: str, value: str, workspace: Path, path: tuple[str | int, ...]
    ) -> Callable[..., Any]:
        if is_script_path(value):
            return script_hook(hook, value, workspace)
        name = value.split("::", 1)[-1]
        fn = self.callbacks.get(value) or self.callbacks.get(name)
        if fn is None:
            known = ", ".join(sorted(self.callbacks)) or "none were passed"
            raise self.source.error(
                f"{value!r} is neither a script path nor a callable passed as "
                f"callbacks={{{name!r}: fn}} (known: {known}).",
                path,
            )
        return fn

    def _hooks(self, agent: BasicAgent, workspace: Path) -> None:
        cb = self.config.callbacks
        for hook in _LOOP_HOOKS:
            value = getattr(cb, hook)
            if value:
                agent.with_hook(hook, self._callback(hook, value, workspace, ("callbacks", hook)))
        h = self.config.hooks
        if h.transform_context:
            agent.with_config(
                transform_context=self._callback(
                    "transform_context",
                    h.transform_context,
                    workspace,
                    ("hooks", "transform_context"),
                )
            )
        for i, name in enumerate(h.input_filters):
            agent.with_input_filter(
                self._callback("input_filter", name, workspace, ("hooks", "input_filters", i))
            )

    def _task_callback(self, hook: str, workspace: Path) -> Callable[[Any], Any] | None:
        value = getattr(self.config.callbacks, hook)
        if not value:
            return None
        if is_script_path(value):

            def run(session: Any, command: str = value) -> Any:
                payload = {
                    "hook": hook,
                    "session_id": session.session_id,
                    "agent_id": session.agent_id,
                    "loop_count": len(session.loops),
                }
                return run_script_sync(command, payload, workspace)

            return run
        return self._callback(hook, value, workspace, ("callbacks", hook))

    def _sessions(self, agent: BasicAgent, workspace: Path) -> None:
        s = self.config.session
        recorder = SessionRecorder(
            SessionRecorderConfig(
                include_streaming_events=s.include_streaming_events,
                capture_turn_requests=s.capture_turn_requests,
                scope=s.scope,
                before_task=self._task_callback("before_task", workspace),
                after_task=self._task_callback("after_task", workspace),
            )
        )
        store = None
        if s.scope == "persistent":
            spec = s.store or str(workspace / ".phi" / "sessions")
            kind, sep, location = spec.partition(":")
            if sep and kind in ("json", "sqlite"):
                spec = f"{kind}:{self._rel(location, workspace)}"
            else:
                spec = str(self._rel(spec, workspace))
            store = open_session_store(spec)
        elif s.store:
            raise self.source.error(
                '`store` is set but scope is "ephemeral"; set scope = "persistent" to save sessions.',
                ("session", "store"),
            )
        agent.with_session_recorder(recorder, store=store)

    def _rel(self, value: str, workspace: Path) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.source.base_dir / path


def _default_provider(api: ApiProtocol) -> str:
    return {
        "anthropic_messages": "anthropic",
        "openai_completions": "openai",
        "openai_responses": "openai",
        "azure_openai_responses": "azure",
        "google_generative_ai": "google",
        "google_vertex": "vertex",
        "bedrock_converse_stream": "bedrock",
        "local_gguf": "local",
    }.get(api, api)
