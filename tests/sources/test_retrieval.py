"""services/retrieval.py `search_sources`: files uploaded through the running server, searched with
the project's own services built in this process on the same database and configuration (the
generate stream calls it this way): cosine ranking, active sources only, per conversation."""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

import httpx
import orjson
import numpy as np
import pytest

from tests.harness import Server
from tests.sources.conftest import User, new_user, upload

DOCUMENTS = {
    "geography.txt": "Zorbania is a small island nation. The capital city of Zorbania is Quillton, a harbour town "
                     "known for its lighthouse.",
    "cooking.md": "# Bread\n\nTo bake sourdough bread you need flour, water, salt and a lively starter. Knead, "
                  "let the dough rise overnight, then bake in a hot oven.",
    "sport.html": "<html><body><p>The cricket team won the final match by six wickets after a long "
                  "afternoon of batting.</p></body></html>",
}


class Searcher:
    """The project's services built once in this process (own event loop), for `search_sources`."""

    def __init__(self, server: Server) -> None:
        from inferd.wiring import build_services
        from inferd.config import Settings

        self.loop = asyncio.new_event_loop()
        settings = Settings.from_env(server.env, config_path=str(server.config), data_dir=str(server.data_dir))
        self.services = self.loop.run_until_complete(build_services(settings))

    def search(self, user: User, conversation_id: int, query: str, top_k: int = 3) -> list[dict[str, Any]]:
        """search_sources with the user's key record."""
        async def go() -> list[dict[str, Any]]:
            key = await self.services.key_lookup.lookup(user.key.split(":")[0])
            assert key is not None
            return await self.services.retriever.search_sources(key, conversation_id, query, top_k)

        return self.loop.run_until_complete(go())

    def close(self) -> None:
        """Close the services and the loop."""
        self.loop.run_until_complete(self.services.close())
        self.loop.close()


@pytest.fixture(scope="module")
def searcher(sources_server: Server) -> Iterator[Searcher]:
    """Services on the sources server's database and configuration."""
    built = Searcher(sources_server)
    try:
        yield built
    finally:
        built.close()


def test_search_ranks_the_answering_passage_first_and_respects_switches(sources_server: Server, alice: User,
                                                                         searcher: Searcher) -> None:
    conversation_id = 0
    ids = {}
    for name, text in DOCUMENTS.items():
        created = upload(alice, name, text.encode(), conversation_id=conversation_id).json()
        conversation_id = created["conversation_id"]
        ids[name] = created["source"]["id"]
    rows_before = len(sources_server.usage_rows(alice.app_key))
    hits = searcher.search(alice, conversation_id, "What is the capital of Zorbania?")
    # The bread and cricket files share no word with the question and are far from it in meaning.
    assert [hit["source_name"] for hit in hits] == ["geography.txt"] and "Quillton" in hits[0]["text"]
    assert set(hits[0]) == {"source_id", "source_name", "chunk_id", "ordinal", "text", "heading", "char_start",
                            "char_end", "score"}
    hits = searcher.search(alice, conversation_id, "the island capital, its bread and cricket matches")
    assert {hit["source_name"] for hit in hits} == set(DOCUMENTS)
    assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"] > 0
    assert searcher.search(alice, conversation_id, "how long should dough rise", top_k=1)[0][
        "source_name"] == "cooking.md"
    rows = sources_server.usage_rows(alice.app_key)[rows_before:]
    assert [(r["workspace"], r["status_code"]) for r in rows] == [("conversations", 200)] * 3  # queries billed
    # A source switched off is never searched.
    httpx.patch(f"{sources_server.v1}/sources/{ids['geography.txt']}", headers=alice.headers,
                json={"is_active": False}).raise_for_status()
    hits = searcher.search(alice, conversation_id, "the island capital, its bread and cricket matches")
    assert {hit["source_name"] for hit in hits} == {"cooking.md", "sport.html"}
    assert searcher.search(alice, conversation_id, "What is the capital of Zorbania?") == []


