"""A generate turn fails over like a call (every route uses the pool, generate turns
included): the chat model is a pool of two deployments whose first (in round-robin order) is dead,
a fake answering 500 or a closed port; the turn streams the live deployment's reply, stores it,
and its one usage row names the deployment that answered."""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import httpx
import orjson
import pytest

from tests.conversations.conftest import mint_user
from tests.fakes.upstream import REPLY_WORDS
from tests.harness import Backend, Server, auth, free_port
from tests.pools.conftest import Fleet

# Round-robin with equal weights starts on the first deployment, so the turn's first attempt
# meets the dead one (the test checks that it did). No `context_length`: no token count is
# asked before the turn, which would find the dead deployment first. A long cooldown keeps the
# dead one out of every other call once it failed.
GENERATE_POOLS_TOML = """
[[models]]
id = "talk-500"
routing = "round-robin"
upstream_model = "mock"
cooldown_s = 60
[[models.deployments]]
name = "talk-500-broken"
base_url = "{a}/v1"
upstream_model = "mock-error-500"
[[models.deployments]]
name = "talk-500-live"
base_url = "{b}/v1"

[[models]]
id = "talk-closed"
routing = "round-robin"
upstream_model = "mock"
cooldown_s = 60
[[models.deployments]]
name = "talk-closed-dead"
base_url = "http://127.0.0.1:{dead}/v1"
[[models.deployments]]
name = "talk-closed-live"
base_url = "{b}/v1"
"""


@pytest.fixture(scope="module")
def talk_server(tmp_path_factory: pytest.TempPathFactory, backend: Backend, fleet: Fleet) -> Iterator[Server]:
    """A server (no batch worker) whose chat models are pools with a dead first deployment."""
    folder = tmp_path_factory.mktemp("generate-pools")
    config = folder / "inferd.toml"
    config.write_text(GENERATE_POOLS_TOML.format(a=fleet.url("a"), b=fleet.url("b"), dead=free_port()),
                      encoding="utf-8")
    server = Server.start(folder, backend, config)
    try:
        yield server
    finally:
        server.stop()


def frames_of(response: httpx.Response) -> list[Any]:
    """The SSE frames of a finished generate response: JSON objects, or the string "[DONE]"."""
    return [block[6:] if block == "data: [DONE]" else orjson.loads(block[6:])
            for block in response.text.split("\n\n") if block.startswith("data: ")]


def chats_with(fleet: Fleet, name: str, text: str) -> list[dict[str, Any]]:
    """The chat bodies one fake received whose messages contain `text`."""
    return [r["body"] for r in fleet.upstreams[name].requests()
            if r["path"] == "/v1/chat/completions" and text in orjson.dumps(r["body"]["messages"]).decode()]


@pytest.mark.parametrize(("model", "dead", "live"), [
    ("talk-500", "talk-500-broken", "talk-500-live"),
    ("talk-closed", "talk-closed-dead", "talk-closed-live"),
])
def test_a_generate_turn_fails_over_to_the_live_deployment(talk_server: Server, fleet: Fleet, model: str,
                                                           dead: str, live: str) -> None:
    user = mint_user(talk_server, f"org-talk-{uuid.uuid4().hex[:8]}")
    conversation = user.create(title="failover")  # titled: the turn makes no title call of its own
    question = f"are you there {uuid.uuid4().hex[:8]}?"
    message = user.say(conversation["id"], question)
    log_start = len(talk_server.log().splitlines())
    response = httpx.post(f"{talk_server.v1}/conversations/{conversation['id']}/generate", params={"model": model},
                          headers=auth(user.key), json={"conversation_id": conversation["id"],
                                                        "message_id": message["id"]}, timeout=60)
    assert response.status_code == 200, response.text
    frames = frames_of(response)
    assert not any(isinstance(f, dict) and "error" in f for f in frames), frames
    assert frames[0] == {"conversation_id": conversation["id"], "title": "failover"} and frames[-1] == "[DONE]"
    reply = "".join(f["chunk"] for f in frames if isinstance(f, dict) and "chunk" in f and "type" not in f)
    assert reply == " ".join(REPLY_WORDS)
    assert any(isinstance(f, dict) and f.get("type") == "message" for f in frames)

    # The dead deployment was tried first (else nothing failed over), the live one answered.
    if dead == "talk-500-broken":
        assert [body["model"] for body in chats_with(fleet, "a", question)] == ["mock-error-500"]
    else:
        log = talk_server.log().splitlines()[log_start:]
        assert any(f"deployment {dead} of model {model} failed" in line for line in log), log
    assert [body["model"] for body in chats_with(fleet, "b", question)] == ["mock"]

    rows = user.detail(conversation["id"])["messages"]
    assert [(m["role"], m["message"]) for m in rows] == [("user", question), ("assistant", reply)]
    assert rows[1]["model_name"] == model and rows[1]["finish_reason"] == "stop"
    # One usage row for the turn (committed before the stream ended), charged to the key the user
    # key was minted from, naming the deployment that answered.
    usage = talk_server.usage_rows(user.owned_key)
    assert [(r["workspace"], r["model"], r["deployment"], r["status_code"]) for r in usage] == [
        ("conversations", model, live, 200)], usage
    assert usage[0]["completion_tokens"] == len(REPLY_WORDS) and usage[0]["user_id"] == str(user.user_id)
