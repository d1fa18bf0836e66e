"""`inferd batch submit|list|get|cancel` as a user runs them, against the real server and worker."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.harness import INFERD, Server, clean_env


def line(custom_id: str, model: str = "mock-chat") -> dict[str, object]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": "hi"}]}}


def inferd_batch(server: Server, key: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """`inferd batch ...` with the key in INFERD_API_KEY (as a user would export it)."""
    env = clean_env({"INFERD_API_KEY": key} if key else {})
    return subprocess.run([INFERD, "batch", *args, "--base-url", server.base_url], capture_output=True, text=True,
                          env=env, timeout=90)


def write_jsonl(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in lines), encoding="utf-8")
    return path


def test_submit_wait_downloads_output_and_errors(client_server: Server, batch_key: str, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [line(f"c{i}") for i in range(6)] + [line("x", "mock-err400")])
    out = tmp_path / "out"
    result = inferd_batch(client_server, batch_key, "submit", str(source), "--wait", "--output-dir", str(out),
                          "--poll-interval", "0.05", "--max-interval", "0.2", "-m", "team=cli")
    assert result.returncode == 0, result.stderr + result.stdout
    batch_id = result.stdout.split()[1]
    assert f"batch {batch_id} completed: 6 completed, 1 failed, 7 total" in result.stdout
    outputs = [json.loads(row) for row in (out / f"{batch_id}_output.jsonl").read_text().splitlines()]
    errors = [json.loads(row) for row in (out / f"{batch_id}_errors.jsonl").read_text().splitlines()]
    assert sorted(o["custom_id"] for o in outputs) == [f"c{i}" for i in range(6)]
    assert [e["custom_id"] for e in errors] == ["x"]
    assert "7/7" in result.stderr  # the progress bar's last state: every line accounted for

    shown = inferd_batch(client_server, batch_key, "get", batch_id)
    assert shown.returncode == 0, shown.stderr
    got = json.loads(shown.stdout)
    assert got["id"] == batch_id and got["metadata"] == {"team": "cli"} and got["status"] == "completed"

    listed = inferd_batch(client_server, batch_key, "list", "--limit", "1")
    assert listed.returncode == 0, listed.stderr
    assert batch_id in listed.stdout and "completed" in listed.stdout


def test_submit_without_wait_then_cancel(client_server: Server, batch_key: str, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "slow.jsonl", [line(f"s{i}", "mock-slow") for i in range(10)])
    submitted = inferd_batch(client_server, batch_key, "submit", str(source))
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout.startswith("batch ") and " in_progress " in submitted.stdout
    batch_id = submitted.stdout.split()[1]
    cancelled = inferd_batch(client_server, batch_key, "cancel", batch_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["status"] in ("cancelling", "cancelled")


def test_errors_are_reported_not_raised(client_server: Server, batch_key: str, tmp_path: Path) -> None:
    missing = inferd_batch(client_server, batch_key, "get", "batch_nope")
    assert missing.returncode == 1 and "Error:" in missing.stderr and "404" in missing.stderr
    no_key = inferd_batch(client_server, None, "list")
    assert no_key.returncode == 2 and "--api-key" in no_key.stderr
    wrong_key = inferd_batch(client_server, "IFDKNOPE:nope", "list")
    assert wrong_key.returncode == 1 and "401" in wrong_key.stderr
    bad_file = write_jsonl(tmp_path / "bad.jsonl", [])
    bad_file.write_text("not json\n")
    failed = inferd_batch(client_server, batch_key, "submit", str(bad_file), "--wait", "--poll-interval", "0.05",
                          "--output-dir", str(tmp_path))
    assert failed.returncode == 1 and "ended failed" in failed.stderr
