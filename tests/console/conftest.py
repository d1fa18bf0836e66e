"""The web console in a real browser: Debian's Chromium (installed by `make install`), headless,
driven by Playwright for Python (it never downloads a browser), against `inferd serve` on
loopback with its batch worker, on a database of its own.

Screenshots of every page go to a temporary folder, or to the folder INFERD_CONSOLE_SCREENSHOTS
names (`INFERD_CONSOLE_SCREENSHOTS=docs/console` refreshes the README's pictures)."""

from __future__ import annotations

import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from tests.harness import Backend, Server, Upstream, auth, pg_create_database, pg_drop_database, write_config

T = TypeVar("T")


def off_loop(work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run `work` in a thread of its own: Playwright's sync API keeps an event loop running in this
    one, and the harness's database helpers call asyncio.run()."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(work, *args, **kwargs).result()


CONSOLE_TOML = """
[batches]
window_seconds = 600
retention_seconds = 600
max_concurrency = 1

[[models]]
id = "mock-chat"
base_url = "{upstream}/v1"
upstream_model = "mock"
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-other"
base_url = "{upstream}/v1"
upstream_model = "mock"
cost = {{ input_per_m_token = 3.0, output_per_m_token = 6.0 }}

[[models]]
id = "mock-paced"
base_url = "{upstream}/v1"
upstream_model = "mock-sleep-1"
timeout_s = 10
cost = {{ input_per_m_token = 1.0, output_per_m_token = 2.0 }}

[[models]]
id = "mock-err400"
base_url = "{upstream}/v1"
upstream_model = "mock-error-400"

[[models]]
id = "mock-dead"
deployment = "dead-1"
base_url = "http://127.0.0.1:{dead_port}/v1"
upstream_model = "mock"
cooldown_s = 60
"""


@pytest.fixture(scope="package")
def console_server(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[Server]:
    """`inferd serve` with its batch worker, on a database of its own (its worker runs only these batches)."""
    folder = tmp_path_factory.mktemp("console")
    config = write_config(folder / "inferd.toml", CONSOLE_TOML, upstream)
    url = os.environ.get("INFERD_DATABASE_URL")
    redis_url = os.environ.get("INFERD_REDIS_URL") or None
    prefix = f"inferd:test:{uuid.uuid4().hex[:8]}:"
    pg_name = f"inferd_console_{uuid.uuid4().hex[:10]}" if url and url.startswith("postgres") else None
    database_url = (off_loop(pg_create_database, url, pg_name) if url and pg_name
                    else f"sqlite:///{folder / 'inferd.db'}")
    (folder / "data").mkdir()
    server = Server.start(folder / "data", Backend(database_url, redis_url, prefix), config, batch_worker=True)
    try:
        yield server
    finally:
        server.stop()
        if url and pg_name:
            off_loop(pg_drop_database, url, pg_name)


# Package scope: Playwright's sync API keeps an event loop running on this thread while it is
# started, and the rest of the suite calls asyncio.run() here.
@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless (no Playwright browser download, ever)."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("Chromium is not installed: `make install` installs it (apt-get install chromium)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the pages' screenshots go."""
    chosen = os.environ.get("INFERD_CONSOLE_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass
class Tab:
    """One browser tab on the server, and what it asked of the network and complained of."""

    page: Page
    server: Server
    urls: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    # securitypolicyviolation events; console messages of Chromium's about its CSP, and Alpine's
    # warnings (an attribute expression its CSP build could not evaluate).
    csp_violations: list[str] = field(default_factory=list)
    console_problems: list[str] = field(default_factory=list)
    # URLs a test expects the page to try and its policy to refuse (none unless it says).
    refused: tuple[str, ...] = ()


# Runs in every page before the page's own scripts (Playwright injects it over the DevTools
# protocol, which the page's CSP does not govern) and reports each violation to the test at once.
WATCH_CSP = """document.addEventListener("securitypolicyviolation", (event) => window.inferdCspViolation(
  `${event.effectiveDirective} blocked ${event.blockedURI || "(inline)"} at ${event.sourceFile}:${event.lineNumber}`));"""


def _is_problem(message: ConsoleMessage) -> bool:
    """A console message saying the page broke its CSP, or that Alpine could not evaluate an attribute."""
    return "Content Security Policy" in message.text or "Alpine Expression Error" in message.text


def watch(tab: Tab) -> None:
    """Record on `tab` every request, script error, CSP violation, and CSP or Alpine complaint."""
    tab.page.expose_function("inferdCspViolation", lambda violation: tab.csp_violations.append(violation))
    tab.page.add_init_script(WATCH_CSP)
    tab.page.on("request", lambda request: tab.urls.append(request.url))
    tab.page.on("pageerror", lambda error: tab.page_errors.append(str(error)))
    tab.page.on("console", lambda message: tab.console_problems.append(message.text) if _is_problem(message) else None)


def assert_clean(tab: Tab) -> None:
    """No script error, no CSP violation, no Alpine complaint, nothing asked of any other origin
    (but the URLs in `tab.refused`, which the policy must have refused)."""
    def unexpected(entries: list[str]) -> list[str]:
        return [entry for entry in entries if not any(url in entry for url in tab.refused)]

    assert tab.page_errors == []
    assert unexpected(tab.csp_violations) == []
    assert unexpected(tab.console_problems) == []
    foreign = [u for u in tab.urls if not u.startswith((tab.server.base_url + "/", "data:", "blob:"))]
    assert unexpected(foreign) == [], foreign


@dataclass
class Console(Tab):
    """A tab on the console."""

    screenshots: Path = Path()

    def open(self) -> None:
        """Load /console (no key needed)."""
        self.page.goto(self.server.base_url + "/console")
        expect(self.page.locator("#signin-form")).to_be_visible()

    def sign_in(self, admin_key: str, org: str) -> None:
        """Sign in with an admin key; the org's slug shows in the top bar."""
        self.open()
        self.page.fill("#signin-key", admin_key)
        self.page.click("#signin-form button[type=submit]")
        expect(self.page.locator("#org-slug")).to_have_text(org)

    def go(self, tab: str) -> None:
        """Open a page from the top bar."""
        self.page.click(f"#nav-{tab}")
        expect(self.page.locator(f"#page-{tab}")).to_be_visible()

    def shot(self, name: str) -> None:
        """A screenshot of the whole page as `<name>.png`."""
        self.page.screenshot(path=str(self.screenshots / f"{name}.png"), full_page=True)


@pytest.fixture()
def console(console_server: Server, browser: Browser, screenshots: Path) -> Iterator[Console]:
    """A fresh browser context (its own session storage) on the console; after the test, checks that
    the page raised no script error, broke nothing of its Content-Security-Policy, and asked nothing
    of any other origin."""
    context = browser.new_context(viewport={"width": 1360, "height": 860}, accept_downloads=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=console_server.base_url)
    tab = Console(context.new_page(), console_server, screenshots=screenshots)
    watch(tab)
    try:
        yield tab
    finally:
        context.close()
    assert_clean(tab)


@dataclass
class Org:
    """A fresh org with an admin key."""

    slug: str
    admin: str

    def new_key(self, server: Server, name: str) -> str:
        """An application key of the org, created over the admin API; its full key."""
        response = httpx.post(server.v1 + "/admin/keys", headers=auth(self.admin), timeout=30,
                              json={"type": "application", "name": name})
        assert response.status_code == 201, response.text
        return str(response.json()["full_key"])


@pytest.fixture()
def org(console_server: Server) -> Org:
    """A fresh org and its admin key."""
    slug = f"console-{uuid.uuid4().hex[:8]}"
    return Org(slug, off_loop(console_server.create_key, org=slug, key_type="admin"))


def chat(server: Server, key: str, model: str = "mock-chat", content: str = "hello there") -> httpx.Response:
    """One chat completion with `key`."""
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}]}
    return httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=body, timeout=30)
