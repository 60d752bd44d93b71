"""An agent that uses the tools of an MCP server (`examples/mcp_server.py`, started as a
subprocess over stdio).

    python examples/mcp_agent.py                      # no key: a scripted model calls the tool
    python examples/mcp_agent.py openai:gpt-4o-mini   # a vendor model decides (needs its key)

(The embedded `local:smollm2` does not call tools.) The same server from the shell:
`phi run "How many words in 'a b c'?" -m openai:gpt-4o-mini --mcp "python examples/mcp_server.py"`.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from phi_core import BasicAgent, ToolExecutionEnd
from phi_core.testing import Reply, ScriptedProvider, call

SERVER = Path(__file__).with_name("mcp_server.py")
QUESTION = "How many words are in 'the quick brown fox jumps'?"


def make_agent(model: str | None) -> BasicAgent:
    if model:
        agent = BasicAgent(model)
    else:  # plays the part of a model: call the tool, then answer with its result
        agent = BasicAgent(
            provider=ScriptedProvider(
                [
                    Reply(tool_calls=[call("word_count", {"text": "the quick brown fox jumps"})]),
                    Reply("There are 5 words."),
                ]
            )
        )
    # The server starts on the first prompt and stops when the `async with` block ends.
    return agent.with_system_prompt("Use the tools to answer.").with_mcp_server_stdio(
        sys.executable, [str(SERVER)]
    )


async def main() -> None:
    async with make_agent(sys.argv[1] if len(sys.argv) > 1 else None) as agent:
        print("tools:", ", ".join(t.name for t in await agent.get_tools()))
        async for event in agent.prompt(QUESTION):
            if isinstance(event, ToolExecutionEnd):
                result = "".join(getattr(c, "text", "") for c in event.result.content)
                print(f"tool {event.tool_name} -> {result}")
        print("answer:", agent.messages[-1].content[0].text)  # type: ignore[union-attr]


if __name__ == "__main__":
    asyncio.run(main())