def test_search_stays_inside_the_conversation(sources_server: Server, alice: User, searcher: Searcher) -> None:
    mine = upload(alice, "lighthouse.txt", b"The lighthouse keeper of Quillton is named Ada.").json()
    bob = new_user(sources_server, alice.app_key)
    other = upload(bob, "other.txt", b"Nothing about keepers here, only tomatoes and basil.").json()
    hits = searcher.search(bob, other["conversation_id"], "Who keeps the lighthouse?")
    assert [hit["source_name"] for hit in hits] == ["other.txt"]
    empty = upload(alice, "empty-conv.txt", b"placeholder").json()
    httpx.patch(f"{sources_server.v1}/sources/{empty['source']['id']}", headers=alice.headers,
                json={"is_active": False}).raise_for_status()
    rows_before = len(sources_server.usage_rows(alice.app_key))
    assert searcher.search(alice, empty["conversation_id"], "anything") == []
    assert len(sources_server.usage_rows(alice.app_key)) == rows_before  # nothing to search, nothing embedded
    assert searcher.search(alice, mine["conversation_id"], "lighthouse keeper")[0]["text"].endswith("Ada.")


def test_rank_orders_by_cosine_and_skips_other_dimensions() -> None:
    from inferd.services.retrieval import rank

    matrix = np.array([[1, 0, 0], [0.6, 0.8, 0], [0, 1, 0], [1, 0, 0]], dtype=np.float32)
    ranked = rank(matrix, [3, 3, 3, 2], np.array([1, 0, 0], dtype=np.float32), 3)
    assert [row for row, _ in ranked] == [0, 1, 2]
    assert ranked[0][1] == 1.0 and abs(ranked[1][1] - 0.6) < 1e-6
    assert rank(matrix, [3, 3, 3, 3], np.array([0, 1, 0], dtype=np.float32), 10)[0][0] == 2
    assert rank(matrix[:0], [], np.array([1, 0, 0], dtype=np.float32), 3) == []


def test_each_chunk_keeps_its_own_vector(sources_server: Server, alice: User, searcher: Searcher) -> None:
    # Chunks of very different lengths are embedded in length order; each must get its own vector back.
    topics = [("volcano", "The volcano Mount Erebor erupted with lava and ash clouds over the valley. " * 11),
              ("violin", "She tuned her violin and played a sonata with the string quartet. " * 3),
              ("tax", "The accountant filed the quarterly tax return and paid the invoices. " * 12),
              ("penguin", "Emperor penguins huddle together on the Antarctic ice to stay warm. ")]
    text = "\n\n".join(paragraph.strip() for _, paragraph in topics)
    created = upload(alice, "mixed.txt", text.encode()).json()
    assert created["total"]["chunks"] >= 3
    for word, _ in topics:
        query = {"volcano": "lava eruption", "violin": "string quartet music", "tax": "accounting invoices",
                 "penguin": "birds on the Antarctic ice"}[word]
        best = searcher.search(alice, created["conversation_id"], query, top_k=1)[0]
        assert word in best["text"].lower(), (word, best["text"][:80])


LOCKER_ITEMS = ["spare fuses", "coils of rope", "welding masks", "paint thinner", "brass hinges", "signal flares",
                "tyre levers", "first aid kits", "cable ties", "torch batteries", "safety boots", "gas canisters"]
LOCKER_CODES = ["QX-4471-B", "QX-4417-B", "QX-4471-D", "QZ-4471-B", "QX-7441-B", "OX-4471-B", "QX-4471-8",
                "QK-4471-B", "QX-1447-B", "QX-4471-E", "XQ-4471-B", "QX-4771-B"]
LOCKERS = "# Depot lockers\n\n" + "\n\n".join(
    f"## Row {n + 1}\n\nLocker {code} on row {n + 1} holds the {item}. The warden checks this locker every "
    f"morning and writes what she finds in the blue log book kept by the depot door, next to the key cabinet."
    for n, (code, item) in enumerate(zip(LOCKER_CODES, LOCKER_ITEMS)))


