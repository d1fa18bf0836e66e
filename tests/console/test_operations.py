"""The batches page (status, progress, files to download) and the deployments page (health)."""

from __future__ import annotations

import orjson
from playwright.sync_api import expect

from tests.batches.conftest import create, request_line, wait_for
from tests.console.conftest import Console, Org, chat


def _lines(path: str) -> list[dict[str, object]]:
    with open(path, "rb") as handle:
        return [orjson.loads(line) for line in handle.read().splitlines() if line.strip()]


def test_batches_progress_and_files(console: Console, org: Org) -> None:
    page, server = console.page, console.server
    app = org.new_key(server, "batch-app")
    done = create(server, app, [request_line("ok-1"), request_line("ok-2"), request_line("bad", model="mock-err400")])
    done = wait_for(server, app, done["id"], ("completed",))
    # Paced lines (one at a time, a second each): the page follows it until it completes.
    running = create(server, app, [request_line(f"slow-{i}", model="mock-paced") for i in range(4)])

    console.sign_in(org.admin, org.slug)
    console.go("batches")
    finished = page.locator(f'#batches-table tr[data-batch-id="{done["id"]}"]')
    expect(finished.locator(".batch-status")).to_have_text("completed")
    expect(finished.locator(".batch-counts")).to_have_text("3 / 3 done, 1 failed")
    assert finished.locator("progress").get_attribute("value") == "3"
    slow = page.locator(f'#batches-table tr[data-batch-id="{running["id"]}"]')
    expect(slow).to_be_visible()
    console.shot("batches")
    expect(slow.locator(".batch-status")).to_have_text("completed", timeout=60_000)
    expect(slow.locator(".batch-counts")).to_have_text("4 / 4 done, 0 failed")

    with page.expect_download() as output:
        finished.locator(".download-output").click()
    assert sorted(line["custom_id"] for line in _lines(output.value.path())) == ["ok-1", "ok-2"]
    with page.expect_download() as errors:
        finished.locator(".download-error").click()
    failed = _lines(errors.value.path())
    assert [line["custom_id"] for line in failed] == ["bad"]
    assert output.value.suggested_filename == f"{done['output_file_id']}-output.jsonl"


def test_deployments_up_and_down(console: Console, org: Org) -> None:
    page, server = console.page, console.server
    app = org.new_key(server, "deploy-app")
    assert chat(server, app, "mock-dead").status_code >= 500  # its deployment goes into a 60 s cooldown
    assert chat(server, app).status_code == 200

    console.sign_in(org.admin, org.slug)
    console.go("deployments")
    dead = page.locator('#deployments-table tr[data-deployment="dead-1"]')
    expect(dead.locator(".deployment-health")).to_have_text("down")
    assert int(dead.locator("td").nth(4).inner_text()) >= 1
    expect(dead.locator("td").nth(5)).to_contain_text("UTC")
    live = page.locator('#deployments-table tr[data-deployment="mock-chat"]')
    expect(live.locator(".deployment-health")).to_have_text("up")
    expect(live.locator("td").nth(4)).to_have_text("0")
    console.shot("deployments")
