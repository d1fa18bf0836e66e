"""/v1/batches request checks (400/404), listing with the `after` cursor, retrieval."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.batches.conftest import content, create, jsonl, request_line, upload, wait_for
from tests.harness import Server, auth


def _post(server: Server, key: str, body: Any) -> httpx.Response:
    return httpx.post(server.v1 + "/batches", headers=auth(key), json=body, timeout=30)


def test_create_checks(api_server: Server) -> None:
    key = api_server.create_key()
    file_id = upload(api_server, key, jsonl([request_line("a")]))["id"]
    good = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    cases: list[tuple[dict[str, Any], int, str | None]] = [
        ({**good, "endpoint": "/v1/embeddings"}, 400, "endpoint"),
        ({**good, "completion_window": "48h"}, 400, "completion_window"),
        ({**good, "input_file_id": "file-nope"}, 404, "input_file_id"),
        ({k: v for k, v in good.items() if k != "input_file_id"}, 400, "input_file_id"),
        ({k: v for k, v in good.items() if k != "endpoint"}, 400, "endpoint"),
        ({**good, "metadata": {f"k{i}": "v" for i in range(17)}}, 400, "metadata"),
        ({**good, "metadata": {"k" * 65: "v"}}, 400, None),
        ({**good, "metadata": {"k": "v" * 513}}, 400, "metadata.k"),
        ({**good, "metadata": {"k": 1}}, 400, None),
        ({**good, "surprise": True}, 400, "surprise"),
    ]
    for body, status, param in cases:
        response = _post(api_server, key, body)
        assert response.status_code == status, (body, response.text)
        error = response.json()["error"]
        assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
        if param is not None:
            assert error.get("param", "").startswith(param), (body, error)
    malformed = httpx.post(api_server.v1 + "/batches", headers={**auth(key), "Content-Type": "application/json"},
                           content=b"{nope")
    assert malformed.status_code == 400
    assert _post(api_server, key, good).json()["status"] == "in_progress"
    assert httpx.post(api_server.v1 + "/batches", json=good).status_code == 401


def test_output_file_is_not_a_batch_input(batch_server: Server) -> None:
    key = batch_server.create_key()
    batch = create(batch_server, key, [request_line("only")])
    done = wait_for(batch_server, key, batch["id"], ("completed",))
    output = httpx.get(f"{batch_server.v1}/files/{done['output_file_id']}", headers=auth(key)).json()
    assert output["purpose"] == "batch_output"
    response = _post(batch_server, key, {"input_file_id": done["output_file_id"],
                                         "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "input_file_id"


def test_get_and_cancel_unknown(api_server: Server) -> None:
    key = api_server.create_key()
    for method, path in (("GET", "/batches/batch_nope"), ("POST", "/batches/batch_nope/cancel")):
        response = httpx.request(method, api_server.v1 + path, headers=auth(key))
        assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"


def test_list_pages_newest_first(api_server: Server) -> None:
    key = api_server.create_key()
    file_id = upload(api_server, key, jsonl([request_line("a")]))["id"]
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    ids = [_post(api_server, key, body).json()["id"] for _ in range(5)]
    newest_first = list(reversed(ids))
    url = api_server.v1 + "/batches"
    page = httpx.get(url, headers=auth(key), params={"limit": 2}).json()
    assert set(page) == {"object", "data", "first_id", "last_id", "has_more"}
    assert page["object"] == "list" and page["has_more"] is True
    assert [b["id"] for b in page["data"]] == newest_first[:2]
    assert (page["first_id"], page["last_id"]) == (newest_first[0], newest_first[1])
    seen = [b["id"] for b in page["data"]]
    while page["has_more"]:
        page = httpx.get(url, headers=auth(key), params={"limit": 2, "after": page["last_id"]}).json()
        seen += [b["id"] for b in page["data"]]
    assert seen == newest_first
    empty = httpx.get(url, headers=auth(key), params={"after": newest_first[-1]}).json()
    assert empty == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
    default = httpx.get(url, headers=auth(key)).json()
    assert [b["id"] for b in default["data"]] == newest_first and default["has_more"] is False
    for limit in (0, 101, "x"):
        assert httpx.get(url, headers=auth(key), params={"limit": limit}).status_code == 400
    assert httpx.get(url, headers=auth(key), params={"after": "batch_unknown"}).status_code == 400
    full = httpx.get(url, headers=auth(key), params={"limit": 100}).json()
    assert len(full["data"]) == 5


def test_batch_object_shape(api_server: Server) -> None:
    key = api_server.create_key()
    batch = create(api_server, key, [request_line("a")], metadata={"team": "search"})
    assert set(batch) == {"id", "object", "endpoint", "input_file_id", "completion_window", "status",
                          "output_file_id", "error_file_id", "created_at", "expires_at", "request_counts", "errors",
                          "metadata"}
    assert batch["object"] == "batch" and batch["status"] == "in_progress"
    assert batch["endpoint"] == "/v1/chat/completions" and batch["completion_window"] == "24h"
    assert batch["expires_at"] - batch["created_at"] == 600
    assert batch["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
    assert batch["metadata"] == {"team": "search"} and batch["errors"] is None
    assert httpx.get(f"{api_server.v1}/batches/{batch['id']}", headers=auth(key)).json() == batch
    time.sleep(1.5)  # `inferd serve --no-batch-worker` runs no worker: nothing picks the batch up
    assert httpx.get(f"{api_server.v1}/batches/{batch['id']}", headers=auth(key)).json() == batch


def test_cancel_before_any_worker_read_the_file_counts_every_line(api_server: Server) -> None:
    # No worker runs beside api_server: the cancel finds the input unread, yet its lines are the
    # batch's requests; they count in total only and go to the error file as cancelled.
    key = api_server.create_key()
    batch = create(api_server, key, [request_line(f"c{i}") for i in range(3)])
    cancelled = httpx.post(f"{api_server.v1}/batches/{batch['id']}/cancel", headers=auth(key), timeout=30).json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["request_counts"] == {"total": 3, "completed": 0, "failed": 0}
    assert cancelled["output_file_id"] is None
    errors = content(api_server, key, cancelled["error_file_id"])
    assert sorted(line["custom_id"] for line in errors) == ["c0", "c1", "c2"]
    assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}
    assert all(line["response"] is None for line in errors)
