"""The keys page: create a key (its secret shown once, copied), use it, change its budget and rpm
(then 402), revoke it after a confirmation (then 401)."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

from tests.console.conftest import Console, Org, chat, off_loop
from tests.harness import auth


def test_create_use_limit_and_revoke_a_key(console: Console, org: Org) -> None:
    page, server = console.page, console.server
    console.sign_in(org.admin, org.slug)
    console.go("keys")
    admin_id = org.admin.split(":")[0]
    expect(page.locator(f'#keys-table tr[data-key-id="{admin_id}"]')).to_contain_text("admin")

    page.click("#key-new")
    page.fill("#create-name", "made-in-the-console")
    page.click("#create-submit")
    secret = page.locator("#key-secret-value")
    expect(secret).to_contain_text(":")
    full_key = secret.inner_text().strip()
    key_id = full_key.split(":")[0]
    page.click("#key-copy")
    expect(page.locator("#key-copy")).to_have_text("Copied")
    assert page.evaluate("() => navigator.clipboard.readText()") == full_key
    row = page.locator(f'#keys-table tr[data-key-id="{key_id}"]')
    expect(row).to_contain_text("made-in-the-console")
    expect(row.locator(".key-status")).to_have_text("active")
    console.shot("keys")

    # The secret is shown once: gone from the page once dismissed, and never listed.
    page.click("#key-secret-done")
    expect(page.locator("#key-secret")).to_be_hidden()
    assert full_key.split(":")[1] not in page.content()
    listed = httpx.get(server.v1 + "/admin/keys", headers=auth(org.admin), timeout=30).text
    assert full_key.split(":")[1] not in listed

    assert chat(server, full_key).status_code == 200
    page.reload()
    expect(row.locator(".spend-text")).not_to_contain_text("$0.00 /")  # this month's spend, now above zero

    # Budget 0 (and an rpm): the next call is refused with 402.
    row.locator(".key-edit").click()
    expect(page.locator("#key-edit-dialog")).to_be_visible()
    page.fill("#edit-budget", "0")
    page.fill("#edit-rpm", "30")
    page.click("#edit-submit")
    expect(page.locator("#key-edit-dialog")).to_be_hidden()
    expect(row.locator(".spend-text")).to_contain_text("/ $0.00")
    expect(row.locator(".key-rpm")).to_have_text("30")
    refused = chat(server, full_key)
    assert refused.status_code == 402, refused.text
    stored = off_loop(server.key_row, full_key)
    assert stored["budget_usd"] == 0 and stored["rpm"] == 30

    # Revoke asks first: cancelling keeps the key.
    row.locator(".key-revoke").click()
    expect(page.locator("#key-revoke-dialog")).to_be_visible()
    expect(page.locator("#key-revoke-dialog")).to_contain_text(key_id)
    console.shot("keys-revoke")
    page.click("#revoke-cancel")
    expect(page.locator("#key-revoke-dialog")).to_be_hidden()
    expect(row.locator(".key-status")).to_have_text("active")
    assert chat(server, full_key).status_code == 402

    row.locator(".key-revoke").click()
    page.click("#revoke-confirm")
    expect(page.locator("#key-revoke-dialog")).to_be_hidden()
    expect(row.locator(".key-status")).to_contain_text("revoked")
    expect(row.locator(".key-revoke")).to_have_count(0)
    gone = chat(server, full_key)
    assert gone.status_code == 401, gone.text
    page.check("#keys-hide-revoked")
    expect(row).to_have_count(0)
