"""The console under its Content-Security-Policy, which has no 'unsafe-eval' (Alpine's CSP build):
every page and dialog renders without a violation, without an attribute Alpine could not evaluate.
(The `console` fixture checks that after every console test; this one walks everything once, and
shows that a violation would be caught.)"""

from __future__ import annotations

import time

import httpx
from playwright.sync_api import expect

from tests.console.conftest import Console, Org


def test_the_policy_allows_no_eval(console: Console) -> None:
    policy = httpx.get(console.server.base_url + "/console").headers["content-security-policy"]
    directives = {part.split()[0]: part.split()[1:] for part in policy.split(";") if part.strip()}
    assert directives["script-src"] == ["'self'"]
    assert "'unsafe-eval'" not in policy and "'unsafe-inline'" not in policy


def test_every_page_renders_without_a_violation(console: Console, org: Org) -> None:
    page = console.page
    console.sign_in(org.admin, org.slug)
    for tab in ("usage", "keys", "teams", "batches", "deployments"):
        console.go(tab)
    console.go("keys")
    page.click("#key-new")
    expect(page.locator("#key-create-dialog")).to_be_visible()
    page.fill("#create-name", "csp")
    page.fill("#create-budget", "5")
    page.click("#create-submit")
    expect(page.locator("#key-secret")).to_be_visible()
    page.click("#key-secret-done")
    expect(page.locator("#key-secret")).to_be_hidden()
    row = page.locator("#keys-table tbody tr", has_text="csp")
    expect(row.locator("meter")).to_be_visible()
    row.locator(".key-edit").click()
    expect(page.locator("#key-edit-dialog")).to_be_visible()
    page.locator("#key-edit-dialog button", has_text="Cancel").click()
    row.locator(".key-revoke").click()
    expect(page.locator("#key-revoke-dialog")).to_be_visible()
    page.click("#revoke-cancel")
    console.go("teams")
    page.click("#team-new")
    expect(page.locator("#team-dialog")).to_be_visible()
    page.fill("#team-name", "csp-team")
    page.fill("#team-budget", "5")
    page.click("#team-submit")
    team = page.locator('#teams-table tr[data-team="csp-team"]')
    expect(team.locator("meter")).to_be_visible()
    team.locator(".team-edit").click()
    expect(page.locator("#team-dialog")).to_be_visible()
    page.locator("#team-dialog button", has_text="Cancel").click()
    team.locator(".team-delete").click()
    expect(page.locator("#team-delete-dialog")).to_be_visible()
    page.click("#team-delete-cancel")
    console.go("usage")
    page.select_option("#usage-split", "key_id")
    page.select_option("#usage-metric", "requests")
    expect(page.locator("#page-usage h2").first).to_have_text("Requests per day")
    assert console.csp_violations == [] and console.console_problems == [] and console.page_errors == []


def test_a_violation_would_be_caught(console: Console) -> None:
    console.open()
    # An inline script is refused under this policy, and the refusal reaches the test.
    console.page.evaluate("""() => { const script = document.createElement("script");
                                     script.textContent = "window.ran = true"; document.head.append(script); }""")
    deadline = time.monotonic() + 10
    while not console.csp_violations and time.monotonic() < deadline:
        console.page.wait_for_timeout(50)
    assert console.page.evaluate("() => window.ran === undefined")
    assert len(console.csp_violations) == 1 and console.csp_violations[0].startswith("script-src-elem blocked inline")
    console.csp_violations.clear()
    console.console_problems.clear()  # Chromium's own message about the same refusal
