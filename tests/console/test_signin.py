"""Signing in to the console: an admin key only, kept in the tab's session storage alone."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.conftest import Console, Org, off_loop


def test_sign_in_with_an_admin_key_only(console: Console, org: Org) -> None:
    page = console.page
    console.open()
    console.shot("signin")
    application = off_loop(console.server.create_key, org=org.slug)
    for wrong, message in ((application, "not an admin key"), ("ak_nope:nothing", "not accepted")):
        page.fill("#signin-key", wrong)
        page.click("#signin-form button[type=submit]")
        expect(page.locator("#signin-form .error")).to_contain_text(message)
        expect(page.locator("#org-slug")).to_have_count(0)

    console.sign_in(org.admin, org.slug)
    expect(page.locator("#page-usage")).to_be_visible()
    assert page.evaluate("() => sessionStorage.getItem('inferd.console.key')") == org.admin
    assert page.evaluate("() => localStorage.length") == 0
    assert org.admin not in page.evaluate("() => document.cookie")

    # A reload keeps the session (same tab); a new tab of a new context does not.
    page.reload()
    expect(page.locator("#org-slug")).to_have_text(org.slug)
    page.click("#sign-out")
    expect(page.locator("#signin-form")).to_be_visible()
    assert page.evaluate("() => sessionStorage.length") == 0
