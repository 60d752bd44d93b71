"""A small MCP server (built with the official `mcp` SDK) for `examples/mcp_agent.py`.

Run on its own it speaks MCP on stdin/stdout: `python examples/mcp_server.py`.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("word-tools", log_level="WARNING")


@server.tool()
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


@server.tool()
def reverse_words(text: str) -> str:
    """Reverse the order of the words in a text."""
    return " ".join(reversed(text.split()))


if __name__ == "__main__":
    server.run("stdio")
