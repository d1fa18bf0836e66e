"""Files and batches belong to the key that created them: another
application key of the org gets 404 and lists nothing of them; an admin key of the org sees and
manages all of them; another org's admin gets 404."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.batches.conftest import create, get, jsonl, request_line, upload, wait_for
from tests.harness import Server, auth

BATCH = {"endpoint": "/v1/chat/completions", "completion_window": "24h"}


def _org_keys(server: Server) -> tuple[str, str, str, str]:
    """Two application keys and an admin key of one org, and another org's admin key."""
    org = f"org-{uuid.uuid4().hex[:8]}"
    return (server.create_key(org=org), server.create_key(org=org), server.create_key(org=org, key_type="admin"),
            server.create_key(key_type="admin"))


def _listed(server: Server, key: str) -> list[str]:
    """Every batch id the key's listing shows, following the `after` cursor."""
    ids: list[str] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"after": after} if after else {})}
        page = httpx.get(server.v1 + "/batches", headers=auth(key), params=params, timeout=30)
        assert page.status_code == 200, page.text
        data = page.json()["data"]
        if not data:
            return ids
        ids += [batch["id"] for batch in data]
        after = data[-1]["id"]


def _status(server: Server, key: str, method: str, path: str, **kwargs: Any) -> int:
    response = httpx.request(method, server.v1 + path, headers=auth(key), timeout=30, **kwargs)
    if response.status_code == 404:
        assert response.json()["error"]["type"] == "not_found_error"
    return response.status_code


def _hidden_from(server: Server, key: str, file_id: str, batch_id: str) -> None:
    """`key` can neither see nor touch the file and the batch."""
    for method, path in (("GET", f"/files/{file_id}"), ("GET", f"/files/{file_id}/content"),
                         ("DELETE", f"/files/{file_id}"), ("GET", f"/batches/{batch_id}"),
                         ("POST", f"/batches/{batch_id}/cancel")):
        assert _status(server, key, method, path) == 404, (method, path)
    assert batch_id not in _listed(server, key)
    refused = httpx.post(server.v1 + "/batches", headers=auth(key), json={"input_file_id": file_id, **BATCH})
    assert refused.status_code == 404 and refused.json()["error"]["param"] == "input_file_id"
    cursor = httpx.get(server.v1 + "/batches", headers=auth(key), params={"after": batch_id})
    assert cursor.status_code == 400 and cursor.json()["error"]["param"] == "after"


def test_files_and_batches_belong_to_their_key(api_server: Server) -> None:
    owner, sibling, admin, outsider = _org_keys(api_server)
    data = jsonl([request_line("own-1"), request_line("own-2")])
    uploaded = upload(api_server, owner, data)
    created = httpx.post(api_server.v1 + "/batches", headers=auth(owner),
                         json={"input_file_id": uploaded["id"], **BATCH})
    assert created.status_code == 200, created.text
    batch_id = created.json()["id"]

    _hidden_from(api_server, sibling, uploaded["id"], batch_id)
    _hidden_from(api_server, outsider, uploaded["id"], batch_id)
    # Nothing the others tried changed anything: the owner still has both.
    assert get(api_server, owner, batch_id)["status"] == "in_progress"
    assert httpx.get(f"{api_server.v1}/files/{uploaded['id']}/content", headers=auth(owner)).content == data
    assert _listed(api_server, owner) == [batch_id]

    # The sibling's own batch is its own; the org's admin key lists every batch of the org.
    sibling_batch = create(api_server, sibling, [request_line("sib")])["id"]
    assert _listed(api_server, owner) == [batch_id]
    assert _listed(api_server, sibling) == [sibling_batch]
    assert _status(api_server, owner, "GET", f"/batches/{sibling_batch}") == 404
    assert set(_listed(api_server, admin)) == {batch_id, sibling_batch}
    assert _listed(api_server, outsider) == []

    # The admin reads the owner's file and batch and may build a batch of its own from the file.
    assert httpx.get(f"{api_server.v1}/files/{uploaded['id']}", headers=auth(admin)).json() == uploaded
    assert httpx.get(f"{api_server.v1}/files/{uploaded['id']}/content", headers=auth(admin)).content == data
    assert get(api_server, admin, batch_id)["input_file_id"] == uploaded["id"]
    admin_batch = httpx.post(api_server.v1 + "/batches", headers=auth(admin),
                             json={"input_file_id": uploaded["id"], **BATCH}).json()["id"]
    assert admin_batch not in _listed(api_server, owner)

    # The admin cancels the owner's batch (no worker runs here: at once); the error file it
    # leaves belongs to the batch's key, so the owner reads it and the sibling does not.
    cancelled = httpx.post(f"{api_server.v1}/batches/{batch_id}/cancel", headers=auth(admin)).json()
    assert cancelled["status"] == "cancelled"
    assert get(api_server, owner, batch_id)["status"] == "cancelled"
    error_file = cancelled["error_file_id"]
    assert error_file is not None
    assert _status(api_server, owner, "GET", f"/files/{error_file}/content") == 200
    assert _status(api_server, admin, "GET", f"/files/{error_file}/content") == 200
    assert _status(api_server, sibling, "GET", f"/files/{error_file}/content") == 404

    # The admin deletes the owner's file: gone for the owner too.
    deleted = httpx.delete(f"{api_server.v1}/files/{uploaded['id']}", headers=auth(admin))
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert _status(api_server, owner, "GET", f"/files/{uploaded['id']}") == 404
    for leftover in (sibling_batch, admin_batch):  # leave nothing for a worker started by a later test
        assert httpx.post(f"{api_server.v1}/batches/{leftover}/cancel",
                          headers=auth(admin)).json()["status"] == "cancelled"


