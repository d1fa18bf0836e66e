"""The keys page's models, per-model limits and expiry, in Chromium
against the running server: edit them on a key and find them stored (GET /v1/admin/keys/{id}) and
obeyed; an edit wider than the key's team shows the server's own message and stores nothing; a key
created with them."""

from __future__ import annotations

import re
from typing import Any

import httpx
from playwright.sync_api import expect

from tests.console.conftest import Console, Org, chat
from tests.harness import Server, auth

GOVERNED = ("name", "team", "rpm", "tpm", "budget_usd", "models", "model_limits", "expires_at")


def _stored(server: Server, org: Org, key_id: str) -> dict[str, Any]:
    """The key as the admin API shows it."""
    response = httpx.get(f"{server.v1}/admin/keys/{key_id}", headers=auth(org.admin), timeout=30)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _team(server: Server, org: Org, name: str, models: list[str]) -> None:
    response = httpx.post(server.v1 + "/admin/teams", headers=auth(org.admin), timeout=30,
                          json={"name": name, "models": models})
    assert response.status_code == 201, response.text


def test_edit_a_keys_models_model_limits_and_expiry(console: Console, org: Org) -> None:
    page, server = console.page, console.server
    full_key = org.new_key(server, "limited")
    key_id = full_key.split(":")[0]
    console.sign_in(org.admin, org.slug)
    console.go("keys")
    row = page.locator(f'#keys-table tr[data-key-id="{key_id}"]')
    expect(row.locator(".key-model-list")).to_have_text("all the organisation's")

    row.locator(".key-edit").click()
    dialog = page.locator("#key-edit-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#edit-models-restrict")).not_to_be_checked()
    expect(dialog.locator(".limit-row")).to_have_count(0)
    expect(page.locator("#edit-expires")).to_have_value("")
    # The boxes list the org's catalogue (GET /v1/models).
    catalogue = httpx.get(server.v1 + "/models", headers=auth(org.admin), timeout=30).json()["data"]
    assert {"mock-chat", "mock-other", "mock-paced"} <= {model["id"] for model in catalogue}
    page.check("#edit-models-restrict")
    expect(dialog.locator("input.model-choice")).to_have_count(len(catalogue))
    dialog.locator('input.model-choice[data-model="mock-chat"]').check()
    dialog.locator('input.model-choice[data-model="mock-other"]').check()
    page.click("#edit-limit-add")
    page.click("#edit-limit-add")
    page.click("#edit-limit-add")  # left empty: ignored
    rows = dialog.locator(".limit-row")
    rows.nth(0).locator(".limit-model").fill("mock-chat")
    rows.nth(0).locator(".limit-rpm").fill("7")
    rows.nth(0).locator(".limit-tpm").fill("700")
    rows.nth(1).locator(".limit-model").fill("mock-other")
    rows.nth(1).locator(".limit-tpm").fill("300")
    page.fill("#edit-expires", "2031-02-03T04:05")
    console.shot("keys-limits-edit")
    page.click("#edit-submit")
    expect(dialog).to_be_hidden()
    expect(row.locator(".key-model-list")).to_have_text("mock-chat, mock-other")
    expect(row.locator(".key-model-limits")).to_have_text("mock-chat: 7 rpm, 700 tpm; mock-other: 300 tpm")
    expect(row.locator(".key-status")).to_have_text("active, expires 2031-02-03 04:05 UTC")

    stored = _stored(server, org, key_id)
    assert stored["models"] == ["mock-chat", "mock-other"]
    assert stored["model_limits"] == {"mock-chat": {"rpm": 7, "tpm": 700}, "mock-other": {"tpm": 300}}
    assert stored["expires_at"] == "2031-02-03T04:05:00Z"
    assert (stored["name"], stored["rpm"], stored["tpm"], stored["team"]) == ("limited", None, None, None)
    # Obeyed: a model left unticked is refused, a ticked one answers.
    refused = chat(server, full_key, model="mock-paced")
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "model_not_allowed"
    assert chat(server, full_key).status_code == 200

    # Opened again, the dialog shows what is stored; then back to every model, one limit, never expiring.
    row.locator(".key-edit").click()
    expect(dialog).to_be_visible()
    expect(page.locator("#edit-models-restrict")).to_be_checked()
    expect(dialog.locator('input.model-choice[data-model="mock-chat"]')).to_be_checked()
    expect(dialog.locator('input.model-choice[data-model="mock-paced"]')).not_to_be_checked()
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator(".limit-model")).to_have_value("mock-chat")
    expect(rows.nth(0).locator(".limit-rpm")).to_have_value("7")
    expect(rows.nth(1).locator(".limit-tpm")).to_have_value("300")
    expect(page.locator("#edit-expires")).to_have_value(re.compile(r"^2031-02-03T04:05(:00)?$"))
    rows.nth(1).locator(".limit-remove").click()
    expect(rows).to_have_count(1)
    page.uncheck("#edit-models-restrict")
    page.click("#edit-never")
    expect(page.locator("#edit-expires")).to_have_value("")
    page.click("#edit-submit")
    expect(dialog).to_be_hidden()
    expect(row.locator(".key-model-list")).to_have_text("all the organisation's")
    expect(row.locator(".key-model-limits")).to_have_text("mock-chat: 7 rpm, 700 tpm")
    expect(row.locator(".key-status")).to_have_text("active")
    stored = _stored(server, org, key_id)
    assert (stored["models"], stored["model_limits"], stored["expires_at"]) == (
        None, {"mock-chat": {"rpm": 7, "tpm": 700}}, None)
    assert chat(server, full_key, model="mock-other").status_code == 200


