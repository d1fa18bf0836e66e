"""POST /v1/conversations/{id}/files/vectorize against the running server with the built-in embedder:
every accepted extension, the refusals (.doc, unknown, unreadable, empty, zip bombs, 413), the
duplicate path, the feature flag, billing, and 503 when the embedding engine is unreachable."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid

import httpx
import pytest

from tests.harness import INFERD, Server, auth, clean_env
from tests.sources import documents
from tests.sources.conftest import User, count_rows, new_user, stored_chunks, upload

TEXT_EXTENSIONS = ("txt", "md", "markdown", "log", "json", "jsonl", "ndjson", "geojson", "xml", "yaml", "yml",
                   "sql", "py", "js", "ts", "r", "dat")
SOURCE_ROW_FIELDS = {"id", "source_type", "source_name", "source_config", "handler", "source_description",
                     "created_at", "updated_at", "metadata", "host_identifier", "conversation_id", "is_active",
                     "use_in_tasks", "is_owner", "source_origin"}


def _document(extension: str, phrase: str) -> bytes:
    if extension in TEXT_EXTENSIONS:
        return documents.text_document(extension, phrase)
    if extension in ("html", "htm", "xhtml"):
        return documents.html_document(phrase, "SCRIPTSECRET", xhtml=extension == "xhtml")
    return {"pdf": lambda: documents.pdf_bytes("First line.", phrase),
            "docx": lambda: documents.docx_bytes("Intro paragraph.", phrase),
            "pptx": lambda: documents.pptx_bytes("Slide title", phrase),
            "odt": lambda: documents.odt_bytes("Heading", phrase),
            "odp": lambda: documents.odp_bytes(phrase),
            "rtf": lambda: documents.rtf_bytes(phrase)}[extension]()


@pytest.mark.parametrize("extension", [*TEXT_EXTENSIONS, "html", "htm", "xhtml", "pdf", "docx", "pptx", "odt",
                                       "odp", "rtf"])
def test_every_accepted_extension_is_extracted_and_embedded(sources_server: Server, alice: User,
                                                            extension: str) -> None:
    phrase = f"The marker word is zebra{extension}quartz"
    response = upload(alice, f"Report.{extension.upper() if extension == 'pdf' else extension}",
                      _document(extension, phrase))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["success"] is True and body["conversation_id"] >= 1
    assert body["total"] == {"chunks": 1, "duplicate": False}
    source = body["source"]
    assert set(source) == SOURCE_ROW_FIELDS
    assert source["source_type"] == "vectorized" and source["is_owner"] is True and source["is_active"] is True
    assert source["conversation_id"] == body["conversation_id"]
    assert len(source["source_config"]["sha256"]) == 64
    chunks = stored_chunks(sources_server, source["id"])
    assert len(chunks) == 1 and chunks[0]["dim"] == 384 and len(chunks[0]["embedding"]) == 384 * 4
    assert f"zebra{extension}quartz" in chunks[0]["text"]
    if extension in ("html", "htm", "xhtml"):
        assert "SCRIPTSECRET" not in chunks[0]["text"] and "Heading" in chunks[0]["text"]


@pytest.mark.parametrize(("filename", "data", "code"), [
    ("legacy.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 512, "unsupported_file_type"),
    ("sheet.xlsx", b"PK\x03\x04", "unsupported_file_type"),
    ("picture.png", b"\x89PNG\r\n\x1a\n", "unsupported_file_type"),
    ("no_extension", b"plain words", "unsupported_file_type"),
    ("empty.txt", b"", "no_readable_content"),
    ("blank.md", b"   \n\n\t  \n", "no_readable_content"),
    ("binary.txt", b"\x00\x01\x02\x03binary\x00" * 100, "no_readable_content"),
    ("scripts-only.html", b"<html><script>var a = 1;</script><style>p{}</style></html>", "no_readable_content"),
    ("broken.docx", b"this is not a zip archive", "unreadable_file"),
    ("broken.pdf", b"%PDF-1.4 nonsense", "unreadable_file"),
    ("broken.rtf", b"not rtf at all", "unreadable_file"),
])
def test_refused_files_are_400_in_the_application_envelope(alice: User, filename: str, data: bytes,
                                                           code: str) -> None:
    response = upload(alice, filename, data)
    assert response.status_code == 400, response.text
    assert response.json() == {"success": False, "message": response.json()["message"], "code": code}


def test_doc_message_names_docx(alice: User) -> None:
    response = upload(alice, "old.DOC", b"\xd0\xcf\x11\xe0")
    assert response.status_code == 400 and ".docx" in response.json()["message"]


def test_a_zip_bomb_is_refused_not_expanded(sources_server: Server, alice: User) -> None:
    bomb = documents.zip_bomb("word/document.xml", inflated_mib=64)
    assert len(bomb) < 1024 * 1024  # 64 MiB of zeros in well under 1 MiB
    before = _rss_kib(sources_server.process.pid)
    response = upload(alice, "bomb.docx", bomb)
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "unsafe_archive"
    assert _rss_kib(sources_server.process.pid) - before < 32 * 1024  # nothing was inflated
    crowded = upload(alice, "crowded.odt", documents.crowded_zip(10_001))
    assert crowded.status_code == 400 and crowded.json()["code"] == "unsafe_archive"
    assert "members" in crowded.json()["message"]


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_missing_file_part_and_bad_ids_are_400(sources_server: Server, alice: User) -> None:
    no_file = httpx.post(f"{sources_server.v1}/conversations/0/files/vectorize", headers=alice.headers,
                         files={"other": (None, "x")})
    assert no_file.status_code == 400 and no_file.json()["success"] is False
    for bad in ("abc", "1.5", "x" * 65, "a%20b"):
        response = upload(alice, "a.txt", b"hello", conversation_id=bad)
        assert response.status_code == 400, (bad, response.text)
        assert response.json()["success"] is False
    bad_flag = upload(alice, "a.txt", b"hello", conversation_id=0, ephemeral=None)
    assert bad_flag.status_code == 201
    weird = httpx.post(f"{sources_server.v1}/conversations/0/files/vectorize?ephemeral=maybe",
                       headers=alice.headers, files={"file": ("b.txt", b"hello there")})
    assert weird.status_code == 400 and weird.json()["success"] is False


def test_id_zero_negative_and_unknown_create_conversations_and_known_ids_are_reused(sources_server: Server,
                                                                                    alice: User) -> None:
    created = [upload(alice, f"n{i}.txt", f"note number {i} about owls".encode(), conversation_id=ref).json()
               for i, ref in enumerate((0, -7, 987654321))]
    ids = {body["conversation_id"] for body in created}
    assert len(ids) == 3 and 987654321 not in ids
    target = created[0]["conversation_id"]
    again = upload(alice, "more.txt", b"another note about owls", conversation_id=target)
    assert again.status_code == 201 and again.json()["conversation_id"] == target
    listed = httpx.get(f"{sources_server.v1}/conversations/{target}/sources", headers=alice.headers).json()
    assert listed["total"] == 2 and {row["source_name"] for row in listed["body"]} == {"n0.txt", "more.txt"}
    detail = httpx.get(f"{sources_server.v1}/conversations/{target}", headers=alice.headers).json()["conversation"]
    assert detail["is_ephemeral"] is False and len(detail["sources"]) == 2


def test_someone_elses_conversation_id_gets_a_new_conversation(sources_server: Server, alice: User) -> None:
    theirs = upload(alice, "private.txt", b"alice private plans").json()["conversation_id"]
    bob = new_user(sources_server, alice.app_key)
    mine = upload(bob, "bob.txt", b"bob notes", conversation_id=theirs)
    assert mine.status_code == 201 and mine.json()["conversation_id"] != theirs
    listed = httpx.get(f"{sources_server.v1}/conversations/{theirs}/sources", headers=alice.headers).json()
    assert [row["source_name"] for row in listed["body"]] == ["private.txt"]


def test_the_same_file_again_links_the_existing_source(sources_server: Server, alice: User) -> None:
    data = f"Duplicate detection document {uuid.uuid4().hex}".encode()
    first = upload(alice, "dup.txt", data)
    assert first.status_code == 201
    conversation_id, source_id = first.json()["conversation_id"], first.json()["source"]["id"]
    rows_before = len(sources_server.usage_rows(alice.app_key))
    same_conversation = upload(alice, "renamed.txt", data, conversation_id=conversation_id)
    assert same_conversation.status_code == 200, same_conversation.text
    body = same_conversation.json()
    assert body["total"] == {"chunks": 1, "duplicate": True} and body["source"]["id"] == source_id
    other = upload(alice, "dup.txt", data)
    assert other.status_code == 200 and other.json()["total"]["duplicate"] is True
    assert other.json()["conversation_id"] != conversation_id and other.json()["source"]["id"] == source_id
    assert len(sources_server.usage_rows(alice.app_key)) == rows_before  # no embedding, no charge
    assert count_rows(sources_server, "source_chunks", source_id=source_id) == 1
    everywhere = httpx.get(f"{sources_server.v1}/sources", headers=alice.headers).json()
    linked = [row["conversation_id"] for row in everywhere["body"] if row["id"] == source_id]
    assert sorted(linked) == sorted([conversation_id, other.json()["conversation_id"]])
    # Another user's identical upload is their own new source.
    bob = new_user(sources_server, alice.app_key)
    theirs = upload(bob, "dup.txt", data)
    assert theirs.status_code == 201 and theirs.json()["source"]["id"] != source_id


def test_embedding_is_billed_to_the_parent_key_with_the_user(sources_server: Server, alice: User) -> None:
    response = upload(alice, "billed.md", b"# Billing\n\nEmbedding costs tokens, charged to the parent key.")
    assert response.status_code == 201
    rows = sources_server.usage_rows(alice.app_key)
    assert len(rows) == 1
    row = rows[0]
    user_id = sources_server.key_row(alice.key)["user_id"]
    assert row["workspace"] == "conversations" and row["model"] == "all-minilm-l6-v2"
    assert row["status_code"] == 200 and row["prompt_tokens"] > 5 and row["user_id"] == str(user_id)


def test_a_spent_budget_never_refuses_an_upload(sources_server: Server) -> None:
    """Vectorize is not a metered call (the spec lists no 402 for it): with the
    parent key's budget spent, its user's upload is still embedded, and still charged to it."""
    app_key = sources_server.create_key(budget_usd=0)
    spent = httpx.post(sources_server.v1 + "/chat/completions", headers=auth(app_key), timeout=30,
                       json={"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]})
    assert spent.status_code == 402  # the budget is spent for metered calls
    user = new_user(sources_server, app_key)
    response = upload(user, "spent.md", b"# Spent\n\nThe budget is gone, and the upload is embedded anyway.")
    assert response.status_code == 201, response.text
    rows = sources_server.usage_rows(app_key)
    assert [(r["model"], r["status_code"]) for r in rows] == [("all-minilm-l6-v2", 200)]


def test_user_keys_only(sources_server: Server, alice: User) -> None:
    response = httpx.post(f"{sources_server.v1}/conversations/0/files/vectorize", headers=auth(alice.app_key),
                          files={"file": ("a.txt", b"hello")})
    assert response.status_code == 403
    assert response.json() == {"success": False, "message": response.json()["message"], "code": "user_key_required"}


def test_orgs_without_file_attachments_get_feature_disabled(sources_server: Server) -> None:
    org = f"nofiles-{uuid.uuid4().hex[:6]}"
    env = clean_env({**sources_server.backend.env(), "INFERD_CONFIG": str(sources_server.config),
                     "INFERD_DATA_DIR": str(sources_server.data_dir)})
    created = subprocess.run([INFERD, "orgs", "create", org, "--no-file-attachments"], capture_output=True,
                             text=True, env=env, timeout=60)
    assert created.returncode == 0, created.stderr
    user = new_user(sources_server, sources_server.create_key(org=org))
    response = upload(user, "a.txt", b"some text")
    assert response.status_code == 403
    assert response.json() == {"success": False, "message": response.json()["message"], "code": "FEATURE_DISABLED"}
    assert sources_server.usage_rows(user.app_key) == []


def test_unreachable_embedding_engine_is_503(dead_embedder_server: Server) -> None:
    user = new_user(dead_embedder_server)
    response = upload(user, "a.txt", b"text that cannot be embedded")
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["success"] is False and body["code"] == "embedding_unavailable"
    assert httpx.get(f"{dead_embedder_server.v1}/sources", headers=user.headers).json()["total"] == 0
    listed = httpx.get(f"{dead_embedder_server.v1}/conversations", headers=user.headers).json()
    assert listed["body"] == []  # nothing was created for the failed upload
    rows = dead_embedder_server.usage_rows(user.app_key)
    assert [(r["status_code"], r["model"], r["prompt_tokens"]) for r in rows] == [(503, "dead-embed", 0)]


def test_uploads_over_50_mb_are_413_while_streaming(sources_server: Server, alice: User) -> None:
    host, port = sources_server.base_url.split("//")[1].split(":")
    head = (f"POST /v1/conversations/0/files/vectorize HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {alice.key}\r\nContent-Type: multipart/form-data; boundary=XyZ\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    part = b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n\r\n'
    chunk = b"a" * (1024 * 1024)
    sent = 0
    before = _rss_kib(sources_server.process.pid)
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(head + b"%x\r\n" % len(part) + part + b"\r\n")
        started = time.monotonic()
        try:
            while sent < 80 * 1024 * 1024:  # past 50 MB, unless the server stops us first
                conn.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while b"}" not in answer:
                piece = conn.recv(65536)
                if not piece:
                    break
                answer += piece
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"success":false' in answer
    assert time.monotonic() - started < 30
    assert _rss_kib(sources_server.process.pid) - before < 40 * 1024  # never held in memory
    assert httpx.get(f"{sources_server.v1}/sources", headers=alice.headers).json()["total"] == 0
