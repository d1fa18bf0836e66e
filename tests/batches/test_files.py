"""/v1/files: upload, retrieve, content, delete, the 64 MiB cap, purposes, org and key isolation."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.batches.conftest import create, jsonl, request_line, stored_bytes, upload
from tests.harness import Server, auth

MIB = 1024 * 1024


def test_upload_get_content_delete(batch_server: Server) -> None:
    key = batch_server.create_key()
    data = jsonl([request_line("a"), request_line("b")])
    uploaded = upload(batch_server, key, data)
    assert uploaded["id"].startswith("file-")
    assert set(uploaded) == {"id", "object", "filename", "bytes", "purpose", "status", "created_at"}
    assert (uploaded["object"], uploaded["filename"], uploaded["bytes"], uploaded["purpose"]) == \
        ("file", "input.jsonl", len(data), "batch")
    assert isinstance(uploaded["created_at"], int)
    got = httpx.get(f"{batch_server.v1}/files/{uploaded['id']}", headers=auth(key)).json()
    assert got == uploaded
    body = httpx.get(f"{batch_server.v1}/files/{uploaded['id']}/content", headers=auth(key))
    assert body.status_code == 200 and body.content == data
    assert stored_bytes(batch_server, uploaded["id"]) == data
    spool = batch_server.data_dir / "files"
    assert not [p for p in spool.iterdir() if p.name.startswith(".upload-") or "inferd-upload" in p.name]

    deleted = httpx.delete(f"{batch_server.v1}/files/{uploaded['id']}", headers=auth(key))
    assert deleted.json() == {"id": uploaded["id"], "object": "file", "deleted": True}
    assert stored_bytes(batch_server, uploaded["id"]) is None
    for path in (f"/files/{uploaded['id']}", f"/files/{uploaded['id']}/content"):
        gone = httpx.get(batch_server.v1 + path, headers=auth(key))
        assert gone.status_code == 404 and gone.json()["error"]["type"] == "not_found_error"
    assert httpx.delete(f"{batch_server.v1}/files/{uploaded['id']}", headers=auth(key)).status_code == 404


def test_upload_refuses_bad_forms(batch_server: Server) -> None:
    key = batch_server.create_key()
    url = batch_server.v1 + "/files"
    wrong = httpx.post(url, headers=auth(key), data={"purpose": "fine-tune"}, files={"file": ("a.jsonl", b"{}\n")})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "purpose"
    missing = httpx.post(url, headers=auth(key), files={"file": ("a.jsonl", b"{}\n")})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "purpose"
    no_file = httpx.post(url, headers=auth(key), data={"purpose": "batch"}, files={"other": ("a", b"x")})
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
    not_multipart = httpx.post(url, headers=auth(key), json={"purpose": "batch"})
    assert not_multipart.status_code == 400
    assert httpx.post(url, data={"purpose": "batch"}, files={"file": ("a", b"x")}).status_code == 401
    assert not [p for p in (batch_server.data_dir / "files").iterdir() if "upload" in p.name]


def test_413_with_declared_length(batch_server: Server) -> None:
    key = batch_server.create_key()
    big = b"x" * (64 * MIB + 1)
    response = httpx.post(batch_server.v1 + "/files", headers=auth(key), data={"purpose": "batch"},
                          files={"file": ("big.jsonl", big)}, timeout=60)
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_413_while_streaming_chunked(batch_server: Server) -> None:
    """No Content-Length: the server counts while streaming and answers 413 past 64 MiB,
    before the client has sent everything (it never reads the whole body)."""
    key = batch_server.create_key()
    parts = urlsplit(batch_server.v1)
    boundary = "inferdboundary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.jsonl\"\r\n"
            "Content-Type: application/jsonl\r\n\r\n").encode()
    request = (f"POST /v1/files HTTP/1.1\r\nHost: {parts.hostname}\r\nAuthorization: Bearer {key}\r\n"
               f"Content-Type: multipart/form-data; boundary={boundary}\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b"y" * MIB
    sent = 0
    reply = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(request + b"%x\r\n" % len(head) + head + b"\r\n")
        sock.settimeout(0.001)
        try:
            while sent < 200 * MIB and b"\r\n\r\n" not in reply:
                try:
                    sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                    sent += len(chunk)
                except (BrokenPipeError, ConnectionResetError, socket.timeout):
                    pass
                try:
                    reply += sock.recv(65536)
                except socket.timeout:
                    pass
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(10)
        while b"\r\n\r\n" not in reply:
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert sent < 100 * MIB  # refused near the cap, not after reading everything
    assert not [p for p in (batch_server.data_dir / "files").iterdir() if "upload" in p.name]


def test_org_isolation(batch_server: Server) -> None:
    owner, stranger = batch_server.create_key(), batch_server.create_key()
    uploaded = upload(batch_server, owner, jsonl([request_line("a")]))
    batch = create(batch_server, owner, [request_line("b")])
    for method, path in (("GET", f"/files/{uploaded['id']}"), ("GET", f"/files/{uploaded['id']}/content"),
                         ("DELETE", f"/files/{uploaded['id']}"), ("GET", f"/batches/{batch['id']}"),
                         ("POST", f"/batches/{batch['id']}/cancel")):
        response = httpx.request(method, batch_server.v1 + path, headers=auth(stranger))
        assert response.status_code == 404, (method, path, response.text)
    listed = httpx.get(batch_server.v1 + "/batches", headers=auth(stranger)).json()
    assert listed["data"] == [] and listed["has_more"] is False
    theirs = httpx.post(batch_server.v1 + "/batches", headers=auth(stranger), json={
        "input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    assert theirs.status_code == 404
    assert httpx.get(f"{batch_server.v1}/files/{uploaded['id']}", headers=auth(owner)).status_code == 200


def test_files_belong_to_their_key(batch_server: Server) -> None:
    """Decision 6: another application key of the org gets 404; the org's admin key sees the file
    (tests/batches/test_ownership.py covers every route)."""
    first = batch_server.create_key(org="shared-org-files")
    second = batch_server.create_key(org="shared-org-files")
    admin = batch_server.create_key(org="shared-org-files", key_type="admin")
    uploaded = upload(batch_server, first, jsonl([request_line("a")]))
    assert httpx.get(f"{batch_server.v1}/files/{uploaded['id']}", headers=auth(second)).status_code == 404
    assert httpx.get(f"{batch_server.v1}/files/{uploaded['id']}", headers=auth(admin)).json() == uploaded


def test_files_live_in_the_store(batch_server: Server) -> None:
    """In the data directory on SQLite; in the database on PostgreSQL, never on the replica's disk."""
    key = batch_server.create_key()
    uploaded = upload(batch_server, key, b"{}\n")
    local = Path(batch_server.data_dir / "files" / f"{uploaded['id']}.jsonl")
    assert local.is_file() != batch_server.backend.database_url.startswith("postgresql")
    assert stored_bytes(batch_server, uploaded["id"]) == b"{}\n"
