"""Configuration resolved once: the endpoint and key (`endpoint`), config files and their trust
(`settings`), the allowed values and defaults of every setting (`choices`), model prices (`pricing`),
AGENTS.md (`agentsmd`) and the terminal's preferences (`ui`).

Precedence, highest first (the one place it is written down; docs/library.md and the README point here):

1. settings given explicitly: command-line flags, `AgentOptions(...)` / `Agent(...)` arguments;
2. environment variables: `KIMI_MODEL`, the key and base-URL variables (`endpoint.resolve_endpoint`);
3. the configuration files, read only when asked (`AgentOptions.from_workspace`, which the command line
   uses): the workspace's `.kimicode/config.toml` over the user's `KIMICODE_HOME/config.toml`, except that
   an untrusted project may only make kimicode stricter and may not set providers, MCP servers, keys or
   paths (`settings.load_settings`); the user's `[trust] workspaces` decides what is trusted;
4. the defaults in `choices` (and each model's profile).

The library is hermetic by default: `Agent()` reads steps 1, 2 and 4 only.
"""
