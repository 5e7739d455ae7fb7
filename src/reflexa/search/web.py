"""Network search backends (optional extra `web`): Tavily, DuckDuckGo (`ddgs`) and Wikipedia.

Each has a timeout; a missing package or key is a ConfigError with the fix; a failed request is a
SearchError, which the research loop reports as a failed query, never a crash.
"""

from __future__ import annotations

import html
import os
from typing import Any

from ..errors import ConfigError
from .base import Evidence, SearchError

TIMEOUT = 15.0
"""Seconds a search request may take."""


def _require(module: str, extra: str = "web") -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"the {module} package is not installed", hint=f"pip install 'reflexa[{extra}]'") from None


class TavilySearch:
    """Tavily's search API through `tavily-python`; the key comes from $TAVILY_API_KEY."""

    name = "tavily"

    def __init__(self, api_key: str | None = None, *, session: Any = None) -> None:
        tavily = _require("tavily")
        key = api_key or os.environ.get("TAVILY_API_KEY")
        if not key:
            raise ConfigError("TAVILY_API_KEY is not set", hint="export TAVILY_API_KEY=... or use --search local")
        self.client = tavily.TavilyClient(api_key=key, session=session)

    def search(self, query: str, k: int) -> list[Evidence]:
        try:
            data = self.client.search(query, max_results=k, timeout=TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the SDK raises its own and requests' exceptions
            raise SearchError(f"tavily: {exc}") from None
        return [Evidence(r["url"], r["url"], r.get("title") or "", r.get("content") or "",
                         float(r.get("score") or 0.0)) for r in data.get("results", [])[:k]]


class DuckDuckGoSearch:
    """DuckDuckGo (and the other engines `ddgs` aggregates); no key needed."""

    name = "ddgs"

    def __init__(self, client: Any = None) -> None:
        self.client = client or _require("ddgs").DDGS(timeout=int(TIMEOUT))

    def search(self, query: str, k: int) -> list[Evidence]:
        try:
            rows = self.client.text(query, max_results=k)
        except Exception as exc:  # noqa: BLE001 - ddgs raises DDGSException and its transport's errors
            raise SearchError(f"ddgs: {exc}") from None
        return [Evidence(r["href"], r["href"], r.get("title") or "", r.get("body") or "", float(k - i))
                for i, r in enumerate(rows[:k])]


class WikipediaSearch:
    """Wikipedia through the MediaWiki API (httpx): the top pages for a query, with their plain-text intros."""

    name = "wikipedia"

    def __init__(self, *, language: str = "en", client: Any = None) -> None:
        httpx = _require("httpx")
        self.url = f"https://{language}.wikipedia.org/w/api.php"
        self.client = client or httpx.Client(timeout=TIMEOUT, headers={"User-Agent": "reflexa (research loop)"})

    def search(self, query: str, k: int) -> list[Evidence]:
        import httpx

        params = {"action": "query", "format": "json", "generator": "search", "gsrsearch": query, "gsrlimit": k,
                  "prop": "extracts|info", "exintro": 1, "explaintext": 1, "inprop": "url"}
        try:
            response = self.client.get(self.url, params=params)
            response.raise_for_status()
            pages = response.json().get("query", {}).get("pages", {})
        except (httpx.HTTPError, ValueError) as exc:
            raise SearchError(f"wikipedia: {exc}") from None
        ranked = sorted(pages.values(), key=lambda p: p.get("index", 0))[:k]
        return [Evidence(p.get("fullurl", f"https://en.wikipedia.org/?curid={p['pageid']}"),
                         p.get("fullurl", f"https://en.wikipedia.org/?curid={p['pageid']}"), p.get("title") or "",
                         html.unescape(p.get("extract") or ""), float(k - i))  # plain text: "<" is text
                for i, p in enumerate(ranked)]


def backend(name: str) -> Any:
    """A network backend by its CLI name."""
    makers = {"tavily": TavilySearch, "ddgs": DuckDuckGoSearch, "wikipedia": WikipediaSearch}
    if name not in makers:
        raise ConfigError(f"unknown search backend {name!r}", hint="use local, tavily, ddgs or wikipedia")
    return makers[name]()
