"""The MCP SDK side of ``phi mcp serve``: the tools ``race``, ``route`` and ``models`` declared
on an :class:`~mcp.server.mcpserver.MCPServer` over :class:`~phi_core.mcp_server.RaceTools`.

A module of its own because the SDK reads the tools' annotations (the parameters' descriptions,
the ``Context`` it injects) from module globals, and the SDK is an optional extra: it is imported
only when a server is built (:func:`phi_core.mcp_server.mcp_server`).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from . import __version__
from .config import RACE_STRATEGIES
from .errors import PhiError, redact
from .mcp_server import Progress, RaceTools

__all__ = ["build_server"]

INSTRUCTIONS = (
    "phi races several LLM configurations on one question, judges the answers and returns the "
    "best with its rationale and costs. Call `models` to see the profiles; `race` races one; "
    "`route` lets a learned router pick (racing only when unsure)."
)

# The tools' parameters, with the descriptions an MCP client shows.
Prompt = Annotated[str, Field(description="The question or task every branch answers.")]
ProfileName = Annotated[
    str | None, Field(description="A profile from the `models` tool (default: `default`).")
]
Models = Annotated[
    list[str] | None,
    Field(
        description="Race these instead of the profile's branches: `provider:model` "
        "(optionally `@temperature=0.2,max_tokens=200`) or branch names of the profile."
    ),
]
MaxTokens = Annotated[
    int | None, Field(ge=1, description="Output token limit of branches that set none.")
]
MaxCost = Annotated[
    float | None,
    Field(gt=0, description="Dollars the whole call may spend; a call that may not fit is "
          "refused unsent."),
]  # fmt: skip

Strategy = Annotated[
    str | None,
    Field(
        description=f"How the winner is chosen: {', '.join(RACE_STRATEGIES)} "
        "(default: the profile's, else judge)."
    ),
]
JudgeModel = Annotated[str | None, Field(description="The judge model (`provider:model`).")]
DryRun = Annotated[bool, Field(description="Only rank the branches: call no model, learn nothing.")]


def build_server(tools: RaceTools) -> MCPServer:
    """The server with its three tools; errors of phi's own (bad input, a race without a winner)
    become tool errors whose text says what was wrong, with secrets redacted."""
    server: MCPServer = MCPServer(
        "phi", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
    )

    def reporter(ctx: Context | None) -> Progress | None:
        return ctx.report_progress if ctx is not None else None

    async def answer(call: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        try:
            return await call
        except PhiError as exc:  # bad input or a race without a winner: the caller reads why
            raise ToolError(redact(str(exc))) from None

    @server.tool(name="race")
    async def race(
        prompt: Prompt,
        profile: ProfileName = None,
        models: Models = None,
        strategy: Strategy = None,
        judge: JudgeModel = None,
        max_tokens: MaxTokens = None,
        max_cost_usd: MaxCost = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        """Race several LLM configurations on the prompt, judge them, return the winner's
        answer with the rationale and every branch's status, token usage and cost."""
        return await answer(
            tools.race(
                prompt, profile=profile, models=models, strategy=strategy, judge=judge,
                max_tokens=max_tokens, max_cost_usd=max_cost_usd, progress=reporter(ctx),
            )
        )  # fmt: skip

    @server.tool(name="route")
    async def route(
        prompt: Prompt,
        profile: ProfileName = None,
        models: Models = None,
        max_tokens: MaxTokens = None,
        max_cost_usd: MaxCost = None,
        dry_run: DryRun = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        """Let the learned router answer: it ranks the profile's branches for this prompt,
        races the top ones only when unsure, answers with the best and learns from it."""
        return await answer(
            tools.route(
                prompt, profile=profile, models=models, max_tokens=max_tokens,
                max_cost_usd=max_cost_usd, dry_run=dry_run, progress=reporter(ctx),
            )
        )  # fmt: skip

    @server.tool(name="models")
    def models() -> dict[str, Any]:
        """The profiles this server races and the providers and models phi knows, with prices
        per million tokens and whether each provider's key is set (never its value)."""
        try:
            return tools.models()
        except PhiError as exc:  # an unreadable keys file
            raise ToolError(redact(str(exc))) from None

    return server
