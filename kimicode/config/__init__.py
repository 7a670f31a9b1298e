"""Configuration resolved once: the endpoint and key (`endpoint`), config files and their trust
(`settings`), model prices (`pricing`), AGENTS.md (`agentsmd`) and the terminal's preferences (`ui`).

Precedence, highest first: command-line flags, environment variables, the user's
`KIMICODE_HOME/config.toml`, then a trusted project's `.kimicode/config.toml`.
"""
