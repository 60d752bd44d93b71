"""Config files: TOML, JSON and YAML agent definitions (``${VAR}`` substitution, providers,
profiles and instances, system prompts from text, ``file:`` or prompt strategies, limits, retry,
cache, compaction, tools by name, sub-agents, sessions, callbacks, skills and the ``{{…}}``
reference protocol) turned into ``BasicAgent`` objects. Every error names file, line, key path
and what was expected.
"""

from ._build import ScaledRetryPolicy, SubAgentTool, agent_from_config, agents_from_config
from ._callbacks import (
    ScriptCallbackError,
    detect_interpreter,
    is_script_path,
    run_script,
    run_script_sync,
)
from ._load import load_config, parse_config, parse_config_auto
from ._prompts import Skill, format_skills, load_skills
from ._refs import NAMESPACES, Reference, parse_reference
from ._schema import AgentConfig
from ._source import ConfigFormat, substitute_env

__all__ = [
    "NAMESPACES",
    "AgentConfig",
    "ConfigFormat",
    "Reference",
    "ScaledRetryPolicy",
    "ScriptCallbackError",
    "Skill",
    "SubAgentTool",
    "agent_from_config",
    "agents_from_config",
    "detect_interpreter",
    "format_skills",
    "is_script_path",
    "load_config",
    "load_skills",
    "parse_config",
    "parse_config_auto",
    "parse_reference",
    "run_script",
    "run_script_sync",
    "substitute_env",
]