def test_keyword_search_finds_an_exact_code_that_vectors_miss(sources_server: Server, alice: User,
                                                              searcher: Searcher) -> None:
    from inferd.services.retrieval import rank
    from inferd.store.sources import active_chunk_vectors

    created = upload(alice, "lockers.md", LOCKERS.encode()).json()
    cid = created["conversation_id"]
    assert created["total"]["chunks"] == len(LOCKER_CODES)  # one section, one chunk
    question = "What is kept in locker QX-4471-B?"

    async def vector_only() -> list[int]:
        key = await searcher.services.key_lookup.lookup(alice.key.split(":")[0])
        assert key is not None
        async with searcher.services.db.connect() as conn:
            ids, matrix, dims = await active_chunk_vectors(conn, cid)
        [vector] = await searcher.services.retriever.embed(key, [question])
        return [ids[row] for row, _ in rank(matrix, dims, vector, 3)]

    hits = searcher.search(alice, cid, question, top_k=3)
    assert "QX-4471-B" in hits[0]["text"] and "spare fuses" in hits[0]["text"]
    # The embedder alone ranks a near-identical locker first: the exact code is what words add.
    by_vector = searcher.loop.run_until_complete(vector_only())
    assert by_vector[0] != hits[0]["chunk_id"]


PARTS_HEADER = "| Part | Code | Shelf | Price |"
PARTS = [("Gasket", "GK-12", "A3", "4.50 EUR"), ("Valve", "VL-7", "B1", "19.00 EUR"),
         ("Brass hinge", "BH-40", "C2", "7.25 EUR"), ("Spring", "SP-3", "A1", "0.80 EUR")] + [
    (f"Bolt M{n}", f"BM-{n}", f"D{n % 4 + 1}", f"{n * 0.35:.2f} EUR") for n in range(4, 40)]
PARTS_DOCUMENT = "# Spare parts\n\nEvery part the depot keeps, with its shelf and unit price.\n\n" + "\n".join(
    [PARTS_HEADER, "|---|---|---|---|", *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in PARTS)]) + \
    "\n\nPrices include tax. Order more on Mondays."


def test_a_table_value_keeps_its_column_names(sources_server: Server, alice: User, searcher: Searcher) -> None:
    created = upload(alice, "parts.md", PARTS_DOCUMENT.encode()).json()
    cid = created["conversation_id"]
    assert created["total"]["chunks"] >= 3  # the table spans several chunks
    hits = searcher.search(alice, cid, "What is the price of the brass hinge?", top_k=1)
    assert "| Brass hinge | BH-40 | C2 | 7.25 EUR |" in hits[0]["text"] and PARTS_HEADER in hits[0]["text"]
    late = searcher.search(alice, cid, "Which shelf holds bolt BM-37?", top_k=1)[0]["text"]
    assert "| Bolt M37 | BM-37 | D2 | 12.95 EUR |" in late and late.index(PARTS_HEADER) < late.index("BM-37")
    # What a generate turn gives the model: the row with its column names, its span pointing at the row.
    question = httpx.post(f"{sources_server.v1}/conversations/{cid}/messages", headers=alice.headers,
                          json={"message": "Which shelf holds bolt BM-37?"}, timeout=30).json()["message"]
    response = httpx.post(f"{sources_server.v1}/conversations/{cid}/generate", params={"model": "mock-chat"},
                          headers=alice.headers, json={"message_id": question["id"]}, timeout=60)
    frames = [orjson.loads(block[6:]) for block in response.text.split("\n\n")
              if block.startswith("data: {")]
    [retrieved] = [f for f in frames if f.get("type") == "retrieval"]
    best = retrieved["passages"][0]
    assert "Part: Bolt M37; Code: BM-37; Shelf: D2; Price: 12.95 EUR" in best["text"]
    assert any(PARTS_DOCUMENT[a:b] == "| Bolt M37 | BM-37 | D2 | 12.95 EUR |" for a, b in best["spans"])
