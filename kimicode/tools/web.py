"""web_fetch: read a web page as text.

Only http and https, a bounded number of redirects (each hop checked again), a cap on the bytes read and
on the text returned. HTML becomes Markdown-ish text (headings, lists, links, code blocks) through the
standard library's `html.parser`; JSON, XML and other text types are returned as they are; binary
content is refused. The permission layer asks before each fetch unless the user allowed it (kind
`execute`: the call reaches outside the machine).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from kimicode._version import __version__
from kimicode.config.choices import DEFAULT_WEB_MAX_CHARS, DEFAULT_WEB_MAX_REDIRECTS, DEFAULT_WEB_TIMEOUT
from kimicode.context.output import save_spill
from kimicode.prompts import load_prompt
from kimicode.tools.base import Tool, ToolContext, ToolError, ToolResult

DEFAULT_MAX_CHARS = DEFAULT_WEB_MAX_CHARS
"""Text returned to the model (the rest is cut with a note)."""
MAX_BYTES = 5 * 1024 * 1024
"""Bytes read from the server at most."""
DEFAULT_MAX_REDIRECTS = DEFAULT_WEB_MAX_REDIRECTS
DEFAULT_TIMEOUT = DEFAULT_WEB_TIMEOUT
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml", "application/javascript",
              "application/ld+json", "application/rss+xml", "application/atom+xml", "application/x-yaml")  # fmt: skip


def check_url(url: str) -> str:
    """The URL if it is an absolute http(s) URL; ToolError otherwise."""
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ToolError(f"not a valid URL: {url!r} ({exc})") from None
    if parts.scheme.lower() not in ("http", "https"):
        shown = parts.scheme or "none"
        raise ToolError(f"only http and https URLs can be fetched (the scheme is {shown}): {url!r}")
    if not parts.hostname:
        raise ToolError(f"the URL has no host: {url!r}")
    return url


# -- HTML to text -----------------------------------------------------------------------------------

_SKIP = {"script", "style", "noscript", "template", "svg", "iframe", "head", "nav", "aside", "footer", "form",
         "button", "select", "canvas", "object"}  # fmt: skip
_BLOCK = {"p", "div", "section", "article", "main", "header", "table", "tr", "ul", "ol", "dl", "dt", "dd",
          "blockquote", "figure", "figcaption", "hr", "details", "summary"}  # fmt: skip
_VOID = {"br", "img", "hr", "meta", "link", "input", "source", "area", "base", "col", "embed", "wbr", "track"}


class _TextParser(HTMLParser):
    """Collects readable text with light Markdown: `#` headings, `-` items, [links](url), fenced code."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.out: list[str] = []
        self.title = ""
        self._in_title = False
        self._skip = 0
        self._pre = 0
        self._links: list[str | None] = []
        self._link_start: list[int] = []

    def _newline(self, count: int = 1) -> None:
        self.out.append("\n" * count)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in _SKIP:
            if tag not in _VOID:
                self._skip += 1
            return
        if self._skip:
            return
        a = dict(attrs)
        if tag in _BLOCK:
            self._newline(2)
        elif tag == "br":
            self._newline()
        elif re.fullmatch(r"h[1-6]", tag):
            self._newline(2)
            self.out.append("#" * int(tag[1]) + " ")
        elif tag == "li":
            self._newline()
            self.out.append("- ")
        elif tag == "pre":
            self._newline(2)
            self.out.append("```\n")
            self._pre += 1
        elif tag == "code" and not self._pre:
            self.out.append("`")
        elif tag in ("td", "th"):
            self.out.append(" | ")
        elif tag == "img":
            alt = (a.get("alt") or "").strip()
            if alt:
                self.out.append(f"[image: {alt}]")
        elif tag == "a":
            href = (a.get("href") or "").strip()
            ok = href and not href.lower().startswith(("javascript:", "mailto:", "#", "data:"))
            self._links.append(urljoin(self.base_url, href) if ok else None)
            self._link_start.append(len(self.out))

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in _SKIP:
            if tag not in _VOID and self._skip:
                self._skip -= 1
            return
        if self._skip:
            return
        if tag in _BLOCK or re.fullmatch(r"h[1-6]", tag):
            self._newline(2)
        elif tag == "pre" and self._pre:
            self._pre -= 1
            self.out.append("\n```")
            self._newline(2)
        elif tag == "code" and not self._pre:
            self.out.append("`")
        elif tag == "a" and self._links:
            href = self._links.pop()
            start = self._link_start.pop()
            text = "".join(self.out[start:]).strip()
            if href and text:
                self.out[start:] = [f"[{text}]({href})"]

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if self._skip:
            return
        if self._pre:
            self.out.append(data)
        else:
            self.out.append(re.sub(r"\s+", " ", data))