def test_output_files_belong_to_the_batch_key(batch_server: Server) -> None:
    owner, sibling, admin, outsider = _org_keys(batch_server)
    batch = create(batch_server, owner, [request_line("fine"), request_line("broken", model="mock-err400")])
    done = wait_for(batch_server, owner, batch["id"], ("completed",))
    assert done["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
    for file_id in (done["output_file_id"], done["error_file_id"]):
        assert _status(batch_server, owner, "GET", f"/files/{file_id}/content") == 200
        assert _status(batch_server, admin, "GET", f"/files/{file_id}") == 200
        for other in (sibling, outsider):
            assert _status(batch_server, other, "GET", f"/files/{file_id}/content") == 404
            assert _status(batch_server, other, "DELETE", f"/files/{file_id}") == 404
    assert _status(batch_server, owner, "GET", f"/files/{done['output_file_id']}") == 200


def _audit(server: Server, admin: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """The org's audit log as (action, target, actor, details), newest first."""
    page = httpx.get(server.v1 + "/admin/audit", headers=auth(admin), params={"limit": 100}, timeout=30)
    assert page.status_code == 200, page.text
    return [(e["action"], e["target"], e["actor"], e["details"]) for e in page.json()["data"]]


def _cancel(server: Server, key: str, batch_id: str) -> str:
    response = httpx.post(f"{server.v1}/batches/{batch_id}/cancel", headers=auth(key), timeout=30)
    assert response.status_code == 200, response.text
    return str(response.json()["status"])


def _delete(server: Server, key: str, file_id: str) -> None:
    response = httpx.delete(f"{server.v1}/files/{file_id}", headers=auth(key), timeout=30)
    assert response.status_code == 200 and response.json()["deleted"] is True, response.text


def test_an_admin_acting_on_another_keys_batch_or_file_is_audited(api_server: Server) -> None:
    owner, _sibling, admin, outsider = _org_keys(api_server)
    owner_id, admin_id = owner.split(":")[0], admin.split(":")[0]
    # A key cancelling and deleting its own is no administration: no entry, for the admin's own either.
    for key in (owner, admin):
        own = create(api_server, key, [request_line("own")])
        assert _cancel(api_server, key, own["id"]) == "cancelled"
        _delete(api_server, key, own["input_file_id"])
    assert _audit(api_server, admin) == []

    batch = create(api_server, owner, [request_line("theirs-1"), request_line("theirs-2")])
    assert _cancel(api_server, admin, batch["id"]) == "cancelled"
    assert _cancel(api_server, admin, batch["id"]) == "cancelled"  # already cancelled: no second entry
    stored = httpx.get(f"{api_server.v1}/files/{batch['input_file_id']}", headers=auth(owner)).json()
    _delete(api_server, admin, batch["input_file_id"])
    assert _audit(api_server, admin) == [
        ("file.delete", batch["input_file_id"], admin_id,
         {"owner_key_id": owner_id, "filename": stored["filename"], "purpose": "batch", "bytes": stored["bytes"]}),
        ("batch.cancel", batch["id"], admin_id, {"owner_key_id": owner_id})]
    # A refused cancel or delete changes nothing and records nothing; another org's admin sees nothing.
    refused = httpx.post(f"{api_server.v1}/batches/{batch['id']}/cancel", headers=auth(outsider), timeout=30)
    assert refused.status_code == 404
    assert _audit(api_server, outsider) == []
    assert len(_audit(api_server, admin)) == 2