def test_an_edit_wider_than_the_team_shows_the_servers_message_and_stores_nothing(console: Console, org: Org) -> None:
    page, server = console.page, console.server
    _team(server, org, "narrow", ["mock-chat"])
    created = httpx.post(server.v1 + "/admin/keys", headers=auth(org.admin), timeout=30, json={
        "type": "application", "name": "in-narrow", "team": "narrow", "models": ["mock-chat"], "tpm": 100})
    assert created.status_code == 201, created.text
    key_id = created.json()["access_key_id"]
    before = {name: _stored(server, org, key_id)[name] for name in GOVERNED}
    assert before["models"] == ["mock-chat"] and before["team"] == "narrow"

    console.sign_in(org.admin, org.slug)
    console.go("keys")
    row = page.locator(f'#keys-table tr[data-key-id="{key_id}"]')
    expect(row.locator(".key-model-list")).to_have_text("mock-chat")
    row.locator(".key-edit").click()
    dialog = page.locator("#key-edit-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#edit-models-restrict")).to_be_checked()
    expect(dialog.locator('input.model-choice[data-model="mock-chat"]')).to_be_checked()
    # mock-other is outside the team's models; the same edit also changes the tpm, a limit and the expiry.
    dialog.locator('input.model-choice[data-model="mock-other"]').check()
    page.fill("#edit-tpm", "200")
    page.click("#edit-limit-add")
    dialog.locator(".limit-row .limit-model").fill("mock-chat")
    dialog.locator(".limit-row .limit-rpm").fill("5")
    page.fill("#edit-expires", "2032-01-01T00:00")
    page.click("#edit-submit")

    # The server's own answer to those models, word for word, in the dialog's error.
    answer = httpx.patch(f"{server.v1}/admin/keys/{key_id}", headers=auth(org.admin), timeout=30,
                         json={"models": ["mock-chat", "mock-other"]})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "model_not_allowed"
    message = answer.json()["error"]["message"]
    assert "mock-other" in message and "team 'narrow'" in message
    error = dialog.locator(".error")
    expect(error).to_have_text(message)
    console.shot("keys-limits-refused")
    expect(dialog).to_be_visible()
    assert {name: _stored(server, org, key_id)[name] for name in GOVERNED} == before
    expect(row.locator(".key-model-list")).to_have_text("mock-chat")
    expect(row.locator(".key-tpm")).to_have_text("100")

    # Two rows for one model are refused in the page (the API would keep only one of them): nothing sent.
    dialog.locator('input.model-choice[data-model="mock-other"]').uncheck()
    page.fill("#edit-tpm", "100")
    page.click("#edit-never")
    page.click("#edit-limit-add")
    dialog.locator(".limit-row .limit-model").nth(1).fill("mock-chat")
    dialog.locator(".limit-row .limit-tpm").nth(1).fill("50")
    page.click("#edit-submit")
    expect(error).to_have_text("Per-model limits: mock-chat has two rows")
    expect(dialog).to_be_visible()
    assert {name: _stored(server, org, key_id)[name] for name in GOVERNED} == before

    page.click("#key-edit-dialog button:has-text('Cancel')")
    expect(dialog).to_be_hidden()


def test_create_a_key_with_models_model_limits_and_expiry(console: Console, org: Org) -> None:
    page, server = console.page, console.server
    console.sign_in(org.admin, org.slug)
    console.go("keys")
    page.click("#key-new")
    dialog = page.locator("#key-create-dialog")
    expect(dialog).to_be_visible()
    page.fill("#create-name", "made-limited")
    page.check("#create-models-restrict")
    dialog.locator('input.model-choice[data-model="mock-other"]').check()
    page.click("#create-limit-add")
    dialog.locator(".limit-row .limit-model").fill("mock-other")
    dialog.locator(".limit-row .limit-rpm").fill("2")
    page.fill("#create-expires", "2033-03-04T05:06")
    page.click("#create-submit")
    secret = page.locator("#key-secret-value")
    expect(secret).to_contain_text(":")
    full_key = secret.inner_text().strip()
    key_id = full_key.split(":")[0]
    page.click("#key-secret-done")
    row = page.locator(f'#keys-table tr[data-key-id="{key_id}"]')
    expect(row.locator(".key-model-list")).to_have_text("mock-other")
    expect(row.locator(".key-model-limits")).to_have_text("mock-other: 2 rpm")
    stored = _stored(server, org, key_id)
    assert (stored["models"], stored["model_limits"], stored["expires_at"]) == (
        ["mock-other"], {"mock-other": {"rpm": 2}}, "2033-03-04T05:06:00Z")
    assert chat(server, full_key, model="mock-chat").status_code == 403
    assert chat(server, full_key, model="mock-other").status_code == 200

    # A new key in a team, with a model the team does not allow: the server's refusal, no key made.
    _team(server, org, "narrow", ["mock-chat"])
    page.click("#key-new")
    page.fill("#create-name", "refused")
    page.select_option("#create-team", "narrow")
    page.check("#create-models-restrict")
    dialog.locator('input.model-choice[data-model="mock-other"]').check()
    page.click("#create-submit")
    expect(dialog.locator(".error")).to_contain_text("mock-other not in the models of the team 'narrow'")
    expect(dialog).to_be_visible()
    names = [key["name"] for key in
             httpx.get(server.v1 + "/admin/keys", headers=auth(org.admin), timeout=30).json()["data"]]
    assert "made-limited" in names and "refused" not in names
