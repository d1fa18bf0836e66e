"""The usage page: the chart by day, split by model or by key, drawn from real calls, and the
totals table beside it, both equal to what /v1/usage/summary reports for the org."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
from playwright.sync_api import expect

from tests.console.conftest import Console, Org, chat, off_loop
from tests.harness import Server, auth
from tests.usage.conftest import store_rows, usage_row

CHART = """() => {
  const chart = Chart.getChart(document.querySelector('#usage-chart'));
  return chart && {labels: chart.data.labels, datasets: chart.data.datasets.map(d => ({label: d.label, data: d.data}))};
}"""


def _chart(console: Console, labels: set[str]) -> dict[str, Any]:
    """The chart's data once its datasets are `labels`."""
    console.page.wait_for_function(
        "labels => { const c = Chart.getChart(document.querySelector('#usage-chart'));"
        " return c && JSON.stringify(c.data.datasets.map(d => d.label).sort()) === JSON.stringify(labels); }",
        arg=sorted(labels))
    return dict(console.page.evaluate(CHART))


def _summary(server: Server, key: str, group_by: str, start: str, end: str, **filters: str) -> list[dict[str, Any]]:
    response = httpx.get(server.v1 + "/usage/summary", headers=auth(key), timeout=30,
                         params={"group_by": group_by, "from": start, "to": end, "limit": 1000, **filters})
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def test_chart_and_totals_show_real_usage(console: Console, org: Org) -> None:
    server = console.server
    search, support = org.new_key(server, "search"), org.new_key(server, "support")
    calls = {(search, "mock-chat"): 3, (search, "mock-other"): 1, (support, "mock-chat"): 2}
    for (key, model), count in calls.items():
        for _ in range(count):
            assert chat(server, key, model).status_code == 200
    # Earlier days, stored through the project's own usage sink, so the chart has a history.
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    history = []
    for days_ago in range(1, 8):
        for key, model, n in ((search, "mock-chat", days_ago % 3 + 1), (support, "mock-other", days_ago % 2 + 1)):
            for _ in range(n):
                row = usage_row(key, now - timedelta(days=days_ago), model=model, cost=0.002 * n)
                history.append({**row, "org": org.slug})
    off_loop(store_rows, server, history)

    console.sign_in(org.admin, org.slug)
    today = now.date()
    start, end = str(today - timedelta(days=29)), str(today + timedelta(days=1))
    data = _chart(console, {"mock-chat", "mock-other"})
    assert data["labels"][0] == start and data["labels"][-1] == str(today) and len(data["labels"]) == 30
    for dataset in data["datasets"]:
        by_day = {row["group_value"]: row["cost_usd"]
                  for row in _summary(server, org.admin, "day", start, end, model=dataset["label"])}
        assert dataset["data"] == [by_day.get(day, 0) for day in data["labels"]]
    # Today's bars are the real calls' rows, priced by the server.
    real = [row for key in (search, support) for row in off_loop(server.usage_rows, key) if row["created_at"].date() == today]
    assert len(real) == 6
    for dataset in data["datasets"]:
        spent = sum(row["cost_usd"] for row in real if row["model"] == dataset["label"])
        assert abs(dataset["data"][-1] - spent) < 1e-9
    # The totals table is the summary by model, and its foot the whole range.
    by_model = _summary(server, org.admin, "model", start, end)
    rows = console.page.locator("#usage-totals tbody tr[data-group]")
    expect(rows).to_have_count(len(by_model))
    for group in by_model:
        row = console.page.locator(f'#usage-totals tr[data-group="{group["group_value"]}"]')
        assert int(row.get_attribute("data-requests") or -1) == group["requests"]
        assert abs(float(row.get_attribute("data-cost") or -1) - group["cost_usd"]) < 1e-9
    foot = console.page.locator("#usage-total")
    assert int(foot.get_attribute("data-requests") or -1) == 6 + len(history)
    console.shot("usage")

    # Requests per day, split by key: today is the calls each key made.
    console.page.select_option("#usage-metric", "requests")
    console.page.select_option("#usage-split", "key_id")
    ids = {key.split(":")[0]: name for key, name in ((search, "search"), (support, "support"))}
    data = _chart(console, {f"{name} ({key_id})" for key_id, name in ids.items()})
    today_requests = {dataset["label"]: dataset["data"][-1] for dataset in data["datasets"]}
    assert today_requests == {f"search ({search.split(':')[0]})": 4, f"support ({support.split(':')[0]})": 2}
    expect(console.page.locator("#usage-totals thead th").first).to_have_text("Key")

    # A range of one past day: only that day's stored rows.
    day = str(today - timedelta(days=2))
    console.page.fill("#usage-from", day)
    console.page.fill("#usage-to", day)
    console.page.click("#usage-apply")
    console.page.wait_for_function(
        "day => { const c = Chart.getChart(document.querySelector('#usage-chart'));"
        " return c && c.data.labels.length === 1 && c.data.labels[0] === day; }", arg=day)
    data = dict(console.page.evaluate(CHART))
    assert sum(dataset["data"][0] for dataset in data["datasets"]) == 2 % 3 + 1 + 2 % 2 + 1


def test_small_groups_are_drawn_as_other(console: Console, org: Org) -> None:
    server = console.server
    keys = [org.new_key(server, f"app-{i}") for i in range(10)]
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    rows = [{**usage_row(key, now - timedelta(days=day), cost=0.001 * (i + 1)), "org": org.slug}
            for i, key in enumerate(keys) for day in (0, 1)]
    off_loop(store_rows, server, rows)

    console.sign_in(org.admin, org.slug)
    console.page.select_option("#usage-split", "key_id")
    largest = {f"app-{i} ({keys[i].split(':')[0]})" for i in range(2, 10)}
    data = _chart(console, largest | {"other"})
    other = next(dataset for dataset in data["datasets"] if dataset["label"] == "other")
    assert abs(other["data"][-1] - 0.003) < 1e-9 and abs(other["data"][-2] - 0.003) < 1e-9
    for day in (-1, -2):
        assert abs(sum(dataset["data"][day] for dataset in data["datasets"]) - 0.055) < 1e-9
    expect(console.page.locator("#usage-totals tbody tr[data-group]")).to_have_count(10)
    expect(console.page.locator("#page-usage")).to_contain_text("The 2 smallest groups are shown together")
