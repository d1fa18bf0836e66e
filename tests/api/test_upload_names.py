"""What a client names in an upload (the file name, the form's field names) is cleaned once, for
every upload route (api/uploads.py): no control characters, at
most 255 characters, never a 500 for it. The transcription's side is in test_audio.py."""

from __future__ import annotations

import httpx

from tests.api.test_audio import _multipart
from tests.harness import Server, auth

LINE = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'


def test_a_batch_files_name_is_stored_and_served_without_control_characters(server: Server, app_key: str) -> None:
    body, headers = _multipart([(b'name="purpose\x00"', b"batch"),
                                (b'name="file"; filename="in\x00put\x7f\x1b\xc2\x9b\n.jsonl"', LINE)])
    created = httpx.post(server.v1 + "/files", content=body, headers={**auth(app_key), **headers}, timeout=30)
    assert created.status_code == 200, created.text
    assert created.json()["filename"] == "input.jsonl"
    file_id = created.json()["id"]
    assert httpx.get(f"{server.v1}/files/{file_id}", headers=auth(app_key), timeout=30).json()["filename"] \
        == "input.jsonl"
    content = httpx.get(f"{server.v1}/files/{file_id}/content", headers=auth(app_key), timeout=30)
    assert content.status_code == 200 and content.content == LINE
    assert content.headers["content-disposition"] == 'attachment; filename="input.jsonl"'


def test_a_long_or_unicode_file_name_is_kept_within_bounds(server: Server, app_key: str) -> None:
    for name, stored in (("x" * 1000 + ".jsonl", "x" * 249 + ".jsonl"), ("y" * 600, "y" * 255),
                         ("données 日本 🗂.jsonl", "données 日本 🗂.jsonl")):
        created = httpx.post(server.v1 + "/files", headers=auth(app_key), data={"purpose": "batch"},
                             files={"file": (name, LINE)}, timeout=30)
        assert created.status_code == 200, created.text
        assert created.json()["filename"] == stored
        content = httpx.get(f"{server.v1}/files/{created.json()['id']}/content", headers=auth(app_key), timeout=30)
        assert content.status_code == 200 and content.content == LINE
