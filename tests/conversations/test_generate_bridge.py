"""A question that takes two facts of a document: the first search finds the sentence naming the
office, a second search for that office (the bridge) finds its row of the contacts table, which
shares no word with the question but its column name (the built-in embedder, the real server)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.conversations.conftest import mint_user
from tests.conversations.test_generate import frames_of
from tests.harness import Server, auth

FILLER = [
    "Drivers at Quillbrook Haulage start their shifts at the Ormsby yard and finish them there. A shift lasts "
    "no longer than ten hours, including breaks, and no driver works more than six shifts in a row. Rest "
    "periods between shifts are at least eleven hours. Shift patterns are published four weeks ahead.",
    "Every lorry is inspected before its first journey of the day. The driver walks around the vehicle, checks "
    "the tyres, lights, mirrors and the coupling, and records the check in the cab tablet. A defect that makes "
    "the vehicle unsafe is reported at once and the vehicle is not driven until it has been repaired.",
    "Fuel cards are issued to each driver and may be used only at the stations on the approved list. Receipts "
    "are photographed in the cab tablet on the day of purchase. Lost fuel cards are blocked by calling the card "
    "provider's line, which is printed on the back of every card, at any hour of the day or night.",
    "Loads are secured with straps rated for at least twice the weight they hold. Curtain-sided trailers carry "
    "their straps in the side lockers. The driver signs the loading sheet after checking the load and refuses "
    "any load that cannot be secured. Dangerous goods travel only with drivers who hold the ADR certificate.",
    "Uniforms are provided: two shirts, a fleece, a high-visibility jacket and safety boots each year. Damaged "
    "items are replaced free of charge on return of the damaged item. Drivers keep their uniforms clean and "
    "wear the high-visibility jacket whenever they are outside the cab in a yard or at a customer's site.",
]
OVERTIME = ("Overtime. Hours beyond the rostered shift count as overtime and are paid at one and a half times "
            "the basic rate. Overtime for drivers must be approved in advance by the Fleet Rostering Desk, "
            "which also keeps the record of hours for the tachograph checks. Unapproved overtime is not paid.")
# More of the handbook: each paragraph names the drivers and the company, as the question does, so
# that the question's words rank all of them above the contacts table, which holds none of them.
TOPICS = ["parking at the yard", "mobile phones in the cab", "the annual medical check", "training days",
          "customer sites", "night parking", "ferry crossings", "toll payments", "border paperwork",
          "vehicle cleaning", "accident reports", "speed limiters"]
MORE = [f"Quillbrook drivers and {topic}. The rules for {topic} apply to every Quillbrook driver on every "
        f"route, and a driver who is unsure asks the shift manager before the journey. Breaches of the rules "
        f"for {topic} are recorded and discussed at the next review." for topic in TOPICS]
CONTACTS = """Contacts

| Team | Internal line | Staffed |
|---|---|---|
| Ormsby yard gatehouse | 3101 | around the clock |
| Payroll | 3377 | 08:00 to 16:00 |
| Fleet Rostering Desk | 5582 | 06:00 to 20:00 |
| Vehicle workshop | 3460 | 07:00 to 19:00 |
| Health and safety adviser | 3925 | 09:00 to 17:00 |
"""
DOCUMENT = "Quillbrook Haulage driver handbook\n\n" + "\n\n".join([*FILLER[:3], OVERTIME, *FILLER[3:], *MORE]) \
    + "\n\n" + CONTACTS


@pytest.mark.timeout(300)  # a real model call on a shared CPU (usually a few seconds, over 60 s under load)
def test_the_second_fact_is_found_through_the_name_the_first_one_gives(builtin: Server) -> None:
    user = mint_user(builtin, f"org-{uuid.uuid4().hex[:8]}")
    cid = user.create()["id"]
    uploaded = httpx.post(f"{builtin.v1}/conversations/{cid}/files/vectorize", headers=auth(user.key),
                          files={"file": ("handbook.md", DOCUMENT.encode(), "text/markdown")}, timeout=120)
    assert uploaded.status_code == 201, uploaded.text
    asked = "What is the phone extension of the office that approves overtime for drivers?"
    question = user.say(cid, asked)
    response = httpx.post(f"{builtin.v1}/conversations/{cid}/generate", params={"model": "fast"},
                          headers=auth(user.key), json={"conversation_id": cid, "message_id": question["id"]},
                          timeout=280)
    assert response.status_code == 200, response.text
    frames = frames_of(response)
    assert frames[-1] == "[DONE]", frames[-3:]
    # (A second `retrieval` frame follows when the answer check asks the model again: not tested here.)
    retrieved = next(f for f in frames if isinstance(f, dict) and f.get("type") == "retrieval")
    texts = [passage["text"] for passage in retrieved["passages"]]
    # Both facts reach the model: who approves, and that office's row with its column names.
    assert any("Fleet Rostering Desk" in text and "approved" in text for text in texts), texts
    assert any("Fleet Rostering Desk" in text and "Internal line: 5582" in text for text in texts), texts
    # The second hop is stored with the turn: its query names the bridge.
    tool_row = user.detail(cid)["messages"][1]
    assert tool_row["tool_name"] == "search_sources" and "5582" in tool_row["message"]
    queries = tool_row["metadata"]["retrieval"]["queries"]
    assert queries[0] == asked and any(query.startswith("Fleet Rostering Desk") for query in queries[1:]), queries