def html_to_text(html: str, base_url: str = "") -> tuple[str, str]:
    """(title, readable text) of an HTML document."""
    parser = _TextParser(base_url)
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # html.parser copes with almost anything; keep what was collected if not
        pass
    lines: list[str] = []
    fenced = False
    for line in "".join(parser.out).split("\n"):
        if line.strip().startswith("```"):
            fenced = not fenced
            lines.append(line.strip())
        else:
            lines.append(line.rstrip() if fenced else line.strip())
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return " ".join(parser.title.split()), text


# -- fetching ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    """What the server sent (the body possibly cut at MAX_BYTES)."""

    url: str
    status: int
    content_type: str
    body: bytes
    truncated: bool
    redirects: list[str]


def _charset(content_type: str, body: bytes) -> str:
    m = re.search(r"charset=([\w\-]+)", content_type, re.I) or re.search(
        rb"<meta[^>]+charset=[\"']?([\w\-]+)", body[:4096], re.I
    )
    if m:
        found = m.group(1)
        name = found.decode("ascii", "replace") if isinstance(found, bytes) else found
        try:
            "".encode(name)
            return name
        except LookupError:
            pass
    return "utf-8"


async def fetch(url: str, max_redirects: int, timeout: float, max_bytes: int = MAX_BYTES) -> Fetched:
    """GET `url`, following up to `max_redirects` redirects to http(s) URLs only."""
    import httpx2

    redirects: list[str] = []
    headers = {"User-Agent": f"kimicode/{__version__} (web_fetch)", "Accept": "text/html,text/*;q=0.9,*/*;q=0.5"}
    async with httpx2.AsyncClient(follow_redirects=False, timeout=timeout, headers=headers, trust_env=True) as client:
        current = check_url(url)
        while True:
            try:
                async with client.stream("GET", current) as response:
                    if response.is_redirect:
                        location = response.headers.get("location", "")
                        if len(redirects) >= max_redirects:
                            raise ToolError(f"too many redirects (more than {max_redirects}); last one to {location}")
                        target = urljoin(current, location)
                        try:
                            check_url(target)
                        except ToolError as exc:
                            raise ToolError(f"{current} redirects to a URL that cannot be fetched: {exc}") from None
                        redirects.append(target)
                        current = target
                        continue
                    chunks: list[bytes] = []
                    size = 0
                    truncated = False
                    async for chunk in response.aiter_bytes():
                        chunks.append(chunk)
                        size += len(chunk)
                        if size >= max_bytes:
                            truncated = True
                            break
                    body = b"".join(chunks)[:max_bytes]
                    ctype = response.headers.get("content-type", "")
                    return Fetched(str(response.url), response.status_code, ctype, body, truncated, redirects)
            except httpx2.TimeoutException:
                raise ToolError(f"timed out after {timeout:g} s fetching {current}") from None
            except httpx2.HTTPError as exc:
                raise ToolError(f"cannot fetch {current}: {type(exc).__name__}: {exc}") from None


