"""The teams page and the keys page's governance fields, in Chromium
against the running server: create a team (its budget by day, rpm, tpm, models), see the API's
refusals in the dialog, put keys in it from the keys page (create and edit, with a period and a
tpm), see the team's spend in the period under way and its reset, a zero budget over the whole
time (402 naming the team), a delete refused while a key belongs to the team and done once none
does."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import httpx
from playwright.sync_api import expect

from tests.console.conftest import Console, Org, chat
from tests.harness import auth


def _today() -> date:
    return datetime.now(timezone.utc).date()


def test_teams_page_budgets_and_keys(console: Console, org: Org) -> None:
    page, server = console.page, console.server
    admin = auth(org.admin)
    console.sign_in(org.admin, org.slug)
    console.go("teams")
    expect(page.locator("#teams-table")).to_contain_text("No teams.")

    # Create a team with a daily budget, rpm, tpm and an allow-list.
    page.click("#team-new")
    expect(page.locator("#team-dialog")).to_be_visible()
    page.fill("#team-name", "research")
    page.fill("#team-budget", "5")
    page.select_option("#team-period", "day")
    page.fill("#team-rpm", "60")
    page.fill("#team-tpm", "10000")
    page.fill("#team-models", "mock-chat, mock-other")
    page.click("#team-submit")
    expect(page.locator("#team-dialog")).to_be_hidden()
    row = page.locator('#teams-table tr[data-team="research"]')
    today = _today()
    expect(row.locator(".team-budget")).to_have_text("$5.00 per day")
    expect(row.locator(".team-spend")).to_have_text("$0.00 / $5.00 (0%)")
    expect(row.locator(".team-period")).to_contain_text(f"day from {today.isoformat()},")
    expect(row.locator(".team-reset")).to_have_text(f"resets {(today + timedelta(days=1)).isoformat()}")
    expect(row.locator(".team-rpm")).to_have_text("60")
    expect(row.locator(".team-tpm")).to_have_text("10000")
    expect(row.locator(".team-models")).to_have_text("mock-chat, mock-other")
    stored = httpx.get(server.v1 + "/admin/teams/research", headers=admin, timeout=30).json()
    assert {name: stored[name] for name in ("budget_usd", "budget_period", "rpm", "tpm", "models")} == {
        "budget_usd": 5.0, "budget_period": "day", "rpm": 60, "tpm": 10000, "models": ["mock-chat", "mock-other"]}

    # The API's refusals show in the dialog: a taken name (409), a model the catalogue lacks (400).
    page.click("#team-new")
    page.fill("#team-name", "research")
    page.click("#team-submit")
    refusal = page.locator("#team-dialog .error")
    expect(refusal).to_be_visible()
    expect(refusal).to_contain_text("research")
    page.fill("#team-name", "other")
    page.fill("#team-models", "no-such-model")
    page.click("#team-submit")
    expect(refusal).to_contain_text("no-such-model")
    expect(page.locator("#team-dialog")).to_be_visible()
    page.click("#team-dialog button:has-text('Cancel')")
    expect(page.locator('#teams-table tr[data-team="other"]')).to_have_count(0)
    listed = httpx.get(server.v1 + "/admin/teams", headers=admin, timeout=30).json()["data"]
    assert [team["name"] for team in listed] == ["research"]

    # Keys page: create a key in the team, with a weekly budget and a tpm.
    console.go("keys")
    page.click("#key-new")
    expect(page.locator("#create-team option", has_text="research")).to_have_count(1)
    page.fill("#create-name", "in-research")
    page.select_option("#create-team", "research")
    page.fill("#create-budget", "2")
    page.select_option("#create-period", "week")
    page.fill("#create-tpm", "5000")
    page.click("#create-submit")
    secret = page.locator("#key-secret-value")
    expect(secret).to_contain_text(":")
    full_key = secret.inner_text().strip()
    key_id = full_key.split(":")[0]
    page.click("#key-secret-done")
    key_row = page.locator(f'#keys-table tr[data-key-id="{key_id}"]')
    monday = today - timedelta(days=today.weekday())
    expect(key_row.locator(".key-team")).to_have_text("research")
    expect(key_row.locator(".spend-text")).to_have_text("$0.00 / $2.00")
    expect(key_row.locator(".spend-period")).to_have_text("per week")
    expect(key_row.locator(".spend-reset")).to_have_text(f"resets {(monday + timedelta(days=7)).isoformat()}")
    expect(key_row.locator(".key-tpm")).to_have_text("5000")
    shown = {key["access_key_id"]: key for key in
             httpx.get(server.v1 + "/admin/keys", headers=admin, timeout=30).json()["data"]}[key_id]
    assert (shown["team"], shown["budget_usd"], shown["budget_period"], shown["tpm"]) == ("research", 2.0, "week", 5000)
    assert shown["period_start"] == monday.isoformat()

    # Edit an existing key into the team (and give it a daily budget).
    other = org.new_key(server, "moved-in")
    other_id = other.split(":")[0]
    page.reload()
    other_row = page.locator(f'#keys-table tr[data-key-id="{other_id}"]')
    expect(other_row.locator(".key-team")).to_have_text("—")
    expect(other_row.locator(".spend-period")).to_have_text("per month")
    other_row.locator(".key-edit").click()
    expect(page.locator("#key-edit-dialog")).to_be_visible()
    expect(page.locator("#edit-period")).to_have_value("month")
    page.select_option("#edit-team", "research")
    page.fill("#edit-budget", "1")
    page.select_option("#edit-period", "day")
    page.click("#edit-submit")
    expect(page.locator("#key-edit-dialog")).to_be_hidden()
    expect(other_row.locator(".key-team")).to_have_text("research")
    expect(other_row.locator(".spend-period")).to_have_text("per day")
    expect(other_row.locator(".spend-reset")).to_have_text(f"resets {(today + timedelta(days=1)).isoformat()}")
    # The dialog shows the key's own settings when opened again.
    other_row.locator(".key-edit").click()
    expect(page.locator("#edit-team")).to_have_value("research")
    expect(page.locator("#edit-period")).to_have_value("day")
    page.click("#key-edit-dialog button:has-text('Cancel')")
    console.shot("keys-teams")

    # Calls with the team's keys: its spend in the day under way shows on the teams page.
    assert chat(server, full_key).status_code == 200
    assert chat(server, other).status_code == 200
    console.go("teams")
    expect(row).not_to_have_attribute("data-spend", "0")
    expect(row.locator(".team-spend")).not_to_contain_text("$0.00 /")
    expect(row.locator(".team-spend")).to_contain_text("/ $5.00 (0%)")
    spent = httpx.get(server.v1 + "/admin/teams/research", headers=admin, timeout=30).json()["spend_usd"]
    assert spent > 0
    assert float(row.get_attribute("data-spend") or "nan") == spent
    console.shot("teams")

    # Edit the team: a zero budget over the whole time, and no tpm: the team's keys are refused 402.
    row.locator(".team-edit").click()
    expect(page.locator("#team-dialog")).to_be_visible()
    expect(page.locator("#team-name")).to_be_hidden()
    expect(page.locator("#team-period")).to_have_value("day")
    expect(page.locator("#team-models")).to_have_value("mock-chat, mock-other")
    page.fill("#team-budget", "0")
    page.select_option("#team-period", "total")
    page.fill("#team-tpm", "")
    page.click("#team-submit")
    expect(page.locator("#team-dialog")).to_be_hidden()
    expect(row.locator(".team-budget")).to_have_text("$0.00 in total")
    expect(row.locator(".team-reset")).to_have_text("never resets")
    expect(row.locator(".team-spend")).to_contain_text("over budget")
    expect(row.locator(".team-tpm")).to_have_text("—")
    refused = chat(server, full_key)
    assert refused.status_code == 402, refused.text
    assert "team" in refused.json()["error"]["message"]
    stored = httpx.get(server.v1 + "/admin/teams/research", headers=admin, timeout=30).json()
    assert (stored["budget_usd"], stored["budget_period"], stored["tpm"], stored["rpm"]) == (0.0, "total", None, 60)

    # Delete asks first, and is refused (409, its message shown) while keys belong to the team.
    row.locator(".team-delete").click()
    expect(page.locator("#team-delete-dialog")).to_contain_text("research")
    page.click("#team-delete-confirm")
    expect(page.locator("#team-delete-error")).to_contain_text("still has 2 live key(s)")
    console.shot("teams-delete-refused")
    page.click("#team-delete-cancel")
    expect(page.locator("#team-delete-dialog")).to_be_hidden()
    expect(row).to_have_count(1)
    assert httpx.get(server.v1 + "/admin/teams/research", headers=admin, timeout=30).status_code == 200

    # Move both keys out from the keys page (one to no team, one revoked); then the delete goes through.
    console.go("keys")
    key_row.locator(".key-edit").click()
    page.select_option("#edit-team", "")
    page.click("#edit-submit")
    expect(page.locator("#key-edit-dialog")).to_be_hidden()
    expect(key_row.locator(".key-team")).to_have_text("—")
    other_row.locator(".key-revoke").click()
    page.click("#revoke-confirm")
    expect(other_row.locator(".key-status")).to_contain_text("revoked")
    assert chat(server, full_key).status_code == 200  # out of the team: its zero budget no longer applies

    console.go("teams")
    row.locator(".team-delete").click()
    page.click("#team-delete-confirm")
    expect(page.locator("#team-delete-dialog")).to_be_hidden()
    expect(row).to_have_count(0)
    expect(page.locator("#teams-table")).to_contain_text("No teams.")
    gone = httpx.get(server.v1 + "/admin/teams/research", headers=admin, timeout=30)
    assert gone.status_code == 404, gone.text
