"""Web search: Moonshot's built-in `$web_search` on Moonshot's endpoint, a configured provider elsewhere.

On Moonshot's API the server runs the search itself (kimicode/testing/websearch.py describes the flow):
the request declares `{"type": "builtin_function", "function": {"name": "$web_search"}}`, the model calls
it, and the tool's whole job is to hand the call's arguments back unchanged. Each search costs money
(`[web_search] price_per_search`, Moonshot's list price $0.005 by default) besides the tokens of its
results, which the next request counts as input: the tool's one-line summary says both.

Elsewhere `[web_search] provider` picks a search API the `web_search` tool calls: `searxng` (a SearXNG
instance's JSON API at `url`), `brave` (Brave Search API) or `tavily` (Tavily), with the key read from
the environment variable `api_key_env` (never from a file). No provider configured: no tool.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult

BUILTIN_NAME = "$web_search"
MOONSHOT_PRICE = 0.005
"""US dollars per `$web_search` call on Moonshot's international API (its price list, December 2026)."""
PROVIDERS = ("searxng", "brave", "tavily")
DEFAULT_KEY_ENV = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
ENDPOINTS = {"brave": "https://api.search.brave.com/res/v1/web/search", "tavily": "https://api.tavily.com/search"}
DEFAULT_RESULTS = 5
TIMEOUT = 20.0


@dataclass(frozen=True)
class BuiltinFunction(Tool):
    """A function the server runs itself: declared as `builtin_function`, with no parameters of its own."""

    def schema(self) -> dict[str, Any]:
        return {"type": "builtin_function", "function": {"name": self.name}}


def moonshot_web_search(price: float = MOONSHOT_PRICE) -> Tool:
    """`$web_search` on Moonshot's endpoint: the arguments go back unchanged, the server searches."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        usage = args.get("usage") if isinstance(args.get("usage"), Mapping) else {}
        tokens = usage.get("total_tokens") if isinstance(usage, Mapping) else None
        size = f"{tokens:,} tokens of results" if isinstance(tokens, int) else "results"
        summary = f"searched the web on Moonshot's server ({size}; ${price:g} per search)"
        return ToolResult(
            content=json.dumps(args, ensure_ascii=False), summary=summary, display={"web_search_usd": price}
        )

    return BuiltinFunction(
        name=BUILTIN_NAME,
        description="Moonshot's built-in web search.",
        parameters={"type": "object"},
        fn=run,
        kind="other",
    )


@dataclass(frozen=True)
class Provider:
    """A configured search API (`[web_search]`)."""

    name: str
    url: str
    key_env: str | None
    max_results: int = DEFAULT_RESULTS

    @classmethod
    def from_settings(cls, table: Mapping[str, Any]) -> Provider | None:
        """The provider `[web_search]` names, None when it names none; ValueError for a bad table."""
        name = table.get("provider")
        if name in (None, "off", "moonshot"):
            return None
        if name not in PROVIDERS:
            raise ValueError(f"[web_search] provider must be one of {', '.join(PROVIDERS)} (got {name!r})")
        url = table.get("url") or ENDPOINTS.get(name)
        if not isinstance(url, str) or not url:
            raise ValueError(f'[web_search] provider {name} needs url = "https://your-searxng.example"')
        key_env = table.get("api_key_env") or DEFAULT_KEY_ENV.get(name)
        count = table.get("max_results", DEFAULT_RESULTS)
        return cls(
            name,
            url.rstrip("/"),
            key_env if isinstance(key_env, str) else None,
            count if isinstance(count, int) and 0 < count <= 20 else DEFAULT_RESULTS,
        )

    def key(self) -> str | None:
        return os.environ.get(self.key_env) if self.key_env else None

    async def search(self, query: str, count: int) -> list[tuple[str, str, str]]:
        """(title, URL, snippet) of the first `count` results."""
        from kimicode.tools.web import request_json

        key = self.key()
        if self.name != "searxng" and not key:
            raise ToolError(f"no key for the {self.name} search API: set {self.key_env} in the environment")
        if self.name == "searxng":
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            data = await request_json(
                "GET", f"{self.url}/search", headers=headers, timeout=TIMEOUT, params={"q": query, "format": "json"}
            )
            rows = _field(data, "results")
            return [(_s(r, "title"), _s(r, "url"), _s(r, "content")) for r in rows][:count]
        if self.name == "brave":
            data = await request_json(
                "GET",
                self.url,
                headers={"X-Subscription-Token": key or ""},
                timeout=TIMEOUT,
                params={"q": query, "count": str(count)},
            )
            rows = _field(_field(data, "web"), "results")
            return [(_s(r, "title"), _s(r, "url"), _s(r, "description")) for r in rows][:count]
        data = await request_json(
            "POST",
            self.url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=TIMEOUT,
            body={"query": query, "max_results": count},
        )
        rows = _field(data, "results")
        return [(_s(r, "title"), _s(r, "url"), _s(r, "content")) for r in rows][:count]


def _field(data: object, name: str) -> Any:
    value = data.get(name) if isinstance(data, Mapping) else None
    if name == "web":
        return value if isinstance(value, Mapping) else {}
    return [r for r in value if isinstance(r, Mapping)] if isinstance(value, list) else []


def _s(row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    return " ".join(value.split())[:500] if isinstance(value, str) else ""


def provider_web_search(provider: Provider) -> Tool:
    """The `web_search` tool over a configured provider."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        query = str(args.get("query") or "").strip()
        if not query:
            raise ToolError("query is empty")
        count = args.get("max_results")
        count = count if isinstance(count, int) and 0 < count <= 20 else provider.max_results
        found = await provider.search(query, count)
        if not found:
            return ToolResult(content=f"No results for {query!r}.", summary=f"no results ({provider.name})")
        lines = [
            f"{n}. {title or '(no title)'}\n   {url}\n   {snippet}".rstrip()
            for n, (title, url, snippet) in enumerate(found, 1)
        ]
        text = f"Results for {query!r} ({provider.name}):\n\n" + "\n".join(lines)
        return ToolResult(
            content=text + "\n\nUse web_fetch on a URL to read the page.",
            summary=f"{len(found)} result(s) from {provider.name}",
        )

    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to search for."},
            "max_results": {
                "type": "integer",
                "description": f"How many results (1-20, default {provider.max_results}).",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    return Tool(
        name="web_search",
        description="Search the web; returns titles, URLs and snippets (read a page with web_fetch).",
        parameters=parameters,
        fn=run,
        kind="other",
    )
