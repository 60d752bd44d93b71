"""Config files and specs: agent definitions, race files and selection specs (TOML, JSON, YAML).

Agent configs (``${VAR}`` substitution, providers, profiles and instances, system prompts from
text, ``file:`` or prompt strategies, limits, retry, cache, compaction, tools by name, sub-agents,
sessions, callbacks, skills and the ``{{…}}`` reference protocol) become ``BasicAgent`` objects;
race files and ``-m`` strings become a checked :class:`RacePlan` (:func:`plan_race` — the one
place that plans a race, for the CLI, config files and the gateway); selection specs become a
``ModelSelector``. Every error names file, line, key path and what was expected.
"""

from ..errors import ScriptCallbackError
from ._build import ScaledRetryPolicy, agent_from_config, agents_from_config
from ._callbacks import detect_interpreter, is_script_path, run_script, run_script_sync
from ._load import load_config, parse_config, parse_config_auto
from ._plan import (
    DEFAULT_LOCAL_MAX_TOKENS,
    EMBEDDED_DEFAULT_STRATEGY,
    JUDGE_MAX_TOKENS,
    PlanWarning,
    RacePlan,
    bandit_payload,
    bandit_race_from_plan,
    default_strategy,
    plan_race,
)
from ._prompts import format_skills, load_skills
from ._race import (
    DEFAULT_BRANCHES,
    DEFAULT_JUDGE,
    RACE_STRATEGIES,
    BranchSpec,
    RaceSpec,
    load_race_spec,
    parse_branch,
    parse_race_spec,
    split_branch_list,
)
from ._refs import NAMESPACES, Reference, parse_reference
from ._schema import AgentConfig, BranchFields
from ._select import BUILTIN_SCORERS, SelectBudget, SelectSpec, load_select_spec, prompt_chain
from ._source import ConfigFormat, substitute_env

__all__ = [
    "BUILTIN_SCORERS",
    "DEFAULT_BRANCHES",
    "DEFAULT_JUDGE",
    "DEFAULT_LOCAL_MAX_TOKENS",
    "EMBEDDED_DEFAULT_STRATEGY",
    "JUDGE_MAX_TOKENS",
    "NAMESPACES",
    "RACE_STRATEGIES",
    "AgentConfig",
    "BranchFields",
    "BranchSpec",
    "ConfigFormat",
    "PlanWarning",
    "RacePlan",
    "RaceSpec",
    "Reference",
    "ScaledRetryPolicy",
    "ScriptCallbackError",
    "SelectBudget",
    "SelectSpec",
    "agent_from_config",
    "agents_from_config",
    "bandit_payload",
    "bandit_race_from_plan",
    "default_strategy",
    "detect_interpreter",
    "format_skills",
    "is_script_path",
    "load_config",
    "load_race_spec",
    "load_select_spec",
    "load_skills",
    "parse_branch",
    "parse_config",
    "parse_config_auto",
    "parse_race_spec",
    "parse_reference",
    "plan_race",
    "prompt_chain",
    "run_script",
    "run_script_sync",
    "split_branch_list",
    "substitute_env",
]
