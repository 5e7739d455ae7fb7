"""Network search backends, tested offline on recorded responses."""

import json
from pathlib import Path

import httpx
import pytest
import requests

from reflexa.errors import ConfigError
from reflexa.search import SearchError
from reflexa.search.web import DuckDuckGoSearch, TavilySearch, WikipediaSearch, backend

RECORDED = Path(__file__).parent / "fixtures" / "web"


def test_wikipedia_maps_pages_to_evidence():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=json.loads((RECORDED / "wikipedia.json").read_text()))

    wiki = WikipediaSearch(client=httpx.Client(transport=httpx.MockTransport(handler)))
    hits = wiki.search("Eiffel Tower height", 2)
    assert [h.title for h in hits] == ["Eiffel Tower", "Gustave Eiffel"]
    assert hits[0].source == "https://en.wikipedia.org/wiki/Eiffel_Tower" and "330 metres" in hits[0].snippet
    assert seen[0].url.params["gsrsearch"] == "Eiffel Tower height" and seen[0].url.host == "en.wikipedia.org"


def test_wikipedia_http_error_is_a_search_error():
    wiki = WikipediaSearch(client=httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(503))))
    with pytest.raises(SearchError, match="wikipedia"):
        wiki.search("x", 2)


class Recorded(requests.adapters.BaseAdapter):
    """A requests transport that answers every request with one recorded response."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__()
        self.status, self.body, self.requests = status, body, []

    def send(self, request, **kwargs):
        self.requests.append(request)
        response = requests.Response()
        response.status_code, response._content, response.url = self.status, self.body.encode(), request.url
        response.headers["Content-Type"] = "application/json"
        response.request = request
        return response

    def close(self):
        pass


def tavily_with(status: int, body: str):
    session = requests.Session()
    adapter = Recorded(status, body)
    session.mount("https://", adapter)
    return TavilySearch(api_key="tvly-test", session=session), adapter


def test_tavily_maps_results_to_evidence():
    tavily, adapter = tavily_with(200, (RECORDED / "tavily.json").read_text())
    (hit,) = tavily.search("Eiffel Tower height", 3)
    assert hit.source == "https://en.wikipedia.org/wiki/Eiffel_Tower" and "330 metres" in hit.snippet
    assert json.loads(adapter.requests[0].body)["query"] == "Eiffel Tower height"


def test_tavily_failure_is_a_search_error():
    tavily, _ = tavily_with(432, '{"detail": {"error": "usage limit exceeded"}}')
    with pytest.raises(SearchError, match="tavily"):
        tavily.search("x", 3)


def test_tavily_without_a_key_is_a_config_error(monkeypatch):
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="TAVILY_API_KEY"):
        backend("tavily")


def test_ddgs_maps_rows_to_evidence():
    # ddgs talks HTTP through its own Rust client, which no Python transport can replay: the recorded
    # rows are fed at its `text()` call instead.
    class RecordedDDGS:
        def text(self, query, max_results):
            return json.loads((RECORDED / "ddgs.json").read_text())[:max_results]

    (hit,) = DuckDuckGoSearch(client=RecordedDDGS()).search("Eiffel Tower height", 3)
    assert hit.title.startswith("Eiffel Tower") and "330 metres" in hit.snippet

    class Down:
        def text(self, query, max_results):
            raise RuntimeError("ratelimit")

    with pytest.raises(SearchError, match="ddgs"):
        DuckDuckGoSearch(client=Down()).search("x", 3)


def test_unknown_backend():
    with pytest.raises(ConfigError):
        backend("altavista")