async def request_json(
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    timeout: float,
    body: dict[str, object] | None = None,
    params: dict[str, str] | None = None,
) -> object:
    """One JSON request to a search provider (tools/websearch.py): the parsed answer, or ToolError saying
    what went wrong (never the key it was sent with). No redirect is followed: it would carry the key."""
    import httpx2

    check_url(url)
    agent = {"User-Agent": f"kimicode/{__version__} (web_search)", "Accept": "application/json"}
    async with httpx2.AsyncClient(follow_redirects=False, timeout=timeout, trust_env=True) as client:
        try:
            response = await client.request(method, url, headers={**agent, **headers}, json=body, params=params)
        except httpx2.TimeoutException:
            raise ToolError(f"the search provider did not answer within {timeout:g} s") from None
        except httpx2.HTTPError as exc:
            raise ToolError(f"cannot reach the search provider: {type(exc).__name__}: {exc}") from None
    if response.status_code >= 400:
        raise ToolError(f"the search provider answered HTTP {response.status_code}: {response.text[:200]}")
    try:
        return response.json()
    except ValueError:
        raise ToolError("the search provider's answer is not JSON") from None


def render(page: Fetched, max_chars: int, spill_dir: Path | None = None) -> ToolResult:
    """The model's view of a fetched page; a text cut at `max_chars` is saved whole under `spill_dir`."""
    ctype = page.content_type.split(";")[0].strip().lower()
    if ctype and not ctype.startswith(TEXT_TYPES) and not ctype.endswith(("+json", "+xml")):
        raise ToolError(
            f"{page.url} returned {ctype} ({len(page.body):,} bytes{'+' if page.truncated else ''}), which is not "
            "text; web_fetch returns text only"
        )
    text = page.body.decode(_charset(page.content_type, page.body), errors="replace")
    title = ""
    if ctype in ("text/html", "application/xhtml+xml") or (not ctype and "<html" in text[:2000].lower()):
        title, text = html_to_text(text, page.url)
    head = [f"URL: {page.url}"]
    if page.redirects:
        head.append(f"(redirected {len(page.redirects)} time{'s' if len(page.redirects) != 1 else ''})")
    if title:
        head.append(f"Title: {title}")
    if page.status >= 400:
        head.append(f"HTTP status: {page.status}")
    notes: list[str] = []
    if len(text) > max_chars:
        saved = save_spill(text, spill_dir, "web_fetch")
        where = (
            f"; the whole text is saved at {saved.path}: use read_file with offset/limit (it continues at line "
            f"{text.count(chr(10), 0, max_chars) + 1:,}) or grep on it{saved.dropped_note()}"
            if saved.path is not None
            else f"; the rest was not saved: {saved.reason}"
        )
        notes.append(f"[… cut: showing the first {max_chars:,} of {len(text):,} characters{where}]")
        text = text[:max_chars]
    elif page.truncated:
        notes.append(f"[… cut: the page is larger than {MAX_BYTES:,} bytes; only the start was read]")
    content = "\n".join(head) + "\n\n" + (text or "(the page has no text)")
    if notes:
        content += "\n\n" + "\n".join(notes)
    error = page.status >= 400
    return ToolResult(
        content=content,
        is_error=error,
        summary=f"fetch {page.url} ({page.status}, {len(text):,} chars)",
        display={"url": page.url, "status": page.status, "title": title},
    )


def web_fetch_tool(
    max_chars: int = DEFAULT_MAX_CHARS, max_redirects: int = DEFAULT_MAX_REDIRECTS, timeout: float = DEFAULT_TIMEOUT
) -> Tool:
    """The web_fetch tool with these limits (`[web_fetch]` in the configuration)."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        url = args.get("url")
        if not isinstance(url, str) or not url.strip():
            raise ToolError("url is empty; give an http(s) URL")
        page = await fetch(check_url(url), max_redirects, timeout)
        return render(page, max_chars, ctx.session_dir)

    return Tool(
        name="web_fetch",
        description=load_prompt("tools/web_fetch.md"),
        parameters={
            "type": "object",
            "properties": {"url": {"type": "string", "description": "The http(s) URL to fetch."}},
            "required": ["url"],
            "additionalProperties": False,
        },
        fn=run,
        kind="execute",
    )


WEB_FETCH = web_fetch_tool()
