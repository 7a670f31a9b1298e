"""Built-in tools (one module per family), the registry and the `@tool` decorator for custom tools."""
