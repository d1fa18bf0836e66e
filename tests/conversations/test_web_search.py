"""`webSearch=true` in generate: the provider is asked (a loopback stand-in speaking SearXNG's JSON API),
its results become passages, a `web_search` frame, a stored tool row and URL citations; an org without
web search, or `webSearch=false`, asks nothing; a provider that fails never fails the turn."""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest

from tests.admin.conftest import cli
from tests.conversations.conftest import GENERATE_TOML, EndUser, mint_user
from tests.conversations.test_generate import frames_of, generate, upload
from tests.fakes.web import FakeWeb
from tests.harness import Backend, Server, Upstream, serving

QUESTION = "What is the return fare of the Heron Valley Railway steam service?"


@pytest.fixture(scope="module")
def web() -> Iterator[FakeWeb]:
    fake = FakeWeb()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def web_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream,
               web: FakeWeb) -> Iterator[Server]:
    """Searches the stand-in and fetches its pages (127.0.0.1 is allowed by name, nothing else is)."""
    table = (f'\n[web_search]\nprovider = "searxng"\nbase_url = "{web.url}"\nmax_results = 2\ntimeout_s = 2\n'
             'fetch_pages = true\nfetch_allow = ["127.0.0.1"]\n')
    with serving(tmp_path_factory.mktemp("web-search"), backend, upstream, GENERATE_TOML + table) as srv:
        yield srv


def searching_user(server: Server, enabled: bool = True) -> EndUser:
    """A user of a fresh org, with web search turned on for the org (`inferd orgs update --web-search`)."""
    user = mint_user(server, f"org-web-{time.monotonic_ns()}")
    if enabled:
        cli(server, "orgs", "update", user.org, "--web-search")
    return user


def ask(user: EndUser, question: str = QUESTION, model: str = "mock-grounded", **query: str) -> list[Any]:
    cid = user.create(title="web")["id"]
    message = user.say(cid, question)
    response = generate(user, cid, message["id"], model, **query)
    assert response.status_code == 200, response.text
    frames = frames_of(response)
    assert frames[-1] == "[DONE]", frames
    return frames


def typed(frames: list[Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if isinstance(f, dict) and f.get("type") == kind]


def answer_of(frames: list[Any]) -> str:
    return "".join(f["chunk"] for f in frames if isinstance(f, dict) and "chunk" in f and "type" not in f)


def test_results_become_passages_frames_rows_and_citations(web_server: Server, web: FakeWeb) -> None:
    web.reset()
    user = searching_user(web_server)
    frames = ask(user, webSearch="true")
    assert web.queries == [("searxng", QUESTION)]
    [searched] = typed(frames, "web_search")
    assert searched["tool_status"] == "ok" and searched["query"] == QUESTION
    assert [r["url"] for r in searched["results"]] == [web.url + "/pages/heron", web.url + "/pages/lark"]
    assert searched["results"][0]["title"] == "Heron Valley Railway: timetable and fares"
    assert searched["results"][0]["snippet"].startswith("Steam trains between Ashby Halt")
    # fetch_pages: the fare is on the page, not in the snippet; the model answered from the page.
    assert "/pages/heron" in web.pages_served
    assert "14 pounds" in answer_of(frames)
    [message] = typed(frames, "message")
    assert [(c["type"], c["url"]) for c in message["citations"]] == [("web", web.url + "/pages/heron")]
    # The stored rows: the tool row keeps the results; the answer's metadata keeps the citation.
    rows = user.detail(searched_conversation(user, frames))["messages"]
    [tool] = [r for r in rows if r["role"] == "tool"]
    assert (tool["tool_name"], tool["tool_status"], tool["id"]) == ("web_search", "ok", searched["message_id"])
    assert tool["metadata"]["web_search"]["results"] == searched["results"]
    assert "secret" not in tool["message"]  # a page's script is not text
    final = [r for r in rows if r["role"] == "assistant"][-1]
    assert final["metadata"]["citations"] == message["citations"]


def searched_conversation(user: EndUser, frames: list[Any]) -> int:
    return int(next(f["conversation_id"] for f in frames if isinstance(f, dict) and "conversation_id" in f))


def test_web_and_document_passages_are_numbered_together(web_server: Server, web: FakeWeb) -> None:
    web.reset()
    user = searching_user(web_server)
    cid = user.create(title="both")["id"]
    upload(user, cid, "Ferry notes. The Lark Island ferry carries at most 40 bicycles on each crossing.")
    message = user.say(cid, "How many bicycles does the Lark Island ferry carry?")
    frames = frames_of(generate(user, cid, message["id"], "mock-grounded", webSearch="true"))
    assert typed(frames, "retrieval") and typed(frames, "web_search")
    assert "40 bicycles" in answer_of(frames)
    [message_frame] = typed(frames, "message")
    [citation] = message_frame["citations"]
    assert citation["index"] == 1 and citation["source_name"] == "notes.txt"  # the document came first


@pytest.mark.parametrize("enabled,flag", [(False, "true"), (True, "false"), (True, None)])
def test_no_search_without_the_org_setting_or_the_flag(web_server: Server, web: FakeWeb, enabled: bool,
                                                      flag: str | None) -> None:
    web.reset()
    user = searching_user(web_server, enabled)
    frames = ask(user, **({"webSearch": flag} if flag else {}))
    assert web.queries == [] and not typed(frames, "web_search")
    assert answer_of(frames) == "The documents do not say."


@pytest.mark.parametrize("mode", ["error", "slow", "garbage"])
def test_a_failing_provider_never_fails_the_turn(web_server: Server, web: FakeWeb, mode: str) -> None:
    web.reset(mode)
    user = searching_user(web_server)
    started = time.monotonic()
    frames = ask(user, webSearch="true")
    assert time.monotonic() - started < 15  # `timeout_s = 2` bounds a provider that never answers
    [searched] = typed(frames, "web_search")
    assert searched["tool_status"] == "error" and searched["results"] == []
    assert searched["error"]["code"] == "web_search_unavailable"
    assert typed(frames, "message")  # the model answered without the web
    rows = user.detail(searched_conversation(user, frames))["messages"]
    [tool] = [r for r in rows if r["role"] == "tool"]
    assert (tool["tool_name"], tool["tool_status"]) == ("web_search", "error")


def test_a_model_with_tools_searches_again(web_server: Server, web: FakeWeb) -> None:
    """Nothing found before the first step: a model with the `tools` capability is offered
    `web_search` and its call is answered with the results."""
    web.reset("empty-first")
    user = searching_user(web_server)
    frames = ask(user, model="mock-agent", webSearch="true")
    assert [q for _, q in web.queries] == [QUESTION, QUESTION]
    [call] = typed(frames, "tool_call")
    assert call["tool_name"] == "web_search"
    [result] = typed(frames, "tool_result")
    assert result["tool_status"] == "ok"
    assert "Heron Valley Railway" in answer_of(frames)


def test_a_redirect_to_a_private_name_is_not_fetched(web_server: Server, web: FakeWeb,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """127.0.0.1 is allowed by name; `localhost` (the same address, reached by a redirect) is not."""
    web.reset()
    port = web.url.rsplit(":", 1)[1]
    monkeypatch.setitem(web.redirects, "/pages/heron", f"http://localhost:{port}/pages/heron")
    user = searching_user(web_server)
    frames = ask(user, webSearch="true")
    assert "/redirect" in web.pages_served and web.pages_served.count("/pages/heron") == 0
    # The page was not read: the model had the snippet only.
    assert "14 pounds" not in answer_of(frames)
