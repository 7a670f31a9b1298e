"""`kimicode serve` and `kimicode web`: the agent over HTTP (docs/serve.md).

A face like the terminal and ACP: many sessions in one process, each an `Agent` of its own, their events
as server-sent events, approvals answered over HTTP through the agent's one permission path. The ASGI
stack (Starlette, uvicorn) is imported only here, so `import kimicode` and `kimicode -p` never load it.
`kimicode.serve.client` is a small typed client for scripts and tests.
"""
