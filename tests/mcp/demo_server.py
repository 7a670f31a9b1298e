"""A small MCP server for the tests, written with the official SDK.

Usage: python demo_server.py [stdio | http PORT] — tools: echo, add, fail, tiny_image, env_value.
"""

from __future__ import annotations

import base64
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent

server = MCPServer("demo", instructions="A demo server for kimicode's tests.")

# a 1x1 PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise ValueError(f"failed on purpose: {reason}")


@server.tool()
def tiny_image() -> ImageContent:
    """Return a 1x1 PNG image."""
    return ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png")


@server.tool()
def env_value(name: str) -> str:
    """The value of an environment variable of the server process."""
    return os.environ.get(name, "(unset)")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
