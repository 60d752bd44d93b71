"""Tests of ``phi mcp serve`` (the MCP server offering race, route and models)."""
