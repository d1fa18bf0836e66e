"""The client's exception tree: every status to its class, both error envelopes, plain-text bodies."""

from __future__ import annotations

import pytest

import inferd_client as ic
from tests.client.scripted import Reply, ScriptedServer, json_reply

CLASSES = [(400, ic.BadRequestError), (401, ic.AuthenticationError), (402, ic.BudgetExceededError),
           (403, ic.PermissionDeniedError), (404, ic.NotFoundError), (405, ic.MethodNotAllowedError),
           (409, ic.APIError), (413, ic.PayloadTooLargeError), (422, ic.UnprocessableEntityError),
           (429, ic.RateLimitError), (500, ic.InternalServerError), (502, ic.InternalServerError),
           (503, ic.InternalServerError), (504, ic.InternalServerError)]


@pytest.mark.parametrize(("status", "cls"), CLASSES)
def test_status_to_class(scripted: ScriptedServer, status: int, cls: type[ic.APIError]) -> None:
    scripted.answer(json_reply(status, b'{"error": {"message": "m", "type": "t", "code": "c", "param": "p"}}'))
    with ic.Client(scripted.url, "k", max_attempts=1) as client, pytest.raises(ic.APIError) as raised:
        client.models()
    assert type(raised.value) is cls and isinstance(raised.value, ic.InferdClientError)
    error = raised.value
    assert (error.status, error.message, error.type, error.code, error.param) == (status, "m", "t", "c", "p")
    assert str(error) == f"m ({status}, t, c)"


def test_application_envelope(scripted: ScriptedServer) -> None:
    scripted.answer(json_reply(502, b'{"success": false, "message": "application service unreachable"}'),
                    json_reply(403, b'{"success": false, "message": "no", "code": "FEATURE_DISABLED"}'),
                    json_reply(200, b'{"success": false, "message": "query failed"}'))
    with ic.Client(scripted.url, "k", max_attempts=1) as client:
        with pytest.raises(ic.InternalServerError) as down:
            client.list_sources()
        assert down.value.message == "application service unreachable" and down.value.code is None
        with pytest.raises(ic.PermissionDeniedError) as disabled:
            client.vectorize(0, ("a.txt", b"x"))
        assert disabled.value.code == "FEATURE_DISABLED" and disabled.value.type is None
        with pytest.raises(ic.APIError) as failed:  # a 2xx carrying success: false is still a failure
            client.list_conversations()
        assert failed.value.message == "query failed" and failed.value.status == 200


def test_plain_text_and_relayed_bodies(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(500, b"Internal Server Error", {"Content-Type": "text/plain"}),
                    json_reply(400, b'{"error": {"message": "too long", "type": "BadRequestError", "code": 400}}'))
    with ic.Client(scripted.url, "k", max_attempts=1) as client:
        with pytest.raises(ic.InternalServerError) as text:
            client.models()
        assert text.value.message == "Internal Server Error" and text.value.body == "Internal Server Error"
        with pytest.raises(ic.BadRequestError) as relayed:
            client.chat("m", [{"role": "user", "content": "x"}])
        assert relayed.value.code == 400 and isinstance(relayed.value.code, int)
